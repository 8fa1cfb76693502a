"""GSPO (Group Sequence Policy Optimization, arXiv 2507.18071) for diffusion LMs, written from the
``dare new-plugin gspo --kind rl-objective`` scaffold: this file replaces the scaffold's objective module
and touches no core file (tests/test_scaffold.py checks both).

GSPO clips a *sequence*-level importance ratio instead of per-token ratios (arXiv 2507.18071 eq. (5)-(7)):

    s_i(theta) = (pi_theta(y_i | x) / pi_old(y_i | x)) ** (1 / |y_i|)
               = exp( (1 / |y_i|) * sum_t [log pi_theta(y_i,t | .) - log pi_old(y_i,t | .)] )
    J(theta)   = mean_i  min( s_i A_i, clip(s_i, 1 - eps_low, 1 + eps_high) A_i )

For a diffusion LM the per-token log-probabilities are those of the likelihood estimator's pass (here
d1's one-step estimator: the completion fully masked), and ``|y_i|`` is the number of tokens the pass
scores. Every pass is one Monte-Carlo sample of the ratio; the loss averages passes. The paper's clip
range is tiny because the ratio is a geometric mean (its defaults: 3e-4 / 4e-4).
"""

from __future__ import annotations

import torch
from pydantic import Field

from dare.diffusion.estimators import OneStepEstimator
from dare.rl import LossTerms, OnlineRLObjective, PassLossInput, RLParams, clipped_policy_loss


class GspoParams(RLParams):
    clip_eps_low: float = Field(3e-4, ge=0.0, lt=1.0, description="Lower clip of the sequence ratio (GSPO: 3e-4).")
    clip_eps_high: float = Field(4e-4, ge=0.0, description="Upper clip of the sequence ratio (GSPO: 4e-4).")
    dual_clip_c: float | None = Field(None, gt=1.0, description="Dual clip (off in GSPO).")
    p_mask_prompt: float = Field(0.15, ge=0.0, le=1.0, description="Prompt mask ratio of the one-step estimator.")


def sequence_ratio(current: torch.Tensor, old: torch.Tensor, scored: torch.Tensor) -> torch.Tensor:
    """``s_i = exp(mean_t (l_t - l_t^old))`` over the scored tokens: ``[n, G]`` float -> ``[n]`` float32
    (1 for a row without scored tokens)."""
    w = scored.float()
    mean_log = ((current.float() - old.float()) * w).sum(-1) / w.sum(-1).clamp(min=1.0)
    return mean_log.exp()


class Gspo(OnlineRLObjective):
    """GSPO: clipped sequence-level importance ratio (geometric mean of token ratios), arXiv 2507.18071."""

    name = "gspo"
    Params = GspoParams

    def make_estimator(self, family, model_config, sampler):
        return OneStepEstimator(p_mask_prompt=self.params.p_mask_prompt)

    def pass_loss(self, inp: PassLossInput) -> LossTerms:
        p = self.params
        ratio = sequence_ratio(inp.current.token, inp.old, inp.current.scored)
        clipped = clipped_policy_loss(ratio, inp.advantages, p.clip_eps_low, p.clip_eps_high, p.dual_clip_c)
        scale = 1.0 / (inp.num_sequences * inp.num_passes)  # rows of the whole batch, averaged over passes
        return LossTerms(loss=clipped.loss.sum() * scale, metrics={
            "clip_fraction": (clipped.clipped_high | clipped.clipped_low).float().sum() * scale,
            "sequence_ratio": ratio.detach().sum() * scale,
        })
