"""Forward (noising) processes: absorbing [MASK] corruption of masked diffusion LMs (MDLM / LLaDA, arXiv 2502.09992
eq. (1)-(3)) and uniform-noise corruption (D3PM-uniform, arXiv 2107.03006 §3.1; DiffusionGemma)."""

from __future__ import annotations

import torch

from dare.randomness import rand

__all__ = ["sample_mask_ratio", "bernoulli_mask", "blockwise_mask", "apply_mask", "uniform_noise"]


def sample_mask_ratio(batch: int, eps: float = 1e-3, generator=None, device="cpu") -> torch.Tensor:
    """Per-example mask ratio ``t = (1 - eps) u + eps``, ``u ~ U(0, 1)`` (LLaDA pre-training/SFT).

    :param generator: a ``torch.Generator``, per-row :class:`dare.randomness.RowGenerators` (one draw per
        row), or None (torch's global RNG).
    :returns: ``[batch]`` float32 in ``[eps, 1)``.
    :raises ValueError: ``eps`` outside ``[0, 1)``.
    """
    if not 0.0 <= eps < 1.0:
        raise ValueError(f"eps must be in [0, 1), got {eps}")
    u = torch.rand(batch, device=device) if generator is None else rand((batch,), generator, device=device)
    return (1.0 - eps) * u + eps


def bernoulli_mask(t: torch.Tensor, eligible: torch.Tensor, generator=None) -> torch.Tensor:
    """Mask each eligible position independently with probability ``t`` of its row.

    With per-row :class:`dare.randomness.RowGenerators` row ``b`` draws ``L`` uniforms from its generator
    (position ``j`` gets the ``j``-th draw, whatever the batch's other rows).

    :param t: ``[B]`` float mask ratios. :param eligible: ``[B, L]`` bool (e.g. response tokens).
    :returns: ``[B, L]`` bool corruption indicator (never True outside ``eligible``).
    """
    if generator is None:
        u = torch.rand(eligible.shape, device=eligible.device)
    else:
        u = rand(eligible.shape, generator, device=eligible.device)
    return (u < t[:, None]) & eligible


