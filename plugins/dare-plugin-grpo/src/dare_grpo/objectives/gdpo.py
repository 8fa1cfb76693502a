"""``gdpo``: Group Diffusion Policy Optimization (Rojas et al., "Improving Reasoning for Diffusion Language
Models via Group Diffusion Policy Optimization", arXiv 2510.08554 §3; release: NVIDIA-NeMo/RL pull request
3550, ``research/gdpo``; docs/algorithms.md §3.13).

Estimator: the semi-deterministic Monte-Carlo (SDMC) sequence ELBO ``l`` of :mod:`dare.diffusion.estimators.sdmc`
(Gauss-Legendre quadrature over the mask ratio, ``mc_samples`` exact-count masks per node, the same masks for the
current, rollout and reference policies). Loss over the ``N`` completions (the release's GSPO-shaped loss:
``sequence_level_importance_ratios: true``, ``token_level_loss: false`` of NeMo RL's ``ClippedPGLoss``,
``nemo_rl/algorithms/loss/loss_functions.py:528-540, 679-687``: the ratio is the exponent of the mean over the
response of the per-position ELBO differences)::

    log rho_b = (l_b - l_old_b) / |y_b|                         (one ratio per sequence, length-normalised)
    L_pg      = mean_b max(-A_b rho_b, -A_b clip(rho_b, 1 - eps_low, 1 + eps_high))
    L         = L_pg + beta mean_b k(l_b, l_ref_b) / |y_b|       (beta = 0 in the release)

Advantages are Dr.GRPO's group-centred rewards ``A = r - mean_group(r)`` (no std division: the release's
``normalize_rewards: false``). Defaults are the release's (``configs/gdpo_llada_8b.yaml``): G = 6, mu = 12
inner iterations on each rollout, eps 0.5, gauss-3 with one mask per node, no KL; ``preset: official`` changes
nothing else (``GDPOParams.official``, docs/algorithms.md §10.16). The gradient goes through the scalar-proxy
replay (``score_reduction = "pass_mean"``): exact, one pass in memory. The release also trains LoRA adapters
(r 128, alpha 64, learning rate 3e-7, gradient clip 0.2): spec settings (``model.lora``, ``train``), not the
objective's. tests/parity/test_gdpo.py checks the quadrature, the mask counts, the ELBO weights and the loss.
"""

from __future__ import annotations

from typing import ClassVar, Literal

from pydantic import Field

from dare.components.official import OfficialSetting
from dare.diffusion.estimators import SDMCEstimator
from dare.diffusion.estimators.sdmc import Rule
from dare.rl import LossTerms, OnlineRLObjective, RLParams, clipped_policy_loss, kl_estimate, ratio_from_log

__all__ = ["GDPO", "GDPOParams"]


#: The released GDPO code (NVIDIA-NeMo/RL pull request 3550, docs/algorithms.md §10.16).
GDPO_REPO = "NVIDIA-NeMo/RL@e03f62ced96cfa5cdf81c7876f7807bbda4e4f74"
_CFG = f"{GDPO_REPO}:research/gdpo/configs/gdpo_llada_8b.yaml"
#: NeMo RL's clipped policy loss, which the release configures (sequence-level ratio, sequence mean).
NEMO_LOSS = "NVIDIA-NeMo/RL@7ea279abfbeb698b092856d0dab61e7cf39bc909:nemo_rl/algorithms/loss/loss_functions.py"


class GDPOParams(RLParams):
    #: the release trains LLaDA-8B-Instruct (configs/gdpo_llada_8b.yaml ``policy.model_name``)
    official_families: ClassVar[tuple[str, ...]] = ("llada",)
    official: ClassVar[tuple[OfficialSetting, ...]] = (
        OfficialSetting("group_size", 6, f"{_CFG}:14"),
        OfficialSetting("num_iterations", 12, f"{_CFG}:16"),
        OfficialSetting("advantage", "drgrpo", f"{_CFG}:20-21"),
        OfficialSetting("clip_eps_low", 0.5, f"{_CFG}:41"),
        OfficialSetting("clip_eps_high", 0.5, f"{_CFG}:42"),
        OfficialSetting("dual_clip_c", None, f"{NEMO_LOSS}:125"),
        OfficialSetting("beta", 0.0, f"{_CFG}:37"),
        OfficialSetting("quadrature", "gauss-3", f"{_CFG}:70"),
        OfficialSetting("mc_samples", 1, f"{_CFG}:71"),
    )
    group_size: int = Field(6, ge=2, description="Completions per prompt (G).")
    num_iterations: int = Field(12, ge=1, description="Inner iterations mu per rollout batch (same masks each).")
    advantage: Literal["grpo", "drgrpo", "rloo"] = Field("drgrpo", description="Group advantage estimator "
                                                         "(drgrpo = group-centred rewards, the release's).")
    clip_eps_low: float = Field(0.5, ge=0.0, lt=1.0, description="Lower clip epsilon of the sequence ratio.")
    clip_eps_high: float = Field(0.5, ge=0.0, description="Upper clip epsilon of the sequence ratio.")
    dual_clip_c: float | None = Field(None, gt=1.0, description="Dual clip (GDPO has none).")
    quadrature: Rule = Field("gauss-3", description="SDMC quadrature rule over the mask ratio t.")
    mc_samples: int = Field(1, ge=1, description="Random masks per quadrature node (one forward each).")


class GDPO(OnlineRLObjective):
    """GDPO (arXiv 2510.08554): SDMC sequence ELBO, length-normalised sequence ratio, Dr.GRPO advantages."""

    name = "gdpo"
    Params = GDPOParams
    score_reduction = "pass_mean"

    def make_estimator(self, family, model_config, sampler):
        return SDMCEstimator(quadrature=self.params.quadrature, mc_samples=self.params.mc_samples)

    def sequence_loss(self, inp):
        p = self.params
        lengths = inp.response_lengths.float().clamp(min=1.0)
        ratio = ratio_from_log((inp.current - inp.old) / lengths)
        clipped = clipped_policy_loss(ratio, inp.advantages.float(), p.clip_eps_low, p.clip_eps_high, p.dual_clip_c)
        loss = clipped.loss.mean()
        metrics = {
            "clip_fraction_high": clipped.clipped_high.float().mean(),
            "clip_fraction_low": clipped.clipped_low.float().mean(),
            "dual_clip_fraction": clipped.dual_clipped.float().mean(),
            "approx_kl": kl_estimate(inp.current.detach() / lengths, inp.old / lengths, "k3").mean(),
        }
        metrics["clip_fraction"] = metrics["clip_fraction_high"] + metrics["clip_fraction_low"]
        if inp.ref is not None and p.beta > 0:
            kl = (kl_estimate(inp.current, inp.ref, p.kl_estimator) / lengths).mean()
            loss = loss + p.beta * kl
            metrics["kl"] = kl.detach()
        return LossTerms(loss, metrics)
