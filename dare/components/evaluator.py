"""The evaluator component: a benchmark (rows, prompts and the reward that scores them)."""

from __future__ import annotations

import math
from typing import Any, ClassVar

from dare.components.base import Component

__all__ = ["Evaluator"]


class Evaluator(Component):
    """A benchmark: which rows to read, how to pose them, which reward scores them.

    The core runner (``dare.eval``) generates with the spec's sampler and calls the reward.
    ``accuracy`` is the fraction of samples whose reward is 1 (a full solve / correct answer);
    ``mean_reward`` is the mean reward (partial credit included).
    """

    kind = "evaluator"
    #: Reward component name that scores this benchmark.
    reward: ClassVar[str] = ""
    #: Default reward params.
    reward_params: ClassVar[dict[str, Any]] = {}
    #: ``data_source`` values this benchmark accepts (empty = any).
    data_sources: ClassVar[tuple[str, ...]] = ()
    #: Default data file, relative to the data root ``$DARE_DATA_DIR`` (or a ``dare://`` packaged asset).
    default_path: ClassVar[str | None] = None

    def is_correct(self, reward: float) -> bool:
        """Whether a reward counts as a solve for ``accuracy``."""
        return math.isclose(reward, 1.0, abs_tol=1e-9) or reward > 1.0
