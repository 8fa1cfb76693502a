"""``output.dir`` handling: what a run may replace, failed runs, ``train.resume: false``, ``dare eval`` after a run."""

from __future__ import annotations

import json

import pytest
import torch
import yaml
from safetensors.torch import load_file

from dare.errors import DareError, SpecError
from dare.run import Run
from dare.runspec import load_spec


def _spec(out_dir, steps=4, **model):
    return {
        "model": model or {"new": {"family": "llada", "preset": "tiny", "seed": 0}},
        "data": {"train": {"path": "dare://sudoku/train.parquet", "limit": 16, "chat_template": False,
                           "prompt_template": "{{ extra_info.puzzle }}", "response_template": "{{ reward_model.ground_truth }}"}},
        "algorithm": {"name": "sft"},
        "sampler": {"name": "llada", "params": {"gen_length": 17, "block_length": 17, "steps": 17}},
        "train": {"learning_rate": 2e-3, "max_steps": steps, "per_device_batch_size": 4, "logging_steps": 1, "save_steps": 2},
        "eval": {"batch_size": 4, "benchmarks": [{"name": "sudoku", "limit": 4, "chat_template": False,
                                                   "prompt_template": "{{ extra_info.puzzle }}",
                                                   "reward": {"name": "sudoku", "params": {"require_answer_tags": False}}}]},
        "output": {"dir": str(out_dir)},
    }


def _run(tmp_path, spec, name="s.yaml"):
    path = tmp_path / name
    path.write_text(yaml.safe_dump(spec))
    return Run(load_spec(path, check=False), source=str(path))


def _steps(out):
    return [json.loads(line)["step"] for line in (out / "metrics.jsonl").read_text().splitlines() if "loss" in json.loads(line)]


def test_overwrite_never_deletes_a_directory_that_is_not_a_run(tmp_path, monkeypatch):
    user = tmp_path / "userdir"
    user.mkdir()
    (user / "notes.txt").write_text("precious")
    spec = _spec(user) | {"output": {"dir": str(user), "overwrite": True}}
    with pytest.raises(SpecError) as exc:
        _run(tmp_path, spec)
    assert exc.value.problems[0][0] == "output.dir"
    assert "not a DARE run directory" in str(exc.value) and "choose an empty or new output.dir" in str(exc.value)
    assert (user / "notes.txt").read_text() == "precious" and sorted(p.name for p in user.iterdir()) == ["notes.txt"]

    # output.dir: . (the working directory) is refused the same way
    monkeypatch.chdir(user)
    with pytest.raises(SpecError, match="not a DARE run directory"):
        _run(tmp_path, _spec(".") | {"output": {"dir": ".", "overwrite": True}})
    assert (user / "notes.txt").read_text() == "precious"

    # Run.prepare refuses too (a file that appeared after validation)
    empty = tmp_path / "empty"
    run = _run(tmp_path, _spec(empty) | {"output": {"dir": str(empty), "overwrite": True}})
    empty.mkdir()
    (empty / "notes.txt").write_text("precious")
    with pytest.raises(SpecError, match="output.dir.*not a DARE run directory"):
        run.prepare()
    assert (empty / "notes.txt").read_text() == "precious"


def test_a_failed_run_does_not_block_the_corrected_spec(tmp_path, capsys):
    out = tmp_path / "run"
    # what a run that failed after validation (say, out of memory while building its model) leaves behind:
    # its run.json and a partly written init-model/, but no checkpoint, model or report
    (out / "init-model").mkdir(parents=True)
    (out / "init-model" / "config.json").write_text("{}")
    (out / "run.json").write_text(json.dumps({"spec_hash": "0123456789abcdef"}))

    good = _run(tmp_path, _spec(out, steps=1))  # validation accepts the directory
    result = good.execute(evaluate=False)
    assert result["train"]["global_step"] == 1
    assert "replacing the files of an earlier unfinished run" in capsys.readouterr().err
    assert json.loads((out / "run.json").read_text())["spec_hash"] == good.hash

    # a different run that produced a model is still refused without output.overwrite
    other = _spec(out, steps=2)
    with pytest.raises(SpecError, match="output.dir.*different run.*output.overwrite: true"):
        _run(tmp_path, other)


