"""Native PyTorch LLaDA (``model_type: llada``) that loads the released checkpoints unchanged.

Architecture (LLaDA, arXiv 2502.09992; released as GSAI-ML/LLaDA-8B-Instruct): a Llama-style
pre-norm transformer *without* a causal mask. Tensor names follow the release:
``model.transformer.{wte, blocks.{i}.{attn_norm, q_proj, k_proj, v_proj, attn_out, ff_norm,
ff_proj, up_proj, ff_out}, ln_f, ff_out}``.

Numerics follow the release so fp32 logits agree to ~1e-6:

* RMSNorm normalises in fp32 with autocast off, casts back, then multiplies by the weight;
* RoPE (rotate-half, ``inv_freq_j = theta^(-2j/hd)``) is applied in fp32 when
  ``rope_full_precision``; keys take positions ``0..Lk-1`` and queries ``Lk-Lq..Lk-1``, so left padding
  shifts positions, as in the official generator. DARE adds an optional ``position_ids`` ``[B, L]`` (no cache)
  for packed training, where positions restart in every packed example (the official model has none);
* attention is SDPA with ``is_causal=False``; a ``[B, L]`` padding mask becomes an additive key mask
  (0 / ``finfo(float32).min``) added to the optional ``attention_bias``;
* the KV cache (``use_cache``) stores keys *before* RoPE, one ``(k, v)`` pair per block. Given
  ``past_key_values``, the new tokens either follow the cached ones (the official append) or, with
  ``replace_position`` (Fast-dLLM's dual-cache argument, NVlabs/Fast-dLLM ``llada/model/modeling_llada.py``),
  replace the cached positions that mask marks: queries sit at those positions and attend to the cached
  keys/values everywhere else (:mod:`dare.sampling.kv_cache`). Unlike the Fast-dLLM copy, the cache is
  not modified in place and the padding mask is applied.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn
from transformers import PreTrainedModel
from transformers import initialization as init
from transformers.modeling_layers import GradientCheckpointingLayer
from transformers.utils import ModelOutput

from dare.diffusion.packing import scaled_dot_product_attention
from dare.sampling.kv_cache import replace_span
from dare_llada.configuration_llada import LLaDAConfig
from dare_llada.generation import LLaDAGenerationMixin

__all__ = ["LLaDAModelLM", "LLaDAModel", "LLaDALlamaBlock", "LLaDAPreTrainedModel", "LLaDAOutput"]


@dataclass
class LLaDAOutput(ModelOutput):
    """``logits`` [B, L, V]; ``cache``: per-block ``(k, v)`` (keys before RoPE) when ``use_cache``, also
    readable as ``past_key_values`` (the official output's name); ``hidden_states`` when asked."""

    loss: torch.Tensor | None = None
    logits: torch.Tensor | None = None
    cache: list | None = None
    hidden_states: tuple | None = None


class LLaDALayerNorm(nn.Module):
    """Norm used by LLaDA: ``rms`` (default for releases), ``gemma_rms`` or ``default`` LayerNorm.

    Input ``[..., size]`` any float dtype; output same dtype. Normalisation runs in fp32 with
    autocast disabled; the affine weight is applied after casting back (official order).
    """

    def __init__(self, config: LLaDAConfig, size: int | None = None, elementwise_affine: bool | None = None):
        super().__init__()
        self.kind = config.layer_norm_type
        if self.kind not in ("rms", "gemma_rms", "default", "low_precision"):
            raise ValueError(f"layer_norm_type {self.kind!r} is not supported; use rms, gemma_rms or default")
        self.eps = config.rms_norm_eps
        shape = (size or config.d_model,)
        affine = config.layer_norm_with_affine if elementwise_affine is None else elementwise_affine
        if affine:
            self.weight = nn.Parameter(torch.ones(shape))
            use_bias = config.bias_for_layer_norm
            if use_bias is None:
                use_bias = config.include_bias
            self.bias = nn.Parameter(torch.zeros(shape)) if use_bias else None
        else:
            self.weight = None
            self.bias = None
        self.normalized_shape = shape

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.kind in ("default", "low_precision"):
            return F.layer_norm(x, self.normalized_shape, self.weight, self.bias, eps=self.eps)
        with torch.autocast(enabled=False, device_type=x.device.type):
            og = x.dtype
            h = x.to(torch.float32)
            h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + self.eps)
            h = h.to(og)
        if self.weight is None:
            return h
        w = (1 + self.weight) if self.kind == "gemma_rms" else self.weight
        same = w.dtype == h.dtype and (self.bias is None or self.bias.dtype == h.dtype)
        if h is not x and same and not torch.is_grad_enabled():
            # inference: scale the fresh normalised tensor in place (w * h == h * w exactly, one allocation less)
            h = h.mul_(w)
            return h.add_(self.bias) if self.bias is not None else h
        return w * h + self.bias if self.bias is not None else w * h


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((-x2, x1), dim=-1)


