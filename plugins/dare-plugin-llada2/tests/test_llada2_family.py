"""LLaDA2 family adapter and decoding with the tiny model: block-diffusion logits, chat template, cache, batches."""

from __future__ import annotations

import json

import jinja2
import pytest
import torch

from dare.diffusion.block import block_causal_mask, block_diffusion_inputs
from dare.modeling.tokenizer import build_byte_tokenizer
from dare.plugins.manager import get_registry
from dare.testing import shared_path
from dare_llada2.family import LLaDA2Family
from dare_llada2.sampler import LLaDA2Sampler, decode, decode_options


def test_registered_family_facts():
    fam = get_registry().get("model_family", "llada2").create()
    assert type(fam) is LLaDA2Family
    assert (fam.model_types, fam.attention, fam.pad_in_response, fam.default_sampler) == (
        ("llada2_moe",), "block", False, "llada2")
    assert fam.block_size({"model_type": "llada2_moe"}) == 32
    assert fam.block_size({"block_size": 8}) == 8
    assert get_registry().get("sampler", "llada2").cls is LLaDA2Sampler


def test_fresh_tokenizer_ids_and_config(tiny_llada2):
    tok, tokens = tiny_llada2.tokenizer, tiny_llada2.tokens
    assert [tok.convert_ids_to_tokens(i) for i in (tokens.mask_id, tokens.eos_id, tokens.eot_id)] == [
        "<|mask|>", "<|endoftext|>", "<|role_end|>"]
    cfg = tiny_llada2.model.config
    assert (cfg.pad_token_id, cfg.mask_token_id, cfg.vocab_size) == (tokens.pad_id, tokens.mask_id, len(tok))


def test_chat_template_renders_like_the_release():
    card = shared_path("model-cards", "LLaDA2.0-mini")
    release = json.loads((card / "tokenizer_config.json").read_text())["chat_template"]
    env = jinja2.Environment(trim_blocks=True, lstrip_blocks=True)
    chats = [
        [{"role": "user", "content": "What is 2+3?"}],
        [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"},
         {"role": "assistant", "content": "Hello."}, {"role": "user", "content": "Sum 1 2"}],
    ]
    for messages in chats:
        want = env.from_string(release).render(messages=messages, add_generation_prompt=True, tools=None)
        got = env.from_string(LLaDA2Family.chat_template).render(messages=messages, add_generation_prompt=True)
        assert got == want
    assert want.startswith("<role>SYSTEM</role>Be brief.\ndetailed thinking off<|role_end|><role>HUMAN</role>Hi")
    assert want.endswith("<|role_end|><role>ASSISTANT</role>")
    fam = LLaDA2Family()
    tok = build_byte_tokenizer(fam.special_token_strings, fam.extra_special_tokens, fam.chat_template)
    ids = tok.apply_chat_template(chats[0], add_generation_prompt=True, tokenize=True, return_dict=False)
    assert tok.decode(ids) == env.from_string(release).render(messages=chats[0], add_generation_prompt=True, tools=None)


def test_denoiser_logits_are_the_noisy_half_of_the_block_diffusion_forward(tiny_llada2):
    model, fam = tiny_llada2.model, LLaDA2Family()
    clean = torch.randint(4, 250, (2, 12))
    hidden = torch.rand(2, 12, generator=torch.Generator().manual_seed(0)) < 0.5
    noisy = clean.masked_fill(hidden, tiny_llada2.tokens.mask_id)
    valid = torch.ones(2, 12, dtype=torch.long)
    valid[1, 9:] = 0  # right padding (SFT batches)
    got = fam.denoiser_logits(model, noisy, clean, valid)
    ids, pos, mask = block_diffusion_inputs(noisy, clean, 32, valid.bool())
    want = model(input_ids=ids, attention_mask=mask, position_ids=pos).logits[:, :12]
    assert torch.equal(got, want)
    # left padding (RL rollouts): a padded row scores exactly like the unpadded one
    shifted = fam.denoiser_logits(model, torch.cat([noisy[:1, -3:], noisy[:1, :9]], 1),
                                  torch.cat([clean[:1, -3:], clean[:1, :9]], 1),
                                  torch.tensor([[0, 0, 0] + [1] * 9]))
    alone = fam.denoiser_logits(model, noisy[:1, :9], clean[:1, :9])
    assert torch.allclose(shifted[0, 3:], alone[0], atol=1e-5)


