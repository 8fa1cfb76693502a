"""``d-treerpo``: tree-structured RL with local transition likelihoods (d-TreeRPO, arXiv 2512.09675
§3, eq. (3)-(8); DARE ``dtreerpo_llada_rollout.py``, ``dtreerpo_algos.py``, ``llada_dp_actor_dtreerpo.py``;
docs/algorithms.md §3.9).

Rollout (:mod:`dare_grpo.objectives.dtreerpo.rollout`): per prompt a tree of partly decoded states, branching at the
remaining-step counts ``T, T - T/s, ..., 0`` (``s = contraction``): ``num_tree_samples`` children of the
root, ``tree_branch_factor`` children of every later node; leaf value = reward, internal value = mean of
the children, local advantage ``A_i = V_i - mean(V_siblings \\ i)``. The decoding is the rollout
sampler's (``partial_denoise``); the recipe's is LLaDA's low-confidence semi-AR schedule, ``T = 128``,
block 32, Gumbel temperature 0.9 (for LLaDA and Dream alike, through the family's aligned logits).

Every edge (parent state ``x^p`` -> child ``x^c``) is a training segment. With ``l_k = log p_theta(x^c_k | x^p)``
on the ``active`` positions (decoded on the edge, up to the child's first stop id) and ``L_eff = sum active``::

    L_PPO = mean_edges [ sum_k -min(rho_k A, clip(rho_k, 1 - eps_low, 1 + eps_high) A) active_k / L_eff ]
    L_KL  = mean_edges [ sum_k k3(l_k, l_ref_k) active_k / L_eff ]           (k3 = exp(l_ref - l) - (l_ref - l) - 1)
    L_SD  = lambda_t mean_{(group, j)} sum_v q_j(v) (log q_j(v) - log p_theta(v | x^p)_j)
    L     = L_PPO + beta L_KL + L_SD

Self-distillation (``self_distillation``): a *group* is the children of one parent; for groups with at least
one positive-advantage child, ``w = softmax(A+ / tau_t)`` over those children, and at each position ``j``
decoded by some of them ``q_j`` is the ``w``-weighted empirical distribution of their tokens (support: the
chosen tokens only). Schedules with ``p = global_step / max_steps``::

    lambda_t = lambda_max (e^{gamma p} - 1) / (e^gamma - 1),     tau_t = max(tau_max (1 - p)^beta_sd, 1e-6)

The reference policy (``beta > 0``) is the trainer's: the base model with LoRA adapters disabled when the
model has adapters (DARE's ``ref_in_actor``; the recipe trains LoRA r 128 / alpha 64 / dropout 0.05,
``all-linear``: set ``model.lora``), else a frozen copy of the initial model.

**Decisions.**

* All edges of one parent share one forward of ``x^p`` (their log-probs are gathers of the same logits);
  DARE runs one forward per edge. Same values, ``fan`` times fewer forwards. ``micro_batch_size`` counts
  parents per forward/backward.
* **[QUIRK]** DARE's active mask is ``new_logp != 0`` (drops a token predicted with probability 1) and its
  ``q`` adds ``1e-8`` inside the log; here the active mask is structural (decoded on the edge) and ``q`` is
  exact. The SD mean is over the whole rollout batch (DARE: per micro-batch).
* The KL is the textbook k3 (no advantage-dependent ``log(1 + d)``, never NaN); ``kl_estimator`` may change it.
* ``group_size`` and ``advantage`` do not apply (the tree defines the groups and the advantages) and are
  rejected when set. The recipe's optimiser (AdamW betas (0.9, 0.99), weight decay 0.1, grad clip 0.2,
  constant lr 3e-5) belongs to the spec's ``train:`` section.

Recipe defaults (docs/algorithms.md §4.2): ``contraction`` 2, ``num_tree_samples`` 4, ``tree_branch_factor`` 4, eps 0.4,
``num_iterations`` (ppo_epochs) 12, beta 0.01 (k3), self-distillation on with lambda_max 3e-3, gamma 2,
tau_max 2, beta_sd 0.7: the released configuration (``DTreeRPOParams.official``, docs/algorithms.md §10.8), so
``preset: official`` changes nothing; tests/parity/test_dtreerpo.py checks the edge loss and its gradients against
the official code's.
"""

from __future__ import annotations

from typing import ClassVar, Literal

import torch
from pydantic import Field

