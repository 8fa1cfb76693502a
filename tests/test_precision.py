"""``train.bf16: true``: training runs under bf16 autocast (accelerate's native AMP, also on CPU), with fp32
master weights, and ends with finite weights, for every family."""

from __future__ import annotations

import json

import pytest
import torch
import yaml
from safetensors.torch import load_file

FAMILIES = [("llada", "tiny"), ("dream", "tiny"), ("sdar", "tiny"), ("sdar", "tiny-moe"), ("llada2", "tiny")]


def _train(tmp_path, family: str, preset: str, bf16: bool):
    """2 SFT steps; returns (logged losses, (autocast on, output dtype) of every training forward of one Linear, run)."""
    from dare.run import Run

    name = f"{family}-{preset}-{int(bf16)}"
    spec = {
        "model": {"new": {"family": family, "preset": preset}},
        "data": {"train": {"path": "dare://sudoku/train.parquet", "limit": 16, "prompt_template": "{{ extra_info.puzzle }}",
                           "chat_template": False, "response_template": "{{ reward_model.ground_truth }}"}},
        "algorithm": {"name": "sft"},
        "train": {"learning_rate": 1e-3, "max_steps": 2, "per_device_batch_size": 4, "logging_steps": 1, "save_steps": 2,
                  "num_threads": 1, "bf16": bf16},
        "output": {"dir": str(tmp_path / name)},
    }
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(spec))
    run = Run.from_file(str(path))
    run.prepare()
    seen = []
    linear = next(m for m in run.model.modules() if isinstance(m, torch.nn.Linear))
    linear.register_forward_hook(lambda m, i, o: seen.append((torch.is_autocast_enabled("cpu"), o.dtype)))
    run.execute(train=True, evaluate=False)
    recs = [json.loads(x) for x in (run.dir / "metrics.jsonl").read_text().splitlines()]
    return [r["loss"] for r in recs if "loss" in r], set(seen), run


@pytest.mark.parametrize("family,preset", FAMILIES)
def test_bf16_sft_trains_under_autocast_with_fp32_master_weights(tmp_path, family, preset):
    pytest.importorskip(f"dare_{family}")
    losses, seen, run = _train(tmp_path, family, preset, bf16=True)
    assert seen == {(True, torch.bfloat16)}  # every training forward ran under bf16 autocast
    weights = load_file(run.model_dir / "model.safetensors")
    assert weights and all(w.dtype == torch.float32 and bool(torch.isfinite(w).all()) for w in weights.values())
    assert len(losses) == 2 and all(torch.isfinite(torch.tensor(losses)))


def test_bf16_changes_the_arithmetic_not_the_draws(tmp_path):
    pytest.importorskip("dare_llada")
    fp32, seen, _ = _train(tmp_path, "llada", "tiny", bf16=False)
    assert seen == {(False, torch.float32)}
    bf16, _, _ = _train(tmp_path, "llada", "tiny", bf16=True)
    # same masks (keyed draws), different arithmetic: close but not bit-identical
    assert bf16 == pytest.approx(fp32, rel=0.05) and bf16 != fp32
