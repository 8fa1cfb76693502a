"""Dream sampler: schedule, each alg, alg_temp, RNG order, EOS/mask handling and trajectory, exactly."""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest
import torch
from pydantic import ValidationError

from dare.components import ModelFamily, SpecialTokens
from dare.errors import DareError
from dare.sampling.text import decode_completions
from dare.testing import LogitsStub
from dare_dream.family import DreamFamily
from dare_dream.sampler import (
    DreamSampler,
    DreamSamplerError,
    decode,
    decode_options,
    diffusion_generate,
    sample_tokens,
    select_positions,
    transfer_count,
)

MASK, EOS, V = 9, 0, 10


def _aligned_stub():
    """Aligned logits: position i proposes token (i % 7) + 1 with logit i (later = more confident)."""

    def fn(ids):
        B, L = ids.shape
        logits = torch.full((B, L, V), -5.0)
        for i in range(L):
            logits[:, i, (i % 7) + 1] = float(i)
        return logits

    return LogitsStub(fn)


def _run(model, prompt, **kw):
    attention_mask, mask_id = kw.pop("attention_mask", None), kw.pop("mask_id", MASK)
    return decode(lambda ids, am: model(ids).logits, prompt, attention_mask, decode_options(mask_id, **kw))


# --------------------------------------------------------------------------- schedule
def test_transfer_count_is_int_of_float32_product():
    mask = torch.ones(2, 7, dtype=torch.bool)
    t, s = torch.tensor(0.875), torch.tensor(0.75)
    # 7 * (1 - 0.75 / 0.875) is 1 in exact arithmetic but 0.99999994 in float32, as in the release
    assert transfer_count(mask, t, s, last=False) == 0
    assert transfer_count(mask, t, s, last=True) == 7
    uneven = torch.tensor([[True] * 5 + [False] * 2, [True] * 2 + [False] * 5])  # 3.5 masks per row on average
    assert transfer_count(uneven, torch.tensor(1.0), torch.tensor(0.5), last=False) == 1
    assert transfer_count(uneven, t, s, last=True) == 3


def test_maskgit_plus_commits_the_scheduled_count_most_confident_first():
    model = _aligned_stub()
    # linspace(1, 1e-3, 5): counts int(8*.24975)=1, int(7*.3329)=2, int(5*.4990)=2, then the last 3
    x, steps, nfe = _run(model, torch.tensor([[5, 6]]), gen_length=8, steps=4, alg="maskgit_plus")
    assert x.tolist() == [[5, 6, 3, 4, 5, 6, 7, 1, 2, 3]]
    assert steps.tolist() == [[3, 3, 3, 2, 2, 1, 1, 0]]
    assert nfe == 4 and model.calls == 4


# --------------------------------------------------------------------------- confidences
_P = {  # three completion positions with hand-made distributions over tokens 0..3 (mask token 4 impossible)
    1: [0.60, 0.10, 0.10, 0.20],  # top probability (0.60)
    2: [0.00, 0.55, 0.45, 0.00],  # lowest entropy (0.688 nats)
    3: [0.14, 0.14, 0.58, 0.14],  # widest margin (0.44)
}


def _distribution_stub():
    def fn(ids):
        B, L = ids.shape
        probs = torch.full((B, L, 5), 0.2)
        probs[..., 4] = 0.0
        for pos, p in _P.items():
            probs[:, pos, :4] = torch.tensor(p)
        return torch.log(probs.clamp_min(1e-30))  # finite logits: samplers refuse NaN/Inf

    return LogitsStub(fn)


def test_sample_tokens_confidences_by_hand():
    logits = torch.log(torch.tensor([_P[1], _P[2], _P[3]]))
    conf, x0 = sample_tokens(logits, confidence="probability")
    assert x0.tolist() == [0, 1, 2]
    torch.testing.assert_close(conf, torch.tensor([0.60, 0.55, 0.58]))
    conf, _ = sample_tokens(logits, confidence="margin")
    torch.testing.assert_close(conf, torch.tensor([0.40, 0.10, 0.44]))
    conf, _ = sample_tokens(logits, confidence="neg_entropy")
    h = lambda p: sum(q * math.log(q + 1e-10) for q in p)  # noqa: E731
    torch.testing.assert_close(conf, torch.tensor([h(_P[1]), h(_P[2]), h(_P[3])]))


