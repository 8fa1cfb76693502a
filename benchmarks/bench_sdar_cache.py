"""SDAR block decoding: KV cache of committed blocks vs recomputing the whole prefix at every step.

The cached decoder (the release's ``block_diffusion_generate``) prefills the prompt once, runs each
denoising step on the active block only (``store_kv=False``) and spends one block-sized forward per block
to commit it (``store_kv=True``). The baseline is the same decoder with ``use_cache=False``: every step
runs the model on the whole prefix ``x[:, :(b+1)*block_length]`` under the block-causal mask. Both must
produce the same tokens.

Run: ``python benchmarks/bench_sdar_cache.py [--gen-length 256] [--batch 1] [--threads 1]``.
Prints tokens/s of both paths (same process, best of ``--repeats``), their ratio, NFE and model calls,
and whether the outputs are identical (exit status 1 if not). The model is the ``tiny`` SDAR preset
(hidden 64, 2 layers) with random weights, so the ratio mostly measures how much less work each step
does; the gain grows with the generation length and the model size.
"""

from __future__ import annotations

import argparse
import sys
import time

import torch


def tiny_model(seed: int = 0):
    """The dense ``tiny`` SDAR preset with non-degenerate random weights (init std 0.2), in memory."""
    import dare_sdar.auto  # noqa: F401  (registers the Auto classes)
    from transformers import AutoModel

    from dare.components import SpecialTokens
    from dare_sdar.family import SDARFamily

    tokens = SpecialTokens(mask_id=2, eos_id=1, pad_id=1, eot_id=3)
    config = SDARFamily().new_config("tiny", {"initializer_range": 0.2}, 262, tokens)
    torch.manual_seed(seed)
    return AutoModel.from_config(config).eval(), tokens


def timed(fn, repeats: int):
    """``(best wall seconds over repeats, last result)``."""
    best, out = float("inf"), None
    for _ in range(repeats):
        t0 = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - t0)
    return best, out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gen-length", type=int, default=256)
    parser.add_argument("--prompt-length", type=int, default=32)
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--block-length", type=int, default=4)
    parser.add_argument("--steps", type=int, default=4, help="denoising steps per block")
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)

    from dare_sdar.family import SDARFamily
    from dare_sdar.sampler import SDARSampler

    model, tokens = tiny_model()
    family = SDARFamily()
    prompt = torch.randint(10, 250, (args.batch, args.prompt_length), generator=torch.Generator().manual_seed(1))
    params = {"gen_length": args.gen_length, "block_length": args.block_length, "denoising_steps": args.steps,
              "temperature": 0.0, "remasking": "low_confidence_static", "stop_at_eos": False}

    def run(use_cache: bool):
        return SDARSampler({**params, "use_cache": use_cache}).generate(model, family, tokens, prompt)

    with torch.no_grad():
        run(True)  # warm-up (allocator, kernels)
        t_cache, cached = timed(lambda: run(True), args.repeats)
        t_full, full = timed(lambda: run(False), args.repeats)
    generated = args.batch * args.gen_length
    identical = torch.equal(cached.sequences, full.sequences) and torch.equal(cached.unmask_step, full.unmask_step)
    print(f"SDAR tiny, prompt {args.prompt_length}, gen {args.gen_length}, block {args.block_length}, "
          f"{args.steps} steps/block, batch {args.batch}, {args.threads} thread(s)")
    print(f"  KV cache      : {generated / t_cache:9.1f} tokens/s  ({t_cache:.3f} s, NFE {cached.nfe}, "
          f"{cached.extras['forward_passes']} model calls)")
    print(f"  full prefix   : {generated / t_full:9.1f} tokens/s  ({t_full:.3f} s, NFE {full.nfe}, "
          f"{full.extras['forward_passes']} model calls)")
    print(f"  ratio cache / full prefix: {t_full / t_cache:.2f}x")
    print(f"  outputs identical: {identical}")
    return 0 if identical else 1


if __name__ == "__main__":
    sys.exit(main())
