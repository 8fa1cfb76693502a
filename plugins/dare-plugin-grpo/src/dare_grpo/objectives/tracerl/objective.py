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

Uniform-noise families (DiffusionGemma): the replayed state before a transition holds a uniformly random token at every
position not yet fixed (:class:`~dare.diffusion.estimators.UniformNoise`; the decoder's state, whose unfixed positions
are re-noised at every step, docs/algorithms.md §3.16); the value model is refused.

Value model (``value_model: {gamma, lam, learning_rate, clip_eps}``, :class:`ValueModelParams`; absent or null =
off, ``value_model: {}`` = on with the release's settings): the released trainer's optional diffusion value model
(:mod:`dare_grpo.objectives.tracerl.trainer`, :mod:`dare.rl.value`) turns the group advantage into token advantages by
step-level GAE (``gamma``, ``lam``) and is trained once per rollout with the clipped value loss (``clip_eps``,
``learning_rate``); one process or DDP (:meth:`TraceRL.check` refuses an FSDP or DeepSpeed launch). The released
value pipeline's policy loss (``train/train_sdar_policy.py``) divides each row's token sum by the completion length:
``normaliser: response_length``. Its settings (``configs/rl_sdar_with_value.yaml``) are in docs/algorithms.md
§10.11; tests/parity/test_tracerl_value.py checks values, GAE, the value loss and the policy loss against the
official code. Sliced block training is out of scope.

The release trains each model family with its own trainer, and ``preset: official`` takes the spec's family
(``TraceRLParams.official``: rows marked ``llada`` or ``sdar``, docs/algorithms.md §10.11).
The LLaDA trainer (Gen-Verse/dLLM-RL ``train/rl_llada.py``) differs from the paper's loss in three ways, each an
option here: ``transition_grouping: per_row`` merges ``s`` consecutive *distinct* steps of each row
(``collapse_k_unique``) instead of the global step grid; ``normaliser: transitions`` averages over every
(completion, transition) pair instead of dividing their sum by the completions; ``kl_target: rollout`` is its KL
term, k3 against the rollout (old) policy *summed* over each transition's tokens (with the same normaliser),
instead of the token-mean KL against the reference policy (G = 8, eps 0.2, no dual clip, shrinkage 8, beta 0.01,
prompt padding attended to; tests/parity/test_tracerl.py). The SDAR trainer (``train/rl_sdar.py``) uses shrink 1,
``normaliser: response_length`` (each row's token sum / the response length, mean over rows), the rollout KL,
prompt padding excluded, and lays its rows out as options here too: ``row_layout: block_round`` (one training row
per round, bundling step r of every block, :mod:`dare.diffusion.estimators.trajectory`; the normaliser then
counts rows), ``block_alignment: prompt_end`` and ``response_padding: masked`` (:mod:`dare.rl.conventions`) and
``log_ratio_clamp: 10`` (G = 16; tests/parity/test_tracerl_sdar.py). Both take their advantages from
``reward/rl_reward.py``: population-std z-scores (``advantage_std: population``, ``advantage_std_eps: 0``), a
response of at least ``max_token - 5`` tokens counted incorrect (``overlong_margin: 5``) and only groups whose
accuracy is in [0.2, 0.8] trained (``group_filter``), RL options of every objective (:mod:`dare.rl.advantages`).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, ClassVar, Literal

import torch
from pydantic import Field, model_validator

from dare.scaling import distributed
from dare.components import Params
from dare.components.official import OfficialSetting

from dare.diffusion.estimators import TrajectoryEstimator
from dare.diffusion.estimators.uniform import for_forward_process
from dare.rl import LossTerms, OnlineRLObjective, RLParams, clipped_token_loss, kl_estimate

__all__ = ["TraceRL", "TraceRLParams", "ValueModelParams"]


#: The released TraceRL code and configs (docs/algorithms.md §10.11).
TRACERL_REPO = "Gen-Verse/dLLM-RL@10b4fd1cba83e4496c20585dc2fd01dc02f20255"
_L, _S = "llada", "sdar"


def _llada(param, value, where, why=""):
    return OfficialSetting(param, value, f"{TRACERL_REPO}:{where}", why, family=_L)


def _sdar(param, value, where, why=""):
    return OfficialSetting(param, value, f"{TRACERL_REPO}:{where}", why, family=_S)


#: Where the flat keys of the value model's settings moved (refused with the new path named).
_MOVED = {"gamma": "gamma", "lam": "lam", "value_learning_rate": "learning_rate", "value_clip_eps": "clip_eps"}


class ValueModelParams(Params):
    """``algorithm.params.value_model``: the settings of TraceRL's optional diffusion value model (arXiv 2509.06949
    §3.2).

    The defaults are the released value pipeline's (``official``: Gen-Verse/dLLM-RL@10b4fd1
    ``configs/rl_sdar_with_value.yaml``, ``train/train_sdar_value.py``), so ``value_model: {}`` trains it as the
    release does; ``preset: official`` never turns it on (the released ``rl_*.yaml`` configs have none).
    """

    official: ClassVar[tuple[OfficialSetting, ...]] = (
        OfficialSetting("gamma", 1.0, f"{TRACERL_REPO}:configs/rl_sdar_with_value.yaml:70"),
        OfficialSetting("lam", 1.0, f"{TRACERL_REPO}:configs/rl_sdar_with_value.yaml:71"),
        OfficialSetting("learning_rate", 5e-6, f"{TRACERL_REPO}:configs/rl_sdar_with_value.yaml:79"),
        OfficialSetting("clip_eps", 0.2, f"{TRACERL_REPO}:train/train_sdar_value.py:998"),
    )
    gamma: float = Field(1.0, ge=0.0, le=1.0, description="GAE discount over transitions.")
    lam: float = Field(1.0, ge=0.0, le=1.0, description="GAE lambda over transitions.")
    learning_rate: float = Field(5e-6, gt=0.0, le=1.0, description="AdamW learning rate of the value model.")
    clip_eps: float = Field(0.2, gt=0.0, description="Clip range of the value loss around the rollout-time values.")


class TraceRLParams(RLParams):
    #: The release trains LLaDA with ``train/rl_llada.py`` (``configs/rl_llada.yaml``) and SDAR/TraDo with
    #: ``train/rl_sdar.py`` (``configs/rl_sdar.yaml``, ``model_base: sdar``); rows without a family come from
    #: the shared reward script and value pipeline. ``preset: official`` on another family is refused.
    official_families: ClassVar[tuple[str, ...]] = ("llada", "sdar")
    official: ClassVar[tuple[OfficialSetting, ...]] = (
        _llada("group_size", 8, "configs/rl_llada.yaml:34"),
        _llada("clip_eps_low", 0.2, "configs/rl_llada.yaml:65", "DARE's recipes: the same"),
        _llada("clip_eps_high", 0.2, "configs/rl_llada.yaml:65", "DARE's recipes: the same"),
        _llada("dual_clip_c", None, "train/rl_llada.py:584-588", "DARE's recipes add a dual clip c = 3"),
        _llada("shrink", 8, "configs/rl_llada.yaml:60", "exact replay (s = 1) by default"),
        _llada("transition_grouping", "per_row", "train/rl_llada.py:203-215,257",
               "the global step grid keeps a transition's steps aligned across rows"),
        _llada("normaliser", "transitions", "train/rl_llada.py:589-592",
               "the paper's J_policy (arXiv 2509.06949 §3) divides by the completions"),
        _llada("beta", 0.01, "configs/rl_llada.yaml:66", "DARE's recipes train without KL"),
        _llada("kl_target", "rollout", "train/rl_llada.py:596-602",
               "DARE's KL is against the reference policy, like its other objectives"),
        _llada("prompt_padding", "attend", "train/rl_llada.py:575", "DARE never attends to prompt padding"),
        _sdar("group_size", 16, "configs/rl_sdar.yaml:37"),
        _sdar("clip_eps_low", 0.2, "configs/rl_sdar.yaml:68", "DARE's recipes: the same"),
        _sdar("clip_eps_high", 0.2, "configs/rl_sdar.yaml:68", "DARE's recipes: the same"),
        _sdar("dual_clip_c", None, "train/rl_sdar.py:734-738", "DARE's recipes add a dual clip c = 3"),
        _sdar("shrink", 1, "configs/rl_sdar.yaml:62"),
        _sdar("row_layout", "block_round", "train/rl_sdar.py:514-547",
              "one row per transition keeps the loss scale independent of the number of blocks"),
        _sdar("normaliser", "response_length", "train/rl_sdar.py:741-744",
              "the paper's J_policy (arXiv 2509.06949 §3) divides by the completions"),
        _sdar("beta", 0.01, "configs/rl_sdar.yaml:69", "DARE's recipes train without KL"),
        _sdar("kl_target", "rollout", "train/rl_sdar.py:747-755",
              "DARE's KL is against the reference policy, like its other objectives"),
        _sdar("prompt_padding", "exclude", "train/rl_sdar.py:344-360"),
        _sdar("block_alignment", "prompt_end", "train/rl_sdar.py:291-335",
              "DARE's blocks start at each row's first real token, as in decoding"),
        _sdar("response_padding", "masked", "train/rl_sdar.py:344-352,401-418",
              "DARE never attends to positions after a truncating family's response"),
        _sdar("log_ratio_clamp", 10.0, "train/rl_sdar.py:732,752",
              "a clamp zeroes the gradient of large but finite log-ratios"),
        # the shared reward script (reward/rl_reward.py): z-scores with the population std, no epsilon, the
        # overlong rule and the group-accuracy filter
        OfficialSetting("advantage_std", "population", f"{TRACERL_REPO}:reward/rl_reward.py:74-79",
                        "DARE/verl divide by the unbiased std"),
        OfficialSetting("advantage_std_eps", 0.0, f"{TRACERL_REPO}:reward/rl_reward.py:76-79",
                        "DARE/verl add 1e-6"),
        OfficialSetting("overlong_margin", 5, f"{TRACERL_REPO}:reward/rl_reward.py:100-103",
                        "DARE scores a truncated completion by its reward"),
        OfficialSetting("group_filter", (0.2, 0.8), f"{TRACERL_REPO}:reward/rl_reward.py:112-114",
                        "DARE trains every group (equal-reward groups have advantage 0)"),
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
    row_layout: Literal["transition", "block_round"] = Field(
        "transition", description="transition = one pass (training row) per transition; block_round = one per round, "
        "bundling step r of every block (block families; the released SDAR trainer): the response_length and "
        "transitions normalisers then count rows, not transitions.")
    log_ratio_clamp: float | None = Field(
        None, gt=0.0, description="Clamp the log-ratio (and the rollout KL's exponent) to [-c, c] before exp (the "
        "released trainer: 10); null = no clamp.")
    kl_target: Literal["reference", "rollout"] = Field(
        "reference", description="reference = the KL estimator against the reference policy, token mean per "
        "transition; rollout = k3 against the rollout policy summed over each transition's tokens (the released "
        "trainer).")
    activation_budget_mib: float | Literal["auto"] | None = Field(
        "auto", description="RLParams.activation_budget_mib with TraceRL's default, auto: one pass (transition) per "
        "backward over every completion would hold the activations of all of them, so the update runs as many "
        "completions at once as fit the policy's training state (weights, gradients, AdamW moments); the release "
        "runs one at a time. null = every completion at once; micro_batch_size takes precedence.")
    value_model: ValueModelParams | None = Field(
        None, description="Train TraceRL's diffusion value model and use its step-level GAE token advantages "
        "(dare_grpo.objectives.tracerl.trainer; one process or DDP): {gamma, lam, learning_rate, clip_eps}, {} = the "
        "release's settings; null = off.")

    @model_validator(mode="before")
    @classmethod
    def _refuse_flat_value_keys(cls, data: Any) -> Any:
        """The value model's settings were four flat keys and a ``value_model: true/false`` switch: refuse them,
        naming where each moved."""
        if not isinstance(data, dict):
            return data
        moved = [k for k in _MOVED if k in data]
        if moved:
            where = "; ".join(f"algorithm.params.{k} moved to algorithm.params.value_model.{_MOVED[k]}" for k in moved)
            example = ", ".join(f"{_MOVED[k]}: {data[k]}" for k in moved)
            raise ValueError(f"{where}: the value model's settings are one mapping now, value_model: {{{example}}} "
                             "(which also turns the value model on; leave value_model out to train without it)")
        if isinstance(data.get("value_model"), bool):
            raise ValueError(f"value_model: {str(data['value_model']).lower()} is no longer a switch: value_model is "
                             "the value model's settings {gamma, lam, learning_rate, clip_eps}; value_model: {} trains "
                             "it with the release's (1.0, 1.0, 5e-6, 0.2), and leaving it out (or null) trains without "
                             "it")
        return data

    def uses_reference_policy(self) -> bool:
        """A reference copy only for ``kl_target: reference`` with ``beta > 0`` (``kl_target: rollout`` takes the KL
        against the rollout policy, the old scores)."""
        return self.beta > 0 and self.kl_target == "reference"

    def trains_value_model(self) -> bool:
        """Whether ``value_model`` is set (dare_grpo.objectives.tracerl.trainer)."""
        return self.value_model is not None


class TraceRL(OnlineRLObjective):
    """TraceRL (arXiv 2509.06949): trajectory-aware PPO with shrinkage, optionally with its value model."""

    name = "tracerl"
    Params = TraceRLParams
    forward_processes = ("mask", "uniform")
    zero_advantage_rows_vanish = True  # loss -A * clip(rho): identically 0 at A = 0

    def trainer_class(self) -> type:
        """:class:`~dare_grpo.objectives.tracerl.trainer.TraceRLValueTrainer` with ``value_model``, else the GRPO trainer."""
        if self.params.value_model is None:
            return super().trainer_class()
        from dare_grpo.objectives.tracerl.trainer import TraceRLValueTrainer

        return TraceRLValueTrainer

    def check(self, ctx, loc: str) -> list[tuple[str, str]]:
        problems = super().check(ctx, loc)
        model = getattr(ctx.spec, "model", None)
        family = ctx.family
        if self.params.row_layout == "block_round" and family is not None and getattr(family, "attention", None) != "block":
            problems.append((f"{loc}.params.row_layout", f"block_round bundles every block's step into one forward, which "
                             f"is exact only for block-diffusion families (SDAR, LLaDA2), and {family.name!r} is not one: "
                             "set row_layout: transition"))
        if self.params.value_model is None:
            return problems
        if family is not None and getattr(family, "forward_process", "mask") == "uniform":
            problems.append((f"{loc}.params.value_model", f"the value model replays [MASK] states with a value head on a "
                             f"single-sequence model, and model family {family.name!r} corrupts with uniform noise and "
                             "scores canvases with an encoder-decoder: remove value_model"))
        if self.params.row_layout == "block_round":
            problems.append((f"{loc}.params.row_layout", "the value model's step-level GAE runs over transitions, not "
                             "block rounds: set row_layout: transition with value_model"))
        if getattr(model, "lora", None) is not None:
            problems.append((f"{loc}.params.value_model", "the value model is a full copy of the policy with its own "
                             "head and cannot share LoRA adapters: remove model.lora, or remove value_model"))
        cfg = ctx.model_config
        if (cfg.get("weight_tying") if isinstance(cfg, dict) else getattr(cfg, "weight_tying", False)):
            problems.append((f"{loc}.params.value_model", "the model ties its output layer to the input embeddings "
                             "(weight_tying: true), so no value head can replace it: use a checkpoint with an untied "
                             "output layer, or remove value_model"))
        return problems + self._value_model_launch_problems(ctx, loc)

    def _value_model_launch_problems(self, ctx, loc: str) -> list[tuple[str, str]]:
        """The value model is replicated and its gradients all-reduced by hand: one process or DDP. The launch is the
        spec's ``launch.accelerate_config``, else the accelerate launch running this command (``accelerate launch
        --config_file`` sets ``ACCELERATE_USE_FSDP`` / ``ACCELERATE_USE_DEEPSPEED`` in every process it starts:
        :func:`dare.scaling.distributed.shards_model`), so ``dare run`` refuses it before loading any weights."""
        launch = getattr(ctx.spec, "launch", None)
        config = launch.accelerate_config if launch is not None else None
        if config:
            from dare.errors import SpecError
            from dare.ops.memory_estimate import strategy_from_accelerate_config

            try:
                strategy = strategy_from_accelerate_config(config, ctx.source).name
            except SpecError as exc:  # a missing or unreadable config would hide a ZeRO/FSDP launch
                return list(exc.problems)
            launched = f"launch.accelerate_config ({config}) is {strategy}"
            fix = "--set launch.accelerate_config=examples/accelerate/ddp.yaml"
        elif distributed.shards_model():
            strategy = "sharded"
            launched = "this command runs under an FSDP or DeepSpeed launch (accelerate launch --config_file)"
            fix = "accelerate launch --config_file examples/accelerate/ddp.yaml, or torchrun"
        else:
            return []
        if strategy == "ddp":
            return []
        return [(f"{loc}.params.value_model", f"the value model is replicated and all-reduced (one process or DDP), but "
                 f"{launched}: launch with DDP ({fix}), or remove value_model")]

    def make_estimator(self, family, model_config, sampler):
        if self.params.row_layout == "block_round":
            est = TrajectoryEstimator(shrink=self.params.shrink, block_rounds=family.block_size(model_config))
        else:
            per_row = self.params.transition_grouping == "per_row"
            est = TrajectoryEstimator(shrink=self.params.shrink, per_row=per_row,
                                      block_stride=None if per_row else sampler.steps_per_block())
        return for_forward_process(est, family, model_config)  # uniform noise: random tokens where replay masks

    def pass_loss(self, inp):
        p = self.params
        rows = inp.num_row_passes if p.normaliser in ("transitions", "response_length") else inp.num_sequences
        rollout_kl = p.kl_target == "rollout" and p.beta > 0
        core = replace(inp, ref=None) if rollout_kl else inp
        if p.normaliser == "response_length":  # sum over the pair's tokens / G, mean over pairs
            kl_denom = max(float(rows), 1.0) * inp.current.token.shape[-1]
            terms = clipped_token_loss(core, p, mode="token-mean", num_tokens=kl_denom, log_ratio_clamp=p.log_ratio_clamp)
        else:
            kl_denom = max(float(rows), 1.0)
            terms = clipped_token_loss(core, p, mode="sequence-mean", num_sequences=rows, log_ratio_clamp=p.log_ratio_clamp)
        loss, metrics = terms.loss, {k: v / inp.num_passes for k, v in terms.metrics.items()}
        if rollout_kl:
            kl = (self._rollout_kl(inp.current.token, inp.old) * inp.current.scored).sum() / kl_denom
            loss = loss + p.beta * kl
            metrics["kl"] = kl.detach()
        return LossTerms(loss, metrics)

    def _rollout_kl(self, logp: torch.Tensor, old: torch.Tensor) -> torch.Tensor:
        """Per-token k3 against the rollout policy, ``[N, G]``; with ``log_ratio_clamp`` c the exponent ``-d`` is
        clamped to ``[-c, c]`` (``exp(clamp(-d)) - 1 + d``, Gen-Verse/dLLM-RL ``train/rl_sdar.py:749-753``)."""
        c = self.params.log_ratio_clamp
        if c is None:
            return kl_estimate(logp, old, "k3")
        d = logp.float() - old.float()
        return torch.exp((-d).clamp(-c, c)) - 1.0 + d
