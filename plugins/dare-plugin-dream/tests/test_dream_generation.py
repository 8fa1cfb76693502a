"""Dream's HF-native generation: the release's ``model.diffusion_generate``, equal to DARE's dream sampler."""

from __future__ import annotations

import pytest
import torch

from dare.components import SpecialTokens
from dare.sampling.hf import GenerateArgumentError
from dare_dream.family import DreamFamily
from dare_dream.generation import DreamModelOutput
from dare_dream.sampler import DreamSampler, diffusion_generate

TOKENS = SpecialTokens(mask_id=250, eos_id=1, pad_id=1)
PROMPTS = torch.tensor([[5, 6, 7, 8], [1, 1, 9, 10]])
ATTN = torch.tensor([[1, 1, 1, 1], [0, 0, 1, 1]])


def _sampler(**params):
    return DreamSampler(dict(release_quirks=True, temperature=0.0, **params))


@pytest.mark.parametrize("alg", ["entropy", "maskgit_plus", "topk_margin"])
def test_diffusion_generate_equals_the_dream_sampler_greedy(tiny, alg):
    want = _sampler(gen_length=8, steps=8, alg=alg).generate(tiny, DreamFamily(), TOKENS, PROMPTS, ATTN).sequences
    got = tiny.diffusion_generate(PROMPTS, attention_mask=ATTN, max_new_tokens=8, steps=8, alg=alg)
    assert torch.equal(got, want) and got.shape == (2, 12)
    assert len(set(got[:, 4:].flatten().tolist())) > 1
    # the drop-in function with the checkpoint's generation_config (top_k None), as the model's method uses it
    assert torch.equal(got, diffusion_generate(tiny, PROMPTS, ATTN, max_new_tokens=8, steps=8, alg=alg,
                                           generation_defaults="generation_config"))
    assert torch.equal(tiny.generate(PROMPTS, attention_mask=ATTN, max_new_tokens=8, steps=8, alg=alg), got)


def test_origin_with_a_generator_and_with_the_global_rng(tiny):
    seeded = lambda: torch.Generator().manual_seed(3)  # noqa: E731
    want = _sampler(gen_length=8, steps=8, alg="origin").generate(tiny, DreamFamily(), TOKENS, PROMPTS, ATTN,
                                                                  generator=seeded()).sequences
    got = tiny.diffusion_generate(PROMPTS, attention_mask=ATTN, max_new_tokens=8, steps=8, generator=seeded())
    assert torch.equal(got, want)
    torch.manual_seed(5)
    a = tiny.diffusion_generate(PROMPTS, attention_mask=ATTN, max_new_tokens=8, steps=8, temperature=0.7, top_p=0.9)
    torch.manual_seed(5)
    b = diffusion_generate(tiny, PROMPTS, ATTN, max_new_tokens=8, steps=8, temperature=0.7, top_p=0.9)
    assert torch.equal(a, b)


def test_return_dict_and_exact_history(tiny):
    out = tiny.diffusion_generate(PROMPTS, attention_mask=ATTN, max_new_tokens=6, steps=6, alg="entropy",
                                  return_dict_in_generate=True, output_history=True)
    assert isinstance(out, DreamModelOutput) and len(out.history) == 6
    res = _sampler(gen_length=6, steps=6, alg="entropy").generate(tiny, DreamFamily(), TOKENS, PROMPTS, ATTN)
    assert torch.equal(out.sequences, res.sequences) and torch.equal(out.history[-1], res.sequences)
    for i, x in enumerate(out.history):  # after step i exactly the tokens committed at steps <= i are revealed
        revealed = (res.unmask_step <= i) & (res.unmask_step >= 0)
        assert torch.equal(x[:, 4:] != 250, revealed)
        assert torch.equal(x[:, 4:][revealed], res.sequences[:, 4:][revealed])
    plain = tiny.diffusion_generate(PROMPTS, attention_mask=ATTN, max_new_tokens=6, steps=6, alg="entropy",
                                    return_dict_in_generate=True)
    assert plain.history is None and torch.equal(plain.sequences, out.sequences)


def test_settings_from_generation_config_kwargs_and_defaults(tiny):
    from transformers import GenerationConfig

    want = tiny.diffusion_generate(PROMPTS, attention_mask=ATTN, max_new_tokens=4, steps=4, alg="entropy")
    config = GenerationConfig(max_new_tokens=4, steps=4, alg="maskgit_plus", do_sample=False)
    assert torch.equal(tiny.diffusion_generate(PROMPTS, config, attention_mask=ATTN, alg="entropy"), want)  # kwargs win
    # transformers' pipeline-style call: do_sample=False is greedy even with a temperature
    got = tiny.generate(input_ids=PROMPTS, attention_mask=ATTN, max_new_tokens=4, steps=4, alg="entropy",
                        do_sample=False, temperature=0.7, pad_token_id=1)
    assert torch.equal(got, want)
    # max_length counts the prompt; num_return_sequences repeats each prompt
    assert torch.equal(tiny.diffusion_generate(PROMPTS, attention_mask=ATTN, max_length=8, steps=4, alg="entropy"), want)
    rep = tiny.diffusion_generate(PROMPTS, attention_mask=ATTN, max_new_tokens=4, steps=4, alg="entropy",
                                  num_return_sequences=2)
    assert torch.equal(rep, want.repeat_interleave(2, dim=0))
    # the release's default length: 20 new tokens, with its warning
    with pytest.warns(UserWarning, match="max_new_tokens"):
        assert tiny.diffusion_generate(PROMPTS[:1], steps=2).shape == (1, 24)


def test_logits_hook_sees_each_step_and_can_steer(tiny):
    seen = []

    def ban_token_7(step, x, logits):
        seen.append(step)
        logits = logits.clone()
        logits[..., 7] = -torch.inf
        return logits

    x = tiny.diffusion_generate(PROMPTS, attention_mask=ATTN, max_new_tokens=6, steps=3, alg="entropy",
                                generation_logits_hook_func=ban_token_7)
    assert seen == [0, 1, 2] and not bool((x[:, 4:] == 7).any())


def test_unsupported_arguments_raise_naming_them(tiny):
    with pytest.raises(GenerateArgumentError, match="generation_tokens_hook_func"):
        tiny.diffusion_generate(PROMPTS, max_new_tokens=2, steps=2, generation_tokens_hook_func=lambda s, x, l: x)
    with pytest.raises(GenerateArgumentError, match="does not take num_beams"):
        tiny.generate(PROMPTS, max_new_tokens=2, steps=2, num_beams=2)
    with pytest.raises(GenerateArgumentError, match="no room"):
        tiny.diffusion_generate(PROMPTS, max_length=3)
    with pytest.raises(GenerateArgumentError, match="int64"):
        tiny.diffusion_generate(None)


def test_pipeline_text_generation(tiny_dream_dir):
    from transformers import pipeline

    from dare.modeling import load_model

    lm = load_model(tiny_dream_dir)
    assert type(lm.model).can_generate()
    pipe = pipeline("text-generation", model=lm.model, tokenizer=lm.tokenizer)
    out = pipe("ab", max_new_tokens=4, steps=4, alg="entropy", do_sample=False, return_full_text=False)
    ids = lm.tokenizer("ab", return_tensors="pt")["input_ids"]
    want = lm.model.diffusion_generate(ids, max_new_tokens=4, steps=4, alg="entropy")
    assert out[0]["generated_text"] == lm.tokenizer.decode(want[0, ids.shape[1]:], skip_special_tokens=True)
