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


def test_trainable_16bit_weights_become_fp32_master_weights_and_frozen_ones_stay():
    from dare.trainers.precision import upcast_trainable_to_fp32

    m = torch.nn.Sequential(torch.nn.Embedding(4, 3), torch.nn.Linear(3, 4, bias=False), torch.nn.Linear(3, 3))
    m.to(torch.bfloat16)
    m[1].weight = m[0].weight  # tied: one Parameter
    m[2].requires_grad_(False)  # frozen (a LoRA base, a reference copy)
    start = m[0].weight.detach().clone()
    assert upcast_trainable_to_fp32(m) == ["0.weight"]
    assert m[0].weight.dtype == torch.float32 and m[1].weight is m[0].weight
    assert torch.equal(m[0].weight.detach(), start.float())  # exact: every bf16 value is an fp32 value
    assert m[2].weight.dtype == torch.bfloat16 and upcast_trainable_to_fp32(m) == []


def test_bf16_weights_train_with_fp32_master_weights(tmp_path):
    """lr 1e-5, bf16 weights, train.bf16: every step lands in the fp32 master weights (with AdamW on the bf16
    weights themselves 10 steps changed 2.7 % of them, docs/results.md)."""
    pytest.importorskip("dare_llada")
    from dare.run import Run

    spec = {"model": {"new": {"family": "llada", "preset": "tiny", "seed": 0}, "dtype": "bfloat16"},
            "data": {"train": {"path": "dare://sudoku/train.parquet", "limit": 8, "chat_template": False,
                               "prompt_template": "{{ extra_info.puzzle }}",
                               "response_template": "{{ reward_model.ground_truth }}"}},
            "algorithm": {"name": "sft"},
            "train": {"learning_rate": 1e-5, "max_steps": 2, "per_device_batch_size": 4, "save_steps": 2,
                      "num_threads": 1, "bf16": True},
            "output": {"dir": str(tmp_path / "run")}}
    (tmp_path / "s.yaml").write_text(yaml.safe_dump(spec))
    run = Run.from_file(str(tmp_path / "s.yaml"))
    run.execute(train=True, evaluate=False)
    start = load_file(run.dir / "init-model" / "model.safetensors")
    end = load_file(run.model_dir / "model.safetensors")
    assert all(w.dtype == torch.float32 for w in end.values())  # the master weights
    changed = sum(int((start[k].to(torch.bfloat16).float() != w).sum()) for k, w in end.items())
    total = sum(w.numel() for w in end.values())
    assert changed / total > 0.5  # 86 % move in 10 steps, as with fp32 weights; AdamW on bf16 weights: 2.7 %


def test_pure_16bit_training_at_a_small_learning_rate_is_refused_naming_the_fix(tmp_path):
    from dare.errors import SpecError
    from dare.runspec import load_spec
    from dare.trainers.precision import pure_16bit_problem

    assert pure_16bit_problem("bfloat16", bf16=False, lora=False, learning_rate=1e-5) is not None
    assert pure_16bit_problem("bfloat16", bf16=True, lora=False, learning_rate=1e-5) is None  # fp32 master weights
    assert pure_16bit_problem("bfloat16", bf16=False, lora=True, learning_rate=1e-5) is None  # fp32 adapters
    assert pure_16bit_problem("bfloat16", bf16=False, lora=False, learning_rate=1e-4) is None
    assert pure_16bit_problem("float32", bf16=False, lora=False, learning_rate=1e-7) is None
    spec = {"model": {"new": {"family": "llada", "preset": "tiny"}, "dtype": "bfloat16"},
            "data": {"train": {"path": "dare://sudoku/train.parquet", "limit": 8, "chat_template": False,
                               "prompt_template": "{{ extra_info.puzzle }}",
                               "response_template": "{{ reward_model.ground_truth }}"}},
            "algorithm": {"name": "sft"}, "train": {"learning_rate": 1e-5, "bf16": False, "max_steps": 2},
            "output": {"dir": str(tmp_path / "run")}}
    (tmp_path / "s.yaml").write_text(yaml.safe_dump(spec))
    with pytest.raises(SpecError) as err:
        load_spec(tmp_path / "s.yaml")
    ((loc, msg),) = [p for p in err.value.problems if p[0] == "train.bf16"]
    assert "rounds away" in msg and msg.endswith("Set train.bf16: true (bf16 compute, fp32 master weights), or "
                                                 "model.dtype: float32")
    load_spec(tmp_path / "s.yaml", overrides=["train.bf16=true"])  # accepted
