"""The SDAR family adapter: registry, checkpoints through DARE, special tokens, templates, training logits."""

from __future__ import annotations

import jinja2
import pytest
import torch
from transformers import AutoTokenizer

from dare.diffusion.block import block_diffusion_inputs, block_diffusion_mask
from dare.modeling import load_model
from dare.plugins.manager import get_registry
from dare.testing import shared_path, tiny_model
from dare_sdar import SDARMoeForCausalLM
from dare_sdar.family import DEFAULT_BLOCK_SIZE, SDAR_CHAT_TEMPLATE, SDARFamily


@pytest.fixture(scope="module")
def dense(tmp_path_factory):
    return tiny_model("sdar", tmp_path_factory.mktemp("sdar"), seed=1)


def test_family_is_registered_for_both_model_types():
    reg = get_registry()
    assert reg.family_for_model_type("sdar").cls is SDARFamily
    assert reg.family_for_model_type("sdar_moe").cls is SDARFamily
    fam = SDARFamily()
    assert (fam.attention, fam.pad_in_response, fam.default_sampler) == ("block", False, "sdar")
    assert fam.block_size({"block_size": 8}) == 8
    assert fam.block_size({"model_type": "sdar_moe"}) == DEFAULT_BLOCK_SIZE == 4


@pytest.mark.parametrize("preset", ["tiny", "tiny-moe"])
def test_fresh_models_reload_through_dare(tmp_path, preset):
    """create (official format, byte tokenizer) -> dare.modeling.load_model verifies names/shapes and reloads."""
    created = tiny_model("sdar", tmp_path, preset=preset, seed=2)
    loaded = load_model(tmp_path)
    assert type(loaded.model) is type(created.model)
    assert (preset == "tiny-moe") == isinstance(loaded.model, SDARMoeForCausalLM)
    assert loaded.tokens == created.tokens
    tok = loaded.tokens
    assert tok.stop_ids == (tok.eos_id, tok.eot_id) and tok.mask_id == loaded.tokenizer.convert_tokens_to_ids("<|MASK|>")
    assert loaded.model.config.block_size == 4
    want, got = created.model.state_dict(), loaded.model.state_dict()
    assert all(torch.equal(want[k], got[k]) for k in want)


def test_special_ids_of_the_real_tokenizer_and_an_moe_config_without_mask_id():
    card = shared_path("model-cards", "SDAR-1dot7B-Chat")
    tokenizer = AutoTokenizer.from_pretrained(str(card), trust_remote_code=False)
    fam = SDARFamily()
    dense_config = type("Cfg", (), {"mask_token_id": 151669, "eos_token_id": 151643})()
    moe_config = type("Cfg", (), {"eos_token_id": 151643})()  # the 30B release: no mask_token_id
    for config in (dense_config, moe_config):
        tokens = fam.special_tokens(config, tokenizer)
        assert (tokens.mask_id, tokens.eos_id, tokens.pad_id, tokens.eot_id) == (151669, 151643, 151643, 151645)
        assert tokens.stop_ids == (151643, 151645)


def test_chat_template_renders_plain_conversations_like_the_release():
    release = jinja2.Environment().from_string((shared_path("model-cards", "SDAR-8B-Chat") / "chat_template.jinja").read_text())
    ours = jinja2.Environment().from_string(SDAR_CHAT_TEMPLATE)
    for messages in ([{"role": "user", "content": "2+2?"}],
                     [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "2+2?"}],
                     [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}, {"role": "user", "content": "c"}]):
        for extra in ({}, {"enable_thinking": False}):
            kw = dict(messages=messages, add_generation_prompt=True, **extra)
            assert ours.render(**kw) == release.render(**kw)
    assert ours.render(messages=[{"role": "user", "content": "hi"}], add_generation_prompt=True) == (
        "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"
    )


