"""How many weights a 16-bit training run actually changes: fp32 master weights vs none.

A tiny LLaDA model (``model.new`` preset ``tiny``, seed 0) is trained with SFT for ``--steps`` AdamW steps at
``--lr`` (default 10 steps at 1e-5, the LLaDA2.0-mini recipe's learning rate) on the packaged Sudoku puzzles, from
the same start and on the same batches, in two settings:

* ``fp32``: ``model.dtype: float32``, ``train.bf16: true`` (fp32 weights, bf16 autocast);
* ``bf16 weights``: ``model.dtype: bfloat16``, ``train.bf16: true`` (the recipes' setting). DARE's trainer now
  casts the trainable weights to fp32 master weights first (dare/trainers/precision.py); before it did not, and
  torch's AdamW updated the bf16 weights themselves.

Printed (and written to ``--out`` as JSON): the fraction of weight entries whose trained value (as saved: the
master weights) differs from the start as loaded (cast to ``model.dtype``), and the last logged loss.

    python benchmarks/bf16_updates.py --work /tmp/bf16 --out /tmp/bf16/result.json
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import yaml


def train(work: Path, name: str, dtype: str, steps: int, lr: float) -> dict:
    """One SFT run; returns ``{"changed": fraction, "loss": last logged loss}``."""
    import torch
    from safetensors.torch import load_file

    from dare.run import Run

    spec = {
        "model": {"new": {"family": "llada", "preset": "tiny", "seed": 0}, "dtype": dtype},
        "data": {"train": {"path": "dare://sudoku/train.parquet", "limit": 8 * steps, "chat_template": False,
                           "prompt_template": "{{ extra_info.puzzle }}",
                           "response_template": "{{ reward_model.ground_truth }}"}},
        "algorithm": {"name": "sft"},
        "train": {"learning_rate": lr, "max_steps": steps, "per_device_batch_size": 8, "logging_steps": 1,
                  "save_steps": steps, "num_threads": 1, "bf16": True, "seed": 0, "lr_scheduler": "constant"},
        "output": {"dir": str(work / name)},
    }
    path = work / f"{name}.yaml"
    path.write_text(yaml.safe_dump(spec))
    run = Run.from_file(str(path))
    run.execute(train=True, evaluate=False)
    start = load_file(run.dir / "init-model" / "model.safetensors")
    end = load_file(run.model_dir / "model.safetensors")
    changed = total = 0
    for k, w0 in start.items():  # the start as trained (cast to model.dtype) against the trained weights
        a, b = w0.to(getattr(torch, dtype)).to(end[k].dtype), end[k]
        changed += int((a != b).sum())
        total += a.numel()
    losses = [json.loads(x).get("loss") for x in (run.dir / "metrics.jsonl").read_text().splitlines()]
    return {"changed": changed / total, "loss": [x for x in losses if x is not None][-1]}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--work", required=True)
    p.add_argument("--out", default=None)
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--lr", type=float, default=1e-5)
    a = p.parse_args()
    work = Path(a.work)
    work.mkdir(parents=True, exist_ok=True)
    res = {name: train(work, name, dtype, a.steps, a.lr)
           for name, dtype in (("fp32", "float32"), ("bf16-weights", "bfloat16"))}
    for name, r in res.items():
        print(f"{name:<14} changed {100 * r['changed']:.1f} % of weights, last loss {r['loss']:.4f}")
    if a.out:
        Path(a.out).write_text(json.dumps({"steps": a.steps, "lr": a.lr, **res}, indent=1))


if __name__ == "__main__":
    main()
