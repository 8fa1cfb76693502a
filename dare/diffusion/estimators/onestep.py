"""One-step mean-field estimator (d1 / diffu-GRPO, arXiv 2504.12216 §3.2; DARE
``_forward_process_d1``; docs/algorithms.md §3.1).

Every response token is masked, and each real prompt token independently with probability
``p_mask_prompt`` (0.15 in d1). One forward; the per-token score is the log-prob of each completion
token given the fully masked completion and the partly masked prompt: ``l_k = log p(y_k | x~)``.
The random prompt mask makes the estimate stochastic (d1 redraws it at each inner iteration), which
regularises policy-gradient updates (d1 §3.2).
"""

from __future__ import annotations

import torch
from pydantic import Field

from dare.components import Params
from dare.diffusion.estimators.base import Estimator, Pass, ScoringBatch, uniform

__all__ = ["OneStepParams", "OneStepEstimator", "onestep_pass"]


def onestep_pass(batch: ScoringBatch, p_mask_prompt: float, generator: torch.Generator | None = None) -> Pass:
    """The single pass of the one-step estimator (module docstring).

    :param p_mask_prompt: probability of masking each real prompt token, in ``[0, 1]``.
    :returns: ``Pass`` with ``K = 1``: mask ``[1, N, S]``, weight ``[1, N, G]`` = 1 on response tokens.
    :raises ValueError: ``p_mask_prompt`` outside ``[0, 1]``.
    """
    if not 0.0 <= p_mask_prompt <= 1.0:
        raise ValueError(f"p_mask_prompt must be in [0, 1], got {p_mask_prompt}")
    prompt_valid = batch.prompt_valid
    u = uniform(prompt_valid.shape, generator, prompt_valid.device)
    mask = torch.cat([prompt_valid & (u < p_mask_prompt), batch.completion_mask], dim=1)
    return Pass(mask=mask[None], weight=batch.completion_mask.float()[None])


class OneStepParams(Params):
    """Parameters of :class:`OneStepEstimator`."""

    p_mask_prompt: float = Field(0.15, ge=0.0, le=1.0, description="Probability of masking each prompt token.")


class OneStepEstimator(Estimator):
    """d1's one-step estimator: fully masked completion, prompt masked with ``p_mask_prompt``."""

    name = "one-step"
    level = "token"

    Params = OneStepParams

    def draw(self, batch: ScoringBatch, generator: torch.Generator | None = None) -> list[Pass]:
        return [onestep_pass(batch, self.params.p_mask_prompt, generator)]
