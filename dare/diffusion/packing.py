"""Padding-free (packed) training forwards: several examples per row, block-diagonal attention.

A padded batch ``[B, L]`` spends compute on padding: every row is as long as the longest example. Packing
(``train.packing: true``) moves the *valid* tokens of each example (``attention_mask == 1``) into a few rows of
at most ``capacity`` tokens, one contiguous **segment** per example, and runs the model once on those rows with

* position ids restarting at 0 in every segment (the positions the padded forward gives the example's
  valid tokens; RoPE is relative, so a constant offset from left padding does not change the logits);
* a block-diagonal attention mask: a token attends only to tokens of its own segment. For block-diffusion
  families each example's segment is its ``[x_t ; x_0]`` pair and, inside the pair, the
  ``M_BD | M_OBC | M_BC`` mask of :mod:`dare.diffusion.block` (blocks counted from the example's first token);
* fill slots at the end of a row (when segments do not fill it) attending only to themselves.

The aligned logits of the packed rows are scattered back to the padded layout ``[B, L, V]`` (zeros at
padding), so every loss (SFT's ``1/t`` and response-length normaliser, DPO's and RL's per-sequence ELBOs)
runs unchanged on the same per-example noise: packed and padded training agree example by example
(float rounding aside). This is what DARE's masked-diffusion actors do with flash-attention varlen
(docs/algorithms.md §0 "Packing", ``verl/workers/actor/mdlm_sp_utils.py::get_packed_logits``); here the
mask is a dense boolean ``[R, 1, T, T]`` that SDPA takes on any device.

Rows are filled first-fit by decreasing segment length (deterministic: ties keep the batch order).
:func:`pack_layout`'s default capacity is the longest segment (packed rows never longer than the padded ones);
:func:`packed_denoiser_logits` (the training forward of any family with ``packed_logits``) puts a whole batch in one
row unless a dense mask is needed (below).

**Segment-wise attention.** A dense block-diagonal mask still makes SDPA compute every ``T x T`` score of a row.
While a packed forward runs (:func:`packed_segments`), the families' attention calls
:func:`scaled_dot_product_attention` (a drop-in for ``torch.nn.functional.scaled_dot_product_attention``) computes
attention one segment at a time instead (``sum n_i^2`` scores; the CPU counterpart of flash-attention's varlen
``cu_seqlens``), under the segment's own mask (the ``[x_t ; x_0]`` mask of a pair; none inside a plain segment).
The dense ``[R, 1, T, T]`` mask is then not even built. A model that recomputes layers in the backward (gradient
checkpointing) runs outside the context, since its recompute must repeat the forward exactly: it gets the dense
block-diagonal mask and plain masked SDPA (same result, ``T x T`` scores per row).

**flash-attention varlen (GPU).** Where flash-attn is installed (``pip install -e '.[flash]'``), the tensors are on
CUDA in fp16/bf16 and every segment is plain (LLaDA, Dream: no ``[x_t ; x_0]`` pair mask, which varlen cannot
express), the segment-wise attention is one ``flash_attn_varlen_func`` call over all rows, with ``cu_seqlens`` the
segment boundaries (:attr:`Segments.cu_seqlens`; a fill slot is a sequence of its own, attending only itself),
as DARE's actors do. Otherwise (CPU, fp32, block families, flash-attn absent) the per-segment SDPA loop runs.
"""

from __future__ import annotations

from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from functools import lru_cache

import torch
import torch.nn.functional as F

__all__ = ["PackedLayout", "pack_layout", "first_fit_rows", "Segments", "packed_segments",
           "scaled_dot_product_attention", "varlen_kernel", "needs_dense_mask", "packed_denoiser_logits"]


