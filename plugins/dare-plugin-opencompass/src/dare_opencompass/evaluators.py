"""``DareRewardEvaluator``: score OpenCompass predictions with a DARE benchmark's reward, as ``dare eval`` does.

References are the ``row`` column of :class:`~dare_opencompass.data.DareBenchmarkDataset` (each row as JSON).
Each prediction is scored by the reward (the benchmark's default reward, or ``reward=dict(name=..., params=...)``,
the spec's ``eval.benchmarks[i].reward``) through :class:`dare.rewards.WeightedReward` (a reward that raises
scores 0 and is counted), and counted correct by the benchmark's ``is_correct``. Results (OpenCompass reports
percentages): ``accuracy`` = 100 x the fraction correct (``dare eval``'s accuracy), ``mean_reward`` = 100 x the
mean reward, and per-row ``details``.
"""

from __future__ import annotations

import json
from typing import Any

from opencompass.openicl.icl_evaluator import BaseEvaluator

__all__ = ["DareRewardEvaluator"]


class DareRewardEvaluator(BaseEvaluator):
    """Scores predictions with a DARE reward (module docstring).

    :param benchmark: DARE benchmark name (its reward and ``is_correct``), e.g. ``sudoku``.
    :param reward: ``dict(name=..., params={...})`` overriding the benchmark's reward.
    :raises dare.errors.PluginError: unknown benchmark or reward name.
    """

    def __init__(self, benchmark: str, reward: dict[str, Any] | None = None, **kwargs: Any):
        super().__init__(**kwargs)
        from dare.plugins.manager import get_registry
        from dare.rewards import WeightedReward

        registry = get_registry()
        self.benchmark = registry.get("evaluator", benchmark).create()
        name = (reward or {}).get("name", self.benchmark.reward)
        params = (reward or {}).get("params", self.benchmark.reward_params if reward is None else {})
        self.reward = WeightedReward([(registry.get("reward", name).create(dict(params or {})), 1.0)])

    def score(self, predictions: list[str], references: list[str]) -> dict[str, Any]:
        if len(predictions) != len(references):
            return {"error": f"{len(predictions)} predictions for {len(references)} references"}
        details, correct, total = [], 0, 0.0
        for pred, ref in zip(predictions, references):
            row = json.loads(ref) if isinstance(ref, str) else dict(ref)
            r, _ = self.reward.score_one(pred, row)
            ok = self.benchmark.is_correct(r)
            correct += int(ok)
            total += r
            details.append({"pred": pred, "reward": r, "correct": ok})
        n = max(len(predictions), 1)
        return {"accuracy": 100.0 * correct / n, "mean_reward": 100.0 * total / n, "details": details}
