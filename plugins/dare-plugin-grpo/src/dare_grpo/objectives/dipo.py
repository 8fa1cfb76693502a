"""``dipo``: DiPO, the policy optimisation of DiRL ("DiRL: An Efficient Post-Training Framework for
Diffusion Language Models", arXiv 2512.22234 §3; release OpenMOSS/DiRL ``train/grpo.py`` with ``method: DiPO``,
loss in ``models/sdar/modeling_sdar.py``; docs/algorithms.md §3.14). For block-diffusion families (SDAR).

Estimator: exact replay of the decoding trajectory in *block rounds* (:mod:`dare.diffusion.estimators.trajectory`,
``block_rounds`` = the family's block size): training row ``r`` of a completion bundles the tokens every block
committed at its ``r``-th denoising step, scored under the state before that step (earlier blocks clean, the
block-diffusion forward), as the release's ``generate_training_samples_for_one`` builds them. Loss::

    rho_k   = exp(clamp(l_k - l_k^old, -c, c))                                  (c = log_ratio_clamp = 10)
    S_k     = min(rho_k A, clip(rho_k, 1 - eps_low, 1 + eps_high) A)            (no dual clip)
    L       = -(1 / (N R)) sum_{b, r} mean_{k in row (b, r)} S_k
              + beta (1 / (N R)) sum_{b, r} mean_{k in row (b, r)} k3_c(l_k, l_ref_k)
    k3_c    = exp(clamp(-(l - l_ref), -c, c)) - 1 + (l - l_ref)

``R`` = the rounds per completion (the block size): the release pads every completion to ``R`` training rows
(rows of advantage 0), averages each row's loss over its tokens and divides the accumulated sum by the number of
rows, ``N R``. Advantages: z-scores of the group's rewards with the population std and no epsilon
(``rollout_dapo_server.py::z_score_normalize``: ``advantage_std: population``, ``advantage_std_eps: 0``).

``preset: official`` (``DiPOParams.official``, docs/algorithms.md §10.17) sets the release's values: G = 8,
eps 0.2 / 0.28, beta 0.1 (k3), one inner iteration. Not replicated: the release keeps only groups with
``0 < mean correctness < 1`` (DARE gives equal-reward groups advantage 0, so they add no policy gradient, but
their KL term still counts) and its ``cosine`` length-scaled reward (a reward choice of the spec).
tests/parity/test_dipo.py checks the loss and its gradients against the release's loss on hand-built rows.
"""

from __future__ import annotations

from dataclasses import replace
from typing import ClassVar, Literal

import torch
from pydantic import Field

from dare.components.official import OfficialSetting
from dare.diffusion.estimators import TrajectoryEstimator
from dare.rl import LossTerms, OnlineRLObjective, RLParams, clipped_token_loss, kl_estimate

__all__ = ["DiPO", "DiPOParams", "clamped_k3"]


#: The released DiRL code and config (docs/algorithms.md §10.17).
DIRL_REPO = "OpenMOSS/DiRL@ec4bfb30ebeab62eb31b820937cedd2cdde3ae0c"


def clamped_k3(logp: torch.Tensor, ref: torch.Tensor, c: float | None) -> torch.Tensor:
    """Per-token k3 ``exp(clamp(-d, -c, c)) - 1 + d`` with ``d = logp - ref`` (no clamp when ``c`` is None).

    ``logp``/``ref``: ``[N, G]`` float log-probabilities. :returns: ``[N, G]`` float32.
    Source: OpenMOSS/DiRL ``models/sdar/modeling_sdar.py:1270-1273``.
    """
    d = logp.float() - ref.float()
    e = -d if c is None else (-d).clamp(-c, c)
    return torch.exp(e) - 1.0 + d


