"""``coupled-grpo``: DiffuCoder's coupled-GRPO (Gong et al., "DiffuCoder: Understanding and Improving
Masked Diffusion Models for Code Generation", arXiv 2506.20639 §4.2; DARE
``llada_dp_actor_coupled_grpo``; docs/algorithms.md §3.2).

Estimator: complementary mask pair with ``t ~ U(t_min, t_max)`` per completion, plus (DARE) the
fully-masked copy (:mod:`dare.diffusion.estimators.coupled`; ``full_mask_term: false`` is the
paper's version). The prompt is never masked. **[QUIRK] decided:** no ``set_seed(42)``; ``t`` and
the masks are fresh per completion and step, from the trainer's mask generator. Loss: token-level
clipped GRPO with dual clip, token-mean. Recipe defaults (docs/algorithms.md §4.1): G = 8, mu = 1, eps 0.2, beta 0.
"""

from __future__ import annotations

from pydantic import Field, model_validator

from dare.diffusion.estimators import CoupledEstimator
from dare.rl import OnlineRLObjective, RLParams, clipped_token_loss

__all__ = ["CoupledGRPO", "CoupledGRPOParams"]


class CoupledGRPOParams(RLParams):
    t_min: float = Field(0.2, gt=0.0, lt=1.0, description="Smallest mask ratio t of the coupled pair.")
    t_max: float = Field(0.8, gt=0.0, lt=1.0, description="Largest mask ratio t of the coupled pair.")
    full_mask_term: bool = Field(True, description="Average in the fully-masked copy (DARE); false = DiffuCoder's pair only.")

    @model_validator(mode="after")
    def _range(self):
        if self.t_min > self.t_max:
            raise ValueError(f"t_min ({self.t_min}) must not exceed t_max ({self.t_max})")
        return self


class CoupledGRPO(OnlineRLObjective):
    """Coupled-GRPO (DiffuCoder, arXiv 2506.20639): complementary masks (+ full mask), token-level GRPO."""

    name = "coupled-grpo"
    Params = CoupledGRPOParams
    zero_advantage_rows_vanish = True  # loss -A * clip(rho): identically 0 at A = 0

    def make_estimator(self, family, model_config, sampler):
        p = self.params
        return CoupledEstimator(t_min=p.t_min, t_max=p.t_max, full_mask_term=p.full_mask_term)

    def pass_loss(self, inp):
        return clipped_token_loss(inp, self.params)
