"""`dare run` of online RL on a tiny DiffusionGemma (docs/algorithms.md §3.16): d1 under uniform noise trains from a
briefly supervised model with rollouts from the canvas sampler and evaluates with it; TraceRL replays the sampler's
recorded trajectory under uniform noise; masking-only objectives stay refused."""

from __future__ import annotations

import json

import pytest
import torch
import yaml

from dare.errors import SpecError
from dare.modeling import load_model
from dare.run import Run
from dare.runspec import load_spec, validate_spec

PROMPT = "{{ extra_info.puzzle }}"
EVAL = {"batch_size": 8, "benchmarks": [{"name": "sudoku", "limit": 8, "chat_template": False, "prompt_template": PROMPT,
                                         "reward": {"name": "sudoku", "params": {"require_answer_tags": False}}}]}
SAMPLER = {"name": "diffusiongemma", "params": {"gen_length": 24, "max_denoising_steps": 4}}


def _run(tmp_path, name, spec, evaluate=True):
    spec["output"] = {"dir": str(tmp_path / name)}
    (tmp_path / f"{name}.yaml").write_text(yaml.safe_dump(spec))
    run = Run(load_spec(tmp_path / f"{name}.yaml"), source=str(tmp_path / f"{name}.yaml"))
    if evaluate:
        return run, run.execute()
    run.prepare()
    return run, run.train()


@pytest.fixture(scope="module")
def start(tmp_path_factory):
    """A tiny DiffusionGemma after 40 SFT steps on Sudoku: its completions hold digits, so rewards differ in a group."""
    tmp = tmp_path_factory.mktemp("dg-sft")
    spec = {"model": {"new": {"family": "diffusiongemma", "preset": "tiny"}, "dtype": "float32"},
            "data": {"train": {"path": "dare://sudoku/train.parquet", "limit": 640, "chat_template": False,
                               "prompt_template": PROMPT, "response_template": "{{ reward_model.ground_truth }}"}},
            "algorithm": {"name": "sft"}, "sampler": SAMPLER,
            "train": {"learning_rate": 5e-3, "max_steps": 40, "per_device_batch_size": 16, "lr_scheduler": "constant",
                      "logging_steps": 40, "save_steps": 100}}
    run, _ = _run(tmp, "sft", spec, evaluate=False)
    return run.model_dir


def _rl_spec(start, algorithm, params):
    return {"model": {"path": str(start), "dtype": "float32"},
            "data": {"train": {"path": "dare://sudoku/train.parquet", "limit": 8, "chat_template": False,
                               "prompt_template": PROMPT}},
            "algorithm": {"name": algorithm, "params": {"group_size": 4, **params}},
            "sampler": SAMPLER, "rewards": [{"name": "sudoku", "params": {"require_answer_tags": False}}],
            "train": {"learning_rate": 1e-3, "max_steps": 2, "per_device_batch_size": 2, "logging_steps": 1,
                      "save_steps": 100}}


def _trained(out, steps):
    recs = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    rows = [r for r in recs if "loss" in r]
    assert len(rows) == steps and all(torch.isfinite(torch.tensor(r["loss"])) for r in rows)
    return rows


def test_d1_under_uniform_noise_trains_and_evaluates_with_the_canvas_sampler(tmp_path, start):
    spec = {**_rl_spec(start, "d1", {"num_iterations": 2}), "eval": EVAL}
    run, result = _run(tmp_path, "d1", spec)
    assert result["train"]["global_step"] == 2
    assert set(result["stages"]) == {"before", "after"} and result["stages"]["after"][0]["n"] == 8
    rows = _trained(tmp_path / "d1", 2)
    first = rows[0]
    assert first["reward_std"] > 0 and first["advantage_abs"] > 0  # the rollout's rewards differ within groups
    assert first["nfe/rollout"] > 0 and first["nfe/update"] > 0
    trained, init = load_model(run.model_dir).model.state_dict(), load_model(start).model.state_dict()
    assert any(not torch.equal(v, init[k]) for k, v in trained.items())
    samples = json.loads((tmp_path / "d1" / "samples" / "after-sudoku.json").read_text())
    assert len(samples) == 8 and all("completion" in s for s in samples)


def test_tracerl_replays_the_canvas_trajectory_under_uniform_noise(tmp_path, start):
    spec = _rl_spec(start, "tracerl", {"shrink": 2, "skip_zero_advantage": False})
    run, result = _run(tmp_path, "tracerl", spec, evaluate=False)
    assert result["global_step"] == 2
    rows = _trained(tmp_path / "tracerl", 2)
    # 3 canvases x 4 steps, replayed 2 steps per pass: more than one decoder forward per completion and step
    assert all(r["nfe/update"] > 1 for r in rows)


@pytest.mark.parametrize("algorithm, params, where", [
    ("coupled-grpo", {}, "algorithm.name"),
    ("tracerl", {"value_model": {}}, "algorithm.params.value_model"),
])
def test_masking_only_settings_stay_refused(tmp_path, start, algorithm, params, where):
    spec = _rl_spec(start, algorithm, params)
    spec["output"] = {"dir": str(tmp_path / "x")}
    with pytest.raises(SpecError) as err:
        validate_spec(spec)
    assert where in str(err.value) and "diffusiongemma" in str(err.value)
