"""Native PyTorch Dream (``model_type: Dream``) that loads the released checkpoints unchanged.

Architecture (Dream 7B, arXiv 2508.15487; released as Dream-org/Dream-v0-Instruct-7B; DiffuCoder,
arXiv 2506.20639, is the same architecture): the Qwen2.5 pre-norm decoder *without* a causal mask.
Tensor names follow the release (docs/model-families.md §2.2): ``model.embed_tokens``,
``model.layers.{i}.{input_layernorm, self_attn.{q,k,v}_proj (+bias), self_attn.o_proj (no bias),
post_attention_layernorm, mlp.{gate,up,down}_proj}``, ``model.norm``, ``lm_head``. The RoPE
``inv_freq`` buffer is non-persistent, so it is not part of the checkpoint.

Numerics follow the release (docs/model-families.md §2.3 and §7) so fp32 logits agree to ~1e-6:

* RMSNorm is Llama-style: normalise in fp32, cast back to the input dtype, multiply by the weight;
* RoPE (rotate-half, ``inv_freq_j = theta^(-2j/hd)``) takes ``position_ids`` (default
  ``arange(L)``); cos/sin are computed in fp32 with autocast off and cast to the activation dtype
  before the multiply;
* attention is SDPA with ``is_causal=False``; GQA repeats each KV head ``nh/nkv`` times;
* the output is *unshifted*: position ``j`` carries the distribution of token ``j+1`` (Dream keeps
  the AR alignment of its Qwen2.5 initialisation). Consumers shift through
  :meth:`dare_dream.family.DreamFamily.logits`; ``forward`` never shifts.

``attention_mask`` may be None or ``"full"`` (bidirectional), ``[B, L]`` (1 real / 0 pad; becomes
the bool ``[B, 1, L, L]`` mask ``m_q & m_k`` as in the release), ``[B, L, L]`` or
``[B, 1|nh, L, L]`` (cast to bool, True = attend). A mask without any zero means "full".

KV cache (Fast-dLLM; the release has none, NVlabs/Fast-dLLM ``dream/model/modeling_dream.py`` adds it):
``use_cache=True`` returns ``cache`` (transformers' name; also readable as ``past_key_values``), per layer ``(k, v)`` ``[B, nkv, P, hd]`` with keys stored
*after* RoPE. Given ``past_key_values`` the input either follows the ``P`` cached positions, or, with
``replace_position`` (``[B, P]`` bool, the same contiguous span in every row), takes the place of the
positions it marks and attends to the cached keys/values everywhere else (:mod:`dare.sampling.kv_cache`).
Unlike the Fast-dLLM copy, ``position_ids`` are honoured (left padding), the cache is not modified in
place, and a mask is ``[B, 1, Lq, Lk]`` (queries x all keys).
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
from transformers.modeling_outputs import BaseModelOutput, MaskedLMOutput

from dare.diffusion.packing import scaled_dot_product_attention
from dare.errors import CheckpointError
from dare.sampling.kv_cache import replace_span
from dare_dream.configuration_dream import DreamConfig
from dare_dream.generation import DreamGenerationMixin

__all__ = [
    "DreamModel",
    "DreamBaseModel",
    "DreamDecoderLayer",
    "DreamPreTrainedModel",
    "DreamRMSNorm",
    "DreamRotaryEmbedding",
    "prepare_attention_mask",
]


class DreamRMSNorm(nn.Module):
    """Llama-style RMSNorm: ``w * (x / sqrt(mean(x^2) + eps))`` normalised in fp32, cast back, then scaled.

    Input ``[..., H]`` any float dtype; output the same dtype.
    """

    def __init__(self, hidden_size: int, eps: float = 1e-6):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(hidden_size))
        self.variance_epsilon = eps

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        dtype = hidden_states.dtype
        h = hidden_states.to(torch.float32)
        h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + self.variance_epsilon)
        return self.weight * h.to(dtype)


def _rope_inv_freq(config: DreamConfig, device=None) -> torch.Tensor:
    """``[hd/2]`` fp32 inverse frequencies ``theta^(-2j/hd)`` (transformers' "default" RoPE).

    :raises CheckpointError: a ``rope_scaling`` other than ``None``/``default`` (no Dream release uses one).
    """
    scaling = config.rope_scaling
    kind = None if scaling is None else scaling.get("rope_type", scaling.get("type"))
    if kind not in (None, "default"):
        raise CheckpointError(
            f"config.json rope_scaling {scaling!r} is not supported by dare-plugin-dream; Dream and DiffuCoder "
            "releases use rope_scaling: null"
        )
    dim = config.head_dim
    exponent = torch.arange(0, dim, 2, dtype=torch.int64, device=device).to(torch.float) / dim
    return 1.0 / (config.rope_theta**exponent)


class DreamRotaryEmbedding(nn.Module):
    """RoPE tables from ``position_ids``: returns ``(cos, sin)`` ``[B, L, hd]`` in the activation dtype.

    Tables are computed in fp32 with autocast off (``freqs = pos * inv_freq``, ``emb = [freqs,
    freqs]``), then cast to ``x.dtype``, as in the release. ``inv_freq`` is a non-persistent fp32
    buffer that stays fp32 when the model is cast (``model.to(torch.bfloat16)``), so a model cast
    after creation rotates exactly like one loaded with ``dtype=bfloat16``.
    """

    def __init__(self, config: DreamConfig):
        super().__init__()
        self.config = config
        self.register_buffer("inv_freq", _rope_inv_freq(config), persistent=False)

    def _apply(self, fn, recurse=True):
        super()._apply(fn, recurse)
        if self.inv_freq.dtype != torch.float32:
            self.inv_freq = _rope_inv_freq(self.config, self.inv_freq.device)
        return self

    @torch.no_grad()
    def forward(self, x: torch.Tensor, position_ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        device_type = x.device.type if x.device.type != "mps" else "cpu"
        with torch.autocast(device_type=device_type, enabled=False):
            freqs = position_ids[:, :, None].float() * self.inv_freq.float()[None, None, :]
            emb = torch.cat((freqs, freqs), dim=-1)
            cos, sin = emb.cos(), emb.sin()
        return cos.to(x.dtype), sin.to(x.dtype)


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def _apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate ``x`` ``[B, heads, L, hd]`` with ``cos``/``sin`` ``[B, L, hd]`` (same dtype as ``x``)."""
    cos, sin = cos.unsqueeze(1), sin.unsqueeze(1)
    return x * cos + _rotate_half(x) * sin


def _repeat_kv(x: torch.Tensor, n_rep: int) -> torch.Tensor:
    """``[B, nkv, L, hd]`` -> ``[B, nkv * n_rep, L, hd]``, each KV head repeated ``n_rep`` times in place."""
    if n_rep == 1:
        return x
    b, nkv, length, hd = x.shape
    return x[:, :, None].expand(b, nkv, n_rep, length, hd).reshape(b, nkv * n_rep, length, hd)


class DreamAttention(nn.Module):
    """Bidirectional GQA self-attention with q/k/v biases, RoPE and SDPA (release: ``DreamSdpaAttention``).

    :raises ValueError: ``hidden_size`` not divisible by ``num_attention_heads``, or heads not
        divisible by ``num_key_value_heads``.
    """

    def __init__(self, config: DreamConfig):
        super().__init__()
        self.num_heads = config.num_attention_heads
        self.num_kv_heads = config.num_key_value_heads
        self.head_dim = config.head_dim
        if self.head_dim * self.num_heads != config.hidden_size:
            raise ValueError(
                f"hidden_size ({config.hidden_size}) must be divisible by num_attention_heads ({self.num_heads})"
            )
        if self.num_heads % self.num_kv_heads != 0:
            raise ValueError(
                f"num_attention_heads ({self.num_heads}) must be a multiple of "
                f"num_key_value_heads ({self.num_kv_heads})"
            )
        self.attention_dropout = config.attention_dropout
        h = config.hidden_size
        self.q_proj = nn.Linear(h, self.num_heads * self.head_dim, bias=True)
        self.k_proj = nn.Linear(h, self.num_kv_heads * self.head_dim, bias=True)
        self.v_proj = nn.Linear(h, self.num_kv_heads * self.head_dim, bias=True)
        self.o_proj = nn.Linear(self.num_heads * self.head_dim, h, bias=False)

    def forward(
        self,
        hidden_states: torch.Tensor,
        position_embeddings: tuple[torch.Tensor, torch.Tensor],
        attention_mask: torch.Tensor | None = None,
        layer_past: tuple[torch.Tensor, torch.Tensor] | None = None,
        span: tuple[int, int] | None = None,
        use_cache: bool = False,
    ) -> tuple[torch.Tensor, tuple[torch.Tensor, torch.Tensor] | None]:
        """``hidden_states`` ``[B, Lq, H]``; ``attention_mask`` bool ``[B|1, 1|nh, Lq, Lk]`` or None.

        ``layer_past`` ``(k, v)`` (keys after RoPE): the new keys follow them, or replace positions
        ``span = (s, e)``. Returns ``(out [B, Lq, H], (k, v) of all keys when use_cache)``.
        """
        b, length, _ = hidden_states.shape
        q = self.q_proj(hidden_states).view(b, length, self.num_heads, self.head_dim).transpose(1, 2)
        k = self.k_proj(hidden_states).view(b, length, self.num_kv_heads, self.head_dim).transpose(1, 2)
        v = self.v_proj(hidden_states).view(b, length, self.num_kv_heads, self.head_dim).transpose(1, 2)
        cos, sin = position_embeddings
        q, k = _apply_rope(q, cos, sin), _apply_rope(k, cos, sin)
        if layer_past is not None and span is not None:
            s, e = span
            k = torch.cat((layer_past[0][:, :, :s], k, layer_past[0][:, :, e:]), dim=-2)
            v = torch.cat((layer_past[1][:, :, :s], v, layer_past[1][:, :, e:]), dim=-2)
        elif layer_past is not None:
            k = torch.cat((layer_past[0], k), dim=-2)
            v = torch.cat((layer_past[1], v), dim=-2)
        present = (k, v) if use_cache else None
        n_rep = self.num_heads // self.num_kv_heads
        k, v = _repeat_kv(k, n_rep), _repeat_kv(v, n_rep)
        if q.device.type == "cuda" and attention_mask is not None:
            q, k, v = q.contiguous(), k.contiguous(), v.contiguous()
        out = scaled_dot_product_attention(
            q,
            k,
            v,
            attn_mask=attention_mask,
            dropout_p=self.attention_dropout if self.training else 0.0,
            is_causal=False,
        )
        out = out.transpose(1, 2).reshape(b, length, self.num_heads * self.head_dim)
        return self.o_proj(out), present


class DreamMLP(nn.Module):
    """SwiGLU: ``down(act(gate x) * up x)``, no biases."""

    def __init__(self, config: DreamConfig):
        super().__init__()
        h, i = config.hidden_size, config.intermediate_size
        self.gate_proj = nn.Linear(h, i, bias=False)
        self.up_proj = nn.Linear(h, i, bias=False)
        self.down_proj = nn.Linear(i, h, bias=False)
        self.act_fn = ACT2FN[config.hidden_act]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(self.act_fn(self.gate_proj(x)) * self.up_proj(x))


class DreamDecoderLayer(GradientCheckpointingLayer):
    """One pre-norm block: ``x + attn(norm(x))`` then ``x + mlp(norm(x))`` (the FSDP wrap unit)."""

    def __init__(self, config: DreamConfig):
        super().__init__()
        self.self_attn = DreamAttention(config)
        self.mlp = DreamMLP(config)
        self.input_layernorm = DreamRMSNorm(config.hidden_size, eps=config.rms_norm_eps)
        self.post_attention_layernorm = DreamRMSNorm(config.hidden_size, eps=config.rms_norm_eps)

    def forward(
        self,
        hidden_states: torch.Tensor,
        position_embeddings: tuple[torch.Tensor, torch.Tensor],
        attention_mask: torch.Tensor | None = None,
        layer_past: tuple[torch.Tensor, torch.Tensor] | None = None,
        span: tuple[int, int] | None = None,
        use_cache: bool = False,
    ) -> tuple[torch.Tensor, tuple[torch.Tensor, torch.Tensor] | None]:
        """Returns ``(hidden [B, Lq, H], present)`` (:meth:`DreamAttention.forward`)."""
        att, present = self.self_attn(self.input_layernorm(hidden_states), position_embeddings, attention_mask,
                                      layer_past, span, use_cache)
        h = hidden_states + att
        return h + self.mlp(self.post_attention_layernorm(h)), present


@dataclass
class DreamBaseOutput(BaseModelOutput):
    """:class:`DreamBaseModel` output: ``last_hidden_state``, ``hidden_states`` and, with ``use_cache``,
    ``cache`` (per layer ``(k, v)`` ``[B, nkv, Lk, hd]``, keys after RoPE; transformers also reads it as
    ``past_key_values``)."""

    cache: list | None = None


@dataclass
class DreamMaskedLMOutput(MaskedLMOutput):
    """:class:`DreamModel` output: ``MaskedLMOutput`` plus ``cache`` (readable as ``past_key_values``) when
    ``use_cache``."""

    cache: list | None = None


def prepare_attention_mask(attention_mask) -> torch.Tensor | None:
    """The SDPA mask for an ``attention_mask`` argument, following the release's ``DreamModel.forward``.

    * None, ``"full"`` or a tensor without any zero -> None (full bidirectional attention);
    * ``[B, L]`` (1 real, 0 pad) -> bool ``[B, 1, L, L]`` = ``m_q & m_k`` (pad queries attend nothing;
      SDPA returns zeros for those rows, so real positions are unaffected);
    * ``[B, L, L]`` -> bool ``[B, 1, L, L]`` (the release passes 3-D masks to SDPA unchanged, which
      broadcasts wrongly unless B == 1; adding the head axis is the intended meaning);
    * ``[B, 1|nh, L, L]`` -> cast to bool (True = attend).

    :raises ValueError: a string other than ``"full"``, or a tensor of another rank.
    :raises TypeError: anything else.
    """
    if attention_mask is None:
        return None
    if isinstance(attention_mask, str):
        if attention_mask != "full":
            raise ValueError(f"attention_mask string must be 'full', got {attention_mask!r}")
        return None
    if not isinstance(attention_mask, torch.Tensor):
        raise TypeError(f"attention_mask must be None, 'full' or a tensor, got {type(attention_mask).__name__}")
    if not bool((attention_mask == 0).any()):
        return None
    if attention_mask.dim() == 2:
        m = attention_mask.to(torch.bool)
        return m[:, None, None, :] & m[:, None, :, None]
    if attention_mask.dim() == 3:
        return attention_mask.to(torch.bool).unsqueeze(1)
    if attention_mask.dim() == 4:
        return attention_mask.to(torch.bool)
    shape = list(attention_mask.shape)
    raise ValueError(f"attention_mask must be [B, L], [B, L, L] or [B, 1, L, L]; got shape {shape}")


class DreamPreTrainedModel(PreTrainedModel):
    """Shared ``PreTrainedModel`` settings and the release's initialisation (normal(0, initializer_range),
    zero biases, zero embedding row at ``pad_token_id``, unit RMSNorm weights)."""

    config_class = DreamConfig
    base_model_prefix = "model"
    supports_gradient_checkpointing = True
    _no_split_modules = ["DreamDecoderLayer"]
    _supports_sdpa = True

    def _init_weights(self, module):
        std = self.config.initializer_range
        if isinstance(module, nn.Linear):
            init.normal_(module.weight, mean=0.0, std=std)
            if module.bias is not None:
                init.zeros_(module.bias)
        elif isinstance(module, nn.Embedding):
            init.normal_(module.weight, mean=0.0, std=std)
            if module.padding_idx is not None and not getattr(module.weight, "_is_hf_initialized", False):
                init.zeros_(module.weight[module.padding_idx])
        elif isinstance(module, DreamRMSNorm):
            init.ones_(module.weight)
        elif isinstance(module, DreamRotaryEmbedding):
            init.copy_(module.inv_freq, _rope_inv_freq(module.config, module.inv_freq.device))


class DreamBaseModel(DreamPreTrainedModel):
    """The decoder stack (``DreamModel.model``): embeddings, layers, final norm. Returns hidden states.

    As in the release, ``embed_tokens`` has ``padding_idx = pad_token_id`` (Dream: ``<|endoftext|>``,
    also EOS): that row is zero in a fresh model and never receives a gradient.
    """

    def __init__(self, config: DreamConfig):
        super().__init__(config)
        self.embed_tokens = nn.Embedding(config.vocab_size, config.hidden_size, config.pad_token_id)
        self.layers = nn.ModuleList([DreamDecoderLayer(config) for _ in range(config.num_hidden_layers)])
        self.norm = DreamRMSNorm(config.hidden_size, eps=config.rms_norm_eps)
        self.rotary_emb = DreamRotaryEmbedding(config)
        self.post_init()

    def get_input_embeddings(self):
        return self.embed_tokens

    def set_input_embeddings(self, value):
        self.embed_tokens = value

    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask=None,
        position_ids: torch.LongTensor | None = None,
        inputs_embeds: torch.FloatTensor | None = None,
        output_hidden_states: bool = False,
        past_key_values=None,
        use_cache: bool = False,
        replace_position: torch.Tensor | None = None,
    ) -> DreamBaseOutput:
        """``input_ids`` ``[B, L]`` int64 (or ``inputs_embeds`` ``[B, L, H]``); ``position_ids`` ``[B|1, L]``
        int64 (default ``arange(L)``, or the positions the input takes after/inside ``past_key_values``);
        ``attention_mask`` as :func:`prepare_attention_mask` (with a cache: ``[B, Lk]`` key padding, whose
        query rows are the input's positions, or ``[B, 1, L, Lk]``). Cache arguments: module docstring.

        :raises ValueError: neither or both of ``input_ids``/``inputs_embeds``; ``replace_position``
            without a cache or not matching the input length.
        """
        if (input_ids is None) == (inputs_embeds is None):
            raise ValueError("give exactly one of input_ids or inputs_embeds")
        x = self.embed_tokens(input_ids) if inputs_embeds is None else inputs_embeds
        length = x.shape[1]
        past_length = past_key_values[0][0].shape[-2] if past_key_values else 0
        span, q0 = None, past_length
        if replace_position is not None:
            if not past_key_values:
                raise ValueError("replace_position needs past_key_values (the cache whose positions it replaces)")
            span = replace_span(replace_position)
            if span[1] - span[0] != length or span[1] > past_length:
                raise ValueError(
                    f"replace_position marks positions {span[0]}..{span[1] - 1} but the input has {length} tokens "
                    f"and the cache {past_length} positions"
                )
            q0 = span[0]
        if position_ids is None:
            position_ids = torch.arange(q0, q0 + length, device=x.device)[None]
        if past_key_values and isinstance(attention_mask, torch.Tensor) and attention_mask.dim() == 2:
            keep = attention_mask.to(torch.bool)
            attention_mask = keep[:, None, None, :] & keep[:, None, q0 : q0 + length, None]
        mask = prepare_attention_mask(attention_mask)
        rope = self.rotary_emb(x, position_ids)
        hidden = [] if output_hidden_states else None
        presents = [] if use_cache else None
        for i, layer in enumerate(self.layers):
            if hidden is not None:
                hidden.append(x)
            past = past_key_values[i] if past_key_values else None
            x, present = layer(x, rope, mask, layer_past=past, span=span, use_cache=use_cache)
            if presents is not None:
                presents.append(present)
        x = self.norm(x)
        if hidden is not None:
            hidden.append(x)
        return DreamBaseOutput(last_hidden_state=x, hidden_states=tuple(hidden) if hidden is not None else None,
                               cache=presents)


