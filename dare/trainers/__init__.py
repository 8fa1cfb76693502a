"""Trainers: the core :class:`DareTrainer` and helpers to build configs from a run spec's ``train:``.

Objective plugins subclass :class:`DareTrainer` (supervised, preference and online-RL trainers).
"""

from dare.trainers.base import DareConfig, DareTrainer, JsonlMetricsCallback, last_complete_checkpoint, read_best
from dare.trainers.config import config_from_spec

__all__ = ["DareConfig", "DareTrainer", "JsonlMetricsCallback", "last_complete_checkpoint", "read_best", "config_from_spec"]
