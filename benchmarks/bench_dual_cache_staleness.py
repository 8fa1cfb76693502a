"""How often the dual cache's stale suffix changes the decoder's choice, step by step (LLaDA and Dream).

Uses the models ``benchmarks/bench_decoding.py`` trains (``runs/bench-decoding-llada/model``,
``runs/bench-decoding-dream-continue/model``; run that first). The Sudoku answer (16 digits + EOS) lies in the first
block of 32 of the 256-token completion, so while it is decoded the dual cache approximates one thing: the keys and
values of the 224 masked positions after the block, computed at the block's refresh step and reused while the block
fills (the exact forward recomputes them at every step: they attend to the block). The prefix cache recomputes them.

For each of ``--puzzles`` test puzzles this replays the *vanilla* (exact, one token per step) decode of the first
block: at each of its 32 steps, from the same state, it computes the block's logits three ways (the family's exact
forward, and its cached forward ``kv_logits`` from the refresh state's cache over ``[s, e)`` (dual) and ``[s, L)``
(prefix)) and records whether the cached step would commit the same (position, token) as the exact one (the most
confident masked position of the block and its argmax, the low-confidence rule), and whether a commit into a blank
cell of the puzzle is a wrong digit (against the solution), for the exact, dual and prefix steps. Printed per family: the fraction of
steps whose choice differs, for the dual and the prefix cache, over steps 1-31 of the block (step 0 is the refresh,
exact by construction) and over the steps where at least half of the puzzle's blank cells are already committed (``half``); and the mean
absolute change of the block's exact log-probabilities between the refresh and each step, as a scale. Accuracy of the
full decoders: ``bench_decoding.py``'s table.

Run: ``python benchmarks/bench_dual_cache_staleness.py [--families llada dream] [--puzzles 64] [--threads 1]``.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_decoding as bench  # noqa: E402

MODELS = {"llada": "runs/bench-decoding-llada/model", "dream": "runs/bench-decoding-dream-continue/model"}


def choice(logits: torch.Tensor, masked: torch.Tensor) -> tuple[int, int]:
    """The low-confidence rule's commit: ``(position, token)`` of the most confident masked position."""
    conf, tok = logits.double().softmax(-1).max(-1)
    conf = torch.where(masked, conf, torch.full_like(conf, -1.0))
    pos = int(conf.argmax())
    return pos, int(tok[pos])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--families", nargs="+", default=["llada", "dream"], choices=sorted(MODELS))
    ap.add_argument("--puzzles", type=int, default=64)
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    from dare.modeling import load_model
    from dare.plugins.manager import get_registry
    from dare.sampling.kv_cache import kv_logits_of
    from dare.sampling.text import encode_prompts

    rows = bench.test_puzzles(args.puzzles)
    B = bench.BLOCK_LENGTH
    for family in args.families:
        path = bench.REPO / MODELS[family]
        if not (path / "config.json").exists():
            raise SystemExit(f"{path} is missing: run benchmarks/bench_decoding.py --families {family} first")
        lm = load_model(path)
        model, fam, tokens, tok = lm.model.eval(), lm.family, lm.tokens, lm.tokenizer
        kv = kv_logits_of(fam)
        sampler_name, base = bench.BASE[family]
        vanilla = get_registry().get("sampler", sampler_name).cls(base)
        differ = {"dual": [0, 0], "prefix": [0, 0], "dual, half": [0, 0], "prefix, half": [0, 0]}
        wrong = {"exact": [0, 0], "dual": [0, 0], "prefix": [0, 0]}  # commits into blank cells: [wrong, all]
        drift = []
        with torch.no_grad():
            for row in rows:
                ids, am = encode_prompts(tok, [str(row["extra_info"]["puzzle"])], tokens.pad_id)
                out = vanilla.generate(model, fam, tokens, ids, am)
                P, comp, step = ids.shape[1], out.completions[0], out.unmask_step[0]
                blank = [c == "0" for c in str(row["extra_info"]["puzzle"])[:16]]
                solution = tok.encode(str(row["reward_model"]["ground_truth"]), add_special_tokens=False)[:16]
                x0 = torch.cat([ids[0], torch.full((bench.GEN_LENGTH,), tokens.mask_id, dtype=ids.dtype)])[None]
                exact0, past = kv(model, x0, None, use_cache=True)
                exact0 = exact0[0, P:P + B].float().log_softmax(-1)
                order = step[:B].argsort()  # block 0's positions in commit order
                for k in range(1, B):
                    x = x0.clone()
                    done = order[:k]
                    x[0, P + done] = comp[done]
                    masked = x[0, P:P + B] == tokens.mask_id
                    exact = fam.logits(model, x)[0, P:P + B]
                    dual = kv(model, x, None, past=past, start=P, end=P + B)[0][0, :B]
                    prefix = kv(model, x, None, past=past, start=P, end=x.shape[1])[0][0, :B]
                    want = choice(exact, masked)
                    half = 2 * sum(1 for j in range(16) if blank[j] and not bool(masked[j])) >= sum(blank)
                    for name, got in (("exact", exact), ("dual", dual), ("prefix", prefix)):
                        pos, token = choice(got, masked)
                        if pos < 16 and blank[pos]:
                            wrong[name][0] += int(token != solution[pos])
                            wrong[name][1] += 1
                        if name == "exact":
                            continue
                        same = (pos, token) == want
                        differ[name][0] += int(not same)
                        differ[name][1] += 1
                        if half:
                            differ[f"{name}, half"][0] += int(not same)
                            differ[f"{name}, half"][1] += 1
                    drift.append(float((exact.float().log_softmax(-1) - exact0)[masked].abs().mean()))
        print(f"{family}: {args.puzzles} puzzles, block 0's steps 1-{B - 1} replayed from the vanilla decode")
        for name, (bad, n) in differ.items():
            print(f"  {name:<13} cached step commits another (position, token) than the exact step: "
                  f"{bad}/{n} = {bad / max(n, 1):.3f}")
        for name, (bad, n) in wrong.items():
            print(f"  {name:<13} step commits a wrong digit into a blank cell: {bad}/{n} = {bad / max(n, 1):.3f}")
        print(f"  mean |exact log-prob change| of the block's masked positions since the refresh: "
              f"{sum(drift) / len(drift):.3f} nats")
    return 0


if __name__ == "__main__":
    sys.exit(main())
