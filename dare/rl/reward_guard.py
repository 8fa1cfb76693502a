"""Non-finite rewards: say which reward returned NaN/Inf, and stop a run whose rewards stay non-finite.

A NaN or infinite reward makes the group's advantages, then the loss, non-finite, so the optimizer step
is skipped (:mod:`dare.trainers.guards`), whose warning can only blame "the loss or gradient".
:class:`NonFiniteRewardGuard` looks at the rewards themselves at every rollout (all processes' values,
:func:`dare.scaling.distributed.gather`): a rollout with a non-finite value prints a warning naming each such
reward, its values and the samples' indices; ``max_consecutive`` such rollouts in a row (or every
rollout of a run shorter than that) stop training with :class:`NonFiniteRewardError`, a
:class:`~dare.errors.DareError` (one paragraph, exit status 2).
"""

from __future__ import annotations

import sys
from typing import Any

from dare.scaling import distributed
from dare.errors import DareError

__all__ = ["NonFiniteRewardError", "NonFiniteRewardGuard", "describe_nonfinite"]

#: values shown per reward in a message
_SHOWN = 6


class NonFiniteRewardError(DareError):
    """A reward returned NaN/Inf for several rollouts in a row."""


def describe_nonfinite(found: dict[str, list[tuple[float, Any]]]) -> str:
    """``reward 'x' returned nan, nan (samples 3, 4) ...`` for ``{name: [(value, sample index)]}``."""
    parts = []
    for name, pairs in sorted(found.items()):
        values = ", ".join(str(v) for v, _ in pairs[:_SHOWN]) + (", ..." if len(pairs) > _SHOWN else "")
        samples = ", ".join(str(i) for _, i in pairs[:_SHOWN]) + (", ..." if len(pairs) > _SHOWN else "")
        parts.append(f"reward {name!r} returned {values} ({len(pairs)} completion(s); sample index {samples})")
    return "; ".join(parts)


class NonFiniteRewardGuard:
    """Counts rollouts in a row whose rewards hold a NaN/Inf (see the module docstring).

    :param max_consecutive: such rollouts in a row that stop training (``train.max_nonfinite_steps``).
    """

    def __init__(self, max_consecutive: int):
        self.max_consecutive = max_consecutive
        self.consecutive = 0

    def observe(self, found: dict[str, list[tuple[float, Any]]], step: int, max_steps: int) -> None:
        """Check one rollout's non-finite values (this process's; every process must call it).

        :param found: ``WeightedReward.take_nonfinite()`` of this rollout.
        :param step: the optimizer step the rollout is for (1-based); ``max_steps``: the run's last step.
        :raises NonFiniteRewardError: ``max_consecutive`` rollouts in a row (or ``max_steps`` of them, if fewer)
            held a non-finite reward; it names the rewards, their values and the samples.
        """
        merged: dict[str, list[tuple[float, Any]]] = {}
        for part in distributed.gather(found):
            for name, pairs in part.items():
                merged.setdefault(name, []).extend(pairs)
        if not merged:
            self.consecutive = 0
            return
        self.consecutive += 1
        what = describe_nonfinite(merged)
        if self.consecutive >= min(self.max_consecutive, max_steps):
            raise NonFiniteRewardError(
                f"step {step}: the rewards were NaN/Inf for {self.consecutive} rollout(s) in a row, so every one of "
                f"these optimizer steps was skipped: {what}. Fix the reward so it returns a finite number (0 for a "
                "wrong answer), or raise train.max_nonfinite_steps to tolerate more")
        if distributed.is_main():
            print(f"warning: step {step}: {what}; the step's advantages are NaN/Inf and its optimizer step is skipped "
                  f"({self.consecutive} in a row, training stops at {min(self.max_consecutive, max_steps)})",
                  file=sys.stderr)
