"""``lightningrl``: LightningRL ("LightningRL: Breaking the Accuracy-Parallelism Trade-off of Block-wise dLLMs
via Reinforcement Learning", arXiv 2603.13319 §3; release SJTU-DENG-Lab/LightningRL: ``reward/rl_reward.py``,
``train/train_policy_no_value.py``, loss in ``models/sdar/modeling_sdar.py``; docs/algorithms.md §3.15).
For block-diffusion families (SDAR).

Reward on accuracy *and* parallelism. For completion ``j`` of a group, ``c_j`` in {0, 1} is its correctness
(reward ``>= correct_threshold``) and ``tpf_j = |y_j| / F_j`` its tokens per forward (``F_j`` = the distinct
denoising steps that committed its tokens through the first stop token). Each part is normalised *within the
group* (population std; 0 where the std is 0), then summed
(:func:`dare_grpo.objectives.lightningrl.trainer.shaped_rewards`)::

    r_j = z(c)_j + z(tpf)_j            (tpf_norm: z_score; minmax: (tpf - min) / (max - min), 0.5 when flat;
                                        none: tpf_coefficient * tpf.  acc_norm false: c -> +1 / -1)

Parallelism-aware dynamic sampling (:func:`dare_grpo.objectives.lightningrl.trainer.kept_groups`): a group with no correct
completion, or whose tpf range ``max - min`` is below ``tpf_range_threshold``, is dropped (no loss term at all). Advantages are the batch-level
z-score of the kept rewards, ``A = (r - mean) / max(std, 1e-8)`` (unbiased std, every kept row of the batch).

Estimator: the block-diffusion training forward with the whole response masked (:class:`OneStepEstimator`
without prompt masking): token ``k`` of block ``n`` is scored as ``log pi(y_k | earlier blocks clean, block n
masked)``, as the release's ``compute_rl_loss`` forward does. Loss (:func:`lightningrl_loss`)::

    rho_k = exp(clamp(l_k - l_k^old, -10, 10))
    L_pg  = -(1 / N) sum_b (1 / |y_b|) sum_k min(rho_k A_b, clip(rho_k, 1 - eps_low, 1 + eps_high) A_b)
    L_KL  = beta mean_{tokens} k3_c(l, l_ref)                   (token mean over every scored token)
    L_NLL = nll_weight mean_{tokens of correct rows} (-l_k)     (token mean)
    L     = L_pg + L_KL + L_NLL

The shaping, the filter and the correctness need the rollout's trajectory and rewards, so the objective runs on
:class:`~dare_grpo.objectives.lightningrl.trainer.LightningRLTrainer` (a :class:`~dare.rl.trainer.GRPOTrainer` whose
``after_passes`` hook (dare.rl.hooks) replaces the advantages, drops the filtered groups' passes and records per-row loss weights,
``1 / N`` and ``1 / T_c`` on the correct rows, in ``Rollout.row_values``). Defaults are the release's ``configs/lightningrl.yaml`` (``LightningRLParams.official``,
docs/algorithms.md §10.18), except G = 8 (the release: 32) and ``response_tokens: all`` (the release scores the
response through its first EOS). The release normalises each term over a micro-batch
of 8 rows; DARE's normalisers are the whole batch's (equal with one micro-batch).
tests/parity/test_lightningrl.py checks the reward shaping, the filter, the advantages, the loss and its gradients.
"""

from __future__ import annotations

from typing import ClassVar, Literal

import torch
from pydantic import Field

from dare.components.official import OfficialSetting
from dare.diffusion.estimators import OneStepEstimator
from dare.rl import LossTerms, OnlineRLObjective, RLParams, clipped_policy_loss, kl_estimate, ratio_from_log
from dare_grpo.objectives.dipo import clamped_k3

__all__ = ["LightningRL", "LightningRLParams", "lightningrl_loss"]


#: The released LightningRL code and config (docs/algorithms.md §10.18).
LIGHTNINGRL_REPO = "SJTU-DENG-Lab/LightningRL@e4d7d293f3d5b1482cc3597a677af1c1c055ff53"
_CFG = f"{LIGHTNINGRL_REPO}:configs/lightningrl.yaml"


def lightningrl_loss(logp: torch.Tensor, old: torch.Tensor, ref: torch.Tensor | None, advantages: torch.Tensor,
                     scored: torch.Tensor, row_weight: torch.Tensor, nll_row_weight: torch.Tensor,
                     params: "LightningRLParams", num_tokens: float) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """LightningRL's loss of a chunk of rows with the whole batch's normalisers (module docstring).

    :param logp: ``[n, G]`` float token scores (differentiable); ``old``/``ref``: ``[n, G]`` float (ref may be None);
    :param advantages: ``[n]``; :param scored: ``[n, G]`` bool;
    :param row_weight: ``[n]`` float, ``1 / N`` on the kept rows (``N`` = kept rows of the batch), 0 on dropped rows;
    :param nll_row_weight: ``[n]`` float, ``1 / T_c`` on the kept correct rows (``T_c`` = their scored tokens in the
        whole batch), 0 elsewhere; :param num_tokens: scored tokens of the kept rows of the batch (KL token mean).
    :returns: ``(loss, metrics)``. Source: SJTU-DENG-Lab/LightningRL ``models/sdar/modeling_sdar.py:1259-1398``.
    """
    p = params
    w = scored.float()
    log_ratio = (logp - old).clamp(-p.log_ratio_clamp, p.log_ratio_clamp)
    clipped = clipped_policy_loss(ratio_from_log(log_ratio), advantages.float()[:, None], p.clip_eps_low,
                                  p.clip_eps_high, p.dual_clip_c)
    per_row = (clipped.loss * w).sum(-1) / w.sum(-1).clamp(min=1.0)
    loss = (per_row * row_weight.float()).sum()
    denom = max(float(num_tokens), 1.0)
    metrics = {"clip_fraction": ((clipped.clipped_high | clipped.clipped_low).float() * w).sum() / denom}
    if ref is not None and p.beta > 0:
        k = clamped_k3(logp, ref, p.log_ratio_clamp) if p.kl_estimator == "k3" else kl_estimate(logp, ref, p.kl_estimator)
        kl = (k * w).sum() / denom
        loss = loss + p.beta * kl
        metrics["kl"] = kl.detach()
    if p.nll_weight > 0:
        nll = -(logp.float() * w * nll_row_weight.float()[:, None]).sum()
        loss = loss + p.nll_weight * nll
        metrics["nll"] = nll.detach()
    return loss, metrics


