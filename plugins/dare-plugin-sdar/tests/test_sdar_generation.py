"""SDAR's HF-native generation: the release's block_diffusion_generate as a method, and generate() == the sdar sampler."""

from __future__ import annotations

import pytest
import torch

from dare.components import SpecialTokens
from dare.sampling.hf import GenerateArgumentError
from dare.testing import tiny_model
from dare_sdar.family import SDARFamily
from dare_sdar.sampler import SDARSampler, block_diffusion_generate


@pytest.fixture(scope="module")
def lm(tmp_path_factory):
    loaded = tiny_model("sdar", tmp_path_factory.mktemp("sdar-gen"), seed=3)
    loaded.model.eval()
    return loaded


def _batch(lm):
    pad = lm.tokens.pad_id
    prompts = torch.tensor([[pad, pad, pad, 40, 41, 42], [50, 51, 52, 53, 54, 55]])
    return prompts, (prompts != pad).long()


def test_generate_equals_the_sdar_sampler_greedy(lm):
    prompts, attn = _batch(lm)
    config_tokens = SpecialTokens(mask_id=lm.tokens.mask_id, eos_id=lm.tokens.eos_id, pad_id=lm.tokens.pad_id)
    settings = dict(gen_length=8, block_length=4, denoising_steps=2, confidence_threshold=0.05)
    want = SDARSampler(settings).generate(lm.model, SDARFamily(), config_tokens, prompts, attn).sequences
    got = lm.model.generate(prompts, attn, max_new_tokens=8, denoising_steps=2, confidence_threshold=0.05)
    assert got.shape == (2, 6 + 8) and torch.equal(got, want)
    assert len(set(got[:, 6:].flatten().tolist())) > 1
    # explicit stop ids (EOS + end-of-turn) give what the sampler does with the tokenizer's ids
    want = SDARSampler(settings).generate(lm.model, SDARFamily(), lm.tokens, prompts, attn).sequences
    got = lm.model.generate(input_ids=prompts, attention_mask=attn, max_new_tokens=8, do_sample=False, denoising_steps=2,
                            confidence_threshold=0.05, stop_ids=[lm.tokens.eos_id, lm.tokens.eot_id])
    assert torch.equal(got, want)


def test_sampling_with_a_generator(lm):
    prompts, attn = _batch(lm)
    settings = dict(gen_length=8, block_length=4, denoising_steps=4, temperature=0.8, top_k=20, top_p=0.9)
    config_tokens = SpecialTokens(mask_id=lm.tokens.mask_id, eos_id=lm.tokens.eos_id, pad_id=lm.tokens.pad_id)
    want = SDARSampler(settings).generate(lm.model, SDARFamily(), config_tokens, prompts, attn,
                                          generator=torch.Generator().manual_seed(4)).sequences
    got = lm.model.generate(prompts, attn, max_new_tokens=8, do_sample=True, temperature=0.8, top_k=20, top_p=0.9,
                            generator=torch.Generator().manual_seed(4))
    assert torch.equal(got, want)


def test_block_diffusion_generate_method_is_the_release_function(lm):
    prompt = torch.tensor([[40, 41, 42, 43, 44]])
    kw = dict(gen_length=8, block_length=4, denoising_steps=2, temperature=0.0, confidence_threshold=0.05,
              stopping_criteria_idx=[lm.tokens.eos_id])
    got = lm.model.block_diffusion_generate(prompt, **kw)
    assert torch.equal(got, block_diffusion_generate(lm.model, prompt, lm.tokens.mask_id, **kw))
    assert got.shape == (1, 16)  # ceil((5 + 8) / 4) blocks of 4, as the release
    assert torch.equal(lm.model.block_diffusion_generate({"input_ids": prompt}, lm.tokens.mask_id, **kw), got)


def test_bad_calls_name_the_argument(lm):
    prompts, attn = _batch(lm)
    with pytest.raises(GenerateArgumentError, match=r"gen_length \(6\) must be a multiple of block_length \(4\)"):
        lm.model.generate(prompts, attn, max_new_tokens=6)
    with pytest.raises(GenerateArgumentError, match="num_beams=2.*block_diffusion_generate"):
        lm.model.generate(prompts, attn, max_new_tokens=8, num_beams=2)
    with pytest.raises(GenerateArgumentError, match="stop_ids"):
        lm.model.generate(prompts, attn, max_new_tokens=8, stop_ids=[])


def test_pipeline_text_generation(lm):
    from transformers import pipeline

    assert type(lm.model).can_generate()
    pipe = pipeline("text-generation", model=lm.model, tokenizer=lm.tokenizer)
    out = pipe("ab", max_new_tokens=8, do_sample=False, return_full_text=False)
    ids = lm.tokenizer("ab", return_tensors="pt")["input_ids"]
    want = lm.model.generate(ids, max_new_tokens=8)
    assert out[0]["generated_text"] == lm.tokenizer.decode(want[0, ids.shape[1]:], skip_special_tokens=True)
