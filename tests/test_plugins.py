"""The plugin manager: entry-point loading, listing, load failures, name conflicts."""

from __future__ import annotations

import json
import sys
import types
from importlib import metadata

import pytest

from dare import plugins as P
from dare.components import Objective, Reward
from dare.errors import PluginError
from dare.hookspecs import hookimpl


class _FakeDist:
    def __init__(self, name, version="9.9"):
        self.name = name
        self.version = version


class _FakeEP:
    def __init__(self, name, module, dist):
        self.name = name
        self._module = module
        self.dist = _FakeDist(dist)

    def load(self):
        if isinstance(self._module, Exception):
            raise self._module
        return self._module


@pytest.fixture
def fake_eps(monkeypatch):
    """Replace the ``dare`` entry points with fakes; restores the real registry afterwards."""
    extra: list[_FakeEP] = []
    real = metadata.entry_points

    def entry_points(*, group=None, **kw):
        eps = list(real(group=group, **kw)) if group else real(**kw)
        return eps + extra if group == "dare" else eps

    monkeypatch.setattr(P.metadata, "entry_points", entry_points)
    P.reset()
    yield extra
    P.reset()


def _plugin_module(name, **hooks):
    mod = types.ModuleType(name)
    for hook, fn in hooks.items():
        setattr(mod, hook, hookimpl(fn))
    return mod


def test_first_party_components_come_from_their_own_distributions():
    P.reset()
    reg = P.get_registry()
    assert reg.get("model_family", "llada").distribution == "dare-plugin-llada"
    assert reg.get("sampler", "llada").distribution == "dare-plugin-llada"
    assert reg.get("objective", "sft").distribution == "dare-plugin-sft"
    assert reg.get("reward", "sudoku").distribution == "dare-dllm"
    assert reg.get("evaluator", "gsm8k").distribution == "dare-dllm"


def test_broken_plugin_is_reported_and_the_rest_load(fake_eps):
    fake_eps.append(_FakeEP("broken", ImportError("No module named 'nonexistent_dep'"), "dare-plugin-broken"))
    reg = P.get_registry()
    assert [f.plugin for f in reg.failures] == ["broken"]
    assert reg.failures[0].distribution == "dare-plugin-broken"
    assert "nonexistent_dep" in reg.failures[0].error
    assert reg.find("objective", "sft") is not None  # the rest still loaded
    msg = reg.unknown_message("objective", "nope")
    assert "broken" in msg and "sft" in msg


def test_duplicate_component_names_both_distributions(fake_eps):
    class DupReward(Reward):
        name = "sudoku"

        def score(self, completion, sample):
            return 0.0

    mod = _plugin_module("dup_mod", register_rewards=lambda register: register(DupReward))
    fake_eps.append(_FakeEP("dup", mod, "dare-plugin-dup"))
    with pytest.raises(PluginError) as exc:
        P.get_registry()
    assert "dare-dllm" in str(exc.value) and "dare-plugin-dup" in str(exc.value) and "'sudoku'" in str(exc.value)


def test_misspelt_hook_fails_loudly(fake_eps):
    mod = types.ModuleType("typo_mod")
    mod.register_objectivez = hookimpl(lambda register: None)
    fake_eps.append(_FakeEP("typo", mod, "dare-plugin-typo"))
    with pytest.raises(PluginError, match="register_objectivez"):
        P.get_plugin_manager()


def test_new_component_is_usable_and_listed(fake_eps, run_cli):
    class Echo(Objective):
        """Echo objective for tests."""

        name = "echo-test"

    mod = _plugin_module("echo_mod", register_objectives=lambda register: register(Echo))
    fake_eps.append(_FakeEP("echo", mod, "dare-plugin-echo"))
    code, out, err = run_cli("plugins", "--json")
    assert code == 0, err
    rows = json.loads(out)["components"]
    row = next(r for r in rows if r["name"] == "echo-test")
    assert (row["kind"], row["distribution"], row["version"]) == ("objective", "dare-plugin-echo", "9.9")


def test_plugins_command_prints_kind_name_distribution_version(run_cli):
    P.reset()
    code, out, _ = run_cli("plugins")
    assert code == 0
    for needle in ("model_family", "llada", "dare-plugin-llada", "objective", "sft", "dare-plugin-sft", "0.1.0"):
        assert needle in out


def test_load_plugins_allow_list(monkeypatch):
    monkeypatch.setenv("DARE_LOAD_PLUGINS", "llada")
    P.reset()
    try:
        reg = P.get_registry()
        assert reg.find("model_family", "llada") is not None
        assert reg.find("objective", "sft") is None
        assert reg.find("reward", "sudoku") is not None  # built-ins always load
    finally:
        monkeypatch.delenv("DARE_LOAD_PLUGINS")
        P.reset()
