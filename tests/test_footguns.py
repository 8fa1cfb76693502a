"""Footguns for a new user: files under the umask, the spec keys a refused output.dir differs in,
`dare schema` printing instead of overwriting the committed schema, local dataset folders, tests that never
depend on the checkout's runs/."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest
import torch
import yaml

from dare.errors import DataError
from dare.io import apply_umask, atomic_dir, atomic_write_text, current_umask
from dare.run.rundir import format_differences, plan_output_dir, spec_differences
from dare.testing import repo_root


@pytest.fixture
def umask():
    """Set the process umask for one test (restored afterwards)."""
    old = os.umask(0o022)
    os.umask(old)
    yield lambda mask: os.umask(mask)
    os.umask(old)


def _mode(p: Path) -> int:
    return stat.S_IMODE(p.stat().st_mode)


@pytest.mark.parametrize("mask, file_mode, dir_mode", [(0o022, 0o644, 0o755), (0o077, 0o600, 0o700), (0o002, 0o664, 0o775)])
def test_atomic_writes_respect_the_umask(tmp_path, umask, mask, file_mode, dir_mode):
    from safetensors.torch import save_file

    umask(mask)
    assert current_umask() == mask
    atomic_write_text(tmp_path / "report.md", "x")
    assert _mode(tmp_path / "report.md") == file_mode
    with atomic_dir(tmp_path / "model") as tmp:
        save_file({"w": torch.zeros(2)}, str(tmp / "model.safetensors"))  # safetensors itself writes 0600
        (tmp / "sub").mkdir()
        (tmp / "sub" / "config.json").write_text("{}")
    assert _mode(tmp_path / "model") == dir_mode and _mode(tmp_path / "model" / "sub") == dir_mode
    assert _mode(tmp_path / "model" / "model.safetensors") == file_mode
    assert _mode(tmp_path / "model" / "sub" / "config.json") == file_mode


def test_apply_umask_keeps_executables_executable_and_skips_symlinks(tmp_path):
    (tmp_path / "run.sh").write_text("#!/bin/sh\n")
    os.chmod(tmp_path / "run.sh", 0o700)
    (tmp_path / "data").write_text("x")
    os.chmod(tmp_path / "data", 0o600)
    (tmp_path / "link").symlink_to(tmp_path / "data")
    apply_umask(tmp_path, 0o022)
    assert _mode(tmp_path / "run.sh") == 0o755 and _mode(tmp_path / "data") == 0o644 and _mode(tmp_path) == 0o755


def test_spec_differences_name_the_keys():
    old = {"train": {"max_steps": 750, "resume": True, "learning_rate": 2e-3}, "output": {"dir": "runs/q", "overwrite": False},
           "eval": {"benchmarks": [{"name": "sudoku", "limit": None}], "batch_size": 250}}
    new = {"train": {"max_steps": 100, "resume": False, "learning_rate": 2e-3}, "output": {"dir": "runs/q", "overwrite": True},
           "eval": {"benchmarks": [{"name": "sudoku", "limit": 100}], "batch_size": 250}}
    diffs = spec_differences(old, new)
    assert diffs == [("train.max_steps", 750, 100), ("eval.benchmarks[0].limit", None, 100)]  # resume/overwrite ignored
    assert format_differences(diffs) == "train.max_steps (750 -> 100), eval.benchmarks[0].limit (null -> 100)"
    assert format_differences(diffs * 4, most=3).endswith("and 5 more")


def test_refused_output_dir_names_the_differing_keys(tmp_path):
    from dare.runspec import RunSpec, spec_hash

    base = {"model": {"new": {"family": "llada"}}, "train": {"learning_rate": 1e-3, "max_steps": 750},
            "eval": {"benchmarks": ["sudoku"], "batch_size": 250}, "output": {"dir": str(tmp_path / "run")}}
    old = RunSpec.model_validate(base)
    out = tmp_path / "run"
    (out / "model").mkdir(parents=True)
    (out / "run.json").write_text(json.dumps({"spec_hash": spec_hash(old), "spec": old.model_dump(mode="json")}))
    new = RunSpec.model_validate(base | {"train": {"learning_rate": 1e-3, "max_steps": 100}})
    action, problems = plan_output_dir(out, spec_hash(new), False, train=True, spec=new.model_dump(mode="json"))
    assert action == "refuse" and problems[0][0] == "output.dir"
    assert "its spec differs in train.max_steps (750 -> 100)" in problems[0][1] and "spec hash" not in problems[0][1]
    # evaluation-only differences: an evaluation uses the finished run's directory; training is refused
    ev = RunSpec.model_validate(base | {"eval": {"benchmarks": [{"name": "sudoku", "limit": 100}], "batch_size": 50}})
    dump = ev.model_dump(mode="json")
    assert plan_output_dir(out, spec_hash(ev), False, train=False, spec=dump) == ("eval-only", [])
    action, problems = plan_output_dir(out, spec_hash(ev), False, train=True, spec=dump)
    assert action == "refuse" and "eval.batch_size (250 -> 50)" in problems[0][1] and "use `dare eval`" in problems[0][1]
    # eval.validation selected the trained weights (keep_best): not an evaluation-only key
    val = RunSpec.model_validate(base | {"eval": {"benchmarks": ["sudoku"], "batch_size": 250, "validation": {"name": "sudoku"}}})
    assert plan_output_dir(out, spec_hash(val), False, train=False, spec=val.model_dump(mode="json"))[0] == "refuse"


def test_schema_prints_to_stdout_and_writes_only_with_o(run_cli, tmp_path):
    committed = repo_root() / "schemas" / "run-spec.schema.json"
    before = committed.read_text()
    code, out, _ = run_cli("schema")
    assert code == 0 and json.loads(out)["title"] == "DARE run spec"
    assert not Path("schemas").exists() and committed.read_text() == before  # nothing written, here or in the checkout
    code, out, _ = run_cli("schema", "--first-party")
    assert code == 0 and out == before
    code, out, _ = run_cli("schema", "--first-party", "-o", str(tmp_path / "s.json"))
    assert code == 0 and (tmp_path / "s.json").read_text() == before and f"wrote {tmp_path / 's.json'}" in out
    code, out, _ = run_cli("schema", "--first-party", "-o", str(committed), "--check")
    assert code == 0 and "up to date" in out
    code, _, err = run_cli("schema", "--check")
    assert code == 2 and "-o FILE" in err


def test_makefile_keeps_runs_and_regenerates_the_committed_schema():
    make = (repo_root() / "Makefile").read_text()
    clean = make.split("\nclean:", 1)[1].split("\n\n", 1)[0]
    assert "rm -rf $(VENV)" in clean and "runs" not in clean
    assert "dare schema --first-party -o schemas/run-spec.schema.json" in make


def test_project_license_is_an_spdx_string():
    import tomllib

    project = tomllib.loads((repo_root() / "pyproject.toml").read_text())
    assert project["project"]["license"] == "Apache-2.0"
    assert "setuptools>=77" in project["build-system"]["requires"]  # the first setuptools that reads the string form


def _rows(n):
    return [{"data_source": "sudoku", "prompt": [{"role": "user", "content": f"p{i}"}],
             "reward_model": {"ground_truth": str(i)}, "extra_info": {"puzzle": f"{i:016d}"}} for i in range(n)]


def test_local_dataset_folders_load_through_datasets(tmp_path):
    import datasets
    import pyarrow as pa
    import pyarrow.parquet as pq

    from dare.data import dataset_columns, load_rows

    saved = tmp_path / "saved"
    datasets.Dataset.from_list(_rows(5)).save_to_disk(str(saved))
    rows = load_rows(str(saved), limit=2, offset=1)
    assert [r["extra_info"]["puzzle"] for r in rows] == [f"{i:016d}" for i in (1, 2)]
    assert rows[0]["prompt"] == [{"role": "user", "content": "p1"}]
    assert set(dataset_columns(str(saved))) == {"data_source", "prompt", "reward_model", "extra_info"}

    splits = tmp_path / "dict"
    datasets.DatasetDict({"train": datasets.Dataset.from_list(_rows(3)), "test": datasets.Dataset.from_list(_rows(2))}
                         ).save_to_disk(str(splits))
    assert len(load_rows(str(splits), split="test")) == 2
    with pytest.raises(DataError, match="no split 'valid'; its splits are: train, test"):
        load_rows(str(splits), split="valid")

    shards = tmp_path / "shards"
    shards.mkdir()
    table = pa.Table.from_pylist(_rows(6))
    pq.write_table(table.slice(0, 4), shards / "part-0.parquet")
    pq.write_table(table.slice(4), shards / "part-1.parquet")
    assert [r["reward_model"]["ground_truth"] for r in load_rows(str(shards))] == [str(i) for i in range(6)]
    assert "extra_info" in dataset_columns(str(shards))

    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(DataError, match="neither a saved dataset"):
        load_rows(str(empty))


def test_a_spec_validates_with_a_dataset_folder(tmp_path, tiny_llada_dir):
    import datasets

    from dare.runspec import validate_spec

    datasets.Dataset.from_list(_rows(4)).save_to_disk(str(tmp_path / "data"))
    raw = {"model": {"path": str(tiny_llada_dir)}, "algorithm": {"name": "sft"},
           "data": {"train": {"path": str(tmp_path / "data"), "prompt_template": "{{ extra_info.puzzle }}",
                              "response_template": "{{ reward_model.ground_truth }}"}},
           "train": {"learning_rate": 1e-3, "max_steps": 1}, "output": {"dir": str(tmp_path / "run")}}
    validate_spec(raw)
    raw["data"]["train"]["prompt_template"] = "{{ nope }}"
    with pytest.raises(Exception, match="has no column 'nope'"):
        validate_spec(raw)


def test_tests_run_in_their_own_directory():
    """The root conftest.py puts every test in an empty working directory: a relative runs/ is never the checkout's."""
    assert Path.cwd().resolve() != repo_root().resolve() and not any(Path.cwd().iterdir())


@pytest.mark.parametrize("example", ["dream-sft.yaml", "quickstart.yaml"])
def test_examples_validate_whatever_runs_holds(example, tiny_llada_dir):
    """What a user's earlier `dare run examples/...` leaves in runs/ (another run of that output.dir, with its model)
    does not change what the tests see: relative paths resolve in the test's own directory."""
    from dare.runspec import load_spec

    spec = yaml.safe_load((repo_root() / "examples" / example).read_text())
    out = Path(spec["output"]["dir"])
    (out / "model").mkdir(parents=True)
    (out / "run.json").write_text(json.dumps({"spec_hash": "feedbeef", "spec": {}}))
    with pytest.raises(Exception, match="already holds a different run"):  # as it would in the checkout...
        load_spec(repo_root() / "examples" / example)
    assert out.resolve().is_relative_to(Path.cwd().resolve())  # ...but here it is the test's own runs/
