"""The stages of `dare run` (dare.run.stages), the CPU threads a run chooses (dare.scaling.threads), its run.log
(dare.run.log) and the report's line naming the evaluation settings that differ from the run's."""

from __future__ import annotations

import json
import sys

import pytest
import torch
import yaml

from dare.run import log as runlog
from dare.run import stages as pipeline
from dare.run.stages import STAGES
from dare.run.rundir import format_differences
from dare.scaling.threads import ThreadChoice, choose_threads, load_warning


def _spec(model_dir, out_dir, steps=2, train=True):
    spec = {
        "model": {"path": str(model_dir)},
        "sampler": {"name": "llada", "params": {"gen_length": 17, "block_length": 17, "steps": 4}},
        "eval": {"batch_size": 4, "benchmarks": [{"name": "sudoku", "limit": 4, "chat_template": False,
                                                   "prompt_template": "{{ extra_info.puzzle }}",
                                                   "reward": {"name": "sudoku", "params": {"require_answer_tags": False}}}]},
        "output": {"dir": str(out_dir)},
    }
    if train:
        spec |= {
            "data": {"train": {"path": "dare://sudoku/train.parquet", "limit": 16, "chat_template": False,
                               "prompt_template": "{{ extra_info.puzzle }}",
                               "response_template": "{{ reward_model.ground_truth }}"}},
            "algorithm": {"name": "sft"},
            "train": {"learning_rate": 2e-3, "max_steps": steps, "per_device_batch_size": 4, "logging_steps": 1,
                      "save_steps": steps, "num_threads": 1},
        }
    return spec


@pytest.fixture
def restore_threads():
    n = torch.get_num_threads()
    yield
    torch.set_num_threads(n)


def test_dare_run_enters_each_stage_once_and_keeps_its_console_in_run_log(tmp_path, tiny_llada_dir, monkeypatch,
                                                                         restore_threads):
    from dare.cli import main

    calls = []
    for name in ("setup", *STAGES):
        original = getattr(pipeline, name)

        def recorded(run, rundir, state, _name=name, _original=original):
            assert rundir == run.rundir  # each stage is a function of (run, run directory, command state)
            calls.append(_name)
            return _original(run, rundir, state)

        monkeypatch.setattr(pipeline, name, recorded)
    out = tmp_path / "run"
    (tmp_path / "s.yaml").write_text(yaml.safe_dump(_spec(tiny_llada_dir, out)))
    main(["run", str(tmp_path / "s.yaml")])
    assert calls == ["setup", "evaluate_before", "train", "evaluate_after", "report"]

    log = (out / "run.log").read_text()
    assert log.startswith(f"== dare run {tmp_path / 's.yaml'} (")
    assert "torch threads: 1 (train.num_threads)" in log
    assert "== train: sft, 2 steps" in log or "train: sft, 2 steps" in log  # the stage banner
    assert "results" in log and "| before | sudoku |" not in log  # the console's results table, not report.md's
    assert f"run directory: {out}" in log.splitlines()[-1]
    assert "\x1b[" not in log
    assert not isinstance(sys.stdout, runlog._Tee) and not isinstance(sys.stderr, runlog._Tee)  # restored
    report = json.loads((out / "report.json").read_text())
    assert report["provenance"]["machine"]["torch_threads"] == 1
    assert report["provenance"]["machine"]["torch_threads_from"] == "train.num_threads"
    assert "1 torch threads (train.num_threads)" in (out / "report.md").read_text()

    # the same command again: each stage once more, the log appended after the first command's lines
    calls.clear()
    main(["run", str(tmp_path / "s.yaml")])
    assert calls == ["setup", *STAGES]
    again = (out / "run.log").read_text()
    assert again.startswith(log) and again.count("== dare run ") == 2


