"""A spec that names a well-known component of a first-party plugin that is not installed fails at
validation with an error naming the plugin to install (``dare.registry.PROVIDERS``)."""

from __future__ import annotations

import pytest
import yaml

from dare import plugins as P
from dare.registry import PROVIDERS, Registry
from tests.test_spec import base_spec


def test_unknown_message_names_the_providing_distribution():
    reg = Registry()
    msg = reg.unknown_message("evaluator", "humaneval")
    assert msg.startswith("evaluator 'humaneval' is provided by the plugin dare-plugin-code, which is not installed")
    assert "`pip install dare-plugin-code`" in msg and "plugins/dare-plugin-code" in msg
    assert "dare-plugin-code" in reg.unknown_message("reward", "code")
    assert "dare-plugin-grpo" in reg.unknown_message("objective", "d1")
    # a name nobody provides keeps the plain message
    assert reg.unknown_message("evaluator", "nosuch") == "unknown evaluator 'nosuch'; installed: (none)"


def test_the_table_covers_the_code_plugin():
    assert {n for (k, n), d in PROVIDERS.items() if d == "dare-plugin-code"} == {
        "code", "humaneval", "humanevalplus", "humaneval+", "mbpp"}


@pytest.fixture
def without_code_plugin(monkeypatch):
    """Every installed plugin except dare-plugin-code's entry point ``code`` (as if not installed)."""
    monkeypatch.setenv("DARE_LOAD_PLUGINS", "llada,sft")
    P.reset()
    assert P.get_registry().find("evaluator", "humaneval") is None
    yield
    monkeypatch.delenv("DARE_LOAD_PLUGINS")
    P.reset()


@pytest.mark.parametrize("where", ["benchmark", "reward override"])
def test_validate_names_the_missing_plugin(where, without_code_plugin, tiny_llada_dir, tmp_path, run_cli):
    spec = base_spec(tiny_llada_dir, tmp_path / "out")
    bench = spec["eval"]["benchmarks"][0]
    if where == "benchmark":
        bench["name"] = "mbpp"
    else:
        bench["reward"] = {"name": "code"}
    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump(spec))
    code, _, err = run_cli("validate", str(path))
    assert code == 2
    assert "dare-plugin-code" in err and "pip install dare-plugin-code" in err
    assert not (tmp_path / "out").exists()


def test_every_listed_provider_registers_that_name():
    """The table matches what the first-party plugins register (where they are installed)."""
    P.reset()
    reg = P.get_registry()
    installed = {dist for dist, _ in reg.plugins.values()}
    checked = 0
    for (kind, name), dist in PROVIDERS.items():
        if dist in installed:
            entry = reg.find(kind, name)
            assert entry is not None and entry.distribution == dist, (kind, name, dist)
            checked += 1
    assert checked >= 5 or "dare-plugin-code" not in installed