@pytest.mark.parametrize(
    "alg, first", [("maskgit_plus", 1), ("entropy", 2), ("topk_margin", 3)]
)
def test_each_confidence_alg_commits_its_own_most_confident_position_first(alg, first):
    model = _distribution_stub()
    # linspace(1, 1e-3, 4): counts int(3*.333)=0, int(3*.4993)=1, then the last 2
    x, steps, nfe = _run(model, torch.tensor([[3]]), gen_length=3, steps=3, alg=alg, mask_id=4)
    assert x.tolist() == [[3, 0, 1, 2]]
    want = [2, 2, 2]
    want[first - 1] = 1
    assert steps.tolist() == [want] and nfe == 3


def test_top_k_and_top_p_filter_before_the_confidence():
    logits = torch.log(torch.tensor([[0.5, 0.3, 0.2]]))
    conf, _ = sample_tokens(logits, top_k=2)
    torch.testing.assert_close(conf, torch.tensor([0.5 / 0.8]))
    conf, _ = sample_tokens(logits, top_p=0.6)  # keeps 0.5 and 0.3 (the 0.3 crosses the mass)
    torch.testing.assert_close(conf, torch.tensor([0.5 / 0.8]))
    conf, _ = sample_tokens(logits, top_p=0.4)  # keeps the top token only
    torch.testing.assert_close(conf, torch.tensor([1.0]))


# --------------------------------------------------------------------------- randomness
def test_origin_reveals_where_the_generator_uniform_is_below_one_minus_s_over_t():
    model = _aligned_stub()
    g = torch.Generator().manual_seed(11)
    x, steps, nfe = _run(model, torch.tensor([[5, 6]]), gen_length=8, steps=4, alg="origin", generator=g)
    # replay the documented draws: one U(0,1) per still-masked position per step, in position order
    ref = torch.Generator().manual_seed(11)
    ts = torch.linspace(1, 1e-3, 5)
    want, masked = [-1] * 8, list(range(8))
    for i in range(4):
        if not masked:
            break
        u = torch.rand(len(masked), generator=ref)
        p = 1.0 if i == 3 else 1 - ts[i + 1] / ts[i]
        revealed = [j for j, uj in zip(masked, u) if uj < p]
        for j in revealed:
            want[j] = i
        masked = [j for j in masked if j not in revealed]
    assert steps.tolist() == [want]
    assert x.tolist() == [[5, 6, 3, 4, 5, 6, 7, 1, 2, 3]]  # temperature 0: every revealed token is the argmax
    assert nfe == max(want) + 1  # stops once nothing is masked


def test_alg_temp_draws_positions_from_softmax_of_confidence_over_alg_temp():
    model = _distribution_stub()
    g = torch.Generator().manual_seed(3)
    _, steps, _ = _run(model, torch.tensor([[3]]), gen_length=3, steps=3, alg="maskgit_plus", alg_temp=0.05,
                       mask_id=4, generator=g)
    ref = torch.Generator().manual_seed(3)
    conf = torch.tensor([-torch.inf, 0.60, 0.55, 0.58])
    first = int(torch.multinomial(torch.softmax(conf / 0.05, -1), 1, generator=ref))
    want = [2, 2, 2]
    want[first - 1] = 1
    assert steps.tolist() == [want]


def test_alg_temp_with_underflowing_probabilities_tops_up_by_confidence():
    conf = torch.tensor([[2.0, -torch.inf, -torch.inf, 1.0, -torch.inf, 3.0]])  # -inf: not masked
    for seed in range(3):
        g = torch.Generator().manual_seed(seed)
        rows, cols = select_positions(conf, 3, alg_temp=1e-4, generator=g)  # softmax is one-hot on position 5
        assert rows.tolist() == [0, 0, 0] and cols.tolist() == [5, 0, 3]


def test_sampler_is_reproducible_from_its_generator(tiny):
    sampler = DreamSampler({"gen_length": 8, "steps": 8, "alg": "entropy", "alg_temp": 0.5, "temperature": 0.8,
                            "top_p": 0.9})
    tokens = SpecialTokens(mask_id=250, eos_id=1, pad_id=1)
    prompt = torch.tensor([[1, 5, 6, 7], [8, 9, 10, 11]])
    am = torch.tensor([[0, 1, 1, 1], [1, 1, 1, 1]])
    gens = [torch.Generator().manual_seed(s) for s in (0, 0, 1)]
    outs = [sampler.generate(tiny, DreamFamily(), tokens, prompt, am, g) for g in gens]
    assert torch.equal(outs[0].sequences, outs[1].sequences) and torch.equal(outs[0].unmask_step, outs[1].unmask_step)
    assert not torch.equal(outs[0].sequences, outs[2].sequences)


