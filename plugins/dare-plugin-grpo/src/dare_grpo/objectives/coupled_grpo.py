"""``coupled-grpo``: DiffuCoder's coupled-GRPO (Gong et al., "DiffuCoder: Understanding and Improving
Masked Diffusion Models for Code Generation", arXiv 2506.20639 §4.2; DARE
``llada_dp_actor_coupled_grpo``; docs/algorithms.md §3.2).

Estimator: complementary mask pair with ``t ~ U(t_min, t_max)`` per completion, plus (DARE) the
fully-masked copy (:mod:`dare.diffusion.estimators.coupled`; ``full_mask_term: false`` is the
paper's version). The prompt is never masked. **[QUIRK] decided:** no ``set_seed(42)``; ``t`` and
the masks are fresh per completion and step, from the trainer's mask generator. Loss: token-level
clipped GRPO with dual clip, token-mean. Recipe defaults (docs/algorithms.md §4.1): G = 8, mu = 1, eps 0.2, beta 0.

The released trainer averages the fully-masked copy in (``(lp_full + coupled) / 2``,
``src/open_r1/coupled_grpo.py`` line 122 of apple/ml-diffucoder), which is DARE's default; ``full_mask_term:
false`` is the paper's equation only. ``preset: official`` gives the released settings
(``CoupledGRPOParams.official``, for Dream, the architecture of DiffuCoder: leave-one-out advantage, no dual clip,
eps 0.5, G = 10, mu = 2, beta 0.01, tokens through the first EOS, prompt padding attended to, rollouts at temperature
1 with top-p 0.95, the reference policy mixed with the policy every 64 steps, alpha 0.6: TRL's ``sync_ref_model``);
docs/algorithms.md §10 cites each,
tests/parity/test_coupled_grpo.py checks them.
"""

from __future__ import annotations

from typing import ClassVar

from pydantic import Field, model_validator

from dare.components.official import OfficialSetting

from dare.diffusion.estimators import CoupledEstimator
from dare.rl import OnlineRLObjective, RLParams, clipped_token_loss

__all__ = ["CoupledGRPO", "CoupledGRPOParams"]


#: The released DiffuCoder code and config (docs/algorithms.md §10.2).
DIFFUCODER_TRAINER = "apple/ml-diffucoder@f735e01376b752b70356efe45192f31499bf30dc:src/open_r1/coupled_grpo.py"
DIFFUCODER_CONFIG = "apple/ml-diffucoder@f735e01376b752b70356efe45192f31499bf30dc:recipes/config_coupled_code.yaml"
#: The TRL commit DiffuCoder pins (its setup.py), whose GRPOConfig holds the defaults the config keeps.
TRL_GRPO_CONFIG = "huggingface/trl@1bca49515ecd5b85d16e68c42c76670e252e19f1:trl/trainer/grpo_config.py"


class CoupledGRPOParams(RLParams):
    #: DiffuCoder-7B, a Dream-architecture model, is the only model the release trains
    official_families: ClassVar[tuple[str, ...]] = ("dream",)
    official: ClassVar[tuple[OfficialSetting, ...]] = (
        OfficialSetting("advantage", "rloo", f"{DIFFUCODER_TRAINER}:545-561",
                        "DARE's recipes normalise by the group std (GRPO); DiffuCoder uses leave-one-out"),
        OfficialSetting("dual_clip_c", None, f"{DIFFUCODER_TRAINER}:216-220", "DARE's recipes add a dual clip c = 3"),
        OfficialSetting("clip_eps_low", 0.5, f"{DIFFUCODER_CONFIG}:14", "DARE's recipes use the PPO default 0.2"),
        OfficialSetting("clip_eps_high", 0.5, f"{DIFFUCODER_CONFIG}:14", "DARE's recipes use the PPO default 0.2"),
        OfficialSetting("group_size", 10, f"{DIFFUCODER_CONFIG}:19", "DARE's recipes use G = 8"),
        OfficialSetting("num_iterations", 2, f"{DIFFUCODER_CONFIG}:20", "mu = 1 makes one rollout per step"),
        OfficialSetting("beta", 0.01, f"{DIFFUCODER_CONFIG}:13", "DARE's recipes train without a reference policy"),
        OfficialSetting("kl_estimator", "k3", f"{DIFFUCODER_TRAINER}:205"),
        OfficialSetting("loss_aggregation", "token-mean", f"{DIFFUCODER_TRAINER}:224"),
        OfficialSetting("t_min", 0.2, f"{DIFFUCODER_TRAINER}:259"),
        OfficialSetting("t_max", 0.8, f"{DIFFUCODER_TRAINER}:259"),
        OfficialSetting("full_mask_term", True, f"{DIFFUCODER_TRAINER}:122"),
        OfficialSetting("response_tokens", "through_first_eos", f"{DIFFUCODER_TRAINER}:446-452",
                        "DARE scores every completion token, EOS padding included"),
        OfficialSetting("prompt_padding", "attend", f"{DIFFUCODER_TRAINER}:283",
                        "DARE never attends to prompt padding (DiffuCoder never masks the prompt either way)"),
        OfficialSetting("rollout_sampler", {"temperature": 1.0, "top_p": 0.95}, f"{DIFFUCODER_TRAINER}:409,427",
                        "DARE's rollouts take the spec's sampler as it is (no nucleus filter); the temperature is the "
                        "config's generation_temperature (config_coupled_code.yaml:53)"),
        OfficialSetting("sync_ref_model", True, f"{DIFFUCODER_CONFIG}:11", "DARE's reference policy stays the initial model"),
        OfficialSetting("ref_model_sync_steps", 64, f"{DIFFUCODER_CONFIG}:12", "TRL's default 512"),
        OfficialSetting("ref_model_mixup_alpha", 0.6, f"{TRL_GRPO_CONFIG}:376-377",
                        "TRL's default, which the config keeps"),
    )
    t_min: float = Field(0.2, gt=0.0, lt=1.0, description="Smallest mask ratio t of the coupled pair.")
    t_max: float = Field(0.8, gt=0.0, lt=1.0, description="Largest mask ratio t of the coupled pair.")
    full_mask_term: bool = Field(True, description="Average in the fully-masked copy (the released DiffuCoder trainer, DARE); false = the paper's pair only.")

    @model_validator(mode="after")
    def _range(self):
        if self.t_min > self.t_max:
            raise ValueError(f"t_min ({self.t_min}) must not exceed t_max ({self.t_max})")
        return self


class CoupledGRPO(OnlineRLObjective):
    """Coupled-GRPO (DiffuCoder, arXiv 2506.20639): complementary masks (+ full mask), token-level GRPO."""

    name = "coupled-grpo"
    Params = CoupledGRPOParams
    zero_advantage_rows_vanish = True  # loss -A * clip(rho): identically 0 at A = 0

    def make_estimator(self, family, model_config, sampler):
        p = self.params
        return CoupledEstimator(t_min=p.t_min, t_max=p.t_max, full_mask_term=p.full_mask_term)

    def pass_loss(self, inp):
        return clipped_token_loss(inp, self.params)
