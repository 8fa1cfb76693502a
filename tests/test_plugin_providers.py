"""A spec that names a component of a plugin that is not loaded (installed but left out by ``DARE_LOAD_PLUGINS``)
or not installed (a plugin of the DARE checkout) fails at validation with an error naming the plugin to install;
the plugin is found from the plugins' own metadata (:func:`dare.plugins.manager.provider_of`), not from a list in the core."""

from __future__ import annotations

import sys

import pytest
import yaml

from dare.plugins import manager as P
from dare.plugins.registry import Registry
from tests.test_spec import base_spec


@pytest.fixture
def without_code_plugin(monkeypatch):
    """Every installed plugin except dare-plugin-code's entry point ``code`` (as if not installed)."""
    monkeypatch.setenv("DARE_LOAD_PLUGINS", "llada,sft")
    P.reset()
    assert P.get_registry().find("evaluator", "humaneval") is None
    yield
    monkeypatch.delenv("DARE_LOAD_PLUGINS")
    P.reset()


def test_unknown_message_names_the_providing_distribution(without_code_plugin):
    reg = P.get_registry()
    msg = reg.unknown_message("evaluator", "humaneval")
    assert msg.startswith("evaluator 'humaneval' is provided by the plugin dare-plugin-code, which is not installed")
    assert "`pip install dare-plugin-code`" in msg and "plugins/dare-plugin-code" in msg
    assert "dare-plugin-code" in reg.unknown_message("evaluator", "humaneval+")  # an alias
    assert "dare-plugin-code" in reg.unknown_message("reward", "code")
    assert "dare-plugin-grpo" in reg.unknown_message("objective", "d1")
    # a name nobody provides keeps the plain message
    assert reg.unknown_message("evaluator", "nosuch") == (
        "unknown evaluator 'nosuch'; installed: aime, countdown, gsm8k, math500, multiple-choice, sudoku, sudoku-mc")
    assert Registry().unknown_message("evaluator", "humaneval") == "unknown evaluator 'humaneval'; installed: (none)"


def test_every_first_party_component_is_found_when_its_plugin_is_not_loaded():
    """Adding a component to a first-party plugin is enough for the hint: each name and alias of every
    first-party plugin maps to its distribution (the core's own components are always loaded)."""
    P.reset()
    full = P.get_registry().restricted(P.first_party())
    core_only = P.get_registry().restricted(["dare-dllm"])
    checked = 0
    for e in full.all():
        if e.distribution != "dare-dllm":
            for name in (e.name, *e.aliases):
                assert P.provider_of(core_only, e.kind, name) == e.distribution, (e.kind, name)
                checked += 1
    assert checked >= 30
    assert P.provider_of(core_only, "objective", "no-such-objective") is None


_PLUGIN = '''
from dare import hookimpl


@hookimpl
def register_rewards(register):
    register("dare_fake_provider.things:Thing")
'''

_THINGS = '''
import dare_fake_provider_dependency_that_is_not_installed


class Thing(Reward):
    """A reward of a plugin that is not installed."""

    name = "fake-thing"
    aliases = ("ft",)
'''


def test_a_checkout_plugin_that_is_not_installed_is_read_from_its_folder(tmp_path, monkeypatch):
    folder = tmp_path / "plugins" / "dare-plugin-fake-provider"
    (folder / "src" / "dare_fake_provider").mkdir(parents=True)
    (folder / "pyproject.toml").write_text('[project]\nname = "dare-plugin-fake-provider"\nversion = "0.1"\n\n'
                                           '[project.entry-points.dare]\nfake-provider = "dare_fake_provider.plugin"\n')
    (folder / "src" / "dare_fake_provider" / "__init__.py").write_text("")
    (folder / "src" / "dare_fake_provider" / "plugin.py").write_text(_PLUGIN)
    (folder / "src" / "dare_fake_provider" / "things.py").write_text(_THINGS)  # never imported
    monkeypatch.setattr(P, "CHECKOUT_PLUGINS", tmp_path / "plugins")
    assert P.checkout_plugins() == [("dare-plugin-fake-provider", folder, {"fake-provider": "dare_fake_provider.plugin"})]
    assert P.first_party() == ("dare-dllm", "dare-plugin-fake-provider")
    P.reset()
    reg = P.get_registry()
    msg = reg.unknown_message("reward", "ft")
    assert msg.startswith("reward 'ft' is provided by the plugin dare-plugin-fake-provider, which is not installed")
    dist = "dare-plugin-fake-provider"
    assert f"`pip install -e plugins/{dist}`" in msg  # the checkout's folder
    assert P.provider_of(reg, "reward", "fake-thing") == "dare-plugin-fake-provider"
    assert P.provider_of(reg, "objective", "fake-thing") is None  # another kind
    assert not any(m.startswith("dare_fake_provider") for m in sys.modules)
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
