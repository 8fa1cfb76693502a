"""Fast-dLLM decoding (KV cache, parallel decoding) vs vanilla low-confidence decoding, LLaDA and Dream.

Two tiny models (d 64, 2 layers) are trained with DARE (``dare run``) on
the packaged real 4x4 Sudoku puzzles, in stages: the quickstart's compact SFT
(``examples/bench-decoding-{llada,dream}-warmup.yaml``, 33-token sequences, cheap; Dream, which learns the
puzzles more slowly, continues it in ``examples/bench-decoding-dream-warmup2.yaml``), then Blockwise SFT
(arXiv 2508.19529) with the responses EOS-padded to 256 tokens as LLaDA pads, drawing the blocks that hold only
EOS with weight 0.1 (``padding_block_weight``; ``examples/bench-decoding-{llada,dream}.yaml``; Dream continues
it in ``examples/bench-decoding-dream-continue.yaml``). The run directories (``runs/<spec stem>``) are reused,
so a second run of this script does not retrain (``--retrain`` forces it). Then, in this process, with
the same weights and ``torch`` threads pinned (``--threads``), every decoder generates 256 tokens (blocks of
32, 256 steps for the fixed schedule, greedy) for the same prompts:

* ``vanilla``: the samplers' default decoder, one token per step (LLaDA: low-confidence remasking;
  Dream: ``alg: maskgit_plus``, its low-confidence rule, in blocks of 32);
* ``prefix cache``, ``dual cache`` (``cache``), ``threshold 0.9`` (``threshold``), ``dual + threshold``;
* the same rule at a stricter threshold (``--extra-threshold``, default 0.99): ``threshold 0.99``,
  ``prefix + threshold 0.99``, ``dual + threshold 0.99``, to show what a stricter rule buys back;
* Fast-dLLM's factor rule at ``f = 1`` (``factor``, Theorem 1's bound), alone and with the dual cache;
* Dream only: ``dual cache, first`` and ``dual + threshold 0.9, first``, the dual cache with Fast-dLLM's Dream
  refresh rule (``refresh_commit: first``: the refresh commits the block's first position and the cached steps
  run the block alone), against DARE's default (the refresh commits by the step's rule and the cached steps
  re-run the position before the block).

Each of ``--rounds`` rounds takes the next ``--batch`` test puzzles and decodes them with every decoder in
turn (the order rotates between rounds), so the ratio of a round compares decoders on the same prompts at
nearly the same time; the round's ratio is vanilla seconds / decoder seconds, which is the tokens/s ratio
(every decoder emits ``batch x 256`` tokens). Printed per decoder: tokens/s ratio min / median / max over
rounds, NFE per prompt batch (mean), and exact-solve accuracy over all ``rounds x batch`` puzzles. Greedy
decoding is deterministic, so accuracy differences come from the decoders, not from chance.

After the table, each model's calibration at the answer block's first step (:func:`first_step_calibration`):
the blank cells of the answer by the confidence of the greedy proposal, and how many of them are wrong. The
threshold rule commits every cell above the threshold in that step; a calibrated model is wrong on about
``1 - confidence`` of them, and one wrong cell loses the puzzle.

Then a line summarising the ``--extra-threshold`` rows and one for the dual cache + threshold 0.9 decoder over both
models, conservatively: the smaller of the two median speedups and the accuracy change (in points, vs vanilla) of
larger magnitude. The last lines pick, per family, the fastest decoder (median tokens/s ratio) whose exact-solve is
at most 1 pt below vanilla's: ``best decoder within 1 pt: NAME, X.XXx (family ...)`` (:func:`best_within`).

Run: ``python benchmarks/bench_decoding.py [--rounds 5] [--batch 32] [--threads 1] [--families llada dream]
[--extra-threshold 0.99]``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parent.parent
GEN_LENGTH, BLOCK_LENGTH, STEPS = 256, 32, 256

#: the training stages of each model, in order (run directories: runs/<spec stem>)
SPECS = {
    "llada": ("examples/bench-decoding-llada-warmup.yaml", "examples/bench-decoding-llada.yaml"),
    "dream": ("examples/bench-decoding-dream-warmup.yaml", "examples/bench-decoding-dream-warmup2.yaml",
              "examples/bench-decoding-dream.yaml", "examples/bench-decoding-dream-continue.yaml"),
}
BASE = {
    "llada": ("llada", {"gen_length": GEN_LENGTH, "block_length": BLOCK_LENGTH, "steps": STEPS, "temperature": 0.0}),
    "dream": ("dream", {"gen_length": GEN_LENGTH, "block_length": BLOCK_LENGTH, "steps": STEPS, "temperature": 0.0,
                        "alg": "maskgit_plus"}),
}
DECODERS = {
    "vanilla": {},
    "prefix cache": {"cache": "prefix"},
    "dual cache": {"cache": "dual"},
    "threshold 0.9": {"threshold": 0.9},
    "dual + threshold 0.9": {"cache": "dual", "threshold": 0.9},
    "factor 1": {"factor": 1.0},
    "dual + factor 1": {"cache": "dual", "factor": 1.0},
}
#: decoders of one family only: Dream's cache with Fast-dLLM's Dream refresh rule (``refresh_commit: first``)
FAMILY_DECODERS = {
    "dream": {
        "dual cache, first": {"cache": "dual", "refresh_commit": "first"},
        "dual + threshold 0.9, first": {"cache": "dual", "threshold": 0.9, "refresh_commit": "first"},
    },
}
#: the accuracy a decoder may lose against vanilla and still count as keeping it (exact-solve, points)
KEEP_PT = 1.0
#: confidence bins of the calibration table (upper bound of the last one is inclusive)
BINS = (0.0, 0.5, 0.9, 0.95, 0.99, 0.999, 1.0)


def decoders(extra_threshold: float | None, family: str | None = None) -> dict[str, dict]:
    """:data:`DECODERS` and ``family``'s :data:`FAMILY_DECODERS`, plus threshold / prefix + threshold / dual +
    threshold at ``extra_threshold`` if given."""
    out = dict(DECODERS) | FAMILY_DECODERS.get(family, {})
    if extra_threshold is not None:
        t = extra_threshold
        out.update({f"threshold {t:g}": {"threshold": t}, f"prefix + threshold {t:g}": {"cache": "prefix", "threshold": t},
                    f"dual + threshold {t:g}": {"cache": "dual", "threshold": t}})
    return out


def trained_model(family: str, retrain: bool) -> tuple[Path, float, bool]:
    """``(model dir, training seconds, reused)``: the ``dare run`` stages of ``family`` (:data:`SPECS`) unless done.

    The ``*-warmup*.yaml`` stages are the compact Sudoku SFT, the later ones continue with 256-token EOS-padded
    responses; each stage is skipped when its run directory already holds a final model. The wall time of
    each ``dare run`` call (training plus its small in-run evaluation) is stored next to the run directory
    (``<run dir>.train-seconds.json``), so reused runs still report it.
    """
    total, reused = 0.0, True
    for spec in SPECS[family]:
        run_dir = REPO / "runs" / Path(spec).stem
        timing = run_dir.parent / f"{run_dir.name}.train-seconds.json"
        if (run_dir / "model" / "config.json").exists() and not retrain:
            total += json.loads(timing.read_text())["seconds"] if timing.exists() else float("nan")
            continue
        reused = False
        cmd = [sys.executable, "-m", "dare.cli", "run", spec]
        if retrain:
            cmd += ["--set", "output.overwrite=true"]
        print(f"training {family}: dare run {spec}", flush=True)
        t0 = time.perf_counter()
        subprocess.run(cmd, check=True, cwd=REPO, stdout=subprocess.DEVNULL)
        seconds = time.perf_counter() - t0
        timing.write_text(json.dumps({"seconds": seconds}))
        total += seconds
    return run_dir / "model", total, reused


def test_puzzles(n: int) -> list[dict]:
    import pandas as pd

    from dare import assets

    rows = pd.read_parquet(assets.path("sudoku/test.parquet")).to_dict("records")
    if n > len(rows):
        raise SystemExit(f"--rounds x --batch = {n} puzzles, but the test set has {len(rows)}")
    return rows[:n]


def exact_solves(texts: list[str], rows: list[dict]) -> int:
    from dare.rewards.sudoku import sudoku_score

    return sum(
        sudoku_score(t, str(r["extra_info"]["puzzle"]), str(r["reward_model"]["ground_truth"]), require_tags=False)
        == 1.0
        for t, r in zip(texts, rows)
    )


def first_step_calibration(lm, chunks, gen_length: int) -> list[tuple[float, float, int, int]]:
    """How often the answer's confident proposals are wrong where threshold decoding commits most tokens at once.

    For each puzzle: one exact forward with the whole completion masked (the first step of the answer block,
    the state in which threshold decoding commits most tokens at once), the family's position-aligned logits
    (``ModelFamily.logits``), and for each of the 16 answer positions whose puzzle cell is blank, the greedy
    proposal's probability (the confidence the threshold rule compares) and whether the proposal differs from
    the solution. :returns: ``[(low, high, cells, wrong)]`` per bin of :data:`BINS` (``low <= conf < high``, the
    last bin closed). A calibrated model is wrong on about ``1 - conf`` of the cells of a bin; every such cell
    committed in parallel is a puzzle lost, while the one-token-per-step decoder first commits the surest cell
    and re-predicts the rest.
    """
    tokens, tokenizer = lm.tokens, lm.tokenizer
    conf_all, wrong_all = [], []
    for part, ids, am in chunks:
        x = torch.cat([ids, torch.full((ids.shape[0], gen_length), tokens.mask_id, dtype=ids.dtype)], 1)
        attn = torch.cat([am, torch.ones(ids.shape[0], gen_length, dtype=am.dtype)], 1)
        probs = lm.family.logits(lm.model, x, attn)[:, ids.shape[1]:ids.shape[1] + 16].float().softmax(-1)
        conf, proposal = probs.max(-1)
        for j, row in enumerate(part):
            solution = torch.tensor(tokenizer.encode(str(row["reward_model"]["ground_truth"]), add_special_tokens=False)[:16])
            blank = torch.tensor([c == "0" for c in str(row["extra_info"]["puzzle"])[:16]])
            conf_all.append(conf[j][blank])
            wrong_all.append((proposal[j] != solution)[blank])
    conf, wrong = torch.cat(conf_all), torch.cat(wrong_all)
    out = []
    for k, (lo, hi) in enumerate(zip(BINS[:-1], BINS[1:])):
        sel = (conf >= lo) & ((conf <= hi) if k == len(BINS) - 2 else (conf < hi))
        out.append((lo, hi, int(sel.sum()), int((wrong & sel).sum())))
    return out


def bench_family(family: str, args) -> dict:
    from dare.modeling import load_model
    from dare.plugins.manager import get_registry
    from dare.sampling.text import decode_completions, encode_prompts

    model_dir, train_seconds, reused = trained_model(family, args.retrain)
    lm = load_model(model_dir)
    model, fam, tokens, tokenizer = lm.model.eval(), lm.family, lm.tokens, lm.tokenizer
    sampler_name, base = BASE[family]
    sampler_cls = get_registry().get("sampler", sampler_name).cls
    configs = decoders(args.extra_threshold, family)
    samplers = {name: sampler_cls({**base, **extra}) for name, extra in configs.items()}
    names = list(configs)  # also the rotation order of the rounds
    rows = test_puzzles(args.rounds * args.batch)
    chunks = []
    for r in range(args.rounds):
        part = rows[r * args.batch : (r + 1) * args.batch]
        ids, am = encode_prompts(tokenizer, [str(x["extra_info"]["puzzle"]) for x in part], tokens.pad_id)
        chunks.append((part, ids, am))

    seconds = {name: [] for name in names}
    nfe = {name: [] for name in names}
    solved = {name: 0 for name in names}
    with torch.no_grad():
        for name, smp in samplers.items():  # warm-up: allocator, kernels, RoPE tables
            smp.generate(model, fam, tokens, chunks[0][1][:2], chunks[0][2][:2])
        for r, (part, ids, am) in enumerate(chunks):
            for name in names[r % len(names) :] + names[: r % len(names)]:
                t0 = time.perf_counter()
                out = samplers[name].generate(model, fam, tokens, ids, am)
                seconds[name].append(time.perf_counter() - t0)
                nfe[name].append(out.nfe)
                solved[name] += exact_solves(decode_completions(tokenizer, out.completions, tokens), part)
            print(f"  {family} round {r + 1}/{args.rounds}: vanilla {seconds['vanilla'][-1]:.1f} s, "
                  f"dual + threshold {seconds['dual + threshold 0.9'][-1]:.2f} s", flush=True)
        calibration = first_step_calibration(lm, chunks, GEN_LENGTH)
    n = len(rows)
    result = {"family": family, "train_seconds": train_seconds, "reused": reused, "prompts": n, "decoders": {},
              "calibration": calibration}
    for name in names:
        ratios = [v / s for v, s in zip(seconds["vanilla"], seconds[name])]
        result["decoders"][name] = {
            "ratio": (min(ratios), statistics.median(ratios), max(ratios)),
            "tokens_per_s": args.batch * GEN_LENGTH / statistics.median(seconds[name]),
            "nfe": statistics.mean(nfe[name]),
            "accuracy": solved[name] / n,
        }
    return result


def best_within(res: dict, keep_pt: float = KEEP_PT) -> tuple[str, float, float]:
    """``(decoder, median tokens/s ratio, accuracy change in points)``: the fastest decoder whose exact-solve is at
    most ``keep_pt`` points below vanilla's (vanilla itself, 1.00x, when no accelerated decoder keeps it)."""
    vanilla = res["decoders"]["vanilla"]["accuracy"]
    kept = [(d["ratio"][1], name, 100 * (d["accuracy"] - vanilla)) for name, d in res["decoders"].items()
            if 100 * (d["accuracy"] - vanilla) >= -keep_pt - 1e-9]
    ratio, name, change = max(kept)
    return name, ratio, change