def first_fit_rows(lengths: list[int], capacity: int) -> list[list[int]]:
    """Example indices per packed row: first-fit, longest segment first (ties in index order).

    :param lengths: segment length of each example (tokens, >= 0). :param capacity: tokens per row; a segment
        longer than ``capacity`` gets a row of its own.
    :returns: rows as lists of example indices (each example exactly once; empty segments are skipped).
    """
    rows: list[list[int]] = []
    fill: list[int] = []
    for i in sorted(range(len(lengths)), key=lambda j: (-lengths[j], j)):
        n = lengths[i]
        if n == 0:
            continue
        for r, used in enumerate(fill):
            if used + n <= capacity:
                rows[r].append(i)
                fill[r] += n
                break
        else:
            rows.append([i])
            fill.append(n)
    return rows


@dataclass(frozen=True)
class PackedLayout:
    """Where the valid tokens of a padded batch ``[B, L]`` sit in ``R`` packed rows of ``T`` slots.

    * ``source``: ``[R, T]`` int64, flat index of each slot's token in the padded batch (``b * L + j``;
      for pairs, clean tokens are offset by ``B * L``: the flat index into ``cat([noisy, clean])``); -1 = fill;
    * ``segment``: ``[R, T]`` int64, the example (padded row ``b``) of each slot; -1 = fill;
    * ``position``: ``[R, T]`` int64, position id inside the example (0 on fill);
    * ``stream``: ``[R, T]`` int64, 0 = the (noisy) sequence, 1 = the clean half of a block-diffusion pair;
    * ``target``: ``[B * L]`` int64, the slot ``r * T + t`` whose logits belong to each padded position
      (the noisy slot for pairs); -1 for padding;
    * ``shape``: ``(B, L)``; ``block_size``: blocks of a pair layout (None: plain segments).
    """

    source: torch.Tensor
    segment: torch.Tensor
    position: torch.Tensor
    stream: torch.Tensor
    target: torch.Tensor
    shape: tuple[int, int]
    block_size: int | None = None

    @property
    def num_tokens(self) -> int:
        """Slots holding a token (fill excluded)."""
        return int((self.segment >= 0).sum())

    @property
    def segment_start(self) -> torch.Tensor:
        """``[R, T]`` bool, the first slot of each segment (and of each half of a pair)."""
        prev_seg = torch.nn.functional.pad(self.segment, (1, 0), value=-2)[:, :-1]
        prev_stream = torch.nn.functional.pad(self.stream, (1, 0), value=-1)[:, :-1]
        return (self.segment >= 0) & ((self.segment != prev_seg) | (self.stream != prev_stream))

    def pack(self, ids: torch.Tensor, clean: torch.Tensor | None = None, fill: int = 0) -> torch.Tensor:
        """Packed rows ``[R, T]`` of ``ids`` ``[B, L]`` (with ``clean`` ``[B, L]`` for a pair layout); ``fill`` on
        fill slots."""
        flat = ids.reshape(-1) if clean is None else torch.cat([ids.reshape(-1), clean.reshape(-1)])
        src = self.source.to(flat.device)
        return torch.where(src >= 0, flat[src.clamp(min=0)], torch.full_like(src, fill, dtype=flat.dtype))

    def unpack(self, packed: torch.Tensor) -> torch.Tensor:
        """Padded ``[B, L, ...]`` from packed ``[R, T, ...]`` (differentiable gather); zeros at padding."""
        B, L = self.shape
        rows = packed.reshape(-1, *packed.shape[2:])
        tgt = self.target.to(packed.device)
        out = rows[tgt.clamp(min=0)]
        keep = (tgt >= 0).view(-1, *([1] * (packed.dim() - 2)))
        return torch.where(keep, out, torch.zeros((), dtype=out.dtype, device=out.device)).view(B, L, *packed.shape[2:])

    def attention_mask(self, device=None) -> torch.Tensor:
        """``[R, 1, T, T]`` bool, True where a query may attend a key: same segment (and, for pairs, the
        block-diffusion mask of :mod:`dare.diffusion.block` inside the pair); fill slots attend only themselves."""
        seg = self.segment.to(device)
        same = (seg[:, :, None] == seg[:, None, :]) & (seg >= 0)[:, :, None]
        if self.block_size is not None:
            b = self.position.to(device) // self.block_size
            s = self.stream.to(device)
            bq, bk, sq, sk = b[:, :, None], b[:, None, :], s[:, :, None], s[:, None, :]
            noisy_q = sq == 0
            rule = torch.where(
                noisy_q,
                ((sk == 0) & (bq == bk)) | ((sk == 1) & (bq > bk)),   # M_BD (noisy) | M_OBC
                (sk == 1) & (bq >= bk),                                # M_BC (clean queries never see noisy keys)
            )
            same = same & rule
        T = seg.shape[1]
        eye = torch.eye(T, dtype=torch.bool, device=seg.device)[None]
        return (same | (eye & (seg < 0)[:, :, None]))[:, None]


