"""``tracerl``: trajectory-aware PPO (Wang et al., "Revolutionizing Reinforcement Learning Framework
for Diffusion Large Language Models", arXiv 2509.06949 §3, the TraceRL policy objective; not in the
DARE repo, docs/algorithms.md §3.12).

Estimator: replay of the sampler's trajectory with *trajectory shrinkage* ``s`` (``shrink``): every
``s`` neighbouring steps form one transition ``tau^s(t)``, scored under the state before it
(:mod:`dare.diffusion.estimators.trajectory`; ``shrink = 1`` is exact replay). Where the rollout sampler
declares its block stride (:meth:`dare.components.Sampler.steps_per_block`) a transition never spans two blocks:
a block of ``b`` steps splits into ``ceil(b / s)`` transitions, the last one shorter when ``s`` does not divide
``b`` (merging across the boundary would score the next block's first tokens under a state the decoder never
saw). Block families need no split (LLaDA2 declares no stride: its rows count their steps across blocks): the
block-diffusion forward conditions each block on its *clean* predecessors, so a transition spanning two blocks
scores each block's tokens under a state the decoder saw (the later block fully masked after the earlier one was
complete). Loss (the paper's
``J_policy``)::

    L = (1 / N) sum_i sum_t (1 / |tau_i^s(t)|) sum_{k in tau_i^s(t)} C_eps(rho_k, A_i)  + beta KL

i.e. a per-sequence token mean inside each transition, *summed* over transitions and averaged over
the ``N`` completions (``C_eps``: clipped surrogate with dual clip). ``loss_aggregation`` is
therefore not used. Metrics are averaged over transitions.

Value model (``value_model: true``, off by default): the released trainer's optional diffusion value model
(:mod:`dare_grpo.trainer_tracerl`, :mod:`dare.rl.value`) turns the group advantage into token advantages by
step-level GAE (``gamma``, ``lam``) and is trained once per rollout with the clipped value loss
(``value_clip_eps``, ``value_learning_rate``). The released value pipeline's policy loss
(``train/train_sdar_policy.py``) divides each row's token sum by the completion length:
``normaliser: response_length``. Its settings (``configs/rl_sdar_with_value.yaml``) are in docs/algorithms.md
§10.11; tests/parity/test_tracerl_value.py checks values, GAE, the value loss and the policy loss against the
official code. Sliced block training is out of scope.

The released trainer (Gen-Verse/dLLM-RL ``train/rl_llada.py``) differs in three ways, each an option here:
``transition_grouping: per_row`` merges ``s`` consecutive *distinct* steps of each row (``collapse_k_unique``)
instead of the global step grid; ``normaliser: transitions`` averages over every (completion, transition) pair
instead of dividing their sum by the completions; ``kl_target: rollout`` is its KL term, k3 against the rollout
(old) policy *summed* over each transition's tokens (with the same normaliser), instead of the token-mean KL
against the reference policy. ``preset: official`` sets them with the released values (``TraceRLParams.official``:
G = 8, eps 0.2, no dual clip, shrinkage 8, beta 0.01, prompt padding attended to); docs/algorithms.md §10.11
cites each, tests/parity/test_tracerl.py checks the loss and gradients against the official code's. Its
advantages (population-std z-scores, ``reward/rl_reward.py``) are not expressible exactly.
"""

from __future__ import annotations

from dataclasses import replace
from typing import ClassVar, Literal

from pydantic import Field

from dare.components.official import OfficialSetting

from dare.diffusion.estimators import TrajectoryEstimator
from dare.rl import LossTerms, OnlineRLObjective, RLParams, clipped_token_loss, kl_estimate

__all__ = ["TraceRL", "TraceRLParams"]


#: The released TraceRL code and LLaDA config (docs/algorithms.md §10.11).
TRACERL_REPO = "Gen-Verse/dLLM-RL@10b4fd1cba83e4496c20585dc2fd01dc02f20255"


