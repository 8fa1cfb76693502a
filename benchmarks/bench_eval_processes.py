"""Sharded evaluation: the 500 Sudoku test puzzles on 2 processes vs 1 (its speed-up and equal accuracy).

The quickstart-sized LLaDA model (``preset: quickstart``, 0.86 M parameters, fresh weights; greedy decoding
with the quickstart's sampler) evaluates ``dare://sudoku/test.parquet`` (500 puzzles) with ``dare eval``:

* baseline: one process (``dare eval SPEC``), ``OMP_NUM_THREADS`` = ``--threads`` (default: every core);
* candidate: ``ACCELERATE_USE_CPU=1 torchrun --nproc_per_node 2 --no-python dare eval SPEC``, each process
  with ``max(1, --threads // 2)`` threads (the same cores in total when ``--threads`` is even), each decoding
  half of the puzzles.

The two alternate for ``--rounds`` rounds (each in a fresh run directory). Timed is the evaluation itself, the
``seconds`` of the report (wall time in the sampler; with 2 processes the slower one's), not process start-up
(whose whole-command wall time is printed beside it). Every run must produce the same completion for every
puzzle (asserted). Prints min/median/max per side and the ratio of the medians (1 process / 2 processes).

    .venv/bin/python benchmarks/bench_eval_processes.py [--rounds 5] [--threads 2] [--batch-size 250]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

BIN = Path(sys.executable).parent
SAMPLER = {"name": "llada", "params": {"gen_length": 17, "block_length": 17, "steps": 17, "temperature": 0.0,
                                        "remasking": "low_confidence"}}


def _spec(model_dir: Path, out_dir: Path, batch_size: int) -> dict:
    return {
        "model": {"path": str(model_dir)},
        "sampler": SAMPLER,
        "eval": {"batch_size": batch_size, "seed": 0, "benchmarks": [{
            "name": "sudoku", "prompt_template": "{{ extra_info.puzzle }}", "chat_template": False,
            "reward": {"name": "sudoku", "params": {"require_answer_tags": False}}}]},
        "output": {"dir": str(out_dir)},
    }


def _eval(work: Path, model_dir: Path, name: str, processes: int, threads: int, batch_size: int) -> dict:
    run_dir = work / name
    spec = work / f"{name}.yaml"
    spec.write_text(yaml.safe_dump(_spec(model_dir, run_dir, batch_size)))
    env = dict(os.environ, HF_HUB_OFFLINE="1", TOKENIZERS_PARALLELISM="false",
               OMP_NUM_THREADS=str(max(1, threads // processes)))
    if processes == 1:
        cmd = [str(BIN / "dare"), "eval", str(spec)]
        env.pop("ACCELERATE_USE_CPU", None)
    else:
        cmd = [str(BIN / "torchrun"), "--nproc_per_node", str(processes), "--standalone", "--no-python",
               str(BIN / "dare"), "eval", str(spec)]
        env["ACCELERATE_USE_CPU"] = "1"
    t0 = time.perf_counter()
    res = subprocess.run(cmd, env=env, capture_output=True, text=True, cwd=work)
    wall = time.perf_counter() - t0
    if res.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed ({res.returncode}):\n{res.stderr[-3000:]}")
    (result,) = json.loads((run_dir / "eval" / "eval.json").read_text())["results"]
    return {"seconds": result["seconds"], "wall": wall, "n": result["n"], "accuracy": result["accuracy"],
            "completions": [s["completion"] for s in result["samples"]]}


def _stats(xs: list[float]) -> str:
    return f"min {min(xs):7.2f}  median {statistics.median(xs):7.2f}  max {max(xs):7.2f}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=5, help="rounds of (1 process, 2 processes), alternating")
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 2,
                    help="threads of the 1-process run; each of the 2 processes gets max(1, threads // 2)")
    ap.add_argument("--batch-size", type=int, default=250, help="eval.batch_size (rows per sampler call)")
    args = ap.parse_args()
    if args.rounds < 3:
        raise SystemExit("--rounds must be at least 3")

    from dare.testing import tiny_model

    with tempfile.TemporaryDirectory(prefix="dare-bench-eval-") as tmp:
        work = Path(tmp)
        model_dir = work / "model"
        tiny_model("llada", model_dir, preset="quickstart", seed=0)
        times: dict[int, list[dict]] = {1: [], 2: []}
        reference = None
        for r in range(args.rounds):
            for procs in (1, 2) if r % 2 == 0 else (2, 1):
                out = _eval(work, model_dir, f"r{r}-p{procs}", procs, args.threads, args.batch_size)
                if reference is None:
                    reference = out
                assert out["n"] == 500, f"{out['n']} puzzles evaluated, expected 500"
                assert out["completions"] == reference["completions"], f"round {r}, {procs} processes: completions differ"
                assert out["accuracy"] == reference["accuracy"]
                times[procs].append(out)
                print(f"round {r}: {procs} process(es): evaluation {out['seconds']:7.2f} s (whole command {out['wall']:6.1f} s)",
                      flush=True)

    cpu = next((ln.split(":", 1)[1].strip() for ln in Path("/proc/cpuinfo").read_text().splitlines()
                if ln.startswith("model name")), "unknown CPU") if Path("/proc/cpuinfo").is_file() else "unknown CPU"
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(f"\n500 Sudoku test puzzles, LLaDA quickstart preset, greedy, batch {args.batch_size}; 1 process: "
          f"{args.threads} thread(s); 2 processes: {max(1, args.threads // 2)} thread(s) each; {cpu}, "
          f"{os.cpu_count()} cores, load average {load:.1f} at the end")
    for procs in (1, 2):
        secs = [x["seconds"] for x in times[procs]]
        walls = [x["wall"] for x in times[procs]]
        print(f"{procs} process(es), evaluation s:    {_stats(secs)}")
        print(f"{procs} process(es), whole command s: {_stats(walls)}")
    ratio = statistics.median(x["seconds"] for x in times[1]) / statistics.median(x["seconds"] for x in times[2])
    print(f"ratio of medians (1 process / 2 processes): {ratio:.2f}x; accuracy {reference['accuracy']:.4f}; "
          f"per-puzzle completions identical in all {2 * args.rounds} runs")


if __name__ == "__main__":
    main()
