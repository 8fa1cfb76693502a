"""SPG's random-block corruption (Wang et al., "SPG: Sandwiched Policy Gradient for Masked Diffusion
Language Models", arXiv 2510.09541 §3.3 "block-wise masking"; DARE ``_forward_process_spg``;
docs/algorithms.md §3.6).

The completion is cut into blocks of ``block_length`` positions counted from the response start (the
semi-autoregressive sampler's blocks). One corrupted copy per Monte-Carlo sample, mimicking a state of
block-wise decoding:

* a random completion block ``j`` among the blocks holding response tokens;
* every response token of the blocks after ``j`` is masked (not decoded yet);
* block ``j`` masks ``u ~ U{max(1, floor(L_j min_t)) .. floor(L_j max_t)}`` of its ``L_j`` response
  tokens, chosen uniformly (``u`` is raised to the lower bound when ``floor(L_j max_t)`` is below it);
* every real prompt token and every response token before block ``j`` is masked independently with
  probability ``p_mask_prompt`` (0.15).

Every masked response token is scored (weight 1): SPG's surrogates (ELBO-like mean log-prob, EUBO-like
power mean) use the per-token log-probs of all masked response tokens, those of earlier blocks included,
as DARE does. With ``mc_num > 1`` the Monte-Carlo samples take *distinct* blocks while there are
enough (a random permutation of the row's blocks, cycled), as DARE's ``randperm(num_blocks)[:num_t]``.
All randomness comes from the ``generator``.

**[QUIRK] decided:** DARE draws the block as ``randperm(num_blocks) % completion_num_blocks``, which is not
uniform when the response's blocks do not divide the padded block count (truncating families); here ``j`` is
uniform over the blocks that hold response tokens. Identical for EOS-padded families (every block valid).
"""

from __future__ import annotations

import torch
from pydantic import Field, model_validator

from dare.components import Params
from dare.diffusion.estimators.base import Estimator, Pass, ScoringBatch, uniform
from dare.randomness import row_generator

__all__ = ["RandomBlockParams", "RandomBlockEstimator", "random_block_passes", "mask_count_range"]


def mask_count_range(length: int, min_t: float, max_t: float) -> tuple[int, int]:
    """``(lo, hi)`` inclusive range of masks in a block of ``length >= 1`` response tokens (module docstring)."""
    lo = max(int(length * min_t), 1)
    hi = min(int(length * max_t), length)
    return lo, max(hi, lo)


def _check(block_length: int, mc_num: int, p_mask_prompt: float, min_t: float, max_t: float) -> None:
    if block_length < 1:
        raise ValueError(f"block_length must be >= 1, got {block_length}")
    if mc_num < 1:
        raise ValueError(f"mc_num must be >= 1, got {mc_num}")
    if not 0.0 <= p_mask_prompt <= 1.0:
        raise ValueError(f"p_mask_prompt must be in [0, 1], got {p_mask_prompt}")
    if not 0.0 <= min_t <= max_t <= 1.0:
        raise ValueError(f"need 0 <= min_t ({min_t}) <= max_t ({max_t}) <= 1")


def _row_masks(resp: torch.Tensor, block_length: int, mc_num: int, min_t: float, max_t: float,
               generator: torch.Generator | None) -> tuple[torch.Tensor, torch.Tensor]:
    """For one row (``resp`` ``[G]`` bool): ``(decoded-state masks [mc, G], earlier-than-j [mc, G])``."""
    G = resp.numel()
    blocks = torch.arange(G) // block_length
    masks = torch.zeros(mc_num, G, dtype=torch.bool)
    before = torch.zeros(mc_num, G, dtype=torch.bool)
    valid_blocks = torch.unique(blocks[resp.cpu()]).tolist()
    if not valid_blocks:
        return masks, before
    order = uniform((len(valid_blocks),), generator, "cpu").argsort().tolist()
    for m in range(mc_num):
        j = valid_blocks[order[m % len(valid_blocks)]]
        where = torch.nonzero((blocks == j) & resp.cpu()).flatten()
        lo, hi = mask_count_range(where.numel(), min_t, max_t)
        u = lo + int(float(uniform((), generator, "cpu")) * (hi - lo + 1))
        chosen = where[uniform((where.numel(),), generator, "cpu").argsort()[: min(u, hi)]]
        masks[m, chosen] = True
        masks[m] |= (blocks > j) & resp.cpu()
        before[m] = (blocks < j) & resp.cpu()
    return masks, before


def random_block_passes(
    batch: ScoringBatch,
    block_length: int,
    mc_num: int = 1,
    p_mask_prompt: float = 0.15,
    min_t: float = 0.0,
    max_t: float = 1.0,
    generator: torch.Generator | None = None,
) -> list[Pass]:
    """``mc_num`` passes (``K = 1`` each) of SPG's corruption (module docstring).

    :returns: pass ``m``: mask ``[1, N, S]`` (prompt and response positions), weight ``[1, N, G]`` =
        1.0 on masked response tokens.
    :raises ValueError: ``block_length < 1``, ``mc_num < 1``, ``p_mask_prompt`` outside ``[0, 1]`` or
        not ``0 <= min_t <= max_t <= 1``.
    """
    _check(block_length, mc_num, p_mask_prompt, min_t, max_t)
    resp = batch.completion_mask
    N, G = resp.shape
    device = resp.device
    masks = torch.zeros(mc_num, N, G, dtype=torch.bool)
    before = torch.zeros(mc_num, N, G, dtype=torch.bool)
    for n in range(N):
        masks[:, n], before[:, n] = _row_masks(resp[n], block_length, mc_num, min_t, max_t, row_generator(generator, n))
    prompt_valid = batch.prompt_valid.cpu()
    passes = []
    for m in range(mc_num):
        u_prompt = uniform(prompt_valid.shape, generator, "cpu")
        u_resp = uniform((N, G), generator, "cpu")
        early = before[m] & (u_resp < p_mask_prompt)
        response_mask = masks[m] | early
        mask = torch.cat([prompt_valid & (u_prompt < p_mask_prompt), response_mask], dim=1)
        passes.append(Pass(mask=mask[None].to(device), weight=response_mask.float()[None].to(device)))
    return passes


class RandomBlockParams(Params):
    """Parameters of :class:`RandomBlockEstimator`."""

    block_length: int = Field(ge=1, description="Block length of the corruption.")
    mc_num: int = Field(1, ge=1, description="Monte-Carlo passes.")
    p_mask_prompt: float = Field(0.15, ge=0.0, le=1.0, description="Mask ratio of the prompt and earlier blocks.")
    min_t: float = Field(0.0, ge=0.0, le=1.0, description="Smallest mask ratio of the chosen block.")
    max_t: float = Field(1.0, ge=0.0, le=1.0, description="Largest mask ratio of the chosen block.")

    @model_validator(mode="after")
    def _order(self):
        _check(self.block_length, self.mc_num, self.p_mask_prompt, self.min_t, self.max_t)
        return self


class RandomBlockEstimator(Estimator):
    """SPG's block-wise corruption: random block ``j`` partly masked, later blocks masked, earlier at 15%."""

    name = "random-block"
    level = "token"

    Params = RandomBlockParams

    def draw(self, batch: ScoringBatch, generator: torch.Generator | None = None) -> list[Pass]:
        p = self.params
        return random_block_passes(batch, p.block_length, p.mc_num, p.p_mask_prompt, p.min_t, p.max_t, generator)
