"""The SDAR block decoder: exact schedules on a logits stub, real-model cache/batch equivalence, spec checks."""

from __future__ import annotations

import math

import pytest
import torch

from dare.components import SpecialTokens
from dare.errors import DareError, SpecError
from dare.sampling import NonFiniteLogitsError
from dare.runspec import validate_spec
from dare.testing import LogitsStub, tiny_model
from dare_sdar.errors import SDARInputError
from dare_sdar.family import SDARFamily
from dare_sdar.sampler import SDARSampler, block_diffusion_generate

V, MASK, EOS, EOT = 16, 15, 1, 2
TOKENS = SpecialTokens(mask_id=MASK, eos_id=EOS, pad_id=EOS, eot_id=EOT)


def block_stub(proposals: list[int], confidences: list[float], block: int = 4) -> LogitsStub:
    """Position ``i`` (of any input) proposes ``proposals[i % block]`` with exactly ``confidences[i % block]``:
    that token's logit is ``log(14 p / (1 - p))`` and the 14 other non-mask tokens have logit 0."""
    table = torch.zeros(block, V)
    for j, (tok, p) in enumerate(zip(proposals, confidences)):
        table[j, tok] = math.log(14 * p / (1 - p))
    table[:, MASK] = 50.0  # the decoder must never propose the mask token, however likely

    def fn(ids):
        return table[torch.arange(ids.shape[1]) % block].expand(ids.shape[0], -1, -1).clone()

    return LogitsStub(fn)


def decode(stub, prompt, use_cache=True, attention_mask=None, **params):
    sampler = SDARSampler({"gen_length": 8, "block_length": 4, "denoising_steps": 4, **params, "use_cache": use_cache})
    return sampler.generate(stub, SDARFamily(), TOKENS, prompt, attention_mask)


PROMPT = torch.tensor([[5, 6, 7, 8]])


@pytest.mark.parametrize("use_cache", [True, False])
def test_static_remasking_commits_the_most_confident_first(use_cache):
    stub = block_stub([3, 4, 5, 6], [0.4, 0.9, 0.1, 0.6])
    out = decode(stub, PROMPT, use_cache, remasking="low_confidence_static")
    assert out.completions.tolist() == [[3, 4, 5, 6, 3, 4, 5, 6]]
    assert out.unmask_step.tolist() == [[2, 0, 3, 1, 6, 4, 7, 5]]  # order 1, 3, 0, 2 in each block
    assert (out.nfe, out.steps) == (8, 8)
    assert out.extras["forward_passes"] == stub.calls == (8 + 1 + 2 if use_cache else 8)  # + prefill + 2 commits


def test_quota_schedule_block_length_over_steps():
    stub = block_stub([3, 4, 5, 6], [0.4, 0.9, 0.1, 0.6])
    out = decode(stub, PROMPT, remasking="low_confidence_static", denoising_steps=2)  # quota [2, 2]
    assert out.unmask_step.tolist() == [[1, 0, 1, 0, 3, 2, 3, 2]] and out.nfe == 4 and out.steps == 4


def test_dynamic_remasking_commits_everything_above_the_threshold():
    stub = block_stub([3, 4, 5, 6], [0.4, 0.9, 0.1, 0.6])
    out = decode(stub, PROMPT, remasking="low_confidence_dynamic", confidence_threshold=0.5)
    # step 0: 0.9 and 0.6 pass the threshold (>= quota 1); then the quota's top-1: 0.4, then 0.1
    assert out.unmask_step.tolist() == [[1, 0, 2, 0, 5, 4, 6, 4]] and out.nfe == 6


def test_sequential_remasking_goes_left_to_right():
    stub = block_stub([3, 4, 5, 6], [0.4, 0.9, 0.1, 0.6])
    out = decode(stub, PROMPT, remasking="sequential", denoising_steps=2)
    assert out.unmask_step.tolist() == [[0, 0, 1, 1, 2, 2, 3, 3]]


@pytest.mark.parametrize("use_cache", [True, False])
def test_a_row_stops_after_the_block_with_eos(use_cache):
    stub = block_stub([3, 4, EOS, 6], [0.4, 0.9, 0.8, 0.6])
    out = decode(stub, PROMPT, use_cache, remasking="low_confidence_static")
    assert out.completions.tolist() == [[3, 4, EOS, 6, MASK, MASK, MASK, MASK]]
    assert out.completion_mask.tolist() == [[True, True, True, False, False, False, False, False]]
    assert out.unmask_step[0, 4:].tolist() == [-1] * 4 and out.nfe == 4
    unstopped = decode(stub, PROMPT, use_cache, remasking="low_confidence_static", stop_at_eos=False)
    assert unstopped.completions.tolist() == [[3, 4, EOS, 6, 3, 4, EOS, 6]] and unstopped.nfe == 8


