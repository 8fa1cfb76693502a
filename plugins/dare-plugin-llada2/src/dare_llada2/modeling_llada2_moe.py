"""Native PyTorch LLaDA2.x MoE (``model_type: llada2_moe``) that loads the released checkpoints unchanged.

Architecture (LLaDA2.0-mini / LLaDA2.1-mini, official ``modeling_llada2_moe.py`` of the inclusionAI
releases; docs/model-families.md §5): a pre-norm transformer decoded block by block with a
block-causal mask. Tensor names follow the release::

    model.word_embeddings
    model.layers.{i}.input_layernorm / post_attention_layernorm
    model.layers.{i}.attention.{query_key_value, query_layernorm, key_layernorm, dense}
    model.layers.{i}.mlp.{gate_proj, up_proj, down_proj}                 (i < first_k_dense_replace)
    model.layers.{i}.mlp.gate.{weight, expert_bias}                      (MoE layers)
    model.layers.{i}.mlp.experts.{e}.{gate_proj, up_proj, down_proj}
    model.layers.{i}.mlp.shared_experts.{gate_proj, up_proj, down_proj}
    model.norm, lm_head

Numerics follow the release so that fp32 logits agree to ~1e-6 and bf16 ones to a few ulps:

* RMSNorm normalises in fp32, casts back, then multiplies by the weight (Llama order);
* attention: fused ``query_key_value`` (row blocks ``[Q ; K ; V]``, each head contiguous) → per-head
  RMSNorm of q and k → **partial RoPE**: rotate-half on the first ``head_dim * partial_rotary_factor``
  dims only (RoFormer, arXiv 2104.09864; GPT-NeoX partial rotary), cos/sin computed in fp32 and cast
  to the activation dtype → SDPA, scale ``head_dim ** -0.5``;
* MoE router (DeepSeek-V3 style sigmoid gating with an aux-loss-free expert bias and group-limited
  routing, arXiv 2412.19437 §2.1.2; official ``LLaDA2MoeGate.forward``): see :func:`route`;
* routed expert outputs are weighted and summed over the top-k **in fp32**, cast back, then the shared
  expert is added in the activation dtype; logits are cast to fp32 (as the release).

The attention mask is explicit: ``None`` means full bidirectional attention, a ``[B, Lk]`` mask
hides padding keys (never the legacy causal conversion of the release), and a 4-D ``[B|1, 1, Lq, Lk]``
mask is used as given (bool: True = attend; float: additive). :class:`LLaDA2KVCache` holds the keys
and values of committed positions for block decoding.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn
from transformers import PreTrainedModel
from transformers import initialization as init
from transformers.activations import ACT2FN
from transformers.modeling_layers import GradientCheckpointingLayer
from transformers.utils import ModelOutput

from dare.diffusion.packing import scaled_dot_product_attention
from dare.errors import DareError
from dare_llada2.configuration_llada2_moe import LLaDA2MoeConfig
from dare_llada2.generation import LLaDA2GenerationMixin

__all__ = [
    "LLaDA2MoeModelLM",
    "LLaDA2MoeModel",
    "LLaDA2MoeDecoderLayer",
    "LLaDA2MoeSparseMoeBlock",
    "LLaDA2MoeGate",
    "LLaDA2MoePreTrainedModel",
    "LLaDA2MoeOutput",
    "LLaDA2KVCache",
    "LLaDA2InputError",
    "route",
    "group_limited_topk",
    "rotary_tables",
    "apply_partial_rotary",
]


class LLaDA2InputError(DareError, ValueError):
    """A forward input of the wrong shape or kind (masks, positions, cache)."""


# =========================================================================== cache
class LLaDA2KVCache:
    """Keys and values of committed positions, for block decoding.

    ``keys[l]`` / ``values[l]``: ``[B, nkv, Lc, head_dim]`` in the model dtype; keys are stored
    **after** q/k-norm and RoPE, so the cache may hold any set of positions in any order (attention is
    order-free once positions are rotated in). A forward given the cache attends to its ``Lc`` keys
    before the new ones; with ``use_cache=True`` it appends the new keys/values.
    """

    def __init__(self):
        self.keys: list[torch.Tensor] = []
        self.values: list[torch.Tensor] = []

    @property
    def length(self) -> int:
        """``Lc``, the number of cached positions (0 when empty)."""
        return self.keys[0].shape[-2] if self.keys else 0

    def extend(self, layer: int, k: torch.Tensor, v: torch.Tensor, store: bool) -> tuple[torch.Tensor, torch.Tensor]:
        """Keys/values for attention at ``layer``: the cached ones followed by ``k``/``v`` ``[B, nkv, Lq, hd]``.

        With ``store`` the result replaces the layer's cache entry.
        """
        if layer < len(self.keys):
            k = torch.cat([self.keys[layer], k], dim=-2)
            v = torch.cat([self.values[layer], v], dim=-2)
        if store:
            if layer < len(self.keys):
                self.keys[layer], self.values[layer] = k, v
            else:
                self.keys.append(k)
                self.values.append(v)
        return k, v


# =========================================================================== norms and RoPE
class LLaDA2MoeRMSNorm(nn.Module):
    """RMSNorm: ``w * (x / sqrt(mean(x^2) + eps))`` with the normalisation in fp32 (release order).

    Input ``[..., size]`` any float dtype; output the input dtype times the weight's dtype promotion.
    """

    def __init__(self, size: int, eps: float):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(size))
        self.variance_epsilon = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        dtype = x.dtype
        h = x.to(torch.float32)
        h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + self.variance_epsilon)
        return self.weight * h.to(dtype)


def rotary_tables(
    position_ids: torch.Tensor, rotary_dim: int, theta: float, dtype: torch.dtype
) -> tuple[torch.Tensor, torch.Tensor]:
    """RoPE ``cos, sin`` ``[B|1, L, rotary_dim]`` for integer ``position_ids`` ``[B|1, L]``.

    ``inv_freq_j = theta^(-2j / rotary_dim)`` (``j < rotary_dim / 2``), angles ``pos * inv_freq``
    duplicated as ``[freqs, freqs]`` (rotate-half layout), computed in fp32 and cast to ``dtype``
    (transformers' default RoPE as the release uses it).
    """
    device = position_ids.device
    with torch.autocast(device_type=device.type, enabled=False):
        exponent = torch.arange(0, rotary_dim, 2, dtype=torch.int64, device=device).float() / rotary_dim
        inv_freq = 1.0 / (theta**exponent)
        freqs = position_ids[..., None].float() * inv_freq
        emb = torch.cat((freqs, freqs), dim=-1)
    return emb.cos().to(dtype), emb.sin().to(dtype)


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def apply_partial_rotary(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate the first ``R = cos.shape[-1]`` dims of each head of ``x`` ``[B, heads, L, hd]``; dims ``R..hd`` pass.

    ``x_rot * cos + rotate_half(x_rot) * sin`` in ``x``'s dtype, ``cos``/``sin`` ``[B|1, L, R]``.
    """
    rot = cos.shape[-1]
    cos, sin = cos.unsqueeze(1), sin.unsqueeze(1)
    x_rot, x_pass = x[..., :rot], x[..., rot:]
    return torch.cat((x_rot * cos + _rotate_half(x_rot) * sin, x_pass), dim=-1)


# =========================================================================== attention
class LLaDA2MoeAttention(nn.Module):
    """Grouped-query self-attention with a fused QKV projection, q/k RMSNorm and partial RoPE."""

    def __init__(self, config: LLaDA2MoeConfig, layer_idx: int):
        super().__init__()
        self.layer_idx = layer_idx
        self.num_heads = config.num_attention_heads
        self.num_kv_heads = config.num_key_value_heads
        self.head_dim = config.head_dim
        self.dropout = config.attention_dropout
        self.query_key_value = nn.Linear(
            config.hidden_size, (self.num_heads + 2 * self.num_kv_heads) * self.head_dim, bias=config.use_qkv_bias
        )
        if config.use_qk_norm:
            self.query_layernorm = LLaDA2MoeRMSNorm(self.head_dim, config.rms_norm_eps)
            self.key_layernorm = LLaDA2MoeRMSNorm(self.head_dim, config.rms_norm_eps)
        else:
            self.query_layernorm = self.key_layernorm = None
        self.dense = nn.Linear(self.num_heads * self.head_dim, config.hidden_size, bias=config.use_bias)

    def forward(self, h, cos, sin, mask, cache: LLaDA2KVCache | None, store: bool) -> torch.Tensor:
        """``h`` ``[B, Lq, H]`` → ``[B, Lq, H]``; ``mask`` ``None`` or ``[B|1, 1, Lq, Lc + Lq]`` (bool or additive)."""
        B, L, _ = h.shape
        qkv = self.query_key_value(h).view(B, L, self.num_heads + 2 * self.num_kv_heads, self.head_dim)
        q, k, v = qkv.split([self.num_heads, self.num_kv_heads, self.num_kv_heads], dim=2)
        q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
        if self.query_layernorm is not None:
            q, k = self.query_layernorm(q), self.key_layernorm(k)
        q, k = apply_partial_rotary(q, cos, sin), apply_partial_rotary(k, cos, sin)
        if cache is not None:
            k, v = cache.extend(self.layer_idx, k, v, store)
        if self.num_kv_heads != self.num_heads:
            rep = self.num_heads // self.num_kv_heads
            k = k.repeat_interleave(rep, dim=1, output_size=self.num_heads)
            v = v.repeat_interleave(rep, dim=1, output_size=self.num_heads)
        out = scaled_dot_product_attention(
            q, k, v, attn_mask=mask, dropout_p=self.dropout if self.training else 0.0, is_causal=False
        )
        return self.dense(out.transpose(1, 2).reshape(B, L, -1))


# =========================================================================== MLP and MoE
class LLaDA2MoeMLP(nn.Module):
    """SwiGLU: ``down(act(gate x) * up x)`` (dense layers, each expert, the shared expert)."""

    def __init__(self, config: LLaDA2MoeConfig, width: int):
        super().__init__()
        self.gate_proj = nn.Linear(config.hidden_size, width, bias=False)
        self.up_proj = nn.Linear(config.hidden_size, width, bias=False)
        self.down_proj = nn.Linear(width, config.hidden_size, bias=False)
        self.act_fn = ACT2FN[config.hidden_act]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(self.act_fn(self.gate_proj(x)) * self.up_proj(x))


def group_limited_topk(scores: torch.Tensor, n_group: int, topk_group: int, top_k: int) -> torch.Tensor:
    """Experts chosen by group-limited top-k (official ``LLaDA2MoeGate.group_limited_topk``).

    The ``E`` experts form ``n_group`` equal groups; a group's score is the sum of its two best
    expert scores; the ``topk_group`` best groups stay and every other expert is set to ``-inf``;
    then the ``top_k`` best experts are taken (descending score).

    :param scores: ``[N, E]`` float selection scores. :returns: ``[N, top_k]`` int64 expert ids.
    """
    N, E = scores.shape
    grouped = scores.view(N, n_group, E // n_group)
    group_scores = grouped.topk(2, dim=-1).values.sum(dim=-1)
    keep_groups = torch.topk(group_scores, k=topk_group, dim=-1, sorted=False).indices
    group_mask = torch.zeros_like(group_scores, dtype=torch.bool).scatter_(1, keep_groups, True)
    expert_mask = group_mask.unsqueeze(-1).expand(N, n_group, E // n_group).reshape(N, E)
    return torch.topk(scores.masked_fill(~expert_mask, float("-inf")), k=top_k, dim=-1).indices


def route(
    router_logits: torch.Tensor,
    expert_bias: torch.Tensor,
    n_group: int,
    topk_group: int,
    top_k: int,
    routed_scaling_factor: float,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Sigmoid routing with a selection-only expert bias (arXiv 2412.19437 §2.1.2; release ``LLaDA2MoeGate.forward``).

    ``s = sigmoid(router_logits)``; experts are **chosen** on ``s + expert_bias`` by
    :func:`group_limited_topk`, but **weighted** by the unbiased ``s``:
    ``w = s_idx / (Σ s_idx + 1e-20)`` when ``top_k > 1``, then ``w *= routed_scaling_factor``.

    :param router_logits: ``[N, E]`` fp32. :param expert_bias: ``[E]`` (any float dtype).
    :returns: ``(idx [N, top_k] int64, weights [N, top_k] fp32)``.
    """
    scores = torch.sigmoid(router_logits.float())
    idx = group_limited_topk(scores + expert_bias, n_group, topk_group, top_k)
    weights = torch.gather(scores, 1, idx)
    if top_k > 1:
        weights = weights / (weights.sum(dim=-1, keepdim=True) + 1e-20)
    return idx, weights * routed_scaling_factor


class LLaDA2MoeGate(nn.Module):
    """The router: an fp32 linear map ``[E, H]`` and the persistent ``expert_bias`` buffer ``[E]``.

    ``expert_bias`` (aux-loss-free load balancing) is stored in fp32 and kept in fp32 when a model is
    loaded in bf16/fp16 (``_keep_in_fp32_modules_strict``), so selection uses the stored values
    exactly (the 2.0 release stores it in bf16, 2.1 apparently in fp32; both are exact in fp32).
    """

    def __init__(self, config: LLaDA2MoeConfig):
        super().__init__()
        self.top_k = config.num_experts_per_tok
        self.n_group = config.n_group
        self.topk_group = config.topk_group
        self.routed_scaling_factor = config.routed_scaling_factor
        self.weight = nn.Parameter(torch.empty(config.num_experts, config.hidden_size))
        self.register_buffer("expert_bias", torch.zeros(config.num_experts, dtype=torch.float32))

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``x`` ``[N, H]`` → ``(idx [N, k] int64, weights [N, k] fp32, router_logits [N, E] fp32)``."""
        logits = F.linear(x.float(), self.weight.float())
        idx, weights = route(logits, self.expert_bias, self.n_group, self.topk_group, self.top_k, self.routed_scaling_factor)
        return idx, weights, logits


class LLaDA2MoeSparseMoeBlock(nn.Module):
    """Routed experts (top-k of ``num_experts``) plus the shared expert, on the same normalised input."""

    def __init__(self, config: LLaDA2MoeConfig):
        super().__init__()
        self.gate = LLaDA2MoeGate(config)
        self.experts = nn.ModuleList(LLaDA2MoeMLP(config, config.moe_intermediate_size) for _ in range(config.num_experts))
        self.shared_experts = (
            LLaDA2MoeMLP(config, config.moe_intermediate_size * config.num_shared_experts)
            if config.num_shared_experts > 0
            else None
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """``x`` ``[B, L, H]`` → ``[B, L, H]``: ``Σ_k w_k expert_k(x)`` (fp32 sum, rank order) + ``shared(x)``."""
        B, L, H = x.shape
        flat = x.reshape(-1, H)
        idx, weights, _ = self.gate(flat)
        routed = flat.new_zeros(flat.shape[0], idx.shape[1], H)
        for e in torch.unique(idx).tolist():
            token, slot = (idx == e).nonzero(as_tuple=True)
            # .to: under autocast (train.bf16) the experts return bf16 while the buffer has the input's dtype
            routed[token, slot] = self.experts[e](flat[token]).to(routed.dtype)
        y = (routed.to(weights.dtype) * weights.unsqueeze(-1)).sum(dim=1).to(x.dtype)
        if self.shared_experts is not None:
            y = y + self.shared_experts(flat)
        return y.view(B, L, H)


# =========================================================================== layers and model
class LLaDA2MoeDecoderLayer(GradientCheckpointingLayer):
    """``h + attn(norm h)``, then ``h + mlp(norm h)`` (dense SwiGLU or MoE by layer index)."""

    def __init__(self, config: LLaDA2MoeConfig, layer_idx: int):
        super().__init__()
        self.input_layernorm = LLaDA2MoeRMSNorm(config.hidden_size, config.rms_norm_eps)
        self.attention = LLaDA2MoeAttention(config, layer_idx)
        self.post_attention_layernorm = LLaDA2MoeRMSNorm(config.hidden_size, config.rms_norm_eps)
        self.mlp = (
            LLaDA2MoeSparseMoeBlock(config)
            if config.is_moe_layer(layer_idx)
            else LLaDA2MoeMLP(config, config.intermediate_size)
        )

    def forward(self, hidden_states, cos=None, sin=None, mask=None, cache=None, store=False):
        """``hidden_states`` ``[B, L, H]`` → ``[B, L, H]`` (``cos``/``sin`` from :func:`rotary_tables`)."""
        h = hidden_states + self.attention(self.input_layernorm(hidden_states), cos, sin, mask, cache, store)
        return h + self.mlp(self.post_attention_layernorm(h))


def _attention_mask(
    mask: torch.Tensor | None, batch: int, q_len: int, k_len: int, dtype: torch.dtype
) -> torch.Tensor | None:
    """Normalise the user's mask to ``None`` or ``[B|1, 1, Lq, Lk]``: bool, or additive in ``dtype``.

    :raises LLaDA2InputError: a mask of another rank or shape.
    """
    if mask is None:
        return None
    if mask.dim() == 2:
        if mask.shape != (batch, k_len):
            raise LLaDA2InputError(
                f"a 2-D attention_mask is a key-padding mask of shape [batch, cached + new tokens] = {[batch, k_len]}, "
                f"got {list(mask.shape)}"
            )
        return mask.to(torch.bool)[:, None, None, :]
    if mask.dim() != 4 or mask.shape[1] != 1 or mask.shape[0] not in (1, batch) or tuple(mask.shape[2:]) != (q_len, k_len):
        raise LLaDA2InputError(
            f"attention_mask must be None (full bidirectional), [batch, keys] or [batch|1, 1, {q_len}, {k_len}] "
            f"(queries x cached+new keys; bool True = attend, or additive float), got {list(mask.shape)}; "
            "build block masks with dare.diffusion.block"
        )
    return mask if mask.dtype == torch.bool else mask.to(dtype)


class LLaDA2MoeModel(nn.Module):
    """The backbone: ``word_embeddings``, ``layers``, ``norm``."""

    def __init__(self, config: LLaDA2MoeConfig):
        super().__init__()
        self.config = config
        self.word_embeddings = nn.Embedding(config.vocab_size, config.hidden_size, config.pad_token_id)
        self.layers = nn.ModuleList(LLaDA2MoeDecoderLayer(config, i) for i in range(config.num_hidden_layers))
        self.norm = LLaDA2MoeRMSNorm(config.hidden_size, config.rms_norm_eps)

    def forward(self, inputs_embeds, attention_mask, position_ids, cache, store, output_hidden_states):
        """``inputs_embeds`` ``[B, L, H]`` → ``(normed hidden states [B, L, H], per-layer states or None)``.

        Masks and cache as in :class:`LLaDA2MoeModelLM`; ``store`` appends the new keys/values to ``cache``.
        """
        B, L, _ = inputs_embeds.shape
        past = cache.length if cache is not None else 0
        if position_ids is None:
            position_ids = torch.arange(past, past + L, device=inputs_embeds.device)[None]
        elif position_ids.dim() != 2 or position_ids.shape[-1] != L or position_ids.shape[0] not in (1, B):
            raise LLaDA2InputError(f"position_ids must be [batch|1, {L}], got {list(position_ids.shape)}")
        mask = _attention_mask(attention_mask, B, L, past + L, inputs_embeds.dtype)
        cos, sin = rotary_tables(position_ids, self.config.rotary_dim_used, self.config.rope_theta, inputs_embeds.dtype)
        h = inputs_embeds
        hidden = [h] if output_hidden_states else None
        for layer in self.layers:
            h = layer(h, cos=cos, sin=sin, mask=mask, cache=cache, store=store)
            if hidden is not None:
                hidden.append(h)
        h = self.norm(h)
        if hidden is not None:
            hidden[-1] = h
        return h, hidden


@dataclass
class LLaDA2MoeOutput(ModelOutput):
    """``logits`` ``[B, L, V]`` fp32; ``loss`` (plain CE on unshifted ``labels``, as the release);
    ``cache`` the :class:`LLaDA2KVCache` when one was used; ``hidden_states`` when asked."""

    loss: torch.Tensor | None = None
    logits: torch.Tensor | None = None
    cache: LLaDA2KVCache | None = None
    hidden_states: tuple | None = None


class LLaDA2MoePreTrainedModel(PreTrainedModel):
    config_class = LLaDA2MoeConfig
    base_model_prefix = "model"
    _no_split_modules = ["LLaDA2MoeDecoderLayer"]
    _keep_in_fp32_modules_strict = ["expert_bias"]
    supports_gradient_checkpointing = True
    _supports_sdpa = True

    def _init_weights(self, module):
        """Release init: linear/embedding weights ~ N(0, initializer_range) (padding row 0), norms 1; the router
        weight ~ N(0, initializer_range) and ``expert_bias`` 0."""
        super()._init_weights(module)
        if isinstance(module, LLaDA2MoeGate):
            init.normal_(module.weight, mean=0.0, std=self.config.initializer_range)
            init.zeros_(module.expert_bias)


class LLaDA2MoeModelLM(LLaDA2GenerationMixin, LLaDA2MoePreTrainedModel):
    """LLaDA2.x with its LM head: the class ``AutoModel``/``AutoModelForCausalLM`` load for ``llada2_moe``.

    ``forward(input_ids [B, L] int64, attention_mask, position_ids [B|1, L] int64, cache
    LLaDA2KVCache | None, use_cache)`` returns :class:`LLaDA2MoeOutput` with fp32 ``logits``
    ``[B, L, vocab_size]``, position ``i`` scoring token ``i`` (no shift).

    * ``attention_mask``: ``None`` = full bidirectional; ``[B, Lc + L]`` = key padding; 4-D
      ``[B|1, 1, L, Lc + L]`` = as given (bool True = attend, or an additive float mask, e.g. the
      0/-inf log-mask of LLaDA2.0's decoder or LLaDA2.1's 0/1 mask).
    * ``position_ids``: default ``Lc .. Lc + L - 1``.
    * ``cache``: keys/values of ``Lc`` committed positions attended before the new ones;
      ``use_cache=True`` appends the new ones (creating a cache if none is given). ``None`` means no
      caching (the release's ``use_cache`` config key is not consulted).

    :raises LLaDA2InputError: masks or positions of the wrong shape, ``output_attentions``, or a
        ``past_key_values`` argument (the cache is ``cache``).
    :raises LLaDA2ConfigError: (at construction) a config that cannot build a model.
    """

    def __init__(self, config: LLaDA2MoeConfig):
        config.check_sizes()
        super().__init__(config)
        self.model = LLaDA2MoeModel(config)
        self.lm_head = nn.Linear(config.hidden_size, config.vocab_size, bias=False)
        self.post_init()

    def get_input_embeddings(self):
        return self.model.word_embeddings

    def set_input_embeddings(self, value):
        self.model.word_embeddings = value

    def get_output_embeddings(self):
        return self.lm_head

    def set_output_embeddings(self, value):
        self.lm_head = value

    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        position_ids: torch.LongTensor | None = None,
        cache: LLaDA2KVCache | None = None,
        inputs_embeds: torch.FloatTensor | None = None,
        labels: torch.LongTensor | None = None,
        use_cache: bool | None = None,
        output_attentions: bool | None = None,
        output_hidden_states: bool | None = None,
        return_dict: bool | None = None,
        **kwargs,
    ):
        if output_attentions:
            raise LLaDA2InputError("output_attentions is not supported (attention runs through SDPA)")
        if "past_key_values" in kwargs:
            raise LLaDA2InputError("pass the KV cache as cache= (transformers 5's name), not past_key_values=")
        if (input_ids is None) == (inputs_embeds is None):
            raise LLaDA2InputError("give exactly one of input_ids or inputs_embeds")
        if inputs_embeds is None:
            inputs_embeds = self.model.word_embeddings(input_ids)
        if use_cache and cache is None:
            cache = LLaDA2KVCache()
        h, hidden = self.model(
            inputs_embeds, attention_mask, position_ids, cache, bool(use_cache), bool(output_hidden_states)
        )
        logits = self.lm_head(h).float()
        loss = None
        if labels is not None:
            loss = F.cross_entropy(logits.view(-1, logits.shape[-1]), labels.view(-1).to(logits.device))
        out = LLaDA2MoeOutput(
            loss=loss,
            logits=logits,
            cache=cache,
            hidden_states=tuple(hidden) if hidden is not None else None,
        )
        return out.to_tuple() if return_dict is False else out