def test_resume_false_on_this_runs_checkpoints(tmp_path):
    out = tmp_path / "run"
    first = _run(tmp_path, _spec(out))
    first.execute(evaluate=False)
    assert _steps(out) == [1, 2, 3, 4]
    (out / "checkpoints" / "checkpoint-4" / "old-run.txt").write_text("from the first run")
    metrics = (out / "metrics.jsonl").read_text()

    no_resume = _spec(out)
    no_resume["train"]["resume"] = False
    with pytest.raises(SpecError) as exc:
        _run(tmp_path, no_resume).execute(evaluate=False)
    assert exc.value.problems[0][0] == "train.resume"
    assert "train.resume: true" in str(exc.value) and "output.overwrite: true" in str(exc.value)
    assert (out / "metrics.jsonl").read_text() == metrics  # nothing touched
    # `dare validate` (as `dare run` by default, or --command train) refuses it as the run does; --command eval accepts
    path = tmp_path / "no-resume.yaml"
    path.write_text(yaml.safe_dump(no_resume))
    for command in ("run", "train"):
        with pytest.raises(SpecError) as exc:
            load_spec(path, command=command)
        assert [loc for loc, _ in exc.value.problems] == ["train.resume"]
    load_spec(path, command="eval")

    # with output.overwrite the run starts fresh: each step logged once, no checkpoint of the old run left
    fresh = no_resume | {"output": {"dir": str(out), "overwrite": True}}
    result = _run(tmp_path, fresh).execute(evaluate=False)
    assert result["train"]["global_step"] == 4
    assert _steps(out) == [1, 2, 3, 4]
    assert sorted(p.name for p in (out / "checkpoints").iterdir()) == ["checkpoint-2", "checkpoint-4"]
    assert not (out / "checkpoints" / "checkpoint-4" / "old-run.txt").exists()


def test_eval_after_run_uses_the_trained_model_and_keeps_the_report(tmp_path, capsys):
    out = tmp_path / "run"
    spec = _spec(out)
    run = _run(tmp_path, spec)
    run.execute()
    # training leaves no empty staging directory behind
    assert sorted(p.name for p in (out / "checkpoints").iterdir()) == ["checkpoint-2", "checkpoint-4"]
    report = json.loads((out / "report.json").read_text())
    after = report["results"]["after"][0]

    capsys.readouterr()
    ev = _run(tmp_path, spec)
    result = ev.execute(train=False, evaluate=True)
    assert "evaluating the trained model in" in capsys.readouterr().err
    trained = load_file(out / "model" / "model.safetensors")
    init = load_file(out / "init-model" / "model.safetensors")
    assert all(torch.equal(v, trained[k]) for k, v in ev.model.state_dict().items())
    assert any(not torch.equal(trained[k], init[k]) for k in trained)
    assert list(result["stages"]) == ["before", "after", "eval"]
    got = result["stages"]["eval"][0]
    assert (got["accuracy"], got["mean_reward"], got["n"]) == (after["accuracy"], after["mean_reward"], 4)
    assert json.loads((out / "samples" / "eval-sudoku.json").read_text()) == json.loads((out / "samples" / "after-sudoku.json").read_text())

    md = (out / "report.md").read_text()
    assert "| before | sudoku |" in md and "| after | sudoku |" in md and "| eval | sudoku |" in md
    assert f"- eval_model: {out / 'model'}" in md
    new = json.loads((out / "report.json").read_text())
    assert new["results"]["before"] == report["results"]["before"] and new["results"]["after"] == report["results"]["after"]
    assert new["train_metrics"] == report["train_metrics"] and new["train_metrics"]["global_step"] == 4


def test_resume_prints_the_checkpoint(tmp_path, capsys):
    out = tmp_path / "run"
    _run(tmp_path, _spec(out, steps=2)).execute(evaluate=False)
    assert not (out / "checkpoints" / ".staging").exists()
    assert "resuming from" not in capsys.readouterr().err
    _run(tmp_path, _spec(out, steps=2)).execute(evaluate=False)
    err = capsys.readouterr().err
    assert f"resuming from {out / 'checkpoints' / 'checkpoint-2'}\n" in err


def test_evaluation_only_overwrite_never_deletes_a_trained_run(tmp_path):
    from dare.run.rundir import plan_output_dir

    out = tmp_path / "run"
    (out / "model").mkdir(parents=True)
    (out / "run.json").write_text(json.dumps({"spec_hash": "aaaa"}))
    action, problems = plan_output_dir(out, "bbbb", overwrite=True, train=False)
    assert action == "refuse" and problems[0][0] == "output.overwrite" and "another output.dir" in problems[0][1]
    assert plan_output_dir(out, "bbbb", overwrite=True, train=True)[0] == "replace"  # a training run may replace it
    assert (out / "model").is_dir()


