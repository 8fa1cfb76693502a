"""A training killed with SIGKILL resumes from its last checkpoint and ends bit-exact with an uninterrupted run.

`dare train` runs as a subprocess and is killed once ``checkpoint-5`` exists; the same spec is then
trained again (in-process, resuming) and its final weights must equal those of the spec trained
without interruption (CPU, one thread).
Model, optimizer, scheduler, RNG states (masks come from torch's global RNG) and data position all
have to be restored for this to hold.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest
import torch
import yaml
from safetensors.torch import load_file

SPEC = {
    "model": {"new": {"family": "llada", "preset": "tiny"}},
    "data": {"train": {"path": "dare://sudoku/train.parquet", "limit": 256, "prompt_template": "{{ extra_info.puzzle }}",
                       "response_template": "{{ reward_model.ground_truth }}", "chat_template": False}},
    "algorithm": {"name": "sft"},
    "train": {"learning_rate": 1e-3, "max_steps": 20, "per_device_batch_size": 16, "logging_steps": 1, "save_steps": 5,
              "save_total_limit": 2, "num_threads": 1, "seed": 0},
}


@pytest.fixture(autouse=True)
def restore_threads():
    before = torch.get_num_threads()
    yield
    torch.set_num_threads(before)


def _spec_file(tmp_path, name: str):
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(SPEC | {"output": {"dir": str(tmp_path / name)}}))
    return path


def _dare_train(spec_path):
    env = dict(os.environ, DARE_LOAD_PLUGINS="llada,sft", HF_HUB_OFFLINE="1", TOKENIZERS_PARALLELISM="false")
    cmd = [sys.executable, "-m", "dare.cli", "train", str(spec_path)]
    return subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


def test_sigkill_then_resume_equals_uninterrupted(tmp_path):
    from dare.run import Run

    killed = _spec_file(tmp_path, "killed")
    proc = _dare_train(killed)
    marker = tmp_path / "killed" / "checkpoints" / "checkpoint-5" / "trainer_state.json"
    deadline = time.monotonic() + 120
    while not marker.is_file():
        assert proc.poll() is None, f"training ended before it could be killed: {proc.stderr.read().decode()[-2000:]}"
        assert time.monotonic() < deadline, "no checkpoint within 120 s"
        time.sleep(0.01)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    assert proc.returncode == -signal.SIGKILL
    assert not (tmp_path / "killed" / "model").exists()

    assert Run.from_file(str(killed)).execute(train=True, evaluate=False)["train"]["global_step"] == 20
    Run.from_file(str(_spec_file(tmp_path, "straight"))).execute(train=True, evaluate=False)

    got = load_file(tmp_path / "killed" / "model" / "model.safetensors")
    want = load_file(tmp_path / "straight" / "model" / "model.safetensors")
    assert got.keys() == want.keys()
    assert all(torch.equal(got[k], want[k]) for k in want), "resumed weights differ from the uninterrupted run"
    # the last trainer checkpoint exports to the same official-format weights
    from dare.ops.export import export_model

    export_model(tmp_path / "killed" / "checkpoints" / "checkpoint-20", tmp_path / "exported")
    exported = load_file(tmp_path / "exported" / "model.safetensors")
    assert all(torch.equal(exported[k], want[k]) for k in want)
    # the resumed process continued (did not restart): every step's loss is logged exactly once
    steps = [r["step"] for r in map(json.loads, (tmp_path / "killed" / "metrics.jsonl").read_text().splitlines()) if "loss" in r]
    assert steps == list(range(1, 21))


def test_resume_keeps_the_global_batch(tmp_path):
    """A checkpoint records the batch layout that wrote it; resuming with another global batch (processes x
    per-process batch x accumulation steps) is refused, the same global batch over other processes is not."""
    from dare.errors import DareError
    from dare.trainers.checkpoints import check_resume_batch, write_batch_record

    write_batch_record(tmp_path, 2, 8, 1)
    assert json.loads((tmp_path / "dare_batch.json").read_text()) == {
        "world_size": 2, "per_device_batch_size": 8, "gradient_accumulation_steps": 1}
    check_resume_batch(tmp_path, 2, 8, 1)
    check_resume_batch(tmp_path, 1, 16, 1)  # the same 16 examples per step
    check_resume_batch(tmp_path, 1, 8, 2)
    with pytest.raises(DareError, match=r"global batch of 2 processes x per_device_batch_size 8 x 1 accumulation "
                                        r"steps = 16, but this launch has 1 process x per_device_batch_size 8 x 1 "
                                        r"accumulation steps = 8.*--nproc_per_node 2"):
        check_resume_batch(tmp_path, 1, 8, 1)
    check_resume_batch(tmp_path / "older", 1, 8, 1)  # no record (written before records existed): not checked


def test_interrupted_message_of_several_processes_names_the_launch(monkeypatch):
    from dare.scaling import distributed
    from dare.cli.runs import relaunch_command

    monkeypatch.setattr(distributed, "world_size", lambda: 1)
    assert relaunch_command("dare train s.yaml") == "dare train s.yaml"
    monkeypatch.setattr(distributed, "world_size", lambda: 2)
    monkeypatch.setenv("ACCELERATE_USE_CPU", "1")
    assert relaunch_command("dare train s.yaml") == (
        "the same launch of 2 processes, e.g. ACCELERATE_USE_CPU=1 torchrun --nproc_per_node 2 --no-python dare train s.yaml")
