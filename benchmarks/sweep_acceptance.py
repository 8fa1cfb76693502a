"""`dare sweep` end to end: 2 RL objectives x 3 seeds from a short SFT start on 4x4 Sudoku.

    python benchmarks/sweep_acceptance.py [--work runs/sweep-acceptance] [--steps 4]

1. a tiny LLaDA trained 40 SFT steps (rewards ~0.2 with a spread, so RL has gradients) is the start;
2. `dare sweep --grid algorithm.name=d1,tracerl --seeds 0,1,2` (local launcher) is killed with SIGKILL while
   its second run trains (after a checkpoint), then run again: the finished run is not retrained (its model
   file untouched), the interrupted run resumes and ends with the weights of an uninterrupted `dare run` of the
   same settings (every tensor bit-exact);
3. the same sweep through submitit's local executor (`--launcher submitit-local`, the SLURM code path) gives
   every run the same after-training scores, losses and weights as the local launcher;
4. both write DIR/comparison.md with the groups' intervals and the paired difference.

Prints one JSON summary (also WORK/acceptance.json); exits 1 when a check fails. Takes ~10-20 minutes on
2 shared CPU cores (process start-up dominates: each run trains a few seconds).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import yaml

SUDOKU = {"prompt_template": "{{ extra_info.puzzle }}", "chat_template": False}
REWARD = {"name": "sudoku", "params": {"require_answer_tags": False}}
DARE = [sys.executable, "-m", "dare.cli"]


def _write(path: Path, spec: dict) -> Path:
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    return path


def sft_spec(work: Path) -> dict:
    return {
        "model": {"new": {"family": "llada", "preset": "tiny"}},
        "data": {"train": {"path": "dare://sudoku/train.parquet", "limit": 128, **SUDOKU,
                           "response_template": "{{ reward_model.ground_truth }}"}},
        "algorithm": {"name": "sft"},
        "sampler": {"name": "llada", "params": {"gen_length": 17, "block_length": 17, "steps": 17}},
        "train": {"learning_rate": 3e-3, "max_steps": 40, "per_device_batch_size": 64, "logging_steps": 10,
                  "save_steps": 40, "num_threads": 1, "seed": 0},
        "output": {"dir": str(work / "sft")},
    }


def rl_spec(work: Path, steps: int) -> dict:
    return {
        "model": {"path": str(work / "sft" / "model")},
        "data": {"train": {"path": "dare://sudoku/train.parquet", "limit": 256, **SUDOKU}},
        "algorithm": {"name": "d1", "params": {"group_size": 4, "rollout_sampler": {"temperature": 1.0}}},
        "sampler": {"name": "llada", "params": {"gen_length": 17, "block_length": 17, "steps": 17}},
        "rewards": [REWARD],
        "train": {"learning_rate": 1e-3, "max_steps": steps, "per_device_batch_size": 4, "logging_steps": 1,
                  "save_steps": 1, "num_threads": 1, "seed": 0},
        "eval": {"before_train": False, "batch_size": 32,
                 "benchmarks": [{"name": "sudoku", "limit": 32, **SUDOKU, "reward": REWARD}]},
        "output": {"dir": str(work / "rl")},
    }


def sweep_cmd(spec: Path, out: Path, *extra: str) -> list[str]:
    return [*DARE, "sweep", str(spec), "--grid", "algorithm.name=d1,tracerl", "--seeds", "0,1,2", "-o", str(out), *extra]


def weights(run_dir: Path) -> dict:
    from safetensors.torch import load_file

    return load_file(str(run_dir / "model" / "model.safetensors"))


def same_weights(a: Path, b: Path) -> bool:
    import torch

    wa, wb = weights(a), weights(b)
    return wa.keys() == wb.keys() and all(torch.equal(wa[k], wb[k]) for k in wa)


def run_numbers(run_dir: Path) -> dict:
    after = json.loads((run_dir / "eval" / "after.json").read_text())["results"]
    losses = [json.loads(x).get("loss") for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return {"after": {r["name"]: [r["accuracy"], r["mean_reward"]] for r in after}, "losses": [x for x in losses if x is not None]}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--work", default="runs/sweep-acceptance")
    ap.add_argument("--steps", type=int, default=4)
    args = ap.parse_args()
    work = Path(args.work).absolute()
    work.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, OMP_NUM_THREADS="1", TOKENIZERS_PARALLELISM="false")
    t0 = time.time()
    checks: dict[str, bool] = {}
    if not (work / "sft" / "model" / "config.json").is_file():
        subprocess.run([*DARE, "run", str(_write(work / "sft.yaml", sft_spec(work)))], check=True, env=env,
                       stdout=subprocess.DEVNULL)
    spec = _write(work / "rl.yaml", rl_spec(work, args.steps))
    local, sub, ref = work / "sweep-local", work / "sweep-submitit", work / "reference"
    for d in (local, sub, ref):
        shutil.rmtree(d, ignore_errors=True)

    # -- local sweep, killed with SIGKILL while its second run trains, then re-run
    victim = local / "algorithm.name=d1,seed=1"
    log = open(work / "sweep-local-1.log", "w")
    proc = subprocess.Popen(sweep_cmd(spec, local), env=env, stdout=log, stderr=subprocess.STDOUT)
    while proc.poll() is None and not (victim / "checkpoints" / "checkpoint-2").is_dir():
        time.sleep(0.05)
    killed_at = sorted(p.name for p in (victim / "checkpoints").glob("checkpoint-*"))
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    time.sleep(3)  # the run died with the sweep (PR_SET_PDEATHSIG): nothing more appears in its directory
    checks["interrupted mid-training"] = not (victim / "model").exists() and bool(killed_at)
    checks["the run died with the sweep"] = sorted(p.name for p in (victim / "checkpoints").glob("checkpoint-*")) == killed_at
    first = local / "algorithm.name=d1,seed=0"
    stamp = (first / "model" / "model.safetensors").stat().st_mtime_ns
    rerun = subprocess.run(sweep_cmd(spec, local), env=env, capture_output=True, text=True)
    (work / "sweep-local-2.log").write_text(rerun.stdout + rerun.stderr)
    checks["re-run finished"] = rerun.returncode == 0
    checks["finished run kept, not retrained"] = ("1 finished, kept" in rerun.stderr
                                                  and (first / "model" / "model.safetensors").stat().st_mtime_ns == stamp)
    vlog = (local / "logs" / f"{victim.name}.log").read_text()
    # from checkpoint-2, or from checkpoint-1 when the kill came while checkpoint-2 was being written
    resumed = re.search(r"resuming from step (\d+)", vlog)
    checks["interrupted run resumed"] = resumed is not None and 1 <= int(resumed.group(1)) < args.steps
    subprocess.run([*DARE, "run", str(spec), "--set", "train.seed=1", "--set", "eval.seed=1", "--set", f"output.dir={ref}"],
                   check=True, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    checks["resumed run bit-exact with an uninterrupted run"] = same_weights(victim, ref)
    checks["grouped comparison written"] = "95% paired-t CI" in (local / "comparison.md").read_text()

    # -- the same sweep through submitit's local executor
    t1 = time.time()
    done = subprocess.run(sweep_cmd(spec, sub, "--launcher", "submitit-local"), env=env, capture_output=True, text=True)
    (work / "sweep-submitit.log").write_text(done.stdout + done.stderr)
    checks["submitit sweep finished"] = done.returncode == 0
    names = [r["name"] for r in json.loads((local / "sweep.json").read_text())["runs"]]
    numbers = {n: run_numbers(local / n) for n in names}
    checks["submitit = local: scores and losses"] = all(run_numbers(sub / n) == numbers[n] for n in names)
    checks["submitit = local: weights"] = all(same_weights(sub / n, local / n) for n in names)
    grouped = json.loads((local / "comparison.json").read_text())["grouped"]
    summary = {"checks": checks, "killed_at": killed_at, "resumed_from_step": resumed and int(resumed.group(1)), "numbers": numbers,
               "groups": [{"label": g["label"], **{f"{s['benchmark']}/{s['metric']}": {k: s[k] for k in (
                   "n", "mean", "std", "ci_low", "ci_high", "values")} for s in g["stats"]}} for g in grouped["groups"]],
               "differences": [{k: d[k] for k in ("b", "a", "benchmark", "metric", "mean", "t_low", "t_high", "item_low",
                                                   "item_high", "p_value", "p_holm", "verdict")} for d in grouped["differences"]],
               "seconds": {"total": round(time.time() - t0), "submitit sweep": round(time.time() - t1)}}
    (work / "acceptance.json").write_text(json.dumps(summary, indent=2))
    print(json.dumps(summary, indent=2))
    return 0 if all(checks.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