def test_inference_logits_are_block_causal_from_the_first_real_token(tiny_llada2, tmp_path):
    model, fam = tiny_llada2.model, LLaDA2Family()
    model.config.block_size = 4
    try:
        x = torch.randint(4, 250, (1, 10))
        want = model(x, attention_mask=block_causal_mask(10, 4)[None, None]).logits
        assert torch.equal(fam.logits(model, x), want)
        padded = torch.cat([torch.full((1, 2), tiny_llada2.tokens.pad_id), x], 1)
        got = fam.logits(model, padded, torch.tensor([[0, 0] + [1] * 10]))
        assert torch.allclose(got[:, 2:], want, atol=1e-5)
    finally:
        del model.config.block_size


def test_lora_all_linear_adapts_attention_dense_shared_and_routed_experts(tiny_llada2):
    from peft.tuners.lora import LoraLayer

    from dare.modeling.lora import apply_lora
    from dare.runspec import LoraSpec

    model = LLaDA2Family().model_class()(tiny_llada2.model.config)
    model.load_state_dict(tiny_llada2.model.state_dict())
    peft_model = apply_lora(model, LLaDA2Family(), LoraSpec(r=2))
    adapted = {n.replace("base_model.model.", "") for n, m in peft_model.named_modules() if isinstance(m, LoraLayer)}
    want = {"model.layers.0.attention.query_key_value", "model.layers.0.attention.dense",
            "model.layers.0.mlp.gate_proj", "model.layers.0.mlp.up_proj", "model.layers.0.mlp.down_proj",
            "model.layers.1.attention.query_key_value", "model.layers.1.attention.dense"}
    want |= {f"model.layers.1.mlp.{part}.{proj}" for part in ["shared_experts"] + [f"experts.{e}" for e in range(8)]
             for proj in ("gate_proj", "up_proj", "down_proj")}
    assert adapted == want  # the router (mlp.gate) and lm_head stay frozen
    x = torch.randint(4, 250, (1, 6))
    assert torch.allclose(peft_model(input_ids=x).logits, tiny_llada2.model(x).logits, atol=1e-6)  # B = 0 at init
    t = tiny_llada2.tokens
    kw = dict(gen_length=8, block_length=4, steps=2, mask_id=t.mask_id, eos_id=t.eos_id, pad_id=t.pad_id)
    through_peft = decode(peft_model.eval(), x, None, decode_options(use_cache=True, **kw))  # the cache protocol
    recomputed = decode(tiny_llada2.model, x, None, decode_options(use_cache=False, **kw))   # passes through peft
    assert torch.equal(through_peft.completions(), recomputed.completions())


# --------------------------------------------------------------------------- decoding with the tiny model
PROMPTS = [[40, 41, 42], [50, 51, 52, 53, 54, 55, 56, 57, 58, 59, 60, 61, 62]]  # 0 and 3 whole blocks of 4


def _batch(tokens):
    width = max(len(p) for p in PROMPTS)
    ids = torch.full((len(PROMPTS), width), tokens.pad_id)
    attn = torch.zeros(len(PROMPTS), width, dtype=torch.long)
    for i, p in enumerate(PROMPTS):
        ids[i, width - len(p):] = torch.tensor(p)
        attn[i, width - len(p):] = 1
    return ids, attn


@pytest.mark.parametrize("variant, extra", [("2.0", {"steps": 4, "threshold": 0.3}),
                                            ("2.1", {"threshold": 0.3, "editing_threshold": 0.2, "max_post_steps": 2})])
def test_kv_cache_and_batching_reproduce_single_prompt_recompute(tiny_llada2, variant, extra):
    t = tiny_llada2.tokens
    kw = dict(variant=variant, gen_length=10, block_length=4, mask_id=t.mask_id, eos_id=t.eos_id, pad_id=t.pad_id, **extra)
    ids, attn = _batch(t)
    cached = decode(tiny_llada2.model, ids, attn, decode_options(use_cache=True, **kw))
    recomputed = decode(tiny_llada2.model, ids, attn, decode_options(use_cache=False, **kw))
    assert torch.equal(cached.completions(), recomputed.completions())
    assert torch.equal(cached.unmask_step, recomputed.unmask_step)
    assert (cached.nfe, cached.steps) == (recomputed.nfe, recomputed.steps)
    assert cached.cache_forwards > 0 and recomputed.cache_forwards == 0
    assert torch.equal(cached.edits, recomputed.edits) and (variant == "2.0") == (int(cached.edits.sum()) == 0)
    for i, p in enumerate(PROMPTS):  # each row decodes as it would alone (the release's B = 1 layout)
        alone = decode(tiny_llada2.model, torch.tensor([p]), None, decode_options(use_cache=False, **kw))
        assert torch.equal(alone.completions()[0], cached.completions()[i])
        assert torch.equal(alone.unmask_step[0], cached.unmask_step[i])
    assert len(set(cached.completions().flatten().tolist())) > 3  # the proposals are not degenerate