class LightningRLParams(RLParams):
    #: the release trains SDAR checkpoints (configs/lightningrl.yaml ``model_base: sdar``)
    official_families: ClassVar[tuple[str, ...]] = ("sdar",)
    official: ClassVar[tuple[OfficialSetting, ...]] = (
        OfficialSetting("group_size", 32, f"{_CFG}:42", "DARE's default G = 8 fits a small batch"),
        OfficialSetting("clip_eps_low", 0.2, f"{_CFG}:93"),
        OfficialSetting("clip_eps_high", 0.2, f"{_CFG}:94"),
        OfficialSetting("dual_clip_c", None, f"{LIGHTNINGRL_REPO}:models/sdar/modeling_sdar.py:1365-1374"),
        OfficialSetting("kl_estimator", "k3", f"{_CFG}:97"),
        OfficialSetting("nll_weight", 0.1, f"{_CFG}:98"),
        OfficialSetting("beta", 0.01, f"{_CFG}:99"),
        OfficialSetting("tpf_norm", "z_score", f"{_CFG}:114"),
        OfficialSetting("acc_norm", True, f"{_CFG}:115"),
        OfficialSetting("tpf_coefficient", 1.0, f"{_CFG}:107"),
        OfficialSetting("tpf_range_threshold", 0.01, f"{_CFG}:108"),
        OfficialSetting("drop_all_wrong", True, f"{_CFG}:109"),
        OfficialSetting("log_ratio_clamp", 10.0, f"{LIGHTNINGRL_REPO}:models/sdar/modeling_sdar.py:1331,1365"),
        OfficialSetting("response_tokens", "through_first_eos",
                        f"{LIGHTNINGRL_REPO}:train/train_policy_no_value.py:436-459"),
    )
    group_size: int = Field(8, ge=2, description="Completions per prompt (G).")
    dual_clip_c: float | None = Field(None, gt=1.0, description="Dual clip (LightningRL has none).")
    beta: float = Field(0.01, ge=0.0, description="KL coefficient against the reference policy (token mean).")
    nll_weight: float = Field(0.1, ge=0.0, description="Weight of the NLL term on the correct completions' tokens.")
    correct_threshold: float = Field(1.0, description="A completion is correct when its reward is at least this.")
    tpf_norm: Literal["z_score", "minmax", "none"] = Field("z_score", description="Group normalisation of tokens "
                                                           "per forward.")
    acc_norm: bool = Field(True, description="Group z-score of correctness (false: +1 correct, -1 wrong).")
    tpf_coefficient: float = Field(1.0, description="Scale of the raw tokens per forward (tpf_norm: none only).")
    tpf_range_threshold: float = Field(0.01, ge=0.0, description="Drop groups whose tokens-per-forward range is "
                                       "below this (parallelism-aware dynamic sampling).")
    drop_all_wrong: bool = Field(True, description="Drop groups with no correct completion.")
    log_ratio_clamp: float = Field(10.0, gt=0.0, description="Clamp of the log-ratio and the k3 exponent before exp.")


class LightningRL(OnlineRLObjective):
    """LightningRL (arXiv 2603.13319): accuracy + tokens-per-forward reward, dynamic sampling, PPO + NLL on correct completions, block-diffusion one-step scores."""  # noqa: E501

    name = "lightningrl"
    Params = LightningRLParams

    def trainer_class(self) -> type:
        """:class:`~dare_grpo.objectives.lightningrl.trainer.LightningRLTrainer` (reward shaping and dynamic sampling)."""
        from dare_grpo.objectives.lightningrl.trainer import LightningRLTrainer

        return LightningRLTrainer

    def check(self, ctx, loc: str) -> list[tuple[str, str]]:
        problems = super().check(ctx, loc)
        family = ctx.family
        if family is not None and getattr(family, "attention", None) != "block":
            problems.append((f"{loc}.name", f"LightningRL scores each block under its clean predecessors and rewards "
                             f"tokens per forward of a block decoder, so it needs a block-diffusion family (SDAR, "
                             f"LLaDA2), and {family.name!r} is not one"))
        return problems

    def make_estimator(self, family, model_config, sampler):
        return OneStepEstimator(p_mask_prompt=0.0)

    def pass_loss(self, inp):
        n = inp.advantages.shape[0]
        fallback = torch.full((n,), 1.0 / max(inp.num_sequences, 1), device=inp.advantages.device)
        row_weight = inp.row_values.get("policy_weight", fallback)
        nll_row_weight = inp.row_values.get("nll_weight", torch.zeros_like(fallback))
        loss, metrics = lightningrl_loss(inp.current.token, inp.old, inp.ref, inp.advantages, inp.current.scored,
                                         row_weight, nll_row_weight, self.params, inp.num_tokens)
        return LossTerms(loss, {k: v / inp.num_passes for k, v in metrics.items()})
