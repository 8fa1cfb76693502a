"""LLaDA sampler: transfer schedule, remasking and trajectory, exactly, on scripted logits."""

from __future__ import annotations

import pytest
import torch
from pydantic import ValidationError

from dare.components import SpecialTokens
from dare.sampling import num_transfer_tokens
from dare.testing import LogitsStub

MASK, EOS, V = 9, 0, 10


def test_transfer_schedule():
    mask = torch.tensor([[True] * 7 + [False], [True] * 3 + [False] * 5])
    assert num_transfer_tokens(mask, 3).tolist() == [[3, 2, 2], [1, 1, 1]]
    assert num_transfer_tokens(mask[:1], 8).tolist() == [[1, 1, 1, 1, 1, 1, 1, 0]]


def _stub():
    """Token j at position i is proposed with probability rising with i (later = more confident);
    the proposed token at completion position p is (p % 7) + 1."""

    def fn(ids):
        B, L = ids.shape
        logits = torch.full((B, L, V), -5.0)
        for i in range(L):
            logits[:, i, (i % 7) + 1] = float(i)  # confidence grows with position
        return logits

    return LogitsStub(fn)


def _family():
    from dare.plugins.manager import get_registry

    return get_registry().get("model_family", "llada").create()


def test_decode_commits_most_confident_inside_the_block_and_records_steps():
    from dare_llada.sampler import decode, decode_options

    model = _stub()
    prompt = torch.tensor([[5, 6]])
    x, steps, nfe = decode(lambda ids, am: model(ids).logits, prompt, None,
                           decode_options(steps=4, gen_length=8, block_length=4, mask_id=MASK))
    # proposals: position i -> (i % 7) + 1, for i = 2..9
    assert x.tolist() == [[5, 6, 3, 4, 5, 6, 7, 1, 2, 3]]
    # 2 blocks x 2 steps, 2 tokens per step; inside a block the later (more confident) positions go first
    assert steps.tolist() == [[1, 1, 0, 0, 3, 3, 2, 2]]
    assert nfe == 4 and model.calls == 4


def test_low_confidence_with_uneven_schedule_and_padding():
    from dare_llada.sampler import decode, decode_options

    model = _stub()
    prompt = torch.tensor([[EOS, 5], [4, 5]])
    am = torch.tensor([[0, 1], [1, 1]])
    x, steps, nfe = decode(lambda ids, a: model(ids).logits, prompt, am,
                           decode_options(steps=3, gen_length=5, block_length=5, mask_id=MASK))
    # 5 tokens over 3 steps: 2, 2, 1 — most confident (rightmost) first
    assert steps.tolist() == [[2, 1, 1, 0, 0], [2, 1, 1, 0, 0]]
    assert nfe == 3


def test_random_remasking_uses_the_generator():
    from dare_llada.sampler import decode, decode_options

    model = _stub()
    prompt = torch.tensor([[5, 6]])
    outs = []
    for seed in (0, 0, 1):
        g = torch.Generator().manual_seed(seed)
        _, steps, _ = decode(lambda ids, am: model(ids).logits, prompt, None,
                             decode_options(steps=8, gen_length=8, block_length=8, mask_id=MASK, remasking="random",
                                            generator=g))
        outs.append(steps.tolist())
    assert outs[0] == outs[1] != outs[2]
    assert sorted(outs[0][0]) == list(range(8))


def test_sampler_component_returns_trajectory_and_completion_mask():
    from dare.plugins.manager import get_registry

    sampler = get_registry().get("sampler", "llada").create({"gen_length": 8, "block_length": 4, "steps": 4})
    tokens = SpecialTokens(mask_id=MASK, eos_id=EOS, pad_id=EOS)
    out = sampler.generate(_stub(), _family(), tokens, torch.tensor([[5, 6]]))
    assert out.completions.tolist() == [[3, 4, 5, 6, 7, 1, 2, 3]]
    assert out.unmask_step.tolist() == [[1, 1, 0, 0, 3, 3, 2, 2]]
    assert out.completion_mask.all()  # LLaDA: EOS padding is part of the response
    assert (out.nfe, out.steps, out.prompt_length) == (4, 4, 2)


def test_cfg_counts_two_evaluations_per_step():
    from dare_llada.sampler import decode, decode_options

    model = _stub()
    _, _, nfe = decode(lambda ids, am: model(ids).logits, torch.tensor([[5, 6]]), None,
                       decode_options(steps=4, gen_length=4, block_length=4, mask_id=MASK, cfg_scale=1.0))
    assert nfe == 8 and model.calls == 4  # one batched call of [cond; uncond] per step


@pytest.mark.parametrize(
    "params, field",
    [
        ({"gen_length": 17, "block_length": 8, "steps": 16}, "gen_length (17) must be a multiple of block_length (8)"),
        ({"gen_length": 16, "block_length": 8, "steps": 15}, "steps (15) must be a multiple"),
        ({"gen_length": 16, "block_length": 8, "steps": 16, "temperature": -1}, "temperature"),
        ({"gen_length": 16, "block_length": 8, "steps": 16, "remasking": "entropy"}, "remasking"),
    ],
)
def test_params_validation(params, field):
    from dare.plugins.manager import get_registry

    cls = get_registry().get("sampler", "llada").cls
    with pytest.raises(ValidationError, match=field.replace("(", r"\(").replace(")", r"\)")):
        cls.Params(**params)
