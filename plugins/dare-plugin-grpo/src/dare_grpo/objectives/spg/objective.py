"""``spg``: Sandwiched Policy Gradient (Wang et al., "SPG: Sandwiched Policy Gradient for Masked
Diffusion Language Models", arXiv 2510.09541 §3, eq. (6)-(9); DARE ``llada_dp_actor_spg``,
``_forward_process_spg``, ``compute_policy_loss_spg``; docs/algorithms.md §3.6).

Estimator: SPG's block-wise corruption (:mod:`dare.diffusion.estimators.random_block`): a random
completion block ``j`` partly masked (uniform count), later blocks fully masked, the prompt and earlier
blocks masked with ``p_mask_prompt``; ``mc_num`` Monte-Carlo copies. From the per-token log-probs
``l_{m,k}`` of the masked response tokens of copy ``m``::

    ELBO-like  l+  = mean_m [ sum_{k masked in m} l_{m,k} / #masked_m ]                  (no 1/p weighting)
    EUBO-like  l-E = (1/beta_E) mean_{k masked in some m} log q_k,
               q_k = mean_m [ exp(beta_E l_{m,k}) 1[k masked in m] / t_m ],   t_m = #masked_m / |y|
    l-  = l-E (eubo) | omega l-E + (1 - omega) l+ (mix) | l+ (elbo) | 0 (zero)
    l_b = l+ if A_b > 0 else l-          (zero advantage takes l-, harmless: its loss is 0)
    L   = sum_b (-A_b l_b) |y_b| / sum_b |y_b|                  (REINFORCE, length-weighted; no ratio, no clip)

The upper bound (EUBO) for negative advantages and the lower bound (ELBO) for positive ones sandwich
the true log-likelihood, so both push it in the advantage's direction.

**Decisions.**

* **[QUIRK]** DARE evaluates ``q_k`` as ``p^beta / t`` in probability space and silently drops tokens whose
  ``q_k`` underflows to 0 ("dezero"). Here ``log q_k`` is a ``logsumexp`` in log space: no underflow, so
  no token is dropped for numerical reasons; the value is otherwise identical.
* The EUBO couples the Monte-Carlo copies (a log of a mean), so the update cannot be a sum of per-copy
  losses. With ``mc_num = 1`` (recipe) the loss is computed directly; with ``mc_num > 1`` the trainer
  (:class:`~dare_grpo.objectives.spg.trainer.SPGTrainer`) scores all copies without gradient, differentiates the loss
  with respect to the token log-probs, then replays each copy with gradient (exact; one copy in memory).
* KL is disallowed (DARE raises): ``beta > 0`` is rejected at spec validation. ``num_iterations`` must be 1:
  without an importance ratio a reused rollout would give a biased gradient. (DARE's SPG ``num_iterations``
  means something else, fresh corruption sets accumulated into the *same* optimizer step, 1 in the recipe;
  here more corruptions are ``mc_num``.) Clip settings do not apply and are rejected when set.
* Block-attention families are rejected: the block-diffusion forward always conditions a block on its
  *clean* predecessors, so the corruption of earlier blocks and the "later blocks fully masked" context
  that SPG's surrogates are defined on cannot be expressed (DARE runs SPG on LLaDA/Dream only).

Recipe defaults (docs/algorithms.md §4.2): ``logp_estimation`` mix, ``mix_weight`` 0.5, ``eubo_beta`` 1.5, ``mc_num`` 1,
mu 1, block length = the rollout sampler's (32), ``p_mask_prompt`` 0.15, ``min_t`` 0, ``max_t`` 1.
``preset: official`` gives the released settings DARE can express (``SPGParams.official``: r - mean advantage,
G = 6, ``mc_num`` 2, the response ending at the first EOS with every later position masked, which
:class:`~dare_grpo.objectives.spg.trainer.SPGTrainer` applies); docs/algorithms.md §10.6 lists the one it cannot (mu = 4
without a ratio); tests/parity/test_spg.py checks the loss and gradients against the official code's.
"""

from __future__ import annotations

from typing import ClassVar

from pydantic import Field, model_validator

from dare.components.official import OfficialSetting
from dare.diffusion.estimators import RandomBlockEstimator
from dare.rl import LossTerms, OnlineRLObjective, RLParams
from dare_grpo.objectives.spg.loss import JointLossInput, LogpEstimation, spg_sequence_logp, spg_surrogates

__all__ = ["SPG", "SPGParams", "JointLossInput", "spg_surrogates", "spg_sequence_logp"]

#: The released SPG code and launch script (docs/algorithms.md §10.6).
SPG_TRAINER = "facebookresearch/SPG@a1c712091aee3fde759bbf73b7850546265cd52d:spg/spg_trainer.py"
SPG_REPO = "facebookresearch/SPG@a1c712091aee3fde759bbf73b7850546265cd52d"
SPG_LAUNCH = ("facebookresearch/SPG@a1c712091aee3fde759bbf73b7850546265cd52d:"
              "spg/slurm_scripts/spg_mix/gsm_base_spg_mix_beta1.5_weight0.5.sbatch")


