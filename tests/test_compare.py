"""`dare compare`: side-by-side table and plot across runs."""

from __future__ import annotations

import json

import pytest

from dare.errors import DareError
from dare.report.compare import compare_runs, parse_entry


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


def test_missing_run_dir_and_duplicate_labels(tmp_path):
    with pytest.raises(DareError, match=r"run directory .*nope does not exist"):
        compare_runs([f"x={tmp_path / 'nope'}"], tmp_path / "out")
    _fake_run(tmp_path / "a", "after", 0.3, 0.7, [])
    with pytest.raises(DareError, match=r"labels must be unique, but 'x' is given more than once"):
        compare_runs([f"x={tmp_path / 'a'}", f"x={tmp_path / 'a'}:after"], tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_one_run_before_and_after_is_labelled_by_each_entry(tmp_path):
    from dare.report.compare import _panels

    d = tmp_path / "quickstart"
    _fake_run(d, "after", 0.6, 0.9, [{"step": 1, "loss": 2.0}, {"step": 750, "loss": 0.1}])
    (d / "eval" / "before.json").write_text(json.dumps({"results": [
        {"name": "sudoku", "n": 500, "accuracy": 0.0, "mean_reward": 0.1, "nfe": 34, "tokens_per_second": 1.0}]}))
    entries = [f"untrained={d}:before", f"SFT 750 steps={d}:after"]
    md, js, png = compare_runs(entries, tmp_path / "out")
    assert "| untrained | sudoku | 0.0000 |" in md.read_text() and "| SFT 750 steps | sudoku | 0.6000 |" in md.read_text()
    panels = _panels([parse_entry(e) for e in entries], json.loads(js.read_text())["rows"])
    (run,) = panels["runs"]  # one run directory: one row of panels, labelled by the entry that evaluates its training
    assert run[:3] == ("SFT 750 steps (quickstart)", "loss", [(1, 2.0, None), (750, 0.1, None)])
    assert panels["accuracy"] == [("untrained", {"sudoku": 0.0}), ("SFT 750 steps", {"sudoku": 0.6})]
    assert panels["rows"] == {"sudoku": [500]}
    assert png.stat().st_size > 5000
    # a run directory without an :after entry: its curve carries the directory's name
    panels = _panels([parse_entry(f"untrained={d}:before")], [])
    assert panels["runs"][0][0] == "quickstart"


def test_rl_runs_plot_reward_with_spread_each_on_its_own_axis(tmp_path):
    """An RL run's panel is its reward (mean, std), not its loss; an SFT run keeps its loss; each has its own steps."""
    from dare.report.compare import _panels

    _fake_run(tmp_path / "sft", "after", 0.3, 0.7, [{"step": s, "loss": 1.0 / s} for s in (1, 250, 750)])
    _fake_run(tmp_path / "rl", "after", 0.45, 0.8, [
        {"step": 10, "loss": 1e-9, "reward": 0.6, "reward_std": 0.2}, {"step": 60, "loss": -1e-9, "reward": 0.8, "reward_std": 0.1},
        {"step": 20, "eval/validation/accuracy": 0.4, "eval/validation/mean_reward": 0.7, "eval/validation/rows": 100}])
    (tmp_path / "rl" / "report.json").write_text(json.dumps({"run": {
        "objective": {"name": "tracerl"}, "steps": 60, "train_seconds": 125.0,
        "eval_sets": {"validation": "validation (sudoku): rows 19000-19099 of dare://sudoku/train.parquet"}}}))
    entries = [f"SFT={tmp_path / 'sft'}", f"RL={tmp_path / 'rl'}"]
    md, js, png = compare_runs(entries, tmp_path / "out", title="t")
    panels = _panels([parse_entry(e) for e in entries], json.loads(js.read_text())["rows"])
    sft, rl = panels["runs"]
    assert sft[1:3] == ("loss", [(1, 1.0, None), (250, 1 / 250, None), (750, 1 / 750, None)]) and sft[5] == 750
    assert rl[1:3] == ("reward", [(10, 0.6, 0.2), (60, 0.8, 0.1)]) and rl[5] == 60 and rl[6] == "tracerl"
    assert rl[3] == {"validation": {"accuracy": [(20, 0.4)], "mean_reward": [(20, 0.7)]}}  # rows are not a curve
    text = md.read_text()
    assert "| RL | sudoku | 0.4500 | 0.8000 | 500 | tracerl | 60 | 2m 05s |" in text
    assert "- **accuracy**: fraction of rows the benchmark counts as solved" in text
    assert "- benchmark **sudoku**: 4x4 Sudoku (500 test puzzles); accuracy = exact solves" in text


def test_plots_show_zero_integer_steps_and_distinct_series(tmp_path, monkeypatch):
    """The training curve's y axis includes 0 and one step still shows (a marker); step ticks are integers;
    every evaluation series of plot.png has its own (colour, marker, line style)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from dare.report.plots import draw_training_curve, plot_training

    fig, ax = plt.subplots()
    draw_training_curve(ax, "loss", [(1, 7.3, None)])
    fig.canvas.draw()
    lo, hi = ax.get_xlim()
    assert ax.get_ylim()[0] == 0.0 and ax.lines[0].get_marker() == "o"
    assert [t for t in ax.get_xticks() if lo <= t <= hi] == [0.0, 1.0]
    plt.close(fig)
    fig, ax = plt.subplots()  # only step 1 logged of 4: the axis still spans the run's steps
    draw_training_curve(ax, "reward", [(1, 0.3, 0.1)], max_step=4)
    assert ax.get_xlim()[1] == pytest.approx(4.2)
    plt.close(fig)

    recs = [{"step": s, "loss": 3.0 - 0.2 * s} for s in range(1, 8)]
    for r in recs[2::3]:
        r.update({"eval/validation/accuracy": 0.1, "eval/validation/mean_reward": 0.2, "eval/sudoku/accuracy": 0.05,
                  "eval/gsm8k/accuracy": 0.3})
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs))
    figs = []
    monkeypatch.setattr(plt, "close", figs.append)
    assert plot_training(tmp_path / "metrics.jsonl", tmp_path / "plot.png", before={"sudoku": {"accuracy": 0.0}},
                         after={"sudoku": {"accuracy": 0.3}}) is not None
    loss_ax, eval_ax = figs[0].axes
    styles = [(ln.get_color(), ln.get_marker(), ln.get_linestyle()) for ln in eval_ax.lines]
    assert len(eval_ax.lines) == 6 and len(set(styles)) == 6
    # one colour per in-training set; accuracy and mean reward of a set differ in marker (mean reward hollow)
    assert len({(c, m) for c, m, ls in styles if ls != "None"}) == 4
    val = [ln for ln in eval_ax.lines if ln.get_label().startswith("validation:")]
    assert len({ln.get_marker() for ln in val}) == 2 and [ln.get_markerfacecolor() for ln in val][1] == "none"
    assert not any(ln.get_clip_on() for ln in eval_ax.lines)  # markers at step 0 / y=0 are not half-clipped
    before = [ln for ln in eval_ax.lines if "before training" in ln.get_label()][0]
    assert before.get_markerfacecolor() == "none" and before.get_zorder() < val[0].get_zorder()
    for a in (loss_ax, eval_ax):
        lo, hi = a.get_xlim()
        assert all(float(t).is_integer() for t in a.get_xticks() if lo <= t <= hi)
        assert a.get_ylim()[0] <= 0.0


def test_keep_best_run_names_the_kept_step(tmp_path):
    d = tmp_path / "rl"
    _fake_run(d, "after", 0.2, 0.5, [{"step": 1, "reward": 0.4}, {"step": 4, "reward": 0.5}])
    (d / "report.json").write_text(json.dumps({"run": {"objective": {"name": "tracerl"}, "steps": 4},
                                               "train_metrics": {"best_step": 0, "best_validation_accuracy": 0.2}}))
    md, js, _ = compare_runs([f"RL={d}"], tmp_path / "out")
    assert "| tracerl | 4 (weights of step 0, keep_best) |" in md.read_text()
    assert json.loads(js.read_text())["rows"][0]["weights_step"] == 0


def test_comparison_bars_show_accuracy_and_mean_reward(tmp_path, monkeypatch):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    _fake_run(tmp_path / "a", "after", 0.25, 0.75, [])
    figs = []
    monkeypatch.setattr(plt, "close", figs.append)
    compare_runs([f"A={tmp_path / 'a'}"], tmp_path / "out")
    bars = figs[0].axes[0]
    assert sorted(round(p.get_height(), 3) for p in bars.patches) == [0.25, 0.75]
    assert sorted(t.get_text() for t in bars.texts) == ["0.250", "0.750"]
    assert [t.get_text() for t in bars.get_legend().get_texts()] == ["sudoku: 500 rows: accuracy", "sudoku: 500 rows: mean reward"]
