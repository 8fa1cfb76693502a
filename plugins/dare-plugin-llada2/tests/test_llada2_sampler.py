"""LLaDA2 block decoder on scripted logits: schedules, thresholds, EOS rules, editing, return slicing (exact)."""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest
import torch
from pydantic import ValidationError

from dare.components import SpecialTokens
from dare.errors import DareError
from dare.sampling import NonFiniteLogitsError
from dare.plugins.manager import get_registry
from dare.testing import LogitsStub
from dare_llada2.family import LLaDA2Family
from dare_llada2.sampler import LLaDA2Sampler, decode, decode_options, generate, generate_v21

V, EOS, MASK = 16, 1, 2
PROMPT = torch.tensor([[10, 11, 12]])
TOKENS = SpecialTokens(mask_id=MASK, eos_id=EOS, pad_id=EOS, eot_id=3, bos_id=0)


def scripted(proposal) -> LogitsStub:
    """A model whose position ``j`` proposes ``proposal(j, row) = (token, p)``: logit ``log(p (V-1) / (1-p))``
    on ``token`` and 0 elsewhere, so ``softmax`` gives ``token`` probability ``p``. Inputs are windows
    starting at position 0 (the release's recompute path)."""

    def fn(ids):
        out = torch.zeros(*ids.shape, V)
        for b, row in enumerate(ids.tolist()):
            for j in range(len(row)):
                tok, p = proposal(j, row)
                out[b, j, tok] = math.log(p * (V - 1) / (1 - p))
        return out

    return LogitsStub(fn)


def table(entries: dict[int, tuple[int, float]]):
    """Position-only proposals; prompt positions propose a different token with p 0.99."""
    return lambda j, row: entries.get(j, (14, 0.99))


BASE = {3: (5, 0.5), 4: (6, 0.9), 5: (7, 0.85), 6: (8, 0.3), 7: (9, 0.6)}


def run(model, **kw):
    kw = {"gen_length": 5, "block_length": 4, "mask_id": MASK, "eos_id": EOS, "pad_id": EOS, "use_cache": False, **kw}
    return decode(model, PROMPT, None, decode_options(**kw))


# --------------------------------------------------------------------------- LLaDA2.0
@pytest.mark.parametrize(
    "steps, minimal_topk, unmask, nfe",
    [
        (2, 1, [0, 1, 1, 2, 2], 3),  # quota [2, 2]: 4 and 5 pass 0.8 (2 >= 2); then the top-2 of {6, 7}
        (4, 1, [0, 1, 1, 3, 2], 4),  # quota [1]*4: both passers at once, then 7 (0.6) before 6 (0.3)
        (1, 1, [0, 1, 1, 1, 1], 2),  # quota [4]: 2 passers < 4, so the 4 most confident
        (4, 3, [0, 1, 1, 1, 1], 2),  # steps capped at gen_length // minimal_topk = 1
    ],
)
def test_v20_threshold_and_quota_schedule(steps, minimal_topk, unmask, nfe):
    res = run(scripted(table(BASE)), variant="2.0", steps=steps, threshold=0.8, minimal_topk=minimal_topk)
    assert res.completions().tolist() == [[5, 6, 7, 8, 9]]
    assert res.unmask_step.tolist() == [unmask]
    assert res.nfe == nfe and res.steps == nfe


def test_v20_stops_after_the_block_that_holds_eos():
    model = scripted(table({**BASE, 4: (EOS, 0.9)}))
    res = run(model, variant="2.0", steps=4, threshold=0.8, gen_length=9)
    assert res.nfe == 4  # block 2 (positions 8..11) is never decoded
    assert res.completions().tolist() == [[5, EOS, 7, 8, 9, MASK, MASK, MASK, MASK]]
    assert res.unmask_step.tolist() == [[0, 1, 1, 3, 2, -1, -1, -1, -1]]
    out = generate(model, PROMPT, gen_length=9, block_length=4, steps=4, threshold=0.8, eos_id=EOS, mask_id=MASK,
                   use_cache=False)
    assert out.tolist() == [[5, EOS]]  # the release's return: generation up to and including EOS


def test_v20_early_stop_returns_the_prompt_too_as_the_release():
    model = scripted(table({**BASE, 4: (EOS, 0.9)}))
    res = run(model, variant="2.0", steps=4, threshold=0.8, gen_length=9, eos_early_stop=True)
    assert res.nfe == 2 and res.early_end.tolist() == [4]
    out = generate(model, PROMPT, gen_length=9, block_length=4, steps=4, threshold=0.8, eos_id=EOS, mask_id=MASK,
                   eos_early_stop=True, use_cache=False)
    assert out.tolist() == [[10, 11, 12, 5, EOS]]


