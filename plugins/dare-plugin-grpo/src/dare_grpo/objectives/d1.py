"""``d1``: diffu-GRPO (Zhao et al., "d1: Scaling Reasoning in Diffusion Large Language Models via
Reinforcement Learning", arXiv 2504.12216 §3.2, eq. (3)-(4); DARE ``llada_dp_actor_d1``;
docs/algorithms.md §3.1).

Estimator: one-step mean-field (:mod:`dare.diffusion.estimators.onestep`): completion fully masked,
prompt tokens masked with ``p_mask_prompt``; ``l_k = log p(y_k | x~)``. Loss: token-level clipped
GRPO with dual clip, token-mean, ``+ beta`` x KL. Defaults are DARE's recipe (docs/algorithms.md §4.1): G = 8, mu = 1,
eps 0.2, c = 3, beta 0 (the d1 paper uses mu > 1 and beta 0.04; set them in the spec). With
mu > 1 the prompt mask is redrawn at every inner iteration, as in d1.
"""

from __future__ import annotations

from pydantic import Field

from dare.diffusion.estimators import OneStepEstimator
from dare.rl import OnlineRLObjective, RLParams, clipped_token_loss

__all__ = ["D1", "D1Params"]


class D1Params(RLParams):
    p_mask_prompt: float = Field(0.15, ge=0.0, le=1.0, description="Probability of masking each prompt token.")


class D1(OnlineRLObjective):
    """d1 / diffu-GRPO (arXiv 2504.12216): one-step mean-field likelihood, token-level clipped GRPO."""

    name = "d1"
    aliases = ("diffu-grpo",)
    Params = D1Params
    zero_advantage_rows_vanish = True  # loss -A * clip(rho): identically 0 at A = 0

    def make_estimator(self, family, model_config, sampler):
        return OneStepEstimator(p_mask_prompt=self.params.p_mask_prompt)

    def pass_loss(self, inp):
        return clipped_token_loss(inp, self.params)
