"""Native PyTorch SDAR (``model_type: sdar``) that loads the released checkpoints unchanged.

Architecture (SDAR, arXiv 2510.06303; released as JetLM/SDAR-{1.7B,4B,8B}-Chat): the Qwen3 decoder
(arXiv 2505.09388) used as a block-diffusion LM. Tensor names follow the release (docs/model-families.md §3.2):
``model.embed_tokens``, ``model.layers.{i}.{input_layernorm, self_attn.{q,k,v,o}_proj, self_attn.{q,k}_norm,
post_attention_layernorm, mlp.{gate,up,down}_proj}``, ``model.norm``, ``lm_head``.

Forward, per layer (pre-norm): ``h = RMSNorm(x)``; ``q = q_norm(q_proj h)`` and ``k = k_norm(k_proj h)``
with the RMSNorm over ``head_dim`` applied **per head before RoPE**; RoPE (rotate-half, ``inv_freq_j =
theta^(-2j/hd)``, cos/sin computed in fp32 and cast to the activation dtype) at ``position_ids``; optional
KV cache (:mod:`dare_sdar.cache`); SDPA with scale ``hd^-0.5``; ``x += o_proj(attn)``; ``x += down(silu(gate
h) * up h)``. Final RMSNorm and an untied ``lm_head``; position ``i`` scores token ``i`` (no shift).

Numerics (docs/model-families.md §3.3 and §7): RMSNorm **normalises and multiplies by the weight in fp32 and
casts once**, as the flash-attn triton ``rms_norm_fn`` the release calls (HF's Llama order, cast then
multiply, would differ by up to 1 bf16 ulp). In fp32 both orders are identical.

Attention mask (``attention_mask``): ``None`` = full bidirectional; a 2-D ``[B, Lk]`` padding mask (1 = real
token) = bidirectional over the real keys; a 3-D ``[B|1, Lq, Lk]`` or 4-D ``[B|1, 1|nh, Lq, Lk]`` bool or 0/1
float mask (1 = may attend), e.g. the block-causal mask of the official decoder or the ``[x_t ; x_0]``
training mask of :mod:`dare.diffusion.block`. ``Lk`` counts cached keys plus this call's keys.
Unlike the release, the forward is the same in train and eval mode: block-diffusion training is done by
the family adapter (``SDARFamily.denoiser_logits``) with an explicit mask, not by hidden noising inside
``forward``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import torch
from torch import nn
from transformers import PreTrainedModel
from transformers import initialization as init
from transformers.activations import ACT2FN
from transformers.modeling_layers import GradientCheckpointingLayer
from transformers.modeling_outputs import BaseModelOutputWithPast
from transformers.utils import ModelOutput

from dare.diffusion.packing import scaled_dot_product_attention
from dare_sdar.cache import SDARCache
from dare_sdar.configuration_sdar import SDARConfig
from dare_sdar.errors import SDARInputError
from dare_sdar.generation import SDARGenerationMixin

__all__ = [
    "SDARRMSNorm",
    "SDARMLP",
    "SDARAttention",
    "SDARDecoderLayer",
    "SDARPreTrainedModel",
    "SDARModel",
    "SDARForCausalLM",
    "SDAROutput",
    "rope_cos_sin",
    "attention_keep_mask",
]


@dataclass
class SDAROutput(ModelOutput):
    """``logits`` ``[B, L', V]`` (model dtype; ``L'`` per ``logits_to_keep``), ``cache`` (the
    :class:`~dare_sdar.cache.SDARCache`, when one was given or ``use_cache``; also readable as
    ``past_key_values``, transformers' older name), ``hidden_states`` when asked."""

    logits: torch.Tensor | None = None
    cache: SDARCache | None = None
    hidden_states: tuple[torch.Tensor, ...] | None = None


class SDARRMSNorm(nn.Module):
    """RMSNorm ``y = x / sqrt(mean(x^2) + eps) * w`` over the last dimension.

    Computed in fp32 (autocast off) including the weight multiply, then cast once to the input dtype:
    the numerics of flash-attn's triton ``rms_norm_fn`` used by the SDAR release (module docstring).
    Input ``[..., size]`` any float dtype; output same shape and dtype.
    """

    def __init__(self, size: int, eps: float = 1e-6):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(size))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        with torch.autocast(device_type=x.device.type, enabled=False):
            h = x.float()
            h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + self.eps)
            return (h * self.weight.float()).to(x.dtype)

    def extra_repr(self) -> str:
        return f"{tuple(self.weight.shape)}, eps={self.eps}"