def pack_layout(valid: torch.Tensor, capacity: int | None = None, block_size: int | None = None) -> PackedLayout:
    """The packed layout of a padded batch.

    :param valid: ``[B, L]`` bool/int, the tokens of each example (1) vs padding (0); each example's valid tokens
        are taken in order (DARE's batches hold them contiguously: left-padded prompts, right-padded responses).
    :param capacity: tokens per packed row (pairs count both halves); default and minimum the longest segment.
    :param block_size: set for block-diffusion families: each example becomes an ``[x_t ; x_0]`` pair segment of
        ``2 n`` slots whose blocks of ``block_size`` count from the example's first token.
    :returns: :class:`PackedLayout` (index tensors on CPU).
    :raises ValueError: ``capacity`` or ``block_size`` not positive.
    """
    if capacity is not None and capacity <= 0:
        raise ValueError(f"packing capacity must be positive, got {capacity}")
    if block_size is not None and block_size <= 0:
        raise ValueError(f"block_size must be positive, got {block_size}")
    valid = valid.detach().to("cpu", torch.bool)
    B, L = valid.shape
    pairs = block_size is not None
    counts = valid.sum(dim=1).tolist()
    seglen = [2 * n if pairs else n for n in counts]
    longest = max(seglen, default=0)
    rows = first_fit_rows(seglen, max(capacity or 0, longest, 1))
    T = max([sum(seglen[i] for i in r) for r in rows] + [1])
    R = max(len(rows), 1)
    source = torch.full((R, T), -1, dtype=torch.long)
    segment = torch.full((R, T), -1, dtype=torch.long)
    position = torch.zeros((R, T), dtype=torch.long)
    stream = torch.zeros((R, T), dtype=torch.long)
    target = torch.full((B * L,), -1, dtype=torch.long)
    for r, members in enumerate(rows):
        at = 0
        for b in members:
            idx = valid[b].nonzero().squeeze(1) + b * L
            n = idx.numel()
            pos = torch.arange(n)
            halves = [(idx, 0), (idx + B * L, 1)] if pairs else [(idx, 0)]
            for src, st in halves:
                source[r, at : at + n] = src
                segment[r, at : at + n] = b
                position[r, at : at + n] = pos
                stream[r, at : at + n] = st
                if st == 0:
                    target[idx] = r * T + at + pos
                at += n
    return PackedLayout(source, segment, position, stream, target, (B, L), block_size)


