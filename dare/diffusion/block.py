"""Block diffusion: attention masks for block-causal decoding and for ``[x_t ; x_0]`` training.

Block-diffusion LMs (SDAR, LLaDA2; BD3-LM, arXiv 2503.09573) decode blocks left to right with
bidirectional attention inside a block. Training runs the noisy sequence ``x_t`` and the clean
sequence ``x_0`` side by side (length ``2L``, both halves with positions ``0..L-1``) under one mask
(DARE ``build_block_diffusion_mask``; docs/algorithms.md §1). With ``b(i) = i // block_size``
(blocks counted from the start of the sequence, "global" origin), a query may attend a key iff both
are valid and

* **M_BD** (block diagonal): same block, same stream (noisy-noisy or clean-clean);
* **M_OBC** (offset block-causal): query noisy, key clean, ``b(q) > b(k)``;
* **M_BC** (block-causal): both clean, ``b(q) >= b(k)``.

Logits of the noisy half then give, for each block, the denoiser conditioned on the clean earlier
blocks: exactly the state the block decoder sees at inference.
"""

from __future__ import annotations

import torch

__all__ = ["block_ids", "block_causal_mask", "block_diffusion_mask", "block_diffusion_inputs", "leading_padding",
           "roll_rows"]


def block_ids(length: int, block_size: int, device=None) -> torch.Tensor:
    """``[L]`` int64 block index of each position, ``i // block_size``.

    :raises ValueError: ``block_size <= 0``.
    """
    if block_size <= 0:
        raise ValueError(f"block_size must be positive, got {block_size}")
    return torch.arange(length, device=device) // block_size


def block_causal_mask(length: int, block_size: int, device=None) -> torch.Tensor:
    """``[L, L]`` bool, True where query ``q`` may attend key ``k``: ``b(q) >= b(k)`` (inference mask)."""
    b = block_ids(length, block_size, device)
    return b[:, None] >= b[None, :]


def block_diffusion_mask(length: int, block_size: int, valid: torch.Tensor | None = None, device=None,
                         offset: torch.Tensor | None = None) -> torch.Tensor:
    """The ``[x_t ; x_0]`` training mask (module docstring).

    :param length: ``L`` (each half). :param valid: optional ``[B, L]`` bool, valid (non-padding)
        tokens; padding keys are never attended and padding queries attend only themselves.
    :param offset: optional ``[B]`` int64, the position where a block starts in each row: ``b(i) =
        floor((i - offset) / block_size)`` (blocks anchored at ``offset``, a first partial block before it);
        None = blocks from position 0.
    :returns: ``[B or 1, 1, 2L, 2L]`` bool.
    """
    if offset is None:
        b = block_ids(length, block_size, device)[None]
    else:
        if block_size <= 0:
            raise ValueError(f"block_size must be positive, got {block_size}")
        pos = torch.arange(length, device=device)[None] - offset.to(device=device, dtype=torch.int64)[:, None]
        b = torch.div(pos, block_size, rounding_mode="floor")
    same = b[:, :, None] == b[:, None, :]
    later = b[:, :, None] > b[:, None, :]
    later_eq = b[:, :, None] >= b[:, None, :]
    zeros = torch.zeros_like(same)
    top = torch.cat([same, later], dim=2)          # noisy queries: noisy keys (same block) | clean keys (earlier)
    bottom = torch.cat([zeros, later_eq], dim=2)   # clean queries: never noisy keys | clean keys (block-causal)
    mask = torch.cat([top, bottom], dim=1)[:, None]
    if valid is not None:
        v2 = torch.cat([valid, valid], dim=1).to(torch.bool)
        mask = mask & v2[:, None, None, :] & v2[:, None, :, None]
        eye = torch.eye(2 * length, dtype=torch.bool, device=mask.device)[None, None]
        mask = mask | (eye & ~v2[:, None, :, None])  # keep padding rows non-empty (no NaN)
    return mask


def block_diffusion_inputs(noisy: torch.Tensor, clean: torch.Tensor, block_size: int, valid: torch.Tensor | None = None,
                           offset: torch.Tensor | None = None):
    """Inputs for one block-diffusion training forward.

    :param noisy: ``[B, L]`` int64 ``x_t``; :param clean: ``[B, L]`` int64 ``x_0``;
    :param valid: ``[B, L]`` bool or None; :param offset: ``[B]`` int64 block start per row
        (:func:`block_diffusion_mask`), or None.
    :returns: ``(input_ids [B, 2L], position_ids [B, 2L], mask [B|1, 1, 2L, 2L] bool)``; the logits of
        positions ``0..L-1`` of the output belong to the noisy half.
    """
    B, L = noisy.shape
    ids = torch.cat([noisy, clean], dim=1)
    pos = torch.arange(L, device=noisy.device)
    position_ids = torch.cat([pos, pos])[None].expand(B, -1)
    mask = block_diffusion_mask(L, block_size, valid, device=noisy.device, offset=offset)
    return ids, position_ids, mask


def leading_padding(attention_mask: torch.Tensor | None, batch: int, device=None) -> torch.Tensor:
    """``[B]`` int64: left-padding positions before each row's first real token (zeros without a mask).

    :param attention_mask: ``[B, L]`` (1 real, 0 padding) or None.
    """
    if attention_mask is None:
        return torch.zeros(batch, dtype=torch.int64, device=device)
    return (attention_mask.to(torch.int64).cumsum(dim=1) == 0).sum(dim=1)


def roll_rows(x: torch.Tensor, shift: torch.Tensor) -> torch.Tensor:
    """Rotate row ``b`` of ``x`` ``[B, L, ...]`` left by ``shift[b]`` (negative: right), cyclically.

    Block families left-align left-padded rows with it, so blocks start at each row's first real
    token, and roll the logits back afterwards.
    """
    L = x.shape[1]
    idx = (torch.arange(L, device=x.device)[None] + shift[:, None]) % L
    return torch.gather(x, 1, idx.view(*idx.shape, *([1] * (x.dim() - 2))).expand_as(x))
