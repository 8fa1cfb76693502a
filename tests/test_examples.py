"""Every shipped example spec passes both validation passes (components, params, cross-checks)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from dare.spec import validate_spec

EXAMPLES = sorted((Path(__file__).resolve().parents[1] / "examples").glob("*.yaml"))


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
def test_example_spec_validates(path, tmp_path, tiny_llada_dir):
    raw = yaml.safe_load(path.read_text())
    raw["output"]["dir"] = str(tmp_path / "run")
    model_path = str(raw.get("model", {}).get("path", ""))
    if model_path.startswith("runs/"):  # starts from another example's run: a tiny model of its family stands in
        family = next((f for f in ("dream", "sdar", "llada2") if f in path.name), "llada")
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
