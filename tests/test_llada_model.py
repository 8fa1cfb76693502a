"""LLaDA family: official tensor names, bit-exact save/load through AutoModel, architecture details."""

from __future__ import annotations

import json
import math

import pytest
import torch
from transformers import AutoConfig, AutoModel

from dare.errors import CheckpointError
from dare.modeling import load_model
from dare.modeling.checkpoint import expected_shapes, verify_checkpoint
from dare.plugins.manager import get_registry
from dare.testing import shared_path


def test_real_index_names_and_shapes_match_the_8b_config():
    card = shared_path("model-cards", "LLaDA-8B-Instruct")
    index = json.loads((card / "model.safetensors.index.json").read_text())
    fam = get_registry().get("model_family", "llada").create()
    cfg = fam.config_class()(**json.loads((card / "config.json").read_text()))
    shapes = expected_shapes(fam.model_class(), cfg)
    assert set(shapes) == set(index["weight_map"])
    assert len(shapes) == 291
    assert shapes["model.transformer.wte.weight"] == (126464, 4096)
    assert shapes["model.transformer.blocks.0.ff_proj.weight"] == (12288, 4096)
    assert shapes["model.transformer.ff_out.weight"] == (126464, 4096)
    # 8.016 B parameters, as the released bf16 shards' byte count implies
    assert sum(math.prod(s) for s in shapes.values()) == index["metadata"]["total_size"] // 2


def test_save_load_bit_exact_through_automodel(tiny_llada_dir):
    import dare_llada.auto  # noqa: F401 - registers the Auto classes

    lm = load_model(tiny_llada_dir)
    again = AutoModel.from_pretrained(tiny_llada_dir)
    assert type(again).__name__ == "LLaDAModelLM"
    for k, v in lm.model.state_dict().items():
        assert torch.equal(v, again.state_dict()[k]), k
    x = torch.randint(3, 200, (2, 9))
    assert torch.equal(lm.model(x).logits, again(x).logits)


def test_loads_with_release_auto_map_without_trust_remote_code(tiny_llada_dir, tmp_path):
    import shutil

    d = tmp_path / "m"
    shutil.copytree(tiny_llada_dir, d)
    cfg = json.loads((d / "config.json").read_text())
    cfg["auto_map"] = {"AutoConfig": "configuration_llada.LLaDAConfig", "AutoModel": "modeling_llada.LLaDAModelLM"}
    (d / "config.json").write_text(json.dumps(cfg))
    model = AutoModel.from_pretrained(d)
    assert type(model).__name__ == "LLaDAModelLM"
    assert AutoConfig.from_pretrained(d).d_model == 64


