"""Build ``tests/fixtures/parity/fastdllm_dream.json``: the official Fast-dLLM Dream decoder's tokens.

Run by hand (never in CI), from the repository root with DARE's virtualenv::

    python tools/parity/build_fastdllm_dream.py --repo /path/to/Fast-dLLM   # checkout or mirror
    python tools/parity/build_fastdllm_dream.py                             # clones NVlabs/Fast-dLLM

It takes NVlabs/Fast-dLLM at :data:`fastdllm_source.PINNED_COMMIT` (checked with git), builds a tiny Dream in the
official modeling class (``dream/model/modeling_dream.py``, whose cached forward takes ``dual_cache`` and
``replace_position``) with :func:`dare.testing.seeded_weights` (seed recipe; output layer scaled so the model is
confident: threshold 0.9 commits several tokens per step and many confidences round to 1.0), binds
``DreamGenerationMixin.diffusion_generate`` / ``_sample`` of ``dream/model/generation_utils_block.py`` to it as the
official ``dream/eval.py`` does, and runs prefix and dual cache (``dual_cache``), each with
``alg="confidence_threshold"`` (``threshold=0.9``) and with the fixed schedule (``alg="entropy"``: that code ranks
by negative entropy whatever ``alg`` names), greedy, on a few prompts. It stores the prompts, the recipe and the
tokens (JSON; no weights); ``tests/test_parity_fastdllm.py`` rebuilds the model in DARE's class and compares
DARE's Dream decoder with ``refresh_commit="first"`` (that code's refresh rule). For every decode it also stores
how many of the confidences the official code compared were exactly 1.0 in the logits' dtype (float32 here:
that code scores in the logits' dtype, ties included) and their smallest nonzero gap.
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys
import tempfile
import types
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from fastdllm_source import PINNED_COMMIT, URL, official_tree  # noqa: E402

OUT = Path(__file__).resolve().parents[2] / "tests" / "fixtures" / "parity" / "fastdllm_dream.json"
RECIPE = {"family": "dream", "preset": "tiny", "overrides": {"num_hidden_layers": 2, "max_position_embeddings": 128},
          "vocab_size": 256, "tokens": {"mask_id": 250, "eos_id": 2, "pad_id": 3, "eot_id": None, "bos_id": 1},
          "seed": 0, "out_name": "lm_head.weight", "out_scale": 13.0}
DECODE = {"steps": 32, "gen_length": 32, "block_length": 8, "threshold": 0.9}
#: ``--ties``: the cached fixed (entropy) schedule on more prompts of a model scaled until most proposals' entropies
#: are exactly 0 in float32, so the ranking meets exact ties (the official order is ``torch.topk``'s over the columns
#: that code ranks, ``dare_dream.decoding.fastdllm_window``).
OUT_TIES = OUT.with_name("fastdllm_dream_ties.json")
TIES = {"prompts": 36, "prompt_seed": 2, "combos": ("prefix/fixed", "dual/fixed"), "out_scale": 40.0}


def dare_config(recipe: dict):
    """DARE's Dream config of the recipe (its fields are the official ``DreamConfig``'s)."""
    from dare.components import SpecialTokens
    from dare_dream.family import DreamFamily

    return DreamFamily().new_config(recipe["preset"], recipe["overrides"], recipe["vocab_size"],
                                    SpecialTokens(**recipe["tokens"]))


def prompts(n: int = 8, seed: int = 1) -> list[list[int]]:
    g = torch.Generator().manual_seed(seed)
    return [torch.randint(4, 240, (int(k),), generator=g).tolist() for k in torch.randint(3, 9, (n,), generator=g)]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repo", help=f"a checkout or mirror of {URL} holding {PINNED_COMMIT} (default: clone it)")
    ap.add_argument("--ties", action="store_true", help=f"write {OUT_TIES.name}: {TIES['prompts']} prompts, the cached "
                    "fixed schedule only")
    ap.add_argument("--out", default=None, help=f"default {OUT} ({OUT_TIES} with --ties)")
    args = ap.parse_args()
    from dare.testing import seeded_weights

    tree = official_tree(args.repo, Path(tempfile.mkdtemp(prefix="fastdllm-src-")))
    sys.path.insert(0, str(tree / "dream"))
    # transformers 5 dropped the "default" RoPE initialiser the official file looks up: register the standard
    # one (inv_freq_j = theta^(-2j/hd), attention scaling 1), which DARE's Dream computes too
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS
    def default_rope(cfg, device=None, **kw):
        dim = cfg.hidden_size // cfg.num_attention_heads
        exponent = torch.arange(0, dim, 2, dtype=torch.int64, device=device).to(torch.float) / dim
        return 1.0 / (cfg.rope_theta ** exponent), 1.0

    ROPE_INIT_FUNCTIONS.setdefault("default", default_rope)
    from model import generation_utils_block as official
    from model.configuration_dream import DreamConfig
    from model.modeling_dream import DreamModel

    # transformers 5's GenerationConfig.update passes validate() a keyword the official no-op does not take (and
    # its from_model_config fails on the Dream fields: the settings are passed as a DreamGenerationConfig)
    from model import generation_utils

    for cls in (official.DreamGenerationConfig, generation_utils.DreamGenerationConfig):
        cls.validate = lambda self, *a, **kw: None
    recipe = {**RECIPE, "out_scale": TIES["out_scale"]} if args.ties else RECIPE
    config = DreamConfig(**dare_config(recipe).to_dict())
    model = seeded_weights(DreamModel(config), recipe["seed"], recipe["out_name"], recipe["out_scale"],
                           (recipe["tokens"]["mask_id"],))
    model.diffusion_generate = types.MethodType(official.DreamGenerationMixin.diffusion_generate, model)
    model._sample = types.MethodType(official.DreamGenerationMixin._sample, model)
    confs: list[torch.Tensor] = []
    original = official.sample_tokens

    def recording(logits, *a, **kw):
        conf, x0 = original(logits, *a, **kw)
        if not kw.get("neg_entropy"):
            confs.append(conf.detach().flatten())
        return conf, x0

    official.sample_tokens = recording
    rows = prompts(TIES["prompts"], TIES["prompt_seed"]) if args.ties else prompts()
    combos = [c.split("/") for c in TIES["combos"]] if args.ties else itertools.product(("prefix", "dual"),
                                                                                         ("fixed", "threshold"))
    expected: dict[str, list] = {}
    for cache, rule in combos:
        decodes = []
        for p in rows:
            confs.clear()
            t = recipe["tokens"]
            settings = official.DreamGenerationConfig(
                temperature=0.0, top_p=None, top_k=None, max_new_tokens=DECODE["gen_length"], steps=DECODE["steps"],
                alg="confidence_threshold" if rule == "threshold" else "entropy", alg_temp=None,
                mask_token_id=t["mask_id"], pad_token_id=t["pad_id"], bos_token_id=t["bos_id"], eos_token_id=t["eos_id"])
            out = model.diffusion_generate(torch.tensor([p]), generation_config=settings, threshold=DECODE["threshold"],
                                           block_length=DECODE["block_length"], dual_cache=cache == "dual")
            c = torch.cat(confs) if confs else torch.zeros(0)
            d = torch.diff(torch.sort(c).values)
            decodes.append({"tokens": out[0, len(p):].tolist(), "ones": int((c == 1.0).sum()),
                            "min_gap": float(d[d > 0].min()) if bool((d > 0).any()) else None})
        expected[f"{cache}/{rule}"] = decodes
    fixture = {"source": {"repo": URL, "commit": PINNED_COMMIT, "file": "dream/model/generation_utils_block.py"},
               "recipe": recipe, "decode": DECODE, "prompts": rows, "expected": expected}
    out = Path(args.out or (OUT_TIES if args.ties else OUT))
    tmp = out.with_suffix(".tmp")
    tmp.write_text(json.dumps(fixture, indent=1) + "\n")
    tmp.replace(out)
    print(f"wrote {out} ({out.stat().st_size} bytes)")


if __name__ == "__main__":
    main()
