"""The d1 update and the LLaDA decoder of this tree against another commit's, on the same machine in one run.

What it times, on the quickstart LLaDA (d_model 128, 4 layers, seed 0) and the packaged Sudoku prompts:

* ``update``: the optimizer-step part of a d1 step through DARE's ``GRPOTrainer`` (whole step minus rollout and
  old/reference scoring; ``benchmarks/bench_rl_step.py``'s trainer, every row trained: a fresh model's rewards all
  tie, which would otherwise skip every row), ``--prompts`` x ``--group`` completions of 17 tokens;
* ``decode``: the LLaDA sampler's greedy decoder (``gen_length`` 17, one block, 17 steps, low-confidence
  remasking, per-row generators as evaluation uses) over ``--batch`` prompts.

The two trees are this checkout and ``--baseline-ref`` (any commit, exported with ``git archive`` into a temporary
directory). Each round starts one worker process per tree, in alternating order (baseline first in even rounds),
and each worker builds the same model, warms up, then times ``--steps`` updates and ``--decodes`` decodes in its
own process (CPU seconds of the process, one torch thread: less sensitive than wall time to other jobs on a shared
machine) and prints the medians; the ratio of a round is baseline seconds / candidate seconds (> 1: this tree is
faster). Printed: the CPU, the load average, per tree min / median / max seconds over rounds, and min / median /
max of the per-round ratios. Each worker also prints a checksum of the update's losses and of the decoded tokens:
the two trees must print the same (the optimisation changes no value).

Run: ``python benchmarks/bench_step_overhead.py --baseline-ref COMMIT [--rounds 5] [--threads 1]``.
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
import types

MIN_ROUNDS = 5
HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def _tree_path(tree: str) -> str:
    """``PYTHONPATH`` of a tree: its core and every first-party plugin's sources (ahead of the installed ones)."""
    plugins = os.path.join(tree, "plugins")
    srcs = sorted(os.path.join(plugins, p, "src") for p in os.listdir(plugins)
                  if os.path.isdir(os.path.join(plugins, p, "src")))
    return os.pathsep.join([tree, *srcs])


def worker(args) -> None:
    """Time the update and the decoder with the ``dare`` on ``sys.path``; print one JSON line."""
    import torch

    torch.set_num_threads(args.threads)
    sys.path.insert(0, HERE)
    import bench_rl_step as rl  # the trainer harness (this checkout's), driving the tree's dare

    rl.time = types.SimpleNamespace(perf_counter=time.process_time)  # CPU seconds: less sensitive to machine load

    from dare.randomness import RowGenerators

    ns = argparse.Namespace(steps=args.steps, warmup=1, prompts=args.prompts, group=args.group, accel={},
                            precision="fp32", model=None, long=False)
    losses: list[float] = []
    with tempfile.TemporaryDirectory() as tmp:
        lm = rl.bench_model(tmp, ns)
        rows = rl.load_rows(args.prompts * (args.steps + 1))
        import dare.rl.trainer as trainer_mod

        orig = trainer_mod.GRPOTrainer.training_step

        def step(self, *a, **kw):
            loss = orig(self, *a, **kw)
            losses.append(float(loss))
            return loss

        trainer_mod.GRPOTrainer.training_step = step
        try:
            steps = rl.run_dare(lm, rows, ns, tmp, skip_zero_advantage=False)
        finally:
            trainer_mod.GRPOTrainer.training_step = orig
        update = statistics.median(s["total"] - s["rollout"] - s["scoring"] for s in steps)

        from dare.data import Prompter
        from dare_llada.sampler import LLaDASampler

        prompter = Prompter(lm.tokenizer, "{{ extra_info.puzzle }}", None, chat_template=False)
        texts = [prompter.prompt(r) for r in rl.load_rows(args.batch)]
        enc = lm.tokenizer(texts, return_tensors="pt", padding=True, padding_side="left")
        sampler = LLaDASampler({**rl.SAMPLER, "temperature": 0.0})
        times, checksum = [], 0
        for i in range(args.decodes + 1):
            gen = RowGenerators.keyed(0, "eval", 0, list(range(len(texts))))
            t = time.process_time()
            out = sampler.generate(lm.model, lm.family, lm.tokens, enc["input_ids"], enc["attention_mask"],
                                   generator=gen)
            if i:
                times.append(time.process_time() - t)
            checksum = int(out.sequences.long().sum())
    print(json.dumps({"update": update, "decode": statistics.median(times),
                      "losses": [round(x, 7) for x in losses], "tokens": checksum}))


def run_worker(tree: str, args) -> dict:
    env = {**os.environ, "PYTHONPATH": _tree_path(tree), "OMP_NUM_THREADS": str(args.threads),
           "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    cmd = [sys.executable, os.path.abspath(__file__), "--worker", "--tree", tree, "--threads", str(args.threads),
           "--steps", str(args.steps), "--decodes", str(args.decodes), "--prompts", str(args.prompts),
           "--group", str(args.group), "--batch", str(args.batch)]
    out = subprocess.run(cmd, env=env, capture_output=True, text=True, cwd=tree)
    if out.returncode:
        sys.exit(f"worker for {tree} failed (rc {out.returncode}):\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--baseline-ref", help="the commit to compare against (git rev; required)")
    ap.add_argument("--rounds", type=int, default=MIN_ROUNDS)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--steps", type=int, default=3, help="timed d1 updates per worker (after one warm-up step)")
    ap.add_argument("--decodes", type=int, default=3, help="timed decodes per worker (after one warm-up)")
    ap.add_argument("--prompts", type=int, default=16)
    ap.add_argument("--group", type=int, default=8)
    ap.add_argument("--batch", type=int, default=128, help="prompts per decode")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--tree", default=ROOT, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.worker:
        worker(args)
        return 0
    if not args.baseline_ref:
        ap.error("--baseline-ref is required (the commit to compare this tree against)")
    if args.rounds < MIN_ROUNDS:
        ap.error(f"--rounds must be at least {MIN_ROUNDS}")
    sys.path.insert(0, HERE)
    from bench_rl_step import cpu_model, load_average

    print(f"CPU: {cpu_model()}; threads {args.threads}; load before: {load_average()}")
    with tempfile.TemporaryDirectory() as base:
        archive = subprocess.run(["git", "-C", ROOT, "archive", args.baseline_ref], check=True, capture_output=True)
        subprocess.run(["tar", "-x", "-C", base], input=archive.stdout, check=True)
        res: dict[str, list[dict]] = {"baseline": [], "candidate": []}
        for r in range(args.rounds):
            order = [("baseline", base), ("candidate", ROOT)]
            for name, tree in order if r % 2 == 0 else order[::-1]:
                res[name].append(run_worker(tree, args))
            print(f"round {r + 1}: " + ", ".join(
                f"{k} update {res[k][-1]['update']:.3f} s decode {res[k][-1]['decode']:.3f} s" for k in res))
    print(f"load after: {load_average()}")
    same = all(b["losses"] == c["losses"] and b["tokens"] == c["tokens"]
               for b, c in zip(res["baseline"], res["candidate"]))
    print(f"losses and tokens equal in every round: {same}")
    for phase in ("update", "decode"):
        for name in res:
            xs = [x[phase] for x in res[name]]
            print(f"{phase:6s} {name:9s} s: min {min(xs):.3f} median {statistics.median(xs):.3f} max {max(xs):.3f}")
        ratios = [b[phase] / c[phase] for b, c in zip(res["baseline"], res["candidate"])]
        print(f"{phase:6s} baseline/candidate: min {min(ratios):.3f} median {statistics.median(ratios):.3f} "
              f"max {max(ratios):.3f}")
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