from dare.components.official import OfficialSetting
from dare.rl import clipped_policy_loss, kl_estimate, ratio_from_log
from dare.rl import LossTerms, OnlineRLObjective, RLParams
from dare_grpo.objectives.dtreerpo.loss import EdgeLossInput, sd_pair_count, sd_schedule, self_distillation

__all__ = ["DTreeRPO", "DTreeRPOParams", "EdgeLossInput", "sd_schedule", "self_distillation", "sd_pair_count"]


#: The released d-TreeRPO configuration (docs/algorithms.md §10.8).
DTREERPO_CONFIG = "THU-BPM/d-TreeRPO@3eb6f215184bd078e948651539ce046133a68174:dtreerpo/slurm_scripts/dtreerpo.yaml"
#: The released trainer's base (``get_logits``: the model called without an attention mask).
DTREERPO_BASE = "THU-BPM/d-TreeRPO@3eb6f215184bd078e948651539ce046133a68174:dtreerpo/diffu_grpo_trainer.py"


class DTreeRPOParams(RLParams):
    #: the release trains LLaDA-8B-Instruct (and LLaDA-MoE, run_llada_moe_*.sh, which no DARE family loads)
    official_families: ClassVar[tuple[str, ...]] = ("llada",)
    official: ClassVar[tuple[OfficialSetting, ...]] = (
        OfficialSetting("beta", 0.01, f"{DTREERPO_CONFIG}:67"),
        OfficialSetting("clip_eps_low", 0.4, f"{DTREERPO_CONFIG}:68"),
        OfficialSetting("clip_eps_high", 0.4, f"{DTREERPO_CONFIG}:68"),
        OfficialSetting("num_iterations", 12, f"{DTREERPO_CONFIG}:69"),
        OfficialSetting("tree_branch_factor", 4, f"{DTREERPO_CONFIG}:72"),
        OfficialSetting("contraction", 2, f"{DTREERPO_CONFIG}:73"),
        OfficialSetting("num_tree_samples", 4, f"{DTREERPO_CONFIG}:74"),
        OfficialSetting("self_distillation", True, f"{DTREERPO_CONFIG}:77"),
        OfficialSetting("sd_lambda_max", 3e-3, f"{DTREERPO_CONFIG}:79"),
        OfficialSetting("sd_gamma", 2.0, f"{DTREERPO_CONFIG}:80"),
        OfficialSetting("sd_tau_max", 2.0, f"{DTREERPO_CONFIG}:81"),
        OfficialSetting("sd_beta", 0.7, f"{DTREERPO_CONFIG}:82"),
        OfficialSetting("prompt_padding", "attend", f"{DTREERPO_BASE}:279", "DARE never attends to prompt padding"),
    )
    num_tree_samples: int = Field(4, ge=2, description="Children of the root (full trees per prompt).")
    tree_branch_factor: int = Field(4, ge=2, description="Children of every later node (T in the paper).")
    contraction: int = Field(2, ge=1, description="Branching levels s: branch points T, T - T/s, ..., 0.")
    num_iterations: int = Field(12, ge=1, description="PPO epochs over the same tree (one optimizer step each).")
    clip_eps_low: float = Field(0.4, ge=0.0, lt=1.0, description="Lower clip epsilon.")
    clip_eps_high: float = Field(0.4, ge=0.0, description="Upper clip epsilon.")
    dual_clip_c: float | None = Field(None, gt=1.0, description="Not used: no dual clip in d-TreeRPO (must stay null).")
    beta: float = Field(0.01, ge=0.0, description="KL coefficient against the reference policy.")
    kl_estimator: Literal["k1", "k2", "k3"] = Field("k3", description="Per-token KL estimator.")
    self_distillation: bool = Field(True, description="Add the time-scheduled sibling self-distillation term.")
    sd_lambda_max: float = Field(3e-3, ge=0.0, description="lambda_max of the self-distillation weight.")
    sd_gamma: float = Field(2.0, description="gamma of the lambda_t schedule.")
    sd_tau_max: float = Field(2.0, gt=0.0, description="tau_max of the softmax temperature schedule.")
    sd_beta: float = Field(0.7, ge=0.0, description="beta of the tau_t schedule.")