class DreamModel(DreamGenerationMixin, DreamPreTrainedModel):
    """Dream with its LM head: the class the release's ``auto_map`` names and ``AutoModel`` loads.

    ``forward(input_ids [B, L] int64, attention_mask, position_ids [B, L] int64 | None)`` returns a
    ``MaskedLMOutput`` with ``logits`` ``[B, L, vocab_size]`` in the model dtype, **unshifted**
    (position ``j`` predicts token ``j+1``). ``labels`` (optional, ``[B, L]`` int64, -100 ignored)
    give the release's loss: its ``loss_function`` resolves to transformers' causal-LM loss, the mean
    CE of logits ``j`` against ``labels[j + 1]``. DARE's objectives use the family adapter instead.
    ``num_logits_to_keep > 0`` keeps only the last positions (0 = all).

    The argument order is the release's (``model(x, attention_mask, position_ids)`` works).
    ``past_key_values`` / ``use_cache`` / ``replace_position``: the Fast-dLLM KV cache (module docstring);
    the output then carries ``cache`` (also readable as ``past_key_values``).

    :raises ValueError: ``output_attentions`` (SDPA does not return attention weights), or cache
        arguments that do not fit together (:meth:`DreamBaseModel.forward`).
    """

    _tied_weights_keys = {"lm_head.weight": "model.embed_tokens.weight"}

    def __init__(self, config: DreamConfig):
        super().__init__(config)
        self.model = DreamBaseModel(config)
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

    def get_decoder(self):
        return self.model

    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask=None,
        position_ids: torch.LongTensor | None = None,
        past_key_values=None,
        inputs_embeds: torch.FloatTensor | None = None,
        labels: torch.LongTensor | None = None,
        output_attentions: bool | None = None,
        output_hidden_states: bool | None = None,
        return_dict: bool | None = None,
        num_logits_to_keep: int = 0,
        use_cache: bool | None = None,
        replace_position: torch.Tensor | None = None,
        **kwargs,
    ):
        if output_attentions:
            raise ValueError("output_attentions is not supported by DreamModel (SDPA attention)")
        out = self.model(
            input_ids=input_ids,
            attention_mask=attention_mask,
            position_ids=position_ids,
            inputs_embeds=inputs_embeds,
            output_hidden_states=bool(output_hidden_states),
            past_key_values=past_key_values,
            use_cache=bool(use_cache),
            replace_position=replace_position,
        )
        logits = self.lm_head(out.last_hidden_state[:, -num_logits_to_keep:, :])
        loss = None
        if labels is not None:
            shifted = logits[:, :-1].float().reshape(-1, logits.shape[-1])
            loss = F.cross_entropy(shifted, labels[:, 1:].reshape(-1), ignore_index=-100)
        result = DreamMaskedLMOutput(loss=loss, logits=logits, hidden_states=out.hidden_states,
                                     cache=out.cache)
        return result.to_tuple() if return_dict is False else result