class DiPOParams(RLParams):
    #: the release trains SDAR / TraDo checkpoints (configs/rl.yaml ``model_base: sdar``)
    official_families: ClassVar[tuple[str, ...]] = ("sdar",)
    official: ClassVar[tuple[OfficialSetting, ...]] = (
        OfficialSetting("group_size", 8, f"{DIRL_REPO}:configs/rl.yaml:31"),
        OfficialSetting("num_iterations", 1, f"{DIRL_REPO}:configs/rl.yaml:53"),
        OfficialSetting("clip_eps_low", 0.2, f"{DIRL_REPO}:configs/rl.yaml:66"),
        OfficialSetting("clip_eps_high", 0.28, f"{DIRL_REPO}:models/sdar/modeling_sdar.py:1257"),
        OfficialSetting("dual_clip_c", None, f"{DIRL_REPO}:models/sdar/modeling_sdar.py:1258",
                        "DARE's recipes add a dual clip c = 3"),
        OfficialSetting("beta", 0.1, f"{DIRL_REPO}:configs/rl.yaml:67"),
        OfficialSetting("kl_estimator", "k3", f"{DIRL_REPO}:configs/rl.yaml:68"),
        OfficialSetting("log_ratio_clamp", 10.0, f"{DIRL_REPO}:models/sdar/modeling_sdar.py:1256,1273"),
        OfficialSetting("advantage", "grpo", f"{DIRL_REPO}:train/rollout_dapo_server.py:429"),
        OfficialSetting("advantage_std", "population", f"{DIRL_REPO}:train/rollout_dapo_server.py:58-61",
                        "DARE/verl divide by the unbiased std"),
        OfficialSetting("advantage_std_eps", 0.0, f"{DIRL_REPO}:train/rollout_dapo_server.py:58-61",
                        "DARE/verl add 1e-6"),
    )
    group_size: int = Field(8, ge=2, description="Completions per prompt (G).")
    clip_eps_high: float = Field(0.28, ge=0.0, description="Upper clip epsilon (the release: eps + 0.08).")
    dual_clip_c: float | None = Field(None, gt=1.0, description="Dual clip (DiPO has none).")
    beta: float = Field(0.1, ge=0.0, description="KL coefficient against the reference policy (k3, token mean per row).")
    advantage_std: Literal["sample", "population"] = Field("population", description="Std of the group z-score.")
    advantage_std_eps: float = Field(0.0, ge=0.0, description="Added to the group std (the release: none).")
    log_ratio_clamp: float | None = Field(10.0, gt=0.0, description="Clamp of the log-ratio and of the k3 exponent "
                                          "before exp (null = none).")


class DiPO(OnlineRLObjective):
    """DiPO (DiRL, arXiv 2512.22234): block-round trajectory replay, clipped PPO, k3 KL, per-row token means."""

    name = "dipo"
    Params = DiPOParams
    zero_advantage_rows_vanish = False  # the KL term does not vanish at A = 0 (beta > 0 by default)

    def check(self, ctx, loc: str) -> list[tuple[str, str]]:
        problems = super().check(ctx, loc)
        family = ctx.family
        if family is not None and getattr(family, "attention", None) != "block":
            problems.append((f"{loc}.name", f"DiPO replays block rounds (step r of every block in one forward), which "
                             f"is exact only for block-diffusion families (SDAR, LLaDA2), and {family.name!r} is not "
                             "one: use tracerl or cj-grpo for full-attention families"))
        return problems

    def make_estimator(self, family, model_config, sampler):
        self.rounds = int(family.block_size(model_config))
        return TrajectoryEstimator(shrink=1, block_rounds=self.rounds)

    def pass_loss(self, inp):
        p = self.params
        rows = max(float(inp.num_sequences * getattr(self, "rounds", 1)), 1.0)
        terms = clipped_token_loss(replace(inp, ref=None), p, mode="sequence-mean", num_sequences=rows,
                                   log_ratio_clamp=p.log_ratio_clamp)
        loss, metrics = terms.loss, {k: v / inp.num_passes for k, v in terms.metrics.items()}
        if inp.ref is not None and p.beta > 0:
            w = inp.current.scored.float()
            if p.kl_estimator == "k3":
                k = clamped_k3(inp.current.token, inp.ref, p.log_ratio_clamp)
            else:
                k = kl_estimate(inp.current.token, inp.ref, p.kl_estimator)
            per_row = (k * w).sum(-1) / w.sum(-1).clamp(min=1.0)
            kl = per_row.sum() / rows
            loss = loss + p.beta * kl
            metrics["kl"] = kl.detach()
        return LossTerms(loss, metrics)
