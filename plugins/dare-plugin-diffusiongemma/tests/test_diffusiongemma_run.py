"""`dare run` of a tiny DiffusionGemma spec: SFT (NeMo's recipe) for a few steps, then evaluation with the
``diffusiongemma`` sampler; masking-only objectives and mask-only settings are refused at validation, naming the family."""

from __future__ import annotations

import json

import pytest
import torch
import yaml

from dare.errors import SpecError
from dare.modeling import load_model
from dare.run import Run
from dare.runspec import load_spec, validate_spec

DATA = {"path": "dare://sudoku/train.parquet", "limit": 16, "chat_template": False,
        "prompt_template": "{{ extra_info.puzzle }}", "response_template": "{{ reward_model.ground_truth }}"}


def _spec(out_dir, **algorithm):
    return {
        "model": {"new": {"family": "diffusiongemma", "preset": "tiny"}},
        "data": {"train": DATA},
        "algorithm": {"name": "sft", **algorithm},
        "sampler": {"name": "diffusiongemma", "params": {"gen_length": 24, "max_denoising_steps": 4}},
        "train": {"learning_rate": 2e-3, "max_steps": 3, "per_device_batch_size": 4, "logging_steps": 1,
                  "save_steps": 100},
        "eval": {"batch_size": 4, "benchmarks": [{"name": "sudoku", "limit": 4, "chat_template": False,
                                                  "prompt_template": "{{ extra_info.puzzle }}",
                                                  "reward": {"name": "sudoku", "params": {"require_answer_tags": False}}}]},
        "output": {"dir": str(out_dir)},
    }


def test_dare_run_trains_with_sft_and_evaluates_with_the_canvas_sampler(tmp_path):
    out = tmp_path / "run"
    (tmp_path / "s.yaml").write_text(yaml.safe_dump(_spec(out)))
    run = Run(load_spec(tmp_path / "s.yaml", check=False), source=str(tmp_path / "s.yaml"))
    result = run.execute()
    assert result["train"]["global_step"] == 3
    assert set(result["stages"]) == {"before", "after"} and result["stages"]["after"][0]["n"] == 4
    recs = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    losses = [r["loss"] for r in recs if "loss" in r]
    assert len(losses) == 3 and all(torch.isfinite(torch.tensor(v)) for v in losses)
    trained, init = load_model(run.model_dir), load_model(out / "init-model")
    assert json.loads((out / "model" / "config.json").read_text())["model_type"] == "diffusion_gemma"
    assert any(not torch.equal(v, init.model.state_dict()[k]) for k, v in trained.model.state_dict().items())
    samples = json.loads((out / "samples" / "after-sudoku.json").read_text())
    assert len(samples) == 4 and all("completion" in s for s in samples)


@pytest.mark.parametrize("algorithm, where, words", [
    ({"name": "coupled-grpo"}, "algorithm.name", "uniform noise"),
    ({"name": "sft", "params": {"block_length": 8}}, "algorithm.params.block_length", "uniform noise"),
])
def test_mask_only_settings_are_refused_naming_the_family(tmp_path, algorithm, where, words):
    spec = _spec(tmp_path / "run")
    spec["algorithm"] = algorithm
    if algorithm["name"] == "coupled-grpo":
        spec["rewards"] = [{"name": "sudoku"}]
    with pytest.raises(SpecError) as err:
        validate_spec(spec)
    text = str(err.value)
    assert where in text and "diffusiongemma" in text and words in text