def rope_cos_sin(position_ids: torch.Tensor, head_dim: int, theta: float, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """RoPE tables for ``position_ids`` ``[B, L]`` (int): ``cos, sin`` ``[B, 1, L, head_dim]`` in ``dtype``.

    ``inv_freq_j = theta^(-2j / head_dim)``; angles ``pos * inv_freq`` in fp32 (autocast off), duplicated
    over both halves (``cat(freqs, freqs)``), then cast (HF Qwen3 ``default`` RoPE, attention scaling 1).
    """
    with torch.autocast(device_type=position_ids.device.type, enabled=False):
        exponent = torch.arange(0, head_dim, 2, dtype=torch.int64, device=position_ids.device).float() / head_dim
        inv_freq = 1.0 / (theta**exponent)
        freqs = position_ids[..., None].float() * inv_freq
        emb = torch.cat((freqs, freqs), dim=-1)
        return emb.cos().to(dtype)[:, None], emb.sin().to(dtype)[:, None]


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((-x2, x1), dim=-1)


def _apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    return x * cos + _rotate_half(x) * sin


def attention_keep_mask(mask: torch.Tensor | None, batch: int, q_len: int, k_len: int) -> torch.Tensor | None:
    """Normalise a forward's ``attention_mask`` to a bool SDPA mask (True = may attend), or None.

    :param mask: None; ``[B, Lk]`` padding mask; ``[B|1, Lq, Lk]`` or ``[B|1, 1|nh, Lq, Lk]`` block mask,
        bool or 0/1 numbers (module docstring).
    :returns: None when every query may attend every key (SDPA then runs unmasked, as the release's
        all-true fast path), else a bool tensor broadcastable to ``[B, nh, Lq, Lk]``.
    :raises SDARInputError: wrong rank/shape, or values other than 0/1 (an additive 0/-inf mask).
    """
    if mask is None:
        return None
    if mask.dtype != torch.bool:
        if not bool(((mask == 0) | (mask == 1)).all()):
            raise SDARInputError(
                "attention_mask must hold 0/1 (1 = may attend) or bools; an additive 0/-inf mask is not accepted"
            )
        mask = mask != 0
    if mask.dim() == 2:
        if tuple(mask.shape) != (batch, k_len):
            raise SDARInputError(
                f"2-D attention_mask is a padding mask and must be [batch, keys] = [{batch}, {k_len}] "
                f"(cached + new positions), got {list(mask.shape)}"
            )
        mask = mask[:, None, None, :]
    elif mask.dim() == 3 and mask.shape[0] != 1:
        mask = mask[:, None]  # [B, Lq, Lk] -> [B, 1, Lq, Lk]; a [1, Lq, Lk] mask stays 3-D, as the release passes it
    elif mask.dim() not in (3, 4):  # (SDPA picks its CPU kernel by the mask's rank: ~1 bf16 ulp apart)
        raise SDARInputError(f"attention_mask must be 2-D, 3-D or 4-D, got {mask.dim()}-D")
    if mask.shape[0] not in (1, batch) or mask.shape[-1] != k_len or mask.shape[-2] not in (1, q_len):
        raise SDARInputError(
            f"attention_mask of shape {list(mask.shape)} does not broadcast to [batch, heads, queries, keys] = "
            f"[{batch}, *, {q_len}, {k_len}]"
        )
    if bool(mask.all()):
        return None
    return mask


class SDARMLP(nn.Module):
    """SwiGLU ``down(act(gate x) * up x)``; ``x`` ``[..., hidden]`` -> ``[..., hidden]`` (no biases)."""

    def __init__(self, hidden_size: int, intermediate_size: int, hidden_act: str = "silu"):
        super().__init__()
        self.gate_proj = nn.Linear(hidden_size, intermediate_size, bias=False)
        self.up_proj = nn.Linear(hidden_size, intermediate_size, bias=False)
        self.down_proj = nn.Linear(intermediate_size, hidden_size, bias=False)
        self.act_fn = ACT2FN[hidden_act]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(self.act_fn(self.gate_proj(x)) * self.up_proj(x))


class SDARAttention(nn.Module):
    """Grouped-query attention with per-head q/k RMSNorm before RoPE and the ``store_kv`` cache protocol."""

    def __init__(self, config, layer_idx: int):
        super().__init__()
        self.layer_idx = layer_idx
        self.head_dim = config.head_dim
        self.num_heads = config.num_attention_heads
        self.num_kv_heads = config.num_key_value_heads
        self.scaling = self.head_dim**-0.5
        self.attention_dropout = config.attention_dropout
        bias = config.attention_bias
        self.q_proj = nn.Linear(config.hidden_size, self.num_heads * self.head_dim, bias=bias)
        self.k_proj = nn.Linear(config.hidden_size, self.num_kv_heads * self.head_dim, bias=bias)
        self.v_proj = nn.Linear(config.hidden_size, self.num_kv_heads * self.head_dim, bias=bias)
        self.o_proj = nn.Linear(self.num_heads * self.head_dim, config.hidden_size, bias=bias)
        self.q_norm = SDARRMSNorm(self.head_dim, eps=config.rms_norm_eps)
        self.k_norm = SDARRMSNorm(self.head_dim, eps=config.rms_norm_eps)

    def forward(
        self,
        hidden_states: torch.Tensor,
        cos: torch.Tensor,
        sin: torch.Tensor,
        mask: torch.Tensor | None = None,
        cache: SDARCache | None = None,
        store_kv: bool = False,
    ) -> torch.Tensor:
        """``hidden_states`` ``[B, L, H]`` -> ``[B, L, H]``; ``mask`` from :func:`attention_keep_mask`."""
        B, L, _ = hidden_states.shape
        q = self.q_norm(self.q_proj(hidden_states).view(B, L, -1, self.head_dim)).transpose(1, 2)
        k = self.k_norm(self.k_proj(hidden_states).view(B, L, -1, self.head_dim)).transpose(1, 2)
        v = self.v_proj(hidden_states).view(B, L, -1, self.head_dim).transpose(1, 2)
        q, k = _apply_rope(q, cos, sin), _apply_rope(k, cos, sin)
        if cache is not None:
            k, v = cache.append(self.layer_idx, k, v) if store_kv else cache.extend(self.layer_idx, k, v)
        out = scaled_dot_product_attention(
            q,
            k,
            v,
            attn_mask=mask,
            dropout_p=self.attention_dropout if self.training else 0.0,
            scale=self.scaling,
            enable_gqa=self.num_kv_heads != self.num_heads,
        )
        return self.o_proj(out.transpose(1, 2).reshape(B, L, -1))


class SDARDecoderLayer(GradientCheckpointingLayer):
    """Pre-norm block ``x + attn(norm x)`` then ``x + mlp(norm x)``; ``mlp`` is dense or MoE."""

    def __init__(self, config, layer_idx: int, mlp: nn.Module):
        super().__init__()
        self.self_attn = SDARAttention(config, layer_idx)
        self.mlp = mlp
        self.input_layernorm = SDARRMSNorm(config.hidden_size, eps=config.rms_norm_eps)
        self.post_attention_layernorm = SDARRMSNorm(config.hidden_size, eps=config.rms_norm_eps)

    def forward(
        self,
        hidden_states: torch.Tensor,
        cos: torch.Tensor,
        sin: torch.Tensor,
        mask: torch.Tensor | None = None,
        cache: SDARCache | None = None,
        store_kv: bool = False,
    ) -> torch.Tensor:
        h = self.self_attn(self.input_layernorm(hidden_states), cos, sin, mask=mask, cache=cache, store_kv=store_kv)
        hidden_states = hidden_states + h
        return hidden_states + self.mlp(self.post_attention_layernorm(hidden_states))


class SDARPreTrainedModel(PreTrainedModel):
    """Weight init and HF plumbing shared by the SDAR classes."""

    config_class = SDARConfig
    base_model_prefix = "model"
    supports_gradient_checkpointing = True
    _no_split_modules = ["SDARDecoderLayer"]
    _supports_sdpa = True

    def _init_weights(self, module):
        """Official init: Linear/Embedding ``N(0, initializer_range)``, biases and the padding row 0, norms 1."""
        std = self.config.initializer_range
        if isinstance(module, (nn.Linear, nn.Embedding)):
            init.normal_(module.weight, mean=0.0, std=std)
            if isinstance(module, nn.Linear) and module.bias is not None:
                init.zeros_(module.bias)
            if isinstance(module, nn.Embedding) and module.padding_idx is not None:
                init.zeros_(module.weight[module.padding_idx])
        elif isinstance(module, SDARRMSNorm):
            init.ones_(module.weight)


class SDARModel(SDARPreTrainedModel):
    """The decoder stack without the LM head (``model.*`` tensors)."""

    def __init__(self, config):
        super().__init__(config)
        self.embed_tokens = nn.Embedding(config.vocab_size, config.hidden_size, getattr(config, "pad_token_id", None))
        self.layers = nn.ModuleList(
            [SDARDecoderLayer(config, i, self.build_mlp(config, i)) for i in range(config.num_hidden_layers)]
        )
        self.norm = SDARRMSNorm(config.hidden_size, eps=config.rms_norm_eps)
        self.gradient_checkpointing = False
        self.post_init()

    def build_mlp(self, config, layer_idx: int) -> nn.Module:
        """The feed-forward module of layer ``layer_idx`` (dense SwiGLU; the MoE model overrides this)."""
        return SDARMLP(config.hidden_size, config.intermediate_size, config.hidden_act)

    def get_input_embeddings(self):
        return self.embed_tokens

    def set_input_embeddings(self, value):
        self.embed_tokens = value

    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        position_ids: torch.LongTensor | None = None,
        past_key_values: SDARCache | None = None,
        inputs_embeds: torch.FloatTensor | None = None,
        use_cache: bool | None = None,
        store_kv: bool = False,
        output_hidden_states: bool | None = None,
    ) -> BaseModelOutputWithPast:
        """Final hidden states ``[B, L, H]`` (after ``model.norm``); arguments as :meth:`SDARForCausalLM.forward`.

        :raises SDARInputError: both or neither of ``input_ids``/``inputs_embeds``; a bad mask; a cache that
            is not an :class:`~dare_sdar.cache.SDARCache`.
        """
        if (input_ids is None) == (inputs_embeds is None):
            raise SDARInputError("give exactly one of input_ids or inputs_embeds")
        hidden = self.embed_tokens(input_ids) if inputs_embeds is None else inputs_embeds
        B, L = hidden.shape[:2]
        use_cache = self.config.use_cache if use_cache is None else use_cache
        cache = past_key_values
        if cache is not None and not isinstance(cache, SDARCache):
            raise SDARInputError(f"past_key_values must be a dare_sdar.SDARCache, got {type(cache).__name__}")
        if cache is None and use_cache:
            cache = SDARCache()
        past = cache.seq_length() if cache is not None else 0
        if position_ids is None:
            position_ids = torch.arange(past, past + L, device=hidden.device)[None].expand(B, -1)
        mask = attention_keep_mask(attention_mask, B, L, past + L)
        cos, sin = rope_cos_sin(position_ids, self.config.head_dim, self.config.rope_theta, hidden.dtype)
        all_hidden = [] if output_hidden_states else None
        for layer in self.layers:
            if all_hidden is not None:
                all_hidden.append(hidden)
            hidden = layer(hidden, cos, sin, mask=mask, cache=cache, store_kv=store_kv)
        hidden = self.norm(hidden)
        if all_hidden is not None:
            all_hidden.append(hidden)
        return BaseModelOutputWithPast(
            last_hidden_state=hidden,
            cache=cache,
            hidden_states=tuple(all_hidden) if all_hidden is not None else None,
        )


