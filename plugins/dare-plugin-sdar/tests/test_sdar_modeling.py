"""SDAR dense/MoE modelling: checkpoint names and shapes, round trips, attention numerics, masks, cache."""

from __future__ import annotations

import json
import math

import pytest
import torch
from transformers import AutoConfig, AutoModel
from transformers.initialization import no_init_weights

from dare.diffusion.block import block_causal_mask
from dare.testing import shared_path
from dare_sdar import SDARCache, SDARConfig, SDARForCausalLM, SDARMoeConfig, SDARMoeForCausalLM
from dare_sdar.errors import SDARConfigError, SDARInputError
from dare_sdar.family import PRESETS
from dare_sdar.modeling_sdar import SDARAttention, SDARRMSNorm, rope_cos_sin

ARCH_KEYS = ("hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads",
             "head_dim", "rope_theta", "rms_norm_eps", "vocab_size", "tie_word_embeddings", "attention_bias")
MOE_KEYS = ("moe_intermediate_size", "num_experts", "num_experts_per_tok", "norm_topk_prob", "decoder_sparse_step",
            "mlp_only_layers")


def tiny_config(name: str = "tiny", **overrides):
    cfg = dict(PRESETS[name])
    model_type = cfg.pop("model_type")
    cfg.update(vocab_size=256, mask_token_id=250, bos_token_id=1, eos_token_id=1, **overrides)
    return (SDARMoeConfig if model_type == "sdar_moe" else SDARConfig)(**cfg)


def tiny_model(name: str = "tiny", seed: int = 0, **overrides):
    torch.manual_seed(seed)
    config = tiny_config(name, **overrides)
    model = (SDARMoeForCausalLM if config.model_type == "sdar_moe" else SDARForCausalLM)(config)
    with torch.no_grad():  # non-trivial norm weights so their numerics matter
        for n, p in model.named_parameters():
            if n.endswith("norm.weight"):
                p.copy_(1 + 0.2 * torch.randn(p.shape))
    return model.eval()


# --------------------------------------------------------------------------- real checkpoints
@pytest.mark.parametrize(
    "card, cls, preset",
    [("SDAR-4B-Chat", SDARForCausalLM, "4b"), ("SDAR-8B-Chat", SDARForCausalLM, "8b"),
     ("SDAR-30B-A3B-Chat", SDARMoeForCausalLM, "30b-a3b")],
)
def test_real_index_names_and_bytes_match_the_config(card, cls, preset):
    """Names from the release's weight index == names built for its config (meta device); sizes add up to the
    index's total_size in bf16; the family preset has the release's architecture."""
    card_dir = shared_path("model-cards", card)
    config = AutoConfig.from_pretrained(str(card_dir))  # config.json has auto_map: the local class must win
    assert type(config) is cls.config_class
    index = json.loads((card_dir / "model.safetensors.index.json").read_text())
    with torch.device("meta"), no_init_weights():  # the 30B's 18,867 tensors, without random init
        shapes = {k: tuple(v.shape) for k, v in cls(config).state_dict().items()}
    assert set(shapes) == set(index["weight_map"])
    assert sum(math.prod(s) for s in shapes.values()) * 2 == index["metadata"]["total_size"]
    head = config.num_attention_heads * config.head_dim
    assert shapes["model.layers.0.self_attn.q_proj.weight"] == (head, config.hidden_size)
    assert shapes["model.layers.0.self_attn.q_norm.weight"] == (config.head_dim,)
    raw = json.loads((card_dir / "config.json").read_text())
    keys = ARCH_KEYS + (MOE_KEYS if config.model_type == "sdar_moe" else ("block_size",))
    assert {k: PRESETS[preset][k] for k in keys} == {k: raw[k] for k in keys}


def test_release_config_keys_survive_a_save(tmp_path):
    """Every key of the 1.7B release config comes back from our config's save (transformers 5 renames
    torch_dtype -> dtype, restamps transformers_version, drops attn_implementation and the null rope_scaling)."""
    raw = json.loads((shared_path("model-cards", "SDAR-1dot7B-Chat") / "config.json").read_text())
    SDARConfig(**{k: v for k, v in raw.items() if k != "model_type"}).save_pretrained(tmp_path)
    saved = json.loads((tmp_path / "config.json").read_text())
    rewritten = {"torch_dtype", "attn_implementation", "rope_scaling", "transformers_version"}
    assert {k: raw[k] for k in raw if k not in rewritten} == {k: saved[k] for k in raw if k not in rewritten}
    assert saved["dtype"] == raw["torch_dtype"]