def test_functional_draws_from_the_global_rng_like_the_release(tiny):
    prompt = torch.tensor([[3, 4, 5, 6]])
    kw = dict(max_new_tokens=8, steps=4, alg="maskgit_plus", alg_temp=0.3, temperature=0.7, top_k=50)
    torch.manual_seed(42)
    a = diffusion_generate(tiny, prompt, **kw)
    torch.manual_seed(42)
    b = diffusion_generate(tiny, prompt, **kw)
    c = diffusion_generate(tiny, prompt, generator=torch.Generator().manual_seed(42), **kw)
    assert torch.equal(a, b) and torch.equal(a, c) and a.shape == (1, 12)
    assert (a[:, :4] == prompt).all()


# --------------------------------------------------------------------------- EOS, mask token, trajectory
def _eos_stub():
    """Positions >= 5 propose EOS (most confident), earlier completion positions propose digit 7."""

    def fn(ids):
        B, L = ids.shape
        logits = torch.full((B, L, V), -5.0)
        logits[:, :5, 7] = 1.0
        logits[:, 5:, EOS] = 4.0
        return logits

    return LogitsStub(fn)


class _AlignedFamily(ModelFamily):
    """A full-attention family whose logits are already aligned (no shift), to show the sampler asks the family."""

    name = "aligned"

    def logits(self, model, input_ids, attention_mask=None):
        return model(input_ids).logits


def test_eos_tail_is_kept_as_response_and_cut_from_the_text():
    sampler = DreamSampler({"gen_length": 6, "steps": 3, "alg": "maskgit_plus"})
    tokens = SpecialTokens(mask_id=MASK, eos_id=EOS, pad_id=EOS)
    out = sampler.generate(_eos_stub(), _AlignedFamily(), tokens, torch.tensor([[7, 7, 7]]))
    assert out.completions.tolist() == [[7, 7, 0, 0, 0, 0]]
    assert out.completion_mask.all()  # Dream convention: EOS padding counts as response
    tok = SimpleNamespace(decode=lambda ids, skip_special_tokens=True: "".join(str(i) for i in ids))
    assert decode_completions(tok, out.completions, tokens) == ["77"]
    assert (out.nfe, out.steps, out.prompt_length) == (3, 3, 3)


def test_dream_sampler_decodes_through_the_family_shift():
    """Raw stub output at j proposes the token for j + 1; DreamFamily realigns it."""

    def raw(ids):
        B, L = ids.shape
        logits = torch.full((B, L, V), -5.0)
        for j in range(L - 1):
            logits[:, j, ((j + 1) % 7) + 1] = float(j + 1)
        return logits

    sampler = DreamSampler({"gen_length": 8, "steps": 4, "alg": "maskgit_plus"})
    out = sampler.generate(LogitsStub(raw), DreamFamily(), SpecialTokens(MASK, EOS, EOS), torch.tensor([[5, 6]]))
    assert out.completions.tolist() == [[3, 4, 5, 6, 7, 1, 2, 3]]
    assert out.unmask_step.tolist() == [[3, 3, 3, 2, 2, 1, 1, 0]]


def _mask_proposing_stub():
    """Row 0 proposes the mask token at its 3 rightmost positions (most confident); row 1 proposes digits."""

    def fn(ids):
        B, L = ids.shape
        logits = torch.full((B, L, V), -5.0)
        for i in range(L):
            logits[:, i, (i % 7) + 1] = float(i)
        logits[0, L - 3 :, MASK] = 100.0
        return logits

    return LogitsStub(fn)


