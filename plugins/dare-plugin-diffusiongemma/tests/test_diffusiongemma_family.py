"""The DiffusionGemma family: registry, tiny preset on transformers' classes, checkpoints (official format, bit-exact
round trip), special tokens without a mask token, the chat template, uniform noise and refusal of [MASK] objectives."""

from __future__ import annotations

import pytest
import torch
from safetensors.torch import load_file
from transformers import DiffusionGemmaForBlockDiffusion

from dare.diffusion import bernoulli_mask, uniform_noise
from dare.modeling import load_model
from dare.plugins.manager import get_registry
from dare.randomness import RowGenerators
from dare.testing import tiny_model
from dare_diffusiongemma.family import DiffusionGemmaFamily


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return tiny_model("diffusiongemma", tmp_path_factory.mktemp("dg"), seed=3)


def test_family_is_registered_with_uniform_noise_and_no_mask_token(tiny):
    assert get_registry().family_for_model_type("diffusion_gemma").cls is DiffusionGemmaFamily
    fam = DiffusionGemmaFamily()
    assert (fam.forward_process, fam.attention, fam.default_sampler) == ("uniform", "block", "diffusiongemma")
    assert type(tiny.model) is DiffusionGemmaForBlockDiffusion
    assert tiny.tokens.mask_id is None
    tok = tiny.tokenizer
    ids = {s: tok.convert_tokens_to_ids(s) for s in ("<bos>", "<eos>", "<pad>", "<turn|>")}
    assert (tiny.tokens.bos_id, tiny.tokens.eos_id, tiny.tokens.pad_id, tiny.tokens.eot_id) == (
        ids["<bos>"], ids["<eos>"], ids["<pad>"], ids["<turn|>"])
    assert tiny.model.config.canvas_length == 8 and fam.block_size(tiny.model.config) == 8
    assert tiny.model.config.text_config.vocab_size == len(tok)


def test_chat_template_is_gemma4_turns(tiny):
    text = tiny.tokenizer.apply_chat_template([{"role": "user", "content": " 2+2? "}], tokenize=False,
                                              add_generation_prompt=True)
    assert text == "<bos><|turn>user\n2+2?<turn|>\n<|turn>model\n"
    full = tiny.tokenizer.apply_chat_template([{"role": "user", "content": "hi"}, {"role": "assistant", "content": "4"}],
                                              tokenize=False)
    assert full == "<bos><|turn>user\nhi<turn|>\n<|turn>model\n4<turn|>\n"


def test_checkpoint_round_trip_is_bit_exact(tiny, tmp_path):
    loaded = load_model(tiny.path)
    assert type(loaded.model) is DiffusionGemmaForBlockDiffusion
    a, b = tiny.model.state_dict(), loaded.model.state_dict()
    assert a.keys() == b.keys()
    assert all(torch.equal(a[k], b[k]) for k in a)
    names = set(load_file(str(tiny.path / "model.safetensors")))
    # the official layout: the shared backbone stored once under model.decoder (the encoder's language model ties to
    # it), the LM head tied to the embedding (not stored), the self-conditioning block and the vision tower
    assert {"model.decoder.embed_tokens.weight", "model.decoder.self_conditioning.pre_norm.weight",
            "model.decoder.layers.0.router.proj.weight", "model.decoder.layers.1.self_attn.q_proj.weight"} <= names
    assert "lm_head.weight" not in names and "model.encoder.language_model.embed_tokens.weight" not in names
    assert any(n.startswith("model.encoder.vision_tower.") for n in names)
    assert loaded.tokens == tiny.tokens


