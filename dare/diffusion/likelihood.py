"""Per-token log-probabilities and the masked-diffusion loss."""

from __future__ import annotations

import torch
import torch.nn.functional as F

__all__ = ["token_logprobs", "token_entropy", "masked_diffusion_loss"]


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
    out = torch.zeros(targets.shape, dtype=torch.float32, device=logits.device)
    if bool(where.any()):
        sel = logits[where].float()
        out[where] = -F.cross_entropy(sel, targets[where], reduction="none")
    return out


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
    logp = torch.log_softmax(logits.float(), dim=-1)
    return -(logp.exp() * logp).sum(dim=-1)
