"""``train.bf16: true``: training runs under bf16 autocast (accelerate's native AMP, also on CPU), with fp32
master weights, and ends with finite weights."""

from __future__ import annotations

import json

import pytest
import torch
import yaml
from safetensors.torch import load_file


def _spec(tmp_path, family: str, bf16: bool) -> str:
    s = {
        "model": {"new": {"family": family, "preset": "tiny"}},
        "data": {"train": {"path": "dare://sudoku/train.parquet", "limit": 16, "prompt_template": "{{ extra_info.puzzle }}",
                           "chat_template": False, "response_template": "{{ reward_model.ground_truth }}"}},
        "algorithm": {"name": "sft"},
        "train": {"learning_rate": 1e-3, "max_steps": 2, "per_device_batch_size": 4, "logging_steps": 1, "save_steps": 2,
                  "num_threads": 1, "bf16": bf16},
        "output": {"dir": str(tmp_path / f"{family}-{int(bf16)}")},
    }
    path = tmp_path / f"{family}-{int(bf16)}.yaml"
    path.write_text(yaml.safe_dump(s))
    return str(path)


@pytest.mark.parametrize("family", ["llada", "sdar"])
def test_bf16_sft_trains_under_autocast_with_fp32_master_weights(tmp_path, family):
    pytest.importorskip(f"dare_{family}")
    from dare.run import Run

    losses = {}
    for bf16 in (False, True):
        run = Run.from_file(_spec(tmp_path, family, bf16))
        run.prepare()
        seen = []
        linear = next(m for m in run.model.modules() if isinstance(m, torch.nn.Linear))
        linear.register_forward_hook(lambda m, i, o: seen.append((torch.is_autocast_enabled("cpu"), o.dtype)))
        run.execute(train=True, evaluate=False)
        # every training forward ran under autocast (bf16 activations) exactly when train.bf16 is set
        expected = (True, torch.bfloat16) if bf16 else (False, torch.float32)
        assert seen and set(seen) == {expected}
        weights = load_file(run.model_dir / "model.safetensors")
        assert all(w.dtype == torch.float32 and bool(torch.isfinite(w).all()) for w in weights.values())
        recs = [json.loads(x) for x in (run.dir / "metrics.jsonl").read_text().splitlines()]
        losses[bf16] = [r["loss"] for r in recs if "loss" in r]
        assert len(losses[bf16]) == 2 and all(torch.isfinite(torch.tensor(losses[bf16])))
    # same masks (keyed draws), different arithmetic: close but not bit-identical
    assert losses[True] == pytest.approx(losses[False], rel=0.05) and losses[True] != losses[False]
