"""``mdpo``: Masked Diffusion Policy Optimization (He et al., "MDPO: Overcoming the Training-Inference
Divide of Masked Diffusion Language Models", arXiv 2508.13148 §3, eq. (4)-(7); DARE
``mdpo_llada_rollout.py``, ``mdpo_algos.py`` (``compute_step_wise_advantage``, ``select_top_k_steps``,
``compute_mdpo_policy_loss``), ``llada_dp_actor_mdpo.py``; docs/algorithms.md §3.4).

Rollout (:mod:`dare_grpo.objectives.mdpo.rollout`): a non-cached categorical sampler that records, for every
denoising step ``s = 1..T``, the input state ``x^(s)``, the one-shot prediction ``y^(s)`` and the
per-token confidence ``c^(s)``. It takes ``gen_length``, ``steps``, ``block_length`` (absent: one block)
and ``temperature`` (and ``top_k``/``top_p`` if the sampler has them and this objective does not set
them) from the rollout sampler; ``conf_alg`` replaces the sampler's own remasking rule.

Rewards and advantages (:func:`step_scores`, :func:`step_advantages`, :func:`select_steps`)::

    r_s      = reward(y^(s))                                      (T reward calls per completion)
    score_s  = (r_s - r_{s-1} + 1) + mean_{s' > s} r_{s'}          (r_0 = 0; the last step adds r_T)
    A_{b,s}  = group advantage of score_{., s} over the G completions of a prompt (``advantage``, GRPO default)
    K steps  = the top-``sample_train_steps`` steps by sum_b |A_{b,s}| over the rollout batch (sorted)

Loss for the selected steps (rows = (step, completion) pairs), with ``mask`` = positions where
``x^(s)`` is the mask token and ``l_k = log p_theta(y^(s)_k | x^(s))`` (likelihood temperature 1)::

    lambda = G / sum_k mask_k                         (inverse mask ratio of the row, G = completion length)
    L = sum_k [ max(-A rho lambda, -A clip(rho, 1 - eps_low, 1 + eps_high) lambda) + beta KL_k ] c_k mask_k
        / sum_k mask_k                                (sums over every selected row; no dual clip)

with ``KL_k`` the ``kl_estimator`` (default k2 = ``(l_ref - l)^2 / 2``, MDPO's) weighted by confidence
like the surrogate, as DARE does. The recipe has the KL off (``beta = 0``; its coefficient when on is
``mdpo_beta = 0.02``).

**Decisions.**

* **[QUIRK]** DARE scores the step states with the *final* response's attention mask, which drops every
  position after the final EOS from the forward (their logits become zeros: a constant ``-log V`` that
  still counts in ``sum mask``). Here ``x^(s)`` is scored with the attention the sampler used (prompt
  mask, whole completion), i.e. the state the rollout actually saw.
* The normaliser ``sum mask`` is over all selected rows of the rollout batch (DARE: per micro-batch, then
  rescaled), so the loss does not depend on ``micro_batch_size``.
* For families with ``pad_in_response = False`` positions outside the final response are not scored.
* Block-attention families are rejected: MDPO's rollout and its step states are full-sequence
  (non-cached, every masked position predicted at once), which block-diffusion attention cannot express.

Recipe defaults (docs/algorithms.md §4.2): ``sample_train_steps`` 16, eps 0.2, ``conf_alg`` llada (Dream: entropy), KL off,
G = 8, mu = 1. ``preset: official`` gives the released LLaDA recipe's settings (``MDPOParams.official``: G = 4, the
learner at the rollout temperature, std epsilon 1e-4; docs/algorithms.md §10.3); tests/parity/test_mdpo.py checks
the step loss and its gradients against the official code's.
"""

from __future__ import annotations

from typing import ClassVar, Literal

from pydantic import Field

from dare.components.official import OfficialSetting
from dare.rl import clipped_policy_loss, kl_estimate, ratio_from_log
from dare.rl import LossTerms, OnlineRLObjective, RLParams
from dare_grpo.objectives.mdpo.loss import StepLossInput, select_steps, step_advantages, step_scores
from dare_grpo.objectives.mdpo.rollout import ConfAlg, MDPORolloutParams

__all__ = ["MDPO", "MDPOParams", "StepLossInput", "step_scores", "step_advantages", "select_steps"]


#: The released MDPO trainer and LLaDA recipe (docs/algorithms.md §10.3).
MDPO_TRAINER = "autonomousvision/mdpo@e6ae43906d202a11813860746c9f361d2da3ab5d:src/open_r1/mdpo/mdpo_trainer.py"
MDPO_CONFIG = "autonomousvision/mdpo@e6ae43906d202a11813860746c9f361d2da3ab5d:recipes/LLaDA-Instruct/mdpo/config_demo.yaml"


