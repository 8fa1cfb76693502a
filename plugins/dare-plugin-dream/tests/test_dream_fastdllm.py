"""Dream sampler with Fast-dLLM (block decoding, KV cache, parallel decoding), per-row schedules (batch
invariance), generation defaults (top_k), NFE = forward passes, NaN/Inf logits."""

from __future__ import annotations

import itertools
import math
from types import SimpleNamespace

import pytest
import torch

from dare.components import SpecialTokens
from dare.errors import DareError
from dare.sampling import NonFiniteLogitsError
from dare.testing import LogitsStub, check_parallel_block_steps
from dare_dream import DreamConfig, DreamModel
from dare_dream.family import DreamFamily
from dare_dream.sampler import (
    RELEASE_CONFIG_DEFAULTS,
    DreamSampler,
    DreamSamplerError,
    decode,
    decode_options,
    diffusion_generate,
    sample_tokens,
)
from dream_helpers import TINY

MASK = 250
TOKENS = SpecialTokens(mask_id=MASK, eos_id=1, pad_id=1)
FAMILY = DreamFamily()
COMBOS = list(itertools.product(("none", "prefix", "dual"), (None, 0.5)))
CONFIDENCE_ALGS = ("maskgit_plus", "topk_margin", "entropy")


def tiny(num_hidden_layers: int = 2, seed: int = 0):
    """A tiny fp32 Dream with random non-degenerate weights whose LM head never proposes the mask token."""
    torch.manual_seed(seed)
    model = DreamModel(DreamConfig(**{**TINY, "num_hidden_layers": num_hidden_layers})).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.3 * torch.randn_like(p))
        model.lm_head.weight[MASK] = 0.0
    return model


def left_pad(rows):
    width = max(len(r) for r in rows)
    ids = torch.full((len(rows), width), TOKENS.pad_id)
    am = torch.zeros((len(rows), width), dtype=torch.long)
    for i, r in enumerate(rows):
        ids[i, width - len(r) :] = r
        am[i, width - len(r) :] = 1
    return ids, am


def prompts(n: int = 16, seed: int = 1):
    g = torch.Generator().manual_seed(seed)
    rows = [torch.randint(3, 240, (int(k),), generator=g) for k in torch.randint(2, 9, (n,), generator=g)]
    return rows, left_pad(rows)


def dream(**kw):
    return DreamSampler({"gen_length": 16, "steps": 16, **kw})


class Counting(torch.nn.Module):
    def __init__(self, model):
        super().__init__()
        self.model, self.calls = model, 0
        self.config = model.config

    def forward(self, *args, **kwargs):
        self.calls += 1
        return self.model(*args, **kwargs)


# --------------------------------------------------------------------------- block decoding and the cache
def test_one_block_is_the_release_decoder():
    model = tiny()
    _, (ids, am) = prompts(4)
    a = dream(alg="entropy").generate(model, FAMILY, TOKENS, ids, am)
    b = dream(alg="entropy", block_length=16).generate(model, FAMILY, TOKENS, ids, am)
    assert torch.equal(a.sequences, b.sequences) and torch.equal(a.unmask_step, b.unmask_step)


