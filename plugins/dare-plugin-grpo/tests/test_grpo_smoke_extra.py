"""`dare run` (train only) for MDPO, SPG, EBPO, d-TreeRPO, JustGRPO, DiPO and LightningRL over every installed family: a short run
on a tiny model where the pairing applies, and a spec-validation error naming the reason where it does not."""

from __future__ import annotations

import json

import pytest
import torch
import yaml

from dare.plugins.manager import first_party, get_registry


pytestmark = pytest.mark.usefixtures("one_thread")


#: first-party families (they have tiny presets) whose forward process masks; the uniform-noise family runs the RL
#: objectives that support it in plugins/dare-plugin-diffusiongemma/tests/test_diffusiongemma_rl.py and refuses the
#: others at validation (tests/test_matrix.py holds those refusals and their reasons)
FAMILIES = sorted(n for n, e in get_registry().entries["model_family"].items()
                  if e.distribution in first_party() and e.cls.forward_process == "mask")
#: Per-objective overrides that keep a run small, and the metric that shows the objective's own path ran.
SMALL = {
    "mdpo": ({"sample_train_steps": 2}, "mdpo/num_train_steps"),
    "spg": ({}, "spg/elbo_like"),
    "ebpo": ({"mc_num": 2}, "clip_fraction"),
    "d-treerpo": ({"num_tree_samples": 2, "tree_branch_factor": 2, "num_iterations": 2}, "dtreerpo/num_edges"),
    "justgrpo": ({"chunk_size": 2}, "dual_clip_fraction"),
    "dipo": ({"beta": 0.0}, "clip_fraction"),
    # a tiny decoder's groups have equal tokens per forward: keep every group so that the update runs
    "lightningrl": ({"beta": 0.0, "tpf_range_threshold": 0.0, "drop_all_wrong": False}, "nll"),
}
#: Objectives that need full attention (their states have masked later blocks); the reason names it.
FULL_ONLY = {"mdpo": "full-sequence states", "spg": "clean predecessors", "d-treerpo": "full state"}
#: Objectives that need a block-diffusion family (block rounds, tokens per forward of a block decoder).
BLOCK_ONLY = {"dipo": "block-diffusion", "lightningrl": "block-diffusion"}


@pytest.fixture(scope="module")
def family_models(tmp_path_factory):
    from dare.testing import tiny_model

    cache = {}

    def get(family):
        if family not in cache:
            cache[family] = tmp_path_factory.mktemp(family) / "model"
            tiny_model(family, cache[family], seed=0)
        return cache[family]

    return get


def plan(objective: str, family: str) -> tuple[str, dict, dict, str | None]:
    """``(sampler, sampler params, objective params, expected rejection or None)`` for one pairing."""
    reg = get_registry()
    fam = reg.get("model_family", family).cls()
    sampler = fam.default_sampler
    fields = reg.get("sampler", sampler).cls.Params.model_fields
    sparams = {k: v for k, v in {"gen_length": 4, "steps": 4, "denoising_steps": 2}.items() if k in fields}
    if fam.attention == "full" and "block_length" in fields:
        sparams["block_length"] = 2
    # run every row's update (a step whose groups all tie would otherwise skip them): the test asserts nfe/update > 0
    params = {"rollout_sampler": {"temperature": 1.0}, "skip_zero_advantage": False, **SMALL[objective][0]}
    if objective != "d-treerpo":
        params["group_size"] = 2
    if objective == "mdpo" and sampler == "dream":
        params["conf_alg"] = "entropy"  # the Dream recipe's
    if objective in FULL_ONLY and fam.attention != "full":
        return sampler, sparams, params, FULL_ONLY[objective]
    if objective in BLOCK_ONLY and fam.attention != "block":
        return sampler, sparams, params, BLOCK_ONLY[objective]
    if fam.attention == "full" and objective in ("d-treerpo", "justgrpo"):
        sampler = "llada"  # the partial-denoising / left-to-right decoder, over the family's aligned logits
        sparams = {"gen_length": 4, "block_length": 1 if objective == "justgrpo" else 2, "steps": 4}
    elif objective == "justgrpo":
        if "sequential" not in str(fields.get("remasking").annotation if "remasking" in fields else ""):
            return sampler, sparams, params, "not left to right"
        sparams.update(remasking="sequential", denoising_steps=sparams.get("block_length", 4), block_length=4)
    return sampler, sparams, params, None


def _spec(tmp_path, model_dir, objective, sampler, sparams, params, steps):
    return {
        "model": {"path": str(model_dir)},
        "data": {"train": {"path": "dare://sudoku/train.parquet", "limit": 4, "chat_template": False,
                           "prompt_template": "{{ extra_info.puzzle }}"}},
        "algorithm": {"name": objective, "params": params},
        "sampler": {"name": sampler, "params": sparams},
        # first character printable ASCII: about half of a random tiny model's completions, so advantages are not 0
        "rewards": [{"name": "format", "params": {"pattern": "[ -~]"}}],
        "train": {"learning_rate": 1e-3, "max_steps": steps, "per_device_batch_size": 1, "logging_steps": 1,
                  "save_steps": 100},
        "output": {"dir": str(tmp_path / "run")},
    }


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("objective", list(SMALL))
def test_short_run_or_reasoned_rejection(tmp_path, family_models, family, objective):
    from dare.errors import SpecError
    from dare.run import Run
    from dare.runspec import load_spec

    sampler, sparams, params, rejection = plan(objective, family)
    steps = 2
    spec = _spec(tmp_path, family_models(family) if rejection is None else "/nonexistent", objective, sampler, sparams,
                 params, steps)
    if rejection is not None:
        spec["model"] = {"new": {"family": family, "preset": "tiny"}}
    (tmp_path / "s.yaml").write_text(yaml.safe_dump(spec))
    if rejection is not None:
        with pytest.raises(SpecError) as err:
            load_spec(tmp_path / "s.yaml")
        assert any(rejection in msg for _, msg in err.value.problems), err.value.problems
        return
    run = Run(load_spec(tmp_path / "s.yaml"))
    run.prepare()
    assert run.train()["global_step"] == steps
    recs = [json.loads(x) for x in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    logged = [r for r in recs if "loss" in r]
    assert len(logged) == steps and all(r["nfe/update"] > 0 for r in logged)
    assert SMALL[objective][1] in logged[0], sorted(logged[0])
    assert (tmp_path / "run" / "model" / "config.json").is_file()
