"""LLaDA2 block decoding: KV cache of committed blocks vs recomputing the whole window each step.

The release's decoder runs the model on ``x[:, :W]`` (every committed block plus the active one) at each
denoising step; DARE's ``use_cache=True`` runs only the active block against cached keys/values and
spends one extra block-sized forward per block to store it. Both must give the same tokens.

Run: ``python benchmarks/bench_llada2_cache.py [--gen-length 256] [--variant 2.0] [--threads 1]``.
Prints tokens/s of both paths in this process, their ratio, and whether the outputs are identical
(exit status 1 if not). A tiny random model (hidden 64, 2 layers, 8 experts), so the ratio mostly
measures how much less work each step does; larger models gain more.
"""

from __future__ import annotations

import argparse
import sys
import time

import torch


def tiny_model(seed: int = 0):
    """A tiny LLaDA2 with non-degenerate weights (init std 0.2) and a random expert bias, in memory."""
    import dare_llada2.auto  # noqa: F401  (registers the Auto classes)
    from transformers import AutoModel

    from dare.components import SpecialTokens
    from dare_llada2.family import LLaDA2Family

    tokens = SpecialTokens(mask_id=2, eos_id=1, pad_id=1)
    config = LLaDA2Family().new_config("tiny", {"initializer_range": 0.2}, 262, tokens)
    torch.manual_seed(seed)
    model = AutoModel.from_config(config).eval()
    with torch.no_grad():
        for module in model.modules():
            if hasattr(module, "expert_bias"):
                module.expert_bias.normal_(0.0, 0.1)
    return model, tokens


def timed(fn, repeats: int):
    """``(best wall seconds over repeats, last result)``."""
    best, out = float("inf"), None
    for _ in range(repeats):
        t0 = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - t0)
    return best, out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--gen-length", type=int, default=256)
    ap.add_argument("--prompt-length", type=int, default=40)
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--variant", choices=["2.0", "2.1"], default="2.0")
    ap.add_argument("--threshold", type=float, default=0.95)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)

    from dare_llada2.sampler import decode, decode_options

    model, tokens = tiny_model()
    prompt = torch.randint(4, 250, (args.batch, args.prompt_length), generator=torch.Generator().manual_seed(0))
    kw = dict(variant=args.variant, gen_length=args.gen_length, block_length=32, threshold=args.threshold,
              mask_id=tokens.mask_id, eos_id=-1, pad_id=tokens.pad_id)  # eos -1: decode all gen_length tokens
    if args.variant == "2.0":
        kw["steps"] = 32
    else:
        kw.update(editing_threshold=0.9, max_post_steps=4)
    decode(model, prompt, None, decode_options(use_cache=True, **kw))  # warm-up
    t_cache, cached = timed(lambda: decode(model, prompt, None, decode_options(use_cache=True, **kw)), args.repeats)
    t_full, full = timed(lambda: decode(model, prompt, None, decode_options(use_cache=False, **kw)), args.repeats)
    same = torch.equal(cached.completions(), full.completions()) and torch.equal(cached.unmask_step, full.unmask_step)
    n = args.batch * args.gen_length
    print(f"LLaDA2 {args.variant} decoder, tiny model, batch {args.batch}, prompt {args.prompt_length}, "
          f"gen_length {args.gen_length}, block 32, threads {args.threads}")
    print(f"  recompute window : {n / t_full:8.1f} tokens/s  ({t_full:.3f} s, {full.nfe} NFE)")
    print(f"  KV cache         : {n / t_cache:8.1f} tokens/s  ({t_cache:.3f} s, {cached.nfe} NFE + "
          f"{cached.cache_forwards} cache forwards)")
    print(f"  speed-up (cache / recompute): {t_full / t_cache:.2f}x   outputs identical: {same}")
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