def test_v20_early_stop_needs_a_mask_free_answer_before_eos():
    model = scripted(table({3: (5, 0.9), 4: (6, 0.3), 5: (7, 0.2), 6: (EOS, 0.95), 7: (9, 0.25)}))
    res = run(model, variant="2.0", steps=4, threshold=0.8, eos_early_stop=True)
    # EOS at 6 is committed first while 4 and 5 are masked: no early stop; the block finishes (4 steps)
    assert res.early_end.tolist() == [-1] and res.nfe == 5
    assert res.unmask_step.tolist() == [[0, 2, 4, 1, 3]]
    assert generate(model, PROMPT, gen_length=5, block_length=4, steps=4, threshold=0.8, eos_id=EOS, mask_id=MASK,
                    eos_early_stop=True, use_cache=False).tolist() == [[5, 6, 7, EOS]]


# --------------------------------------------------------------------------- LLaDA2.1
def editing_script(j, row):
    if j == 4:  # decoded as 6, then confidently rewritten to 13 (a token edit), then stable
        return (6, 0.9) if row[4] == MASK else (13, 0.95)
    return {3: (5, 0.5), 5: (7, 0.85), 6: (8, 0.3), 7: (9, 0.2)}.get(j, (14, 0.99))


def test_v21_threshold_num_to_transfer_and_token_editing():
    res = run(scripted(editing_script), variant="2.1", threshold=0.8, editing_threshold=0.7, max_post_steps=2)
    # block 0: commit 3 (top-1), one mask-free pass (the prompt's 0.99 proposals are never edits)
    # block 1: commit {4, 5} (pass 0.8); edit 4: 6 -> 13 and commit 6; commit 7; one mask-free pass
    assert res.completions().tolist() == [[5, 13, 7, 8, 9]]
    assert res.unmask_step.tolist() == [[0, 2, 2, 3, 4]]
    assert res.edits.tolist() == [1] and res.nfe == 6
    assert PROMPT.tolist() == [res.x[0, :3].tolist()]
    out = generate_v21(scripted(editing_script), PROMPT, gen_length=5, block_length=4, threshold=0.8,
                       editing_threshold=0.7, max_post_steps=2, eos_id=EOS, mask_id=MASK, use_cache=False)
    assert out.tolist() == [[5, 13, 7, 8, 9]]


def test_v21_edits_need_the_editing_threshold():
    res = run(scripted(editing_script), variant="2.1", threshold=0.8, editing_threshold=0.96, max_post_steps=2)
    assert res.completions().tolist() == [[5, 6, 7, 8, 9]] and res.edits.tolist() == [0]


def oscillating(j, row):
    if j == 7:  # 9 <-> 15 forever once decoded
        return {MASK: (9, 0.9), 9: (15, 0.95)}.get(row[7], (9, 0.95))
    return {3: (5, 0.9), 4: (6, 0.9), 5: (7, 0.9), 6: (8, 0.9)}.get(j, (14, 0.99))


@pytest.mark.parametrize("max_post_steps, nfe, last, edits", [(0, 2, 9, 0), (1, 4, 15, 1), (2, 5, 9, 2)])
def test_v21_max_post_steps_bounds_mask_free_editing(max_post_steps, nfe, last, edits):
    res = run(scripted(oscillating), variant="2.1", threshold=0.8, editing_threshold=0.5, max_post_steps=max_post_steps)
    assert res.nfe == nfe and res.edits.tolist() == [edits]
    assert res.completions()[0, -1].item() == last


@pytest.mark.parametrize("eos_early_stop, nfe, tail", [(False, 6, [9, 9, 9, 9]), (True, 4, [MASK] * 4)])
def test_v21_stops_at_eos_only_with_eos_early_stop(eos_early_stop, nfe, tail):
    script = table({3: (5, 0.9), 4: (EOS, 0.9), 5: (7, 0.9), 6: (8, 0.9), 7: (9, 0.9), 8: (9, 0.9), 9: (9, 0.9),
                    10: (9, 0.9), 11: (9, 0.9)})
    res = run(scripted(script), variant="2.1", threshold=0.8, gen_length=9, eos_early_stop=eos_early_stop)
    assert res.nfe == nfe
    assert res.completions()[0, 5:].tolist() == tail


def test_v21_ends_a_block_that_only_proposes_the_mask_token():
    script = table({3: (5, 0.9), 4: (6, 0.9), 5: (MASK, 0.99), 6: (8, 0.9), 7: (9, 0.9)})
    res = run(scripted(script), variant="2.1", threshold=0.8, max_post_steps=2)
    # block 1: 4, 6, 7 and the mask proposal at 5 are committed; the next iteration changes nothing
    assert res.completions().tolist() == [[5, 6, MASK, 8, 9]]
    assert res.unmask_step.tolist() == [[0, 2, -1, 2, 2]] and res.nfe == 4