def test_block_diffusion_mask_entries_by_hand():
    """L=4, block 2: queries/keys 0-3 noisy, 4-7 clean (M_BD | M_OBC | M_BC)."""
    want = torch.tensor([
        # noisy 0..3      clean 0..3
        [1, 1, 0, 0,     0, 0, 0, 0],  # noisy block 0: itself only
        [1, 1, 0, 0,     0, 0, 0, 0],
        [0, 0, 1, 1,     1, 1, 0, 0],  # noisy block 1: itself + clean block 0
        [0, 0, 1, 1,     1, 1, 0, 0],
        [0, 0, 0, 0,     1, 1, 0, 0],  # clean block 0: clean block 0
        [0, 0, 0, 0,     1, 1, 0, 0],
        [0, 0, 0, 0,     1, 1, 1, 1],  # clean block 1: clean blocks 0-1
        [0, 0, 0, 0,     1, 1, 1, 1],
    ], dtype=torch.bool)
    assert torch.equal(block_diffusion_mask(4, 2)[0, 0], want)
    _, pos, _ = block_diffusion_inputs(torch.zeros(1, 4, dtype=torch.long), torch.zeros(1, 4, dtype=torch.long), 2)
    assert pos.tolist() == [[0, 1, 2, 3, 0, 1, 2, 3]]


def test_denoiser_logits_see_the_noisy_block_and_earlier_clean_blocks_only(dense):
    """Noisy block b's logits change with its own noisy tokens and clean blocks < b, never with clean block b."""
    fam, model = SDARFamily(), dense.model.eval()
    torch.manual_seed(0)
    clean = torch.randint(10, 200, (1, 12))
    noisy = clean.clone()
    noisy[0, 4:8] = dense.tokens.mask_id
    with torch.no_grad():
        base = fam.denoiser_logits(model, noisy, clean)
        ids, pos, mask = block_diffusion_inputs(noisy, clean, 4)
        direct = model(ids, attention_mask=mask, position_ids=pos).logits[:, :12]
        assert torch.allclose(base, direct, atol=1e-6)

        def changed(noisy_, clean_):
            return (fam.denoiser_logits(model, noisy_, clean_) - base).abs().amax(-1)[0] > 1e-5

        c = clean.clone(); c[0, 5] += 1  # clean token of block 1
        assert changed(noisy, c).tolist() == [False] * 8 + [True] * 4  # only the later noisy block sees it
        n = noisy.clone(); n[0, 1] += 1  # noisy token of block 0
        assert changed(n, clean).tolist() == [True] * 4 + [False] * 8


def test_left_padding_is_invisible_to_logits_and_denoiser_logits(dense):
    fam, model = SDARFamily(), dense.model.eval()
    torch.manual_seed(0)
    row = torch.randint(10, 200, (1, 9))
    noisy = row.clone(); noisy[0, 6:] = dense.tokens.mask_id
    padded = torch.cat([torch.full((1, 3), dense.tokens.pad_id), row], 1)
    padded_noisy = torch.cat([torch.full((1, 3), dense.tokens.pad_id), noisy], 1)
    attn = torch.tensor([[0] * 3 + [1] * 9])
    with torch.no_grad():
        assert torch.allclose(fam.logits(model, padded, attn)[:, 3:], fam.logits(model, row), atol=1e-5)
        assert torch.allclose(
            fam.denoiser_logits(model, padded_noisy, padded, attn)[:, 3:], fam.denoiser_logits(model, noisy, row), atol=1e-5
        )


def test_lora_all_linear_adapts_attention_mlp_and_experts_but_not_router_or_head(tmp_path):
    from dare.modeling.lora import apply_lora
    from dare.runspec import LoraSpec

    lm = tiny_model("sdar", tmp_path, preset="tiny-moe", seed=5)
    model = apply_lora(lm.model, lm.family, LoraSpec(r=2, alpha=4))
    adapted = {n.split(".lora_A")[0] for n, p in model.named_parameters() if p.requires_grad and ".lora_A" in n}
    base = "base_model.model.model.layers.1"
    assert f"{base}.self_attn.q_proj" in adapted and f"{base}.mlp.experts.7.down_proj" in adapted
    assert len(adapted) == 2 * (4 + 8 * 3)  # per layer: q/k/v/o + 8 experts x gate/up/down
    assert not any(n.endswith("mlp.gate") or n.endswith("lm_head") for n in adapted)
