"""train.report_to: wandb (offline), trackio (its local store) and MLflow (the file store) log, through transformers'
Trainer integrations, the same metrics as metrics.jsonl; a missing tracker package is a validation error."""

from __future__ import annotations

import json

import pytest
import yaml


def _spec(model_dir, out_dir, report_to):
    return {
        "model": {"path": str(model_dir)},
        "data": {"train": {"path": "dare://sudoku/train.parquet", "limit": 16, "chat_template": False,
                           "prompt_template": "{{ extra_info.puzzle }}",
                           "response_template": "{{ reward_model.ground_truth }}"}},
        "algorithm": {"name": "sft"},
        "train": {"learning_rate": 2e-3, "max_steps": 3, "per_device_batch_size": 4, "logging_steps": 1, "save_steps": 3,
                  "num_threads": 1, "report_to": report_to},
        "output": {"dir": str(out_dir)},
    }


def _wandb_records(path) -> list[bytes]:
    """The records of a ``.wandb`` transaction log: the LevelDB log format (32 KiB blocks of chunks, each with a 7-byte
    header: CRC32C, little-endian length, type FULL=1/FIRST=2/MIDDLE=3/LAST=4) after wandb's 7-byte file header
    (``:W&B``, magic, version), which counts in the first block. wandb >= 0.19 ships no Python reader."""
    data = path.read_bytes()
    assert data[:4] == b":W&B"
    pos, out, part = 7, [], b""
    while pos + 7 <= len(data):
        left = 32768 - pos % 32768
        if left < 7:  # the block's tail is padding
            pos += left
            continue
        length, kind = int.from_bytes(data[pos + 4:pos + 6], "little"), data[pos + 6]
        chunk, pos = data[pos + 7:pos + 7 + length], pos + 7 + length
        if kind == 0:  # zero padding to the end of the block
            pos += left - 7 - length
            continue
        part = chunk if kind in (1, 2) else part + chunk
        if kind in (1, 4):
            out.append(part)
    return out


def _wandb_history(run_dir) -> list[dict]:
    """The history rows of the offline wandb run under ``run_dir/wandb`` (wandb's own protobuf ``Record``)."""
    from wandb.proto import wandb_internal_pb2

    (log,) = run_dir.glob("wandb/offline-run-*/run-*.wandb")
    rows = []
    for data in _wandb_records(log):
        rec = wandb_internal_pb2.Record()
        rec.ParseFromString(data)
        if rec.WhichOneof("record_type") == "history":
            rows.append({item.key or "/".join(item.nested_key): json.loads(item.value_json) for item in rec.history.item})
    return rows


def test_wandb_trackio_and_mlflow_log_what_metrics_jsonl_holds(tmp_path, tiny_llada_dir, monkeypatch, run_cli):
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    monkeypatch.setenv("TRACKIO_DIR", str(tmp_path / "trackio"))
    for var in ("WANDB_DIR", "WANDB_PROJECT", "MLFLOW_TRACKING_URI", "MLFLOW_EXPERIMENT_NAME", "MLFLOW_ALLOW_FILE_STORE"):
        monkeypatch.delenv(var, raising=False)
    out = tmp_path / "run"
    (tmp_path / "s.yaml").write_text(yaml.safe_dump(_spec(tiny_llada_dir, out, ["tensorboard", "wandb", "trackio", "mlflow"])))
    code, _, err = run_cli("train", str(tmp_path / "s.yaml"))
    assert code == 0, err
    import os

    assert "MLFLOW_TRACKING_URI" not in os.environ and "WANDB_DIR" not in os.environ  # set only while training
    recs = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    steps = [r for r in recs if "loss" in r]
    assert [r["step"] for r in steps] == [1, 2, 3]
    keys = [k for k in steps[0] if k != "step"]  # every metric of a step's record: loss, grad_norm, learning_rate, ...
    assert {"loss", "grad_norm", "learning_rate", "mask_ratio", "epoch"} <= set(keys)
    # per metric, (step, value) of every metrics.jsonl record holding it (the last record repeats the epoch)
    want = {k: sorted((r["step"], r[k]) for r in recs if k in r) for k in keys}

    def same(got, k):
        return [s for s, _ in got] == [s for s, _ in want[k]] and [v for _, v in got] == pytest.approx(
            [v for _, v in want[k]], rel=1e-6)

    # wandb, offline: <run>/wandb/offline-run-*; transformers logs train/<key> with train/global_step
    hist = _wandb_history(out)
    assert [h["train/global_step"] for h in hist if "train/loss" in h] == [1, 2, 3]
    for k in keys:
        assert same(sorted((h["train/global_step"], h[f"train/{k}"]) for h in hist if f"train/{k}" in h), k), k

    # MLflow's file store: <run>/mlruns, experiment "dare", the run named after its directory; <key> at the step
    from mlflow.tracking import MlflowClient

    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")  # to read it back here
    client = MlflowClient(tracking_uri=(out / "mlruns").as_uri())
    (run,) = client.search_runs([client.get_experiment_by_name("dare").experiment_id])
    assert run.info.run_name == "run"
    for k in keys:
        assert same(sorted((m.step, m.value) for m in client.get_metric_history(run.info.run_id, k)), k), k

    # trackio's local store (TRACKIO_DIR): project "dare", run "run"; train/<key> with train/global_step (trackio's
    # own "step" counts its records from 0)
    from trackio.sqlite_storage import SQLiteStorage

    logs = SQLiteStorage.get_logs("dare", "run")
    assert [x["train/global_step"] for x in logs if "train/loss" in x] == [1, 2, 3]
    for k in keys:
        assert same(sorted((x["train/global_step"], x[f"train/{k}"]) for x in logs if f"train/{k}" in x), k), k
    assert any(p.name.startswith("events.out.tfevents") for p in (out / "tensorboard").rglob("*"))


def test_no_tensorboard_when_report_to_leaves_it_out_and_a_missing_package_is_a_validation_error(
        tmp_path, tiny_llada_dir, monkeypatch, run_cli):
    out = tmp_path / "run"
    (tmp_path / "s.yaml").write_text(yaml.safe_dump(_spec(tiny_llada_dir, out, [])))
    code, _, err = run_cli("train", str(tmp_path / "s.yaml"))
    assert code == 0, err
    assert (out / "metrics.jsonl").is_file() and not (out / "tensorboard").exists()

    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "mlflow" else real(name, *a))
    (tmp_path / "m.yaml").write_text(yaml.safe_dump(_spec(tiny_llada_dir, tmp_path / "m", ["wandb", "mlflow", "wandb"])))
    code, out_text, err = run_cli("validate", str(tmp_path / "m.yaml"))
    assert code != 0 and "Traceback" not in err
    text = out_text + err
    assert "train.report_to[1]" in text and "pip install 'dare-dllm[mlflow]'" in text
    assert "train.report_to[2]" in text and "wandb is listed twice" in text
