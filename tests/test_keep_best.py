"""Validation rows held out with offset/limit, and ``train.keep_best`` (final weights = best validation step)."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest
import torch
import yaml
from safetensors.torch import load_file

from dare.data import load_rows
from dare.errors import SpecError
from dare.run import Run
from dare.runspec import load_spec, validate_spec

PROMPT = "{{ extra_info.puzzle }}"
BENCH = {"name": "sudoku", "chat_template": False, "prompt_template": PROMPT,
         "reward": {"name": "sudoku", "params": {"require_answer_tags": False}}}


def _spec(model_dir, out_dir, **train):
    return {
        "model": {"path": str(model_dir)},
        "data": {"train": {"path": "dare://sudoku/train.parquet", "limit": 64, "chat_template": False,
                           "prompt_template": PROMPT, "response_template": "{{ reward_model.ground_truth }}"}},
        "algorithm": {"name": "sft"},
        "sampler": {"name": "llada", "params": {"gen_length": 17, "block_length": 17, "steps": 17}},
        "train": {"learning_rate": 2e-3, "max_steps": 6, "per_device_batch_size": 8, "logging_steps": 2,
                  "save_steps": 2, "save_total_limit": 4, "eval_steps": 2, "keep_best": True, **train},
        "eval": {"batch_size": 8, "before_train": False,
                 "validation": {**BENCH, "path": "dare://sudoku/train.parquet", "offset": 64, "limit": 8},
                 "benchmarks": [{**BENCH, "limit": 8}]},
        "output": {"dir": str(out_dir)},
    }


def test_load_rows_offset_and_limit(tmp_path):
    full = load_rows("dare://sudoku/train.parquet", limit=12)
    assert load_rows("dare://sudoku/train.parquet", offset=5, limit=3) == full[5:8]
    jl = tmp_path / "rows.jsonl"
    jl.write_text("\n".join(json.dumps({"i": i}) for i in range(10)) + "\n")
    assert [r["i"] for r in load_rows(str(jl), offset=7)] == [7, 8, 9]
    assert [r["i"] for r in load_rows(str(jl), offset=2, limit=2)] == [2, 3]
    with pytest.raises(Exception, match="after the first 10"):
        load_rows(str(jl), offset=10)


def _problems(raw) -> dict[str, str]:
    with pytest.raises(SpecError) as exc:
        validate_spec(raw)
    return {loc: msg for loc, msg in exc.value.problems}


def test_keep_best_needs_held_out_validation(tmp_path, tiny_llada_dir):
    raw = _spec(tiny_llada_dir, tmp_path / "a")
    del raw["eval"]["validation"]
    assert "eval.validation" in _problems(raw)["train.keep_best"]

    raw = _spec(tiny_llada_dir, tmp_path / "b")
    raw["eval"]["validation"]["offset"] = 60  # rows 60..67 overlap training rows 0..63
    msg = _problems(raw)["eval.validation"]
    assert "rows 60..67" in msg and "data.train rows 0..63" in msg

    raw = _spec(tiny_llada_dir, tmp_path / "c")
    del raw["data"]["train"]["limit"]  # the whole file is trained on
    assert "data.train.limit: 64" in _problems(raw)["eval.validation"]

    raw = _spec(tiny_llada_dir, tmp_path / "f")
    raw["eval"]["validation"] = {**BENCH, "limit": 8}  # no path: the sudoku default file is the test set
    assert "eval.benchmarks[0] (the test set)" in _problems(raw)["eval.validation"]

    raw = _spec(tiny_llada_dir, tmp_path / "g")
    raw["eval"]["validation"]["offset"] = 25000
    assert "has 20000 rows" in _problems(raw)["eval.validation.offset"]

    raw = _spec(tiny_llada_dir, tmp_path / "d", eval_steps=10)
    assert "eval_steps 10 > max_steps 6" in _problems(raw)["train.eval_steps"]

    validate_spec(_spec(tiny_llada_dir, tmp_path / "e"))  # held out: valid


def test_keep_best_ends_with_the_best_validation_weights(tmp_path, tiny_llada_dir, monkeypatch):
    """Scripted validation accuracies 0.1 (start), 0.5 (step 2), 0.3, 0.5 (tie: earliest wins)."""
    scores = iter([0.1, 0.5, 0.3, 0.5])
    seen = []

    def fake_validate(self, model, limit=None):
        seen.append(limit)
        return SimpleNamespace(accuracy=next(scores), mean_reward=0.0, n=100)

    monkeypatch.setattr(Run, "validate", fake_validate)
    out = tmp_path / "run"
    (tmp_path / "s.yaml").write_text(yaml.safe_dump(_spec(tiny_llada_dir, out)))
    run = Run(load_spec(tmp_path / "s.yaml", check=False), source=str(tmp_path / "s.yaml"))
    result = run.execute()

    assert len(seen) == 4  # before the first step, then steps 2, 4, 6
    best = json.loads((out / "checkpoints" / "best" / "best.json").read_text())
    assert best == {"step": 2, "metric": "validation/accuracy", "value": 0.5}
    assert result["train"]["best_step"] == 2 and result["train"]["best_validation_accuracy"] == 0.5
    assert "Final weights (train.keep_best): step 2, validation accuracy 0.5000" in (out / "report.md").read_text()

    final = load_file(out / "model" / "model.safetensors")
    at2 = load_file(out / "checkpoints" / "checkpoint-2" / "model.safetensors")
    at6 = load_file(out / "checkpoints" / "checkpoint-6" / "model.safetensors")
    assert final.keys() == at2.keys()
    assert all(torch.equal(final[k], at2[k]) for k in final)  # bit-exact: the step-2 weights
    assert not all(torch.equal(final[k], at6[k]) for k in final)  # not the last step's
    recs = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [(r["step"], r["eval/validation/accuracy"]) for r in recs if "eval/validation/accuracy" in r] == [
        (0, 0.1), (2, 0.5), (4, 0.3), (6, 0.5)]
    assert not (out / "checkpoints" / ".staging").exists()

    # re-running the finished spec resumes at the last checkpoint, trains nothing, and ends with the
    # best weights again (no new validation: the scripted scores are used up)
    again = Run(load_spec(tmp_path / "s.yaml", check=False), source=str(tmp_path / "s.yaml")).execute()
    assert again["train"]["best_step"] == 2
    final = load_file(out / "model" / "model.safetensors")
    assert all(torch.equal(final[k], at2[k]) for k in final)


def test_keep_best_real_validation_keeps_start_on_ties(tmp_path, tiny_llada_dir):
    """A random tiny model solves nothing: every evaluation ties at 0.0, so the start weights are kept."""
    out = tmp_path / "run"
    (tmp_path / "s.yaml").write_text(yaml.safe_dump(_spec(tiny_llada_dir, out, max_steps=2, eval_steps=2)))
    run = Run(load_spec(tmp_path / "s.yaml"), source=str(tmp_path / "s.yaml"))
    run.execute()
    assert json.loads((out / "checkpoints" / "best" / "best.json").read_text())["step"] == 0
    final = load_file(out / "model" / "model.safetensors")
    start = load_file(tiny_llada_dir / "model.safetensors")
    assert all(torch.equal(final[k], start[k]) for k in final)


def test_resume_does_not_evaluate_the_resumed_step(tmp_path, tiny_llada_dir, monkeypatch):
    """Resuming at checkpoint-4 (eval_steps 3) evaluates step 6 only, as the uninterrupted run did, and
    keeps best/ (step 3), so the final weights are the uninterrupted run's."""
    import shutil

    calls = []
    scores = {0: 0.1, 3: 0.5, 6: 0.3}

    def fake_validate(self, model, limit=None):
        step = len(calls)
        calls.append(step)
        return SimpleNamespace(accuracy=scripted.pop(0), mean_reward=0.0, n=100)

    scripted = [scores[0], scores[3], scores[6]]
    monkeypatch.setattr(Run, "validate", fake_validate)
    out = tmp_path / "run"
    (tmp_path / "s.yaml").write_text(yaml.safe_dump(_spec(tiny_llada_dir, out, eval_steps=3)))
    Run(load_spec(tmp_path / "s.yaml", check=False), source=str(tmp_path / "s.yaml")).execute()
    assert len(calls) == 3
    first = load_file(out / "model" / "model.safetensors")

    # as if killed after checkpoint-4: the last checkpoint and the final model are gone
    shutil.rmtree(out / "checkpoints" / "checkpoint-6")
    shutil.rmtree(out / "model")
    calls.clear()
    scripted = [scores[6]]
    monkeypatch.setattr(Run, "validate", fake_validate)
    again = Run(load_spec(tmp_path / "s.yaml", check=False), source=str(tmp_path / "s.yaml")).execute()
    assert len(calls) == 1  # step 6 only: the resumed step 4 is not evaluated
    assert again["train"]["best_step"] == 3
    final = load_file(out / "model" / "model.safetensors")
    assert all(torch.equal(final[k], first[k]) for k in final)
