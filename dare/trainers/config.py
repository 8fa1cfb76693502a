"""Map a spec's ``train:`` section onto a trainer config dataclass."""

from __future__ import annotations

from typing import Any

from dare.trainers.base import DareConfig

__all__ = ["config_from_spec"]


def config_from_spec(train, output_dir: str, config_cls=None, **extra: Any):
    """Build a :class:`~dare.trainers.DareConfig` (or ``config_cls``, a subclass) from a spec's ``train:``.

    Only training-loop settings live in the config; an objective's own settings are its ``Params``.

    :param train: a ``dare.runspec.TrainSpec``. :param output_dir: checkpoint directory.
    :param extra: more config fields (override the mapped ones), e.g. ``metrics_file``.
    """
    from dare.trainers.trackers import integrations

    kwargs: dict[str, Any] = dict(
        output_dir=output_dir,
        report_to=integrations(train.report_to),
        tensorboard="tensorboard" in train.report_to,
        learning_rate=train.learning_rate,
        max_steps=train.max_steps,
        per_device_train_batch_size=train.per_device_batch_size,
        gradient_accumulation_steps=train.gradient_accumulation_steps,
        seed=train.seed,
        data_seed=train.seed,
        lr_scheduler_type=train.lr_scheduler,
        warmup_steps=int(train.warmup_ratio * train.max_steps),
        weight_decay=train.weight_decay,
        adam_beta1=train.adam_beta1,
        adam_beta2=train.adam_beta2,
        max_grad_norm=train.max_grad_norm,
        logging_steps=train.logging_steps,
        save_steps=train.save_steps,
        save_total_limit=train.save_total_limit,
        eval_steps=train.eval_steps,
        keep_best_metric="validation/accuracy" if train.keep_best else None,
        eval_on_start=bool(train.keep_best),
        bf16=train.bf16,
        num_threads=train.num_threads,
        max_nonfinite_steps=train.max_nonfinite_steps,
        packing=train.packing,
        packing_max_tokens=train.packing_max_tokens,
        reference_placement=train.reference_placement,
        dataloader_num_workers=0,
    )
    kwargs.update(extra)
    return (config_cls or DareConfig)(**kwargs)
