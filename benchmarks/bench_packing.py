"""Packed (padding-free) vs padded SFT: tokens per second on GSM8K's length mix, same loss.

The same masked-diffusion SFT step (``dare_sft.SFTTrainer.compute_loss`` forward + backward, no optimizer step so
every round sees the same weights) runs on the same batches twice: padded (each batch ``[B, L]`` right-padded to
its longest example, padding attention-masked and out of the loss) and packed (``train.packing: true``: the valid
tokens of the batch in rows of at most ``--max-tokens`` tokens, default the whole batch in one row, with
block-diagonal attention computed one example at a time; ``dare.diffusion.packing``). Both draw each example's mask ratio and masks from the same
keyed generators, so their losses must agree (checked to 1e-5 on every batch).

Data: the first ``--rows`` rows of the GSM8K SFT training file (``$DARE_SHARED_DIR/data/sft/train/
gsm8k_train.parquet``, default ``../shared``): the chat-templated question as prompt, the worked answer + EOS as
response, DARE's byte tokenizer (so sequence lengths are bytes: ~240 to ~1700, median ~570); examples longer than
``--max-length`` are dropped, as ``train.max_length`` would. Model: a fresh LLaDA of the ``quickstart`` preset
(d_model 128, 4 layers), fp32.

Modes alternate inside each round (padded, packed; the order flips every round) for ``--rounds`` rounds so that
machine load hits both. Tokens/s counts real (non-padding) tokens. Prints min/median/max tokens/s per mode, the
per-round ratio packed/padded, the largest loss difference, the CPU model and the load average.

Run: ``OMP_NUM_THREADS=1 python benchmarks/bench_packing.py [--rows 128] [--batch 16] [--rounds 5]``.
Last line: ``packing speedup (packed vs padded SFT tokens/s, median of N rounds): X.XXx, max |loss diff| D``.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import subprocess
import tempfile
import time

import torch

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


def cpu_model() -> str:
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True, check=True).stdout
        for line in out.splitlines():
            if line.startswith("Model name"):
                return line.split(":", 1)[1].strip()
    except (OSError, subprocess.CalledProcessError):
        pass
    return platform.processor() or "unknown"


def gsm8k_path() -> str:
    root = os.environ.get("DARE_SHARED_DIR", os.path.join(os.path.dirname(__file__), "..", "..", "shared"))
    path = os.path.join(root, "data", "sft", "train", "gsm8k_train.parquet")
    if not os.path.isfile(path):
        raise SystemExit(f"GSM8K SFT data not found at {path}; set DARE_SHARED_DIR to the shared directory")
    return path


def examples(tokenizer, eos_id: int, rows: int, max_length: int):
    import pandas as pd

    from dare.data.supervised import tokenize_example
    from dare.components import SpecialTokens

    tokens = SpecialTokens(mask_id=-1, eos_id=eos_id, pad_id=eos_id)
    frame = pd.read_parquet(gsm8k_path()).head(rows)
    out = []
    for _, row in frame.iterrows():
        prompt = tokenizer.apply_chat_template(list(row["prompt"]), add_generation_prompt=True, tokenize=False)
        ex = tokenize_example(tokenizer, prompt, row["extra_info"]["answer"], tokens, max_length)
        if ex is not None:
            ex.index = len(out)
            out.append(ex)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rows", type=int, default=128, help="GSM8K rows (before the max-length filter)")
    ap.add_argument("--batch", type=int, default=16, help="examples per batch")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--max-length", type=int, default=1024, help="drop longer examples (train.max_length)")
    ap.add_argument("--max-tokens", type=int, default=None,
                    help="packed row length (train.packing_max_tokens; default one row per batch)")
    ap.add_argument("--preset", default="quickstart", help="LLaDA preset")
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    if args.rounds < 1:
        raise SystemExit("--rounds must be >= 1")
    torch.set_num_threads(args.threads)
    load_start = os.getloadavg()

    from dare.data.supervised import SupervisedCollator
    from dare.testing import tiny_model
    from dare.trainers import DareConfig
    from dare_sft.objective import SFT
    from dare_sft.trainer import SFTTrainer

    tmp = tempfile.mkdtemp(prefix="bench-packing-")
    lm = tiny_model("llada", os.path.join(tmp, "model"), preset=args.preset, seed=0)
    model = lm.model
    model.train()
    exs = examples(lm.tokenizer, lm.tokens.eos_id, args.rows, args.max_length)
    collate = SupervisedCollator(lm.tokens, pad_in_response=False)  # padding attention-masked, not in the loss
    batches = [collate(exs[i : i + args.batch]) for i in range(0, len(exs) - args.batch + 1, args.batch)]
    real = sum(int(b["attention_mask"].sum()) for b in batches)
    slots = sum(b["input_ids"].numel() for b in batches)
    print(f"{len(exs)} examples in {len(batches)} batches of {args.batch}; real tokens {real}, padded slots {slots} "
          f"(padding {1 - real / slots:.1%}); model llada/{args.preset}, threads {args.threads}")

    trainers = {}
    for mode in ("padded", "packed"):
        cfg = DareConfig(output_dir=os.path.join(tmp, mode), report_to="none", seed=0, packing=mode == "packed",
                         packing_max_tokens=args.max_tokens)
        trainers[mode] = SFTTrainer(model=model, args=cfg, train_dataset=[], family=lm.family, tokens=lm.tokens,
                                    objective=SFT())

    def run(mode: str) -> tuple[float, list[float]]:
        trainer = trainers[mode]
        losses = []
        start = time.perf_counter()
        for batch in batches:
            model.zero_grad(set_to_none=True)
            loss = trainer.compute_loss(model, batch)
            loss.backward()
            losses.append(float(loss.detach()))
        return time.perf_counter() - start, losses

    run("padded")  # warm-up (allocator, RoPE tables)
    run("packed")
    rates: dict[str, list[float]] = {"padded": [], "packed": []}
    ratios, diffs = [], []
    for r in range(args.rounds):
        order = ("padded", "packed") if r % 2 == 0 else ("packed", "padded")
        seconds, losses = {}, {}
        for mode in order:
            seconds[mode], losses[mode] = run(mode)
            rates[mode].append(real / seconds[mode])
        ratios.append(seconds["padded"] / seconds["packed"])
        diffs.append(max(abs(a - b) for a, b in zip(losses["padded"], losses["packed"])))
        print(f"round {r + 1}: padded {rates['padded'][-1]:8.0f} tok/s, packed {rates['packed'][-1]:8.0f} tok/s, "
              f"ratio {ratios[-1]:.2f}x, max |loss diff| {diffs[-1]:.2e}")

    def mmm(xs: list[float], fmt: str) -> str:
        return " / ".join(format(v, fmt) for v in (min(xs), statistics.median(xs), max(xs)))

    print(f"CPU: {cpu_model()}; load average at start {load_start[0]:.2f}, at end {os.getloadavg()[0]:.2f}")
    print(f"padded tokens/s min/median/max: {mmm(rates['padded'], '.0f')}")
    print(f"packed tokens/s min/median/max: {mmm(rates['packed'], '.0f')}")
    print(f"ratio packed/padded min/median/max: {mmm(ratios, '.2f')}")
    worst = max(diffs)
    verdict = "OK" if worst <= 1e-5 else "MISMATCH"
    print(f"loss check (packed vs padded, every batch, every round): max |diff| {worst:.2e} ({verdict}, tolerance 1e-5)")
    print(f"packing speedup (packed vs padded SFT tokens/s, median of {args.rounds} rounds): "
          f"{statistics.median(ratios):.2f}x, max |loss diff| {worst:.1e}")


if __name__ == "__main__":
    main()