# --------------------------------------------------------------------------- token proposals
# (the shared rule itself, top-k before top-p and the tempered confidence, is tested in tests/test_sampling_tokens.py)
def test_temperature_zero_is_greedy_unless_the_20_quirk_is_asked_for():
    model = scripted(table(BASE))
    greedy = run(model, steps=4, threshold=0.8)
    assert greedy.completions().tolist() == [[5, 6, 7, 8, 9]]
    quirk = run(model, steps=4, threshold=0.8, official_t0_sampling=True, generator=torch.Generator().manual_seed(0))
    at_one = run(model, steps=4, threshold=0.8, temperature=1.0, generator=torch.Generator().manual_seed(0))
    assert quirk.completions().tolist() == [[10, 6, 7, 8, 9]]  # position 3 (p 0.5) drew another token
    assert torch.equal(quirk.x, at_one.x) and torch.equal(quirk.unmask_step, at_one.unmask_step)


# --------------------------------------------------------------------------- non-finite logits
@pytest.mark.parametrize("variant", ["2.0", "2.1"])
@pytest.mark.parametrize("nan_from_call, where", [(1, "completion block 0, denoising step 0"),
                                                  (2, "completion block 1, denoising step 0")])
@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_non_finite_logits_raise_naming_block_and_step(variant, nan_from_call, where, temperature):
    """Before: greedy decoding committed token 0 for NaN logits (argmax of NaN), sampling raised torch's RuntimeError."""
    good = scripted(table({3: (5, 0.9), 4: (6, 0.9), 5: (7, 0.9), 6: (8, 0.9), 7: (9, 0.9)}))

    def fn(ids):
        logits = good.fn(ids)
        return torch.full_like(logits, torch.nan) if stub.calls >= nan_from_call else logits

    stub = LogitsStub(fn)
    with pytest.raises(NonFiniteLogitsError, match=f"non-finite logits at {where}.*diverged"):
        run(stub, variant=variant, steps=1, threshold=0.8, temperature=temperature, max_post_steps=0,
            eos_id=-1, generator=torch.Generator().manual_seed(0))  # no EOS stop before block 1, whatever is drawn


# --------------------------------------------------------------------------- the DARE sampler
def test_sampler_output_pads_after_eos_and_records_the_trajectory():
    model = scripted(table({**BASE, 4: (EOS, 0.9)}))
    sampler = LLaDA2Sampler({"gen_length": 9, "block_length": 4, "steps": 4, "threshold": 0.8, "use_cache": False})
    out = sampler.generate(model, LLaDA2Family(), TOKENS, torch.tensor([[EOS, 10, 11, 12]]), torch.tensor([[0, 1, 1, 1]]))
    assert out.prompt_length == 4
    assert out.completions.tolist() == [[5, EOS, 7, 8, 9, EOS, EOS, EOS, EOS]]
    assert out.completion_mask.tolist() == [[True, True] + [False] * 7]
    assert out.unmask_step.tolist() == [[0, 1, 1, 3, 2, -1, -1, -1, -1]]
    assert (out.nfe, out.steps) == (4, 4)


def test_cache_needs_a_model_that_returns_one():
    sampler = LLaDA2Sampler({"gen_length": 9, "block_length": 4})
    with pytest.raises(DareError, match="use_cache"):
        sampler.generate(scripted(table(BASE)), LLaDA2Family(), TOKENS, PROMPT)


def test_params_validation():
    P = LLaDA2Sampler.Params
    assert P.model_validate({"variant": 2.1}).variant == "2.1"
    assert P.model_validate({"variant": 2}).variant == "2.0"
    with pytest.raises(ValidationError, match="editing_threshold"):
        P.model_validate({"variant": "2.0", "editing_threshold": 0.5})
    with pytest.raises(ValidationError, match="steps"):
        P.model_validate({"variant": "2.1", "steps": 8})
    with pytest.raises(ValidationError, match="use_cache"):
        P.model_validate({"variant": "2.1", "official_soft_mask": True})
    assert P.model_validate({"variant": "2.1", "official_soft_mask": True, "use_cache": False}).official_soft_mask
    with pytest.raises(ValidationError, match="minimal_topk"):
        P.model_validate({"gen_length": 2, "minimal_topk": 3})
    with pytest.raises(ValidationError):
        P.model_validate({"block_size": 32})


def test_check_compares_block_length_with_the_models_block_size():
    fam = LLaDA2Family()
    ctx = SimpleNamespace(family=fam, model_config={"model_type": "llada2_moe"})
    assert LLaDA2Sampler({"block_length": 32}).check(ctx, "sampler") == []
    assert LLaDA2Sampler({}).check(ctx, "sampler") == []
    (problem,) = LLaDA2Sampler({"block_length": 16}).check(ctx, "sampler")
    assert problem[0] == "sampler.params.block_length" and "32" in problem[1]
    ctx = SimpleNamespace(family=fam, model_config={"model_type": "llada2_moe", "block_size": 16})
    assert LLaDA2Sampler({"block_length": 16}).check(ctx, "sampler") == []
    llada = get_registry().get("model_family", "llada").create()
    (problem,) = LLaDA2Sampler({}).check(SimpleNamespace(family=llada, model_config={}), "sampler")
    assert problem[0] == "sampler.name"
