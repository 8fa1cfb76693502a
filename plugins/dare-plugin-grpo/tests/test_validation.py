"""Spec validation of RL objectives: clear problems naming the YAML path, before any weights load."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from dare.errors import SpecError
from dare.runspec import validate_spec


def spec(model_dir, tmp_path, **algorithm):
    return {
        "model": {"path": str(model_dir)},
        "data": {"train": {"path": "dare://sudoku/train.parquet", "prompt_template": "{{ extra_info.puzzle }}",
                           "chat_template": False}},
        "algorithm": {"name": "d1", **algorithm},
        "sampler": {"name": "llada", "params": {"gen_length": 8, "block_length": 4, "steps": 8}},
        "rewards": [{"name": "sudoku"}],
        "train": {"learning_rate": 1e-4, "max_steps": 1},
        "output": {"dir": str(tmp_path / "run")},
    }


def problems(raw) -> dict[str, str]:
    with pytest.raises(SpecError) as exc:
        validate_spec(raw)
    return dict(exc.value.problems)


def test_greedy_rollouts_and_sampler_temperature_are_rejected(tiny_llada_dir, tmp_path):
    got = problems(spec(tiny_llada_dir, tmp_path, params={"likelihood_temperature": "sampler"}))
    assert "every advantage is 0" in got["algorithm.params.rollout_sampler"]
    assert "positive temperature" in got["algorithm.params.likelihood_temperature"]


def test_rollout_sampler_overrides_are_validated_by_the_sampler(tiny_llada_dir, tmp_path):
    got = problems(spec(tiny_llada_dir, tmp_path, params={"rollout_sampler": {"temprature": 1.0}}))
    assert "allowed keys here" in got["algorithm.params.rollout_sampler.temprature"]


def test_params_and_missing_sections(tiny_llada_dir, tmp_path):
    raw = spec(tiny_llada_dir, tmp_path, params={"group_size": 1, "clip_eps_low": 1.5})
    got = problems(raw)
    assert "greater than or equal to 2" in got["algorithm.params.group_size"]
    assert "less than 1" in got["algorithm.params.clip_eps_low"]
    raw = spec(tiny_llada_dir, tmp_path, params={"rollout_sampler": {"temperature": 1.0}})
    raw["rewards"] = []
    assert "needs at least one reward" in problems(raw)["rewards"]


def test_valid_spec_and_step_merge(tiny_llada_dir, tmp_path):
    raw = spec(tiny_llada_dir, tmp_path, params={"rollout_sampler": {"temperature": 1.0}})
    validate_spec(raw)
    raw["algorithm"] = {"name": "cj-grpo", "params": {"step_merge": True, "rollout_sampler": {"temperature": 1.0}}}
    validate_spec(raw)  # the llada sampler has blocks: 2 blocks of 4 steps -> shrink 4
    from dare_grpo.objectives import CJGRPO
    from dare_llada.sampler import LLaDASampler

    est = CJGRPO({"step_merge": True}).make_estimator(None, None, LLaDASampler(raw["sampler"]["params"]))
    assert est.params.shrink == 4
    # threshold decoding numbers block nb's steps from nb * block_length: one block per merged transition
    params = {**raw["sampler"]["params"], "steps": 2 * raw["sampler"]["params"]["gen_length"], "threshold": 0.9}
    est = CJGRPO({"step_merge": True}).make_estimator(None, None, LLaDASampler(params))
    assert est.params.shrink == params["block_length"] != params["steps"] // 2
    # the samplers declare their block stride (Sampler.steps_per_block); llada2 counts each row's steps across
    # blocks: no block stride, so step_merge is refused
    from dare_dream.sampler import DreamSampler
    from dare_grpo.objectives import TraceRL
    from dare_llada2.sampler import LLaDA2Sampler
    from dare_sdar.sampler import SDARSampler

    assert LLaDA2Sampler({"gen_length": 64, "steps": 32}).steps_per_block() is None
    assert LLaDA2Sampler({"gen_length": 64, "block_length": 32, "steps": 32}).steps_per_block() is None
    assert SDARSampler({"gen_length": 64, "block_length": 4, "denoising_steps": 3}).steps_per_block() == 3
    assert DreamSampler({"gen_length": 64, "steps": 32}).steps_per_block() == 32  # one block
    assert DreamSampler({"gen_length": 64, "steps": 32, "block_length": 16}).steps_per_block() == 8
    assert DreamSampler({"gen_length": 64, "steps": 32, "block_length": 16, "alg": "maskgit_plus",
                         "threshold": 0.9}).steps_per_block() == 16
    # TraceRL's shrink splits at the sampler's block boundaries
    est = TraceRL({"shrink": 3}).make_estimator(None, None, LLaDASampler(raw["sampler"]["params"]))
    assert (est.params.shrink, est.params.block_stride) == (3, 4)


def test_tree_and_mdpo_rollout_checks_read_the_rollout_sampler(tiny_llada_dir, tmp_path):
    """d-TreeRPO and MDPO decode with the rollout sampler (sampler.params + algorithm.params.rollout_sampler): its
    steps bound the tree's contraction, and parallel decoding (threshold/factor) or a cache, which their decoders
    do not have, is refused at validation instead of failing at the first rollout (d-TreeRPO) or being ignored
    (MDPO)."""
    raw = spec(tiny_llada_dir, tmp_path, name="d-treerpo",
               params={"contraction": 3, "rollout_sampler": {"temperature": 1.0, "steps": 2}})
    got = problems(raw)
    assert "exceeds the rollout sampler's 2 steps (algorithm.params.rollout_sampler.steps)" in got[
        "algorithm.params.contraction"]
    raw = spec(tiny_llada_dir, tmp_path, name="d-treerpo", params={"rollout_sampler": {"temperature": 1.0,
                                                                                         "threshold": 0.9}})
    assert "parallel decoding (threshold)" in problems(raw)["algorithm.params.rollout_sampler.threshold"]
    raw = spec(tiny_llada_dir, tmp_path, name="mdpo", params={"rollout_sampler": {"temperature": 1.0, "factor": 1.0}})
    raw["sampler"]["params"]["cache"] = "dual"
    got = problems(raw)
    assert "no factor: it would be ignored" in got["algorithm.params.rollout_sampler.factor"]
    assert "override it in algorithm.params.rollout_sampler (cache: none)" in got["sampler.params.cache"]
    assert "no cache" in got["sampler.params.cache"]
    raw = spec(tiny_llada_dir, tmp_path, name="mdpo", params={"rollout_sampler": {"temperature": 1.0, "cfg_scale": 2.0}})
    assert "no cfg_scale" in problems(raw)["algorithm.params.rollout_sampler.cfg_scale"]
    validate_spec(spec(tiny_llada_dir, tmp_path, name="mdpo", params={"rollout_sampler": {"temperature": 1.0}}))


def test_the_rollout_sampler_is_resolved_once_with_the_yaml_path_of_each_setting(tiny_llada_dir, tmp_path, monkeypatch):
    """The spec resolution builds the rollout sampler (sampler.params + algorithm.params.rollout_sampler) once; the
    objectives' checks read it, and name the path that set a value."""
    from dare.rl import OnlineRLObjective
    from dare.runspec import resolve_spec, structure

    calls = []
    original = OnlineRLObjective.resolve_rollout_sampler
    monkeypatch.setattr(OnlineRLObjective, "resolve_rollout_sampler",
                        lambda self, sampler, loc: calls.append(loc) or original(self, sampler, loc))
    raw = spec(tiny_llada_dir, tmp_path, name="d-treerpo", params={"rollout_sampler": {"temperature": 0.9, "steps": 4}})
    ctx = resolve_spec(structure(raw))
    assert calls == ["algorithm"]
    rollout = ctx.rollout_sampler
    assert rollout.name == "llada" and rollout.params.temperature == 0.9 and rollout.params.steps == 4
    assert rollout.params.gen_length == 8 and ctx.sampler.params.temperature == 0.0  # evaluation keeps sampler.params
    assert rollout.origin == {"temperature": "algorithm.params.rollout_sampler.temperature",
                              "steps": "algorithm.params.rollout_sampler.steps"}
    assert (rollout.where("steps"), rollout.where("gen_length"), rollout.where("name")) == (
        "algorithm.params.rollout_sampler.steps", "sampler.params.gen_length", "sampler.name")
    assert ctx.problems == []


