"""HF-native generation: every family's model.generate() decodes or raises a clear error; transformers-style calls."""

from __future__ import annotations

import pytest
import torch

from dare.errors import DareError
from dare.sampling.hf import GenerateArgumentError, parse_generate_call

PROMPT = torch.tensor([[3, 4, 5]])


def test_parse_reads_transformers_conventions():
    from transformers import GenerationConfig

    call = parse_generate_call(None, {"input_ids": PROMPT, "max_length": 7, "pad_token_id": 0}, owner="m.generate")
    assert (call.max_new_tokens, call.temperature, call.top_k, call.top_p) == (4, None, None, None)
    call = parse_generate_call(PROMPT, {"do_sample": False, "temperature": 0.7, "max_new_tokens": 2}, owner="m")
    assert call.temperature == 0.0 and call.max_new_tokens == 2
    call = parse_generate_call(PROMPT, {"do_sample": True}, owner="m")
    assert call.temperature == 1.0  # transformers' default temperature when sampling
    # a GenerationConfig contributes only what it sets (not transformers' top_k=50 default); kwargs win
    config = GenerationConfig(max_new_tokens=5, do_sample=True, temperature=0.5)
    call = parse_generate_call(PROMPT, {"generation_config": config, "max_new_tokens": 6}, owner="m",
                               sampling=("temperature", "top_k", "top_p"))
    assert (call.max_new_tokens, call.temperature, call.top_k) == (6, 0.5, None)
    enc = {"input_ids": PROMPT, "attention_mask": torch.ones_like(PROMPT)}
    assert parse_generate_call(enc, {}, owner="m").attention_mask is enc["attention_mask"]


@pytest.mark.parametrize("kwargs, match", [
    ({"num_beams": 3}, "num_beams=3"),
    ({"stop_strings": ["\n"]}, "stop_strings"),
    ({"do_sample": True, "top_p": 0.9}, "top_p"),
    ({"max_length": 3}, "no room"),
    ({"max_new_tokens": 0}, "positive"),
    ({"do_sample": True, "temperature": 0.0}, "temperature > 0"),
])
def test_parse_rejects_what_a_sampler_cannot_honour(kwargs, match):
    with pytest.raises(GenerateArgumentError, match=match):
        parse_generate_call(PROMPT, dict(kwargs), owner="m.generate")
    assert issubclass(GenerateArgumentError, DareError)


@pytest.mark.parametrize("family", ["llada", "dream", "sdar", "llada2"])
def test_every_family_generates_or_says_what_to_call(family, tmp_path):
    """``model.generate`` with transformers' arguments never fails with AttributeError/TypeError."""
    from dare.testing import tiny_model

    lm = tiny_model(family, tmp_path / family, seed=0)
    model = lm.model.eval()
    assert type(model).can_generate() and model.generation_config is not None
    kwargs = dict(input_ids=PROMPT + 10, attention_mask=torch.ones_like(PROMPT), max_new_tokens=8, do_sample=False)
    if family == "dream":
        kwargs["steps"] = 8
    try:
        out = model.generate(**kwargs)
    except GenerateArgumentError as exc:  # LLaDA2: the release's generate() has another contract
        assert family == "llada2" and "model.generate(prompt_ids [1, Lp]" in str(exc)
        return
    assert out.shape == (1, 3 + 8) and torch.equal(out[:, :3], PROMPT + 10)
