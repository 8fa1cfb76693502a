"""The training skeleton every objective shares: :class:`TrainerObjective`.

``TrainerObjective.train(run)`` is the whole path from a validated run to a trained model:

1. :meth:`~TrainerObjective.build_datasets` (rows of ``data.train`` / ``data.eval`` with their
   ``offset``, ``limit``, ``split`` and ``train.max_length`` honoured, through :meth:`rows` and
   :meth:`prompter`);
2. the trainer config from the spec's ``train:`` section (:func:`dare.trainers.config_from_spec`:
   training-loop settings only; the objective's own settings stay in its ``Params`` and the loss reads
   them from ``trainer.objective.params``);
3. the trainer (:meth:`trainer_class`) with the run's model, tokenizer, family adapter, special ids,
   in-training evaluation (``run.training_eval_fn()``, which ``train.keep_best`` selects on) and
   :meth:`trainer_kwargs`;
4. ``train_or_resume`` (resume from the last complete checkpoint of the same spec), then the final
   model saved to ``run.model_dir`` with its model card (:meth:`dare.trainers.DareTrainer.save_final`: atomic, main
   process only, never non-finite weights).

An objective overrides only what differs: its datasets, its trainer class (the loss), extra trainer
arguments, and optional metrics before/after training. ``dare new-plugin NAME --kind objective``
renders an objective on :class:`dare.trainers.supervised.SupervisedObjective`; online-RL objectives
derive from :class:`dare.rl.OnlineRLObjective`.
"""

from __future__ import annotations

from typing import Any

from dare.components import Objective
from dare.data import Prompter, load_rows

__all__ = ["TrainerObjective"]