def test_a_rejected_rollout_override_leaves_no_rollout_sampler(tiny_llada_dir, tmp_path):
    from dare.runspec import resolve_spec, structure

    ctx = resolve_spec(structure(spec(tiny_llada_dir, tmp_path, params={"rollout_sampler": {"steps": 3}})))
    assert ctx.rollout_sampler is None
    assert [loc for loc, _ in ctx.problems] == ["algorithm.params.rollout_sampler.steps"]
    assert "multiple of gen_length / block_length (2)" in ctx.problems[0][1]


def test_tracerl_value_model_with_lora_is_rejected(tiny_llada_dir, tmp_path):
    raw = spec(tiny_llada_dir, tmp_path, params={"value_model": {}, "rollout_sampler": {"temperature": 1.0}})
    raw["algorithm"]["name"] = "tracerl"
    raw["model"]["lora"] = {"r": 4}
    assert "cannot share LoRA adapters" in problems(raw)["algorithm.params.value_model"]
    raw.pop("model")
    raw["model"] = {"path": str(tiny_llada_dir)}
    validate_spec(raw)  # without LoRA the same spec is valid
    configs = Path(__file__).resolve().parents[3] / "examples" / "accelerate"
    raw["launch"] = {"accelerate_config": str(configs / "zero3.yaml"), "num_processes": 8}
    assert "deepspeed-zero3" in problems(raw)["algorithm.params.value_model"]
    raw["launch"]["accelerate_config"] = str(configs / "no-such-config.yaml")
    assert "cannot read accelerate config" in problems(raw)["launch.accelerate_config"]
    raw["launch"]["accelerate_config"] = str(configs / "ddp.yaml")
    validate_spec(raw)
    cfg = json.loads((tiny_llada_dir / "config.json").read_text())
    tied = tmp_path / "tied"
    shutil.copytree(tiny_llada_dir, tied)
    (tied / "config.json").write_text(json.dumps({**cfg, "weight_tying": True}))
    assert "weight_tying" in problems({**raw, "model": {"path": str(tied)}})["algorithm.params.value_model"]
    raw["algorithm"]["params"]["value_model"] = {"learning_rate": 1e39}
    assert "less than or equal to 1" in problems(raw)["algorithm.params.value_model.learning_rate"]
    raw["algorithm"]["params"]["value_model"] = {"lr": 1e-6}
    assert "learning_rate" in problems(raw)["algorithm.params.value_model.lr"]  # unknown key: the allowed ones listed


