"""The checks of ``benchmarks/device_check.sh``: one line each, ``<check>: passed|FAILED|skipped: <reason> (...)``.

    python benchmarks/device_check.py CHECK [--dry]

CHECK is one of :data:`CHECKS`. Without a CUDA device (or with ``--dry``) a check that needs one prints
``skipped: <reason>``; where its code can run on the CPU it still runs there at a tiny size (so a dry run
exercises every code path the GPU run takes) and says what it measured, in brackets. Exit status: 0 unless
a check that ran FAILED.

* ``bf16-logits``: per family (llada, dream, sdar, llada2; tiny models, seeded weights), the logits of the
  model cast to bf16 against fp32 on the same inputs: mean relative difference, relative max difference and argmax
  agreement (passes at mean relative difference <= 0.05 and agreement >= 0.85: bf16 keeps ~3 significant digits and
  random tiny models have near-flat logits, so some argmaxes flip; a MoE router flip shows in the max).
* ``fastdllm``: per family (llada, dream), a confident tiny model (:func:`dare.testing.seeded_weights`, output
  layer x13) decoded by the vanilla sampler (one token per step) and by Fast-dLLM's dual cache + threshold 0.9:
  speed ratio (same process, alternating, best of 3) and the fraction of equal completion tokens.
* ``varlen``: packed SFT-style loss of a tiny bf16 LLaDA with flash-attn's ``flash_attn_varlen_func`` against the
  per-segment SDPA loop (:mod:`dare.diffusion.packing`); passes at ``|loss difference| <= 1e-2``.
* ``ddp`` and ``fsdp2`` are run by the shell script (they launch processes); this module only decides
  whether they can run (``python benchmarks/device_check.py ddp --dry`` prints the skip line).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time

import torch

CHECKS = ("bf16-logits", "fastdllm", "varlen", "ddp", "fsdp2")
FAMILIES = ("llada", "dream", "sdar", "llada2")
OUT_LAYER = {"llada": "model.transformer.ff_out.weight", "dream": "lm_head.weight"}


def _why_no_gpu(dry: bool, gpus: int = 1) -> str | None:
    """None when ``gpus`` CUDA devices are usable and this is not a dry run, else the reason."""
    if not torch.cuda.is_available():
        return f"no CUDA device (torch {torch.__version__}, CUDA build {torch.version.cuda})"
    if dry:
        return "dry run (DRY_RUN=1)"
    if torch.cuda.device_count() < gpus:
        return f"needs {gpus} GPUs, {torch.cuda.device_count()} visible (NCCL cannot put 2 ranks on one GPU)"
    return None


def _tiny(family: str, seed: int = 0, out_scale: float = 1.0):
    """``LoadedModel`` of a tiny ``family`` model with :func:`dare.testing.seeded_weights` (fp32, eval)."""
    from dare.testing import seeded_weights, tiny_model

    loaded = tiny_model(family, tempfile.mkdtemp(prefix=f"dare-device-{family}-"), seed=seed)
    out = OUT_LAYER.get(family) or next(n for n, _ in loaded.model.named_parameters() if n.endswith("lm_head.weight"))
    seeded_weights(loaded.model, seed, out, out_scale, (loaded.tokens.mask_id,))
    return loaded


def bf16_logits(device: str) -> list[str]:
    lines = []
    for family in FAMILIES:
        loaded = _tiny(family)
        g = torch.Generator().manual_seed(0)
        ids = torch.randint(4, 200, (4, 32), generator=g).to(device)
        model = loaded.model.to(device)
        with torch.no_grad():
            ref = loaded.family.logits(model, ids, None).float()
            low = loaded.family.logits(model.to(torch.bfloat16), ids, None).float()
        rel = float((ref - low).abs().mean() / ref.abs().mean())
        worst = float((ref - low).abs().max() / ref.abs().max())
        agree = float((ref.argmax(-1) == low.argmax(-1)).float().mean())
        ok = rel <= 0.05 and agree >= 0.85
        lines.append((f"{family}", ok, f"mean |fp32 - bf16| / mean |fp32| {rel:.4f}, relative max {worst:.4f}, "
                                       f"argmax agreement {agree:.3f}"))
    return lines


def _sampler(family: str, **params):
    from dare.plugins.manager import get_registry

    name = {"llada": "llada", "dream": "dream"}[family]
    return get_registry().get("sampler", name).create(params)


def fastdllm(device: str, gen_length: int) -> list[str]:
    lines = []
    block = min(32, gen_length)
    for family in ("llada", "dream"):
        loaded = _tiny(family, out_scale=13.0)
        model = loaded.model.to(device)
        g = torch.Generator().manual_seed(1)
        prompts = torch.randint(4, 200, (8, 16), generator=g).to(device)
        common = {"gen_length": gen_length, "steps": gen_length, "block_length": block}
        if family == "dream":
            common["alg"] = "maskgit_plus"
        vanilla = _sampler(family, **common)
        fast = _sampler(family, **common, cache="dual", threshold=0.9)
        best = {"vanilla": float("inf"), "fast": float("inf")}
        out = {}
        for _ in range(3):
            for key, sampler in (("vanilla", vanilla), ("fast", fast)):
                if device == "cuda":
                    torch.cuda.synchronize()
                t0 = time.perf_counter()
                out[key] = sampler.generate(model, loaded.family, loaded.tokens, prompts).sequences
                if device == "cuda":
                    torch.cuda.synchronize()
                best[key] = min(best[key], time.perf_counter() - t0)
        same = float((out["vanilla"][:, 16:] == out["fast"][:, 16:]).float().mean())
        ratio = best["vanilla"] / best["fast"]
        lines.append((family, ratio > 1.0, f"dual + threshold 0.9 {ratio:.2f}x faster than vanilla "
                                           f"({best['vanilla']:.3f} s vs {best['fast']:.3f} s, gen {gen_length}), "
                                           f"{same:.3f} of tokens equal"))
    return lines


def varlen(device: str, dtype: torch.dtype) -> list[str]:
    import dare.diffusion.packing as packing

    loaded = _tiny("llada")
    model = loaded.model.to(device=device, dtype=dtype)
    g = torch.Generator().manual_seed(2)
    lengths = [7, 19, 32, 12]
    clean = torch.randint(4, 200, (4, 32), generator=g)
    am = torch.zeros((4, 32), dtype=torch.long)
    for i, n in enumerate(lengths):
        am[i, 32 - n:] = 1
    noisy = clean.masked_fill(torch.rand((4, 32), generator=g) < 0.5, loaded.tokens.mask_id)
    target = (noisy == loaded.tokens.mask_id) & am.bool()
    clean, noisy, am, target = clean.to(device), noisy.to(device), am.to(device), target.to(device)

    packed = getattr(packing, "packed_denoiser_logits", None)  # a packing function, or the family's method

    def loss() -> float:
        with torch.no_grad():
            if packed is not None:
                logits = packed(loaded.family, model, noisy, clean, am).float()
            else:
                logits = loaded.family.packed_denoiser_logits(model, noisy, clean, am).float()
        return float(torch.nn.functional.cross_entropy(logits[target], clean[target]))

    kernel, varlen_call = packing.varlen_kernel, packing._varlen_attention
    calls = []

    def counted(*a, **kw):
        calls.append(1)
        return varlen_call(*a, **kw)

    packing._varlen_attention = counted
    try:
        with_varlen = loss()
    finally:
        packing._varlen_attention = varlen_call
    packing.varlen_kernel = lambda query, segments: None  # the per-segment SDPA loop
    try:
        per_segment = loss()
    finally:
        packing.varlen_kernel = kernel
    diff = abs(with_varlen - per_segment)
    used = bool(calls)
    ok = diff <= 1e-2 and (used or device != "cuda")
    return [("llada", ok, f"packed loss {with_varlen:.5f} (flash-attn varlen calls: {len(calls)}) vs per-segment "
                          f"{per_segment:.5f}, |difference| {diff:.2e}")]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("check", choices=CHECKS)
    ap.add_argument("--dry", action="store_true", help="no GPU: run what can run on the CPU, tiny, and skip")
    args = ap.parse_args()
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    torch.set_num_threads(max(1, torch.get_num_threads()))
    why = _why_no_gpu(args.dry, gpus=2 if args.check == "ddp" else 1)
    failed = False

    def report(name: str, rows) -> None:
        nonlocal failed
        for label, ok, text in rows:
            if why is not None:
                print(f"{name} {label}: skipped: {why} (ran on the CPU: {text})", flush=True)
            else:
                print(f"{name} {label}: {'passed' if ok else 'FAILED'} ({text})", flush=True)
                failed |= not ok

    if args.check == "bf16-logits":
        report("bf16-logits", bf16_logits("cpu" if why else "cuda"))
    elif args.check == "fastdllm":
        report("fastdllm", fastdllm("cpu" if why else "cuda", 32 if why else 256))
    elif args.check == "varlen":
        try:
            import flash_attn  # noqa: F401
        except ImportError:
            why = why or "flash-attn is not installed (pip install -e '.[flash]')"
        report("varlen", varlen("cpu" if why else "cuda", torch.float32 if why else torch.bfloat16))
    elif why is not None:  # ddp, fsdp2: launched by the shell script when this prints nothing
        print(f"{args.check}: skipped: {why}", flush=True)
        return 3
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
