"""LLaDA2 modeling: release tensor names, bit-exact checkpoints, partial RoPE, q/k norm, routing, masks, KV cache."""

from __future__ import annotations

import json
import math
import shutil

import pytest
import torch
from safetensors.torch import load_file
from transformers import AutoModel

from dare.diffusion.block import block_causal_mask
from dare.modeling.checkpoint import expected_shapes
from dare.testing import shared_path
from dare_llada2.configuration_llada2_moe import LLaDA2MoeConfig
from dare_llada2.family import PRESETS
from dare_llada2.modeling_llada2_moe import (
    LLaDA2InputError,
    LLaDA2MoeAttention,
    LLaDA2MoeModelLM,
    LLaDA2MoeSparseMoeBlock,
    apply_partial_rotary,
    route,
    rotary_tables,
)


# --------------------------------------------------------------------------- checkpoints
def test_real_mini_index_names_and_shapes_match_the_config():
    card = shared_path("model-cards", "LLaDA2.0-mini")
    index = json.loads((card / "model.safetensors.index.json").read_text())
    cfg = LLaDA2MoeConfig(**json.loads((card / "config.json").read_text()))
    shapes = expected_shapes(LLaDA2MoeModelLM, cfg)
    assert set(shapes) == set(index["weight_map"])
    assert len(shapes) == 14813
    assert shapes["model.layers.0.attention.query_key_value.weight"] == (3072, 2048)
    assert shapes["model.layers.0.attention.query_layernorm.weight"] == (128,)
    assert shapes["model.layers.0.mlp.gate_proj.weight"] == (5120, 2048)
    assert shapes["model.layers.7.mlp.gate.weight"] == (256, 2048)
    assert shapes["model.layers.7.mlp.gate.expert_bias"] == (256,)
    assert shapes["model.layers.19.mlp.experts.255.down_proj.weight"] == (2048, 512)
    assert shapes["model.layers.19.mlp.shared_experts.up_proj.weight"] == (512, 2048)
    assert shapes["lm_head.weight"] == (157184, 2048)
    # 16.26 B values, the 2.0 release's bf16 byte count / 2 (expert_bias included)
    assert sum(math.prod(s) for s in shapes.values()) == index["metadata"]["total_size"] // 2


def test_save_load_bit_exact_through_automodel(tiny_llada2, tiny_llada2_dir):
    stored = load_file(str(tiny_llada2_dir / "model.safetensors"))
    again = AutoModel.from_pretrained(tiny_llada2_dir)
    assert type(again) is LLaDA2MoeModelLM
    state = again.state_dict()
    assert set(state) == set(stored)
    for name, tensor in stored.items():
        assert tensor.dtype == state[name].dtype and torch.equal(tensor, state[name]), name
    bias = stored["model.layers.1.mlp.gate.expert_bias"]
    assert bias.dtype == torch.float32 and bool((bias != 0).all())
    x = torch.randint(4, 250, (2, 11))
    assert torch.equal(tiny_llada2.model(x).logits, again.eval()(x).logits)


def test_bf16_load_keeps_expert_bias_in_fp32(tiny_llada2_dir):
    stored = load_file(str(tiny_llada2_dir / "model.safetensors"))
    model = AutoModel.from_pretrained(tiny_llada2_dir, dtype=torch.bfloat16)
    gate = model.model.layers[1].mlp.gate
    assert gate.weight.dtype == torch.bfloat16
    assert gate.expert_bias.dtype == torch.float32
    assert torch.equal(gate.expert_bias, stored["model.layers.1.mlp.gate.expert_bias"])
    assert model(torch.randint(4, 250, (1, 5))).logits.dtype == torch.float32


def test_loads_with_release_auto_map_without_trust_remote_code(tiny_llada2_dir, tmp_path):
    d = tmp_path / "m"
    shutil.copytree(tiny_llada2_dir, d)
    cfg = json.loads((d / "config.json").read_text())
    cfg["auto_map"] = {
        "AutoConfig": "configuration_llada2_moe.LLaDA2MoeConfig",
        "AutoModel": "modeling_llada2_moe.LLaDA2MoeModel",
        "AutoModelForCausalLM": "modeling_llada2_moe.LLaDA2MoeModelLM",
    }
    (d / "config.json").write_text(json.dumps(cfg))
    assert type(AutoModel.from_pretrained(d)) is LLaDA2MoeModelLM


