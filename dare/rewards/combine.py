"""Summing rewards with weights, and surviving rewards that raise."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any, Protocol

__all__ = ["RewardFn", "WeightedReward"]

log = logging.getLogger("dare.rewards")


class RewardFn(Protocol):
    name: str

    def score(self, completion: str, sample: dict[str, Any]) -> float: ...


class WeightedReward:
    """``r = Σ_i w_i · r_i(completion, sample)``.

    A reward that raises is logged with the sample (index, data_source, first 200 characters of the
    completion) and contributes 0; the run goes on. ``errors`` counts such failures per reward.
    """

    def __init__(self, rewards: Sequence[tuple[RewardFn, float]]):
        if not rewards:
            raise ValueError("WeightedReward needs at least one reward")
        self.rewards = list(rewards)
        self.errors: dict[str, int] = {r.name: 0 for r, _ in self.rewards}

    def score_one(self, completion: str, sample: dict[str, Any]) -> tuple[float, dict[str, float]]:
        """Total reward and the per-reward values (before weighting)."""
        parts: dict[str, float] = {}
        total = 0.0
        for fn, w in self.rewards:
            try:
                v = float(fn.score(completion, sample))
            except Exception as exc:  # noqa: BLE001 - any reward failure scores 0
                self.errors[fn.name] = self.errors.get(fn.name, 0) + 1
                log.warning(
                    "reward %s raised %s: %s (sample index=%s data_source=%s completion=%r); scoring 0",
                    fn.name,
                    type(exc).__name__,
                    exc,
                    (sample.get("extra_info") or {}).get("index") if isinstance(sample.get("extra_info"), dict) else None,
                    sample.get("data_source"),
                    completion[:200],
                )
                v = 0.0
            parts[fn.name] = v
            total += w * v
        return total, parts

    def __call__(self, completions: Sequence[str], samples: Sequence[dict[str, Any]]) -> list[float]:
        return [self.score_one(c, s)[0] for c, s in zip(completions, samples, strict=True)]
