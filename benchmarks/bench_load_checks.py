"""Cost of the load-time integrity checks: ``load_model`` with and without them.

``load_model(verify=True)`` checks the safetensors headers against the config and streams every tensor
once for NaN/inf (``dare.modeling.integrity.check_finite``) before ``from_pretrained`` reads the weights;
``verify=False`` skips both. The two are alternated in one process for ``--rounds`` rounds (the page
cache is warm after the first load, as it is for the second read of a real load), and min/median/max
seconds of each are printed with the size of the checkpoint.

Run: ``python benchmarks/bench_load_checks.py [--d-model 1024] [--layers 8] [--rounds 5] [--threads 1]``.
The model is a randomly initialised LLaDA of the given size with DARE's byte tokenizer, written to a
temporary directory.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import torch


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--d-model", type=int, default=1024)
    parser.add_argument("--layers", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)

    from dare.modeling import load_model
    from dare.modeling.integrity import check_finite, weight_files
    from dare.testing import tiny_model

    with tempfile.TemporaryDirectory() as tmp:
        d = Path(tmp) / "model"
        tiny_model("llada", d, d_model=args.d_model, n_layers=args.layers, n_heads=max(1, args.d_model // 64),
                   mlp_hidden_size=4 * args.d_model)
        size = sum(f.stat().st_size for f in weight_files(d))
        times: dict[str, list[float]] = {"checked": [], "unchecked": [], "check_finite alone": []}
        load_model(d, verify=False)  # warm the page cache and the imports
        for _ in range(args.rounds):
            for name, fn in (("checked", lambda: load_model(d, verify=True)),
                             ("unchecked", lambda: load_model(d, verify=False)),
                             ("check_finite alone", lambda: check_finite(d))):
                t0 = time.perf_counter()
                fn()
                times[name].append(time.perf_counter() - t0)
    print(f"checkpoint: {size / 2**20:.1f} MiB (d_model {args.d_model}, {args.layers} layers), {args.rounds} rounds")
    for name, ts in times.items():
        print(f"{name:>20}: min {min(ts):.3f} s  median {statistics.median(ts):.3f} s  max {max(ts):.3f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