def blockwise_mask(t: torch.Tensor, eligible: torch.Tensor, block_length: int, generator=None,
                   padding: torch.Tensor | None = None,
                   padding_block_weight: float = 1.0) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Blockwise SFT corruption: one active block per example, clean prefix, hidden suffix.

    Source: Sun et al., "Blockwise SFT for Diffusion Language Models" (arXiv 2508.19529 §3; official code
    Bowen-Sun-0728/Blockwise-SFT ``train_blockwise.py``, ``two_phase_mask_at_block`` with its defaults: no
    prefix noise, suffix fully masked). The response (the ``eligible`` positions of a row, in order) is cut
    into blocks of ``block_length`` tokens from its first token, as semi-autoregressive decoding cuts the
    completion of LLaDA and Dream (block-diffusion families train on their own absolute block grid and
    refuse this in the SFT objective's ``check``); one block ``b`` is drawn
    uniformly among the row's blocks; its positions are masked
    independently with probability ``t`` (they are the loss positions), every later response position is
    masked (hidden, never in the loss) and earlier ones stay clean. This is the state a block decoder
    (LLaDA's ``block_length``, Dream's blocks) sees while it decodes block ``b``, which classic SFT's
    whole-response masking (:func:`bernoulli_mask`) almost never produces for long responses.

    Padding blocks: with ``padding`` (``[B, L]`` bool, e.g. the response's EOS tokens of LLaDA-style
    EOS-padded SFT data) and ``padding_block_weight`` ``w < 1``, a block whose response tokens are all
    padding is drawn with weight ``w`` and every other block with weight 1 (so a 256-token response made of
    16 content tokens and 240 EOS, blocks of 32, draws its content block with probability ``1 / (1 + 7 w)``
    instead of ``1 / 8``). The official Blockwise SFT data never has such blocks (its padding lies outside
    the answer and is never drawn); ``w`` keeps them in training at a lower rate. The loss weighting of a
    drawn block is unchanged, so ``w < 1`` re-weights the objective towards content blocks; ``w = 1`` is the
    uniform draw above, bit for bit.

    Draws, per row, after ``t``: one uniform for the block index (inverse CDF over the block weights), then
    :func:`bernoulli_mask`'s ``L`` uniforms (so with :class:`dare.randomness.RowGenerators` a row's masks do
    not depend on the batch).

    :param t: ``[B]`` float mask ratios. :param eligible: ``[B, L]`` bool response positions (contiguous per
        row). :param block_length: tokens per block (>= 1). :param padding: ``[B, L]`` bool padding
        positions, or None (no block is padding). :param padding_block_weight: ``w`` in ``(0, 1]``.
    :returns: ``(masked, hidden, block_tokens)``: ``[B, L]`` bool masked positions of the active block (the
        loss positions), ``[B, L]`` bool hidden suffix positions (masked, not in the loss), ``[B]`` int64
        response tokens in the active block (the loss normaliser; 0 for a row without response).
    :raises ValueError: ``block_length < 1``, or ``padding_block_weight`` outside ``(0, 1]``.
    """
    if block_length < 1:
        raise ValueError(f"block_length must be >= 1, got {block_length}")
    if not 0.0 < padding_block_weight <= 1.0:
        raise ValueError(f"padding_block_weight must be in (0, 1], got {padding_block_weight}")
    offset = eligible.long().cumsum(dim=1) - 1  # response offset of each eligible position
    num_blocks = (eligible.sum(dim=1) + block_length - 1) // block_length
    if generator is None:
        u = torch.rand(t.shape[0], device=t.device)
    else:
        u = rand((t.shape[0],), generator, device=t.device)
    block = offset // block_length
    if padding is None or padding_block_weight == 1.0:
        active_block = torch.minimum((u * num_blocks).long(), (num_blocks - 1).clamp(min=0))
    else:
        width = max(int(num_blocks.max()), 1)
        index = torch.where(eligible, block, width).clamp(max=width)  # non-response positions: a spare column
        content = torch.zeros(eligible.shape[0], width + 1, dtype=torch.long, device=eligible.device)
        content.scatter_add_(1, index, (eligible & ~padding).long())
        # float64: a tiny positive w (down to 5e-324) stays positive, so padding blocks keep a nonzero chance
        one = torch.ones((), dtype=torch.float64, device=eligible.device)
        weight = torch.where(content[:, :width] > 0, one, one * padding_block_weight)
        weight = weight * (torch.arange(width, device=eligible.device)[None, :] < num_blocks[:, None])
        cdf = weight.cumsum(dim=1)
        below = (cdf <= u.double()[:, None] * cdf[:, -1:]).sum(dim=1)  # blocks whose cumulative weight is <= u * total
        active_block = torch.minimum(below, (num_blocks - 1).clamp(min=0))
    active = eligible & (block == active_block[:, None])
    hidden = eligible & (block > active_block[:, None])
    return bernoulli_mask(t, active, generator=generator), hidden, active.sum(dim=1)


def apply_mask(input_ids: torch.Tensor, mask: torch.Tensor, mask_id: int) -> torch.Tensor:
    """``x_t``: ``input_ids`` with masked positions replaced by ``mask_id`` (new tensor)."""
    return torch.where(mask, torch.full_like(input_ids, mask_id), input_ids)


def uniform_noise(input_ids: torch.Tensor, corrupt: torch.Tensor, vocab_size: int, generator=None) -> torch.Tensor:
    """``x_t`` of uniform-noise diffusion: corrupted positions hold a token drawn uniformly from ``[0, vocab_size)``.

    The D3PM-uniform kernel (Austin et al., arXiv 2107.03006 §3.1: ``q(x_t | x_0) = Cat((1 - t) x_0 + t / V)``
    restricted to the corrupted positions, a corrupted token may redraw its own value) as DiffusionGemma trains
    and decodes with it (NeMo AutoModel ``corrupt_uniform_random``; transformers' ``EntropyBoundSampler``
    renoising). Per row, ``L`` tokens are drawn from the row's generator with ``torch.randint`` after the
    corruption indicator, so with :class:`dare.randomness.RowGenerators` a row's noise does not depend on the batch.

    :param input_ids: ``[B, L]`` int64 clean tokens. :param corrupt: ``[B, L]`` bool positions to corrupt (e.g.
        :func:`bernoulli_mask`). :param vocab_size: ``V`` (> 0). :param generator: ``torch.Generator``,
        ``RowGenerators`` or None (global RNG).
    :returns: ``[B, L]`` int64 noisy tokens (a new tensor).
    :raises ValueError: ``vocab_size < 1``.
    """
    from dare.randomness import RowGenerators

    if vocab_size < 1:
        raise ValueError(f"vocab_size must be >= 1, got {vocab_size}")
    if isinstance(generator, RowGenerators):
        rows = [torch.randint(0, vocab_size, (input_ids.shape[1],), generator=g, device=g.device, dtype=input_ids.dtype)
                for g in generator.generators]
        noise = torch.stack(rows).to(input_ids.device) if rows else torch.empty_like(input_ids)
    else:
        gen_device = generator.device if generator is not None else input_ids.device
        noise = torch.randint(0, vocab_size, input_ids.shape, generator=generator, device=gen_device,
                              dtype=input_ids.dtype).to(input_ids.device)
    return torch.where(corrupt, noise, input_ids)