class TrainerObjective(Objective):
    """An objective trained by a :class:`~dare.trainers.DareTrainer` subclass (module docstring)."""

    #: whether ``dare validate``'s length sample of ``data.train`` counts responses (supervised data) or prompts only
    length_sample_with_response = False

    def check(self, ctx, loc: str) -> list[tuple[str, str]]:
        """:meth:`Objective.check`, then a sample of ``data.train`` against the model's context
        (:func:`dare.data.checks.sample_length_problems`) when nothing else is wrong and ``train.max_length`` is
        unset."""
        problems = super().check(ctx, loc)
        ds = ctx.spec.data.train if ctx.spec.data is not None else None
        if ds is None or problems or ctx.problems or ctx.spec.train is None or ctx.spec.train.max_length is not None:
            return problems
        from dare.data.checks import sample_length_problems

        try:
            tokenizer = ctx.tokenizer if ctx.spec.model.new is None else None
        except Exception:  # noqa: BLE001 - a broken tokenizer: the model check reports it
            tokenizer = None
        return problems + sample_length_problems(ds, "data.train", ctx.model_config, tokenizer,
                                                 self.length_sample_with_response)

    # ------------------------------------------------------------------ what subclasses provide
    def trainer_class(self) -> type:
        """The :class:`~dare.trainers.DareTrainer` subclass whose loss implements this objective."""
        raise NotImplementedError(f"objective {self.name!r} defines no trainer_class()")

    def build_datasets(self, run) -> dict[str, Any]:
        """``{"train": dataset, "eval": dataset or absent}``: what the trainer iterates over.

        :raises dare.errors.DataError: no usable example (naming the spec field and the fix).
        """
        raise NotImplementedError(f"objective {self.name!r} defines no build_datasets()")

    def data_collator(self, run, datasets: dict[str, Any]):
        """The batch collator of ``datasets`` (None: the trainer class's default)."""
        return None

    def trainer_kwargs(self, run, datasets: dict[str, Any]) -> dict[str, Any]:
        """Extra keyword arguments of the trainer class (e.g. a sampler and rewards for RL)."""
        return {}

    def config_overrides(self, run) -> dict[str, Any]:
        """Extra training-loop settings of the trainer config (e.g. the held-out batch size)."""
        return {}

    def before_training(self, trainer, datasets: dict[str, Any]) -> dict[str, float]:
        """Metrics computed before the first step, added to the run's training metrics."""
        return {}

    def after_training(self, trainer, datasets: dict[str, Any]) -> dict[str, float]:
        """Metrics computed after training (before the final save), added to the run's training metrics."""
        return {}

    # ------------------------------------------------------------------ helpers for subclasses
    @staticmethod
    def dataset_spec(run, split: str = "train"):
        """The spec's ``data.<split>`` (a ``dare.runspec.DatasetSpec``) or None."""
        data = run.spec.data
        return getattr(data, split) if data is not None else None

    def rows(self, run, split: str = "train") -> list[dict[str, Any]]:
        """Rows ``offset .. offset + limit - 1`` of ``data.<split>`` (its file, split and column layout)."""
        ds = self.dataset_spec(run, split)
        return load_rows(ds.path, limit=ds.limit, split=ds.split, offset=ds.offset)

    def prompter(self, run, split: str = "train", with_response: bool = False) -> Prompter:
        """The :class:`dare.data.Prompter` of ``data.<split>`` (templates, chat template, system prompt)."""
        ds = self.dataset_spec(run, split)
        response = ds.response_template if with_response else None
        return Prompter(run.tokenizer, ds.prompt_template, response, ds.chat_template, ds.system_prompt,
                        loc=f"data.{split}")

    # ------------------------------------------------------------------ the skeleton
    def train(self, run) -> dict[str, float]:
        """Train ``run.model`` with this objective; the trained model ends up in ``run.model_dir``.

        :returns: ``train_loss``, ``global_step``, ``examples`` (training examples after filtering) and
            the metrics of :meth:`before_training`/:meth:`after_training`.
        """
        from dare.trainers.config import config_from_spec  # the trainer stack: heavy, needed only to train
        from dare.trainers.trackers import tracker_environment

        spec = run.spec
        datasets = self.build_datasets(run)
        # DDP: only a mixture-of-experts model leaves parameters (unrouted experts) out of a step's graph; searching
        # for them in a dense model costs a graph traversal per step and a warning on every rank. The search works
        # with DARE's (non-reentrant) gradient checkpointing; a globally unrouted expert keeps grad None, as on one
        # process (a zero-gradient term instead would make AdamW step it: 2 processes would differ from 1)
        moe = any(getattr(run.model.config, k, None) for k in ("num_experts", "num_local_experts", "n_routed_experts"))
        overrides = {"ddp_find_unused_parameters": bool(moe), **self.config_overrides(run)}
        config = config_from_spec(spec.train, str(run.rundir.checkpoints), metrics_file=str(run.rundir.metrics),
                                  tensorboard_dir=str(run.rundir.tensorboard), run_name=run.dir.name, **overrides)
        with tracker_environment(spec.train.report_to, run.dir):  # the trackers' stores under the run directory
            trainer, out, metrics = self._fit(run, config, datasets)
        trainer.save_final(run.model_dir, card=run.model_card() if hasattr(run, "model_card") else None)
        return {"train_loss": float(out.training_loss), "global_step": int(out.global_step),
                "examples": len(datasets["train"]), **metrics}

    def _fit(self, run, config, datasets):
        """Build the trainer, train (or resume) and return ``(trainer, TrainOutput, metrics)``."""
        spec = run.spec
        trainer = self.trainer_class()(
            model=run.model,
            args=config,
            train_dataset=datasets["train"],
            data_collator=self.data_collator(run, datasets),
            processing_class=run.tokenizer,
            family=run.family,
            tokens=run.tokens,
            eval_fn=run.training_eval_fn(),
            objective=self,
            callbacks=list(getattr(run, "callbacks", ())),
            **self.trainer_kwargs(run, datasets),
        )
        metrics = self.before_training(trainer, datasets)
        out = trainer.train_or_resume(resume=spec.train.resume)
        metrics |= self.after_training(trainer, datasets)
        return trainer, out, metrics