def test_overwrite_replaces_a_trained_run_from_the_command_line(tmp_path):
    """`dare train` with output.overwrite: true replaces a finished run of another spec (validation does not refuse it
    as if the command only evaluated); `dare eval` of that spec still may not delete it."""
    from dare.cli import main

    out = tmp_path / "run"
    first = tmp_path / "a.yaml"
    first.write_text(yaml.safe_dump(_spec(out, steps=2)))
    main(["train", str(first), "--set", "train.num_threads=1"])
    assert (out / "model").is_dir()
    old_hash = json.loads((out / "run.json").read_text())["spec_hash"]
    second = tmp_path / "b.yaml"
    second.write_text(yaml.safe_dump({**_spec(out, steps=2), "output": {"dir": str(out), "overwrite": True}}))
    with pytest.raises(SystemExit) as refused:  # evaluation only: never deletes the trained run
        main(["eval", str(second), "--set", "train.learning_rate=1e-3"])
    assert refused.value.code == 2 and json.loads((out / "run.json").read_text())["spec_hash"] == old_hash
    main(["train", str(second), "--set", "train.learning_rate=1e-3", "--set", "train.num_threads=1"])
    assert json.loads((out / "run.json").read_text())["spec_hash"] != old_hash and _steps(out) == [1, 2]


def test_a_spec_that_is_not_utf8_is_one_paragraph(tmp_path):
    spec = tmp_path / "s.yaml"
    spec.write_bytes(yaml.safe_dump(_spec(tmp_path / "run")).encode() + b"# caf\xe9\n")
    with pytest.raises(SpecError, match=r"is not UTF-8 text \(byte 0xe9 at offset \d+\); save it as UTF-8"):
        load_spec(spec)


def test_a_non_finite_evaluation_reward_is_refused_naming_the_reward(tmp_path, monkeypatch):
    """A reward that returns NaN during evaluation stops the command with one paragraph naming the benchmark, the
    reward and the rows, instead of reporting ``mean reward nan``."""
    from dare.builtins.rewards import SudokuReward

    monkeypatch.setattr(SudokuReward, "score", lambda self, completion, sample: float("nan"))
    spec = _spec(tmp_path / "run")
    spec.pop("algorithm"), spec.pop("train"), spec.pop("data")
    with pytest.raises(DareError, match=r"benchmark 'sudoku': its reward \(sudoku\) returned a non-finite score for "
                                        r"4 of 4 rows \(row 0: nan"):
        _run(tmp_path, spec).execute()


def test_an_evaluation_reward_past_its_time_limit_stops_naming_the_reward(tmp_path, monkeypatch):
    """``eval.benchmarks[].reward_timeout_s``: a reward call that does not return in time ends the evaluation with
    one paragraph naming the reward and the sample; the limit does not change the spec hash."""
    import time

    from dare.builtins.rewards import SudokuReward
    from dare.runspec.models import RunSpec, spec_hash

    monkeypatch.setattr(SudokuReward, "score", lambda self, completion, sample: time.sleep(60) or 0.0)
    spec = _spec(tmp_path / "run")
    spec.pop("algorithm"), spec.pop("train"), spec.pop("data")
    spec["eval"]["benchmarks"][0]["reward_timeout_s"] = 0.5
    started = time.monotonic()
    with pytest.raises(DareError, match=r"reward 'sudoku' did not return within its timeout_s of 0.5 s"):
        _run(tmp_path, spec).execute()
    assert time.monotonic() - started < 50
    other = json.loads(json.dumps(spec))
    other["eval"]["benchmarks"][0]["reward_timeout_s"] = 30
    assert spec_hash(RunSpec.model_validate(spec)) == spec_hash(RunSpec.model_validate(other))


@pytest.mark.parametrize("record", ['{"spec_hash": ', "[]", '{"spec": null}'])
def test_a_damaged_run_json_is_named_not_reported_as_spec_hash_none(tmp_path, record):
    from dare.run.rundir import RunDir

    out = tmp_path / "run"
    (out / "checkpoints" / "checkpoint-10").mkdir(parents=True)
    (out / "run.json").write_text(record)
    action, problems = RunDir(out).plan("abc123", overwrite=False, spec={"train": {}})
    assert action == "refuse" and problems[0][0] == "output.dir"
    message = problems[0][1]
    assert "run.json cannot be read" in message and "None" not in message, message
    assert "output.overwrite: true" in message and str(out / "run.json") in message
    assert RunDir(out).plan("abc123", overwrite=True, spec={"train": {}})[0] == "replace"


def test_eval_of_a_run_stopped_after_a_checkpoint_names_the_checkpoint(tmp_path, capsys):
    import shutil

    out = tmp_path / "run"
    spec = _spec(out)
    _run(tmp_path, spec).execute()
    shutil.rmtree(out / "model")  # as a run stopped after checkpoint-4, before its model/ was written
    capsys.readouterr()
    ev = _run(tmp_path, spec)
    ev.execute(train=False, evaluate=True)
    err = capsys.readouterr().err
    assert "has no trained model/ yet (its training stopped at checkpoint-4)" in err
    assert f"--set model.path={out / 'checkpoints' / 'checkpoint-4'}" in err
    init = load_file(out / "init-model" / "model.safetensors")
    assert all(torch.equal(v, init[k]) for k, v in ev.model.state_dict().items())
