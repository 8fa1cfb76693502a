"""`dare run` (train only) for every (objective, installed family) pair: 2 steps on tiny models."""

from __future__ import annotations

import json

import pytest
import yaml

from dare.plugins.manager import first_party, get_registry
from test_grpo_smoke_extra import SMALL as EXTRA  # objectives with their own rollouts or pairing rules run there

#: first-party families (they have tiny presets) whose forward process masks; the uniform-noise family runs the RL
#: objectives that support it in plugins/dare-plugin-diffusiongemma/tests/test_diffusiongemma_rl.py and refuses the
#: others at validation (tests/test_matrix.py holds those refusals and their reasons)
FAMILIES = sorted(n for n, e in get_registry().entries["model_family"].items()
                  if e.distribution in first_party() and e.cls.forward_process == "mask")
#: Per-objective overrides that keep the smoke run small.
SMALL = {"bgpo": {"mc_num": 2}, "espo": {"mc_num": 1, "num_iterations": 2},
         "gdpo": {"quadrature": "gauss-2", "num_iterations": 2}}


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


def sampler_params(family: str) -> tuple[str, dict]:
    """The family's default sampler with a 4-token completion and few steps (block families keep their
    model's block length)."""
    fam = get_registry().get("model_family", family).cls()
    entry = get_registry().get("sampler", fam.default_sampler)
    fields = entry.cls.Params.model_fields
    wanted = {"gen_length": 4, "steps": 4, "denoising_steps": 2, "block_length": 4 if fam.attention == "full" else None}
    return entry.name, {k: v for k, v in wanted.items() if k in fields and v is not None}


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("objective", sorted(n for n, e in get_registry().entries["objective"].items()
                                              if e.plugin == "grpo" and n not in EXTRA))
def test_two_rl_steps(tmp_path, family_models, family, objective):
    sampler, params = sampler_params(family)
    spec = {
        "model": {"path": str(family_models(family))},
        "data": {"train": {"path": "dare://sudoku/train.parquet", "limit": 8, "chat_template": False,
                           "prompt_template": "{{ extra_info.puzzle }}"}},
        "algorithm": {"name": objective, "params": {"group_size": 2, "rollout_sampler": {"temperature": 1.0},
                                                     # a random model's rewards all tie: run the update's rows anyway
                                                     "skip_zero_advantage": False,
                                                     **SMALL.get(objective, {})}},
        "sampler": {"name": sampler, "params": params},
        "rewards": [{"name": "sudoku", "params": {"require_answer_tags": False}}],
        "train": {"learning_rate": 1e-3, "max_steps": 2, "per_device_batch_size": 1, "logging_steps": 1, "save_steps": 100},
        "output": {"dir": str(tmp_path / "run")},
    }
    (tmp_path / "s.yaml").write_text(yaml.safe_dump(spec))
    from dare.run import Run
    from dare.runspec import load_spec

    run = Run(load_spec(tmp_path / "s.yaml"))
    run.prepare()
    assert run.train()["global_step"] == 2  # Run.execute minus evaluation, report and plot
    recs = [json.loads(x) for x in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    steps = [r for r in recs if "loss" in r]
    assert len(steps) == 2 and all(r["nfe/update"] > 0 for r in steps)
    assert (tmp_path / "run" / "model" / "config.json").is_file()
