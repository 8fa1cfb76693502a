"""docs/run-spec.md documents every field of every model of the run spec (dare/runspec/models.py), and nothing else;
README.md stays short, lists every CLI command and holds one complete run spec that validates."""

from __future__ import annotations

import inspect
import re

from pydantic import BaseModel

import dare.runspec.models as models
from dare.testing import repo_root


def _spec_models() -> dict[str, type[BaseModel]]:
    return {name: obj for name, obj in vars(models).items()
            if inspect.isclass(obj) and issubclass(obj, BaseModel) and obj.__module__ == models.__name__ and not name.startswith("_")}


def _documented() -> dict[str, list[str]]:
    """``{model name: [field, ...]}`` from the ``### `Model` `` tables of the field reference."""
    text = (repo_root() / "docs" / "run-spec.md").read_text().split("## Field reference", 1)[1]
    out: dict[str, list[str]] = {}
    for section in re.split(r"\n### ", text)[1:]:
        name = re.match(r"`(\w+)`", section).group(1)
        out[name] = re.findall(r"^\| `(\w+)` \|", section, flags=re.M)
    return out


def test_every_spec_field_is_documented():
    documented = _documented()
    spec = _spec_models()
    assert set(documented) == set(spec), "models without a table (or tables without a model) in docs/run-spec.md"
    for name, model in spec.items():
        assert documented[name] == list(model.model_fields), f"{name}: docs/run-spec.md lists {documented[name]}"


def test_the_reference_names_the_less_obvious_fields():
    train = _documented()["TrainSpec"]
    for field in ("num_threads", "max_length", "bf16", "adam_beta1", "adam_beta2", "max_nonfinite_steps"):
        assert field in train
    assert "split" in _documented()["DatasetSpec"]


# --------------------------------------------------------------------------- README.md

README_MAX_LINES = 120


def _readme() -> str:
    return (repo_root() / "README.md").read_text()


def test_readme_is_short():
    n = len(_readme().splitlines())
    assert n <= README_MAX_LINES, f"README.md has {n} lines (at most {README_MAX_LINES}; measurements go in docs/results.md)"


def test_readme_lists_every_cli_command():
    from dare.cli import cli

    listed = set(re.findall(r"^dare ([a-z-]+)", _readme(), flags=re.M))
    assert set(cli.commands) <= listed, f"README.md's CLI section lacks {sorted(set(cli.commands) - listed)}"


def test_readme_run_spec_validates(run_cli, tmp_path):
    blocks = re.findall(r"^```yaml\n(.*?)^```", _readme(), flags=re.M | re.S)
    assert len(blocks) == 1, "README.md holds one complete run spec (a ```yaml block)"
    spec = tmp_path / "readme.yaml"
    spec.write_text(blocks[0])
    code, out, err = run_cli("validate", str(spec))
    assert code == 0 and "valid" in out, out + err
    for section in ("model:", "data:", "algorithm:", "sampler:", "train:", "eval:", "output:"):
        assert f"\n{section}" in "\n" + blocks[0], section