class SDARForCausalLM(SDARGenerationMixin, SDARPreTrainedModel):
    """SDAR with its LM head: the class ``AutoModel``/``AutoModelForCausalLM`` load for ``model_type: sdar``."""

    backbone_class: ClassVar[type[SDARModel]] = SDARModel
    _tied_weights_keys = {"lm_head.weight": "model.embed_tokens.weight"}

    def __init__(self, config):
        super().__init__(config)
        self.model = self.backbone_class(config)
        self.lm_head = nn.Linear(config.hidden_size, config.vocab_size, bias=False)
        self.post_init()

    def get_input_embeddings(self):
        return self.model.embed_tokens

    def set_input_embeddings(self, value):
        self.model.embed_tokens = value

    def get_output_embeddings(self):
        return self.lm_head

    def set_output_embeddings(self, value):
        self.lm_head = value

    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        position_ids: torch.LongTensor | None = None,
        past_key_values: SDARCache | None = None,
        inputs_embeds: torch.FloatTensor | None = None,
        use_cache: bool | None = None,
        store_kv: bool = False,
        output_hidden_states: bool | None = None,
        logits_to_keep: int | torch.Tensor = 0,
        return_dict: bool | None = None,
    ) -> SDAROutput | tuple:
        """Logits of ``input_ids`` ``[B, L]`` (int64) for every (or the kept) position.

        :param attention_mask: see the module docstring (None = full bidirectional).
        :param position_ids: ``[B, L]`` RoPE positions (default ``past .. past + L - 1``).
        :param past_key_values: an :class:`~dare_sdar.cache.SDARCache`; with ``store_kv=True`` this call's keys
            are appended to it (prefill / commit a block), else they are attended with it but not stored.
        :param use_cache: create a cache when none is given (default ``config.use_cache``).
        :param logits_to_keep: int ``n > 0`` = the last ``n`` positions; a 1-D LongTensor = those positions;
            0 = all.
        :returns: :class:`SDAROutput` with ``logits`` ``[B, L', vocab_size]`` in the model dtype.
        :raises SDARInputError: see :meth:`SDARModel.forward`.
        """
        out = self.model(
            input_ids=input_ids,
            attention_mask=attention_mask,
            position_ids=position_ids,
            past_key_values=past_key_values,
            inputs_embeds=inputs_embeds,
            use_cache=use_cache,
            store_kv=store_kv,
            output_hidden_states=output_hidden_states,
        )
        hidden = out.last_hidden_state
        if isinstance(logits_to_keep, int):
            hidden = hidden[:, -logits_to_keep:] if logits_to_keep > 0 else hidden
        else:
            hidden = hidden[:, logits_to_keep]
        result = SDAROutput(
            logits=self.lm_head(hidden), cache=out.cache, hidden_states=out.hidden_states
        )
        return result.to_tuple() if return_dict is False else result
