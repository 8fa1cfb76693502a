"""LLaDA's HF-native generate(): the release's generate.py arguments as a method, equal to DARE's llada sampler."""

from __future__ import annotations

import pytest
import torch

from dare.sampling.hf import GenerateArgumentError


@pytest.fixture(scope="module")
def lm(tiny_llada_dir):
    from dare.modeling import load_model

    loaded = load_model(tiny_llada_dir)
    loaded.model.eval()
    return loaded


def _batch(lm):
    pad = lm.tokens.pad_id
    prompts = torch.tensor([[pad, pad, 40, 41, 42], [50, 51, 52, 53, 54]])
    return prompts, (prompts != pad).long()


def test_generate_equals_the_llada_sampler_greedy_and_seeded(lm):
    from dare_llada.family import LLaDAFamily
    from dare_llada.sampler import LLaDASampler

    prompts, attn = _batch(lm)
    settings = dict(gen_length=8, block_length=4, steps=4)
    want = LLaDASampler(settings).generate(lm.model, LLaDAFamily(), lm.tokens, prompts, attn).sequences
    got = lm.model.generate(prompts, attn, **settings)
    assert got.shape == (2, 5 + 8) and torch.equal(got, want)
    assert len(set(got[:, 5:].flatten().tolist())) > 1  # not a degenerate constant completion
    # sampling: the same generator seed gives the sampler's tokens
    sampled = dict(settings, temperature=1.0, remasking="random")
    want = LLaDASampler(sampled).generate(lm.model, LLaDAFamily(), lm.tokens, prompts, attn,
                                          generator=torch.Generator().manual_seed(3)).sequences
    got = lm.model.generate(prompts, attn, **sampled, generator=torch.Generator().manual_seed(3))
    assert torch.equal(got, want)


def test_release_call_matches_the_official_function(lm):
    """``model.generate(prompt, ...)`` with generate.py's arguments returns what ``generate(model, prompt, ...)`` does."""
    from dare_llada.sampler import generate

    prompt = torch.tensor([[40, 41, 42, 43]])
    kw = dict(steps=6, gen_length=6, block_length=3, temperature=0.0, cfg_scale=0.0, remasking="low_confidence",
              mask_id=lm.tokens.mask_id)
    assert torch.equal(lm.model.generate(prompt, None, **kw), generate(lm.model, prompt, None, **kw))


def test_transformers_style_call(lm):
    prompts, attn = _batch(lm)
    want = lm.model.generate(prompts, attn, gen_length=6)  # block_length = steps = gen_length
    assert torch.equal(lm.model.generate(input_ids=prompts, attention_mask=attn, max_new_tokens=6, do_sample=False), want)
    assert torch.equal(lm.model.generate(input_ids=prompts, attention_mask=attn, max_length=11), want)
    from transformers import GenerationConfig

    config = GenerationConfig(max_new_tokens=6, do_sample=False)
    assert torch.equal(lm.model.generate(prompts, attention_mask=attn, generation_config=config, pad_token_id=1), want)


def test_bad_calls_name_the_argument(lm):
    prompts, attn = _batch(lm)
    with pytest.raises(GenerateArgumentError, match="num_beams=4"):
        lm.model.generate(prompts, attn, max_new_tokens=4, num_beams=4)
    with pytest.raises(GenerateArgumentError, match="top_k"):
        lm.model.generate(prompts, attn, max_new_tokens=4, do_sample=True, top_k=5)
    with pytest.raises(GenerateArgumentError, match=r"gen_length \(6\) must be a multiple of block_length \(4\)"):
        lm.model.generate(prompts, attn, gen_length=6, block_length=4)
    with pytest.raises(GenerateArgumentError, match="disagree"):
        lm.model.generate(prompts, attn, gen_length=6, max_new_tokens=8)
    with pytest.raises(GenerateArgumentError, match="int64"):
        lm.model.generate("a prompt")


def test_pipeline_text_generation(lm):
    from transformers import pipeline

    assert type(lm.model).can_generate()
    pipe = pipeline("text-generation", model=lm.model, tokenizer=lm.tokenizer)
    out = pipe("ab", max_new_tokens=4, do_sample=False, return_full_text=False)
    ids = lm.tokenizer("ab", return_tensors="pt")["input_ids"]
    want = lm.model.generate(ids, max_new_tokens=4)
    assert out[0]["generated_text"] == lm.tokenizer.decode(want[0, ids.shape[1]:], skip_special_tokens=True)