@pytest.mark.parametrize("variant, params", [("2.0", {"steps": 2, "threshold": 0.3}),
                                             ("2.1", {"threshold": 0.3, "editing_threshold": 0.2, "max_post_steps": 2})])
@pytest.mark.parametrize("use_cache", [True, False])
def test_batch_1_4_16_with_left_padding_give_the_same_tokens(tiny_llada2, variant, params, use_cache):
    """Evaluation must not depend on the batch size (greedy, fp32)."""
    t = tiny_llada2.tokens
    g = torch.Generator().manual_seed(5)
    lengths = [1, 2, 3, 4, 5, 7, 8, 9, 11, 12, 13, 3, 6, 10, 4, 2]  # tails of 0..3 tokens in a block of 4
    rows = [torch.randint(4, 250, (n,), generator=g).tolist() for n in lengths]
    sampler = LLaDA2Sampler({"variant": variant, "gen_length": 8, "block_length": 4, "use_cache": use_cache, **params})

    def run(chunk):
        width = max(len(p) for p in chunk)
        ids = torch.tensor([[t.pad_id] * (width - len(p)) + p for p in chunk])
        attn = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in chunk])
        return sampler.generate(tiny_llada2.model, LLaDA2Family(), t, ids, attn)

    alone = [run([r]) for r in rows]
    for size in (4, 16):
        for start in range(0, len(rows), size):
            out = run(rows[start : start + size])
            for j, one in enumerate(alone[start : start + size]):
                assert torch.equal(out.completions[j], one.completions[0]), (size, start + j)
                assert torch.equal(out.unmask_step[j], one.unmask_step[0]), (size, start + j)
                assert torch.equal(out.extras["edits"][j], one.extras["edits"][0]), (size, start + j)
    assert len({tuple(o.completions[0].tolist()) for o in alone}) > 8  # the prompts lead to different answers


@pytest.mark.parametrize("variant, params", [("2.0", {"steps": 2, "threshold": 0.3}),
                                             ("2.1", {"threshold": 0.3, "editing_threshold": 0.2, "max_post_steps": 2})])
@pytest.mark.parametrize("use_cache", [True, False])
def test_sampled_batch_of_4_equals_the_rows_decoded_alone_with_keyed_row_generators(tiny_llada2, variant, params,
                                                                                      use_cache):
    """Temperature 1: only rows still decoding a block draw, each from its own keyed generator, so RL rollouts and
    sampled evaluation do not depend on how prompts are split into batches."""
    from dare.testing import decode_batched_and_alone

    assert LLaDA2Sampler.supports_row_generators
    g = torch.Generator().manual_seed(5)
    rows = [torch.randint(4, 250, (n,), generator=g) for n in (3, 9, 1, 6)]
    sampler = LLaDA2Sampler({"variant": variant, "gen_length": 8, "block_length": 4, "use_cache": use_cache,
                             "temperature": 1.0, **params})
    fam, t = LLaDA2Family(), tiny_llada2.tokens
    batched, alone = decode_batched_and_alone(sampler, tiny_llada2.model, fam, t, rows, seed=0)
    for i, one in enumerate(alone):
        assert torch.equal(batched.completions[i], one.completions[0]), i
        assert torch.equal(batched.unmask_step[i], one.unmask_step[0]), i
        assert torch.equal(batched.extras["edits"][i], one.extras["edits"][0]), i
    other, _ = decode_batched_and_alone(sampler, tiny_llada2.model, fam, t, rows[:1], seed=1)
    assert not torch.equal(other.completions[0], batched.completions[0])  # the draws are keyed by the seed
