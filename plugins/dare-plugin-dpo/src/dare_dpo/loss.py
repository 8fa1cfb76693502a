"""The DPO loss on sequence scores (ELBO estimates for diffusion LMs)."""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

__all__ = ["DPOLossOutput", "dpo_loss"]


@dataclass
class DPOLossOutput:
    """``loss`` scalar; per-pair ``losses``, ``chosen_rewards``, ``rejected_rewards`` ``[B]`` (float32).

    The implicit rewards are ``beta * (score_theta - score_ref)``; their difference is the margin.
    """

    loss: torch.Tensor
    losses: torch.Tensor
    chosen_rewards: torch.Tensor
    rejected_rewards: torch.Tensor

    @property
    def margins(self) -> torch.Tensor:
        """``[B]`` chosen minus rejected reward."""
        return self.chosen_rewards - self.rejected_rewards

    @property
    def accuracy(self) -> torch.Tensor:
        """Fraction of pairs whose chosen reward is strictly larger (TRL's ``rewards/accuracies``)."""
        return (self.chosen_rewards > self.rejected_rewards).float().mean()


def dpo_loss(
    policy_chosen: torch.Tensor,
    policy_rejected: torch.Tensor,
    ref_chosen: torch.Tensor,
    ref_rejected: torch.Tensor,
    beta: float,
) -> DPOLossOutput:
    """DPO loss (arXiv 2305.18290 eq. (7)) with ELBO scores (VRPO, arXiv 2505.19223 eq. (5)):

    ``loss_b = -log sigmoid(beta * [(s_theta(y_w) - s_theta(y_l)) - (s_ref(y_w) - s_ref(y_l))])``,
    averaged over the ``B`` pairs; ``s`` is a sequence score (an ELBO estimate, see
    ``dare.diffusion.elbo``; the reference scores carry no gradient).

    :param policy_chosen, policy_rejected, ref_chosen, ref_rejected: ``[B]`` float scores.
    :param beta: KL coefficient ``beta > 0``.
    :raises ValueError: ``beta <= 0`` or mismatched shapes.
    """
    if beta <= 0:
        raise ValueError(f"beta must be positive, got {beta}")
    shapes = {tuple(t.shape) for t in (policy_chosen, policy_rejected, ref_chosen, ref_rejected)}
    if len(shapes) != 1:
        raise ValueError(f"the four score tensors must have one shape, got {sorted(shapes)}")
    chosen = beta * (policy_chosen.float() - ref_chosen.float().detach())
    rejected = beta * (policy_rejected.float() - ref_rejected.float().detach())
    losses = -F.logsigmoid(chosen - rejected)
    return DPOLossOutput(loss=losses.mean(), losses=losses, chosen_rewards=chosen, rejected_rewards=rejected)
