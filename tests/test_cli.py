"""The CLI: bad input gives one paragraph naming the field, exit status 2, no traceback, no files."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from test_spec import base_spec


def _write(tmp_path: Path, spec: dict) -> str:
    p = tmp_path / "spec.yaml"
    p.write_text(yaml.safe_dump(spec))
    return str(p)


def _assert_one_paragraph(err: str, *needles: str):
    assert err.startswith("error: "), err
    assert "Traceback" not in err
    # one paragraph: no blank line; several problems are indented lines under the heading
    assert "\n\n" not in err.strip() and all(ln.startswith("  ") for ln in err.strip().splitlines()[1:]), err
    for n in needles:
        assert n in err, (n, err)


CASES = {
    "unknown key": (lambda s, t: s["train"].update(max_step=3), ["train.max_step", "unknown key", "max_steps"]),
    "missing dataset": (lambda s, t: s["data"]["train"].update(path=str(t / "missing.parquet")), ["data.train.path", "does not exist"]),
    "gen_length vs block_length": (
        lambda s, t: s["sampler"].update(params={"gen_length": 10, "block_length": 4, "steps": 10}),
        ["sampler.params", "gen_length (10) must be a multiple of block_length (4)"],
    ),
    "negative learning rate": (lambda s, t: s["train"].update(learning_rate=-0.1), ["train.learning_rate", "greater than 0"]),
    "unknown objective": (lambda s, t: s["algorithm"].update(name="dpo-typo"), ["algorithm.name", "installed:", "sft"]),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_bad_spec_one_paragraph_and_no_files(case, tmp_path, tiny_llada_dir, run_cli):
    spec = base_spec(tiny_llada_dir, tmp_path / "out")
    CASES[case][0](spec, tmp_path)
    path = _write(tmp_path, spec)
    code, _, err = run_cli("validate", path)
    assert code == 2
    _assert_one_paragraph(err, *CASES[case][1])
    code, _, err = run_cli("run", path)
    assert code == 2
    _assert_one_paragraph(err, *CASES[case][1])
    assert not (tmp_path / "out").exists()


def test_model_dir_without_config(tmp_path, run_cli):
    (tmp_path / "m").mkdir()
    code, _, err = run_cli("validate", _write(tmp_path, base_spec(tmp_path / "m", tmp_path / "out")))
    assert code == 2
    _assert_one_paragraph(err, "model.path", "no config.json")
    code, _, err = run_cli("generate", "--model", str(tmp_path / "m"), "--prompt", "hi")
    assert code == 2
    _assert_one_paragraph(err, "no config.json")


def test_output_dir_holding_another_run_is_left_alone(tmp_path, tiny_llada_dir, run_cli):
    out = tmp_path / "out"
    out.mkdir()
    (out / "run.json").write_text(json.dumps({"spec_hash": "feedbeef"}))
    (out / "precious.txt").write_text("keep me")
    code, _, err = run_cli("run", _write(tmp_path, base_spec(tiny_llada_dir, out)))
    assert code == 2
    _assert_one_paragraph(err, "output.dir", "different run")
    assert (out / "precious.txt").read_text() == "keep me"
    assert json.loads((out / "run.json").read_text()) == {"spec_hash": "feedbeef"}


def test_missing_spec_file(run_cli, tmp_path):
    code, _, err = run_cli("validate", str(tmp_path / "nope.yaml"))
    assert code == 2
    _assert_one_paragraph(err, "does not exist")


def test_validate_ok(tmp_path, tiny_llada_dir, run_cli):
    code, out, _ = run_cli("validate", _write(tmp_path, base_spec(tiny_llada_dir, tmp_path / "out")))
    assert code == 0 and "valid" in out
    assert not (tmp_path / "out").exists()


def test_generate_prints_text_and_trajectory(tiny_llada_dir, run_cli):
    code, out, err = run_cli("generate", "--model", str(tiny_llada_dir), "--prompt", "0321003004002100", "--no-chat",
                             "--param", "gen_length=8", "--param", "block_length=4", "--param", "steps=4", "--json")
    assert code == 0, err
    data = json.loads(out)
    assert data["nfe"] == 4
    assert sorted(data["unmask_step"][0]) == [0, 0, 1, 1, 2, 2, 3, 3]
    code, _, err = run_cli("generate", "--model", str(tiny_llada_dir), "--prompt", "x", "--param", "gen_length=7",
                           "--param", "block_length=4")
    assert code == 2
    _assert_one_paragraph(err, "--param", "gen_length (7)")


def test_create_model_refuses_non_empty_dir(tmp_path, run_cli):
    (tmp_path / "m").mkdir()
    (tmp_path / "m" / "x").write_text("x")
    code, _, err = run_cli("create-model", "llada", str(tmp_path / "m"))
    assert code == 2
    _assert_one_paragraph(err, "not empty", "--overwrite")
    code, out, _ = run_cli("create-model", "llada", str(tmp_path / "m2"), "--set", "n_layers=1")
    assert code == 0 and "parameters" in out
    assert json.loads((tmp_path / "m2" / "config.json").read_text())["n_layers"] == 1


@pytest.fixture(scope="module")
def block_models(tmp_path_factory):
    """Tiny SDAR (block size 4) and LLaDA2 (family default block size 32) checkpoints."""
    from dare.testing import tiny_model

    d = tmp_path_factory.mktemp("block-models")
    tiny_model("sdar", d / "sdar")
    tiny_model("llada2", d / "llada2")
    return d


def test_generate_runs_the_spec_sampler_checks(tiny_llada_dir, block_models, run_cli):
    sdar, llada2 = str(block_models / "sdar"), str(block_models / "llada2")
    cases = [
        # both block samplers decode any block family (one KV-cache interface), under its block size
        (["--model", sdar, "--sampler", "llada2", "--param", "block_length=8"],
         ["--param block_length: block_length 8 differs from the block size 4", "set it to 4"]),
        (["--model", sdar, "--param", "gen_length=6", "--param", "block_length=6"],
         ["--param block_length: block_length (6) must be a multiple of the model's block size 4",
          "--param gen_length: gen_length (6) must be a multiple of the model's block size 4"]),
        (["--model", llada2, "--param", "block_length=16"], ["--param block_length", "differs from the block size 32",
                                                             "set it to 32"]),
        (["--model", str(tiny_llada_dir), "--sampler", "sdar"], ["--sampler", "'llada' uses full attention; use 'llada'"]),
        (["--model", "/missing/dir"], ["--model: no such directory '/missing/dir'"]),
        (["--model", "./missing"], ["--model: no such directory './missing'"]),
    ]
    for args, needles in cases:
        code, _, err = run_cli("generate", *args, "--prompt", "hi")
        assert code == 2, (args, err)
        _assert_one_paragraph(err, *needles)
    # the same sampler check in a spec
    spec = {"model": {"path": sdar}, "sampler": {"name": "llada2", "params": {"block_length": 8}},
            "output": {"dir": str(block_models / "out")}}
    code, _, err = run_cli("validate", _write(block_models, spec))
    assert code == 2
    _assert_one_paragraph(err, "sampler.params.block_length: block_length 8 differs from the block size 4")


def test_create_model_checks_config_overrides(tmp_path, run_cli):
    for sets, needles in [
        (["d_model=130"], ["--set d_model: d_model (130) must be divisible by n_heads (4)"]),
        (["nonsense_key=3", "n_layers=-1"], ["--set nonsense_key: llada models have no config key 'nonsense_key'",
                                             "--set n_layers: must not be negative, got -1"]),
    ]:
        code, _, err = run_cli("create-model", "llada", str(tmp_path / "m"), *[a for s in sets for a in ("--set", s)])
        assert code == 2, err
        _assert_one_paragraph(err, *needles)
    assert not (tmp_path / "m").exists()


def test_validate_set_literal_template_and_list_item(tmp_path, tiny_llada_dir, run_cli):
    path = _write(tmp_path, base_spec(tiny_llada_dir, tmp_path / "out"))
    code, out, err = run_cli("validate", path, "--set", "data.train.prompt_template={{ extra_info.puzzle }}",
                             "--set", "eval.benchmarks[0].limit=8")
    assert code == 0 and "valid" in out, err
    code, _, err = run_cli("validate", path, "--set", "eval.benchmarks.1.limit=8")
    assert code == 2
    _assert_one_paragraph(err, "--set eval.benchmarks.1.limit: index 1 is out of range: eval.benchmarks has 1 item(s)")


@pytest.mark.parametrize("prompt", ["\udcff\udcfe bad", "x\ud800y"])
def test_generate_refuses_a_prompt_that_is_not_utf8(prompt, tmp_path, run_cli):
    # bytes that are not UTF-8 on the command line reach Python as lone surrogates: an error, not a traceback
    code, _, err = run_cli("generate", "--model", str(tmp_path / "m"), "--prompt", "ok", "--prompt", prompt)
    assert code == 2
    _assert_one_paragraph(err, "prompt 2", "not valid UTF-8")


@pytest.mark.parametrize("key", ["activation_budget_mib", "group_size", "value_model.gamma"])
def test_component_number_param_refuses_a_boolean(key):
    # `activation_budget_mib: true` was read as 1 MiB (and value_model.gamma: true as 1.0), silently
    import pydantic
    from dare_grpo.objectives.tracerl.objective import TraceRLParams

    value = {"value_model": {"gamma": True}} if key == "value_model.gamma" else {key: True}
    with pytest.raises(pydantic.ValidationError, match="not a boolean"):
        TraceRLParams.model_validate(value)
    TraceRLParams.model_validate({"skip_zero_advantage": False, "activation_budget_mib": "auto"})  # bools stay bools