class DTreeRPO(OnlineRLObjective):
    """d-TreeRPO (arXiv 2512.09675): tree rollout, local transition PPO, k3 KL, sibling self-distillation."""

    name = "d-treerpo"
    aliases = ("dtreerpo",)
    Params = DTreeRPOParams

    def trainer_class(self):
        from dare_grpo.objectives.dtreerpo.trainer import DTreeRPOTrainer

        return DTreeRPOTrainer

    def make_estimator(self, family, model_config, sampler):
        """None: edges are scored from the tree's states (:mod:`dare_grpo.objectives.dtreerpo.trainer`)."""
        return None

    def fans(self) -> list[int]:
        """Children per node at each level: the root's, then the branch factor."""
        p = self.params
        return [p.num_tree_samples] + [p.tree_branch_factor] * (p.contraction - 1)

    def edge_loss(self, inp: EdgeLossInput) -> LossTerms:
        """``L`` of the edges in ``inp`` with the whole batch's normalisers (module docstring)."""
        active = inp.active.float()
        l_eff = active.sum(dim=-1).clamp(min=1.0)
        n = max(inp.num_edges, 1)

        def edge_mean(values: torch.Tensor) -> torch.Tensor:
            return ((values * active).sum(dim=-1) / l_eff).sum() / n

        clipped = clipped_policy_loss(ratio_from_log(inp.current - inp.old), inp.advantages[:, None],
                                      self.params.clip_eps_low, self.params.clip_eps_high, None)
        loss = edge_mean(clipped.loss)
        metrics = {
            "clip_fraction_high": edge_mean(clipped.clipped_high.float()),
            "clip_fraction_low": edge_mean(clipped.clipped_low.float()),
            "approx_kl": edge_mean(kl_estimate(inp.current.detach(), inp.old, "k3")),
        }
        metrics["clip_fraction"] = metrics["clip_fraction_high"] + metrics["clip_fraction_low"]
        if inp.ref is not None and self.params.beta > 0:
            kl = edge_mean(kl_estimate(inp.current, inp.ref, self.params.kl_estimator))
            loss = loss + self.params.beta * kl
            metrics["kl"] = kl.detach()
        p = self.params
        if p.self_distillation and inp.sd_pairs > 0:
            lam, tau = sd_schedule(inp.progress, p.sd_lambda_max, p.sd_gamma, p.sd_tau_max, p.sd_beta)
            sd = self_distillation(inp.current, inp.tokens, inp.active, inp.group, inp.advantages, tau) / inp.sd_pairs
            loss = loss + lam * sd
            metrics["sd_loss"] = lam * sd.detach()
        return LossTerms(loss, metrics)

    def check(self, ctx, loc):
        problems = super().check(ctx, loc)
        p, family, rollout = self.params, ctx.family, ctx.rollout_sampler
        for key, why in (("group_size", "the tree defines the groups (siblings)"),
                         ("advantage", "advantages are the tree's local advantages")):
            if key in p.model_fields_set:
                problems.append((f"{loc}.params.{key}", f"d-TreeRPO does not use {key}: {why}; remove it"))
        if p.dual_clip_c is not None:
            problems.append((f"{loc}.params.dual_clip_c", "d-TreeRPO's surrogate has no dual clip; remove dual_clip_c"))
        if family is not None and family.attention != "full":
            problems.append((f"{loc}.name", f"d-TreeRPO scores every edge under the parent's full state, later blocks "
                                            f"still masked; {family.name!r} uses {family.attention} attention, which "
                                            "conditions a block only on clean predecessors. Use LLaDA or Dream"))
        if rollout is not None:  # the tree grows with the rollout sampler
            sampler, where = rollout.sampler, rollout.where
            for key in ("threshold", "factor"):
                if getattr(sampler.params, key, None) is not None:
                    problems.append((where(key), f"d-TreeRPO branches partly decoded states at fixed steps of the "
                                                 f"sampler's schedule, which parallel decoding ({key}) does not "
                                                 f"have. Remove {key} from the rollout sampler, e.g. override it in "
                                                 f"{loc}.params.rollout_sampler ({key}: null) to keep it for "
                                                 "evaluation"))
            if not type(sampler).supports_partial_denoise():
                problems.append(("sampler.name", f"d-TreeRPO branches partly decoded states, which needs a sampler "
                                                 f"with partial_denoise; {sampler.name!r} has none. Use 'llada' (it "
                                                 "decodes any full-attention family, as DARE's tree rollout does for "
                                                 "Dream)"))
            steps = getattr(sampler.params, "steps", None)
            if steps is None:
                problems.append(("sampler.name", f"sampler {sampler.name!r} has no 'steps' (the tree's total T)"))
            elif p.contraction > steps:
                problems.append((f"{loc}.params.contraction", f"contraction {p.contraction} exceeds the rollout "
                                                              f"sampler's {steps} steps ({where('steps')}): some levels "
                                                              "would have no step"))
        return problems
