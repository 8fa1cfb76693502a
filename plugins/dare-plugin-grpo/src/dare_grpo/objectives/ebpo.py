"""``ebpo``: ELBO-based block-level policy optimisation (LLaDA2.1 technical report, arXiv 2602.08676
§4, eq. (4)-(5); DARE ``ebpo_actor_mixin.py``, ``_forward_process_ebpo``, ``compute_ebpo_composite_elbo``,
``compute_policy_loss_ebpo``, ``compute_ebpo_kl``; docs/algorithms.md §3.8).

Estimator: the all-block composite ELBO (:mod:`dare.diffusion.estimators.blockwise`): ``mc_num`` rows,
each masking every response block at its own stratified noise level (at least one token per block),
``e_k = lp_k / p_b``; the sequence score ``l(y) = (1 / N) sum_rows sum_blocks sum_k e_k`` (raw nats,
uniform timestep weights, no length normalisation). Loss over the completions with a response::

    log rho  = l_theta - l_old                                    (sequence level, composite ELBOs)
    log rho' = min(log rho, log(1 + eps_high))   if A >= 0
               max(log rho, log(1 - eps_low))    if A <  0         (log-domain clip, no dual clip)
    L        = mean_b [ -A_b exp(log rho'_b) ]  +  beta mean_b KL(l_theta, l_ref)

with the KL estimator (default k3, the recipe's ``low_var_kl``) on the raw composites. The gradient
goes through the trainer's scalar-proxy replay (``score_reduction = "pass_mean"``): exact, one MC row
in memory. ``entropy_coeff`` does not exist here (EBPO requires it to be 0).

**How blocks are defined.** Block-attention families (SDAR, LLaDA2; the published pairing): the model's
training block size (``family.block_size``), counted with DARE's global compact origin, because the
block-diffusion forward factorises the likelihood over exactly those blocks; ``block_length``, when set,
must equal it. Full-attention families (LLaDA, Dream; in scope in DARE-the-framework though not in the
report): ``block_length``, else the rollout sampler's ``block_length`` (the semi-autoregressive blocks the
completion was decoded in), else the whole completion as one block; blocks are counted from the
response start, like the sampler's. With full attention every block sees the other blocks' noise, so the
composite is a per-block-stratified ELBO estimate rather than a block-factorised one.

**[QUIRK] decided:** DARE exponentiates the unclipped side of the log-domain clip unbounded (``inf``
for a huge negative-advantage log-ratio of composite sums); here the exponent is capped at
``dare.rl.kl.MAX_EXP`` (value finite; gradient 0 beyond e^20). Recipe defaults (docs/algorithms.md §4.3/4.4): ``mc_num``
16, eps 0.2, mu 1, beta 0.

``preset: official`` gives the seed paper's release (yjyddq/DARE, SDAR recipe; ``EBPOParams.official``), whose
values are DARE's defaults; tests/parity/test_ebpo.py checks the corruptions, the composites, the loss and the
gradients against ``EBPOActorMixin.update_policy`` (docs/algorithms.md §10.7).
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import ClassVar, Literal

import torch
from pydantic import Field

from dare.components.official import OfficialSetting
from dare.diffusion.estimators import BlockwiseELBOEstimator, ScoringBatch
from dare.diffusion.estimators.blockwise import blockwise_passes
from dare.rl import kl_estimate
from dare.rl.kl import MAX_EXP
from dare.rl import LossTerms, OnlineRLObjective, RLParams

__all__ = ["EBPO", "EBPOParams", "ResponseBlockwiseELBOEstimator", "log_clipped_ratio", "ebpo_block_length"]

#: The seed paper's verl-based release, which holds the reference EBPO trainer (block families).
RELEASE = "yjyddq/DARE@83ae8a305a53a914cce563aedceeac88566891cb"
SDAR_RECIPE = f"{RELEASE}:recipe/sdar/run_ebpo_sdar_4b_chat.sh"
PPO_CONFIG = f"{RELEASE}:verl/trainer/config/ppo_trainer.yaml"


def log_clipped_ratio(log_ratio: torch.Tensor, advantages: torch.Tensor, eps_low: float,
                      eps_high: float) -> torch.Tensor:
    """EBPO's log-domain clip: ``min(log rho, log1p(eps_high))`` where ``A >= 0``, else
    ``max(log rho, log1p(-eps_low))``; ``[N]`` float32 (LLaDA2.1 report eq. (5))."""
    log_ratio = log_ratio.float()
    high = torch.minimum(log_ratio, torch.full_like(log_ratio, math.log1p(eps_high)))
    low = torch.maximum(log_ratio, torch.full_like(log_ratio, math.log1p(-eps_low)))
    return torch.where(advantages >= 0, high, low)


class ResponseBlockwiseELBOEstimator(BlockwiseELBOEstimator):
    """The composite ELBO with blocks counted from the response start (full-attention families).

    :func:`~dare.diffusion.estimators.blockwise.blockwise_passes` counts blocks on the compact sequence
    (prompt tokens first); with the prompt's attention zeroed its compact origin *is* the response start.
    The passes do not depend on the attention mask otherwise, so the scoring batch is unchanged.
    """

    name = "response-blockwise-elbo"

    def draw(self, batch: ScoringBatch, generator: torch.Generator | None = None):
        prompt_free = batch.attention_mask.clone()
        prompt_free[:, : batch.prompt_length] = 0
        p = self.params
        return blockwise_passes(replace(batch, attention_mask=prompt_free), p.block_length, p.mc_num, generator)


def ebpo_block_length(family, model_config, sampler, requested: int | None) -> int:
    """The block length of the composite (module docstring, "How blocks are defined")."""
    if family.attention == "block":
        size = family.block_size(model_config)
        if size is not None:
            return int(size)
    if requested is not None:
        return requested
    block = getattr(sampler.params, "block_length", None)
    return int(block) if block else int(sampler.gen_length)


class EBPOParams(RLParams):
    official: ClassVar[tuple[OfficialSetting, ...]] = (
        OfficialSetting("group_size", 8, f"{SDAR_RECIPE}:229"),
        OfficialSetting("mc_num", 16, f"{SDAR_RECIPE}:241-242 (mc_num = n_l)"),
        OfficialSetting("advantage", "grpo", f"{SDAR_RECIPE}:254, verl/trainer/config/ppo_trainer.yaml:233"),
        OfficialSetting("advantage_std_eps", 1e-6, f"{RELEASE}:verl/trainer/ppo/core_algos.py:117"),
        OfficialSetting("clip_eps_low", 0.2, f"{PPO_CONFIG}:52"),
        OfficialSetting("clip_eps_high", 0.2, f"{PPO_CONFIG}:53"),
        OfficialSetting("dual_clip_c", None, f"{RELEASE}:verl/trainer/ppo/dllm_core_algos.py:210-218"),
        OfficialSetting("num_iterations", 1, f"{PPO_CONFIG}:61"),
        OfficialSetting("beta", 0.0, f"{SDAR_RECIPE}:280-281"),
        OfficialSetting("likelihood_temperature", 1.0, f"{RELEASE}:verl/workers/actor/sdar_dp_actor_ebpo.py:73"),
    )

    mc_num: int = Field(16, ge=1, description="Composite-ELBO rows (timesteps) per completion; one forward each.")
    block_length: int | None = Field(
        None, ge=1, description="Blocks of the composite (null: the model's block size for block families, the "
        "rollout sampler's block_length for full-attention families).",
    )
    kl_estimator: Literal["k1", "k2", "k3"] = Field("k3", description="KL estimator on the raw composite ELBOs.")
    dual_clip_c: float | None = Field(None, gt=1.0, description="Not used: EBPO has no dual clip (must stay null).")


class EBPO(OnlineRLObjective):
    """EBPO (LLaDA2.1, arXiv 2602.08676): all-block composite ELBO, sequence PPO with log-domain clipping."""

    name = "ebpo"
    Params = EBPOParams
    score_reduction = "pass_mean"

    def make_estimator(self, family, model_config, sampler):
        block = ebpo_block_length(family, model_config, sampler, self.params.block_length)
        cls = BlockwiseELBOEstimator if family.attention == "block" else ResponseBlockwiseELBOEstimator
        return cls(block_length=block, mc_num=self.params.mc_num)

    def sequence_loss(self, inp):
        valid = inp.response_lengths > 0
        count = valid.float().sum().clamp(min=1.0)
        adv = inp.advantages.float()
        log_ratio = inp.current - inp.old
        clipped_log = log_clipped_ratio(log_ratio, adv, self.params.clip_eps_low, self.params.clip_eps_high)
        per_seq = -adv * torch.exp(clipped_log.clamp(max=MAX_EXP))
        loss = (per_seq * valid).sum() / count
        with torch.no_grad():
            high = valid & (adv > 0) & (log_ratio > math.log1p(self.params.clip_eps_high))
            low = valid & (adv < 0) & (log_ratio < math.log1p(-self.params.clip_eps_low))
        metrics = {
            "clip_fraction_high": high.float().sum() / count,
            "clip_fraction_low": low.float().sum() / count,
            "approx_kl": (kl_estimate(inp.current.detach(), inp.old, "k3") * valid).sum() / count,
        }
        metrics["clip_fraction"] = metrics["clip_fraction_high"] + metrics["clip_fraction_low"]
        if inp.ref is not None and self.params.beta > 0:
            kl = (kl_estimate(inp.current, inp.ref, self.params.kl_estimator) * valid).sum() / count
            loss = loss + self.params.beta * kl
            metrics["kl"] = kl.detach()
        return LossTerms(loss, metrics)

    def check(self, ctx, loc):
        problems = super().check(ctx, loc)
        p, family = self.params, ctx.family
        if p.dual_clip_c is not None:
            problems.append((f"{loc}.params.dual_clip_c", "EBPO clips the sequence ratio in the log domain and has no "
                                                           "dual clip; remove dual_clip_c"))
        if family is not None and family.attention == "block" and p.block_length is not None and ctx.model_config:
            size = family.block_size(ctx.model_config)
            if size is not None and int(size) != p.block_length:
                problems.append((f"{loc}.params.block_length",
                                 f"block_length {p.block_length} differs from the model's block size {size}: the "
                                 f"block-diffusion forward factorises the likelihood over blocks of {size}, so the "
                                 "composite must use them; remove block_length"))
        return problems
