"""``GRPOConfig``: the online-RL trainer's configuration (TRL style, one dataclass with help text)."""

from __future__ import annotations

from dataclasses import dataclass, field

from dare.trainers import DareConfig

__all__ = ["GRPOConfig"]


@dataclass
class GRPOConfig(DareConfig):
    """``DareConfig`` plus the online-RL knobs shared by every RL objective.

    ``per_device_train_batch_size`` counts *prompts*; each gets ``group_size`` completions, so one
    rollout batch has ``per_device_train_batch_size * gradient_accumulation_steps * group_size``
    completions. One optimizer step per inner iteration: a rollout batch is reused for
    ``num_iterations`` steps (``global_step`` counts optimizer steps, as in TRL).

    :raises ValueError: inconsistent values (checked in ``__post_init__``).
    """

    group_size: int = field(default=8, metadata={"help": "Completions per prompt (G)."})
    num_iterations: int = field(default=1, metadata={"help": "Inner iterations (mu) per rollout batch; one optimizer step each."})
    advantage: str = field(default="grpo", metadata={"help": "grpo ((r-mean)/(std+1e-6), unbiased std), drgrpo (r-mean) or rloo."})
    beta: float = field(default=0.0, metadata={"help": "KL coefficient against the reference policy (0 = no reference model)."})
    kl_estimator: str = field(default="k3", metadata={"help": "KL estimator: k1, k2 or k3 (dare.rl.kl)."})
    clip_eps_low: float = field(default=0.2, metadata={"help": "Lower clip epsilon: ratio >= 1 - eps for negative advantages."})
    clip_eps_high: float = field(default=0.2, metadata={"help": "Upper clip epsilon: ratio <= 1 + eps for positive advantages."})
    dual_clip_c: float | None = field(default=3.0, metadata={"help": "Dual-clip bound c > 1 for negative advantages (None = off)."})
    loss_aggregation: str = field(default="token-mean", metadata={"help": "token-mean or sequence-mean."})
    likelihood_temperature: float = field(default=1.0, metadata={"help": "Divide logits by this before the log-softmax of every likelihood."})
    rollout_batch_size: int | None = field(default=None, metadata={"help": "Completions per sampler call (None = the whole rollout batch)."})
    micro_batch_size: int | None = field(default=None, metadata={"help": "Completions per forward/backward in likelihood passes (None = all)."})
    rollout_seed: int | None = field(default=None, metadata={"help": "Seed of the rollout generator (default: seed + 1)."})
    mask_seed: int | None = field(default=None, metadata={"help": "Seed of the corruption-mask generator (default: seed + 2)."})

    def __post_init__(self):
        if self.group_size < 1:
            raise ValueError(f"group_size must be >= 1, got {self.group_size}")
        if self.num_iterations < 1:
            raise ValueError(f"num_iterations must be >= 1, got {self.num_iterations}")
        if self.advantage not in ("grpo", "drgrpo", "rloo"):
            raise ValueError(f"advantage must be grpo, drgrpo or rloo, got {self.advantage!r}")
        if self.kl_estimator not in ("k1", "k2", "k3"):
            raise ValueError(f"kl_estimator must be k1, k2 or k3, got {self.kl_estimator!r}")
        if self.loss_aggregation not in ("token-mean", "sequence-mean"):
            raise ValueError(f"loss_aggregation must be token-mean or sequence-mean, got {self.loss_aggregation!r}")
        if self.likelihood_temperature <= 0:
            raise ValueError(f"likelihood_temperature must be positive, got {self.likelihood_temperature}")
        super().__post_init__()

    @property
    def resolved_rollout_seed(self) -> int:
        return self.seed + 1 if self.rollout_seed is None else self.rollout_seed

    @property
    def resolved_mask_seed(self) -> int:
        return self.seed + 2 if self.mask_seed is None else self.mask_seed