def report(res: dict, args) -> None:
    fam = res["family"]
    trained = "reused run, trained in" if res["reused"] else "trained in"
    print(f"\n{fam}: {res['prompts']} Sudoku test puzzles ({args.rounds} rounds x batch {args.batch}), gen length "
          f"{GEN_LENGTH}, block {BLOCK_LENGTH}, {trained} {res['train_seconds']:.0f} s (dare run, incl. its eval)")
    print(f"  {'decoder':<28} {'tokens/s ratio min/median/max':>31} {'tokens/s':>9} {'NFE/batch':>10} {'exact-solve':>12}")
    vanilla = res["decoders"]["vanilla"]["accuracy"]
    for name, d in res["decoders"].items():
        lo, mid, hi = d["ratio"]
        change = 100 * (d["accuracy"] - vanilla)
        print(f"  {name:<28} {lo:9.2f}x {mid:9.2f}x {hi:9.2f}x {d['tokens_per_s']:9.1f} {d['nfe']:10.1f} "
              f"{d['accuracy']:8.3f} ({change:+.1f} pt)")
    print("  first step of the answer block (exact forward, every answer token masked), blank cells by the "
          "confidence of the greedy proposal:")
    print("    " + "   ".join(f"[{lo:g}, {hi:g}{']' if hi == 1.0 else ')'}: {wrong}/{cells} wrong"
                               for lo, hi, cells, wrong in res["calibration"]))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--families", nargs="+", default=["llada", "dream"], choices=sorted(SPECS))
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--batch", type=int, default=32, help="prompts decoded together (one batch per round)")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--retrain", action="store_true", help="train again even if a finished run exists")
    parser.add_argument("--extra-threshold", type=float, default=0.99,
                        help="also time threshold / prefix + threshold / dual + threshold at this threshold "
                             "(default 0.99; a value <= 0 turns the extra rows off)")
    args = parser.parse_args()
    if args.extra_threshold is not None and args.extra_threshold <= 0:
        args.extra_threshold = None
    elif args.extra_threshold is not None and (args.extra_threshold >= 1 or args.extra_threshold == 0.9):
        raise SystemExit(f"--extra-threshold must lie in (0, 1) and differ from 0.9, got {args.extra_threshold}")
    if args.rounds < 5:
        raise SystemExit("--rounds must be at least 5 (ratios are reported as min/median/max over rounds)")
    torch.set_num_threads(args.threads)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    cpu = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                if line.startswith("model name")), "unknown CPU") if Path("/proc/cpuinfo").exists() else "unknown CPU"
    print(f"bench_decoding: {cpu}, torch {torch.__version__}, {args.threads} thread(s)", flush=True)
    results = [bench_family(f, args) for f in args.families]
    for res in results:
        report(res, args)
    best = [res["decoders"]["dual + threshold 0.9"] for res in results]
    vanilla = [res["decoders"]["vanilla"]["accuracy"] for res in results]
    speedup = min(d["ratio"][1] for d in best)
    changes = [100 * (d["accuracy"] - v) for d, v in zip(best, vanilla)]
    change = max(changes, key=abs)
    if args.extra_threshold is not None:
        t = args.extra_threshold
        parts = []
        for name in (f"dual + threshold {t:g}", f"threshold {t:g}"):
            rows = [res["decoders"][name] for res in results]
            worst = max((100 * (d["accuracy"] - v) for d, v in zip(rows, vanilla)), key=abs)
            parts.append(f"{name} {min(d['ratio'][1] for d in rows):.2f}x, accuracy change {worst:+.1f} pt")
        print(f"at threshold {t:g} (smaller speedup, larger change of the models): " + "; ".join(parts))
    print(f"decoding speedup (dual+threshold vs vanilla): {speedup:.2f}x, accuracy change: {change:+.1f} pt")
    for res in results:
        name, ratio, delta = best_within(res)
        print(f"best decoder within {KEEP_PT:g} pt: {name}, {ratio:.2f}x (family {res['family']}, exact-solve "
              f"{res['decoders'][name]['accuracy']:.3f} vs vanilla {res['decoders']['vanilla']['accuracy']:.3f}, "
              f"{delta:+.1f} pt)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
