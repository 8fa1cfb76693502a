"""``DareBenchmarkDataset``: the rows and prompts of a DARE benchmark, as an OpenCompass dataset.

Rows are read by :func:`dare.data.load_rows` (parquet/JSONL files, ``dare://`` packaged assets such as
``dare://sudoku/test.parquet``, ``limit``/``offset`` as a DARE ``BenchmarkSpec``), and each row's prompt is
rendered by :class:`dare.data.Prompter` from the same Jinja ``prompt_template`` a DARE spec uses, so an
OpenCompass run and ``dare eval`` condition on identical text. Columns:

* ``prompt``: the rendered user message (use ``PromptTemplate(template="{prompt}")``; chat formatting is the
  model's ``chat_template`` option, as in ``dare eval``);
* ``row``: the whole row as JSON (the reference :class:`~dare_opencompass.evaluators.DareRewardEvaluator` scores against);
* ``answer``: the row's ground truth as text (for OpenCompass's own evaluators), ``""`` if it has none.
"""

from __future__ import annotations

import json
from types import SimpleNamespace

from opencompass.datasets.base import BaseDataset

__all__ = ["DareBenchmarkDataset", "load_benchmark_rows"]


def load_benchmark_rows(path: str | None = None, benchmark: str | None = None, limit: int | None = None,
                        offset: int = 0, prompt_template: str | None = None,
                        system_prompt: str | None = None) -> list[dict]:
    """``[{"prompt", "row", "answer"}]`` for rows ``offset .. offset + limit - 1`` (module docstring).

    :param path: data file (default: ``benchmark``'s default file, as ``dare eval``).
    :param benchmark: a DARE benchmark name (e.g. ``sudoku``); needed when ``path`` is not given.
    :raises dare.errors.DataError: no path and no benchmark, unreadable data, or a template naming a missing field.
    """
    from dare.components import Reward
    from dare.data import Prompter, load_rows
    from dare.errors import DataError
    from dare.eval import benchmark_path
    from dare.plugins.manager import get_registry

    if path is None:
        if benchmark is None:
            raise DataError("DareBenchmarkDataset needs path= (a data file) or benchmark= (a DARE benchmark name)")
        evaluator = get_registry().get("evaluator", benchmark).create()
        path = str(benchmark_path(evaluator, SimpleNamespace(path=None)))
    rows = load_rows(str(path), limit=limit, offset=offset)
    prompter = Prompter(None, prompt_template, None, False, system_prompt)
    out = []
    for row in rows:
        try:
            answer = Reward.ground_truth(row)
        except KeyError:
            answer = ""
        out.append({"prompt": prompter.prompt(row), "row": json.dumps(row, default=str), "answer": str(answer)})
    return out


class DareBenchmarkDataset(BaseDataset):
    """An OpenCompass dataset of DARE benchmark rows (module docstring); ``load`` takes the arguments of
    :func:`load_benchmark_rows`."""

    @staticmethod
    def load(**kwargs):
        from datasets import Dataset

        return Dataset.from_list(load_benchmark_rows(**kwargs))