# --------------------------------------------------------------------------- round trips
@pytest.mark.parametrize("name", ["tiny", "tiny-moe"])
def test_save_then_automodel_load_is_bit_exact(tmp_path, name):
    """save_pretrained -> AutoModel.from_pretrained (no trust_remote_code, also with the release's auto_map)."""
    model = tiny_model(name)
    model.save_pretrained(tmp_path)
    cfg_file = tmp_path / "config.json"
    cfg = json.loads(cfg_file.read_text())
    cfg["auto_map"] = {"AutoConfig": "configuration_sdar.SDARConfig", "AutoModel": "modeling_sdar.SDARModel"}
    cfg_file.write_text(json.dumps(cfg))
    loaded = AutoModel.from_pretrained(tmp_path)
    assert type(loaded) is type(model)
    want, got = model.state_dict(), loaded.state_dict()
    assert list(want) == list(got)
    assert all(torch.equal(want[k], got[k]) for k in want)
    ids = torch.randint(0, 250, (2, 12))
    with torch.no_grad():  # weights are bit-exact; a mmap'd copy may pick another matmul kernel (~1e-7)
        assert torch.allclose(loaded(ids).logits, model(ids).logits, atol=1e-6, rtol=0)


# --------------------------------------------------------------------------- numerics
def test_rmsnorm_multiplies_the_weight_in_fp32_before_one_cast():
    norm = SDARRMSNorm(2, eps=0.0)
    with torch.no_grad():
        norm.weight.copy_(torch.tensor([1.0, 3.0]))
    x = torch.tensor([[3.0, 4.0]])
    rms = math.sqrt((9 + 16) / 2)
    assert torch.allclose(norm(x), torch.tensor([[3 / rms, 12 / rms]]), atol=1e-6)
    xb = torch.randn(4096, 2).to(torch.bfloat16)
    norm = SDARRMSNorm(2, eps=1e-6)
    with torch.no_grad():
        norm.weight.copy_(torch.tensor([1.1, 0.7]))
    h = xb.float() * torch.rsqrt(xb.float().pow(2).mean(-1, keepdim=True) + 1e-6)
    one_cast = (h * norm.weight.float()).to(torch.bfloat16)
    hf_style = norm.weight.to(torch.bfloat16) * h.to(torch.bfloat16)
    assert torch.equal(norm(xb), one_cast)
    assert not torch.equal(one_cast, hf_style)  # the choice is observable in bf16


