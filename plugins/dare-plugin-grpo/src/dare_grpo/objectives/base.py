"""What every online-RL objective shares: parameters, the loss contract and ``train(run)``.

An RL objective is three choices on top of :class:`~dare_grpo.trainer.GRPOTrainer`:

1. a likelihood **estimator** (:meth:`OnlineRLObjective.make_estimator`, from
   :mod:`dare.diffusion.estimators`): which corrupted copies score a completion;
2. a **score reduction** (``score_reduction``):

   * ``"per_pass"``: the loss is a sum of one term per pass (:meth:`OnlineRLObjective.pass_loss`);
     the trainer runs one forward/backward per pass and row chunk, so memory stays at one pass
     (d1, coupled-GRPO, BGPO, CJ-GRPO, TraceRL);
   * ``"pass_mean"``: the loss is a function of the *mean* of the passes' sequence scores
     (:meth:`OnlineRLObjective.sequence_loss`); the trainer evaluates all passes without gradient,
     differentiates the loss with respect to that mean, then replays each pass with gradient and
     backpropagates ``score_p * dL/dmean / P`` (the scalar-proxy replay, algorithms.md §3.8): exact,
     and memory stays at one pass (ESPO, EBPO);
3. the **loss** itself, from current/old/reference scores and advantages, using the shared pieces in
   :mod:`dare.rl` (clip, dual clip, KL estimators, aggregation).

Objectives never branch on a family name. To add one (MDPO, SPG, EBPO, ...): subclass
:class:`OnlineRLObjective`, give it ``name``, ``Params`` (recipe defaults), ``make_estimator`` and
``pass_loss`` or ``sequence_loss``; register it in ``dare_grpo.plugin``. An objective that needs its
own rollout (tree rollouts, intermediate predictions) sets ``trainer_class`` to a
:class:`~dare_grpo.trainer.GRPOTrainer` subclass overriding ``generate_rollout``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, ClassVar, Literal

import torch
from pydantic import Field, ValidationError

from dare.components import Objective, Params
from dare.rl import Aggregation, aggregate, clipped_policy_loss, kl_estimate, ratio_from_log
from dare.spec import pydantic_problems

if TYPE_CHECKING:  # pragma: no cover
    from dare.diffusion.estimators import Estimator, PassScore
    from dare_grpo.config import GRPOConfig

__all__ = [
    "RLParams",
    "PassLossInput",
    "SequenceLossInput",
    "LossTerms",
    "OnlineRLObjective",
    "clipped_token_loss",
]


class RLParams(Params):
    """Parameters every RL objective accepts (DARE recipe defaults, algorithms.md §4.1)."""

    group_size: int = Field(8, ge=2, description="Completions per prompt (G).")
    num_iterations: int = Field(1, ge=1, description="Inner iterations mu per rollout batch (one optimizer step each).")
    advantage: Literal["grpo", "drgrpo", "rloo"] = Field("grpo", description="Group advantage estimator.")
    beta: float = Field(0.0, ge=0.0, description="KL coefficient against the reference policy (0 = no reference).")
    kl_estimator: Literal["k1", "k2", "k3"] = Field("k3", description="KL estimator (dare.rl.kl).")
    clip_eps_low: float = Field(0.2, ge=0.0, lt=1.0, description="Lower clip epsilon.")
    clip_eps_high: float = Field(0.2, ge=0.0, description="Upper clip epsilon.")
    dual_clip_c: float | None = Field(3.0, gt=1.0, description="Dual-clip bound for negative advantages (null = off).")
    loss_aggregation: Aggregation = Field("token-mean", description="token-mean or sequence-mean.")
    likelihood_temperature: float | Literal["sampler"] = Field(
        1.0,
        description="Temperature of every likelihood (logits / T). 1 = the model's distribution (DARE); "
        "'sampler' = the rollout sampler's temperature (the decoding-matched likelihood).",
    )
    rollout_sampler: dict[str, Any] = Field(
        default_factory=dict,
        description="Overrides of sampler.params for training rollouts, e.g. {temperature: 1.0}; evaluation keeps sampler.params.",
    )
    rollout_batch_size: int | None = Field(None, gt=0, description="Completions per sampler call (null = all at once).")
    micro_batch_size: int | None = Field(None, gt=0, description="Completions per likelihood forward/backward (null = all).")


@dataclass
class PassLossInput:
    """What :meth:`OnlineRLObjective.pass_loss` receives for one pass and one chunk of rows.

    * ``current``: the pass scored by the policy being trained (differentiable);
    * ``old``: ``[n, G]`` float32 token scores under the rollout policy (no gradient; equal to
      ``current.token.detach()`` when ``num_iterations == 1``);
    * ``ref``: ``[n, G]`` float32 under the reference policy, or None when ``beta == 0``;
    * ``advantages``: ``[n]`` float32; ``response_lengths``: ``[n]`` int64 (``|y|``);
    * ``pass_index``/``num_passes``: this pass and how many the estimate has;
    * ``num_tokens``: tokens this pass scores in the *whole* rollout batch; ``num_sequences``: rows
      of the whole batch; ``total_response_tokens``: ``sum |y|`` over the whole batch (global
      normalisers, so chunk losses add up to the batch loss).
    """

    current: PassScore
    old: torch.Tensor
    ref: torch.Tensor | None
    advantages: torch.Tensor
    response_lengths: torch.Tensor
    pass_index: int
    num_passes: int
    num_tokens: float
    num_sequences: int
    total_response_tokens: float


@dataclass
class SequenceLossInput:
    """What :meth:`OnlineRLObjective.sequence_loss` receives (whole rollout batch, ``[N]`` each).

    ``current`` is the mean over passes of the sequence scores (a leaf requiring grad), ``old`` and
    ``ref`` the same under the rollout and reference policies (``ref`` None when ``beta == 0``).
    """

    current: torch.Tensor
    old: torch.Tensor
    ref: torch.Tensor | None
    advantages: torch.Tensor
    response_lengths: torch.Tensor


@dataclass
class LossTerms:
    """A loss (scalar, to minimise) and metric contributions that the trainer *sums* over passes and
    row chunks (so each metric should be normalised like the loss)."""

    loss: torch.Tensor
    metrics: dict[str, torch.Tensor] = field(default_factory=dict)


def clipped_token_loss(
    inp: PassLossInput,
    args: GRPOConfig,
    mode: Aggregation | None = None,
    num_tokens: float | None = None,
    num_sequences: float | None = None,
    agg: Callable[[torch.Tensor], torch.Tensor] | None = None,
) -> LossTerms:
    """Token-level clipped GRPO loss of one pass plus ``beta`` x KL, aggregated over the scored tokens.

    ``rho_k = exp(l_k - l_k^old)`` per scored token, the clipped surrogate with dual clip
    (:func:`dare.rl.clipped_policy_loss`), ``+ beta * KL(l, l_ref)`` per token with
    ``args.kl_estimator``; both aggregated with ``mode`` (default ``args.loss_aggregation``) using the
    whole batch's normalisers (default: ``inp.num_tokens``/``inp.num_sequences``).
    Metrics: ``clip_fraction`` (+ ``_low``/``_high``), ``dual_clip_fraction``, ``approx_kl``
    (k3 of current vs old), ``kl`` (vs reference), with the same aggregation.

    :param agg: ``[B, L] per-token values -> scalar``, replacing that aggregation (e.g. JustGRPO's
        position chunks, which each see part of the completion but the whole batch's normalisers).
    """
    if agg is None:
        mode = mode or args.loss_aggregation
        num_tokens = inp.num_tokens if num_tokens is None else num_tokens
        num_sequences = inp.num_sequences if num_sequences is None else num_sequences
        weights = inp.current.scored.float()

        def agg(values: torch.Tensor) -> torch.Tensor:
            return aggregate(values, weights, mode, num_tokens=num_tokens, num_sequences=num_sequences)

    cur = inp.current.token
    clipped = clipped_policy_loss(
        ratio_from_log(cur - inp.old), inp.advantages[:, None], args.clip_eps_low, args.clip_eps_high, args.dual_clip_c
    )
    loss = agg(clipped.loss)
    metrics = {
        "clip_fraction_high": agg(clipped.clipped_high.float()),
        "clip_fraction_low": agg(clipped.clipped_low.float()),
        "dual_clip_fraction": agg(clipped.dual_clipped.float()),
        "approx_kl": agg(kl_estimate(cur.detach(), inp.old, "k3")),
    }
    metrics["clip_fraction"] = metrics["clip_fraction_high"] + metrics["clip_fraction_low"]
    if inp.ref is not None and args.beta > 0:
        kl = agg(kl_estimate(cur, inp.ref, args.kl_estimator))
        loss = loss + args.beta * kl
        metrics["kl"] = kl.detach()
    return LossTerms(loss=loss, metrics=metrics)


class OnlineRLObjective(Objective):
    """Base of the RL objectives (module docstring). Subclasses set ``name``, ``Params`` and the hooks."""

    stage = "online_rl"
    Params = RLParams
    score_reduction: ClassVar[Literal["per_pass", "pass_mean"]] = "per_pass"

    # ------------------------------------------------------------------ hooks
    def make_estimator(self, family, model_config, sampler) -> Estimator:
        """The likelihood estimator for this run (``sampler`` is the *rollout* sampler)."""
        raise NotImplementedError

    def pass_loss(self, inp: PassLossInput, args: GRPOConfig) -> LossTerms:
        """Loss term of one pass (``score_reduction = "per_pass"``)."""
        raise NotImplementedError

    def sequence_loss(self, inp: SequenceLossInput, args: GRPOConfig) -> LossTerms:
        """Loss of the pass-mean sequence scores (``score_reduction = "pass_mean"``)."""
        raise NotImplementedError

    def trainer_class(self) -> type:
        """The trainer class (default :class:`~dare_grpo.trainer.GRPOTrainer`)."""
        from dare_grpo.trainer import GRPOTrainer

        return GRPOTrainer

    def config_overrides(self) -> dict[str, Any]:
        """Objective-specific ``GRPOConfig`` values (default: none)."""
        return {}

    # ------------------------------------------------------------------ rollout sampler
    def rollout_sampler(self, sampler):
        """``sampler`` with ``params.rollout_sampler`` overrides applied (a new instance).

        :raises pydantic.ValidationError: overrides the sampler's ``Params`` rejects.
        """
        merged = {**sampler.params.model_dump(exclude_unset=True), **self.params.rollout_sampler}
        return type(sampler)(type(sampler).Params.model_validate(merged))

    def resolved_likelihood_temperature(self, rollout_sampler) -> float:
        """``likelihood_temperature`` as a number (``"sampler"`` -> the rollout sampler's temperature)."""
        t = self.params.likelihood_temperature
        return float(getattr(rollout_sampler.params, "temperature")) if t == "sampler" else float(t)

    # ------------------------------------------------------------------ validation
    def check(self, ctx, loc: str) -> list[tuple[str, str]]:
        problems = super().check(ctx, loc)
        sampler = ctx.sampler
        if sampler is None:
            return problems
        where = f"{loc}.params.rollout_sampler"
        try:
            rollout = self.rollout_sampler(sampler)
        except ValidationError as exc:
            return problems + pydantic_problems(exc, type(sampler).Params, prefix=where)
        temperature = getattr(rollout.params, "temperature", None)
        if temperature is not None and temperature == 0:
            problems.append((where, "training rollouts are greedy (temperature 0): the completions of a group are "
                                    "identical and every advantage is 0; set e.g. {temperature: 1.0}"))
        if self.params.likelihood_temperature == "sampler" and not temperature:
            problems.append((f"{loc}.params.likelihood_temperature",
                             "'sampler' needs a rollout sampler with a positive temperature; give a number instead"))
        return problems

    # ------------------------------------------------------------------ training
    def train(self, run) -> dict[str, float]:
        """Build the trainer from the run and train; the final model goes to ``run.model_dir``."""
        from dare.data import Prompter, load_rows
        from dare.errors import DataError
        from dare.io import atomic_dir
        from dare.trainers import config_from_spec
        from dare_grpo.config import GRPOConfig
        from dare_grpo.data import PromptDataset

        spec = run.spec
        ds = spec.data.train
        rows = load_rows(ds.path, limit=ds.limit, split=ds.split, offset=ds.offset)
        prompter = Prompter(run.tokenizer, ds.prompt_template, None, ds.chat_template, ds.system_prompt)
        sampler = self.rollout_sampler(run.sampler)
        dataset = PromptDataset.from_rows(rows, prompter, run.tokenizer, spec.train.max_length, sampler.gen_length)
        if len(dataset) == 0:
            raise DataError(f"no prompt of {ds.path} fits train.max_length={spec.train.max_length} with "
                            f"gen_length={sampler.gen_length}")
        p = self.params
        config = config_from_spec(
            spec.train,
            str(run.checkpoint_dir),
            GRPOConfig,
            group_size=p.group_size,
            num_iterations=p.num_iterations,
            advantage=p.advantage,
            beta=p.beta,
            kl_estimator=p.kl_estimator,
            clip_eps_low=p.clip_eps_low,
            clip_eps_high=p.clip_eps_high,
            dual_clip_c=p.dual_clip_c,
            loss_aggregation=p.loss_aggregation,
            likelihood_temperature=self.resolved_likelihood_temperature(sampler),
            rollout_batch_size=p.rollout_batch_size,
            micro_batch_size=p.micro_batch_size,
            metrics_file=str(run.dir / "metrics.jsonl"),
            tensorboard_dir=str(run.dir / "tensorboard"),
            **self.config_overrides(),
        )
        trainer = self.trainer_class()(
            model=run.model,
            args=config,
            train_dataset=dataset,
            processing_class=run.tokenizer,
            family=run.family,
            tokens=run.tokens,
            eval_fn=run.training_eval_fn(),
            objective=self,
            estimator=self.make_estimator(run.family, run.model.config, sampler),
            sampler=sampler,
            reward=run.reward,
        )
        out = trainer.train_or_resume(resume=spec.train.resume)
        with atomic_dir(run.model_dir, overwrite=True) as tmp:
            trainer.save_model(str(tmp))
        return {"train_loss": float(out.training_loss), "global_step": int(out.global_step), "prompts": len(dataset)}
