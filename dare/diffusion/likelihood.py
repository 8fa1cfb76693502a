"""Per-token log-probabilities and the masked-diffusion loss."""

from __future__ import annotations

import torch
import torch.nn.functional as F

__all__ = ["token_logprobs", "token_logprobs_and_entropy", "token_entropy", "masked_diffusion_loss"]


def token_logprobs(logits: torch.Tensor, targets: torch.Tensor, where: torch.Tensor | None = None) -> torch.Tensor:
    """``log softmax(logits)[target]`` per position, computed in float32.

    :param logits: ``[B, L, V]`` aligned logits (position i scores token i).
    :param targets: ``[B, L]`` int64 clean tokens.
    :param where: optional ``[B, L]`` bool; positions outside get 0 and the vocabulary softmax is
        evaluated only where needed (memory ~ number of selected positions).
    :returns: ``[B, L]`` float32.
    """
    if where is None:
        return -F.cross_entropy(logits.float().transpose(1, 2), targets, reduction="none")
    if bool(where.all()):  # every position scored: no gather of the selected logits, no scatter back
        return _gather(torch.log_softmax(logits.float(), dim=-1), targets)
    out = torch.zeros(targets.shape, dtype=torch.float32, device=logits.device)
    if bool(where.any()):
        sel = logits[where].float()
        out[where] = -F.cross_entropy(sel, targets[where], reduction="none")
    return out


def _gather(logp: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """``logp[..., targets]``: ``[..., V]`` log-probs and ``[...]`` int64 targets -> ``[...]``."""
    return logp.gather(-1, targets.unsqueeze(-1)).squeeze(-1)


def token_logprobs_and_entropy(
    logits: torch.Tensor, targets: torch.Tensor, where: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """:func:`token_logprobs` and :func:`token_entropy` from one log-softmax.

    The entropy metric of an RL update reuses the log-softmax the log-probs are taken from instead of a second
    softmax over the vocabulary; both values equal those of the two functions called separately, bit for bit
    (``cross_entropy`` is ``-log_softmax`` gathered at the target).

    :param logits: ``[B, L, V]`` aligned logits; :param targets: ``[B, L]`` int64; :param where: ``[B, L]`` bool,
        the scored positions.
    :returns: ``(log-probs [B, L] float32, 0 outside where and differentiable; entropy [B, L] float32 in nats, 0
        outside where, without gradient)``.
    """
    logp = torch.zeros(targets.shape, dtype=torch.float32, device=logits.device)
    ent = torch.zeros(targets.shape, dtype=torch.float32, device=logits.device)
    if bool(where.all()):
        full = torch.log_softmax(logits.float(), dim=-1)
        return _gather(full, targets), _entropy_of(full)
    if bool(where.any()):
        sel = torch.log_softmax(logits[where].float(), dim=-1)
        logp[where] = _gather(sel, targets[where])
        ent[where] = _entropy_of(sel)
    return logp, ent


@torch.no_grad()
def _entropy_of(logp: torch.Tensor) -> torch.Tensor:
    """``-sum_v exp(logp) * logp`` over the last dim (no gradient); the product is taken in place in the fresh
    ``exp`` tensor, the same values as ``-(logp.exp() * logp).sum(-1)`` bit for bit, one vocabulary-sized
    allocation less."""
    return logp.exp().mul_(logp).sum(dim=-1).neg_()


def masked_diffusion_loss(
    logits: torch.Tensor,
    targets: torch.Tensor,
    mask: torch.Tensor,
    t: torch.Tensor,
    response_length: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor]:
    """LLaDA SFT loss (arXiv 2502.09992, Algorithm 2 / eq. (5)).

    ``loss_b = (1 / L'_b) Σ_{i masked} CE(logits_{b,i}, x_{b,i}) / t_b`` with ``L'_b`` the response
    length of example b (the paper's normaliser, not the masked count); the batch loss is the mean
    over examples.

    :param logits: ``[B, L, V]``; :param targets: ``[B, L]`` int64; :param mask: ``[B, L]`` bool,
        masked response positions; :param t: ``[B]`` mask ratios; :param response_length: ``[B]``
        response lengths (> 0).
    :returns: ``(loss scalar, per-example loss [B])`` float32.
    """
    lp = token_logprobs(logits, targets, mask)
    per_example = -(lp.sum(dim=1) / t.float()) / response_length.clamp(min=1).float()
    return per_example.mean(), per_example


@torch.no_grad()
def token_entropy(logits: torch.Tensor) -> torch.Tensor:
    """Entropy of the predictive distribution, ``H = -sum_v p_v log p_v`` in nats per position, computed in
    float32 without gradient (a training metric, as TRL's GRPO ``entropy``).

    :param logits: ``[..., V]`` float. :returns: ``[...]`` float32, ``0 <= H <= log V``.
    """
    return _entropy_of(torch.log_softmax(logits.float(), dim=-1))
