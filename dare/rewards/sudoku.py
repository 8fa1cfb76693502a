"""4x4 Sudoku reward (d1 / DARE rule, arXiv 2504.12216 §4; DARE ``dllm_rm`` sudoku branch)."""

from __future__ import annotations

from dare.rewards.extract import last_answer_tag

__all__ = ["sudoku_score", "sudoku_digits"]


def sudoku_digits(completion: str, size: int = 16, require_tags: bool = True) -> str | None:
    """The answer grid as ``size`` digits: the last ``<answer>`` block's digits, padded with '0' or
    truncated to ``size``. Without tags: None if ``require_tags``, else the completion's digits."""
    body = last_answer_tag(completion)
    if body is None:
        if require_tags:
            return None
        body = completion
    digits = "".join(ch for ch in body if ch.isdigit())
    return (digits + "0" * size)[:size]


def sudoku_score(completion: str, puzzle: str, solution: str, require_tags: bool = True) -> float:
    """Fraction of the originally empty cells (``puzzle[i] == '0'``) filled with the solution's digit.

    :param puzzle: 16 characters, '0' for empty cells. :param solution: 16 digits.
    :returns: score in [0, 1]; 0 when no answer can be extracted. A puzzle without empty cells scores 1.
    """
    answer = sudoku_digits(completion, len(solution), require_tags)
    if answer is None:
        return 0.0
    empty = [i for i, c in enumerate(puzzle) if c == "0"]
    if not empty:
        return 1.0
    return sum(answer[i] == solution[i] for i in empty) / len(empty)
