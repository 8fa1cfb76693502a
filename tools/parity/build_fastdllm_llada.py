"""Build ``tests/fixtures/parity/fastdllm_llada.json``: the official Fast-dLLM LLaDA decoders' tokens.

Run by hand (never in CI), from the repository root with DARE's virtualenv (the official modeling file
needs ``einops``)::

    python tools/parity/build_fastdllm_llada.py --repo /path/to/Fast-dLLM   # checkout or mirror
    python tools/parity/build_fastdllm_llada.py                             # clones NVlabs/Fast-dLLM

It takes NVlabs/Fast-dLLM at :data:`fastdllm_source.PINNED_COMMIT` (checked with git), builds a tiny LLaDA
in the official modeling class (``llada/model/modeling_llada.py``, which the cached decoders need for
``replace_position``) with :func:`dare.testing.seeded_weights` (seed recipe; the output layer scaled so
the model is confident: threshold 0.9 commits several tokens per step and proposals' confidences sit
within ~1e-6 of each other near 1.0), runs ``generate``, ``generate_with_prefix_cache`` and
``generate_with_dual_cache`` of ``llada/generate.py`` (fixed schedule and ``threshold=0.9``) on a few
prompts, and stores the prompts, the recipe and the tokens (JSON; no weights). For every decode it also
stores the smallest nonzero gap between two candidates' float64 confidences the official code compared
(``min_gap``), so the fixture shows its near-ties, and whether a step had an exact float64 tie across the
commit boundary (``boundary_tie``: two candidates with equal confidence, one committed; the official
order there is ``torch.topk``'s on the whole sequence, an implementation detail DARE does not copy). ``tests/test_parity_fastdllm.py`` rebuilds the model
in DARE's class from the recipe and compares DARE's tokens.
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys
import tempfile
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from fastdllm_source import PINNED_COMMIT, URL, official_tree  # noqa: E402

OUT = Path(__file__).resolve().parents[2] / "tests" / "fixtures" / "parity" / "fastdllm_llada.json"
#: ``--ties``: the cached fixed-schedule decoders on more prompts, where exact float64 ties across the commit
#: boundary occur (the official order there is ``torch.topk``'s over the release's columns).
OUT_TIES = OUT.with_name("fastdllm_llada_ties.json")
TIES = {"prompts": 36, "prompt_seed": 2, "combos": ("prefix/fixed", "dual/fixed"), "out_scale": 40.0}
RECIPE = {"family": "llada", "preset": "tiny", "overrides": {"n_layers": 2, "max_sequence_length": 128},
          "vocab_size": 262, "tokens": {"mask_id": 2, "eos_id": 1, "pad_id": 1, "eot_id": 3, "bos_id": 0},
          "seed": 0, "out_name": "model.transformer.ff_out.weight", "out_scale": 13.0}
DECODE = {"steps": 32, "gen_length": 32, "block_length": 8, "threshold": 0.9}
FUNCTIONS = {"none": "generate", "prefix": "generate_with_prefix_cache", "dual": "generate_with_dual_cache"}


def dare_config(recipe: dict):
    """DARE's LLaDA config of the recipe (its fields are the official ``LLaDAConfig``'s)."""
    from dare.components import SpecialTokens
    from dare_llada.family import LLaDAFamily

    return LLaDAFamily().new_config(recipe["preset"], recipe["overrides"], recipe["vocab_size"],
                                    SpecialTokens(**recipe["tokens"]))


def prompts(n: int = 8, seed: int = 1) -> list[list[int]]:
    g = torch.Generator().manual_seed(seed)
    return [torch.randint(4, 250, (int(k),), generator=g).tolist() for k in torch.randint(3, 9, (n,), generator=g)]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repo", help=f"a checkout or mirror of {URL} holding {PINNED_COMMIT} (default: clone it)")
    ap.add_argument("--ties", action="store_true", help=f"write {OUT_TIES.name}: {TIES['prompts']} prompts, the cached "
                    "fixed-schedule decoders only")
    ap.add_argument("--out", default=None, help=f"default {OUT} ({OUT_TIES} with --ties)")
    args = ap.parse_args()
    from dare.testing import seeded_weights

    tree = official_tree(args.repo, Path(tempfile.mkdtemp(prefix="fastdllm-src-")))
    sys.path.insert(0, str(tree / "llada"))
    import generate as official  # llada/generate.py
    from model.configuration_llada import LLaDAConfig
    from model.modeling_llada import LLaDAModelLM

    recipe = {**RECIPE, "out_scale": TIES["out_scale"]} if args.ties else RECIPE
    config = LLaDAConfig(**dare_config(recipe).to_dict())
    config.use_cache = False
    model = seeded_weights(LLaDAModelLM(config), recipe["seed"], recipe["out_name"], recipe["out_scale"],
                           (recipe["tokens"]["mask_id"],))
    gaps: list[float] = []
    ties: list[bool] = []
    original = official.get_transfer_index

    def recording(logits, temperature, remasking, mask_index, x, num_transfer_tokens, threshold=None):
        x0, transfer = original(logits, temperature, remasking, mask_index, x, num_transfer_tokens, threshold)
        conf = torch.softmax(logits.to(torch.float64), dim=-1).max(dim=-1).values
        d = torch.diff(torch.sort(conf[mask_index]).values)
        if bool((d > 0).any()):
            gaps.append(float(d[d > 0].min()))
        left = mask_index & ~transfer
        if bool(left.any()) and bool(transfer.any()):  # an exact float64 tie across the commit boundary
            ties.append(float(conf[transfer].min()) == float(conf[left].max()))
        return x0, transfer

    official.get_transfer_index = recording
    rows = prompts(TIES["prompts"], TIES["prompt_seed"]) if args.ties else prompts()
    combos = [c.split("/") for c in TIES["combos"]] if args.ties else itertools.product(FUNCTIONS, ("fixed", "threshold"))
    expected: dict[str, list] = {}
    for cache, rule in combos:
        decodes = []
        for p in rows:
            gaps.clear()
            ties.clear()
            out, nfe = getattr(official, FUNCTIONS[cache])(
                model, torch.tensor([p]), steps=DECODE["steps"], gen_length=DECODE["gen_length"],
                block_length=DECODE["block_length"], temperature=0.0, remasking="low_confidence",
                mask_id=RECIPE["tokens"]["mask_id"], threshold=DECODE["threshold"] if rule == "threshold" else None)
            decodes.append({"tokens": out[0, len(p):].tolist(), "nfe": int(nfe), "min_gap": min(gaps, default=None),
                            "boundary_tie": any(ties)})
        expected[f"{cache}/{rule}"] = decodes
    fixture = {"source": {"repo": URL, "commit": PINNED_COMMIT, "file": "llada/generate.py",
                          "functions": FUNCTIONS},
               "recipe": recipe, "decode": DECODE, "prompts": rows, "expected": expected}
    out = Path(args.out or (OUT_TIES if args.ties else OUT))
    tmp = out.with_suffix(".tmp")
    tmp.write_text(json.dumps(fixture, indent=1) + "\n")
    tmp.replace(out)
    print(f"wrote {out} ({out.stat().st_size} bytes)")


if __name__ == "__main__":
    main()
