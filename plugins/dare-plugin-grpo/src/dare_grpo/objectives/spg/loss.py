"""SPG's joint loss input and its sandwich surrogates (arXiv 2510.09541 §3, eq. (6)-(8); DARE
``compute_policy_loss_spg``), shared by the objective (:mod:`dare_grpo.objectives.spg`, which assembles the
loss) and the trainer (:mod:`dare_grpo.objectives.spg.trainer`, which builds the inputs).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

import torch

__all__ = ["JointLossInput", "LogpEstimation", "spg_surrogates", "spg_sequence_logp"]

LogpEstimation = Literal["elbo", "eubo", "mix", "zero"]


@dataclass
class JointLossInput:
    """All Monte-Carlo copies of a chunk of rows, for losses that couple them.

    * ``token``: ``[M, n, G]`` float32 log-probs of the clean completion tokens (0 where not scored);
    * ``scored``: ``[M, n, G]`` bool, the masked response tokens of copy ``m``;
    * ``advantages``: ``[n]``; ``response_lengths``: ``[n]`` (``|y|``);
    * ``total_response_tokens``: ``sum |y|`` over the whole rollout batch; ``num_sequences``: its rows.
    """

    token: torch.Tensor
    scored: torch.Tensor
    advantages: torch.Tensor
    response_lengths: torch.Tensor
    total_response_tokens: float
    num_sequences: int


def spg_surrogates(token: torch.Tensor, scored: torch.Tensor, response_lengths: torch.Tensor,
                   eubo_beta: float) -> tuple[torch.Tensor, torch.Tensor]:
    """``(ELBO-like l+ [n], EUBO-like l-E [n])`` float32 (:mod:`dare_grpo.objectives.spg` docstring); 0 for rows with nothing masked.

    :param token: ``[M, n, G]``; :param scored: ``[M, n, G]`` bool; :param response_lengths: ``[n]``.
    :raises ValueError: ``eubo_beta <= 0`` or shapes differ.
    """
    if eubo_beta <= 0:
        raise ValueError(f"eubo_beta must be positive, got {eubo_beta}")
    if token.shape != scored.shape or token.ndim != 3:
        raise ValueError(f"token {tuple(token.shape)} and scored {tuple(scored.shape)} must both be [M, n, G]")
    w = scored.float()
    count = w.sum(dim=-1)                                                   # [M, n]
    elbo = ((token * w).sum(dim=-1) / count.clamp(min=1.0)).mean(dim=0)     # [n]
    t_hat = count / response_lengths.float().clamp(min=1.0)[None]          # [M, n]
    valid = scored.any(dim=0)                                               # [n, G]
    log_terms = eubo_beta * token - torch.log(t_hat.clamp(min=1e-12))[..., None]
    log_terms = torch.where(scored, log_terms, torch.full_like(log_terms, -math.inf))
    log_terms = torch.where(valid[None], log_terms, torch.zeros_like(log_terms))  # no all -inf column
    log_q = torch.logsumexp(log_terms, dim=0) - math.log(token.shape[0])   # [n, G]
    log_q = torch.where(valid, log_q, torch.zeros_like(log_q))
    eubo = log_q.sum(dim=-1) / valid.float().sum(dim=-1).clamp(min=1.0) / eubo_beta
    return elbo, eubo


def spg_sequence_logp(elbo: torch.Tensor, eubo: torch.Tensor, advantages: torch.Tensor,
                      estimation: LogpEstimation, mix_weight: float) -> torch.Tensor:
    """``l_b``: the ELBO-like surrogate where ``A_b > 0``, else the ``estimation`` choice; ``[n]``.

    :raises ValueError: unknown ``estimation``.
    """
    if estimation == "eubo":
        negative = eubo
    elif estimation == "mix":
        negative = mix_weight * eubo + (1.0 - mix_weight) * elbo
    elif estimation == "elbo":
        negative = elbo
    elif estimation == "zero":
        negative = torch.zeros_like(elbo)
    else:
        raise ValueError(f"unknown logp_estimation {estimation!r}; use elbo, eubo, mix or zero")
    return torch.where(advantages > 0, elbo, negative)