def test_tracerl_value_model_settings_moved_into_one_mapping(tiny_llada_dir, tmp_path):
    """The flat keys and the true/false switch are refused, each naming where its setting went; ``{}`` is the
    release's settings and null (or no key) trains without a value model."""
    from dare_grpo.objectives.tracerl import TraceRLParams
    from dare_grpo.objectives.tracerl.objective import ValueModelParams

    raw = spec(tiny_llada_dir, tmp_path, params={"rollout_sampler": {"temperature": 1.0}})
    raw["algorithm"]["name"] = "tracerl"
    validate_spec(raw)
    params = raw["algorithm"]["params"]
    for old, new in (("gamma", "gamma"), ("lam", "lam"), ("value_learning_rate", "learning_rate"),
                     ("value_clip_eps", "clip_eps")):
        got = problems({**raw, "algorithm": {"name": "tracerl", "params": {**params, old: 0.5}}})
        assert list(got) == ["algorithm.params"], got
        assert f"algorithm.params.{old} moved to algorithm.params.value_model.{new}" in got["algorithm.params"]
        assert f"value_model: {{{new}: 0.5}}" in got["algorithm.params"]
    for switch in (True, False):
        got = problems({**raw, "algorithm": {"name": "tracerl", "params": {**params, "value_model": switch}}})
        assert f"value_model: {str(switch).lower()} is no longer a switch" in got["algorithm.params.value_model"]
    assert not TraceRLParams().trains_value_model() and not TraceRLParams(value_model=None).trains_value_model()
    on = TraceRLParams(value_model={})
    assert on.trains_value_model()
    assert on.value_model.model_dump() == {"gamma": 1.0, "lam": 1.0, "learning_rate": 5e-6, "clip_eps": 0.2}
    assert on.value_model.model_dump() == {s.param: s.value for s in ValueModelParams.official}
    # preset: official keeps the value model off, and leaves an explicit one at the release's settings
    assert not TraceRLParams(preset="official").trains_value_model()
    assert TraceRLParams(preset="official", value_model={"gamma": 0.9}).value_model.model_dump() == {
        "gamma": 0.9, "lam": 1.0, "learning_rate": 5e-6, "clip_eps": 0.2}


@pytest.mark.parametrize("env", ["ACCELERATE_USE_FSDP", "ACCELERATE_USE_DEEPSPEED"])
def test_tracerl_value_model_under_a_sharded_accelerate_launch_is_refused(tiny_llada_dir, tmp_path, monkeypatch, env):
    """``accelerate launch --config_file fsdp2.yaml dare run`` sets these variables in every process: the value model
    (one process or DDP) is refused by the spec check, before any weights load, whatever the spec's launch says."""
    raw = spec(tiny_llada_dir, tmp_path, params={"value_model": {}, "rollout_sampler": {"temperature": 1.0}})
    raw["algorithm"]["name"] = "tracerl"
    monkeypatch.setenv(env, "true")
    assert "FSDP or DeepSpeed launch" in problems(raw)["algorithm.params.value_model"]
    raw["algorithm"]["params"].pop("value_model")
    validate_spec(raw)  # without the value model the launch is fine
