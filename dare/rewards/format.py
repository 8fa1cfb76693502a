"""Format reward: the completion follows ``<reasoning>...</reasoning><answer>...</answer>`` (d1's
format reward, arXiv 2504.12216)."""

from __future__ import annotations

import re

__all__ = ["format_score", "DEFAULT_PATTERN"]

DEFAULT_PATTERN = r"^\s*<reasoning>.*?</reasoning>\s*<answer>.*?</answer>\s*$"


def format_score(completion: str, pattern: str = DEFAULT_PATTERN) -> float:
    """1.0 if ``completion`` matches ``pattern`` (regex, DOTALL), else 0.0."""
    return 1.0 if re.match(pattern, completion, flags=re.DOTALL) else 0.0
