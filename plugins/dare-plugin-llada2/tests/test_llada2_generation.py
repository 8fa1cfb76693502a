"""LLaDA2's HF-native generate(): the releases' model.generate(inputs, ...), equal to DARE's llada2 sampler."""

from __future__ import annotations

import pytest
import torch

from dare.sampling.hf import GenerateArgumentError
from dare_llada2.family import LLaDA2Family
from dare_llada2.sampler import LLaDA2Sampler, generate, generate_v21

PROMPT = torch.tensor([[40, 41, 42, 43, 44]])


def _until_eos(completion: torch.Tensor, eos: int) -> list[int]:
    row = completion[0].tolist()
    return row[: row.index(eos) + 1] if eos in row else row


@pytest.mark.parametrize("settings", [
    dict(gen_length=8, block_length=4, steps=4),
    dict(gen_length=8, block_length=4, steps=2, threshold=0.5),
    dict(variant="2.1", gen_length=8, block_length=4, editing_threshold=0.5, threshold=0.7),
])
def test_generate_equals_the_llada2_sampler_greedy(tiny_llada2, settings):
    lm = tiny_llada2
    res = LLaDA2Sampler(settings).generate(lm.model, LLaDA2Family(), lm.tokens, PROMPT)
    got = lm.model.generate(PROMPT, **settings)
    assert got.tolist()[0] == _until_eos(res.completions, lm.tokens.eos_id)
    assert len(set(got[0].tolist())) > 1


def test_release_signatures_and_variant_choice(tiny_llada2):
    lm = tiny_llada2
    ids = dict(eos_id=lm.tokens.eos_id, mask_id=lm.tokens.mask_id)
    v20 = generate(lm.model, PROMPT, 0.0, 4, 4, 8, None, None, False, 1, 0.9, **ids)
    assert torch.equal(lm.model.generate(PROMPT, 0.0, 4, 4, 8, None, None, False, 1, 0.9), v20)  # positional, as 2.0
    v21 = generate_v21(lm.model, PROMPT, block_length=4, gen_length=8, editing_threshold=0.5, **ids)
    assert torch.equal(lm.model.generate(PROMPT, block_length=4, gen_length=8, editing_threshold=0.5), v21)
    assert torch.equal(lm.model.generate(PROMPT, block_length=4, gen_length=8, variant="2.1"),
                       generate_v21(lm.model, PROMPT, block_length=4, gen_length=8, **ids))
    with pytest.raises(GenerateArgumentError, match="editing_threshold only apply to LLaDA2.1"):
        lm.model.generate(PROMPT, gen_length=8, variant="2.0", editing_threshold=0.5)


def test_transformers_style_calls_explain_the_release_call(tiny_llada2):
    lm = tiny_llada2
    with pytest.raises(GenerateArgumentError, match=r"input_ids, max_new_tokens.*generated tokens only.*llada2 sampler"):
        lm.model.generate(input_ids=PROMPT, max_new_tokens=8)
    with pytest.raises(GenerateArgumentError, match="unknown arguments foo"):
        lm.model.generate(PROMPT, foo=1)
    from transformers import pipeline

    assert type(lm.model).can_generate()
    pipe = pipeline("text-generation", model=lm.model, tokenizer=lm.tokenizer)
    with pytest.raises(GenerateArgumentError, match="pipeline\\('text-generation'\\) do not apply"):
        pipe("ab", max_new_tokens=8, do_sample=False)