def _rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """``x * cos + rotate_half(x) * sin`` (RoPE), ``x`` ``[B, H, L, hd]`` and tables broadcasting to it, in ``x``'s
    dtype. The products are fresh tensors that no backward reads (a product's backward keeps its factors, the
    tables here, not its result), so they are combined in place: the same values, bit for bit, with two
    allocations of ``x``'s size less per call, with or without gradient."""
    return (x * cos).add_(_rotate_half(x).mul_(sin))


class LLaDARotary(nn.Module):
    """RoPE tables (fp32, built on demand and cached per device/length)."""

    def __init__(self, config: LLaDAConfig):
        super().__init__()
        self.theta = config.rope_theta
        self.dim = config.d_model // config.n_heads
        self.full_precision = config.rope_full_precision
        self._cache: dict[tuple, tuple[torch.Tensor, torch.Tensor]] = {}

    def tables(self, length: int, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
        key = (device.type, device.index)
        hit = self._cache.get(key)
        if hit is not None and hit[0].shape[-2] >= length:
            return hit[0][:, :, :length], hit[1][:, :, :length]
        with torch.autocast(device.type, enabled=False):
            inv_freq = 1.0 / (self.theta ** (torch.arange(0, self.dim, 2, device=device, dtype=torch.float) / self.dim))
            seq = torch.arange(length, device=device, dtype=torch.float)
            freqs = torch.einsum("i,j->ij", seq, inv_freq)
            pos = torch.cat((freqs, freqs), dim=-1)
            sin, cos = pos.sin()[None, None], pos.cos()[None, None]
        self._cache[key] = (sin, cos)
        return sin, cos

    def forward(self, q: torch.Tensor, k: torch.Tensor, q_start: int | None = None,
                position_ids: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """Rotate ``q`` ``[B, nh, Lq, hd]`` and ``k`` ``[B, nkv, Lk, hd]`` (keys at positions ``0..Lk-1``).

        Queries sit at positions ``q_start .. q_start + Lq - 1``; ``None`` means at the end (``Lk - Lq``).
        ``position_ids`` ``[B, L]`` int64 (``Lq == Lk == L``) gives every query and key its own position instead.
        """
        q_, k_ = (q.float(), k.float()) if self.full_precision else (q, k)
        with torch.autocast(q.device.type, enabled=False):
            lq, lk = q_.shape[-2], k_.shape[-2]
            q0 = lk - lq if q_start is None else q_start
            if position_ids is not None:
                sin, cos = self.tables(int(position_ids.max()) + 1, q_.device)
                sin, cos = sin[0, 0][position_ids][:, None].type_as(q_), cos[0, 0][position_ids][:, None].type_as(q_)
                qs, qc = sin, cos
            else:
                sin, cos = self.tables(lk, q_.device)
                sin, cos = sin.type_as(q_), cos.type_as(q_)
                qs, qc = sin[:, :, q0 : q0 + lq], cos[:, :, q0 : q0 + lq]
            q_ = _rotate(q_, qc, qs)
            k_ = _rotate(k_, cos, sin)
        return q_.type_as(q), k_.type_as(k)


_ACTIVATIONS = {"silu": F.silu, "gelu": F.gelu, "relu": F.relu}


class LLaDALlamaBlock(GradientCheckpointingLayer):
    """One ``block_type: llama`` block: ``x + attn(norm(x))`` then ``x + ff_out(act(ff_proj h) * up_proj h)``.

    The FSDP wrap and gradient-checkpointing unit: with ``model.gradient_checkpointing_enable()`` (transformers'
    ``GradientCheckpointingLayer``) a training forward under grad keeps only the block's input and recomputes the
    block in the backward (``layer_past``/``use_cache`` are then dropped: no KV cache while training).
    """

    def __init__(self, layer_id: int, config: LLaDAConfig):
        super().__init__()
        if config.activation_type not in _ACTIVATIONS:
            raise ValueError(f"activation_type {config.activation_type!r} is not supported with block_type llama")
        self.layer_id = layer_id
        self.config = config
        d, nh, nkv = config.d_model, config.n_heads, config.effective_n_kv_heads
        if d % nh != 0:
            raise ValueError(f"d_model ({d}) must be divisible by n_heads ({nh})")
        if nh % nkv != 0:
            raise ValueError(f"n_heads ({nh}) must be divisible by the number of KV heads ({nkv})")
        hd = d // nh
        self.n_heads, self.n_kv_heads, self.head_dim = nh, nkv, hd
        qkv_bias = bool(config.include_bias or config.include_qkv_bias)
        self.attn_norm = LLaDALayerNorm(config)
        self.ff_norm = LLaDALayerNorm(config)
        self.q_norm = self.k_norm = None
        if config.attention_layer_norm:
            aff = config.attention_layer_norm_with_affine
            self.k_norm = LLaDALayerNorm(config, size=hd * nkv, elementwise_affine=aff)
            self.q_norm = LLaDALayerNorm(config, elementwise_affine=aff)
        self.q_proj = nn.Linear(d, d, bias=qkv_bias)
        self.k_proj = nn.Linear(d, nkv * hd, bias=qkv_bias)
        self.v_proj = nn.Linear(d, nkv * hd, bias=qkv_bias)
        self.attn_out = nn.Linear(d, d, bias=config.include_bias)
        hidden = config.ffn_hidden_size
        self.ff_proj = nn.Linear(d, hidden, bias=config.include_bias)
        self.up_proj = nn.Linear(d, hidden, bias=config.include_bias)
        self.ff_out = nn.Linear(hidden, d, bias=config.include_bias)
        self.act = _ACTIVATIONS[config.activation_type]
        self.rotary_emb = LLaDARotary(config) if config.rope else None
        self.attention_dropout = config.attention_dropout
        self.residual_dropout = config.residual_dropout

    def attention(self, h, attention_bias, layer_past, use_cache, span=None, position_ids=None):
        """Self-attention of ``h`` ``[B, T, d]``. With ``layer_past`` ``(k, v)`` the new keys follow the cached
        ones, or replace cached positions ``span = (s, e)`` (``e - s = T``). Returns ``(out, present)``."""
        B, T, C = h.shape
        q, k, v = self.q_proj(h), self.k_proj(h), self.v_proj(h)
        dtype = k.dtype
        if self.q_norm is not None:
            q = self.q_norm(q).to(dtype=dtype)
            k = self.k_norm(k).to(dtype=dtype)
        q = q.view(B, T, self.n_heads, self.head_dim).transpose(1, 2)
        k = k.view(B, T, self.n_kv_heads, self.head_dim).transpose(1, 2)
        v = v.view(B, T, self.n_kv_heads, self.head_dim).transpose(1, 2)
        if layer_past is not None and span is not None:
            s, e = span
            k = torch.cat((layer_past[0][:, :, :s], k, layer_past[0][:, :, e:]), dim=-2)
            v = torch.cat((layer_past[1][:, :, :s], v, layer_past[1][:, :, e:]), dim=-2)
        elif layer_past is not None:
            k = torch.cat((layer_past[0], k), dim=-2)
            v = torch.cat((layer_past[1], v), dim=-2)
        present = (k, v) if use_cache else None
        lq, lk = q.shape[-2], k.shape[-2]
        q0 = lk - lq if span is None else span[0]
        if self.rotary_emb is not None:
            q, k = self.rotary_emb(q, k, q0, position_ids)
        mask = None
        if attention_bias is not None:
            mask = attention_bias[:, :, q0 : q0 + lq, :lk]
            if mask.dtype != dtype:
                mask = mask.to(dtype)
                mask = torch.where(torch.isneginf(mask), torch.finfo(dtype).min, mask)
        if self.n_kv_heads != self.n_heads:
            rep = self.n_heads // self.n_kv_heads
            k = k.repeat_interleave(rep, dim=1, output_size=self.n_heads)
            v = v.repeat_interleave(rep, dim=1, output_size=self.n_heads)
        p = self.attention_dropout if self.training else 0.0
        att = scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=p, is_causal=False)
        att = att.transpose(1, 2).contiguous().view(B, T, C)
        return self.attn_out(att), present

    def forward(self, x, attention_bias=None, layer_past=None, use_cache=False, span=None, position_ids=None):
        att, present = self.attention(self.attn_norm(x), attention_bias, layer_past, use_cache, span, position_ids)
        x = self._residual(x, att)
        h = self.ff_norm(x)
        x = self._residual(x, self.ff_out(self._gated(h)))
        return x, present

    def _gated(self, h: torch.Tensor) -> torch.Tensor:
        """``act(ff_proj h) * up_proj h``. Without gradient (decoding, old/reference scores) the activation and the
        product run in place on ``ff_proj``'s fresh output: the same values bit for bit, two ``[B, T, hidden]``
        allocations less; with gradient the backward needs both factors, so they stay."""
        gate = self.ff_proj(h)
        if torch.is_grad_enabled() or self.act is F.gelu:
            return self.act(gate) * self.up_proj(h)
        return self.act(gate, inplace=True).mul_(self.up_proj(h))

    def _residual(self, x: torch.Tensor, branch: torch.Tensor) -> torch.Tensor:
        """``x + dropout(branch)``. When the dropout is the identity the sum is written into ``branch`` (a fresh
        output of ``attn_out``/``ff_out`` that no backward reads; ``branch + x == x + branch`` exactly), with or
        without gradient; a dtype or shape that would broadcast or promote keeps the plain sum."""
        if (self.residual_dropout == 0.0 or not self.training) and branch.dtype == x.dtype and branch.shape == x.shape:
            return branch.add_(x)
        return x + F.dropout(branch, self.residual_dropout, self.training)


class LLaDAModel(nn.Module):
    """The backbone: ``transformer = ModuleDict(wte, blocks, ln_f, ff_out)``."""

    def __init__(self, config: LLaDAConfig):
        super().__init__()
        if config.block_type != "llama":
            raise ValueError(f"block_type {config.block_type!r} is not supported; released LLaDA checkpoints use 'llama'")
        if config.block_group_size != 1:
            raise ValueError("block_group_size > 1 is not supported (released checkpoints use 1)")
        if config.alibi or not config.rope:
            raise ValueError("LLaDA needs rope: true and alibi: false")
        if config.embedding_size is not None and config.embedding_size < config.vocab_size:
            raise ValueError("embedding_size must be at least vocab_size")
        self.config = config
        modules = {
            "wte": nn.Embedding(config.output_size, config.d_model),
            "blocks": nn.ModuleList([LLaDALlamaBlock(i, config) for i in range(config.n_layers)]),
            "ln_f": LLaDALayerNorm(config),
        }
        if not config.weight_tying:
            modules["ff_out"] = nn.Linear(config.d_model, config.output_size, bias=config.include_bias)
        self.transformer = nn.ModuleDict(modules)

    def forward(
        self,
        input_ids=None,
        input_embeddings=None,
        attention_mask=None,
        attention_bias=None,
        past_key_values=None,
        use_cache=False,
        output_hidden_states=False,
        replace_position=None,
        position_ids=None,
    ):
        x = self.transformer.wte(input_ids) if input_embeddings is None else input_embeddings
        B, L = x.shape[:2]
        if self.config.input_emb_norm:
            x = x * (self.config.d_model**0.5)
        x = F.dropout(x, self.config.embedding_dropout, self.training)
        past_length = 0 if not past_key_values else past_key_values[0][0].size(-2)
        span = None
        if replace_position is not None:
            if not past_key_values:
                raise ValueError("replace_position needs past_key_values (the cache whose positions it replaces)")
            span = replace_span(replace_position)
            if span[1] - span[0] != L or span[1] > past_length:
                raise ValueError(
                    f"replace_position marks positions {span[0]}..{span[1] - 1} but the input has {L} tokens and "
                    f"the cache {past_length} positions"
                )
        total = past_length if span is not None else past_length + L
        if position_ids is not None and past_key_values:
            raise ValueError("position_ids cannot be combined with past_key_values (cached keys use array positions)")

        key_mask = None
        if attention_mask is not None and bool((attention_mask == 0).any()):
            key_mask = attention_mask.to(torch.float).view(B, -1)[:, None, None, :]
            key_mask = (1.0 - key_mask) * torch.finfo(torch.float).min
        bias = None
        if attention_bias is not None or key_mask is not None or (past_key_values and span is None):
            if attention_bias is None:
                bias = torch.zeros((1, 1, total, total), device=x.device, dtype=torch.float)
            elif attention_bias.dtype in (torch.bool, torch.int8):
                bias = attention_bias.to(torch.float)
                # official quirk kept: allowed keys get +1 (a row-constant shift, softmax-invariant)
                bias = bias.masked_fill(bias == 0.0, torch.finfo(torch.float).min)
            else:
                bias = attention_bias.to(torch.float)
            while bias.dim() < 4:
                bias = bias.unsqueeze(0)
            mask_len = key_mask.shape[-1] if key_mask is not None else total
            bias = bias[:, :, :mask_len, :mask_len]
            if key_mask is not None:
                bias = bias + key_mask
                bias = torch.where(torch.isneginf(bias), torch.finfo(bias.dtype).min, bias)

        hidden_states = [] if output_hidden_states else None
        presents = [] if use_cache else None
        for i, block in enumerate(self.transformer.blocks):
            if hidden_states is not None:
                hidden_states.append(x)
            past = past_key_values[i] if past_key_values else None
            x, present = block(x, attention_bias=bias, layer_past=past, use_cache=use_cache, span=span,
                               position_ids=position_ids)
            if presents is not None:
                presents.append(present)
        x = self.transformer.ln_f(x)
        if hidden_states is not None:
            hidden_states.append(x)
        if self.config.weight_tying:
            logits = F.linear(x, self.transformer.wte.weight)
        else:
            logits = self.transformer.ff_out(x)
        if self.config.scale_logits:
            logits = logits * (1 / math.sqrt(self.config.d_model))
        return logits, presents, hidden_states


class LLaDAPreTrainedModel(PreTrainedModel):
    config_class = LLaDAConfig
    base_model_prefix = "model"
    _no_split_modules = ["LLaDALlamaBlock"]
    supports_gradient_checkpointing = True
    _supports_sdpa = True

    def _init_weights(self, module):
        """Official ``init_fn``: ``mitchell`` (trunc-normal, std 1/sqrt(fan_in), output projections scaled
        by 1/sqrt(2(layer+1))) or ``normal`` (std ``init_std``); norms to one, biases to zero."""
        cfg = self.config
        if isinstance(module, (nn.Linear, nn.Embedding)):
            d = module.in_features if isinstance(module, nn.Linear) else cfg.d_model
            if cfg.init_fn == "normal":
                std = cfg.init_std
                cut = cfg.init_cutoff_factor
                if cut is not None:
                    init.trunc_normal_(module.weight, mean=0.0, std=std, a=-cut * std, b=cut * std)
                else:
                    init.normal_(module.weight, mean=0.0, std=std)
            else:
                std = 1.0 / math.sqrt(d)
                layer = getattr(module, "_dare_layer_id", None)
                if layer is not None:
                    std = std / math.sqrt(2 * (layer + 1))
                init.trunc_normal_(module.weight, mean=0.0, std=std, a=-3 * std, b=3 * std)
            if isinstance(module, nn.Linear) and module.bias is not None:
                init.zeros_(module.bias)
        elif isinstance(module, LLaDALayerNorm):
            if module.weight is not None:
                init.ones_(module.weight) if module.kind != "gemma_rms" else init.zeros_(module.weight)
            if module.bias is not None:
                init.zeros_(module.bias)


class LLaDAModelLM(LLaDAGenerationMixin, LLaDAPreTrainedModel):
    """LLaDA with its LM head, the class ``AutoModel`` loads for ``model_type: llada``.

    ``forward(input_ids [B, L] int64, attention_mask [B, L] | None, attention_bias
    [B|1, 1, L, L] | None, past_key_values, use_cache, replace_position)`` returns :class:`LLaDAOutput`
    with ``logits`` ``[B, L, embedding_size]`` in the model dtype, position ``i`` scoring token ``i``.
    ``past_key_values``: per block ``(k, v)`` ``[B, nkv, P, hd]`` (keys before RoPE); the input follows
    the ``P`` cached positions, or with ``replace_position`` (``[B, P]`` bool, the same contiguous span of
    ``L`` positions in every row) takes their place. ``attention_mask`` then covers all keys
    (``[B, P + L]``, or ``[B, P]`` with ``replace_position``).
    ``labels`` are ignored (LLaDA's loss is the masked-diffusion loss; see ``dare_sft``).
    """

    def __init__(self, config: LLaDAConfig):
        super().__init__(config)
        self.model = LLaDAModel(config)
        for block in self.model.transformer.blocks:
            block.attn_out._dare_layer_id = block.layer_id
            block.ff_out._dare_layer_id = block.layer_id
        self.post_init()

    def get_input_embeddings(self):
        return self.model.transformer.wte

    def set_input_embeddings(self, value):
        self.model.transformer.wte = value

    def get_output_embeddings(self):
        return None if self.config.weight_tying else self.model.transformer.ff_out

    def set_output_embeddings(self, value):
        self.model.transformer.ff_out = value

    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        inputs_embeds: torch.FloatTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        attention_bias: torch.Tensor | None = None,
        past_key_values=None,
        labels=None,
        use_cache: bool | None = None,
        output_attentions: bool | None = None,
        output_hidden_states: bool | None = None,
        return_dict: bool | None = None,
        replace_position: torch.Tensor | None = None,
        position_ids: torch.Tensor | None = None,
        **kwargs,
    ):
        if output_attentions:
            raise ValueError("output_attentions is not supported by LLaDA")
        use_cache = self.config.use_cache if use_cache is None else use_cache
        logits, presents, hidden = self.model(
            input_ids=input_ids,
            input_embeddings=inputs_embeds,
            attention_mask=attention_mask,
            attention_bias=attention_bias,
            past_key_values=past_key_values,
            use_cache=use_cache,
            output_hidden_states=bool(output_hidden_states),
            replace_position=replace_position,
            position_ids=position_ids,
        )
        out = LLaDAOutput(
            logits=logits, cache=presents, hidden_states=tuple(hidden) if hidden is not None else None
        )
        if return_dict is False:
            return out.to_tuple()
        return out
