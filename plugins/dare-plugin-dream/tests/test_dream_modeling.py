"""DreamModel: release tensor names/shapes, checkpoint round trip, biases, GQA, RoPE, RMSNorm, masks."""

from __future__ import annotations

import json
import math

import pytest
import torch
import torch.nn.functional as F
from dream_helpers import TINY, perturbed_tiny_model

from dare.modeling.checkpoint import expected_shapes
from dare.testing import shared_path
from dare_dream import DreamConfig, DreamModel
from dare_dream.modeling_dream import DreamRMSNorm, DreamRotaryEmbedding, _apply_rope, prepare_attention_mask

RELEASE = ("model-cards", "Dream-v0-Instruct-7B")


def _layer_shapes(i: int, H: int, I: int, nh: int, nkv: int, hd: int) -> dict[str, tuple[int, ...]]:
    """docs/model-families.md §2.2, written out from the formulas."""
    p = f"model.layers.{i}."
    return {
        p + "input_layernorm.weight": (H,),
        p + "self_attn.q_proj.weight": (nh * hd, H),
        p + "self_attn.q_proj.bias": (nh * hd,),
        p + "self_attn.k_proj.weight": (nkv * hd, H),
        p + "self_attn.k_proj.bias": (nkv * hd,),
        p + "self_attn.v_proj.weight": (nkv * hd, H),
        p + "self_attn.v_proj.bias": (nkv * hd,),
        p + "self_attn.o_proj.weight": (H, nh * hd),
        p + "post_attention_layernorm.weight": (H,),
        p + "mlp.gate_proj.weight": (I, H),
        p + "mlp.up_proj.weight": (I, H),
        p + "mlp.down_proj.weight": (H, I),
    }


def _formula_shapes(V, H, I, layers, nh, nkv):
    hd = H // nh
    want = {"model.embed_tokens.weight": (V, H), "model.norm.weight": (H,), "lm_head.weight": (V, H)}
    for i in range(layers):
        want.update(_layer_shapes(i, H, I, nh, nkv, hd))
    return want


def test_7b_tensor_names_and_shapes_equal_the_release_index():
    raw = json.loads(shared_path(*RELEASE, "config.json").read_text())
    index = json.loads(shared_path(*RELEASE, "model.safetensors.index.json").read_text())
    cfg = DreamConfig(**{k: v for k, v in raw.items() if k != "model_type"})
    shapes = expected_shapes(DreamModel, cfg)  # built on the meta device
    assert set(shapes) == set(index["weight_map"]) and len(shapes) == 339
    assert shapes == _formula_shapes(152064, 3584, 18944, 28, 28, 4)
    bf16_bytes = 2 * sum(math.prod(s) for s in shapes.values())
    assert bf16_bytes == index["metadata"]["total_size"] == 15_231_233_024


def test_tiny_state_dict_follows_the_formulas_and_has_no_rotary_buffer(tiny):
    sd = tiny.state_dict()
    assert {k: tuple(v.shape) for k, v in sd.items()} == _formula_shapes(256, 64, 128, 2, 4, 2)
    assert "model.rotary_emb.inv_freq" in dict(tiny.named_buffers())  # non-persistent: not saved


