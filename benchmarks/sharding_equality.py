"""FSDP2, ZeRO-2 and ZeRO-3 on 2 CPU processes against 1 process and DDP: how closely a sharded run agrees.

A tiny LLaDA after 40 SFT steps on Sudoku (the digit-writing model of tests/test_distributed.py) trains 4 more SFT
steps and decodes 9 Sudoku rows with a threshold sampler (threshold 0.3, blocks of 4, batches of 4), once in this
process and once per 2-process launch: DDP (``ACCELERATE_USE_CPU=1 torchrun``), and with
``ACCELERATE_USE_CPU=1 DARE_CPU_SHARDING=1 accelerate launch --config_file examples/accelerate/...`` FSDP2, ZeRO-2 and
ZeRO-3 with every parameter released after use (docs/scaling.md). Prints one Markdown row per launch: wall seconds of
the whole command (process start-up included; informational, not a speed target), the largest loss and weight
differences from 1 process, whether all 9 completions are the same, accuracy / mean reward and NFE per row (which
depends on how rows are batched: a batch takes as many steps as its slowest row).

    .venv/bin/python benchmarks/sharding_equality.py [OUT_DIR]

Needs deepspeed (the test extra) for the ZeRO rows.
"""

from __future__ import annotations

import json
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from safetensors.torch import load_file  # noqa: E402

import test_distributed as td  # noqa: E402 - the 2-process helpers of the test suite
import test_sharding as ts  # noqa: E402


def main() -> None:
    out = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(tempfile.mkdtemp(prefix="dare-sharding-"))
    out.mkdir(parents=True, exist_ok=True)
    start = td._sft_spec(learning_rate=3e-3, max_steps=40, per_device_batch_size=64, logging_steps=10, save_steps=40)
    start["data"]["train"]["limit"] = 2000
    start.pop("eval")
    if not (out / "sft" / "model").is_dir():
        td._one_process(td._write(out, "sft", start), evaluate=False)
    spec = td._sft_spec(max_steps=4, save_steps=4, learning_rate=1e-4) | {"sampler": ts.THRESHOLD}
    spec["model"] = {"path": str(out / "sft" / "model")}
    spec["eval"] = {"before_train": False, "batch_size": 4, "benchmarks": [ts.NINE]}
    t = time.perf_counter()
    one = td._one_process(td._write(out, "one", spec))
    runs = {"1 process": (time.perf_counter() - t, one)}
    spec["train"]["per_device_batch_size"] = 8
    t = time.perf_counter()
    runs["DDP"] = (0.0, td._two_processes(td._write(out, "ddp", spec)))
    runs["DDP"] = (time.perf_counter() - t, runs["DDP"][1])
    for name, config, mark in [("FSDP2", ts.FSDP2, ts.SHARDED), ("ZeRO-2", ts.ZERO2, "ZeRO-2 over 2"),
                               ("ZeRO-3, parameters released", ts._zero3_released(out), "ZeRO-3 over 2")]:
        t = time.perf_counter()
        run_dir, _ = ts._fsdp2(td._write(out, name.split(",")[0], spec), config=config, sharded=mark)
        runs[name] = (time.perf_counter() - t, run_dir)
    wa, la = load_file(one / "model" / "model.safetensors"), td._losses(one)
    ra = json.loads((one / "eval" / "after.json").read_text())["results"][0]
    print("| launch | wall s | max abs loss diff | max abs weight diff | 9 completions equal | accuracy / mean reward | NFE per row |")
    print("|---|---:|---:|---:|---|---|---:|")
    for name, (seconds, run_dir) in runs.items():
        wb, lb = load_file(run_dir / "model" / "model.safetensors"), td._losses(run_dir)
        rb = json.loads((run_dir / "eval" / "after.json").read_text())["results"][0]
        dl = max(abs(x - y) for (_, x), (_, y) in zip(la, lb))
        dw = max(float((wa[k] - wb[k]).abs().max()) for k in wa)
        same = [s["completion"] for s in ra["samples"]] == [s["completion"] for s in rb["samples"]]
        print(f"| {name} | {seconds:.1f} | {dl:.2e} | {dw:.2e} | {same} | {rb['accuracy']:.3f} / "
              f"{rb['mean_reward']:.4f} | {rb['nfe']} |")


if __name__ == "__main__":
    main()
