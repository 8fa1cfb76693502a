"""What long commands print while they work (dare.progress, the training ProgressCallback) and the help that
points a newcomer at the docs, families, params and environment variables."""

from __future__ import annotations

import json

import pytest

from dare import progress
from dare.trainers.callbacks import format_log_line


class Clock:
    def __init__(self):
        self.t = 0.0

    def __call__(self):
        return self.t


def test_plain_task_prints_rate_and_time_left_at_the_interval(monkeypatch, capsys):
    monkeypatch.setenv("DARE_PROGRESS", "plain")
    monkeypatch.setenv("DARE_PROGRESS_INTERVAL", "30")
    clock = Clock()
    with progress.Task("train", 100, "steps", completed=20, clock=clock) as t:  # resumed at step 20
        clock.t = 10.0
        t.update(25)  # before the interval: nothing
        assert capsys.readouterr().err == ""
        clock.t = 40.0
        t.update(40)  # 20 steps in 40 s since this process started: 0.5 steps/s, 60 steps left
        assert t.rate == pytest.approx(0.5) and t.remaining == pytest.approx(120.0)
        assert capsys.readouterr().err == "train: 40/100 steps (0.50 steps/s, 40s elapsed, ~2m 00s left)\n"
        clock.t = 50.0
        t.update(45)  # 10 s after the last line: nothing
        clock.t = 75.0
        t.update(60, quiet=True)  # the caller prints its own line
        assert capsys.readouterr().err == ""
        clock.t = 80.0
        t.update(100)
    assert capsys.readouterr().err == "train: 100/100 steps (1.00 steps/s, 1m 20s elapsed)\n"  # the last line


def test_off_and_stage_banners(monkeypatch, capsys):
    monkeypatch.setenv("DARE_PROGRESS", "plain")
    progress.stage("evaluate", "before training: sudoku")
    progress.log("step 1/2: loss 1.0000")
    assert capsys.readouterr().err == "== evaluate: before training: sudoku ==\nstep 1/2: loss 1.0000\n"
    monkeypatch.setenv("DARE_PROGRESS", "off")
    progress.stage("train")
    with progress.task("x", 2, "rows") as t:
        t.advance(2)
    assert capsys.readouterr().err == ""


def test_rich_style_draws_bars_and_keeps_log_lines(monkeypatch):
    """With a terminal (DARE_PROGRESS=rich), nested tasks share one live display; finished ones leave a line."""
    import io

    from rich.console import Console

    monkeypatch.setenv("DARE_PROGRESS", "rich")
    buf = io.StringIO()
    monkeypatch.setattr(progress._Display, "console", Console(file=buf, force_terminal=True, width=120))
    with progress.task("train", 4, "steps") as outer:
        with progress.task("validate: validation", 8, "rows") as inner:
            inner.advance(8)
        progress.log("step 1/4: loss 2.0000")
        outer.advance(4)
    assert progress._Display.progress is None and progress._Display.open_tasks == 0
    text = buf.getvalue()
    assert "validate: validation: 8/8 rows" in text and "step 1/4: loss 2.0000" in text and "train: 4/4 steps" in text


def test_log_lines_show_the_step():
    assert format_log_line(25, 750, {"loss": 0.51234, "learning_rate": 2e-3, "grad_norm": 0.41, "epoch": 1.2,
                                     "nonfinite_steps": 0}) == "step 25/750: loss 0.5123, lr 0.0020, grad_norm 0.4100"
    assert format_log_line(10, 60, {"loss": 1e-9, "reward": 0.8125, "reward_std": 0.2, "kl": 0.0,
                                    "nonfinite_steps": 2}) == (
        "step 10/60: loss 1.00e-09, reward 0.8125 ± 0.2000, kl 0.0000, nonfinite_steps 2.0000")
    assert format_log_line(20, 60, {"eval/validation/accuracy": 0.4, "eval/validation/rows": 100}) == (
        "step 20/60: evaluation on 100 rows: validation/accuracy 0.4000")


def test_top_level_help_points_to_docs_and_environment(run_cli):
    """Every DARE_* variable the code reads (dare/, plugins, the test helpers) is listed by `dare --help`."""
    import re

    from dare.testing import repo_root

    root = repo_root()
    files = [*(root / "dare").rglob("*.py"), *(root / "plugins").glob("*/src/**/*.py"), root / "tests" / "conftest.py"]
    used = {m for p in files for m in re.findall(r"\"(DARE_[A-Z_]*[A-Z])\"", p.read_text())}
    assert {"DARE_DATA_DIR", "DARE_LOAD_PLUGINS", "DARE_TRACE_PLUGINS", "DARE_SHARED_DIR", "DARE_PROGRESS"} <= used
    code, out, _ = run_cli("--help")
    assert code == 0
    for doc in ("README.md", "docs/run-spec.md", "docs/evaluation.md", "docs/scaling.md", "docs/plugins.md",
                "docs/architecture.md"):
        assert doc in out and (root / doc).is_file(), doc
    for name in used | {"DARE_SLOW"}:
        assert name in out, name


