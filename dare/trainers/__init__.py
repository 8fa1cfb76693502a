"""Trainers: the core :class:`DareTrainer`, the training skeleton and helpers to build configs from a spec.

* :mod:`dare.trainers.base`: :class:`DareTrainer`/:class:`DareConfig` (``transformers.Trainer`` with atomic,
  rank-safe checkpoints, JSONL/TensorBoard metrics, in-training evaluation and ``keep_best``);
* :mod:`dare.trainers.objective`: :class:`TrainerObjective`, the training skeleton every objective shares;
* :mod:`dare.trainers.supervised`: :class:`SupervisedObjective`, the base of response-trained objectives;
* :mod:`dare.trainers.config`: :func:`config_from_spec`.

The trainer stack (transformers, accelerate) is imported when one of its names is first used, so that
importing an objective (``dare validate``) stays light.
"""

from __future__ import annotations

import importlib

__all__ = [
    "DareConfig",
    "DareTrainer",
    "JsonlMetricsCallback",
    "last_complete_checkpoint",
    "read_best",
    "config_from_spec",
    "TrainerObjective",
    "SupervisedObjective",
]

_HOME = {
    "DareConfig": "dare.trainers.base",
    "DareTrainer": "dare.trainers.base",
    "JsonlMetricsCallback": "dare.trainers.base",
    "last_complete_checkpoint": "dare.trainers.base",
    "read_best": "dare.trainers.base",
    "config_from_spec": "dare.trainers.config",
    "TrainerObjective": "dare.trainers.objective",
    "SupervisedObjective": "dare.trainers.supervised",
}


def __getattr__(name: str):
    if name in _HOME:
        return getattr(importlib.import_module(_HOME[name]), name)
    raise AttributeError(f"module 'dare.trainers' has no attribute {name!r}")
