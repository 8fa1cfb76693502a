"""LLaDA sampler with Fast-dLLM: KV cache exactness where it is exact, parallel-decoding rules, batch
invariance with left padding, NFE = forward passes, NaN/Inf logits, parameter validation."""

from __future__ import annotations

import itertools
from types import SimpleNamespace

import pytest
import torch
from pydantic import ValidationError

from dare.components import SpecialTokens
from dare.errors import DareError
from dare.sampling import NonFiniteLogitsError
from dare.testing import LogitsStub, check_parallel_block_steps
from dare_llada.family import LLaDAFamily
from dare_llada.sampler import LLaDASampler, decode, decode_options, denoise_steps

TOKENS = SpecialTokens(mask_id=2, eos_id=1, pad_id=1, eot_id=3, bos_id=0)
FAMILY = LLaDAFamily()
COMBOS = list(itertools.product(("none", "prefix", "dual"), (None, 0.5)))


def tiny(n_layers: int = 2, seed: int = 0):
    """A tiny fp32 LLaDA (d 64) with random non-degenerate weights whose LM head never proposes [MASK]."""
    config = FAMILY.new_config("tiny", {"n_layers": n_layers}, 262, TOKENS)
    torch.manual_seed(seed)
    model = FAMILY.model_class()(config).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.3 * torch.randn_like(p))
        model.model.transformer.ff_out.weight[TOKENS.mask_id] = 0.0  # its logit is 0, below the max of 261 others
    return model


def prompts(n: int = 16, seed: int = 1):
    """``n`` prompts of 2..8 tokens: the rows and the left-padded batch ``(ids, attention_mask)``."""
    g = torch.Generator().manual_seed(seed)
    rows = [torch.randint(4, 250, (int(k),), generator=g) for k in torch.randint(2, 9, (n,), generator=g)]
    return rows, left_pad(rows)


def left_pad(rows):
    width = max(len(r) for r in rows)
    ids = torch.full((len(rows), width), TOKENS.pad_id)
    am = torch.zeros((len(rows), width), dtype=torch.long)
    for i, r in enumerate(rows):
        ids[i, width - len(r) :] = r
        am[i, width - len(r) :] = 1
    return ids, am


def sampler(**kw):
    return LLaDASampler({"gen_length": 16, "block_length": 4, "steps": 16, **kw})


def short_sampler(**kw):
    return LLaDASampler({"gen_length": 8, "block_length": 4, "steps": 8, **kw})


class Counting(torch.nn.Module):
    """Counts forward passes of a wrapped model (every path: full, prefix, dual)."""

    def __init__(self, model):
        super().__init__()
        self.model, self.calls = model, 0

    def forward(self, *args, **kwargs):
        self.calls += 1
        return self.model(*args, **kwargs)


# --------------------------------------------------------------------------- exactness of the cache
@pytest.mark.parametrize("cache", ["prefix", "dual"])
@pytest.mark.parametrize("cfg", [0.0, 1.5])
def test_cache_reproduces_the_uncached_decoder_for_a_one_layer_model(cache, cfg):
    """1 layer: cached keys/values are projections of tokens that do not change inside a block (exact)."""
    model = tiny(n_layers=1)
    _, (ids, am) = prompts(4)
    ref = sampler(cfg_scale=cfg).generate(model, FAMILY, TOKENS, ids, am)
    out = sampler(cfg_scale=cfg, cache=cache).generate(model, FAMILY, TOKENS, ids, am)
    assert torch.equal(out.sequences, ref.sequences)
    assert torch.equal(out.unmask_step, ref.unmask_step)
    assert (out.nfe, out.steps) == (ref.nfe, ref.steps) == (16 * (2 if cfg else 1), 16)


@pytest.mark.parametrize("cache", ["prefix", "dual"])
def test_cache_is_exact_at_refresh_steps_so_one_step_per_block_matches_any_depth(cache):
    model = tiny(n_layers=2)
    _, (ids, am) = prompts(4)
    ref = LLaDASampler({"gen_length": 16, "block_length": 2, "steps": 8}).generate(model, FAMILY, TOKENS, ids, am)
    out = LLaDASampler({"gen_length": 16, "block_length": 2, "steps": 8, "cache": cache}).generate(
        model, FAMILY, TOKENS, ids, am)
    assert torch.equal(out.sequences, ref.sequences) and torch.equal(out.unmask_step, ref.unmask_step)


@pytest.mark.parametrize("window", [(9, 12), (9, 20), (0, 20), (19, 20)])
def test_kv_logits_of_an_unchanged_sequence_equal_the_full_pass_at_any_depth(window):
    model = tiny(n_layers=2)
    _, (ids, am) = prompts(3)
    x = torch.cat([ids, torch.randint(4, 250, (3, 20 - ids.shape[1]))], dim=1)
    full_am = torch.cat([am, torch.ones(3, 20 - am.shape[1], dtype=torch.long)], dim=1)
    s, e = window
    with torch.no_grad():
        full = FAMILY.logits(model, x, full_am)
        _, past = FAMILY.kv_logits(model, x, full_am, None, 0, 20, True)
        part, _ = FAMILY.kv_logits(model, x, full_am, past, s, e, False)
    torch.testing.assert_close(part, full[:, s:e], rtol=1e-5, atol=1e-5)


