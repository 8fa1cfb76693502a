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

Rows are filled first-fit by decreasing segment length (deterministic: ties keep the batch order); the
default capacity is the longest segment, so packed rows are never longer than the padded ones.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

__all__ = ["PackedLayout", "pack_layout", "first_fit_rows"]


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
