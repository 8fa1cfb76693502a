"""What every online-RL objective shares: parameters, the loss contract and the training skeleton.

The public base of RL objectives, in the core so that any plugin may derive from it
(``dare new-plugin NAME --kind rl-objective`` renders one). An RL objective is three choices on top of
:class:`~dare.rl.trainer.GRPOTrainer`:

1. a likelihood **estimator** (:meth:`OnlineRLObjective.make_estimator`, from
   :mod:`dare.diffusion.estimators`): which corrupted copies score a completion;
2. a **score reduction** (``score_reduction``):

   * ``"per_pass"``: the loss is a sum of one term per pass (:meth:`OnlineRLObjective.pass_loss`);
     the trainer runs one forward/backward per pass and row chunk, so memory stays at one pass
     (d1, coupled-GRPO, BGPO, CJ-GRPO, TraceRL);
   * ``"pass_mean"``: the loss is a function of the *mean* of the passes' sequence scores
     (:meth:`OnlineRLObjective.sequence_loss`); the trainer evaluates all passes without gradient,
     differentiates the loss with respect to that mean, then replays each pass with gradient and
     backpropagates ``score_p * dL/dmean / P`` (the scalar-proxy replay, docs/algorithms.md §3.8): exact,
     and memory stays at one pass (ESPO, EBPO);
3. the **loss** itself, from current/old/reference scores and advantages, using the shared pieces in
   :mod:`dare.rl` (clip, dual clip, KL estimators, aggregation).

Objectives never branch on a family name. To add one: subclass :class:`OnlineRLObjective`, give it
``name``, ``Params`` (a subclass of :class:`RLParams` with the recipe's defaults), ``make_estimator`` and
``pass_loss`` or ``sequence_loss`` (which read their settings from ``self.params``: one schema, validated
from the spec), and register it with ``register_objectives``. The training skeleton (prompts from
``data.train``, the trainer, resume, the final save) is :class:`dare.trainers.TrainerObjective`'s. An
objective that needs its own rollout (tree rollouts, intermediate predictions) returns a
:class:`~dare.rl.trainer.GRPOTrainer` subclass from ``trainer_class`` that overrides the public hooks listed by
:class:`dare.rl.hooks.RLStepHooks` (``generate_rollout``, ``draw_passes``, ``after_passes``, ``update``, ...); the
step those hooks run by default is :mod:`dare.rl.step`.
"""

from __future__ import annotations

from typing import Any, ClassVar, Literal

from pydantic import ValidationError

from dare.components import Estimator, ResolvedSampler
from dare.data.checks import context_length
from dare.errors import DataError
from dare.rl.losses import LossTerms, PassLossInput, RLParams, SequenceLossInput, clipped_token_loss
from dare.rl.prompts import PromptDataset, collate_prompts
from dare.runspec.problems import pydantic_problems
from dare.trainers.objective import TrainerObjective

__all__ = [
    "RLParams",
    "PassLossInput",
    "SequenceLossInput",
    "LossTerms",
    "OnlineRLObjective",
    "clipped_token_loss",
    "sync_problems",
]