class MDPOParams(RLParams):
    #: the release ships LLaDA-Instruct recipes only (recipes/LLaDA-Instruct/mdpo/)
    official_families: ClassVar[tuple[str, ...]] = ("llada",)
    official: ClassVar[tuple[OfficialSetting, ...]] = (
        OfficialSetting("group_size", 4, f"{MDPO_CONFIG}:49", "DARE's recipes use G = 8"),
        OfficialSetting("sample_train_steps", 16, f"{MDPO_CONFIG}:26"),
        OfficialSetting("beta", 0.0, f"{MDPO_CONFIG}:34"),
        OfficialSetting("kl_estimator", "k2", f"{MDPO_TRAINER}:1507"),
        OfficialSetting("clip_eps_low", 0.2, f"{MDPO_TRAINER}:1518"),
        OfficialSetting("clip_eps_high", 0.2, f"{MDPO_TRAINER}:1518"),
        OfficialSetting("likelihood_temperature", "sampler", f"{MDPO_TRAINER}:739",
                        "DARE scores the model's own distribution (temperature 1)"),
        OfficialSetting("advantage_std_eps", 1e-4, f"{MDPO_TRAINER}:858", "verl's 1e-6"),
        OfficialSetting("prompt_padding", "exclude", f"{MDPO_TRAINER}:734"),
    )
    sample_train_steps: int = Field(16, ge=1, description="Steps K trained per rollout (top-K by sum |A|).")
    conf_alg: ConfAlg = Field("llada", description="Rollout remasking score: llada, entropy, topk_margin, random.")
    top_k: int | None = Field(None, ge=1, description="Rollout top-k (null: the sampler's, if it has one).")
    top_p: float | None = Field(None, gt=0.0, le=1.0, description="Rollout top-p (null: the sampler's, if any).")
    kl_estimator: Literal["k1", "k2", "k3"] = Field("k2", description="KL estimator (MDPO: k2).")
    dual_clip_c: float | None = Field(None, gt=1.0, description="Not used: MDPO has no dual clip (must stay null).")


class MDPO(OnlineRLObjective):
    """MDPO (arXiv 2508.13148): step-wise rewards on intermediate predictions, top-K steps, weighted PPO."""

    name = "mdpo"
    Params = MDPOParams

    def trainer_class(self):
        from dare_grpo.objectives.mdpo.trainer import MDPOTrainer

        return MDPOTrainer

    def make_estimator(self, family, model_config, sampler):
        """None: the step rows are scored from the recorded states (:mod:`dare_grpo.objectives.mdpo.trainer`)."""
        return None

    def rollout_settings(self, sampler) -> MDPORolloutParams:
        """The settings of :func:`~dare_grpo.objectives.mdpo.rollout.mdpo_decode` from the rollout sampler."""
        sp, p = sampler.params, self.params
        top_k = p.top_k if p.top_k is not None else (getattr(sp, "top_k", None) or None)
        top_p = p.top_p if p.top_p is not None else getattr(sp, "top_p", None)
        return MDPORolloutParams(gen_length=int(sp.gen_length), steps=int(sp.steps),
                                 block_length=getattr(sp, "block_length", None), temperature=float(sp.temperature),
                                 top_k=top_k, top_p=top_p, conf_alg=p.conf_alg)

    def step_loss(self, inp: StepLossInput) -> LossTerms:
        """``L`` of the rows in ``inp`` with the whole batch's normaliser (module docstring)."""
        mask = inp.mask.float()
        lam = inp.completion_length / mask.sum(dim=-1, keepdim=True).clamp(min=1.0)
        clipped = clipped_policy_loss(ratio_from_log(inp.current - inp.old), inp.advantages[:, None],
                                      self.params.clip_eps_low, self.params.clip_eps_high, None)
        per_token = clipped.loss * lam
        weight = mask * inp.confidence.float()
        denom = max(inp.num_tokens, 1.0)
        metrics = {
            "clip_fraction_high": (clipped.clipped_high.float() * mask).sum() / denom,
            "clip_fraction_low": (clipped.clipped_low.float() * mask).sum() / denom,
            "approx_kl": (kl_estimate(inp.current.detach(), inp.old, "k3") * mask).sum() / denom,
        }
        metrics["clip_fraction"] = metrics["clip_fraction_high"] + metrics["clip_fraction_low"]
        if inp.ref is not None and self.params.beta > 0:
            kl = kl_estimate(inp.current, inp.ref, self.params.kl_estimator)
            per_token = per_token + self.params.beta * kl
            metrics["kl"] = (kl.detach() * mask).sum() / denom
        return LossTerms((per_token * weight).sum() / denom, metrics)

    def check(self, ctx, loc):
        problems = super().check(ctx, loc)
        family, rollout = ctx.family, ctx.rollout_sampler
        if self.params.dual_clip_c is not None:
            problems.append((f"{loc}.params.dual_clip_c", "MDPO's surrogate has no dual clip; remove dual_clip_c"))
        if family is not None and family.attention != "full":
            problems.append((f"{loc}.name", f"MDPO decodes and scores full-sequence states x^(s) (every masked "
                                            f"position predicted at once, no cache); {family.name!r} uses "
                                            f"{family.attention} attention, which cannot express them. Use a "
                                            "full-attention family (LLaDA, Dream)"))
        if rollout is not None:  # MDPO's decoder reads the rollout sampler's settings
            sampler = rollout.sampler
            missing = [k for k in ("gen_length", "steps", "temperature") if k not in type(sampler.params).model_fields]
            if missing:
                problems.append(("sampler.name", f"MDPO's rollout takes gen_length, steps and temperature from the "
                                                 f"sampler; {sampler.name!r} lacks {', '.join(missing)} (use 'llada')"))
            ignored = (("threshold", None), ("factor", None), ("cache", "none"), ("cfg_scale", 0.0),
                       ("logits_eos_inf", False), ("confidence_eos_eot_inf", False))
            for key, off in ignored:
                if getattr(sampler.params, key, off) != off:
                    problems.append((rollout.where(key), f"MDPO rolls out with its own recording decoder (uncached, "
                                                         f"the fixed quota of steps per block, remasking by conf_alg; "
                                                         f"dare_grpo/objectives/mdpo/rollout.py), which has no {key}: it would be "
                                                         f"ignored. Remove it from the rollout sampler, e.g. override "
                                                         f"it in {loc}.params.rollout_sampler ({key}: "
                                                         f"{off if off is not None else 'null'}) to keep it for "
                                                         "evaluation"))
        return problems