def test_blocks_commit_left_to_right_with_the_schedule_inside_each_block():
    model = tiny()
    _, (ids, am) = prompts(4)
    out = dream(alg="maskgit_plus", block_length=4, steps=8).generate(model, FAMILY, TOKENS, ids, am)
    # 4 blocks of 2 steps each: block b's tokens are committed at steps 2b and 2b + 1 only
    block = torch.arange(16) // 4
    assert bool(((out.unmask_step // 2) == block).all())
    # linspace(1, 1e-3, 3) inside a block: int(4 * 0.4995) = 1 token at its first step, the other 3 at its second
    assert ((out.unmask_step % 2) == 0).sum(dim=1).tolist() == [4, 4, 4, 4]


@pytest.mark.parametrize("cache", ["prefix", "dual"])
@pytest.mark.parametrize("alg", ["origin", *CONFIDENCE_ALGS])
def test_cache_reproduces_the_uncached_block_decoder_for_a_one_layer_model(cache, alg):
    model = tiny(num_hidden_layers=1)
    _, (ids, am) = prompts(4)
    kw = dict(alg=alg, block_length=4, temperature=0.5 if alg == "origin" else 0.0)
    ref = dream(**kw).generate(model, FAMILY, TOKENS, ids, am, torch.Generator().manual_seed(0))
    out = dream(cache=cache, **kw).generate(model, FAMILY, TOKENS, ids, am, torch.Generator().manual_seed(0))
    assert torch.equal(out.sequences, ref.sequences) and torch.equal(out.unmask_step, ref.unmask_step)
    assert out.nfe == ref.nfe


@pytest.mark.parametrize("cache", ["prefix", "dual"])
def test_cache_is_exact_at_refresh_steps_so_one_step_per_block_matches_any_depth(cache):
    model = tiny(num_hidden_layers=2)
    _, (ids, am) = prompts(4)
    ref = dream(alg="entropy", block_length=2, steps=8).generate(model, FAMILY, TOKENS, ids, am)
    out = dream(alg="entropy", block_length=2, steps=8, cache=cache).generate(model, FAMILY, TOKENS, ids, am)
    assert torch.equal(out.sequences, ref.sequences) and torch.equal(out.unmask_step, ref.unmask_step)


@pytest.mark.parametrize("window", [(9, 12), (9, 20), (0, 20), (1, 5), (19, 20)])
def test_kv_logits_are_the_shifted_logits_of_the_window_at_any_depth(window):
    """Dream's shift is undone exactly: the window runs one extra position on the left."""
    model = tiny(num_hidden_layers=2)
    _, (ids, am) = prompts(3)
    x = torch.cat([ids, torch.randint(3, 240, (3, 20 - ids.shape[1]))], dim=1)
    full_am = torch.cat([am, torch.ones(3, 20 - am.shape[1], dtype=torch.long)], dim=1)
    s, e = window
    with torch.no_grad():
        full = FAMILY.logits(model, x, full_am)
        refreshed, past = FAMILY.kv_logits(model, x, full_am, None, 0, 20, True)
        part, _ = FAMILY.kv_logits(model, x, full_am, past, s, e, False)
    assert torch.equal(refreshed, full)
    real = full_am[:, s:e].bool()  # padding rows of the full pass are not compared
    torch.testing.assert_close(part[real], full[:, s:e][real], rtol=1e-5, atol=1e-5)


# --------------------------------------------------------------------------- parallel decoding
def _probability_stub(probs: dict[int, float], V: int = 10):
    """Aligned logits: position i proposes token (i % 7) + 2 with probability probs[i] (default 0.15)."""

    def fn(ids):
        B, L = ids.shape
        out = torch.empty(B, L, V)
        for i in range(L):
            p = probs.get(i, 0.15)
            row = torch.full((V,), (1 - p) / (V - 1))
            row[(i % 7) + 2] = p
            out[:, i] = row.log()
        return out

    return LogitsStub(fn)


def test_threshold_commits_the_sure_positions_together_and_one_per_step_otherwise():
    stub = _probability_stub({2: 0.9, 3: 0.2, 4: 0.6, 5: 0.3, 9: 0.95})
    x, unmask, nfe = decode(lambda ids, am: stub(ids).logits, torch.tensor([[5, 6]]), None,
                            decode_options(mask_id=9, gen_length=8, steps=8, alg="maskgit_plus", block_length=4,
                                           threshold=0.5))
    assert unmask.tolist() == [[0, 2, 0, 1, 5, 6, 7, 4]]
    assert nfe == 7 == stub.calls
    assert x[0, 2:].tolist() == [(i % 7) + 2 for i in range(2, 10)]


def test_factor_rule_commits_the_count_its_bound_allows():
    stub = _probability_stub({2: 0.99, 3: 0.95, 4: 0.9, 5: 0.7, 6: 0.999, 7: 0.999, 8: 0.999, 9: 0.999})
    _, unmask, nfe = decode(lambda ids, am: stub(ids).logits, torch.tensor([[5, 6]]), None,
                            decode_options(mask_id=9, gen_length=8, steps=8, alg="maskgit_plus", block_length=4,
                                           factor=1.0))
    assert unmask.tolist() == [[0, 0, 0, 1, 4, 4, 4, 4]] and nfe == 3


@pytest.mark.parametrize("cache", ["none", "prefix", "dual"])
def test_threshold_commits_at_least_one_token_per_step_and_only_inside_the_current_block(cache):
    model = tiny()
    _, (ids, am) = prompts(4)
    out = DreamSampler({"gen_length": 24, "steps": 24, "block_length": 8, "alg": "maskgit_plus", "threshold": 0.3,
                        "cache": cache}).generate(model, FAMILY, TOKENS, ids, am)
    assert out.nfe == out.steps < 24
    check_parallel_block_steps(out.unmask_step, 8, out.nfe)  # inside the block, >= 1 token per step


# --------------------------------------------------------------------------- batch invariance
def _batch_invariant(smp, model, rows):
    """The same tokens and the same step numbers (``unmask_step``) at batch 1, 4 and 16."""
    outs = [smp.generate(model, FAMILY, TOKENS, r[None]) for r in rows]
    alone, alone_steps = torch.cat([o.completions for o in outs]), torch.cat([o.unmask_step for o in outs])
    for size in (4, 16):
        outs = [smp.generate(model, FAMILY, TOKENS, *left_pad(rows[i : i + size])) for i in range(0, 16, size)]
        assert torch.equal(torch.cat([o.completions for o in outs]), alone), f"batch {size}"
        assert torch.equal(torch.cat([o.unmask_step for o in outs]), alone_steps), f"batch {size}"


@pytest.mark.parametrize("alg", CONFIDENCE_ALGS)
def test_every_confidence_alg_gives_the_same_tokens_at_batch_1_4_16(alg):
    """Per-row counts: a row's schedule no longer follows the batch's mean mask count."""
    rows, _ = prompts(16)
    _batch_invariant(DreamSampler({"gen_length": 8, "steps": 8, "alg": alg}), tiny(), rows)


def test_per_row_counts_versus_the_release_batch_mean():
    """The release's count (kept behind release_quirks) is the batch mean; DARE's default counts each row.
    (test_dream_sampler.py shows the coupling changing tokens.)"""
    from dare_dream.sampler import row_transfer_counts, transfer_count

    uneven = torch.tensor([[True] * 6 + [False] * 2, [True] * 2 + [False] * 6])
    t, s = torch.tensor(1.0), torch.tensor(0.5)
    assert transfer_count(uneven, t, s, last=False) == 2  # int(4 * 0.5) for both rows
    assert row_transfer_counts(uneven, t, s, last=False).tolist() == [3, 1]
    assert row_transfer_counts(uneven, t, s, last=True).tolist() == [6, 2]
    for row in uneven:  # one row: the two agree
        assert row_transfer_counts(row[None], t, s, False).tolist() == [transfer_count(row[None], t, s, False)]


@pytest.mark.parametrize("cache, threshold", COMBOS)
def test_batch_1_4_16_with_left_padding_equals_one_prompt_at_a_time(cache, threshold):
    rows, _ = prompts(16)
    smp = DreamSampler({"gen_length": 8, "steps": 8, "block_length": 4, "alg": "maskgit_plus", "cache": cache,
                        "threshold": threshold})
    _batch_invariant(smp, tiny(), rows)


# --------------------------------------------------------------------------- generation defaults (top_k)
def test_the_drop_in_resolves_omitted_sampling_arguments_as_the_release_does():
    model = tiny()
    prompt = torch.tensor([[3, 4, 5, 6]])
    kw = dict(max_new_tokens=8, steps=8, alg="entropy")

    def run(**extra):
        return diffusion_generate(model, prompt, generator=torch.Generator().manual_seed(3), **kw, **extra)

    assert RELEASE_CONFIG_DEFAULTS == {"temperature": 1.0, "top_p": 1.0, "top_k": 50}
    release = run()
    assert torch.equal(release, run(temperature=1.0, top_p=1.0, top_k=50))
    # top_k=50 is in effect when top_k is omitted (visible on a flat distribution: temperature 5)
    assert torch.equal(run(temperature=5.0), run(temperature=5.0, top_k=50))
    assert not torch.equal(run(temperature=5.0), run(temperature=5.0, top_k=None))
    stated = run(generation_defaults="generation_config")
    assert torch.equal(stated, run(temperature=0.0, top_p=None, top_k=None))
    with pytest.raises(DreamSamplerError, match="generation_defaults"):
        run(generation_defaults="model")


def test_the_sampler_follows_generation_config_json_and_top_k_50_is_one_parameter_away():
    assert DreamSampler.Params().top_k is None and DreamSampler.Params().temperature == 0.0
    model = tiny()
    prompt = torch.tensor([[3, 4, 5, 6]])
    out = DreamSampler({"gen_length": 8, "steps": 8, "alg": "entropy"}).generate(model, FAMILY, TOKENS, prompt)
    ref = diffusion_generate(model, prompt, max_new_tokens=8, steps=8, alg="entropy",
                             generation_defaults="generation_config")
    assert torch.equal(out.sequences, ref)
    # top_k changes the entropy confidence even when greedy: the entropy of the renormalised top-k distribution
    logits = torch.linspace(0.0, 3.0, 100)[None]
    conf_none, x_none = sample_tokens(logits, confidence="neg_entropy")
    conf_50, x_50 = sample_tokens(logits, top_k=50, confidence="neg_entropy")
    p = torch.softmax(logits[0, 50:], dim=-1)
    assert x_none.item() == x_50.item() == 99
    torch.testing.assert_close(conf_50, (p * torch.log(p + 1e-10)).sum()[None])
    assert conf_50.item() > conf_none.item() + 0.4  # 50 tokens are more certain than 100: rankings change
    assert math.isclose(-conf_none.item(), float(-(torch.softmax(logits[0], -1) * torch.log_softmax(logits[0], -1)).sum()),
                        rel_tol=1e-5)


# --------------------------------------------------------------------------- NFE, NaN, validation
@pytest.mark.parametrize("cache, threshold", COMBOS)
def test_nfe_is_the_number_of_forward_passes(cache, threshold):
    model = Counting(tiny())
    _, (ids, am) = prompts(4)
    out = DreamSampler({"gen_length": 16, "steps": 16, "block_length": 4, "alg": "maskgit_plus", "cache": cache,
                        "threshold": threshold}).generate(model, FAMILY, TOKENS, ids, am)
    assert out.nfe == model.calls


@pytest.mark.parametrize("cache, threshold", COMBOS)
def test_nan_logits_raise_a_clear_error_instead_of_leaving_rows_masked(cache, threshold):
    model = tiny()
    with torch.no_grad():
        model.model.layers[1].mlp.down_proj.weight[0, 0] = torch.nan
    smp = DreamSampler({"gen_length": 8, "steps": 8, "block_length": 4, "alg": "maskgit_plus", "cache": cache,
                        "threshold": threshold})
    with pytest.raises(NonFiniteLogitsError, match=r"non-finite logits at denoising step 0 \(sampler 'dream'\).*diverged"):
        smp.generate(model, FAMILY, TOKENS, *prompts(2)[1])
    bad_later = LogitsStub(lambda ids: torch.full((*ids.shape, 10), torch.nan if (ids == 9).sum() <= 5 else 0.0))
    with pytest.raises(NonFiniteLogitsError, match="at denoising step 3 "):  # 8 masks, 1 per step: step 3 sees 5 masks
        decode(lambda ids, am: bad_later(ids).logits, torch.tensor([[5]]), None,
               decode_options(mask_id=9, gen_length=8, steps=8, alg="maskgit_plus", threshold=0.5))


def test_a_cache_needs_a_family_with_a_cached_forward_and_bad_arguments_are_named():
    class NoCacheFamily(DreamFamily):
        name = "nocache"
        kv_logits = None

    smp = dream(cache="prefix")
    problems = smp.check(SimpleNamespace(family=NoCacheFamily()), "sampler")
    assert [p[0] for p in problems] == ["sampler.params.cache"] and "kv_logits" in problems[0][1]
    with pytest.raises(DareError, match="cache: none"):
        smp.generate(tiny(), NoCacheFamily(), TOKENS, torch.tensor([[5, 6]]))
    with pytest.raises(DreamSamplerError, match=r"block_length \(3\).*at most one of threshold and factor"):
        diffusion_generate(tiny(), torch.tensor([[3, 4]]), max_new_tokens=8, steps=8, alg="maskgit_plus",
                           block_length=3, threshold=0.9, factor=1.0)


# --------------------------------------------------------------------------- per-row generators
@pytest.mark.parametrize("params", [
    {"alg": "origin"},
    {"alg": "maskgit_plus"},
    {"alg": "entropy", "alg_temp": 0.5, "top_p": 0.9},
    {"alg": "maskgit_plus", "block_length": 8, "threshold": 0.5},
    {"alg": "maskgit_plus", "block_length": 8, "cache": "dual", "threshold": 0.9},
])
def test_sampled_batch_of_4_equals_the_rows_decoded_alone_with_keyed_row_generators(params):
    """Temperature 1: every draw of a row (tokens, origin reveals, alg_temp positions) comes from its own keyed
    generator and only for its own masked positions, so a row's sample does not depend on the batch."""
    from dare.testing import decode_batched_and_alone

    assert DreamSampler.supports_row_generators
    smp = dream(temperature=1.0, **params)
    rows = prompts(4, seed=3)[0]
    assert len({len(r) for r in rows}) > 1  # left padding differs between rows
    model = tiny()
    batched, alone = decode_batched_and_alone(smp, model, FAMILY, TOKENS, rows, seed=0)
    for i, one in enumerate(alone):
        assert torch.equal(batched.completions[i], one.completions[0]), i
        # threshold decoding numbers steps per block (nb * block_length + i), not by the batch's forward passes
        assert torch.equal(batched.unmask_step[i], one.unmask_step[0]), i
    other, _ = decode_batched_and_alone(smp, model, FAMILY, TOKENS, rows[:1], seed=1)
    assert not torch.equal(other.completions[0], batched.completions[0])  # the draws are keyed by the seed


def test_refresh_commit_is_checked_and_first_commits_only_the_block_start_at_the_refresh():
    from dare_dream.decoding import DreamSamplerError, decode, decode_options

    stub_logits = torch.zeros(1, 12, 8)
    stub_logits[..., 5] = 10.0  # every position proposes token 5 with probability ~0.9994

    def logits_fn(ids, am):
        return stub_logits[:, : ids.shape[1]]

    def kv_logits(ids, am, past, start, end, use_cache):
        return stub_logits[:, start:end], object()

    with pytest.raises(DreamSamplerError, match="refresh_commit"):
        decode(logits_fn, torch.tensor([[1, 2]]), None,
               decode_options(mask_id=7, kv_logits=kv_logits, gen_length=4, steps=4, cache="dual", refresh_commit="all"))
    x, unmask_step, nfe = decode(logits_fn, torch.tensor([[1, 2]]), None,
                                 decode_options(mask_id=7, kv_logits=kv_logits, gen_length=8, steps=8, alg="maskgit_plus",
                                                block_length=4, cache="dual", threshold=0.9, refresh_commit="first"))
    assert x[0, 2:].tolist() == [5] * 8
    # per block: the refresh commits the block's first position, the next (cached) step the other three
    assert unmask_step[0].tolist() == [0, 1, 1, 1, 4, 5, 5, 5] and nfe == 4


def test_fastdllm_rules_score_dream_proposals_in_float64_and_keep_the_tokens():
    from dare_dream.decoding import _sample_tokens, sample_tokens

    # probabilities 1/(1 + e^-15) and 1/(1 + e^-15.01): 3e-9 apart, equal in float32
    logits = torch.tensor([[15.0, 0.0], [15.01, 0.0]])
    c32, t32 = sample_tokens(logits)
    c64, t64 = _sample_tokens(logits, fastdllm=True)
    assert torch.equal(t32, t64) and t64.tolist() == [0, 0]
    assert c32.dtype == torch.float32 and c32[0] == c32[1]
    assert c64.dtype == torch.float64 and c64[1] - c64[0] > 2e-9
    for kind in ("margin", "neg_entropy"):
        assert _sample_tokens(logits, confidence=kind, fastdllm=True)[0].dtype == torch.float64