def test_uniform_noise_draws_per_row():
    """Corrupted positions take the row's randint draws after the indicator; clean ones are untouched."""
    ids = torch.tensor([[5, 6, 7, 8], [9, 10, 11, 12]])
    corrupt = torch.tensor([[True, False, True, False], [False, False, False, True]])
    gens = RowGenerators([torch.Generator().manual_seed(11), torch.Generator().manual_seed(12)])
    out = uniform_noise(ids, corrupt, 300, gens)
    want0 = torch.randint(0, 300, (4,), generator=torch.Generator().manual_seed(11))
    want1 = torch.randint(0, 300, (4,), generator=torch.Generator().manual_seed(12))
    assert out[0].tolist() == [int(want0[0]), 6, int(want0[2]), 8]
    assert out[1].tolist() == [9, 10, 11, int(want1[3])]
    with pytest.raises(ValueError, match="vocab_size"):
        uniform_noise(ids, corrupt, 0)
    # t = 1 corrupts every eligible position
    assert bool(bernoulli_mask(torch.ones(2), torch.ones(2, 4, dtype=torch.bool)).all())


def _first_step_logits(model, fam, prompt, canvas):
    """The decoder's first denoising step on ``canvas`` [1, C] after ``prompt`` [1, Lp], as canvas_decode runs it."""
    from transformers import DynamicCache

    config = model.config
    attn = torch.ones_like(prompt, dtype=torch.bool)
    pos = torch.arange(prompt.shape[1])[None]
    cache = DynamicCache(config=config.get_text_config(decoder=True))
    enc = model.model.encoder
    mask = enc.create_masks_for_generate(config=config, inputs_embeds=torch.empty((1, prompt.shape[1], 0)),
                                         attention_mask=attn, cache=cache, position_ids=pos, mm_token_type_ids=None)
    _, cache = fam.encode(model, prompt, mask, pos, cache=cache)
    dec_attn = torch.nn.functional.pad(attn, (0, canvas.shape[1]), value=True)
    mapping = model.model.decoder.create_diffusion_decoder_attention_mask(
        config=config, inputs_embeds=canvas.unsqueeze(-1), cache=cache, decoder_attention_mask=dec_attn)
    dec_pos = prompt.shape[1] + torch.arange(canvas.shape[1])[None]
    return fam.canvas_logits(model, canvas, cache, mapping, dec_pos)


def test_denoiser_logits_score_a_canvas_as_the_decoder_first_step_and_ignore_left_padding(tiny):
    """The RL likelihood forward (docs/algorithms.md §3.16): canvas 0 of a completion gets the logits the decoder's
    first step gives that noisy canvas; canvas 1 sees canvas 0 clean; left padding changes nothing."""
    fam, model = DiffusionGemmaFamily(), tiny.model.eval()
    g = torch.Generator().manual_seed(0)
    V = model.config.text_config.vocab_size
    prompt = torch.randint(3, V, (1, 5), generator=g)
    clean = torch.randint(3, V, (1, 16), generator=g)
    noisy = torch.randint(3, V, (1, 16), generator=g)
    with torch.no_grad():
        out = fam.denoiser_logits(model, torch.cat([prompt, noisy], 1), torch.cat([prompt, clean], 1), None,
                                  block_anchor=5)
        first = _first_step_logits(model, fam, prompt, noisy[:, :8])
        second = _first_step_logits(model, fam, torch.cat([prompt, clean[:, :8]], 1), noisy[:, 8:])
        # the same row after 3 padding columns, next to another row
        pad = torch.zeros(1, 3, dtype=torch.long)
        rows_noisy = torch.cat([torch.cat([pad, prompt, noisy], 1), torch.randint(3, V, (1, 24), generator=g)])
        rows_clean = torch.cat([torch.cat([pad, prompt, clean], 1), rows_noisy[1:]])
        attn = torch.ones(2, 24, dtype=torch.long)
        attn[0, :3] = 0
        padded = fam.denoiser_logits(model, rows_noisy, rows_clean, attn, block_anchor=8)
    assert out.shape == (1, 21, V) and bool((out[:, :5] == 0).all())
    torch.testing.assert_close(out[:, 5:13], first, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(out[:, 13:], second, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(padded[:1, 8:], out[:, 5:], rtol=1e-5, atol=1e-5)
    with pytest.raises(ValueError, match="block_anchor"):
        fam.denoiser_logits(model, rows_noisy, rows_clean, attn)