class TraceRLParams(RLParams):
    official: ClassVar[tuple[OfficialSetting, ...]] = (
        OfficialSetting("group_size", 8, f"{TRACERL_REPO}:configs/rl_llada.yaml:34"),
        OfficialSetting("clip_eps_low", 0.2, f"{TRACERL_REPO}:configs/rl_llada.yaml:65", "DARE's recipes: the same"),
        OfficialSetting("clip_eps_high", 0.2, f"{TRACERL_REPO}:configs/rl_llada.yaml:65", "DARE's recipes: the same"),
        OfficialSetting("dual_clip_c", None, f"{TRACERL_REPO}:train/rl_llada.py:584-588",
                        "DARE's recipes add a dual clip c = 3"),
        OfficialSetting("shrink", 8, f"{TRACERL_REPO}:configs/rl_llada.yaml:60", "exact replay (s = 1) by default"),
        OfficialSetting("transition_grouping", "per_row", f"{TRACERL_REPO}:train/rl_llada.py:203-215,257",
                        "the global step grid keeps a transition's steps aligned across rows"),
        OfficialSetting("normaliser", "transitions", f"{TRACERL_REPO}:train/rl_llada.py:589-592",
                        "the paper's J_policy (arXiv 2509.06949 §3) divides by the completions"),
        OfficialSetting("beta", 0.01, f"{TRACERL_REPO}:configs/rl_llada.yaml:66", "DARE's recipes train without KL"),
        OfficialSetting("kl_target", "rollout", f"{TRACERL_REPO}:train/rl_llada.py:596-602",
                        "DARE's KL is against the reference policy, like its other objectives"),
        OfficialSetting("prompt_padding", "attend", f"{TRACERL_REPO}:train/rl_llada.py:575",
                        "DARE never attends to prompt padding"),
        # the optional value model's settings (configs/rl_sdar_with_value.yaml; value_model itself stays off)
        OfficialSetting("gamma", 1.0, f"{TRACERL_REPO}:configs/rl_sdar_with_value.yaml:70"),
        OfficialSetting("lam", 1.0, f"{TRACERL_REPO}:configs/rl_sdar_with_value.yaml:71"),
        OfficialSetting("value_learning_rate", 5e-6, f"{TRACERL_REPO}:configs/rl_sdar_with_value.yaml:79"),
        OfficialSetting("value_clip_eps", 0.2, f"{TRACERL_REPO}:train/train_sdar_value.py:998"),
    )
    shrink: int = Field(1, ge=1, description="Trajectory shrinkage s: merge every s neighbouring denoising steps.")
    transition_grouping: Literal["global", "per_row"] = Field(
        "global", description="global = s consecutive steps of the step grid (transitions never span blocks); "
        "per_row = s consecutive distinct steps of each row (the released trainer).")
    normaliser: Literal["completions", "transitions", "response_length"] = Field(
        "completions", description="completions = sum of the transitions' token means / completions (the paper); "
        "transitions = their mean over every (completion, transition) pair (the released trainer); "
        "response_length = each pair's token sum / the completion length G, averaged over pairs (the released "
        "value pipeline, train/train_sdar_policy.py).")
    kl_target: Literal["reference", "rollout"] = Field(
        "reference", description="reference = the KL estimator against the reference policy, token mean per "
        "transition; rollout = k3 against the rollout policy summed over each transition's tokens (the released "
        "trainer).")
    value_model: bool = Field(False, description="Train TraceRL's diffusion value model and use its step-level GAE "
                              "token advantages (dare_grpo.trainer_tracerl); one process or DDP.")
    gamma: float = Field(1.0, ge=0.0, le=1.0, description="GAE discount over transitions (value_model only).")
    lam: float = Field(1.0, ge=0.0, le=1.0, description="GAE lambda over transitions (value_model only).")
    value_learning_rate: float = Field(5e-6, gt=0.0, le=1.0, description="AdamW learning rate of the value model.")
    value_clip_eps: float = Field(0.2, gt=0.0, description="Clip range of the value loss around the rollout-time "
                                  "values.")

    def uses_reference_policy(self) -> bool:
        """A reference copy only for ``kl_target: reference`` with ``beta > 0`` (``kl_target: rollout`` takes the KL
        against the rollout policy, the old scores)."""
        return self.beta > 0 and self.kl_target == "reference"

    def trains_value_model(self) -> bool:
        """``value_model: true`` (dare_grpo.trainer_tracerl)."""
        return self.value_model