class SPGParams(RLParams):
    #: the release trains LLaDA-8B-Instruct only
    official_families: ClassVar[tuple[str, ...]] = ("llada",)
    official: ClassVar[tuple[OfficialSetting, ...]] = (
        OfficialSetting("advantage", "drgrpo", f"{SPG_TRAINER}:720",
                        "DARE's recipes normalise by the group std (GRPO); SPG uses r - mean"),
        OfficialSetting("group_size", 6, f"{SPG_LAUNCH}:44", "DARE's recipes use G = 8"),
        OfficialSetting("mc_num", 2, f"{SPG_LAUNCH}:41", "one copy halves the update's forwards"),
        OfficialSetting("min_t", 0.0, f"{SPG_LAUNCH}:42"),
        OfficialSetting("max_t", 1.0, f"{SPG_LAUNCH}:43"),
        OfficialSetting("beta", 0.0, f"{SPG_LAUNCH}:47"),
        OfficialSetting("logp_estimation", "mix", f"{SPG_LAUNCH}:48"),
        OfficialSetting("mix_weight", 0.5, f"{SPG_LAUNCH}:49"),
        OfficialSetting("eubo_beta", 1.5, f"{SPG_LAUNCH}:50"),
        OfficialSetting("response_tokens", "through_first_eos", f"{SPG_TRAINER}:644-648",
                        "DARE counts the EOS padding as response (blocks, mask ratios, length weights)"),
        OfficialSetting("p_mask_prompt", 0.15, f"{SPG_REPO}:spg/slurm_scripts/train.yaml:67"),
        OfficialSetting("rollout_sampler", {"temperature": 0.9}, f"{SPG_REPO}:spg/diffu_grpo_config.py:186-187",
                        "DARE's rollouts take the spec's sampler as it is"),
        OfficialSetting("prompt_padding", "exclude", f"{SPG_TRAINER}:615-618",
                        "the release creates no prompt padding (one prompt's group per device batch, its note at "
                        "l.615-618); excluding padding is what makes a padded batch score as its unpadded rows"),
    )
    logp_estimation: LogpEstimation = Field("mix", description="Surrogate for non-positive advantages.")
    mix_weight: float = Field(0.5, ge=0.0, le=1.0, description="omega of 'mix': omega EUBO + (1 - omega) ELBO.")
    eubo_beta: float = Field(1.5, gt=0.0, description="Power beta of the EUBO-like bound.")
    mc_num: int = Field(1, ge=1, description="Monte-Carlo corruptions per completion.")
    block_length: int | None = Field(
        None, ge=1, description="Corruption blocks (null: the rollout sampler's block_length, else the completion)."
    )
    p_mask_prompt: float = Field(0.15, ge=0.0, le=1.0, description="Masking probability before block j.")
    min_t: float = Field(0.0, ge=0.0, le=1.0, description="Smallest mask fraction of block j.")
    max_t: float = Field(1.0, ge=0.0, le=1.0, description="Largest mask fraction of block j.")
    dual_clip_c: float | None = Field(None, gt=1.0, description="Not used (no ratio); must stay null.")

    @model_validator(mode="after")
    def _range(self):
        if self.min_t > self.max_t:
            raise ValueError(f"min_t ({self.min_t}) must not exceed max_t ({self.max_t})")
        return self


#: RL parameters that have no meaning without a ratio or reference.
_UNUSED = ("clip_eps_low", "clip_eps_high", "dual_clip_c", "kl_estimator")


class SPG(OnlineRLObjective):
    """SPG (arXiv 2510.09541): ELBO/EUBO sandwich by advantage sign, block-wise masking, REINFORCE."""

    name = "spg"
    Params = SPGParams

    def trainer_class(self):
        from dare_grpo.objectives.spg.trainer import SPGTrainer

        return SPGTrainer

    def make_estimator(self, family, model_config, sampler):
        p = self.params
        block = p.block_length or getattr(sampler.params, "block_length", None) or sampler.gen_length
        return RandomBlockEstimator(block_length=int(block), mc_num=p.mc_num, p_mask_prompt=p.p_mask_prompt, min_t=p.min_t,
                                    max_t=p.max_t)

    def joint_loss(self, inp: JointLossInput) -> LossTerms:
        """``L`` of the rows in ``inp`` with the whole batch's normaliser (module docstring)."""
        p = self.params
        elbo, eubo = spg_surrogates(inp.token, inp.scored, inp.response_lengths, p.eubo_beta)
        adv = inp.advantages.float()
        logp = spg_sequence_logp(elbo, eubo, adv, p.logp_estimation, p.mix_weight)
        lengths = inp.response_lengths.float()
        loss = (-adv * logp * lengths).sum() / max(inp.total_response_tokens, 1.0)
        n = max(inp.num_sequences, 1)
        metrics = {
            "spg/elbo_like": elbo.detach().sum() / n,
            "spg/eubo_like": eubo.detach().sum() / n,
            "spg/frac_positive": (adv > 0).float().sum() / n,
        }
        return LossTerms(loss, metrics)

    def check(self, ctx, loc):
        problems = super().check(ctx, loc)
        p = self.params
        if p.beta > 0:
            problems.append((f"{loc}.params.beta", "SPG has no KL term (DARE raises on use_kl_loss); set beta: 0"))
        if p.num_iterations > 1:
            problems.append((f"{loc}.params.num_iterations", "SPG is on-policy REINFORCE without an importance "
                                                             "ratio, so reusing a rollout biases the gradient; set "
                                                             "num_iterations: 1"))
        for key in _UNUSED:
            if key in p.model_fields_set and getattr(p, key) is not None:
                problems.append((f"{loc}.params.{key}", f"SPG has no ratio and no reference, so {key} does not apply; "
                                                        "remove it"))
        family = ctx.family
        if family is not None and family.attention == "block":
            problems.append((f"{loc}.name", f"SPG conditions block j on a corrupted prefix and fully masked later "
                                            f"blocks; {family.name!r} uses block-diffusion attention, which always "
                                            "conditions a block on its clean predecessors, so SPG's surrogates cannot "
                                            "be formed (DARE runs SPG on LLaDA/Dream only)"))
        return problems
