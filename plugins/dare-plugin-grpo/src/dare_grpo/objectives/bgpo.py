"""``bgpo``: memory-bounded ELBO policy optimisation with a piecewise ratio (Lin et al., "Boundary-Guided
Policy Optimization for Memory-efficient RL of Diffusion Large Language Models", arXiv 2510.11683;
DARE ``llada_dp_actor_bgpo``, ``compute_policy_loss_bgpo``; docs/algorithms.md §3.7).

Estimator: ``mc_num`` stratified ELBO terms (VRPO mask counts ``k_j / L``,
:mod:`dare.diffusion.estimators.stratified`); ``l_j = (sum_{i masked} lp_i / p_j) / |y|`` per
completion (``|y| = R`` for EOS-padded families, the valid length for block families, as DARE).

Loss, for each MC term ``j`` separately (one backward each, so memory is one term)::

    Delta_j = l_j - l_j^old
    rho_j   = 1 + Delta_j      if A > 0     (first-order lower bound; its sum over j is linear in the ELBO)
    rho_j   = exp(Delta_j)     otherwise
    L = (1 / mc_num) sum_j agg(clip_dual(rho_j, A))  [+ beta agg(KL(l_j, l_j^ref))]

with ``agg`` the token-mean of the broadcast sequence loss (``sum_b L_b |y_b| / sum_b |y_b|``) or
the sequence mean. **[QUIRK] decided:** DARE writes ``rho = exp(log(1 + Delta))``, NaN for
``Delta <= -1``; here ``rho = 1 + Delta`` directly (same value where defined, finite everywhere).
Recipe defaults: ``mc_num = 16``, G = 8, mu = 1, eps 0.2, c = 3, beta 0.

``preset: official`` gives the seed paper's release (yjyddq/DARE, LLaDA recipe; ``BGPOParams.official``), whose
values are DARE's defaults; tests/parity/test_bgpo.py checks the per-term ELBOs, the loss and the gradients
against ``llada_dp_actor_bgpo.update_policy`` (docs/algorithms.md §10.5).
"""

from __future__ import annotations

from typing import ClassVar

import torch
from pydantic import Field

from dare.components.official import OfficialSetting

from dare.diffusion.estimators import StratifiedELBOEstimator
from dare.rl import clipped_policy_loss, kl_estimate, ratio_from_log
from dare.rl import LossTerms, OnlineRLObjective, RLParams

__all__ = ["BGPO", "BGPOParams", "piecewise_ratio"]

#: The seed paper's verl-based release, which holds the reference BGPO trainer.
RELEASE = "yjyddq/DARE@83ae8a305a53a914cce563aedceeac88566891cb"
LLADA_RECIPE = f"{RELEASE}:recipe/llada/run_bgpo_llada_8b_instruct.sh"
PPO_CONFIG = f"{RELEASE}:verl/trainer/config/ppo_trainer.yaml"


def piecewise_ratio(delta: torch.Tensor, advantages: torch.Tensor) -> torch.Tensor:
    """BGPO's ratio: ``1 + delta`` where ``advantages > 0``, ``exp(delta)`` elsewhere (float32)."""
    return torch.where(advantages > 0, 1.0 + delta.float(), ratio_from_log(delta))


class BGPOParams(RLParams):
    official: ClassVar[tuple[OfficialSetting, ...]] = (
        OfficialSetting("group_size", 8, f"{LLADA_RECIPE}:140"),
        OfficialSetting("mc_num", 16, f"{LLADA_RECIPE}:149-150 (mc_num = n_l)"),
        OfficialSetting("advantage", "grpo", f"{LLADA_RECIPE}:161, verl/trainer/config/ppo_trainer.yaml:233"),
        OfficialSetting("advantage_std_eps", 1e-6, f"{RELEASE}:verl/trainer/ppo/core_algos.py:117"),
        OfficialSetting("clip_eps_low", 0.2, f"{PPO_CONFIG}:52"),
        OfficialSetting("clip_eps_high", 0.2, f"{PPO_CONFIG}:53"),
        OfficialSetting("dual_clip_c", 3.0, f"{PPO_CONFIG}:54"),
        OfficialSetting("num_iterations", 1, f"{PPO_CONFIG}:61"),
        OfficialSetting("beta", 0.0, f"{LLADA_RECIPE}:186-187"),
        OfficialSetting("loss_aggregation", "token-mean", f"{LLADA_RECIPE}:191"),
        OfficialSetting("response_tokens", "all", f"{RELEASE}:verl/workers/rollout/rollout_utils.py:262-263"),
        OfficialSetting("prompt_padding", "exclude", f"{RELEASE}:verl/workers/actor/llada_dp_actor_bgpo.py:103"),
        OfficialSetting("likelihood_temperature", 1.0, f"{RELEASE}:verl/workers/actor/llada_dp_actor_bgpo.py:120"),
    )

    mc_num: int = Field(16, ge=1, description="Stratified ELBO terms per completion (one backward each).")


class BGPO(OnlineRLObjective):
    """BGPO (arXiv 2510.11683): stratified ELBO terms, piecewise (linear for A > 0) ratio, one term in memory."""

    name = "bgpo"
    Params = BGPOParams
    zero_advantage_rows_vanish = True  # loss -A * clip(rho): identically 0 at A = 0

    def make_estimator(self, family, model_config, sampler):
        return StratifiedELBOEstimator(mc_num=self.params.mc_num)

    def pass_loss(self, inp):
        lengths = inp.response_lengths.float().clamp(min=1.0)
        elbo = inp.current.sequence / lengths
        delta = elbo - inp.old.sum(dim=-1) / lengths
        adv = inp.advantages.float()
        clipped = clipped_policy_loss(piecewise_ratio(delta, adv), adv, self.params.clip_eps_low, self.params.clip_eps_high, self.params.dual_clip_c)
        if self.params.loss_aggregation == "token-mean":
            weight, denom = inp.response_lengths.float(), inp.total_response_tokens
        else:
            weight, denom = torch.ones_like(lengths), float(inp.num_sequences)
        scale = 1.0 / (denom * inp.num_passes)

        def agg(values: torch.Tensor) -> torch.Tensor:
            return (values * weight).sum() * scale

        loss = agg(clipped.loss)
        metrics = {
            "clip_fraction_high": agg(clipped.clipped_high.float()),
            "clip_fraction_low": agg(clipped.clipped_low.float()),
            "dual_clip_fraction": agg(clipped.dual_clipped.float()),
            "approx_kl": agg(kl_estimate(elbo.detach(), elbo.detach() - delta.detach(), "k3")),
        }
        metrics["clip_fraction"] = metrics["clip_fraction_high"] + metrics["clip_fraction_low"]
        if inp.ref is not None and self.params.beta > 0:
            kl = agg(kl_estimate(elbo, inp.ref.sum(dim=-1) / lengths, self.params.kl_estimator))
            loss = loss + self.params.beta * kl
            metrics["kl"] = kl.detach()
        return LossTerms(loss, metrics)
