"""Write lm-eval tasks over DARE's real Sudoku test puzzles, for checking lm-eval against ``dare eval``.

``python -m dare_lmeval.sudoku_tasks OUT_DIR [--limit 50] [--offset 0] [--max-gen-toks 17]`` writes

* ``sudoku.jsonl``: rows ``offset .. offset+limit-1`` of ``dare://sudoku/test.parquet`` (DARE's format:
  ``data_source``, ``prompt``, ``reward_model.ground_truth``, ``extra_info.puzzle``/``index``) plus, for the
  multiple-choice task, ``puzzle`` (a copy of ``extra_info.puzzle``), ``choices`` and ``gold`` from :func:`dare.builtins.multiple_choice.sudoku_choices`
  (the solution vs three corrupted grids, as the ``sudoku-mc`` benchmark builds them);
* ``dare_sudoku_gen.yaml`` (``generate_until``): the compact prompt, the 16 puzzle digits (as
  ``examples/quickstart.yaml`` evaluates), ``max_gen_toks`` tokens, no stop string; scored by DARE's
  ``sudoku`` reward (``utils.process_results``): ``acc`` = exact solves, ``mean_reward`` = fraction of empty
  cells filled correctly, the ``accuracy`` / ``mean reward`` of ``dare eval``'s ``sudoku`` benchmark;
* ``dare_sudoku_mc.yaml`` (``multiple_choice``): the same prompt, the four grids as choices with no target
  delimiter, ``acc``/``acc_norm``: the ``sudoku-mc`` benchmark of ``dare eval``;
* ``utils.py``: the ``process_results`` function.

Run them with ``lm_eval run --model dare --model_args model=DIR,... --tasks dare_sudoku_gen dare_sudoku_mc
--include_path OUT_DIR``.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

__all__ = ["write_sudoku_tasks"]

_UTILS = '''"""Scoring of the dare_sudoku_gen task with DARE's own sudoku reward (written by dare_lmeval.sudoku_tasks)."""

from dare.plugins.manager import get_registry

_REWARD = get_registry().get("reward", "sudoku").create({"require_answer_tags": False})


def process_results(doc, results):
    reward = float(_REWARD.score(results[0], doc))
    return {"acc": float(reward == 1.0), "mean_reward": reward}
'''


def _yaml(path: Path, data: dict) -> None:
    import yaml

    text = yaml.safe_dump(data, sort_keys=False, allow_unicode=True)
    text = text.replace("'!function utils.process_results'", "!function utils.process_results")
    path.write_text(text)


def write_sudoku_tasks(out_dir: str | Path, limit: int = 50, offset: int = 0, max_gen_toks: int = 17) -> Path:
    """Write the task directory described in the module docstring; returns it.

    :raises ValueError: ``limit < 1``, ``offset < 0`` or ``max_gen_toks < 1``.
    """
    from dare.builtins.multiple_choice import sudoku_choices
    from dare.data import load_rows

    if limit < 1 or offset < 0 or max_gen_toks < 1:
        raise ValueError("need limit >= 1, offset >= 0 and max_gen_toks >= 1")
    out = Path(out_dir).resolve()
    out.mkdir(parents=True, exist_ok=True)
    rows = load_rows("dare://sudoku/test.parquet", limit=limit, offset=offset)
    lines = []
    for row in rows:
        solution = str(row["reward_model"]["ground_truth"])
        choices, gold = sudoku_choices(solution, str(row["extra_info"]["puzzle"]), row["extra_info"]["index"])
        puzzle = str(row["extra_info"]["puzzle"])
        lines.append(json.dumps({**row, "puzzle": puzzle, "choices": choices, "gold": gold}))
    data = out / "sudoku.jsonl"
    data.write_text("\n".join(lines) + "\n")
    common = {
        "dataset_path": "json",
        "dataset_kwargs": {"data_files": {"test": str(data)}},
        "test_split": "test",
        # a column name, not the template "{{extra_info.puzzle}}": lm-eval reads an all-digit rendered
        # template of a multiple-choice task as a number (api/task.py, doc_to_text)
        "doc_to_text": "puzzle",
    }
    _yaml(out / "dare_sudoku_gen.yaml", {
        "task": "dare_sudoku_gen",
        **common,
        "output_type": "generate_until",
        "doc_to_target": "{{reward_model.ground_truth}}",
        "generation_kwargs": {"until": [], "max_gen_toks": max_gen_toks},
        "process_results": "!function utils.process_results",
        "metric_list": [{"metric": "acc", "aggregation": "mean", "higher_is_better": True},
                        {"metric": "mean_reward", "aggregation": "mean", "higher_is_better": True}],
        "metadata": {"version": 1.0},
    })
    _yaml(out / "dare_sudoku_mc.yaml", {
        "task": "dare_sudoku_mc",
        **common,
        "output_type": "multiple_choice",
        "doc_to_choice": "choices",
        "doc_to_target": "gold",
        "target_delimiter": "",
        "metric_list": [{"metric": "acc", "aggregation": "mean", "higher_is_better": True},
                        {"metric": "acc_norm", "aggregation": "mean", "higher_is_better": True}],
        "metadata": {"version": 1.0},
    })
    (out / "utils.py").write_text(_UTILS)
    return out


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out_dir")
    ap.add_argument("--limit", type=int, default=50)
    ap.add_argument("--offset", type=int, default=0)
    ap.add_argument("--max-gen-toks", type=int, default=17)
    a = ap.parse_args(argv)
    print(write_sudoku_tasks(a.out_dir, a.limit, a.offset, a.max_gen_toks))


if __name__ == "__main__":
    main()
