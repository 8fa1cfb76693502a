r"""Math rewards with math-verify equivalence.

Rule (DARE ``dllm_rm`` math branch): take the last ``\boxed{...}`` of the response; no box -> 0;
otherwise 1 if math-verify finds it equivalent to the ground truth (a boxed ground truth is unboxed
first), else 0. GSM8K additionally accepts d1's ``<answer>`` tag and the ``#### n`` form when there is
no box (``gsm8k_score``).
"""

from __future__ import annotations

import re

from dare.rewards.extract import last_answer_tag, last_boxed

__all__ = ["math_equal", "math_score", "gsm8k_score"]


def math_equal(gold: str, pred: str) -> bool:
    """Whether ``pred`` equals ``gold`` under math-verify (sympy-backed equivalence)."""
    from math_verify import parse, verify

    inner = last_boxed(gold)
    gold = inner if inner is not None else gold
    g = parse(f"${gold}$")
    if not g:
        g = parse(gold)
    p = parse(f"\\boxed{{{pred}}}")
    if not g or not p:
        return gold.strip() == pred.strip()
    return bool(verify(g, p))


def math_score(completion: str, ground_truth: str) -> float:
    """1.0 if the last boxed answer is equivalent to ``ground_truth``, else 0.0 (no box: 0)."""
    pred = last_boxed(completion)
    if pred is None:
        return 0.0
    return 1.0 if math_equal(str(ground_truth), pred) else 0.0


_HASH_RE = re.compile(r"####\s*([^\n]+)")


def gsm8k_score(completion: str, ground_truth: str) -> float:
    """GSM8K: the boxed answer, else the last ``<answer>`` block, else ``#### n``; equivalence as math."""
    pred = last_boxed(completion)
    if pred is None:
        pred = last_answer_tag(completion)
    if pred is None:
        m = _HASH_RE.findall(completion)
        pred = m[-1].strip() if m else None
    if pred is None:
        return 0.0
    pred = pred.replace("\\$", "").replace("$", "").replace(",", "").replace("%", "").strip()
    gold = str(ground_truth).replace(",", "").strip()
    return 1.0 if math_equal(gold, pred) else 0.0