class OnlineRLObjective(TrainerObjective):
    """Base of the RL objectives (module docstring). Subclasses set ``name``, ``Params`` and the hooks."""

    stage = "online_rl"
    Params = RLParams
    score_reduction: ClassVar[Literal["per_pass", "pass_mean"]] = "per_pass"
    #: True when, with ``beta = 0``, a row of advantage exactly 0 has a per-pass loss identically 0 (so
    #: exactly zero gradient) whatever the weights: e.g. the clipped surrogate ``-A * clip(rho)``. The
    #: trainer then skips those rows' forwards/backwards (``params.skip_zero_advantage``). Leave False when
    #: a row's loss has a term without the advantage (an entropy bonus, self-distillation, ...). Not
    #: inherited (:func:`dare.rl.losses.vanishes_at_zero_advantage`): each class declares it for its own loss.
    zero_advantage_rows_vanish: ClassVar[bool] = False

    # ------------------------------------------------------------------ hooks
    def make_estimator(self, family, model_config, sampler) -> Estimator | None:
        """The likelihood estimator for this run (``sampler`` is the *rollout* sampler)."""
        raise NotImplementedError

    def pass_loss(self, inp: PassLossInput) -> LossTerms:
        """Loss term of one pass (``score_reduction = "per_pass"``), from ``self.params``."""
        raise NotImplementedError

    def sequence_loss(self, inp: SequenceLossInput) -> LossTerms:
        """Loss of the pass-mean sequence scores (``score_reduction = "pass_mean"``), from ``self.params``."""
        raise NotImplementedError

    def trainer_class(self) -> type:
        """The trainer class (default :class:`~dare.rl.trainer.GRPOTrainer`)."""
        from dare.rl.trainer import GRPOTrainer  # the trainer stack loads only when training

        return GRPOTrainer

    # ------------------------------------------------------------------ rollout sampler
    def resolve_rollout_sampler(self, sampler, loc: str) -> tuple[ResolvedSampler | None, list[tuple[str, str]]]:
        """``sampler`` with ``params.rollout_sampler`` overrides applied (a new instance), and the YAML path of each
        override (``{loc}.params.rollout_sampler.<key>``); built once by the spec resolution
        (``ResolvedSpec.rollout_sampler``), which checks and training read.

        :returns: ``(ResolvedSampler, [])``, or ``(None, problems)`` when the sampler's ``Params`` reject the
            overrides (each problem at ``{loc}.params.rollout_sampler.<key>``).
        """
        overrides = self.params.rollout_sampler
        merged = {**sampler.params.model_dump(exclude_unset=True), **overrides}
        where = f"{loc}.params.rollout_sampler"
        try:
            params = type(sampler).Params.model_validate(merged)
        except ValidationError as exc:
            return None, pydantic_problems(exc, type(sampler).Params, prefix=where)
        return ResolvedSampler(type(sampler)(params), {key: f"{where}.{key}" for key in overrides}), []

    def resolved_likelihood_temperature(self, rollout_sampler) -> float:
        """``likelihood_temperature`` as a number (``"sampler"`` -> the rollout sampler's temperature)."""
        t = self.params.likelihood_temperature
        return float(getattr(rollout_sampler.params, "temperature")) if t == "sampler" else float(t)

    # ------------------------------------------------------------------ validation
    def check(self, ctx, loc: str) -> list[tuple[str, str]]:
        problems = super().check(ctx, loc)
        p, family = self.params, ctx.family
        block = family is not None and getattr(family, "attention", None) == "block"
        for name, value, off in (("block_alignment", p.block_alignment, "first_token"),
                                 ("response_padding", p.response_padding, "exclude")):
            if value != off and family is not None and not block:
                problems.append((f"{loc}.params.{name}", f"{name}: {value} is a convention of block-diffusion families "
                                 f"(SDAR, LLaDA2), and {family.name!r} is not one: set {name}: {off}"))
        train = getattr(ctx.spec, "train", None)
        if p.block_alignment == "prompt_end" and getattr(train, "packing", False):
            problems.append((f"{loc}.params.block_alignment", "block_alignment: prompt_end needs the padded forward: "
                             "set train.packing: false, or block_alignment: first_token"))
        rollout_sampler = ctx.rollout_sampler
        if rollout_sampler is None:  # no sampler, or overrides its Params reject (reported by the resolution)
            return problems + sync_problems(self.params, ctx, loc)
        temperature = getattr(rollout_sampler.params, "temperature", None)
        if temperature is not None and temperature == 0:
            problems.append((f"{loc}.params.rollout_sampler", "training rollouts are greedy (temperature 0): the "
                                                              "completions of a group are identical and every "
                                                              "advantage is 0; set e.g. {temperature: 1.0}"))
        gen_length = getattr(rollout_sampler.params, "gen_length", None)
        if p.overlong_margin is not None and isinstance(gen_length, int) and p.overlong_margin >= gen_length:
            problems.append((f"{loc}.params.overlong_margin", f"overlong_margin: {p.overlong_margin} scores every "
                             f"completion as overlong (a response of at least gen_length - {p.overlong_margin} tokens, "
                             f"and the sampler's gen_length is {gen_length}), so every reward is 0: use a margin below "
                             f"gen_length (the TraceRL release: 5), or null"))
        if self.params.likelihood_temperature == "sampler" and not temperature:
            problems.append((f"{loc}.params.likelihood_temperature",
                             "'sampler' needs a rollout sampler with a positive temperature; give a number instead"))
        return problems + sync_problems(self.params, ctx, loc)

    # ------------------------------------------------------------------ the training skeleton's pieces
    def build_datasets(self, run) -> dict[str, Any]:
        """The prompts of ``data.train`` (those with ``len(prompt) + gen_length <= train.max_length``).

        :raises DataError: no prompt fits.
        """
        rows = self.rows(run, "train")
        sampler = run.resolved.rollout_sampler.sampler
        max_length = run.spec.train.max_length
        ds = run.spec.data.train
        dataset = PromptDataset.from_rows(rows, self.prompter(run, "train"), run.tokenizer, max_length,
                                          sampler.gen_length, context_length(run.resolved.model_config or {}), ds.path,
                                          ds.offset)
        if len(dataset) == 0:
            raise DataError(f"data.train: no prompt of {run.spec.data.train.path} fits train.max_length={max_length} "
                            f"with gen_length={sampler.gen_length}; raise train.max_length or lower the sampler's "
                            f"gen_length")
        return {"train": dataset}

    def data_collator(self, run, datasets):
        return collate_prompts

    def trainer_kwargs(self, run, datasets) -> dict[str, Any]:
        sampler = run.resolved.rollout_sampler.sampler
        return {"estimator": self.make_estimator(run.family, run.model.config, sampler), "sampler": sampler,
                "reward": run.reward}


def sync_problems(params: RLParams, ctx, loc: str) -> list[tuple[str, str]]:
    """``sync_ref_model`` mixes the policy's whole parameters into the reference copy
    (:mod:`dare.rl.reference_sync`), which a launch that shards the parameters (ZeRO-3, FSDP) does not hold: a
    ``(yaml_path, message)`` problem for such a launch (with ``beta > 0`` and no LoRA: otherwise nothing is synced)."""
    launch = getattr(ctx.spec, "launch", None)
    if not (params.sync_ref_model and params.beta > 0 and launch is not None and launch.accelerate_config):
        return []
    if getattr(getattr(ctx.spec, "model", None), "lora", None) is not None:
        return []  # a LoRA reference is the base with the adapters disabled: nothing is mixed
    from dare.errors import SpecError
    from dare.ops.memory_estimate import strategy_from_accelerate_config

    try:
        strategy = strategy_from_accelerate_config(launch.accelerate_config, ctx.source)
    except SpecError as exc:
        return list(exc.problems)
    if not strategy.shard_params:
        return []
    return [(f"{loc}.params.sync_ref_model", f"the reference sync mixes the policy's whole parameters into the "
             f"reference copy, but launch.accelerate_config ({launch.accelerate_config}) shards them "
             f"({strategy.name}): launch with DDP or ZeRO-1/2 (examples/accelerate/zero2.yaml), or set "
             "sync_ref_model: false")]
