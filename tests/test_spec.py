"""Run-spec validation: every bad input is refused before any model is loaded, naming the field."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml

from dare.errors import SpecError
from dare.run.rundir import run_record
from dare.runspec import load_spec, spec_hash


def base_spec(model_dir: Path, out_dir: Path) -> dict:
    return {
        "model": {"path": str(model_dir)},
        "data": {
            "train": {
                "path": "dare://sudoku/train.parquet",
                "prompt_template": "{{ extra_info.puzzle }}",
                "response_template": "{{ reward_model.ground_truth }}",
                "chat_template": False,
            }
        },
        "algorithm": {"name": "sft", "params": {"mask_eps": 0.001}},
        "sampler": {"name": "llada", "params": {"gen_length": 16, "block_length": 8, "steps": 16}},
        "train": {"learning_rate": 1e-3, "max_steps": 2, "per_device_batch_size": 2},
        "eval": {"benchmarks": [{"name": "sudoku", "limit": 4, "prompt_template": "{{ extra_info.puzzle }}", "chat_template": False}]},
        "output": {"dir": str(out_dir)},
    }


def write(tmp_path: Path, spec: dict) -> Path:
    p = tmp_path / "spec.yaml"
    p.write_text(yaml.safe_dump(spec))
    return p


def problems(tmp_path, spec) -> dict[str, str]:
    with pytest.raises(SpecError) as exc:
        load_spec(write(tmp_path, spec))
    return dict(exc.value.problems)


def test_valid_spec_passes(tmp_path, tiny_llada_dir):
    spec = load_spec(write(tmp_path, base_spec(tiny_llada_dir, tmp_path / "out")))
    assert spec.algorithm.name == "sft" and spec.train.max_steps == 2


def test_unknown_key_lists_allowed_keys(tmp_path, tiny_llada_dir):
    s = base_spec(tiny_llada_dir, tmp_path / "out")
    s["train"]["learnin_rate"] = 1.0
    p = problems(tmp_path, s)
    assert "train.learnin_rate" in p
    assert "learning_rate" in p["train.learnin_rate"] and "unknown key" in p["train.learnin_rate"]


def test_unknown_component_param_gives_yaml_path(tmp_path, tiny_llada_dir):
    s = base_spec(tiny_llada_dir, tmp_path / "out")
    s["algorithm"]["params"]["clip_eps"] = 0.2
    p = problems(tmp_path, s)
    assert "algorithm.params.clip_eps" in p and "mask_eps" in p["algorithm.params.clip_eps"]


def test_out_of_range_param(tmp_path, tiny_llada_dir):
    s = base_spec(tiny_llada_dir, tmp_path / "out")
    s["algorithm"]["params"]["mask_eps"] = 1.5
    assert "algorithm.params.mask_eps" in problems(tmp_path, s)


def test_unknown_component_name_lists_installed(tmp_path, tiny_llada_dir):
    s = base_spec(tiny_llada_dir, tmp_path / "out")
    s["algorithm"]["name"] = "sfft"
    msg = problems(tmp_path, s)["algorithm.name"]
    assert "installed:" in msg and "sft" in msg and "did you mean 'sft'" in msg


def test_negative_learning_rate(tmp_path, tiny_llada_dir):
    s = base_spec(tiny_llada_dir, tmp_path / "out")
    s["train"]["learning_rate"] = -1e-4
    assert "greater than 0" in problems(tmp_path, s)["train.learning_rate"]


def test_gen_length_not_divisible_by_block_length(tmp_path, tiny_llada_dir):
    s = base_spec(tiny_llada_dir, tmp_path / "out")
    s["sampler"]["params"] = {"gen_length": 17, "block_length": 8, "steps": 16}
    msg = problems(tmp_path, s)["sampler.params.gen_length"]  # the field the message starts with
    assert msg == "gen_length (17) must be a multiple of block_length (8)"  # no truncated params dict


def test_missing_dataset_file(tmp_path, tiny_llada_dir):
    s = base_spec(tiny_llada_dir, tmp_path / "out")
    s["data"]["train"]["path"] = str(tmp_path / "nope.parquet")
    assert "does not exist" in problems(tmp_path, s)["data.train.path"]


def test_parquet_without_needed_column(tmp_path, tiny_llada_dir):
    f = tmp_path / "d.parquet"
    pq.write_table(pa.table({"question": ["a"], "answer": ["b"]}), f)
    s = base_spec(tiny_llada_dir, tmp_path / "out")
    s["data"]["train"]["path"] = str(f)
    msg = problems(tmp_path, s)["data.train.prompt_template"]
    assert "no column 'extra_info'" in msg and "question" in msg


def test_model_dir_without_config(tmp_path, tiny_llada_dir):
    d = tmp_path / "empty-model"
    d.mkdir()
    s = base_spec(d, tmp_path / "out")
    assert "no config.json" in problems(tmp_path, s)["model.path"]


def test_tokenizer_without_mask_token(tmp_path, tiny_llada_dir):
    import shutil

    d = tmp_path / "nomask"
    shutil.copytree(tiny_llada_dir, d)
    from tokenizers import Tokenizer

    tk = Tokenizer.from_file(str(d / "tokenizer.json"))
    vocab = tk.get_vocab()
    # rebuild the tokenizer without the mask token: DARE's byte tokenizer minus <|mdm_mask|>
    from dare.modeling.tokenizer import build_byte_tokenizer

    tok = build_byte_tokenizer({"eos": "<|endoftext|>", "mask": "<|endoftext|>"})
    tok.mask_token = None
    for f in ("tokenizer.json", "tokenizer_config.json"):
        (d / f).unlink()
    tok.save_pretrained(d)
    cfg = json.loads((d / "config.json").read_text())
    cfg.pop("mask_token_id")
    (d / "config.json").write_text(json.dumps(cfg))
    assert "<|mdm_mask|>" in vocab
    msg = problems(tmp_path, base_spec(d, tmp_path / "out"))["model.path"]
    assert "no mask token" in msg and "<|mdm_mask|>" in msg


def test_output_dir_with_a_different_run(tmp_path, tiny_llada_dir):
    out = tmp_path / "out"
    out.mkdir()
    (out / "run.json").write_text(json.dumps({"spec_hash": "0000"}))
    (out / "report.json").write_text("{}")  # the earlier run produced a result
    msg = problems(tmp_path, base_spec(tiny_llada_dir, out))["output.dir"]
    assert "different run" in msg and "overwrite" in msg


def test_same_run_is_accepted_for_resume(tmp_path, tiny_llada_dir):
    out = tmp_path / "out"
    spec = load_spec(write(tmp_path, base_spec(tiny_llada_dir, out)))
    out.mkdir()
    (out / "run.json").write_text(json.dumps({"spec_hash": spec_hash(spec)}))
    load_spec(write(tmp_path, base_spec(tiny_llada_dir, out)))


def test_all_problems_reported_at_once(tmp_path, tiny_llada_dir):
    s = base_spec(tiny_llada_dir, tmp_path / "out")
    s["train"]["learning_rate"] = -1
    s["sampler"]["name"] = "nosuch"
    with pytest.raises(SpecError) as exc:
        load_spec(write(tmp_path, s))
    # every stage at once: the structural problem (pass 1) and the component pass of the sections that parsed
    assert [loc for loc, _ in exc.value.problems] == ["train.learning_rate", "sampler.name"]
    lines = str(exc.value).splitlines()  # a heading, then one indented line per problem
    assert lines[0].startswith("invalid run spec in ") and lines[0].endswith(":") and len(lines) == 3
    assert lines[1].startswith("  train.learning_rate: ") and lines[2].startswith("  sampler.name: ")
    s["train"]["learning_rate"] = "x"
    s["sampler"]["name"] = "llada"
    with pytest.raises(SpecError) as exc:
        load_spec(write(tmp_path, s))
    assert len(str(exc.value).splitlines()) == 1 and str(exc.value).count("train.learning_rate: ") == 1  # one problem
    s["sampler"]["name"] = "nosuch"
    s["train"]["learning_rate"] = 1e-3
    s["algorithm"]["name"] = "nosuch"
    p = problems(tmp_path, s)
    assert {"sampler.name", "algorithm.name"} <= set(p)


def test_overrides(tmp_path, tiny_llada_dir):
    spec = load_spec(write(tmp_path, base_spec(tiny_llada_dir, tmp_path / "out")), overrides=["train.max_steps=7"])
    assert spec.train.max_steps == 7


# --------------------------------------------------------------------------- --set overrides
def test_set_value_that_is_not_yaml_is_taken_literally(tmp_path, tiny_llada_dir):
    path = write(tmp_path, base_spec(tiny_llada_dir, tmp_path / "out"))
    spec = load_spec(path, overrides=["data.train.prompt_template={{ extra_info.puzzle }}", "data.train.system_prompt=a: {b"],
                     check=False)
    assert spec.data.train.prompt_template == "{{ extra_info.puzzle }}"  # YAML would read a mapping (and fail)
    assert spec.data.train.system_prompt == "a: {b"  # not valid YAML at all
    assert load_spec(path, overrides=["train.max_steps=7"], check=False).train.max_steps == 7  # YAML values still parse


def test_set_addresses_list_items(tmp_path, tiny_llada_dir):
    s = base_spec(tiny_llada_dir, tmp_path / "out")
    s["eval"]["benchmarks"] = ["sudoku", {"name": "sudoku", "limit": 2}]
    s["rewards"] = [{"name": "sudoku"}]
    path = write(tmp_path, s)
    spec = load_spec(path, overrides=["eval.benchmarks.0.limit=8", "eval.benchmarks[1].limit=3", "rewards.0.weight=2",
                                      "rewards[0].name=format"], check=False)
    assert [(b.name, b.limit) for b in spec.eval.resolved] == [("sudoku", 8), ("sudoku", 3)]  # bare name expanded
    assert (spec.rewards[0].name, spec.rewards[0].weight) == ("format", 2.0)
    assert load_spec(path, overrides=["eval.benchmarks.1=gsm8k"], check=False).eval.benchmarks[1] == "gsm8k"
    for ov, loc, needle in [
        ("eval.benchmarks.2.limit=8", "--set eval.benchmarks.2.limit", "index 2 is out of range: eval.benchmarks has 2 item(s)"),
        ("eval.benchmarks.first.limit=8", "--set eval.benchmarks.first.limit", "eval.benchmarks is a list; address its items by index"),
        ("train.max_steps.x=1", "--set train.max_steps.x", "cannot override inside train.max_steps"),
    ]:
        with pytest.raises(SpecError) as exc:
            load_spec(path, overrides=[ov], check=False)
        assert len(exc.value.problems) == 1 and exc.value.problems[0][0] == loc and needle in exc.value.problems[0][1]


def test_boolean_for_an_integer_is_refused(tmp_path, tiny_llada_dir):
    path = write(tmp_path, base_spec(tiny_llada_dir, tmp_path / "out"))
    with pytest.raises(SpecError) as exc:
        load_spec(path, overrides=["train.max_steps=true"], check=False)
    assert exc.value.problems == [("train.max_steps", "expected an integer, not a boolean (got True) (set by --set train.max_steps=true)")]
    with pytest.raises(SpecError) as exc:
        load_spec(path, overrides=["train.learning_rate=false"], check=False)
    assert exc.value.problems == [("train.learning_rate", "expected a number, not a boolean (got False) (set by --set train.learning_rate=false)")]


def test_union_errors_show_only_the_mapping_branch(tmp_path, tiny_llada_dir):
    s = base_spec(tiny_llada_dir, tmp_path / "out")
    s["eval"]["benchmarks"] = [{"name": "sudoku", "limit": 0}, {"name": "sudoku", "limits": 2}]
    with pytest.raises(SpecError) as exc:
        load_spec(write(tmp_path, s), check=False)
    assert exc.value.problems[0] == ("eval.benchmarks[0].limit", "Input should be greater than 0 (got 0)")
    assert exc.value.problems[1][0] == "eval.benchmarks[1].limits"
    assert exc.value.problems[1][1].startswith("unknown key; allowed keys here: name, path, offset, limit")
    assert len(exc.value.problems) == 2  # no "eval.benchmarks[0].str: Input should be a valid string"


@pytest.mark.parametrize("family,config,loc,needle", [
    ("llada", {"d_model": 130}, "model.new.config.d_model", "d_model (130) must be divisible by n_heads (4)"),
    ("llada", {"n_layers": -1}, "model.new.config.n_layers", "must not be negative, got -1"),
    ("llada", {"nonsense_key": 3}, "model.new.config.nonsense_key", "llada models have no config key 'nonsense_key'"),
    ("llada2", {"topk_group": 8}, "model.new.config.topk_group", "topk_group (8) must be between 1 and n_group (4)"),
])
def test_new_model_config_is_built_during_validation(tmp_path, tiny_llada_dir, family, config, loc, needle):
    s = base_spec(tiny_llada_dir, tmp_path / "out")
    s["model"] = {"new": {"family": family, "config": config}}
    del s["sampler"], s["eval"]
    p = problems(tmp_path, s)
    assert list(p) == [loc] and needle in p[loc]
    s["model"]["new"]["config"] = {"d_model": 128} if family == "llada" else {"topk_group": 2}
    load_spec(write(tmp_path, s))  # a consistent override passes


def test_run_record_reads_as_the_spec_it_ran(tmp_path, tiny_llada_dir):
    """A run directory's run.json (spec_hash, source, spec) is accepted where a spec file is: same hash."""
    out = tmp_path / "out"
    spec = load_spec(write(tmp_path, base_spec(tiny_llada_dir, out)))
    out.mkdir()
    record = run_record(spec_hash(spec), "spec.yaml", spec.model_dump(mode="json"))  # what dare run writes
    (out / "run.json").write_text(json.dumps(record))
    again = load_spec(out / "run.json", overrides=["eval.batch_size=3"])
    assert again.eval.batch_size == 3 and again.train.max_steps == 2
    assert spec_hash(load_spec(out / "run.json")) == spec_hash(spec)
    # any other mapping with a "spec" key is still read as a spec (and refused naming the unknown keys)
    (tmp_path / "other.json").write_text(json.dumps({"spec": record["spec"], "note": 1}))
    with pytest.raises(SpecError, match="spec: unknown key"):
        load_spec(tmp_path / "other.json")
