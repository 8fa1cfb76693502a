"""``d1``: diffu-GRPO (Zhao et al., "d1: Scaling Reasoning in Diffusion Large Language Models via
Reinforcement Learning", arXiv 2504.12216 §3.2, eq. (3)-(4); DARE ``llada_dp_actor_d1``;
docs/algorithms.md §3.1).

Estimator: one-step mean-field (:mod:`dare.diffusion.estimators.onestep`): completion fully masked,
prompt tokens masked with ``p_mask_prompt``; ``l_k = log p(y_k | x~)``. Under uniform noise (DiffusionGemma) the same
estimate with random tokens for masks: :class:`~dare.diffusion.estimators.UniformELBOEstimator` at ``t = 1`` (the
completion pure noise, the prompt tokens replaced with probability ``p_mask_prompt``; docs/algorithms.md §3.16). Loss: token-level clipped
GRPO with dual clip, token-mean, ``+ beta`` x KL. Defaults are DARE's recipe (docs/algorithms.md §4.1): G = 8, mu = 1,
eps 0.2, c = 3, beta 0 (the d1 paper uses mu > 1 and beta 0.04; set them in the spec). With
mu > 1 the prompt mask is redrawn at every inner iteration, as in d1.

``preset: official`` gives the released d1 trainer's settings (``D1Params.official``: r - mean advantage, no
dual clip, eps 0.5, G = 6, mu = 12, beta 0.04, tokens through the first EOS, prompt padding attended to and
masked, rollouts at temperature 0.9, TRL's reference sync every 64 steps, which the release's LoRA makes a no-op;
LLaDA only, the one family the release trains); docs/algorithms.md §10 cites each, and tests/parity/test_d1.py checks the loss and gradients
against the official code's values.
"""

from __future__ import annotations

from typing import ClassVar

from pydantic import Field

from dare.components.official import OfficialSetting

from dare.diffusion.estimators import OneStepEstimator, UniformELBOEstimator
from dare.rl import OnlineRLObjective, RLParams, clipped_token_loss

__all__ = ["D1", "D1Params"]


#: The released d1 code and config (docs/algorithms.md §10.1).
D1_TRAINER = "dllm-reasoning/d1@837888f22c21a5da91a0af2b0d7b19e81d9b47ec:diffu-grpo/diffu_grpo_trainer.py"
D1_CONFIG = "dllm-reasoning/d1@837888f22c21a5da91a0af2b0d7b19e81d9b47ec:diffu-grpo/slurm_scripts/train.yaml"
D1_CONFIG_PY = "dllm-reasoning/d1@837888f22c21a5da91a0af2b0d7b19e81d9b47ec:diffu-grpo/diffu_grpo_config.py"


class D1Params(RLParams):
    #: the release trains LLaDA-8B-Instruct only (diffu-grpo/slurm_scripts/gsm_base.sbatch)
    official_families: ClassVar[tuple[str, ...]] = ("llada",)
    official: ClassVar[tuple[OfficialSetting, ...]] = (
        OfficialSetting("advantage", "drgrpo", f"{D1_TRAINER}:539",
                        "DARE's recipes normalise by the group std (GRPO); d1 uses r - mean"),
        OfficialSetting("dual_clip_c", None, f"{D1_TRAINER}:115-118", "DARE's recipes add a dual clip c = 3"),
        OfficialSetting("clip_eps_low", 0.5, f"{D1_CONFIG}:69", "DARE's recipes use the PPO default 0.2"),
        OfficialSetting("clip_eps_high", 0.5, f"{D1_CONFIG}:69", "DARE's recipes use the PPO default 0.2"),
        OfficialSetting("group_size", 6, f"{D1_CONFIG}:37", "DARE's recipes use G = 8"),
        OfficialSetting("num_iterations", 12, f"{D1_CONFIG}:70", "mu = 1 makes one rollout per step (cheaper)"),
        OfficialSetting("beta", 0.04, f"{D1_CONFIG}:68", "DARE's recipes train without a reference policy"),
        OfficialSetting("kl_estimator", "k3", f"{D1_TRAINER}:104"),
        OfficialSetting("p_mask_prompt", 0.15, f"{D1_CONFIG}:67"),
        OfficialSetting("loss_aggregation", "token-mean", f"{D1_TRAINER}:121"),
        OfficialSetting("response_tokens", "through_first_eos", f"{D1_TRAINER}:441-445",
                        "DARE scores every completion token, EOS padding included"),
        OfficialSetting("prompt_padding", "attend", f"{D1_TRAINER}:247-251,278",
                        "DARE never attends to or masks prompt padding"),
        OfficialSetting("rollout_sampler", {"temperature": 0.9}, f"{D1_CONFIG_PY}:193-194",
                        "DARE's rollouts take the spec's sampler as it is"),
        OfficialSetting("sync_ref_model", True, f"{D1_CONFIG}:20",
                        "a no-op with the release's LoRA (TRL keeps no reference copy under PEFT), as in DARE"),
        OfficialSetting("ref_model_sync_steps", 64, f"{D1_CONFIG}:21", "TRL's default 512"),
    )
    p_mask_prompt: float = Field(0.15, ge=0.0, le=1.0, description="Probability of masking each prompt token.")


class D1(OnlineRLObjective):
    """d1 / diffu-GRPO (arXiv 2504.12216): one-step mean-field likelihood, token-level clipped GRPO."""

    name = "d1"
    aliases = ("diffu-grpo",)
    Params = D1Params
    zero_advantage_rows_vanish = True  # loss -A * clip(rho): identically 0 at A = 0

    forward_processes = ("mask", "uniform")

    def make_estimator(self, family, model_config, sampler):
        if getattr(family, "forward_process", "mask") == "uniform":  # pure-noise completion: uniform-elbo at t = 1
            return UniformELBOEstimator(t=1.0, p_mask_prompt=self.params.p_mask_prompt).bind(family, model_config, sampler)
        return OneStepEstimator(p_mask_prompt=self.params.p_mask_prompt)

    def pass_loss(self, inp):
        return clipped_token_loss(inp, self.params)