def test_mismatched_tensor_is_named(tiny_llada_dir, tmp_path):
    import shutil

    d = tmp_path / "m"
    shutil.copytree(tiny_llada_dir, d)
    cfg = json.loads((d / "config.json").read_text())
    cfg["mlp_hidden_size"] = 96
    (d / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(CheckpointError, match=r"model\.transformer\.blocks\.0\.ff_out\.weight.*\[64, 128\].*\[64, 96\]"):
        load_model(d)
    fam = get_registry().get("model_family", "llada").create()
    cfg["mlp_hidden_size"] = 128
    cfg["n_layers"] = 3
    with pytest.raises(CheckpointError, match=r"blocks\.2\.attn_norm\.weight.*missing"):
        verify_checkpoint(d, fam.model_class(), fam.config_class()(**cfg))


def test_rmsnorm_and_rope_by_hand(tiny_llada_dir):
    from dare_llada.modeling_llada import LLaDALayerNorm, LLaDARotary

    lm = load_model(tiny_llada_dir)
    cfg = lm.model.config
    norm = LLaDALayerNorm(cfg)
    with torch.no_grad():
        norm.weight.copy_(torch.arange(64.0) / 64)
    x = torch.randn(2, 3, 64)
    want = x / torch.sqrt(x.pow(2).mean(-1, keepdim=True) + cfg.rms_norm_eps) * (torch.arange(64.0) / 64)
    assert torch.allclose(norm(x), want, atol=1e-6)

    rot = LLaDARotary(cfg)
    hd = 16
    q = torch.randn(1, 1, 5, hd)
    qr, _ = rot(q, q)
    pos = 3
    inv = 1.0 / (cfg.rope_theta ** (torch.arange(0, hd, 2).float() / hd))
    ang = pos * inv
    x1, x2 = q[0, 0, pos, : hd // 2], q[0, 0, pos, hd // 2 :]
    want = torch.cat([x1 * ang.cos() - x2 * ang.sin(), x2 * ang.cos() + x1 * ang.sin()])
    assert torch.allclose(qr[0, 0, pos], want, atol=1e-5)


def test_left_padding_masks_keys_and_shifts_positions(tiny_llada_dir):
    lm = load_model(tiny_llada_dir)
    x = torch.randint(3, 200, (1, 6))
    padded = torch.cat([torch.full((1, 2), lm.tokens.pad_id), x], dim=1)
    am = torch.tensor([[0, 0, 1, 1, 1, 1, 1, 1]])
    with torch.no_grad():
        a = lm.model(padded, attention_mask=am).logits[:, 2:]
        b = lm.model(x).logits
    # padding keys are masked; positions are array indices (as the official model), but RoPE is
    # translation-invariant, so the real tokens' logits are unchanged
    assert torch.allclose(a, b, atol=1e-5)
    # the [B, L] padding mask is the same as an additive bias hiding the padding keys
    bias = torch.zeros(1, 1, 8, 8)
    bias[..., :2] = torch.finfo(torch.float).min
    with torch.no_grad():
        c = lm.model(padded, attention_bias=bias).logits[:, 2:]
    assert torch.allclose(a, c, atol=1e-6)


def test_kv_cache_matches_full_pass(tiny_llada_dir):
    lm = load_model(tiny_llada_dir)
    x = torch.randint(3, 200, (2, 10))
    with torch.no_grad():
        full = lm.model(x).logits
        prefix = lm.model(x[:, :6], use_cache=True)
        rest = lm.model(x[:, 6:], past_key_values=prefix.past_key_values).logits
    # a causal split differs from bidirectional attention; check the cached suffix equals a pass whose
    # prefix cannot see the suffix
    bias = torch.zeros(1, 1, 10, 10)
    bias[:, :, :6, 6:] = torch.finfo(torch.float).min
    with torch.no_grad():
        ref = lm.model(x, attention_bias=bias).logits
    assert torch.allclose(rest, ref[:, 6:], atol=1e-5)
    assert full.shape == (2, 10, lm.model.config.embedding_size)


def test_replace_position_runs_a_span_against_the_cache(tiny_llada_dir):
    """Fast-dLLM's dual-cache argument: the input takes the place of the marked cached positions. On an
    unchanged sequence that is the full pass (keys are re-rotated, so any span and any depth are exact)."""
    lm = load_model(tiny_llada_dir)
    x = torch.randint(3, 200, (2, 10))
    am = torch.tensor([[0, 0] + [1] * 8, [1] * 10])
    with torch.no_grad():
        full = lm.model(x, attention_mask=am, use_cache=True)
        for s, e in ((3, 6), (3, 10), (0, 10)):
            replace = torch.zeros(2, 10, dtype=torch.bool)
            replace[:, s:e] = True
            part = lm.model(x[:, s:e], attention_mask=am, past_key_values=full.past_key_values,
                            replace_position=replace).logits
            torch.testing.assert_close(part, full.logits[:, s:e], rtol=1e-5, atol=1e-5)
        with pytest.raises(ValueError, match="needs past_key_values"):
            lm.model(x[:, 3:6], replace_position=replace)
        with pytest.raises(ValueError, match="input has 3 tokens"):
            lm.model(x[:, 3:6], past_key_values=full.past_key_values, replace_position=replace)


def _plain_forward(model, ids, attention_mask):
    """LLaDA's forward written with out-of-place tensor ops only (the release's formulas, no cache), from the
    model's own weights: the reference the in-place forward must equal bit for bit."""
    import torch.nn.functional as F

    t, cfg = model.model.transformer, model.config

    def norm(mod, x):
        h = x.float()
        h = (h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + mod.eps)).to(x.dtype)
        return mod.weight * h

    def rotate(x, cos, sin):
        x1, x2 = x.chunk(2, dim=-1)
        return (x * cos) + (torch.cat((-x2, x1), dim=-1) * sin)

    x = t.wte(ids)
    B, L = ids.shape
    key = ((1.0 - attention_mask.float()) * torch.finfo(torch.float).min)[:, None, None, :]
    for blk in t.blocks:
        h = norm(blk.attn_norm, x)
        q, k, v = (p(h).view(B, L, blk.n_heads, blk.head_dim).transpose(1, 2)
                   for p in (blk.q_proj, blk.k_proj, blk.v_proj))
        sin, cos = blk.rotary_emb.tables(L, x.device)
        q, k = rotate(q, cos, sin), rotate(k, cos, sin)
        att = F.scaled_dot_product_attention(q, k, v, attn_mask=key.expand(B, 1, L, L))
        x = x + blk.attn_out(att.transpose(1, 2).contiguous().view(B, L, -1))
        h = norm(blk.ff_norm, x)
        x = x + blk.ff_out(F.silu(blk.ff_proj(h)) * blk.up_proj(h))
    return t.ff_out(norm(t.ln_f, x)) if not cfg.weight_tying else F.linear(norm(t.ln_f, x), t.wte.weight)


def test_in_place_forward_equals_the_plain_formulas_bit_for_bit(tiny_llada_dir):
    """The forward combines fresh tensors in place (residual sums, RoPE; without gradient also the gated MLP and the
    norm's scale): logits and gradients equal the out-of-place formulas exactly, with and without gradient."""
    lm = load_model(tiny_llada_dir)
    model = lm.model.eval()
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(3, 200, (3, 12), generator=g)
    am = torch.ones_like(ids)
    am[0, :4] = 0
    weight = torch.randn(3, 12, model.config.embedding_size, generator=g)
    with torch.no_grad():
        assert torch.equal(model(ids, attention_mask=am).logits, _plain_forward(model, ids, am))
    model.zero_grad()
    fast = model(ids, attention_mask=am).logits
    (fast * weight).sum().backward()
    grads = {k: p.grad.clone() for k, p in model.named_parameters()}
    model.zero_grad()
    plain = _plain_forward(model, ids, am)
    (plain * weight).sum().backward()
    assert torch.equal(fast, plain)
    for k, p in model.named_parameters():
        assert torch.equal(grads[k], p.grad), k