def test_a_proposed_mask_token_stays_masked_and_never_overwrites_other_rows():
    prompt = torch.tensor([[5, 6], [5, 6]])
    # step 0 commits int(8 * .4995) = 3 per row; row 0's 3 picks are mask proposals, so it keeps 8 masks,
    # row 1 keeps 5; the last step commits each row's own masks (per-row counts): 8 and 5
    x, steps, _ = _run(_mask_proposing_stub(), prompt, gen_length=8, steps=2, alg="maskgit_plus")
    assert x[1].tolist() == [5, 6, 3, 4, 5, 6, 7, 1, 2, 3]
    assert steps[1].tolist() == [1, 1, 1, 1, 1, 0, 0, 0]
    # row 0: the 3 mask proposals stay masked, every other position is committed at the last step
    assert x[0].tolist() == [5, 6, 3, 4, 5, 6, 7, MASK, MASK, MASK]
    assert steps[0].tolist() == [1, 1, 1, 1, 1, -1, -1, -1]


def test_release_quirks_commit_the_batch_mean_count_in_every_row():
    prompt = torch.tensor([[5, 6], [5, 6]])
    x, steps, _ = _run(_mask_proposing_stub(), prompt, gen_length=8, steps=2, alg="maskgit_plus",
                       release_quirks=True)
    # the last step commits int((8 + 5) / 2) = 6 in each row: row 0 gets its 3 mask proposals again plus
    # positions 6, 5, 4, and positions 2 and 3 stay masked although the schedule has ended
    assert x[0].tolist() == [5, 6, MASK, MASK, 5, 6, 7, MASK, MASK, MASK]
    assert steps[0].tolist() == [-1, -1, 1, 1, 1, -1, -1, -1]


def test_release_quirk_overwrites_a_non_mask_position_of_a_short_row():
    prompt = torch.tensor([[5, 6], [5, 6]])
    x, steps, _ = _run(_mask_proposing_stub(), prompt, gen_length=8, steps=2, alg="maskgit_plus",
                       release_quirks=True)
    # row 1 holds 5 masks but commits 6: torch.topk also picks one -inf (non-mask) slot and writes the mask id
    assert int((x[1] == MASK).sum()) == 1
    hole = int((x[1] == MASK).nonzero())
    if hole >= 2:
        assert steps[1, hole - 2] == -1  # a re-masked completion token loses its commit step


# --------------------------------------------------------------------------- validation
@pytest.mark.parametrize(
    "params, message",
    [
        ({"alg": "origin", "alg_temp": 0.5}, "alg_temp only applies"),
        ({"alg": "remdm"}, "alg"),
        ({"top_p": 0.0}, "top_p"),
        ({"top_k": 0}, "top_k"),
        ({"eps": 1.0}, "eps"),
        ({"temperature": -0.1}, "temperature"),
        ({"steps": 0}, "steps"),
        ({"block_length": 33}, r"gen_length \(256\) must be a multiple of block_length \(33\)"),
        ({"block_length": 32, "steps": 36}, r"steps \(36\) must be a multiple of gen_length / block_length \(8\)"),
        ({"threshold": 0.9, "factor": 1.0, "alg": "maskgit_plus"}, "at most one of threshold and factor"),
        ({"threshold": 0.9}, "set alg: maskgit_plus"),
        ({"factor": 1.0, "alg": "maskgit_plus", "alg_temp": 0.5}, "set alg: maskgit_plus and no alg_temp"),
        ({"threshold": 1.5, "alg": "maskgit_plus"}, "threshold"),
        ({"factor": 0.0, "alg": "maskgit_plus"}, "factor"),
        ({"cache": "full"}, "cache"),
    ],
)
def test_params_validation(params, message):
    with pytest.raises(ValidationError, match=message):
        DreamSampler.Params(**params)


def test_functional_argument_errors_are_dare_errors_listing_every_problem(tiny):
    with pytest.raises(DreamSamplerError, match="steps must be positive.*alg must be one of") as err:
        diffusion_generate(tiny, torch.tensor([[3, 4]]), steps=0, alg="fast")
    assert isinstance(err.value, DareError) and isinstance(err.value, ValueError)
    no_config = LogitsStub(lambda ids: torch.zeros(*ids.shape, V))
    with pytest.raises(DreamSamplerError, match="mask_token_id"):
        diffusion_generate(no_config, torch.tensor([[3, 4]]), max_new_tokens=2, steps=2)


def test_sampler_refuses_block_attention_families():
    block = SimpleNamespace(family=SimpleNamespace(name="sdar", attention="block", default_sampler="sdar"))
    problems = DreamSampler().check(block, "sampler")
    assert problems and problems[0][0] == "sampler.name" and "block" in problems[0][1]
    assert DreamSampler().check(SimpleNamespace(family=DreamFamily()), "sampler") == []