class TraceRL(OnlineRLObjective):
    """TraceRL (arXiv 2509.06949): trajectory-aware PPO with shrinkage, optionally with its value model."""

    name = "tracerl"
    Params = TraceRLParams
    zero_advantage_rows_vanish = True  # loss -A * clip(rho): identically 0 at A = 0

    def trainer_class(self) -> type:
        """:class:`~dare_grpo.trainer_tracerl.TraceRLValueTrainer` with ``value_model``, else the GRPO trainer."""
        if not self.params.value_model:
            return super().trainer_class()
        from dare_grpo.trainer_tracerl import TraceRLValueTrainer

        return TraceRLValueTrainer

    def check(self, ctx, loc: str) -> list[tuple[str, str]]:
        problems = super().check(ctx, loc)
        model = getattr(ctx.spec, "model", None)
        if not self.params.value_model:
            return problems
        if getattr(model, "lora", None) is not None:
            problems.append((f"{loc}.params.value_model", "the value model is a full copy of the policy with its own "
                             "head and cannot share LoRA adapters: remove model.lora, or set value_model: false"))
        cfg = ctx.model_config
        if (cfg.get("weight_tying") if isinstance(cfg, dict) else getattr(cfg, "weight_tying", False)):
            problems.append((f"{loc}.params.value_model", "the model ties its output layer to the input embeddings "
                             "(weight_tying: true), so no value head can replace it: use a checkpoint with an untied "
                             "output layer, or set value_model: false"))
        launch = getattr(ctx.spec, "launch", None)
        if launch is not None and launch.accelerate_config:
            from dare.errors import SpecError
            from dare.memory_estimate import strategy_from_accelerate_config

            try:
                strategy = strategy_from_accelerate_config(launch.accelerate_config, ctx.source)
            except SpecError as exc:  # a missing or unreadable config would hide a ZeRO/FSDP launch
                problems.extend(exc.problems)
                strategy = None
            if strategy is not None and strategy.name != "ddp":
                problems.append((f"{loc}.params.value_model", f"the value model is replicated and all-reduced (one "
                                 f"process or DDP), but launch.accelerate_config ({launch.accelerate_config}) is "
                                 f"{strategy.name}: launch with a DDP config (examples/accelerate/ddp.yaml; --set "
                                 "launch.accelerate_config=examples/accelerate/ddp.yaml), or set value_model: false"))
        return problems

    def make_estimator(self, family, model_config, sampler):
        per_row = self.params.transition_grouping == "per_row"
        return TrajectoryEstimator(shrink=self.params.shrink, block_stride=None if per_row else sampler.steps_per_block(),
                                   per_row=per_row)

    def pass_loss(self, inp):
        p = self.params
        rows = inp.num_row_passes if p.normaliser in ("transitions", "response_length") else inp.num_sequences
        rollout_kl = p.kl_target == "rollout" and p.beta > 0
        core = replace(inp, ref=None) if rollout_kl else inp
        if p.normaliser == "response_length":  # sum over the pair's tokens / G, mean over pairs
            kl_denom = max(float(rows), 1.0) * inp.current.token.shape[-1]
            terms = clipped_token_loss(core, p, mode="token-mean", num_tokens=kl_denom)
        else:
            kl_denom = max(float(rows), 1.0)
            terms = clipped_token_loss(core, p, mode="sequence-mean", num_sequences=rows)
        loss, metrics = terms.loss, {k: v / inp.num_passes for k, v in terms.metrics.items()}
        if rollout_kl:
            kl = (kl_estimate(inp.current.token, inp.old, "k3") * inp.current.scored).sum() / kl_denom
            loss = loss + p.beta * kl
            metrics["kl"] = kl.detach()
        return LossTerms(loss, metrics)