# --------------------------------------------------------------------------- attention pieces
def test_partial_rotary_by_hand():
    cos, sin = rotary_tables(torch.tensor([[0, 3]]), rotary_dim=4, theta=100.0, dtype=torch.float32)
    assert cos.shape == (1, 2, 4)
    x = torch.arange(12, dtype=torch.float32).view(1, 1, 2, 6) + 1.0
    out = apply_partial_rotary(x, cos, sin)
    assert torch.equal(out[..., 0, :], x[..., 0, :])  # position 0: identity
    x0, x1, x2, x3, x4, x5 = x[0, 0, 1].tolist()
    a, b = 3.0, 3.0 * 100.0 ** -0.5  # angles of the two frequency pairs (dims 0/2 and 1/3)
    want = [x0 * math.cos(a) - x2 * math.sin(a), x1 * math.cos(b) - x3 * math.sin(b),
            x2 * math.cos(a) + x0 * math.sin(a), x3 * math.cos(b) + x1 * math.sin(b), x4, x5]
    assert torch.allclose(out[0, 0, 1], torch.tensor(want), atol=1e-5)


def test_attention_fused_qkv_qk_norm_partial_rope_gqa_by_hand():
    cfg = LLaDA2MoeConfig(**dict(PRESETS["tiny"], hidden_size=8, num_attention_heads=2, num_key_value_heads=1,
                                 head_dim=4, rotary_dim=2, rope_theta=10.0))
    attn = LLaDA2MoeAttention(cfg, 0)
    g = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for p in attn.parameters():
            p.copy_(torch.randn(p.shape, generator=g))
    h = torch.randn(1, 3, 8, generator=g)
    cos, sin = rotary_tables(torch.arange(3)[None], 2, 10.0, torch.float32)
    got = attn(h, cos, sin, None, None, False)

    W = attn.query_key_value.weight  # rows: q head 0, q head 1, k, v (4 each)
    qn, kn, eps = attn.query_layernorm.weight, attn.key_layernorm.weight, cfg.rms_norm_eps

    def norm(v, w):
        return v / torch.sqrt(v.pow(2).mean() + eps) * w

    def rope(v, pos):  # rotate dims (0, 1) by angle pos * 10^0 = pos; dims 2, 3 pass
        c, s = math.cos(pos), math.sin(pos)
        return torch.stack([v[0] * c - v[1] * s, v[1] * c + v[0] * s, v[2], v[3]])

    heads = []
    for head in range(2):
        q = [rope(norm(W[4 * head: 4 * head + 4] @ h[0, t], qn), t) for t in range(3)]
        k = [rope(norm(W[8:12] @ h[0, t], kn), t) for t in range(3)]
        v = [W[12:16] @ h[0, t] for t in range(3)]
        rows = []
        for t in range(3):
            w = torch.softmax(torch.stack([q[t] @ k[s] / 2.0 for s in range(3)]), dim=0)
            rows.append(sum(w[s] * v[s] for s in range(3)))
        heads.append(torch.stack(rows))
    want = torch.cat(heads, dim=-1) @ attn.dense.weight.T
    assert torch.allclose(got[0], want, atol=1e-5)


# --------------------------------------------------------------------------- routing
def _logit(p: float) -> float:
    return math.log(p / (1 - p))


SCORES = [0.9, 0.1, 0.8, 0.7, 0.2, 0.3, 0.6, 0.5]  # 4 groups of 2: sums 1.0, 1.5, 0.5, 1.1


def test_group_limit_excludes_the_best_expert_of_a_weak_group():
    logits = torch.tensor([[_logit(p) for p in SCORES]])
    idx, w = route(logits, torch.zeros(8), n_group=4, topk_group=2, top_k=2, routed_scaling_factor=2.5)
    # groups 1 and 3 survive; expert 0 (0.9) is cut with its group; experts 2 (0.8) and 3 (0.7) win
    assert idx.tolist() == [[2, 3]]
    assert torch.allclose(w, torch.tensor([[0.8 / 1.5 * 2.5, 0.7 / 1.5 * 2.5]]), atol=1e-6)


def test_expert_bias_changes_selection_but_not_weights():
    logits = torch.tensor([[_logit(p) for p in SCORES]])
    bias = torch.zeros(8)
    bias[7] = 0.5  # biased expert 7: 1.0, its group 1.6 beats group 3's 1.1 and group 1's 1.5 stays
    idx, w = route(logits, bias, n_group=4, topk_group=2, top_k=2, routed_scaling_factor=2.5)
    assert idx.tolist() == [[7, 2]]
    # weights from the unbiased scores 0.5 and 0.8
    assert torch.allclose(w, torch.tensor([[0.5 / 1.3 * 2.5, 0.8 / 1.3 * 2.5]]), atol=1e-6)


def test_single_expert_weights_are_not_renormalised():
    logits = torch.tensor([[_logit(p) for p in SCORES]])
    idx, w = route(logits, torch.zeros(8), n_group=4, topk_group=4, top_k=1, routed_scaling_factor=2.5)
    assert idx.tolist() == [[0]]
    assert torch.allclose(w, torch.tensor([[0.9 * 2.5]]), atol=1e-6)


