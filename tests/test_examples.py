"""Every shipped example spec passes both validation passes (components, params, cross-checks)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from dare.runspec import validate_spec

EXAMPLES = sorted((Path(__file__).resolve().parents[1] / "examples").glob("*.yaml"))


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
def test_example_spec_validates(path, tmp_path, tiny_llada_dir):
    raw = yaml.safe_load(path.read_text())
    raw["output"]["dir"] = str(tmp_path / "run")
    model_path = str(raw.get("model", {}).get("path", ""))
    if model_path.startswith("runs/"):  # starts from another example's run: a tiny model of its family stands in
        family = next((f for f in ("dream", "sdar", "llada2", "diffusiongemma") if f in path.name), "llada")
        if family == "llada":
            raw["model"]["path"] = str(tiny_llada_dir)
        else:
            from dare.testing import tiny_model

            raw["model"]["path"] = str(tiny_model(family, tmp_path / "start").path)
    validate_spec(raw, source=str(path))


def test_quickstart_rl_selects_on_held_out_training_rows():
    raw = yaml.safe_load((EXAMPLES[0].parent / "quickstart-rl.yaml").read_text())
    train, val = raw["data"]["train"], raw["eval"]["validation"]
    assert raw["train"]["keep_best"] and val["path"] == train["path"]
    assert val["offset"] >= train.get("offset", 0) + train["limit"]  # disjoint from the RL prompts
    assert all(b.get("path") is None for b in raw["eval"]["benchmarks"])  # the test set is only evaluated


def test_demo_rl_start_is_the_short_sft_run():
    """``make demo`` starts RL from the quickstart's checkpoint-250 instead of training examples/quickstart-sft-short.yaml:
    that holds only while both specs train the same way up to step 250 and the quickstart keeps that checkpoint."""
    root = EXAMPLES[0].parent.parent
    full = yaml.safe_load((root / "examples/quickstart.yaml").read_text())
    short = yaml.safe_load((root / "examples/quickstart-sft-short.yaml").read_text())
    make = (root / "Makefile").read_text()
    steps = short["train"]["max_steps"]
    assert f"RL_START := runs/quickstart/checkpoints/checkpoint-{steps}" in make
    assert "quickstart-rl.yaml --set model.path=$(RL_START)" in make
    assert full["output"]["dir"] == "runs/quickstart"
    for key in ("model", "data", "algorithm", "sampler"):
        assert full[key] == short[key], key
    differs = {"max_steps", "eval_steps", "eval_limit", "save_total_limit"}  # eval does not touch the training RNGs
    assert {k: v for k, v in full["train"].items() if k not in differs} == \
        {k: v for k, v in short["train"].items() if k not in differs}
    # a schedule that does not depend on max_steps, and checkpoint-250 saved and not rotated away
    assert full["train"]["lr_scheduler"] == "constant" and not full["train"].get("warmup_ratio")
    saves = full["train"]["max_steps"] // full["train"]["save_steps"]
    assert steps % full["train"]["save_steps"] == 0
    assert full["train"]["save_total_limit"] >= saves - steps // full["train"]["save_steps"] + 1


def test_checkpoint_of_a_longer_constant_lr_run_equals_the_shorter_run(tmp_path, tiny_llada_dir):
    """Weights at step k of a run to 2k steps (constant lr, evaluated at k) are bit-exact those of the same spec run to k steps."""
    import torch
    from safetensors.torch import load_file

    from dare.run import Run
    from dare.runspec import load_spec

    def spec(name, steps, **train):
        raw = {"model": {"path": str(tiny_llada_dir)},
               "data": {"train": {"path": "dare://sudoku/train.parquet", "limit": 64, "chat_template": False,
                                  "prompt_template": "{{ extra_info.puzzle }}",
                                  "response_template": "{{ reward_model.ground_truth }}"}},
               "algorithm": {"name": "sft"},
               "sampler": {"name": "llada", "params": {"gen_length": 17, "block_length": 17, "steps": 17}},
               "train": {"learning_rate": 2e-3, "max_steps": steps, "per_device_batch_size": 8, "lr_scheduler": "constant",
                         "save_steps": 3, "num_threads": 1, "seed": 0, **train},
               "eval": {"batch_size": 8, "benchmarks": [{"name": "sudoku", "limit": 4, "chat_template": False,
                                                         "prompt_template": "{{ extra_info.puzzle }}"}]},
               "output": {"dir": str(tmp_path / name)}}
        (tmp_path / f"{name}.yaml").write_text(yaml.safe_dump(raw))
        Run(load_spec(tmp_path / f"{name}.yaml", check=False), source=str(tmp_path / f"{name}.yaml")).execute(
            train=True, evaluate=False)

    spec("short", 3)
    spec("long", 6, eval_steps=3, eval_limit=4, save_total_limit=2)
    want = load_file(tmp_path / "short" / "model" / "model.safetensors")
    got = load_file(tmp_path / "long" / "checkpoints" / "checkpoint-3" / "model.safetensors")
    assert got.keys() == want.keys()
    assert all(torch.equal(got[k], want[k]) for k in want)
    final = load_file(tmp_path / "long" / "model" / "model.safetensors")
    assert not all(torch.equal(final[k], want[k]) for k in want)  # the longer run did train on