def test_partial_denoise_with_a_cache_resumes_exactly_for_a_one_layer_model():
    model = tiny(n_layers=1)
    _, (ids, am) = prompts(2)
    smp = sampler(cache="dual")
    ref = smp.generate(model, FAMILY, TOKENS, ids, am)
    state = torch.cat([ids, torch.full((2, 16), TOKENS.mask_id)], dim=1)
    a = smp.partial_denoise(model, FAMILY, TOKENS, state, ids.shape[1], am, (0, 6))
    b = smp.partial_denoise(model, FAMILY, TOKENS, a.sequences, ids.shape[1], am, (6, None))
    assert torch.equal(b.sequences, ref.sequences)
    assert torch.equal(torch.maximum(a.unmask_step, b.unmask_step), ref.unmask_step)


# --------------------------------------------------------------------------- parallel decoding
def _probability_stub(probs: dict[int, float], V: int = 10):
    """Position i proposes token (i % 7) + 3 with probability probs[i] (default 0.15); static logits."""

    def fn(ids):
        B, L = ids.shape
        out = torch.empty(B, L, V)
        for i in range(L):
            p = probs.get(i, 0.15)
            row = torch.full((V,), (1 - p) / (V - 1))
            row[(i % 7) + 3] = p
            out[:, i] = row.log()
        return out

    return LogitsStub(fn)


def test_threshold_commits_the_sure_positions_together_and_one_per_step_otherwise():
    # block 0 = positions 2..5, block 1 = positions 6..9 (prompt of 2)
    stub = _probability_stub({2: 0.9, 3: 0.2, 4: 0.6, 5: 0.3, 9: 0.95})
    x, unmask, nfe = decode(lambda ids, am: stub(ids).logits, torch.tensor([[5, 6]]), None,
                            decode_options(steps=8, gen_length=8, block_length=4, mask_id=TOKENS.mask_id,
                                           threshold=0.5))
    # step 0: {2, 4} >= 0.5; step 1: the most confident left (5); step 2: 3; block 1 (steps from 4): 9, 6, 7, 8
    assert unmask.tolist() == [[0, 2, 0, 1, 5, 6, 7, 4]]
    assert nfe == 7 == stub.calls
    assert x[0, 2:].tolist() == [(i % 7) + 3 for i in range(2, 10)]


def test_factor_rule_commits_the_count_its_bound_allows():
    stub = _probability_stub({2: 0.99, 3: 0.95, 4: 0.9, 5: 0.7, 6: 0.999, 7: 0.999, 8: 0.999, 9: 0.999})
    _, unmask, nfe = decode(lambda ids, am: stub(ids).logits, torch.tensor([[5, 6]]), None,
                            decode_options(steps=8, gen_length=8, block_length=4, mask_id=TOKENS.mask_id, factor=1.0))
    # block 0: (n+1)(1-c_(n)) = 0.02, 0.15, 0.4, 1.5 -> 3 tokens, then the last; block 1: 5 * 0.001 -> all 4
    assert unmask.tolist() == [[0, 0, 0, 1, 4, 4, 4, 4]] and nfe == 3


@pytest.mark.parametrize("cache", ["none", "prefix", "dual"])
@pytest.mark.parametrize("rule", [{"threshold": 0.5}, {"factor": 2.0}])
def test_parallel_steps_commit_at_least_one_token_and_only_inside_the_current_block(cache, rule):
    model = tiny()
    _, (ids, am) = prompts(4)
    out = LLaDASampler({"gen_length": 24, "block_length": 8, "steps": 24, "cache": cache, **rule}).generate(
        model, FAMILY, TOKENS, ids, am)
    assert out.nfe == out.steps
    check_parallel_block_steps(out.unmask_step, 8, out.nfe)  # inside the block, >= 1 token per step
    assert out.nfe < 24  # a random model is sure of some tokens at 0.5


# --------------------------------------------------------------------------- batch invariance
@pytest.mark.parametrize("cache, threshold", COMBOS)
def test_batch_1_4_16_with_left_padding_equals_one_prompt_at_a_time(cache, threshold):
    model = tiny()
    rows, (ids, am) = prompts(16)
    smp = short_sampler(cache=cache, threshold=threshold)
    outs = [smp.generate(model, FAMILY, TOKENS, r[None]) for r in rows]
    alone, alone_steps = torch.cat([o.completions for o in outs]), torch.cat([o.unmask_step for o in outs])
    for size in (4, 16):
        outs = [smp.generate(model, FAMILY, TOKENS, *left_pad(rows[i : i + size])) for i in range(0, 16, size)]
        assert torch.equal(torch.cat([o.completions for o in outs]), alone), f"batch {size}"
        # and the same step numbers: with threshold, block 1's steps no longer wait for the batch's slowest row
        assert torch.equal(torch.cat([o.unmask_step for o in outs]), alone_steps), f"batch {size}"


