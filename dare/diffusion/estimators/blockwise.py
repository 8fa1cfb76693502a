"""Per-block stratified composite ELBO (EBPO, LLaDA2.1 report; DARE ``_forward_process_ebpo`` and
``compute_ebpo_composite_elbo``; docs/algorithms.md §3.8).

The response is split into the blocks of the block-diffusion attention, with DARE's *global* origin
counted on the compact sequence (left padding removed): response token ``j`` of a row whose prompt
has ``p`` real tokens sits at compact position ``p + j`` and in block ``(p + j) // block_length``,
so the prompt tail and the first response tokens can share a block (docs/algorithms.md §1; block
families left-align rows before their block-diffusion forward). Each of ``mc_num``
Monte-Carlo rows masks tokens in *every* block at once, each block with its own noise level::

    u_c = (o + c / C) mod 1        c = 0..C-1 over the (row, block) cells of one sequence, C = mc_num x blocks
    n_b = min(floor(u_c L_b) + 1, L_b)      random response tokens of block b (at least one)
    e_k = lp_k / p_b on masked tokens,  p_b = n_b / L_b

with one random offset ``o`` per sequence (a stratified, uniform-marginal set of noise levels). The
block-diffusion forward scores every block given its clean predecessors in one pass, so a pass's
sequence score ``sum_b sum_k e_k`` is one row of the composite ELBO; the objective averages the
``mc_num`` rows (uniform timestep weights ``1 / N``). Raw sums, no length normalisation (DARE).

**Choice:** DARE stratifies the noise levels over the (sequence, block) cells of one micro-batch;
here they are stratified over the (MC row, block) cells of each sequence, so every sequence's
composite estimate is itself stratified.
"""

from __future__ import annotations

import torch
from pydantic import Field

from dare.components import Params
from dare.errors import SpecError
from dare.diffusion.estimators.base import Estimator, Pass, ScoringBatch, uniform
from dare.randomness import row_generator

__all__ = ["BlockwiseELBOParams", "BlockwiseELBOEstimator", "blockwise_passes", "response_blocks"]


def response_blocks(batch: ScoringBatch, block_length: int) -> torch.Tensor:
    """``[N, G]`` int64 block index of each response token (compact global origin), -1 off the response.

    :raises ValueError: ``block_length < 1``.
    """
    if block_length < 1:
        raise ValueError(f"block_length must be >= 1, got {block_length}")
    G = batch.completion_length
    compact = batch.prompt_valid.sum(dim=1, keepdim=True) + torch.arange(G, device=batch.input_ids.device)[None]
    blocks = torch.div(compact, block_length, rounding_mode="floor")
    return torch.where(batch.completion_mask, blocks, torch.full_like(blocks, -1))


def blockwise_passes(batch: ScoringBatch, block_length: int, mc_num: int,
                     generator: torch.Generator | None = None) -> list[Pass]:
    """``mc_num`` passes (one per MC row, ``K = 1`` each) of the composite ELBO (module docstring).

    :raises ValueError: ``mc_num < 1`` or ``block_length < 1``.
    """
    if mc_num < 1:
        raise ValueError(f"mc_num must be >= 1, got {mc_num}")
    blocks = response_blocks(batch, block_length)
    N, G = blocks.shape
    masks = torch.zeros(mc_num, N, G, dtype=torch.bool, device=blocks.device)
    weights = torch.zeros(mc_num, N, G, dtype=torch.float32, device=blocks.device)
    for n in range(N):
        ids = torch.unique(blocks[n][blocks[n] >= 0]).tolist()
        if not ids:
            continue
        g = row_generator(generator, n)
        cells = mc_num * len(ids)
        offset = float(uniform((), g, "cpu"))
        levels = (offset + torch.arange(cells, dtype=torch.float64) / cells) % 1.0
        for c in range(cells):
            r, b = divmod(c, len(ids))
            where = torch.nonzero(blocks[n] == ids[b]).flatten()
            Lb = where.numel()
            nb = min(int(float(levels[c]) * Lb) + 1, Lb)
            order = uniform((Lb,), g, "cpu").argsort()
            chosen = where[order[:nb].to(where.device)]
            masks[r, n, chosen] = True
            weights[r, n, chosen] = Lb / nb
    no_prompt = torch.zeros(N, batch.prompt_length, dtype=torch.bool, device=blocks.device)
    return [Pass(mask=torch.cat([no_prompt, masks[r]], 1)[None], weight=weights[r][None]) for r in range(mc_num)]


class BlockwiseELBOParams(Params):
    """Parameters of :class:`BlockwiseELBOEstimator`."""

    block_length: int | None = Field(None, ge=1, description="Block length; null = the family's training block size.")
    mc_num: int = Field(16, ge=1, description="Monte-Carlo rows, each masking every block.")


class BlockwiseELBOEstimator(Estimator):
    """EBPO's all-block composite ELBO: every block masked in every MC row, stratified noise levels."""

    name = "blockwise-elbo"
    level = "sequence"

    Params = BlockwiseELBOParams

    def bind(self, family, model_config, sampler) -> BlockwiseELBOEstimator:
        """Fill a missing ``block_length`` from the family's block size (:meth:`ModelFamily.block_size`).

        :raises SpecError: no block length given and the family has full attention.
        """
        if self.params.block_length is not None:
            return self
        block = family.block_size(model_config) if family is not None else None
        if block is None:
            raise SpecError([("algorithm.params.estimator.params.block_length", "blockwise-elbo needs a block length: "
                              "set block_length (the family has full attention, so it has no block size)")])
        return type(self)(self.params, block_length=block)

    def draw(self, batch: ScoringBatch, generator: torch.Generator | None = None) -> list[Pass]:
        if self.params.block_length is None:
            raise ValueError("blockwise-elbo has no block_length; call bind() or set it")
        return blockwise_passes(batch, self.params.block_length, self.params.mc_num, generator)