@pytest.mark.parametrize("auto_map", [False, True])
def test_save_then_automodel_load_is_bit_exact(tmp_path, tiny, auto_map):
    from transformers import AutoModel, AutoModelForCausalLM, AutoModelForMaskedLM

    tiny.save_pretrained(tmp_path)
    if auto_map:  # the release's config.json names remote code and flash-attn; DARE's classes must still be used
        cfg = json.loads((tmp_path / "config.json").read_text())
        cfg["auto_map"] = {"AutoConfig": "configuration_dream.DreamConfig", "AutoModel": "modeling_dream.DreamModel"}
        cfg["attn_implementation"] = "flash_attention_2"
        (tmp_path / "config.json").write_text(json.dumps(cfg))
    loaded = AutoModel.from_pretrained(tmp_path).eval()
    assert type(loaded) is DreamModel
    a, b = tiny.state_dict(), loaded.state_dict()
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    assert torch.equal(loaded.model.rotary_emb.inv_freq, 1.0 / 1e6 ** (torch.arange(0, 16, 2).float() / 16))
    ids = torch.randint(0, 256, (2, 12), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        assert torch.equal(tiny(ids).logits, loaded(ids).logits)
    for auto in (AutoModelForCausalLM, AutoModelForMaskedLM):
        assert type(auto.from_pretrained(tmp_path)) is DreamModel


def test_qkv_biases_exist_o_proj_has_none_and_every_bias_changes_the_logits(tiny):
    attn = tiny.model.layers[0].self_attn
    assert attn.q_proj.bias.shape == (64,) and attn.k_proj.bias.shape == (32,) and attn.v_proj.bias.shape == (32,)
    assert attn.o_proj.bias is None
    ids = torch.arange(3, 19)[None]
    with torch.no_grad():
        base = tiny(ids).logits
        for proj in (attn.q_proj, attn.k_proj, attn.v_proj):
            saved = proj.bias.clone()
            proj.bias.zero_()
            changed = (tiny(ids).logits - base).abs().max().item()
            proj.bias.copy_(saved)
            assert changed > 1e-3, proj


def test_gqa_equals_mha_with_each_kv_head_repeated():
    gqa = perturbed_tiny_model(seed=3)  # 4 query heads share 2 KV heads: heads 0,1 -> kv 0; heads 2,3 -> kv 1
    mha = DreamModel(DreamConfig(**{**TINY, "num_key_value_heads": 4})).eval()
    sd = gqa.state_dict()
    for key, t in list(sd.items()):
        if ".k_proj." in key or ".v_proj." in key:
            sd[key] = t.reshape(2, 16, *t.shape[1:]).repeat_interleave(2, dim=0).reshape(64, *t.shape[1:])
    mha.load_state_dict(sd)
    ids = torch.arange(5, 25)[None]
    with torch.no_grad():
        torch.testing.assert_close(mha(ids).logits, gqa(ids).logits, rtol=0, atol=1e-5)


def test_rmsnorm_hand_value():
    norm = DreamRMSNorm(2, eps=0.0)
    with torch.no_grad():
        norm.weight.copy_(torch.tensor([2.0, 1.0]))
    rms = math.sqrt((9 + 16) / 2)
    torch.testing.assert_close(norm(torch.tensor([[3.0, 4.0]])), torch.tensor([[2 * 3 / rms, 4 / rms]]))
    x16 = torch.tensor([[3.0, 4.0]], dtype=torch.bfloat16)
    out16 = norm.to(torch.bfloat16)(x16)  # normalised in fp32, cast to bf16, then times the bf16 weight
    assert out16.dtype == torch.bfloat16
    normalised = torch.tensor([[3 / rms, 4 / rms]]).to(torch.bfloat16)
    assert torch.equal(out16, torch.tensor([2.0, 1.0], dtype=torch.bfloat16) * normalised)


def test_rope_rotates_each_pair_by_position_times_inverse_frequency():
    cfg = DreamConfig(hidden_size=4, num_attention_heads=1, num_key_value_heads=1, rope_theta=100.0)
    rope = DreamRotaryEmbedding(cfg)  # head_dim 4: inv_freq = [1, 100^-0.5] = [1, 0.1]
    x = torch.tensor([1.0, 0.0, 0.0, 1.0]).reshape(1, 1, 1, 4)  # pairs (x0, x2) and (x1, x3)
    cos, sin = rope(x, torch.tensor([[2]]))
    out = _apply_rope(x, cos, sin).flatten()
    # pair 0 = (1, 0) rotated by 2 rad; pair 1 = (0, 1) rotated by 0.2 rad
    want = torch.tensor([math.cos(2), -math.sin(0.2), math.sin(2), math.cos(0.2)])
    torch.testing.assert_close(out, want)
    cos16, _ = rope(x.to(torch.bfloat16), torch.tensor([[2]]))
    assert cos16.dtype == torch.bfloat16 and torch.equal(cos16, cos.to(torch.bfloat16))  # fp32 tables, then cast


def test_rope_frequencies_stay_fp32_when_the_model_is_cast():
    model = DreamModel(DreamConfig(**TINY)).to(torch.bfloat16)
    inv_freq = model.model.rotary_emb.inv_freq
    assert inv_freq.dtype == torch.float32 and "model.rotary_emb.inv_freq" not in model.state_dict()
    assert torch.equal(inv_freq, 1.0 / 1e6 ** (torch.arange(0, 16, 2).float() / 16))
    assert model(torch.tensor([[3, 4, 5]])).logits.dtype == torch.bfloat16


def test_prepare_attention_mask_forms():
    am = torch.tensor([[0, 1, 1], [1, 1, 1]])
    m = prepare_attention_mask(am)
    assert m.dtype == torch.bool and m.shape == (2, 1, 3, 3)
    assert m[0, 0].tolist() == [[False, False, False], [False, True, True], [False, True, True]]
    assert m[1].all()
    assert prepare_attention_mask(torch.ones(2, 3)) is None and prepare_attention_mask("full") is None
    assert prepare_attention_mask(None) is None
    three = prepare_attention_mask(torch.tril(torch.ones(2, 3, 3)))
    assert three.shape == (2, 1, 3, 3) and not three[0, 0, 0, 1]
    with pytest.raises(ValueError, match="attention_mask"):
        prepare_attention_mask(torch.zeros(1, 1, 1, 1, 3))
    with pytest.raises(ValueError, match="'full'"):
        prepare_attention_mask("causal")


def test_left_padded_row_equals_the_same_row_alone(tiny):
    row = torch.tensor([[7, 8, 9, 10, 11, 12]])
    padded = torch.cat([torch.ones(1, 3, dtype=torch.long), row], dim=1)
    am = torch.tensor([[0, 0, 0, 1, 1, 1, 1, 1, 1]])
    pos = torch.tensor([[1, 1, 1, 0, 1, 2, 3, 4, 5]])  # official: cumsum(mask) - 1, pads set to 1
    with torch.no_grad():
        alone = tiny(row).logits
        other = torch.cat([row, row[:, :3]], 1)  # an unpadded second row in the same batch
        both = tiny(torch.cat([padded, other]), attention_mask=torch.cat([am, torch.ones_like(am)]),
                    position_ids=torch.cat([pos, torch.arange(9)[None]])).logits
        via_2d = tiny(padded, attention_mask=am, position_ids=pos).logits
        via_4d = tiny(padded, attention_mask=prepare_attention_mask(am), position_ids=pos).logits
    torch.testing.assert_close(both[0, 3:], alone[0], rtol=0, atol=1e-5)
    assert torch.equal(via_2d, via_4d)  # a [B, L] mask means m_q & m_k
    assert not torch.isnan(both).any()  # fully masked pad rows give zeros in SDPA, not NaN


def test_labels_give_the_release_causal_loss(tiny):
    ids = torch.tensor([[3, 4, 5, 6, 7]])
    labels = ids.clone()
    labels[0, 2] = -100
    with torch.no_grad():
        out = tiny(ids, labels=labels)
        logp = torch.log_softmax(out.logits.float(), -1)[0]
    # raw position j scores token j + 1 (AR alignment); label 2 is ignored
    want = -(logp[0, 4] + logp[2, 6] + logp[3, 7]) / 3
    torch.testing.assert_close(out.loss, want)


def test_gradient_checkpointing_gives_the_same_gradients():
    ids = torch.arange(3, 15)[None]
    grads = []
    for ckpt in (False, True):
        model = perturbed_tiny_model(seed=5).train()
        if ckpt:
            model.gradient_checkpointing_enable()
        F.cross_entropy(model(ids).logits[0], ids[0]).backward()
        grads.append(model.model.layers[0].self_attn.q_proj.weight.grad.clone())
    torch.testing.assert_close(grads[0], grads[1], rtol=0, atol=1e-6)


def test_output_attentions_is_refused_and_cache_arguments_must_fit(tiny):
    with pytest.raises(ValueError, match="output_attentions"):
        tiny(torch.tensor([[3, 4]]), output_attentions=True)
    with pytest.raises(ValueError, match="replace_position needs past_key_values"):
        tiny(torch.tensor([[3, 4]]), replace_position=torch.tensor([[True, True]]))
    past = tiny(torch.tensor([[3, 4, 5, 6]]), use_cache=True).past_key_values
    with pytest.raises(ValueError, match="same contiguous span"):
        tiny(torch.tensor([[3, 4]]), past_key_values=past, replace_position=torch.tensor([[True, False, True, False]]))
    with pytest.raises(ValueError, match="input has 2 tokens"):
        tiny(torch.tensor([[3, 4]]), past_key_values=past, replace_position=torch.tensor([[False, True, True, True]]))


def test_kv_cache_append_matches_a_pass_whose_prefix_cannot_see_the_suffix(tiny):
    x = torch.randint(3, 200, (2, 10))
    with torch.no_grad():
        prefix = tiny(x[:, :6], use_cache=True)
        rest = tiny(x[:, 6:], past_key_values=prefix.past_key_values).logits
        mask = torch.ones(1, 1, 10, 10, dtype=torch.bool)
        mask[..., :6, 6:] = False
        ref = tiny(x, attention_mask=mask).logits
    assert len(prefix.past_key_values) == 2 and prefix.past_key_values[0][0].shape == (2, 2, 6, 16)
    torch.testing.assert_close(rest, ref[:, 6:], rtol=0, atol=1e-5)


@pytest.mark.parametrize("span", [(0, 10), (4, 7), (4, 10), (9, 10)])
def test_replace_position_on_an_unchanged_sequence_equals_the_full_pass(tiny, span):
    """Keys after RoPE are cached, so re-running any span against a cache of the same tokens is exact."""
    x = torch.randint(3, 200, (2, 10))
    s, e = span
    replace = torch.zeros(2, 10, dtype=torch.bool)
    replace[:, s:e] = True
    with torch.no_grad():
        full = tiny(x, use_cache=True)
        part = tiny(x[:, s:e], past_key_values=full.past_key_values, replace_position=replace).logits
    torch.testing.assert_close(part, full.logits[:, s:e], rtol=0, atol=1e-5)
