"""``dare profile SPEC``: parameters, peak memory and throughput of a few training steps (dare.ops.profiling)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

pytest.importorskip("dare_llada")


def _spec(tmp_path: Path) -> Path:
    spec = {
        "model": {"new": {"family": "llada", "preset": "tiny"}},
        "data": {"train": {"path": "dare://sudoku/train.parquet", "limit": 32, "prompt_template": "{{ extra_info.puzzle }}",
                           "chat_template": False, "response_template": "{{ reward_model.ground_truth }}"}},
        "algorithm": {"name": "sft"},
        "train": {"learning_rate": 1e-3, "max_steps": 100, "per_device_batch_size": 4, "num_threads": 1},
        "output": {"dir": str(tmp_path / "never-written")},
    }
    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump(spec))
    return path


def test_profile_reports_positive_measurements_and_counts_trainable_parameters(tmp_path, run_cli, monkeypatch):
    monkeypatch.setenv("TMPDIR", str(tmp_path / "tmp"))
    (tmp_path / "tmp").mkdir()
    spec = _spec(tmp_path)
    code, out, err = run_cli("profile", str(spec), "--steps", "3", "--json")
    assert code == 0, err[-2000:]
    full = json.loads(out)
    assert full["steps"] == 3 and full["processes"] == 1 and full["device"] == "cpu"
    for key in ("parameters", "peak_memory_bytes", "seconds_per_step", "tokens_per_step", "tokens_per_second",
                "first_step_seconds"):
        assert full[key] > 0, key
    assert full["trainable_parameters"] == full["parameters"]  # full fine-tuning
    assert full["peak_memory_kind"] == "process peak RSS"
    assert full["tokens_per_step"] % 4 == 0  # whole sequences of a batch of 4
    assert full["tokens_per_second"] == pytest.approx(full["tokens_per_step"] / full["seconds_per_step"], rel=1e-9)

    from dare.ops.profiling import ProfileResult

    table = dict(ProfileResult(**full).rows())  # what the table (no --json) shows
    assert table["parameters (trainable)"] == f"{full['trainable_parameters']:,}"
    assert table["processes / device"] == "1 / cpu"

    from dare.testing import tiny_model

    expected = sum(p.numel() for p in tiny_model("llada", tmp_path / "ref").model.parameters())
    assert full["parameters"] == expected

    code, out, err = run_cli("profile", str(spec), "--steps", "2", "--json", "--set", "model.lora={r: 4}")
    assert code == 0, err[-2000:]
    lora = json.loads(out)
    assert 0 < lora["trainable_parameters"] < lora["parameters"]
    assert lora["parameters"] == full["parameters"] + lora["trainable_parameters"]  # base + adapters
    # the temporary run directories are gone, and the spec's own output.dir was never touched
    assert list((tmp_path / "tmp").iterdir()) == [] and not (tmp_path / "never-written").exists()


def test_profile_needs_two_steps(tmp_path, run_cli):
    code, _, err = run_cli("profile", str(_spec(tmp_path)), "--steps", "1")
    assert code == 2 and "at least 2 steps" in err