def test_an_eval_only_spec_sets_cpu_threads_without_a_train_section(tmp_path, tiny_llada_dir, restore_threads,
                                                                     monkeypatch):
    from dare.run import Run
    from dare.runspec import load_spec

    spec = _spec(tiny_llada_dir, tmp_path / "ev", train=False)
    spec["eval"]["num_threads"] = 1
    (tmp_path / "e.yaml").write_text(yaml.safe_dump(spec))
    seen = []
    original = pipeline.evaluate_before

    def record(run, rundir, state):
        seen.append(torch.get_num_threads())
        return original(run, rundir, state)

    monkeypatch.setattr(pipeline, "evaluate_before", record)
    Run(load_spec(tmp_path / "e.yaml", check=False), source=str(tmp_path / "e.yaml")).execute(train=False)
    assert seen == [1]
    machine = json.loads((tmp_path / "ev" / "report.json").read_text())["provenance"]["machine"]
    assert (machine["torch_threads"], machine["torch_threads_from"]) == (1, "eval.num_threads")
    assert "torch threads: 1 (eval.num_threads)" in (tmp_path / "ev" / "run.log").read_text()


def test_default_threads_share_the_cpus_between_the_processes_of_a_machine():
    # torch's default (one per physical core) on a machine of its own
    assert choose_threads(None, None, True, torch_default=8, cpus=16, processes=1).threads == 8
    # 8 processes on 16 CPUs: 2 each, not 8 each (64 threads on 16 CPUs)
    assert choose_threads(None, None, True, torch_default=8, cpus=16, processes=8).threads == 2
    assert choose_threads(None, None, True, torch_default=8, cpus=4, processes=8).threads == 1
    # the spec's keys: a command that trains prefers train.num_threads, an evaluation eval.num_threads
    assert choose_threads(3, 5, True, 8, 16, 1) == ThreadChoice(3, "train.num_threads")
    assert choose_threads(3, 5, False, 8, 16, 1) == ThreadChoice(5, "eval.num_threads")
    assert choose_threads(3, None, False, 8, 16, 1) == ThreadChoice(3, "train.num_threads")
    assert choose_threads(None, None, True, 4, 16, 8, omp_env="4") == ThreadChoice(4, "OMP_NUM_THREADS=4")
    reason = choose_threads(None, None, False, 8, 16, 8).reason
    assert reason == "default: torch's 8, at most 16 CPUs / 8 processes on this machine; set eval.num_threads to choose"


def test_a_busy_machine_is_named_with_the_setting_that_helps():
    # 2 CPUs, load 3.0 of which 1 is this process: 2 others + 2 threads > 2 CPUs
    line = load_warning(2, cpus=2, processes=1, load=3.0)
    assert line.startswith("the machine is busy (load average 3.0 on 2 CPUs) and this command adds 2 threads")
    assert load_warning(2, cpus=2, processes=1, load=1.0) is None  # only this process
    assert load_warning(1, cpus=2, processes=1, load=9.0) is None  # one thread: nothing to lower


def test_settings_differ_line_shows_where_two_long_values_differ():
    a = "You are given a 4x4 Sudoku puzzle. Fill in the digits. Answer with the 16 digits."
    b = "You are given a 4x4 Sudoku puzzle. Fill in the digits. Reply with the 16 digits only."
    line = format_differences([("eval.benchmarks[0].system_prompt", a, b)])
    old, new = line[len("eval.benchmarks[0].system_prompt ("):-1].split(" -> ")
    assert old != new
    assert old == "... the digits. Answer with the 16 digits."  # both cut just before where they differ
    assert new == "... the digits. Reply with the 16 digits on..."
    # short values are shown whole
    assert format_differences([("eval.seed", 0, 1)]) == "eval.seed (0 -> 1)"


def test_resume_point_of_a_directory_without_checkpoints(tmp_path):
    assert pipeline.resume_point(tmp_path / "checkpoints", True, 10) == pipeline.ResumePoint(None, False)
    ckpt = tmp_path / "checkpoints" / "checkpoint-10"
    ckpt.mkdir(parents=True)
    (ckpt / "trainer_state.json").write_text("{}")
    assert pipeline.resume_point(tmp_path / "checkpoints", True, 10) == pipeline.ResumePoint(10, True)
    assert pipeline.resume_point(tmp_path / "checkpoints", False, 10) == pipeline.ResumePoint(None, False)