# --------------------------------------------------------------------------- NFE, NaN, validation
@pytest.mark.parametrize("cache, threshold", COMBOS)
@pytest.mark.parametrize("cfg", [0.0, 1.0])
def test_nfe_is_the_number_of_forward_passes(cache, threshold, cfg):
    model = Counting(tiny())
    _, (ids, am) = prompts(4)
    out = sampler(cache=cache, threshold=threshold, cfg_scale=cfg).generate(model, FAMILY, TOKENS, ids, am)
    assert out.nfe == model.calls * (2 if cfg else 1)  # a CFG pair is one batched call, 2 evaluations


@pytest.mark.parametrize("cache, threshold", COMBOS)
def test_nan_logits_raise_a_clear_error_instead_of_emitting_token_0(cache, threshold):
    model = tiny()
    with torch.no_grad():
        model.model.transformer.blocks[1].ff_out.weight[0, 0] = torch.nan
    with pytest.raises(NonFiniteLogitsError, match=r"non-finite logits at denoising step 0 \(sampler 'llada'\).*diverged"):
        sampler(cache=cache, threshold=threshold).generate(model, FAMILY, TOKENS, *prompts(2)[1])
    bad_later = LogitsStub(lambda ids: torch.full((*ids.shape, 10), torch.nan if (ids == 2).sum() <= 12 else 0.0))
    with pytest.raises(NonFiniteLogitsError, match="at denoising step 4 "):  # 16 masks, 1 per step: step 4 sees 12 masks
        decode(lambda ids, am: bad_later(ids).logits, torch.tensor([[5]]), None,
               decode_options(steps=16, gen_length=16, block_length=4, mask_id=2, threshold=threshold))


@pytest.mark.parametrize(
    "params, message",
    [
        ({"threshold": 0.9, "factor": 1.0}, "at most one of threshold and factor"),
        ({"threshold": 0.9, "remasking": "random"}, "need remasking: low_confidence"),
        ({"threshold": 0.0}, "threshold"),
        ({"threshold": 1.01}, "threshold"),
        ({"factor": -1.0}, "factor"),
        ({"cache": "full"}, "cache"),
    ],
)
def test_params_validation(params, message):
    with pytest.raises(ValidationError, match=message):
        LLaDASampler.Params(**{"gen_length": 16, "block_length": 4, "steps": 16, **params})


def test_a_cache_needs_a_family_with_a_cached_forward():
    class NoCacheFamily(LLaDAFamily):
        name = "nocache"
        kv_logits = None

    smp = sampler(cache="dual")
    problems = smp.check(SimpleNamespace(family=NoCacheFamily()), "sampler")
    assert problems == [("sampler.params.cache", problems[0][1])] and "kv_logits" in problems[0][1]
    assert smp.check(SimpleNamespace(family=FAMILY), "sampler") == []
    with pytest.raises(DareError, match="cache: none"):
        smp.generate(tiny(), NoCacheFamily(), TOKENS, torch.tensor([[5, 6]]))
    with pytest.raises(DareError, match="threshold/factor"):
        sampler(threshold=0.9).partial_denoise(tiny(), FAMILY, TOKENS, torch.full((1, 18), 2), 2)


def test_denoise_steps_refuses_an_unknown_cache():
    with pytest.raises(ValueError, match="cache must be one of"):
        denoise_steps(lambda ids, am: None, torch.full((1, 6), 2), 2, None,
                      decode_options(steps=4, gen_length=4, block_length=4, cache="full"))


# --------------------------------------------------------------------------- per-row generators
@pytest.mark.parametrize("params", [
    {},
    {"remasking": "random"},
    {"cache": "dual"},
    {"threshold": 0.5},
    {"cache": "dual", "threshold": 0.9},
    {"cfg_scale": 1.0},
])
def test_sampled_batch_of_4_equals_the_rows_decoded_alone_with_keyed_row_generators(params):
    """Temperature 1: each row draws from its own keyed generator over its completion only, so a row's
    sample depends neither on the other rows nor on the batch's padded prompt length."""
    from dare.testing import decode_batched_and_alone

    smp = sampler(temperature=1.0, **params)
    assert LLaDASampler.supports_row_generators
    rows = prompts(4, seed=3)[0]
    assert len({len(r) for r in rows}) > 1  # left padding differs between rows
    batched, alone = decode_batched_and_alone(smp, tiny(), FAMILY, TOKENS, rows, seed=0)
    for i, one in enumerate(alone):
        assert torch.equal(batched.completions[i], one.completions[0]), i
        # threshold decoding numbers steps per block (nb * block_length + i), not by the batch's forward passes
        assert torch.equal(batched.unmask_step[i], one.unmask_step[0]), i
    other, _ = decode_batched_and_alone(smp, tiny(), FAMILY, TOKENS, rows[:1], seed=1)
    assert not torch.equal(other.completions[0], batched.completions[0])  # the draws are keyed by the seed
