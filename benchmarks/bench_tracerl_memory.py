"""Peak memory of TraceRL's update: one row at a time (the release), the activation budget (DARE's default) and every
row at once, on the same rollout.

The rollout is synthetic and the same for every mode: the quickstart LLaDA (d_model 128, 4 layers, seed 0),
``--rows`` completions of ``--gen`` tokens after ``--prompt`` prompt tokens (random token ids), each committed over
``--steps`` denoising steps in its own random order, TraceRL with ``shrink`` 1 (one pass per denoising step) and
advantages spread evenly over [-1, 2]. Each mode runs in a fresh worker process (rounds alternate the order of the
modes), which builds the model and the rollout, records its resident memory, runs one update
(:func:`dare.rl.step.update`: every pass's forward and backward, gradients accumulated) and reports the increase of
its peak resident memory (``ru_maxrss``) over the memory before the update, the update's CPU seconds, the rows per
forward/backward and the loss. Modes:

* ``one_row``: ``micro_batch_size: 1`` (Gen-Verse/dLLM-RL ``train/rl_llada.py`` trains one row per forward);
* ``budget``: ``activation_budget_mib: auto`` (TraceRL's default: the chunk's estimated activations within the
  policy's training state, :meth:`dare.rl.step.StepSettings.micro_batch_size`);
* ``all``: every row at once (``activation_budget_mib: null``, DARE's update before the budget).

Printed: the CPU, per mode min / median / max over rounds of the peak increase (MiB) and of the update's seconds,
the ratio of each mode's median peak increase to ``one_row``'s, and the losses (equal up to float summation order).

Run: ``python benchmarks/bench_tracerl_memory.py [--rounds 5] [--rows 32 --prompt 16 --gen 64 --steps 16]``.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time

MIN_ROUNDS = 5
MODES = ("one_row", "budget", "all")
HERE = os.path.dirname(os.path.abspath(__file__))


def _rss_mib() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def worker(args) -> None:
    """Build the model and the rollout, run one update in ``args.mode``; print one JSON line."""
    import gc

    import torch

    torch.set_num_threads(1)
    from dare.diffusion.estimators import ScoringBatch
    from dare.rl import step
    from dare.rl.rollout import Rollout
    from dare.testing import tiny_model
    from dare_grpo.objectives.tracerl import TraceRL

    class NoStride:
        def steps_per_block(self):
            return None

    with tempfile.TemporaryDirectory() as tmp:
        lm = tiny_model("llada", os.path.join(tmp, "model"), preset="quickstart", seed=0,
                        max_sequence_length=max(128, args.prompt + args.gen))
    model = lm.model.train()
    g = torch.Generator().manual_seed(0)
    N, P, G = args.rows, args.prompt, args.gen
    ids = torch.randint(3, 200, (N, P + G), generator=g)
    unmask = torch.stack([torch.randperm(G, generator=g) * args.steps // G for _ in range(N)])
    batch = ScoringBatch(ids, torch.ones_like(ids), torch.ones(N, G, dtype=torch.bool), P, lm.tokens.mask_id, unmask)
    params = {"group_size": 2, "shrink": 1, "activation_budget_mib": "auto" if args.mode == "budget" else None,
              "micro_batch_size": 1 if args.mode == "one_row" else None}
    objective = TraceRL(params)
    passes = step.draw_passes(objective.make_estimator(None, None, NoStride()), batch, None, objective.params, ())
    advantages = torch.linspace(-1.0, 2.0, N)
    row_bytes, budget = None, None
    if args.mode == "budget":  # as GRPOTrainer resolves activation_budget_mib: auto
        row_bytes, budget = step.row_activation_bytes(model, lm.family), step.training_state_bytes(model)
    settings = step.StepSettings(objective, row_bytes=row_bytes, activation_budget=budget)
    rollout = Rollout(batch, [], torch.zeros(N), {}, advantages, passes=[passes])
    fn = lambda noisy, clean, attn: model(noisy, attention_mask=attn).logits  # noqa: E731
    gc.collect()
    before = _rss_mib()
    t = time.process_time()
    loss, _ = step.update(settings, fn, rollout, 0)
    seconds = time.process_time() - t
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux
    print(json.dumps({"mode": args.mode, "peak_increase_mib": max(peak - before, 0.0), "rss_before_mib": before,
                      "seconds": seconds, "rows_per_chunk": settings.micro_batch_size(batch) or N,
                      "passes": len(passes), "loss": loss}))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=MIN_ROUNDS)
    ap.add_argument("--rows", type=int, default=32)
    ap.add_argument("--prompt", type=int, default=16)
    ap.add_argument("--gen", type=int, default=64)
    ap.add_argument("--steps", type=int, default=16, help="denoising steps of each completion (passes: shrink 1)")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--mode", choices=MODES, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.worker:
        worker(args)
        return 0
    if args.rounds < MIN_ROUNDS:
        ap.error(f"--rounds must be at least {MIN_ROUNDS}")
    sys.path.insert(0, HERE)
    from bench_rl_step import cpu_model, load_average

    print(f"CPU: {cpu_model()}; load before: {load_average()}; {args.rows} rows x ({args.prompt} + {args.gen}) tokens, "
          f"{args.steps} passes")
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    res: dict[str, list[dict]] = {m: [] for m in MODES}
    for r in range(args.rounds):
        for mode in MODES if r % 2 == 0 else MODES[::-1]:
            cmd = [sys.executable, os.path.abspath(__file__), "--worker", "--mode", mode, "--rows", str(args.rows),
                   "--prompt", str(args.prompt), "--gen", str(args.gen), "--steps", str(args.steps)]
            out = subprocess.run(cmd, env=env, capture_output=True, text=True)
            if out.returncode:
                sys.exit(f"worker {mode} failed (rc {out.returncode}):\n{out.stderr[-3000:]}")
            res[mode].append(json.loads(out.stdout.strip().splitlines()[-1]))
        print(f"round {r + 1}: " + ", ".join(f"{m} +{res[m][-1]['peak_increase_mib']:.1f} MiB "
                                             f"{res[m][-1]['seconds']:.2f} s" for m in MODES))
    print(f"load after: {load_average()}")
    base = statistics.median(x["peak_increase_mib"] for x in res["one_row"])
    for mode in MODES:
        mem = [x["peak_increase_mib"] for x in res[mode]]
        sec = [x["seconds"] for x in res[mode]]
        print(f"{mode:8s} rows/chunk {res[mode][0]['rows_per_chunk']:3d}: peak increase MiB min {min(mem):.1f} median "
              f"{statistics.median(mem):.1f} max {max(mem):.1f} (x{statistics.median(mem) / base:.2f} of one_row); "
              f"update s min {min(sec):.2f} median {statistics.median(sec):.2f} max {max(sec):.2f}; "
              f"loss {res[mode][0]['loss']:.9g}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