def test_prompt_tail_is_never_overwritten_when_the_quota_exceeds_the_masks():
    """Prompt of 6: the first decoded block holds 2 prompt tokens and 2 masks while the quota is 4 (one step);
    the official topk would overwrite the two prompt tokens with proposals 3 and 4."""
    prompt = torch.tensor([[9, 10, 11, 12, 13, 14]])
    stub = block_stub([3, 4, 5, 6], [0.4, 0.9, 0.1, 0.6])
    out = decode(stub, prompt, remasking="low_confidence_static", denoising_steps=1, block_length=4, gen_length=8)
    assert out.sequences[0, :6].tolist() == prompt[0].tolist()
    assert out.completions.tolist() == [[5, 6, 3, 4, 5, 6, 3, 4]]  # block 1 (tail 2 masks), block 2, then block 3 cut
    assert out.unmask_step.tolist() == [[0, 0, 1, 1, 1, 1, 2, 2]]


# the shared proposal rule (sample_tokens, top-k before top-p, greedy confidence) is tested in tests/test_sampling_tokens.py


@pytest.mark.parametrize("use_cache, nan_from_call, where", [
    (True, 1, "completion block 0, denoising step 0"),  # call 1 is the prompt prefill: the first step sees NaN
    (True, 7, "completion block 1, denoising step 0"),  # prefill + 4 steps + commit of block 0, then block 1
    (False, 5, "completion block 1, denoising step 0"),
])
@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_non_finite_logits_raise_naming_block_and_step(use_cache, nan_from_call, where, temperature):
    """Before: greedy decoding emitted token 0 for NaN logits (argmax of NaN), sampling raised torch's RuntimeError."""
    good = block_stub([3, 4, 5, 6], [0.4, 0.9, 0.1, 0.6])

    def fn(ids):
        logits = good.fn(ids)
        return torch.full_like(logits, torch.nan) if stub.calls >= nan_from_call else logits

    stub = LogitsStub(fn)
    sampler = SDARSampler({"gen_length": 8, "block_length": 4, "denoising_steps": 4, "use_cache": use_cache,
                           "remasking": "low_confidence_static", "temperature": temperature, "stop_at_eos": False})
    with pytest.raises(NonFiniteLogitsError, match=f"non-finite logits at {where}.*diverged") as err:
        sampler.generate(stub, SDARFamily(), TOKENS, PROMPT, generator=torch.Generator().manual_seed(0))
    assert isinstance(err.value, DareError)


def test_bad_arguments_fail_before_any_forward():
    stub = block_stub([3, 4, 5, 6], [0.4, 0.9, 0.1, 0.6])
    with pytest.raises(SDARInputError, match="left padding"):
        decode(stub, torch.tensor([[5, 6, 7, 8]]), attention_mask=torch.tensor([[1, 1, 0, 1]]))
    with pytest.raises(SDARInputError, match="remasking_strategy"):
        block_diffusion_generate(stub, PROMPT, MASK, remasking_strategy="entropy_bounded")
    assert stub.calls == 0


@pytest.fixture(scope="module")
def lm(tmp_path_factory):
    return tiny_model("sdar", tmp_path_factory.mktemp("sdar"), seed=3)


def test_cache_batching_and_padding_do_not_change_the_tokens(lm):
    """Real tiny model, greedy: cached == uncached, and each row of a left-padded batch == that row alone."""
    model = lm.model.eval()
    torch.manual_seed(0)
    rows = [torch.randint(10, 200, (n,)) for n in (5, 9, 2)]
    width = max(len(r) for r in rows)
    batch = torch.stack([torch.cat([torch.full((width - len(r),), lm.tokens.pad_id), r]) for r in rows])
    attn = torch.stack([torch.cat([torch.zeros(width - len(r)), torch.ones(len(r))]).long() for r in rows])
    sampler = SDARSampler({"gen_length": 12, "block_length": 4, "denoising_steps": 2, "confidence_threshold": 0.05,
                           "stop_at_eos": False})
    cached = sampler.generate(model, SDARFamily(), lm.tokens, batch, attn)
    sampler.params.use_cache = False
    uncached = sampler.generate(model, SDARFamily(), lm.tokens, batch, attn)
    assert torch.equal(cached.sequences, uncached.sequences)
    assert torch.equal(cached.unmask_step, uncached.unmask_step) and cached.nfe == uncached.nfe
    for i, r in enumerate(rows):
        x = block_diffusion_generate(model, r[None], lm.tokens.mask_id, gen_length=12, block_length=4, denoising_steps=2,
                                     temperature=0.0, confidence_threshold=0.05)
        assert cached.completions[i].tolist() == x[0, len(r) : len(r) + 12].tolist()


