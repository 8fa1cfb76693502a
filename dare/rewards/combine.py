"""Summing rewards with weights, surviving rewards that raise, timing out rewards that hang, and keeping
the non-finite values a reward returned."""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence
from typing import Any, Protocol

from dare.rewards.deadline import CallDeadline, RewardTimeoutError

__all__ = ["RewardFn", "WeightedReward", "DEFAULT_TIMEOUT_S"]

#: seconds one reward call may take unless its spec entry's ``timeout_s`` says otherwise
DEFAULT_TIMEOUT_S = 300.0

log = logging.getLogger("dare.rewards")


class RewardFn(Protocol):
    name: str

    def score(self, completion: str, sample: dict[str, Any]) -> float: ...


def _sample_index(sample: dict[str, Any]) -> Any:
    info = sample.get("extra_info")
    return info.get("index") if isinstance(info, dict) else None


class WeightedReward:
    """``r = Σ_i w_i · r_i(completion, sample)``.

    A reward that raises is logged with the sample (index, data_source, first 200 characters of the
    completion) and contributes 0; the run goes on. ``errors`` counts such failures per reward.

    Every call gets at most its reward's ``timeout_s`` (:data:`DEFAULT_TIMEOUT_S` unless ``timeouts_s``
    gives one per reward): a call past it raises :class:`~dare.rewards.deadline.RewardTimeoutError` naming
    the reward, the limit and the sample (:mod:`dare.rewards.deadline`). A NaN or infinite value is kept
    (the total is then non-finite) and recorded in ``nonfinite`` (``{reward name: [(value, sample index)]}``)
    for the trainer to report (:meth:`take_nonfinite`).

    :raises ValueError: no reward, or ``timeouts_s`` of another length or not above 0.
    """

    def __init__(self, rewards: Sequence[tuple[RewardFn, float]], timeouts_s: Sequence[float] | None = None):
        if not rewards:
            raise ValueError("WeightedReward needs at least one reward")
        self.rewards = list(rewards)
        timeouts = [DEFAULT_TIMEOUT_S] * len(self.rewards) if timeouts_s is None else [float(t) for t in timeouts_s]
        if len(timeouts) != len(self.rewards) or not all(t > 0 for t in timeouts):
            raise ValueError(f"timeouts_s needs one value above 0 per reward ({len(self.rewards)}), got {timeouts_s}")
        self.timeouts_s = timeouts
        self.errors: dict[str, int] = {r.name: 0 for r, _ in self.rewards}
        self.nonfinite: dict[str, list[tuple[float, Any]]] = {}
        self._deadline = CallDeadline()

    def _call(self, fn: RewardFn, timeout_s: float, completion: str, sample: dict[str, Any]) -> float:
        def describe() -> str:
            return (f"reward {fn.name!r} did not return within its timeout_s of {timeout_s:g} s on the sample with "
                    f"index={_sample_index(sample)} data_source={sample.get('data_source')} (completion "
                    f"{completion[:200]!r}); fix the reward, or raise rewards[].timeout_s in the spec if it is "
                    "legitimately slow")

        self._deadline.arm(timeout_s, describe)
        try:
            value = fn.score(completion, sample)
        except KeyboardInterrupt:  # the watchdog's interrupt, or Ctrl-C
            if self._deadline.disarm():
                raise self._deadline.error() from None
            raise
        except BaseException:
            self._deadline.disarm()
            raise
        if self._deadline.disarm():
            raise self._deadline.error()
        return float(value)

    def score_one(self, completion: str, sample: dict[str, Any]) -> tuple[float, dict[str, float]]:
        """Total reward and the per-reward values (before weighting).

        :raises dare.rewards.deadline.RewardTimeoutError: a reward call ran past its timeout.
        """
        parts: dict[str, float] = {}
        total = 0.0
        for (fn, w), timeout_s in zip(self.rewards, self.timeouts_s):
            try:
                v = self._call(fn, timeout_s, completion, sample)
            except Exception as exc:  # noqa: BLE001 - any reward failure scores 0
                if isinstance(exc, RewardTimeoutError):
                    raise
                self.errors[fn.name] = self.errors.get(fn.name, 0) + 1
                log.warning(
                    "reward %s raised %s: %s (sample index=%s data_source=%s completion=%r); scoring 0",
                    fn.name,
                    type(exc).__name__,
                    exc,
                    _sample_index(sample),
                    sample.get("data_source"),
                    completion[:200],
                )
                v = 0.0
            if not math.isfinite(v):
                self.nonfinite.setdefault(fn.name, []).append((v, _sample_index(sample)))
            parts[fn.name] = v
            total += w * v
        return total, parts

    def take_nonfinite(self) -> dict[str, list[tuple[float, Any]]]:
        """The non-finite values recorded since the last call (``{name: [(value, sample index)]}``); clears them."""
        out, self.nonfinite = self.nonfinite, {}
        return out

    def __call__(self, completions: Sequence[str], samples: Sequence[dict[str, Any]]) -> list[float]:
        return [self.score_one(c, s)[0] for c, s in zip(completions, samples, strict=True)]
