"""`dare compare`: side-by-side table and plot across runs."""

from __future__ import annotations

import json

import pytest

from dare.errors import DareError
from dare.eval.compare import compare_runs, parse_entry


def _fake_run(d, stage, acc, reward, metrics):
    (d / "eval").mkdir(parents=True)
    (d / "eval" / f"{stage}.json").write_text(json.dumps({"results": [
        {"name": "sudoku", "n": 500, "accuracy": acc, "mean_reward": reward, "nfe": 34, "tokens_per_second": 1.0}]}))
    (d / "metrics.jsonl").write_text("".join(json.dumps(m) + "\n" for m in metrics))


def test_parse_entry():
    assert parse_entry("rl=runs/x:before")[1:] == (__import__("pathlib").Path("runs/x"), "before")
    assert parse_entry("sft=runs/x")[2] == "after"
    with pytest.raises(DareError, match="LABEL=RUN_DIR"):
        parse_entry("runs/x")
    with pytest.raises(DareError, match="stage must be one of"):
        parse_entry("a=runs/x:middle")


def test_compare_table_and_plot(tmp_path):
    _fake_run(tmp_path / "sft", "after", 0.3, 0.7, [{"step": 1, "loss": 2.0}, {"step": 2, "loss": 1.0}])
    _fake_run(tmp_path / "rl", "after", 0.45, 0.8, [{"step": 1, "reward": 0.7}, {"step": 2, "reward": 0.8},
                                                     {"step": 2, "eval/sudoku/accuracy": 0.4}])
    md, js, png = compare_runs([f"SFT={tmp_path / 'sft'}", f"RL={tmp_path / 'rl'}"], tmp_path / "out")
    text = md.read_text()
    assert "| SFT | sudoku | 0.3000 | 0.7000 | 500 |" in text and "| RL | sudoku | 0.4500 | 0.8000 | 500 |" in text
    assert [r["label"] for r in json.loads(js.read_text())["rows"]] == ["SFT", "RL"]
    assert png.stat().st_size > 5000
    with pytest.raises(DareError, match="no 'before' evaluation"):
        compare_runs([f"x={tmp_path / 'rl'}:before"], tmp_path / "out2")
