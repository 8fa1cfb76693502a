"""Built-in multiple-choice (likelihood) benchmarks and the ``choice`` reward (part of ``dare-dllm``).

* ``multiple-choice``: any data file whose rows carry ``choices`` (a list of texts) and the gold answer
  (``reward_model.ground_truth``, ``ground_truth`` or ``answer``: the gold choice's index or its text);
  the context is the benchmark's prompt (``prompt_template`` or the ``prompt`` column).
* ``sudoku-mc``: the 500 real 4x4 Sudoku test puzzles (``dare://sudoku/test.parquet``), each with its
  solution and three corrupted grids (two empty cells of the solution swapped), in a per-puzzle order;
  scored by the ``sudoku`` reward, so ``mean_reward`` is the fraction of empty cells the chosen grid fills
  correctly.

Both score choices by MC-ELBO (:mod:`dare.eval.multiple_choice`); ``params`` of the benchmark entry set
``mc_samples``, ``mc_scheme`` and ``target_delimiter``.
"""

from __future__ import annotations

import random
from typing import Any

from pydantic import Field

from dare.components import Params, Reward
from dare.errors import DataError
from dare.eval.multiple_choice import MultipleChoiceEvaluator, MultipleChoiceParams

__all__ = ["MultipleChoice", "SudokuMC", "ChoiceReward", "sudoku_choices"]


def _gold_index(gold: Any, choices: list[str], where: str) -> int:
    if isinstance(gold, bool):
        raise DataError(f"{where}: the gold answer {gold!r} is neither a choice index nor a choice text")
    if isinstance(gold, int) or (hasattr(gold, "dtype") and getattr(gold, "ndim", 1) == 0):
        return int(gold)
    if isinstance(gold, str):
        if gold in choices:
            return choices.index(gold)
        if gold.strip().lstrip("-").isdigit():
            return int(gold)
    raise DataError(f"{where}: the gold answer {gold!r} is neither a choice index nor one of the choices {choices}")


class MultipleChoice(MultipleChoiceEvaluator):
    """Any multiple-choice data file: rows with 'choices' and the gold answer (index or text), scored by MC-ELBO."""

    name = "multiple-choice"
    aliases = ("mc",)
    reward = "choice"
    default_path = None

    def choices(self, row: dict[str, Any], index: int) -> tuple[list[str], int]:
        if "choices" not in row:
            raise DataError(f"{self.name}: row {index} has no 'choices' column (keys: {', '.join(row)})")
        choices = [str(c) for c in list(row["choices"])]
        try:
            gold = Reward.ground_truth(row)
        except KeyError:
            raise DataError(f"{self.name}: row {index} has no gold answer; give reward_model.ground_truth, "
                            f"ground_truth or answer (the gold choice's index or text)") from None
        return choices, _gold_index(gold, choices, f"{self.name} row {index}")

    def check(self, ctx, loc: str) -> list[tuple[str, str]]:
        """The data file must have a ``choices`` column."""
        from dare.data import dataset_columns
        from dare.eval.runner import benchmark_path

        spec = ctx.spec.eval
        bspec = spec.validation if loc == "eval.validation" else None
        if loc.startswith("eval.benchmarks["):
            bspec = spec.resolved[int(loc[len("eval.benchmarks["):].split("]")[0])]
        if bspec is None or not bspec.path:
            return []
        try:
            cols = dataset_columns(str(benchmark_path(self, bspec)))
        except Exception:  # noqa: BLE001 - unreadable files are reported by the data checks
            return []
        if cols is not None and "choices" not in cols:
            return [(f"{loc}.path", f"{bspec.path} has no 'choices' column (a list of choice texts per row); its "
                                    f"columns are: {', '.join(cols)}")]
        return []


def sudoku_choices(solution: str, puzzle: str, seed_key: Any, num_choices: int = 4) -> tuple[list[str], int]:
    """The solution and ``num_choices - 1`` distinct corrupted grids, shuffled; returns ``(choices, gold)``.

    A corruption swaps the digits of two empty cells (``puzzle[i] == '0'``) whose solution digits differ,
    so it breaks the Sudoku rules in exactly the cells the ``sudoku`` reward scores; with fewer such pairs
    than needed, it replaces one empty cell's digit. Deterministic in ``seed_key`` (``random.Random``).
    """
    rng = random.Random(f"sudoku-mc:{seed_key}")
    empty = [i for i, c in enumerate(puzzle) if c == "0"] or list(range(len(solution)))
    pairs = [(a, b) for a in empty for b in empty if a < b and solution[a] != solution[b]]
    rng.shuffle(pairs)
    wrong: list[str] = []
    for a, b in pairs:
        g = list(solution)
        g[a], g[b] = g[b], g[a]
        s = "".join(g)
        if s not in wrong:
            wrong.append(s)
        if len(wrong) == num_choices - 1:
            break
    digits = sorted(set(solution)) or ["1", "2", "3", "4"]
    while len(wrong) < num_choices - 1:
        g = list(solution)
        i = rng.choice(empty)
        g[i] = rng.choice([d for d in digits if d != solution[i]] or ["0"])
        s = "".join(g)
        if s != solution and s not in wrong:
            wrong.append(s)
    gold = rng.randrange(num_choices)
    return wrong[:gold] + [solution] + wrong[gold:], gold


class SudokuMCParams(MultipleChoiceParams):
    target_delimiter: str = Field("", description="Text between the prompt and each grid (none by default).")


class SudokuMC(MultipleChoiceEvaluator):
    """4x4 Sudoku (500 test puzzles) as multiple choice: the solution vs three corrupted grids, scored by MC-ELBO."""

    name = "sudoku-mc"
    reward = "sudoku"
    reward_params = {"require_answer_tags": False}
    data_sources = ("sudoku",)
    default_path = "dare://sudoku/test.parquet"
    Params = SudokuMCParams

    def choices(self, row: dict[str, Any], index: int) -> tuple[list[str], int]:
        try:
            solution = str(Reward.ground_truth(row))
            puzzle = str(row.get("extra_info", {}).get("puzzle", "0" * len(solution)))
        except (KeyError, AttributeError):
            raise DataError(f"{self.name}: row {index} has no reward_model.ground_truth / extra_info.puzzle") from None
        key = row.get("extra_info", {}).get("index", index)
        return sudoku_choices(solution, puzzle, key)


class ChoiceParams(Params):
    strip: bool = Field(True, description="Compare texts with surrounding whitespace removed.")


class ChoiceReward(Reward):
    """1 when the completion is the gold choice's text, else 0.

    The gold choice: ``reward_model.ground_truth`` / ``ground_truth`` / ``answer``, an index into ``choices`` or the
    text."""

    name = "choice"
    Params = ChoiceParams

    def score(self, completion: str, sample: dict[str, Any]) -> float:
        gold = self.ground_truth(sample)
        choices = [str(c) for c in list(sample.get("choices", []))]
        if choices and not (isinstance(gold, str) and gold in choices):
            gold = choices[_gold_index(gold, choices, "choice reward")]
        a, b = str(completion), str(gold)
        if self.params.strip:
            a, b = a.strip(), b.strip()
        return float(a == b)