def _attention_oracle(attn: SDARAttention, h, pos, norm_first: bool):
    """Hand-written attention: per-head RMSNorm(q), RMSNorm(k) then RoPE (or the reverse), GQA, softmax."""
    B, L, _ = h.shape
    hd, nh, nkv = attn.head_dim, attn.num_heads, attn.num_kv_heads
    cos, sin = rope_cos_sin(pos, hd, 1e6, h.dtype)

    def rope(x):
        x1, x2 = x[..., : hd // 2], x[..., hd // 2 :]
        return x * cos + torch.cat([-x2, x1], -1) * sin

    def norm(x, w):
        return x / torch.sqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * w

    q = attn.q_proj(h).view(B, L, nh, hd).transpose(1, 2)
    k = attn.k_proj(h).view(B, L, nkv, hd).transpose(1, 2)
    v = attn.v_proj(h).view(B, L, nkv, hd).transpose(1, 2)
    if norm_first:
        q, k = rope(norm(q, attn.q_norm.weight)), rope(norm(k, attn.k_norm.weight))
    else:
        q, k = norm(rope(q), attn.q_norm.weight), norm(rope(k), attn.k_norm.weight)
    k, v = k.repeat_interleave(nh // nkv, 1), v.repeat_interleave(nh // nkv, 1)
    w = torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(hd), dim=-1)
    return attn.o_proj((w @ v).transpose(1, 2).reshape(B, L, nh * hd))


def test_qk_norm_is_per_head_before_rope_with_explicit_head_dim():
    """head_dim 32 != hidden/heads 16; the module equals the norm-then-RoPE oracle, not the reverse order."""
    model = tiny_model("tiny")
    attn = model.model.layers[0].self_attn
    assert attn.q_proj.weight.shape == (4 * 32, 64) and attn.k_proj.weight.shape == (2 * 32, 64)
    assert attn.o_proj.weight.shape == (64, 4 * 32) and attn.q_norm.weight.shape == (32,)
    h = torch.randn(2, 6, 64)
    pos = torch.arange(3, 9)[None].expand(2, -1)
    cos, sin = rope_cos_sin(pos, 32, 1e6, h.dtype)
    with torch.no_grad():
        got = attn(h, cos, sin)
        right = _attention_oracle(attn, h, pos, norm_first=True)
        wrong = _attention_oracle(attn, h, pos, norm_first=False)
    assert torch.allclose(got, right, atol=1e-5)
    assert (got - wrong).abs().max() > 1e-3


# --------------------------------------------------------------------------- masks and cache
def test_attention_masks_accept_bool_01_and_padding_and_reject_additive():
    model = tiny_model("tiny")
    ids = torch.randint(0, 250, (2, 8))
    bc = block_causal_mask(8, 4)
    with torch.no_grad():
        as_bool = model(ids, attention_mask=bc[None]).logits
        assert torch.equal(as_bool, model(ids, attention_mask=bc[None].float()).logits)  # 0/1 floats == bools
        assert torch.allclose(as_bool, model(ids, attention_mask=bc[None, None]).logits, atol=1e-5)  # 3-D == 4-D
        # a [B, L] padding mask hides the padded keys: row 1's last 3 tokens change nothing for its first 5
        pad = torch.tensor([[1] * 8, [1] * 5 + [0] * 3])
        other = ids.clone()
        other[1, 5:] = (other[1, 5:] + 1) % 250
        a = model(ids, attention_mask=pad).logits
        b = model(other, attention_mask=pad).logits
        assert torch.allclose(a[1, :5], b[1, :5], atol=1e-6)
        assert not torch.allclose(model(ids).logits[1, :5], model(other).logits[1, :5], atol=1e-3)  # unmasked: they do
        with pytest.raises(SDARInputError, match="0/1"):
            model(ids, attention_mask=torch.where(bc, 0.0, -torch.inf)[None])
        with pytest.raises(SDARInputError, match="does not broadcast"):
            model(ids, attention_mask=torch.ones(1, 8, 9))


def test_cached_block_logits_equal_rows_of_an_uncached_block_causal_pass():
    model = tiny_model("tiny-moe")
    ids = torch.randint(0, 250, (2, 12))
    mask = block_causal_mask(12, 4)
    pos = torch.arange(12)[None].expand(2, -1)
    with torch.no_grad():
        full = model(ids, attention_mask=mask[None]).logits
        cache = SDARCache()
        model(ids[:, :8], attention_mask=mask[None, :8, :8], position_ids=pos[:, :8], past_key_values=cache, store_kv=True)
        assert cache.seq_length() == 8 and len(cache) == 2
        peek = model(ids[:, 8:], attention_mask=mask[None, 8:], position_ids=pos[:, 8:], past_key_values=cache).logits
        assert cache.seq_length() == 8  # store_kv=False leaves the cache alone
        assert torch.allclose(peek, full[:, 8:], atol=1e-5)
        out = model(ids[:, 8:], attention_mask=mask[None, 8:], position_ids=pos[:, 8:], past_key_values=cache, store_kv=True)
        assert cache.seq_length() == 12 and out.past_key_values is cache
        assert torch.allclose(out.logits, full[:, 8:], atol=1e-5)


# --------------------------------------------------------------------------- config validation
@pytest.mark.parametrize(
    "overrides, key",
    [({"num_experts_per_tok": 9}, "num_experts_per_tok"), ({"decoder_sparse_step": 0}, "decoder_sparse_step"),
     ({"mlp_only_layers": [5]}, "mlp_only_layers"), ({"num_key_value_heads": 3}, "num_key_value_heads"),
     ({"rope_scaling": {"rope_type": "yarn", "factor": 4.0}}, "rope_scaling")],
)
def test_bad_moe_configs_name_the_key(overrides, key):
    with pytest.raises(SDARConfigError, match=key):
        tiny_config("tiny-moe", **overrides)


def test_dense_config_rejects_a_bad_block_size():
    with pytest.raises(SDARConfigError, match="block_size"):
        tiny_config("tiny", block_size=0)
