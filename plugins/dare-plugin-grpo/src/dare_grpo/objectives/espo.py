"""``espo``: ELBO-based sequence-level policy optimisation (Ou et al., "Principled and Tractable RL for
Reasoning with Diffusion Language Models", arXiv 2512.03759; DARE ``llada_dp_actor_espo``,
``compute_policy_loss_espo``, ``compute_espo_kl``; docs/algorithms.md §3.11).

Estimator: the complementary-mask sequence ELBO with the ``(L + 1)`` denominator, ``mc_num`` MC
samples, fresh masks at every inner iteration (:mod:`dare.diffusion.estimators.elbo_complement`);
``l`` = mean over the MC samples (raw nats). Loss over the ``N`` completions of the rollout::

    log rho = (l - l_old) / |y|
    L_pg    = mean_b max(-A_b rho_b, -A_b clip(rho_b, 1 - eps_low, 1 + eps_high))     (no dual clip by default)
    L_KL    = mean_b k(l_b, l_ref_b) / |y_b|        (the estimator on the raw ELBO, then / |y|; k2 by default)
    L       = L_pg + beta L_KL

``|y| = R`` for EOS-padded families. The gradient goes through the scalar-proxy replay (the trainer's
``pass_mean`` reduction): exact, with one MC sample in memory. Advantages are RLOO. Defaults are the
math recipe (docs/algorithms.md §4.2): G = 16, mu = 8, mc_num = 2, beta 1e-3 (k2), eps 0.2; Sudoku used G = 6,
beta 1e-2; countdown eps 0. Not replicated: the official k1 "gradient-corrected" form (k1 here is
the plain estimator of :mod:`dare.rl.kl`). These defaults are the released math recipe's; ``preset: official``
adds its prompt-padding rule (``ESPOParams.official``, docs/algorithms.md §10.10); tests/parity/test_espo.py
checks the ELBOs, loss and gradients against the official code's.
"""

from __future__ import annotations

from typing import ClassVar, Literal

from pydantic import Field

from dare.components.official import OfficialSetting
from dare.diffusion.estimators import ComplementaryELBOEstimator
from dare.rl import clipped_policy_loss, kl_estimate, ratio_from_log
from dare.rl import LossTerms, OnlineRLObjective, RLParams

__all__ = ["ESPO", "ESPOParams"]


#: The released ESPO code, config and math launch script (docs/algorithms.md §10.10).
ESPO_REPO = "ML-GSAI/ESPO@b5f2dac4c54073a2f36c00bb28bc754a99730159"


class ESPOParams(RLParams):
    #: the values are the LLaDA recipes' (recipes/run_math_llada.sh); the release's Dream demo (recipes/run_demo_dream.sh) is not compared
    official_families: ClassVar[tuple[str, ...]] = ("llada",)
    official: ClassVar[tuple[OfficialSetting, ...]] = (
        OfficialSetting("group_size", 16, f"{ESPO_REPO}:recipes/run_math_llada.sh:23"),
        OfficialSetting("num_iterations", 8, f"{ESPO_REPO}:recipes/run_math_llada.sh:3"),
        OfficialSetting("mc_num", 2, f"{ESPO_REPO}:recipes/run_math_llada.sh:24"),
        OfficialSetting("beta", 1e-3, f"{ESPO_REPO}:recipes/run_math_llada.sh:28"),
        OfficialSetting("kl_estimator", "k2", f"{ESPO_REPO}:espo/espo_trainer.py:199"),
        OfficialSetting("clip_eps_low", 0.2, f"{ESPO_REPO}:recipes/train.yaml:18"),
        OfficialSetting("clip_eps_high", 0.2, f"{ESPO_REPO}:recipes/train.yaml:18"),
        OfficialSetting("advantage", "rloo", f"{ESPO_REPO}:espo/espo_trainer.py:694-709"),
        OfficialSetting("reduce_var", True, f"{ESPO_REPO}:recipes/train.yaml:58"),
        OfficialSetting("response_tokens", "all", f"{ESPO_REPO}:espo/espo_trainer.py:191"),
        OfficialSetting("prompt_padding", "attend", f"{ESPO_REPO}:espo/espo_trainer.py:365",
                        "DARE never attends to prompt padding"),
    )
    group_size: int = Field(16, ge=2, description="Completions per prompt (G).")
    num_iterations: int = Field(8, ge=1, description="Inner iterations mu per rollout batch, fresh masks each.")
    advantage: Literal["grpo", "drgrpo", "rloo"] = Field("rloo", description="Group advantage estimator.")
    beta: float = Field(1e-3, ge=0.0, description="KL coefficient on the sequence ELBO.")
    kl_estimator: Literal["k1", "k2", "k3"] = Field("k2", description="KL estimator on the raw ELBO.")
    dual_clip_c: float | None = Field(None, gt=1.0, description="Dual clip (ESPO has none).")
    mc_num: int = Field(2, ge=1, description="Monte-Carlo samples of the sequence ELBO per iteration.")
    reduce_var: bool = Field(True, description="Average in the complementary-mask copy (2 forwards per sample).")


class ESPO(OnlineRLObjective):
    """ESPO (arXiv 2512.03759): sequence-level ratio of complementary-mask ELBOs, RLOO, mu iterations."""

    name = "espo"
    Params = ESPOParams
    score_reduction = "pass_mean"

    def make_estimator(self, family, model_config, sampler):
        return ComplementaryELBOEstimator(mc_num=self.params.mc_num, reduce_var=self.params.reduce_var)

    def sequence_loss(self, inp):
        lengths = inp.response_lengths.float().clamp(min=1.0)
        adv = inp.advantages.float()
        ratio = ratio_from_log((inp.current - inp.old) / lengths)
        clipped = clipped_policy_loss(ratio, adv, self.params.clip_eps_low, self.params.clip_eps_high, self.params.dual_clip_c)
        loss = clipped.loss.mean()
        metrics = {
            "clip_fraction_high": clipped.clipped_high.float().mean(),
            "clip_fraction_low": clipped.clipped_low.float().mean(),
            "dual_clip_fraction": clipped.dual_clipped.float().mean(),
            "approx_kl": kl_estimate(inp.current.detach() / lengths, inp.old / lengths, "k3").mean(),
        }
        metrics["clip_fraction"] = metrics["clip_fraction_high"] + metrics["clip_fraction_low"]
        if inp.ref is not None and self.params.beta > 0:
            kl = (kl_estimate(inp.current, inp.ref, self.params.kl_estimator) / lengths).mean()
            loss = loss + self.params.beta * kl
            metrics["kl"] = kl.detach()
        return LossTerms(loss, metrics)
