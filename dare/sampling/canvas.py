"""The working sequence ("canvas") of a block decoder, for left-padded batches.

Block decoders (SDAR, LLaDA2; docs/model-families.md §3.5 and §5.6) cut
``[prompt | masks]`` into blocks of ``block_length`` counted from the prompt's first token, prefill
the whole prompt blocks, then denoise one block at a time; the first decoded block may hold the
prompt's tail. In a batch the prompts differ in length, so :func:`block_canvas` shifts row ``b`` right
by ``offset[b]``, a whole number of blocks, until every row's first decoded block has the same index
``first_block``. The shift slots are hidden from attention (:meth:`BlockCanvas.prefix_mask`,
:meth:`BlockCanvas.key_mask`) and from RoPE (``position_ids`` count from each row's first token), so a
row is decoded exactly as it would be alone.

Example (``block_length`` 4, prompts of 6 and 2 tokens, ``gen_length`` 4; ``p`` prompt, ``m`` mask,
``.`` shift slot)::

    row 0:  p p p p | p p m m | m m m m      offset 0, gen_start 6
    row 1:  . . . . | p p m m | m m m m      offset 4, gen_start 6      (first_block 1, num_blocks 3)

(the last two columns lie past both completions: masks that the decoder fills but nobody reads.)
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from dare.diffusion.block import block_causal_mask

__all__ = ["BlockCanvas", "block_canvas", "left_padding_problem"]


@dataclass
class BlockCanvas:
    """A block decoder's canvas (module docstring). Tensors are on the prompt's device.

    * ``x``: ``[B, T]`` int64 tokens, ``T = num_blocks * block_length``; the decoder writes into it;
    * ``valid``: ``[B, T]`` bool, False on shift slots;
    * ``position_ids``: ``[B, T]`` int64 RoPE positions (the row's token index; 0 on shift slots);
    * ``offset``: ``[B]`` int64 shift slots before the row's first prompt token (a multiple of ``block_length``);
    * ``gen_start``: ``[B]`` int64 index of the row's first completion token;
    * ``row_blocks``: ``[B]`` int64 blocks the row needs (its prompt and ``gen_length`` completion tokens);
    * ``first_block``: the first block decoded (every earlier block holds only prompt or shift);
    * ``num_blocks``: ``max(row_blocks)``.
    """

    x: torch.Tensor
    valid: torch.Tensor
    position_ids: torch.Tensor
    offset: torch.Tensor
    gen_start: torch.Tensor
    row_blocks: torch.Tensor
    first_block: int
    num_blocks: int
    block_length: int

    def __post_init__(self) -> None:
        self.padded = not bool(self.valid.all())
        self._prefix: torch.Tensor | None = None

    def prefix_mask(self, end: int) -> torch.Tensor:
        """Attention mask ``[B|1, 1, end, end]`` bool (True = may attend) of a forward over ``x[:, :end]``.

        Block-causal (``dare.diffusion.block.block_causal_mask``); shift keys are hidden and shift queries
        attend only themselves (no empty softmax row). ``[1, 1, end, end]`` when nothing is shifted.
        """
        if self._prefix is None:
            T = self.x.shape[1]
            keep = block_causal_mask(T, self.block_length, device=self.x.device)[None, None]
            if self.padded:
                eye = torch.eye(T, dtype=torch.bool, device=self.x.device)
                keep = (keep & self.valid[:, None, None, :]) | (eye & ~self.valid[:, None, :, None])
            self._prefix = keep
        return self._prefix[..., :end, :end]

    def key_mask(self, end: int) -> torch.Tensor | None:
        """Key mask ``[B, 1, 1, end]`` bool of a forward whose queries (a decoded block ending at ``end``) see
        every real key before ``end`` (cached and new); None when nothing is shifted."""
        return self.valid[:, None, None, :end] if self.padded else None

    def completion_index(self, start: int, width: int) -> torch.Tensor:
        """``[B, width]`` int64 completion index of canvas columns ``start .. start + width - 1`` (negative in
        the prompt, ``>= gen_length`` past the completion)."""
        return torch.arange(start, start + width, device=self.x.device)[None] - self.gen_start[:, None]

    def completions(self, gen_length: int) -> torch.Tensor:
        """``[B, gen_length]`` int64: each row's completion tokens as decoded so far."""
        idx = self.gen_start[:, None] + torch.arange(gen_length, device=self.x.device)[None]
        return torch.gather(self.x, 1, idx)


def left_padding_problem(prompt_ids: torch.Tensor, attention_mask: torch.Tensor | None) -> str | None:
    """Why ``attention_mask`` is not a left-padding mask of ``prompt_ids`` ``[B, Lp]``, or None if it is.

    A left-padding mask is ``[B, Lp]`` of 0/1 (or bool) values, zeros then ones in each row.
    """
    if attention_mask is None:
        return None
    if attention_mask.shape != prompt_ids.shape:
        return f"attention_mask {tuple(attention_mask.shape)} must match input_ids {tuple(prompt_ids.shape)}"
    valid = attention_mask.to(torch.int64)
    if bool(((valid != 0) & (valid != 1)).any()) or bool((valid[:, 1:] < valid[:, :-1]).any()):
        return "attention_mask must be 0/1 left padding (zeros, then ones) for block decoding"
    return None


def block_canvas(
    prompt_ids: torch.Tensor,
    attention_mask: torch.Tensor | None,
    *,
    gen_length: int,
    block_length: int,
    mask_id: int,
    pad_id: int | None = None,
) -> BlockCanvas:
    """Lay out left-padded prompts for block decoding (module docstring).

    :param prompt_ids: ``[B, Lp]`` int64, left-padded. :param attention_mask: ``[B, Lp]`` 1 real / 0 padding
        (checked by :func:`left_padding_problem` first), or None (no padding).
    :param gen_length: completion tokens per row. :param block_length: decoding block length.
    :param mask_id: fills the completion. :param pad_id: fills the shift slots (default ``mask_id``; the
        value is never attended to).
    :returns: the :class:`BlockCanvas`; completion positions hold ``mask_id``.
    """
    B, Lp = prompt_ids.shape
    device = prompt_ids.device
    if attention_mask is None:
        valid_in = torch.ones_like(prompt_ids, dtype=torch.bool)
    else:
        valid_in = attention_mask.to(torch.bool)
    lengths = valid_in.sum(dim=1)
    full_blocks = lengths // block_length
    first_block = int(full_blocks.max())  # every row's prompt tail (possibly empty) starts this block
    offset = (first_block - full_blocks) * block_length
    gen_start = offset + lengths
    row_blocks = (gen_start + gen_length + block_length - 1) // block_length
    num_blocks = int(row_blocks.max())
    cols = torch.arange(num_blocks * block_length, device=device)[None]
    valid = cols >= offset[:, None]
    x = torch.full(valid.shape, mask_id, dtype=torch.long, device=device)
    x[~valid] = mask_id if pad_id is None else pad_id
    x[valid & (cols < gen_start[:, None])] = prompt_ids[valid_in]
    position_ids = (cols - offset[:, None]).clamp(min=0)
    return BlockCanvas(x, valid, position_ids, offset, gen_start, row_blocks, first_block, num_blocks, block_length)