def left_pad(rows: list[torch.Tensor], pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``(ids [B, W], attention_mask [B, W])`` of ``rows`` left-padded to the longest."""
    width = max(len(r) for r in rows)
    ids = torch.full((len(rows), width), pad_id, dtype=torch.long)
    attn = torch.zeros(len(rows), width, dtype=torch.long)
    for i, r in enumerate(rows):
        ids[i, width - len(r):], attn[i, width - len(r):] = r, 1
    return ids, attn


@pytest.mark.parametrize("use_cache", [True, False])
def test_batch_1_4_16_with_left_padding_give_the_same_tokens(lm, use_cache):
    """Evaluation must not depend on the batch size (greedy, fp32)."""
    model = lm.model.eval()
    g = torch.Generator().manual_seed(11)
    lengths = [1, 2, 3, 4, 5, 7, 8, 9, 11, 12, 13, 3, 6, 10, 4, 2]  # tails of 0..3 tokens in a block of 4
    rows = [torch.randint(10, 200, (n,), generator=g) for n in lengths]
    sampler = SDARSampler({"gen_length": 8, "block_length": 4, "denoising_steps": 2, "confidence_threshold": 0.05,
                           "use_cache": use_cache})

    def run(chunk):
        return sampler.generate(model, SDARFamily(), lm.tokens, *left_pad(chunk, lm.tokens.pad_id))

    alone = [run([r]) for r in rows]
    for size in (4, 16):
        for start in range(0, len(rows), size):
            out = run(rows[start : start + size])
            for j, one in enumerate(alone[start : start + size]):
                assert torch.equal(out.completions[j], one.completions[0]), (size, start + j)
                assert torch.equal(out.unmask_step[j], one.unmask_step[0]), (size, start + j)
                assert torch.equal(out.completion_mask[j], one.completion_mask[0]), (size, start + j)
    assert len({tuple(o.completions[0].tolist()) for o in alone}) > 8  # the prompts lead to different answers


def _spec(tmp_path, family="sdar", config=None, **sampler_params):
    return {
        "model": {"new": {"family": family, "preset": "tiny", "config": config or {}}},
        "sampler": {"name": "sdar", "params": sampler_params},
        "output": {"dir": str(tmp_path / "run")},
    }


def test_spec_validation_names_the_sampler_field(tmp_path):
    validate_spec(_spec(tmp_path, gen_length=16, block_length=8))
    with pytest.raises(SpecError, match="gen_length \\(10\\) must be a multiple of block_length"):
        validate_spec(_spec(tmp_path, gen_length=10))
    with pytest.raises(SpecError) as err:
        validate_spec(_spec(tmp_path, config={"block_size": 8}, gen_length=12, block_length=4, denoising_steps=4))
    locs = [loc for loc, _ in err.value.problems]
    assert locs == ["sampler.params.block_length", "sampler.params.gen_length"]
    assert "block size 8" in str(err.value)
    with pytest.raises(SpecError, match="sampler.name.*block-attention"):
        validate_spec(_spec(tmp_path, family="llada"))


@pytest.mark.parametrize("remasking", ["low_confidence_dynamic", "low_confidence_static", "sequential"])
@pytest.mark.parametrize("use_cache", [True, False])
def test_sampled_batch_of_4_equals_the_rows_decoded_alone_with_keyed_row_generators(lm, remasking, use_cache):
    """Temperature 1: only rows with masks in the block draw, each from its own keyed generator, so a row's
    sample depends neither on the other rows nor on the batch's alignment (RL rollouts, sampled evaluation)."""
    from dare.testing import decode_batched_and_alone

    assert SDARSampler.supports_row_generators
    g = torch.Generator().manual_seed(5)
    rows = [torch.randint(10, 200, (n,), generator=g) for n in (3, 9, 1, 6)]
    sampler = SDARSampler({"gen_length": 8, "block_length": 4, "denoising_steps": 2, "confidence_threshold": 0.05,
                           "temperature": 1.0, "remasking": remasking, "use_cache": use_cache})
    batched, alone = decode_batched_and_alone(sampler, lm.model.eval(), SDARFamily(), lm.tokens, rows, seed=0)
    for i, one in enumerate(alone):
        assert torch.equal(batched.completions[i], one.completions[0]), i
        assert torch.equal(batched.unmask_step[i], one.unmask_step[0]), i
    other, _ = decode_batched_and_alone(sampler, lm.model.eval(), SDARFamily(), lm.tokens, rows[:1], seed=1)
    assert not torch.equal(other.completions[0], batched.completions[0])  # the draws are keyed by the seed
