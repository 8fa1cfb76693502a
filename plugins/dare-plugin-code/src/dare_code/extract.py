"""Extracting the program from a code completion.

Two rules, as DARE's code reward applies them (``verl/utils/reward_score/code_reward.py``, adopted
from rLLM's ``rllm/rewards/code_reward.py``):

* :func:`fenced_code` (HumanEval, HumanEval+ and every non-MBPP source): the content of a fenced
  Markdown block (three backticks, an optional language tag, a newline, the code, three backticks).
  ``"last"`` takes the last closed block (DARE's spec, docs/algorithms.md §6); ``"first_with_def"`` is
  ``extract_code_from_model``'s exact choice: the only block, else the first block that defines a
  function, else the last block. No closed block is a format error (None).
* :func:`mbpp_code` (MBPP): ``extract_code_from_model_mbpp``, the OpenCompass MBPP post-processing:
  the first of an ordered list of ``[BEGIN] '...' [DONE]`` / fence patterns that matches (else the
  whole text), cut at the first fence and the first ``DONE`` marker, ``\\_`` unescaped; fewer than
  10 characters is a format error (None).
"""

from __future__ import annotations

import re
from typing import Literal

__all__ = ["fenced_code", "mbpp_code"]

_FENCE = re.compile(r"```[^\S\n]*[\w+.-]*[^\S\n]*\n(.*?)```", re.DOTALL)
_DEFINES_FUNCTION = re.compile(r"def\s+\w+\s*\(")


def fenced_code(text: str, choice: Literal["last", "first_with_def"] = "last") -> str | None:
    """The program in ``text``'s fenced blocks (see the module docstring), stripped; None if absent.

    :raises ValueError: unknown ``choice``.
    """
    blocks = [b.strip() for b in _FENCE.findall(text)]
    if not blocks:
        return None
    if choice == "last":
        code = blocks[-1]
    elif choice == "first_with_def":
        code = next((b for b in blocks if _DEFINES_FUNCTION.search(b)), blocks[-1]) if len(blocks) > 1 else blocks[0]
    else:
        raise ValueError(f"choice must be 'last' or 'first_with_def', not {choice!r}")
    return code or None


def _mbpp_patterns() -> list[re.Pattern]:
    """The ordered patterns of ``extract_code_from_model_mbpp``: begin/done markers with the code
    quoted on both sides, on the left only, or not at all; then fences; then lone markers."""
    patterns = []
    for left, right in ((r"\s*'", r"'\s*"), (r"\s*'", r"\s*"), (r"\s*", r"\s*")):
        for done in (r"\[DONE\]", r"DONE"):
            for begin in (r"\[BEGIN\]", r"BEGIN"):
                patterns.append(f"{begin}{left}(.*){right}{done}")
    patterns += [
        r"```python\s*(.*)\s*```",
        r"```\s*(.*)\s*```",
        r"```python\s*(.*)\s*$",
        r"```\s*(.*)\s*$",
        r"(.*)\s*```.*",
        r"\[BEGIN\]\s*'(.*)",
        r"\[BEGIN\](.*)",
        r"'(.*)'\s*\[DONE\]",
    ]
    return [re.compile(p, re.DOTALL) for p in patterns]


_MBPP_PATTERNS = _mbpp_patterns()
_DONE_MARKER = re.compile(r"'?\s*\[?DONE\]?")


def mbpp_code(text: str) -> str | None:
    """The program of an MBPP-style completion (see the module docstring); None if too short."""
    for pattern in _MBPP_PATTERNS:
        match = pattern.search(text)
        if match:
            text = match.group(1)
            break
    text = text.split("```")[0]
    text = _DONE_MARKER.split(text)[0]
    text = text.replace("\\_", "_").strip()
    return text if len(text) >= 10 else None