@dataclass(frozen=True)
class Segments:
    """The segments of packed rows, for :func:`scaled_dot_product_attention`.

    ``spans[r]`` lists ``(start, end, mask)`` of row ``r`` in order, covering ``0..length``: ``mask`` None means every
    query of the span may attend every key of the span (a plain segment); otherwise a bool ``[n, n]`` (True = may
    attend): the ``[x_t ; x_0]`` block-diffusion mask of a pair, or the identity on the fill tail.
    ``cu_seqlens``: for layouts without pairs, the boundaries of the sequences of the rows flattened to ``R * T``
    slots (every plain segment one sequence, every fill slot one), flash-attention varlen's ``cu_seqlens``
    (``[0, n_1, n_1 + n_2, ..., R T]``) and the longest sequence; None for pair layouts.
    """

    rows: int
    length: int
    spans: tuple[tuple[tuple[int, int, "torch.Tensor | None"], ...], ...]
    cu_seqlens: tuple[tuple[int, ...], int] | None = None

    @classmethod
    def of(cls, layout: PackedLayout, device=None) -> Segments:
        """The spans of a :class:`PackedLayout`, their masks on ``device``."""
        from dare.diffusion.block import block_diffusion_mask

        cache: dict[tuple[str, int], torch.Tensor] = {}

        def mask(kind: str, n: int) -> torch.Tensor:
            if (kind, n) not in cache:
                cache[kind, n] = (torch.eye(n, dtype=torch.bool, device=device) if kind == "fill"
                                  else block_diffusion_mask(n // 2, layout.block_size, device=device)[0, 0])
            return cache[kind, n]

        R, T = layout.segment.shape
        spans, bounds = [], [0]
        for r, row in enumerate(layout.segment.tolist()):
            out, start = [], 0
            for t in range(1, T + 1):
                if t == T or row[t] != row[start]:
                    n = t - start
                    m = (mask("fill", n) if row[start] < 0
                         else mask("pair", n) if layout.block_size is not None else None)
                    out.append((start, t, m))
                    bounds.extend([r * T + start + i + 1 for i in range(n)] if row[start] < 0 else [r * T + t])
                    start = t
            spans.append(tuple(out))
        cu = None
        if layout.block_size is None:
            cu = (tuple(bounds), max(b - a for a, b in zip(bounds, bounds[1:])))
        return cls(R, T, tuple(spans), cu)


_ACTIVE: ContextVar[Segments | None] = ContextVar("dare_packed_segments", default=None)


@contextmanager
def packed_segments(segments: Segments | None):
    """Within the block, :func:`scaled_dot_product_attention` over ``[R, H, T, D]`` rows of these segments runs
    segment by segment (module docstring); None: plain SDPA (the dense-mask path)."""
    token = _ACTIVE.set(segments)
    try:
        yield segments
    finally:
        _ACTIVE.reset(token)


@lru_cache(maxsize=1)
def _flash_attn_varlen_func():
    """flash-attn's ``flash_attn_varlen_func``, or None when flash-attn is not installed (looked up once)."""
    try:
        from flash_attn import flash_attn_varlen_func
    except ImportError:
        return None
    return flash_attn_varlen_func


def varlen_kernel(query: torch.Tensor, segments: Segments):
    """``flash_attn_varlen_func`` when it can run these packed rows (module docstring: flash-attn installed, CUDA,
    fp16/bf16, head size a multiple of 8 up to 256, no pair masks), else None."""
    if (segments.cu_seqlens is None or not query.is_cuda or query.dtype not in (torch.float16, torch.bfloat16)
            or query.shape[-1] % 8 or query.shape[-1] > 256):
        return None
    return _flash_attn_varlen_func()


def _varlen_attention(kernel, query, key, value, segments: Segments, dropout_p: float, scale: float | None):
    """``[R, H, T, D]`` attention of the packed rows in one varlen call over the ``R * T`` flattened slots (K/V may
    have fewer heads: grouped-query attention is native to the kernel)."""
    R, H, T, D = query.shape
    bounds, longest = segments.cu_seqlens
    cu = torch.tensor(bounds, dtype=torch.int32, device=query.device)
    flat = [x.transpose(1, 2).reshape(R * T, x.shape[1], D) for x in (query, key, value)]
    out = kernel(*flat, cu, cu, longest, longest, dropout_p=dropout_p, softmax_scale=scale, causal=False)
    return out.view(R, T, H, D).transpose(1, 2)


def scaled_dot_product_attention(query, key, value, attn_mask=None, dropout_p: float = 0.0, is_causal: bool = False,
                                 scale: float | None = None, enable_gqa: bool = False) -> torch.Tensor:
    """``torch.nn.functional.scaled_dot_product_attention`` (same arguments and result: ``[B, H, Lq, D]``), computed
    one packed segment at a time while :func:`packed_segments` is active and the shapes are those of the packed rows
    (``B == R``, ``Lq == Lk == T``): each segment attends within itself under its own mask (:class:`Segments`), and
    ``attn_mask`` (None, or the dense block-diagonal mask of :meth:`PackedLayout.attention_mask`) is not read. On
    GPU with flash-attn the segments go to one varlen call instead (:func:`varlen_kernel`). Otherwise exactly the
    torch function.
    """
    kw = {"enable_gqa": True} if enable_gqa else {}
    seg = _ACTIVE.get()
    if (seg is None or is_causal or query.shape[0] != seg.rows or query.shape[-2] != seg.length
            or key.shape[-2] != seg.length):
        return F.scaled_dot_product_attention(query, key, value, attn_mask=attn_mask, dropout_p=dropout_p,
                                              is_causal=is_causal, scale=scale, **kw)
    kernel = varlen_kernel(query, seg)
    if kernel is not None:
        return _varlen_attention(kernel, query, key, value, seg, dropout_p, scale)
    rows = []
    for r, spans in enumerate(seg.spans):
        parts = [F.scaled_dot_product_attention(query[r : r + 1, :, s:e], key[r : r + 1, :, s:e],
                                                value[r : r + 1, :, s:e], attn_mask=m, dropout_p=dropout_p, scale=scale,
                                                **kw)
                 for s, e, m in spans]
        rows.append(parts[0] if len(parts) == 1 else torch.cat(parts, dim=2))
    return torch.cat(rows, dim=0)


def needs_dense_mask(model) -> bool:
    """True when ``model`` recomputes layers in the backward (gradient checkpointing): the recompute runs outside
    :func:`packed_segments` and must repeat the forward exactly, so the packed forward uses the dense block-diagonal
    mask instead of segment-wise attention."""
    return any(getattr(m, "gradient_checkpointing", False) is True for m in model.modules())


def packed_denoiser_logits(family, model, noisy_ids: torch.Tensor, clean_ids: torch.Tensor,
                           attention_mask: torch.Tensor | None = None, max_tokens: int | None = None) -> torch.Tensor:
    """``family.denoiser_logits`` computed padding-free: ``[B, L, V]``, zeros at padding, equal to
    :meth:`~dare.components.ModelFamily.denoiser_logits` on every valid position up to float rounding (Dream: except
    each example's first token, which has no left neighbour and is never a target).

    The valid tokens of each row (``attention_mask``) become one segment (a block-diffusion family, ``family.attention
    == "block"``: one ``[x_t ; x_0]`` pair segment of ``2 n`` slots, positions ``0..n-1`` twice, blocks of
    ``family.block_size`` counted from the example's first token); segments are packed into rows of at most
    ``max_tokens`` slots (default: one row for the whole batch; the longest segment when the model uses gradient
    checkpointing, whose dense mask grows as ``T^2``) with block-diagonal attention computed one example at a time
    (module docstring), run through ``family.packed_logits`` and scattered back.

    :param family: a :class:`~dare.components.ModelFamily` that implements ``packed_logits``.
    :param noisy_ids: ``[B, L]`` int64; :param clean_ids: ``[B, L]`` int64 (read by block families only);
    :param attention_mask: ``[B, L]`` 1 = valid token, or None (all valid).
    :raises NotImplementedError: the family does not support packed training.
    """
    block = None
    if family.attention == "block":
        from accelerate.utils import extract_model_from_parallel  # the config of a DDP/DeepSpeed-wrapped model

        block = family.block_size(extract_model_from_parallel(model).config)
    valid = torch.ones_like(noisy_ids, dtype=torch.bool) if attention_mask is None else attention_mask.bool()
    dev = noisy_ids.device
    dense = needs_dense_mask(model)  # a layer recompute must see the same attention: the dense mask, no segments
    slots = int(valid.sum()) * (1 if block is None else 2)
    capacity = max_tokens or (None if dense else slots or None)  # default: one row (dense mask: the longest segment)
    layout = pack_layout(valid, capacity, block_size=block)
    ids = layout.pack(noisy_ids) if block is None else layout.pack(noisy_ids, clean_ids)
    mask = layout.attention_mask(dev) if dense else None
    with packed_segments(None if dense else Segments.of(layout, dev)):  # one example at a time
        logits = family.packed_logits(model, ids.to(dev), layout.position.to(dev), mask, layout.segment_start.to(dev))
    return layout.unpack(logits)