def test_create_model_help_lists_families_and_presets(run_cli):
    code, out, _ = run_cli("create-model", "--help")
    assert code == 0 and "Families and presets" in out
    flat = " ".join(out.split())  # the help wraps with the width of the longest family name
    assert "llada" in flat and "quickstart (d_model 128" in flat and "dream" in flat and "tiny" in flat


def test_generate_help_says_chat_is_on_by_default(run_cli):
    code, out, _ = run_cli("generate", "--help")
    assert code == 0 and "[default: --chat" in " ".join(out.split()) and "--run DIRECTORY" in out


def test_plugins_name_shows_the_params(run_cli):
    code, out, _ = run_cli("plugins", "tracerl")
    assert code == 0 and "objective tracerl (dare-plugin-grpo)" in " ".join(out.split())
    for needle in ("group_size", "integer >= 2", "clip_eps_low", "shrink"):
        assert needle in out, needle
    code, out, _ = run_cli("plugins", "llada", "--json")  # a family and a sampler share the name
    kinds = {c["kind"]: c for c in json.loads(out)}
    assert set(kinds) == {"model_family", "sampler"}
    gen = next(r for r in kinds["sampler"]["rows"] if r["param"] == "gen_length")
    assert gen["type"].startswith("integer") and gen["default"] == "128"
    code, _, err = run_cli("plugins", "tracerll")
    assert code == 2 and "did you mean tracerl" in err
    code, out, _ = run_cli("plugins")
    assert "dare plugins NAME" in out


def test_generate_needs_model_or_run(run_cli, tmp_path):
    code, _, err = run_cli("generate", "--prompt", "x")
    assert code == 2 and "exactly one of --model DIR" in err
    code, _, err = run_cli("generate", "--run", str(tmp_path), "--prompt", "x")
    assert code == 2 and "not a DARE run directory" in err


def test_ctrl_c_says_what_was_saved_and_how_to_resume(run_cli, tmp_path, tiny_llada_dir, monkeypatch):
    import yaml

    from dare.run import Run

    def interrupt(self):
        raise KeyboardInterrupt

    monkeypatch.setattr(Run, "train", interrupt)
    spec = {"model": {"path": str(tiny_llada_dir)}, "algorithm": {"name": "sft"},
            "data": {"train": {"path": "dare://sudoku/train.parquet", "limit": 4, "chat_template": False,
                               "prompt_template": "{{ extra_info.puzzle }}", "response_template": "{{ reward_model.ground_truth }}"}},
            "train": {"learning_rate": 1e-3, "max_steps": 10, "save_steps": 5}, "output": {"dir": str(tmp_path / "run")}}
    (tmp_path / "s.yaml").write_text(yaml.safe_dump(spec))
    code, _, err = run_cli("train", str(tmp_path / "s.yaml"), "--set", "train.seed=0")
    assert code == 130
    assert err.rstrip().endswith(
        "interrupted during training: nothing was saved (no checkpoint yet: the first is written at step 5, "
        "train.save_steps). Re-running the same command starts training from step 0: "
        f"dare train {tmp_path / 's.yaml'} --set train.seed=0")


def test_ctrl_c_during_the_evaluation_before_training(run_cli, tmp_path, tiny_llada_dir, monkeypatch):
    """Interrupted before training started: no checkpoint or resume talk, the same command starts over."""
    import yaml

    from dare.run import Run

    real = Run.evaluate

    def interrupt(self, stage, *args, **kwargs):
        if stage == "before":
            raise KeyboardInterrupt
        return real(self, stage, *args, **kwargs)

    monkeypatch.setattr(Run, "evaluate", interrupt)
    spec = {"model": {"path": str(tiny_llada_dir)}, "algorithm": {"name": "sft"},
            "data": {"train": {"path": "dare://sudoku/train.parquet", "limit": 4, "chat_template": False,
                               "prompt_template": "{{ extra_info.puzzle }}", "response_template": "{{ reward_model.ground_truth }}"}},
            "sampler": {"name": "llada", "params": {"gen_length": 4, "block_length": 4, "steps": 4}},
            "eval": {"benchmarks": [{"name": "sudoku", "limit": 2, "chat_template": False,
                                     "prompt_template": "{{ extra_info.puzzle }}"}]},
            "train": {"learning_rate": 1e-3, "max_steps": 10, "save_steps": 5}, "output": {"dir": str(tmp_path / "run")}}
    (tmp_path / "s.yaml").write_text(yaml.safe_dump(spec))
    code, _, err = run_cli("run", str(tmp_path / "s.yaml"))
    assert code == 130
    assert err.rstrip().endswith(f"interrupted during the evaluation before training: no results were saved; {tmp_path / 'run'} "
                                 "holds only the run's spec (run.json). Re-running the "
                                 f"same command starts over: dare run {tmp_path / 's.yaml'}")
