"""The reward component: a verifiable score of one completion."""

from __future__ import annotations

from typing import Any

from dare.components.base import Component

__all__ = ["Reward"]


class Reward(Component):
    """A verifiable reward: ``score(completion, sample) -> float``.

    ``sample`` is one dataset row as a dict (``data_source``, ``prompt``, ``reward_model`` with
    ``ground_truth``, ``extra_info``). Raising is allowed: the caller logs the sample and scores 0.
    """

    kind = "reward"

    def score(self, completion: str, sample: dict[str, Any]) -> float:
        raise NotImplementedError

    @staticmethod
    def ground_truth(sample: dict[str, Any]) -> Any:
        """``sample['reward_model']['ground_truth']`` (or a top-level ``ground_truth``/``answer``)."""
        rm = sample.get("reward_model")
        if isinstance(rm, dict) and "ground_truth" in rm:
            return rm["ground_truth"]
        for key in ("ground_truth", "answer"):
            if key in sample:
                return sample[key]
        raise KeyError("ground_truth")