def test_moe_block_sums_weighted_experts_and_the_shared_expert():
    cfg = LLaDA2MoeConfig(**PRESETS["tiny"])
    block = LLaDA2MoeSparseMoeBlock(cfg)
    g = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for p in block.parameters():
            p.copy_(0.3 * torch.randn(p.shape, generator=g))
        block.gate.expert_bias.copy_(torch.randn(8, generator=g))
    x = torch.randn(1, 5, 64, generator=g)
    idx, w, _ = block.gate(x.view(5, 64))
    want = torch.stack([
        sum(w[n, k] * block.experts[int(idx[n, k])](x[0, n]) for k in range(2)) + block.shared_experts(x[0, n])
        for n in range(5)
    ])
    assert torch.allclose(block(x)[0], want, atol=1e-5)


def test_router_and_chosen_experts_receive_gradients():
    cfg = LLaDA2MoeConfig(**PRESETS["tiny"])
    block = LLaDA2MoeSparseMoeBlock(cfg)
    with torch.no_grad():
        for p in block.parameters():
            p.normal_(0, 0.3)
    x = torch.randn(1, 4, 64)
    block(x).pow(2).sum().backward()
    assert block.gate.weight.grad is not None and block.gate.weight.grad.abs().sum() > 0
    chosen = set(block.gate(x.view(4, 64))[0].flatten().tolist())
    for e, expert in enumerate(block.experts):
        has_grad = expert.up_proj.weight.grad is not None and bool(expert.up_proj.weight.grad.abs().sum() > 0)
        assert has_grad == (e in chosen), e


# --------------------------------------------------------------------------- masks and cache
def test_mask_forms_agree(tiny_llada2):
    model = tiny_llada2.model
    x = torch.randint(4, 250, (2, 12))
    full = model(x).logits
    assert torch.equal(model(x, attention_mask=torch.ones(2, 1, 12, 12, dtype=torch.bool)).logits, full)
    bc = block_causal_mask(12, 4)
    as_bool = model(x, attention_mask=bc[None, None]).logits
    as_log = model(x, attention_mask=bc.float().log()[None, None]).logits
    assert torch.allclose(as_bool, as_log, atol=1e-6)
    assert not torch.allclose(as_bool, full, atol=1e-3)  # the mask matters
    # block-causal: the first block does not see later blocks
    assert torch.allclose(as_bool[:, :4], model(x[:, :4]).logits, atol=1e-5)
    # a [B, L] mask hides padding keys (no causal conversion): with positions counted from the first
    # real token, a left-padded row equals the unpadded one
    keys = torch.ones(1, 12, dtype=torch.long)
    keys[0, :3] = 0
    pos = (torch.arange(12) - 3).clamp(min=0)[None]
    padded = model(x[1:], attention_mask=keys, position_ids=pos).logits
    assert torch.allclose(padded[0, 3:], model(x[1:, 3:]).logits[0], atol=1e-5)


def test_kv_cache_of_committed_blocks_matches_the_full_block_causal_pass(tiny_llada2):
    model = tiny_llada2.model
    x = torch.randint(4, 250, (2, 12))
    full = model(x, attention_mask=block_causal_mask(12, 4)[None, None]).logits
    out = model(x[:, :8], attention_mask=block_causal_mask(8, 4)[None, None], use_cache=True)
    assert out.cache.length == 8
    step = model(x[:, 8:], position_ids=torch.arange(8, 12)[None], cache=out.cache).logits
    assert out.cache.length == 8  # read-only without use_cache
    assert torch.allclose(step, full[:, 8:], atol=1e-5)


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"attention_mask": torch.ones(2, 1, 6, 5, dtype=torch.bool)}, "attention_mask"),
        ({"attention_mask": torch.ones(2, 6, 6)}, "attention_mask"),
        ({"attention_mask": torch.ones(2, 7)}, "key-padding"),
        ({"position_ids": torch.arange(5)[None]}, "position_ids"),
        ({"output_attentions": True}, "output_attentions"),
        ({"past_key_values": object()}, "cache="),
    ],
)
def test_bad_inputs_are_named(tiny_llada2, kwargs, match):
    with pytest.raises(LLaDA2InputError, match=match):
        tiny_llada2.model(torch.randint(4, 250, (2, 6)), **kwargs)


def test_gradient_checkpointing_gives_the_same_loss_and_gradients(tiny_llada2_dir):
    model = AutoModel.from_pretrained(tiny_llada2_dir).train()
    x = torch.randint(4, 250, (2, 12))
    mask = block_causal_mask(12, 4)[None, None]

    def grads():
        model.zero_grad()
        loss = model(x, attention_mask=mask).logits.pow(2).mean()
        loss.backward()
        return loss, {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}

    loss, plain = grads()
    model.gradient_checkpointing_enable()
    loss_ckpt, ckpt = grads()
    assert torch.equal(loss, loss_ckpt) and set(plain) == set(ckpt)
    assert all(torch.equal(plain[n], ckpt[n]) for n in plain)
