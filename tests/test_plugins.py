"""The plugin manager: entry-point loading, registration through pluggy (traced, attributed), lazy
components, listing, load failures, name conflicts, and what the quick commands import."""

from __future__ import annotations

import ast
import json
import os
import re
import subprocess
import sys
import types
from importlib import metadata
from pathlib import Path

import pytest

from dare.plugins import manager as P
from dare.components import Component, Objective, Reward
from dare.errors import PluginError
from dare.plugins.hookspecs import hookimpl

BIN = Path(sys.executable).parent


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


# --------------------------------------------------------------------------- registration through pluggy
def test_every_register_hook_call_is_traced_with_its_plugin():
    """`DARE_TRACE_PLUGINS=1 dare plugins` shows one traced call per (register_* hook, implementing plugin)."""
    P.reset()
    pm = P.get_plugin_manager()
    expected = {(hook, impl.plugin_name) for hook in P.HOOK_FOR_KIND.values()
                for impl in getattr(pm.hook, hook).get_hookimpls()}
    assert ("register_rewards", "dare.builtins") in expected and ("register_samplers", "llada") in expected
    env = dict(os.environ, DARE_TRACE_PLUGINS="1")
    env.pop("DARE_LOAD_PLUGINS", None)
    out = subprocess.run([str(BIN / "dare"), "plugins"], env=env, capture_output=True, text=True, check=True)
    # pluggy's trace: "register_samplers [hook]" then "register: <register sampler for plugin llada (...)>"
    traced = re.findall(r"(register_\w+) \[hook\]\n\s+register: <register [a-z ]+ for plugin (\S+) ", out.stderr)
    assert set(traced) == expected
    assert len(traced) == len(expected)  # each once: `dare plugins` lists the plugins main() loaded (no reload)
    assert "finish register_model_families" in out.stderr


def test_hook_that_raises_is_a_load_failure_and_the_other_plugins_register(fake_eps):
    class Good(Reward):
        """A reward registered after a plugin whose hook raised."""

        name = "good-test"

    def bad_hook(register):
        register("nowhere.mod:Thing", name="half-registered")
        raise RuntimeError("boom")

    fake_eps.append(_FakeEP("aaa-bad", _plugin_module("bad_mod", register_rewards=bad_hook), "dare-plugin-bad"))
    fake_eps.append(_FakeEP("zzz-good", _plugin_module("good_mod", register_rewards=lambda register: register(Good)),
                            "dare-plugin-good"))
    reg = P.get_registry()
    failure = next(f for f in reg.failures if f.plugin == "aaa-bad")
    assert failure.distribution == "dare-plugin-bad" and failure.error == "register_rewards raised RuntimeError: boom"
    assert reg.get("reward", "good-test").distribution == "dare-plugin-good"  # called after the failing plugin
    assert reg.get("reward", "sudoku").distribution == "dare-dllm"


def test_components_are_attributed_to_the_plugin_that_registered_them(fake_eps):
    def refs(prefix):
        return lambda register: register(f"{prefix}_mod:Obj", name=f"{prefix}-objective", description=f"{prefix}.")

    fake_eps.append(_FakeEP("one", _plugin_module("one_mod", register_objectives=refs("one")), "dare-plugin-one"))
    fake_eps.append(_FakeEP("two", _plugin_module("two_mod", register_objectives=refs("two")), "dare-plugin-two"))
    reg = P.get_registry()
    for who in ("one", "two"):
        e = reg.get("objective", f"{who}-objective")
        assert (e.plugin, e.distribution, e.version, e.description) == (who, f"dare-plugin-{who}", "9.9", f"{who}.")
    assert reg.get("objective", "sft").distribution == "dare-plugin-sft"


def test_duplicate_lazy_reference_names_both_distributions(fake_eps):
    mod = _plugin_module("dup_lazy", register_samplers=lambda register: register("x.y:Z", name="llada"))
    fake_eps.append(_FakeEP("dup-lazy", mod, "dare-plugin-dup-lazy"))
    with pytest.raises(PluginError) as exc:
        P.get_registry()
    assert "dare-plugin-llada" in str(exc.value) and "dare-plugin-dup-lazy" in str(exc.value) and "'llada'" in str(exc.value)


# --------------------------------------------------------------------------- lazy components
_LAZY_MODULE = '''
from dare import Objective


class LazyObjective(Objective):
    """Imported only when used."""

    name = "lazy-test"
    aliases = ("lazy-alias",)
'''


def test_lazy_component_is_listed_without_import_and_imported_on_first_use(fake_eps, tmp_path, monkeypatch, run_cli):
    (tmp_path / "lazy_test_component.py").write_text(_LAZY_MODULE)
    monkeypatch.syspath_prepend(str(tmp_path))
    hook = lambda register: register("lazy_test_component:LazyObjective")  # the rest is read from the class
    fake_eps.append(_FakeEP("lazy", _plugin_module("lazy_plugin", register_objectives=hook), "dare-plugin-lazy"))
    code, out, err = run_cli("plugins", "--json")
    assert code == 0, err
    row = next(r for r in json.loads(out)["components"] if r["name"] == "lazy-test")
    assert (row["distribution"], row["description"]) == ("dare-plugin-lazy", "Imported only when used.")
    assert "lazy_test_component" not in sys.modules
    entry = P.get_registry().get("objective", "lazy-alias")
    assert not entry.loaded and entry.target == "lazy_test_component:LazyObjective"
    assert entry.cls.__name__ == "LazyObjective" and entry.loaded
    assert entry.create().name == "lazy-test"
    sys.modules.pop("lazy_test_component", None)


def test_lazy_component_that_fails_to_import_is_a_clear_error_and_listed_by_check(fake_eps, run_cli):
    hook = lambda register: register("dare_no_such_module.sub:Thing", name="ghost", description="Never importable.")
    fake_eps.append(_FakeEP("ghost", _plugin_module("ghost_plugin", register_rewards=hook), "dare-plugin-ghost"))
    entry = P.get_registry().get("reward", "ghost")  # known by name without importing
    with pytest.raises(PluginError) as exc:
        entry.cls
    msg = str(exc.value)
    assert "ghost" in msg and "dare-plugin-ghost 9.9" in msg and "dare_no_such_module" in msg
    with pytest.raises(PluginError):  # the same error again, not a half-imported class
        entry.create()

    code, out, err = run_cli("plugins", "--json")  # the quick listing shows the component, imports nothing
    assert code == 0 and "ghost" in [r["name"] for r in json.loads(out)["components"]]
    code, out, err = run_cli("plugins", "--json", "--check")
    assert code == 0, err
    failed = [f for f in json.loads(out)["failed"] if f.get("component") == "reward ghost"]
    assert len(failed) == 1 and failed[0]["distribution"] == "dare-plugin-ghost"
    code, out, _ = run_cli("plugins", "--check")
    assert code == 0 and "failed to load component reward ghost of plugin ghost (dare-plugin-ghost)" in " ".join(out.split())


def test_lazy_reference_that_disagrees_with_its_class_is_refused(fake_eps, tmp_path, monkeypatch):
    (tmp_path / "lazy_test_mismatch.py").write_text(_LAZY_MODULE)
    monkeypatch.syspath_prepend(str(tmp_path))
    hook = lambda register: register("lazy_test_mismatch:LazyObjective", name="other-name", aliases=("lazy-alias",))
    fake_eps.append(_FakeEP("mismatch", _plugin_module("mm_plugin", register_objectives=hook), "dare-plugin-mm"))
    with pytest.raises(PluginError, match=r"registered with name 'other-name' but its class .* has name 'lazy-test'"):
        P.get_registry().get("objective", "other-name").cls
    sys.modules.pop("lazy_test_mismatch", None)


def test_an_inherited_alias_the_source_does_not_show_is_refused_on_import(fake_eps, tmp_path, monkeypatch):
    (tmp_path / "lazy_test_inherited.py").write_text(_LAZY_MODULE + '''

class Child(LazyObjective):
    """A subclass that inherits its parent's aliases."""

    name = "lazy-child"
''')
    monkeypatch.syspath_prepend(str(tmp_path))
    hook = lambda register: register("lazy_test_inherited:Child")
    fake_eps.append(_FakeEP("inherited", _plugin_module("inh_plugin", register_objectives=hook), "dare-plugin-inh"))
    entry = P.get_registry().get("objective", "lazy-child")
    assert (entry.aliases, entry.description) == ((), "A subclass that inherits its parent's aliases.")
    with pytest.raises(PluginError, match=r"registered with aliases \[\] but its class .* has aliases \['lazy-alias'\]; "
                                          r"write aliases as a literal in the class body"):
        entry.cls
    sys.modules.pop("lazy_test_inherited", None)


@pytest.mark.parametrize("args, kwargs, match", [
    (("not a path",), {"name": "x"}, "'package.module:ClassName'"),
    (("a.b:C",), {}, "no module-level class C found in the source of a.b (module not found)"),
    (("a.b:C",), {"description": "d"}, "give name= with the other metadata"),
    (("a.b:C",), {"name": "x", "model_types": ("t",)}, "model families only"),
    ((Objective,), {"name": "x"}, "carries its own name"),
    ((int,), {}, "Reward subclass"),
])
def test_register_rejects_bad_calls(fake_eps, args, kwargs, match):
    def hook(register):
        register(*args, **kwargs)

    fake_eps.append(_FakeEP("bad-call", _plugin_module("bad_call", register_rewards=hook), "dare-plugin-bad-call"))
    failure = next(f for f in P.get_registry().failures if f.plugin == "bad-call")
    assert "TypeError" in failure.error and match in failure.error


def test_family_for_model_type_uses_declared_types_without_importing(fake_eps):
    hook = lambda register: register("dare_no_such_family:Fam", name="fake-fam", model_types=("fake_type",))
    fake_eps.append(_FakeEP("fakefam", _plugin_module("fakefam", register_model_families=hook), "dare-plugin-fakefam"))
    reg = P.get_registry()
    assert reg.family_for_model_type("fake_type").name == "fake-fam"  # the broken module is never imported
    assert reg.family_for_model_type("llada").name == "llada"
    assert reg.family_for_model_type("nope") is None


def test_first_party_registrations_match_their_classes():
    """Every lazy reference of the core and the first-party plugins imports, and the name, aliases, model types
    and description read from its class's source are the imported class's (so `dare plugins` and `dare schema`
    agree)."""
    P.reset()
    reg = P.get_registry().restricted(P.first_party())
    assert reg.load_all() == []
    for e in reg.all():
        assert e.description == e.cls.description() != "", e.name
        assert (e.name, set(e.aliases)) == (e.cls.name, set(e.cls.aliases)), e.name
        if e.kind == "model_family":
            assert set(e.model_types) == set(e.cls.model_types), e.name
        assert e.target == f"{e.cls.__module__}:{e.cls.__qualname__}"
    # nothing left out: every component class the built-in modules and the grpo plugin define is registered
    import dare.diffusion.estimators
    import dare_grpo.objectives
    from dare.builtins import benchmarks, multiple_choice, rewards

    def defined(module):
        return {c for c in vars(module).values() if isinstance(c, type) and issubclass(c, Component) and c.name
                and c.__module__.startswith(module.__name__)}

    for modules, kind in (((rewards, multiple_choice), "reward"), ((benchmarks, multiple_choice), "evaluator"),
                          ((dare.diffusion.estimators,), "estimator")):
        want = {c for m in modules for c in defined(m) if c.kind == kind}
        assert {e.cls for e in reg.all() if e.plugin == "dare.builtins" and e.kind == kind} == want, kind
    grpo = {e.cls for e in reg.all() if e.plugin == "grpo" and e.kind == "objective"}
    assert grpo == {c for c in defined(dare_grpo.objectives) if c.kind == "objective"} and len(grpo) >= 14


_SOURCE_MODULE = '''
from dare import Reward, ModelFamily

NAME = "computed"


class Plain(Reward):
    """First line: the description.

    More text that is not part of it.
    """

    name = "plain"
    aliases: tuple = ("p", "pl")

    def score(self, completion, sample):
        return 0.0


class AttributesAfterAMethod(ModelFamily):
    """A family."""

    def helper(self):
        return 1

    name = "late"
    model_types = ("late_type",)


class Computed(Reward):
    name = NAME


class Nameless(Reward):
    """No name."""
'''


def test_declared_in_source_reads_the_class_body_without_importing(tmp_path, monkeypatch):
    from dare.plugins.registry import declared_in_source

    (tmp_path / "declared_pkg").mkdir()
    (tmp_path / "declared_pkg" / "__init__.py").write_text("raise ImportError('never imported')\n")
    (tmp_path / "declared_pkg" / "things.py").write_text(_SOURCE_MODULE)
    monkeypatch.syspath_prepend(str(tmp_path))
    P.reset()  # forget where packages were found
    assert declared_in_source("declared_pkg.things:Plain") == {
        "name": "plain", "aliases": ("p", "pl"), "description": "First line: the description.", "model_types": None}
    assert declared_in_source("declared_pkg.things:AttributesAfterAMethod") == {
        "name": "late", "aliases": (), "description": "A family.", "model_types": ("late_type",)}
    with pytest.raises(TypeError, match="name must be a literal in the class body"):
        declared_in_source("declared_pkg.things:Computed")
    with pytest.raises(TypeError, match='assigns no name; write name = "..." in class Nameless'):
        declared_in_source("declared_pkg.things:Nameless")
    with pytest.raises(TypeError, match="no module-level class Missing found in the source of declared_pkg.things"):
        declared_in_source("declared_pkg.things:Missing")
    # a source folder of a plugin that is not installed is searched first
    other = tmp_path / "src"
    (other / "elsewhere").mkdir(parents=True)
    (other / "elsewhere" / "mod.py").write_text(_SOURCE_MODULE.replace('"plain"', '"plain-2"'))
    assert declared_in_source("elsewhere.mod:Plain", roots=(other,))["name"] == "plain-2"
    assert not any(m.startswith(("declared_pkg", "elsewhere")) for m in sys.modules)
    P.reset()


def test_register_auto_classes_runs_each_plugin_once_and_records_failures(fake_eps):
    calls = []

    def ok():
        calls.append("ok")

    def broken():
        raise ImportError("no modeling module")

    fake_eps.append(_FakeEP("auto-ok", _plugin_module("auto_ok", register_auto_classes=ok), "dare-plugin-auto-ok"))
    fake_eps.append(_FakeEP("auto-broken", _plugin_module("auto_broken", register_auto_classes=broken),
                            "dare-plugin-auto-broken"))
    P.register_auto_classes()
    P.register_auto_classes()
    assert calls == ["ok"]
    failure = next(f for f in P.get_registry().failures if f.plugin == "auto-broken")
    assert failure.error == "register_auto_classes raised ImportError: no modeling module"
    from transformers import AutoConfig

    assert AutoConfig.for_model("llada").__class__.__name__ == "LLaDAConfig"  # the real families registered too


# --------------------------------------------------------------------------- start-up stays light
_PROBE = """
import sys
from dare.cli import main
try:
    main(sys.argv[1:])
except SystemExit as exc:
    assert not exc.code, exc.code
heavy = sorted({m.split('.')[0] for m in sys.modules} & {'torch', 'transformers', 'pydantic', 'datasets', 'pandas',
                                                          'numpy', 'peft', 'accelerate', 'trl', 'math_verify'})
# dare_lmeval._startup: imported by dare_lmeval.pth at interpreter start-up (standard library only, no component)
plugin_modules = sorted(m for m in sys.modules if m.startswith('dare_') and not m.endswith('.plugin')
                        and '.' in m and m != 'dare_lmeval._startup')
print('HEAVY', heavy, 'COMPONENTS', plugin_modules, file=sys.stderr)
"""


@pytest.mark.parametrize("args", [["--help"], ["plugins"], ["plugins", "--json"]])
def test_listing_commands_import_no_component_and_no_heavy_library(args, tmp_path):
    env = dict(os.environ)
    env.pop("DARE_LOAD_PLUGINS", None)
    out = subprocess.run([sys.executable, "-c", _PROBE, *args], env=env, capture_output=True, text=True, cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert "HEAVY [] COMPONENTS []" in out.stderr


def test_import_dare_is_light():
    code = "import sys, dare; print(sorted({m.split('.')[0] for m in sys.modules} & {'pydantic', 'torch', 'yaml'}))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
    code = "import dare, dare.components as c; print(dare.ModelFamily is c.ModelFamily, dare.Params is c.Params, 'Reward' in dir(dare))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["True", "True", "True"]


def test_validate_imports_only_what_the_spec_names(tmp_path):
    """The quickstart spec names llada, sft, sudoku: no other plugin's component, no transformers/trainer
    stack (validation reads no weights), no datasets or pandas."""
    spec = Path(__file__).resolve().parent.parent / "examples" / "quickstart.yaml"
    env = dict(os.environ)
    env.pop("DARE_LOAD_PLUGINS", None)
    out = subprocess.run([sys.executable, "-c", _PROBE, "validate", str(spec), "--set", f"output.dir={tmp_path / 'run'}"],
                         env=env, capture_output=True, text=True, cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    line = next(l for l in out.stderr.splitlines() if l.startswith("HEAVY"))
    heavy, components = line[len("HEAVY "):].split(" COMPONENTS ")
    assert eval(components) == ["dare_llada.family", "dare_llada.params", "dare_llada.sampler", "dare_sft.objective"]
    assert not {"transformers", "datasets", "pandas", "peft", "accelerate", "trl", "math_verify"} & set(eval(heavy))


@pytest.mark.parametrize("example", ["quickstart.yaml", "dream-sft.yaml", "sdar-sft.yaml", "llada2-sft.yaml"])
def test_validate_quickstart_imports_no_torch(example, tmp_path):
    """`dare validate examples/quickstart.yaml` (model.new, no config overrides) builds no model, so it must not
    import torch or transformers: the family, sampler and objective classes import them when they run, and
    the core's checks only when a check builds a config or a meta-device model (start-up < 1.5 s).
    The same for the other families' SFT examples (their samplers keep the decoder in ``decoding.py``)."""
    spec = Path(__file__).resolve().parent.parent / "examples" / example
    env = dict(os.environ)
    env.pop("DARE_LOAD_PLUGINS", None)
    out = subprocess.run([sys.executable, "-c", _PROBE, "validate", str(spec), "--set", f"output.dir={tmp_path / 'run'}"],
                         env=env, capture_output=True, text=True, cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    line = next(l for l in out.stderr.splitlines() if l.startswith("HEAVY"))
    heavy = eval(line[len("HEAVY "):].split(" COMPONENTS ")[0])
    assert "torch" not in heavy and "transformers" not in heavy, heavy


def test_core_modules_that_use_auto_classes_register_them_first():
    """get_registry() imports no family module, so transformers knows the families' model types only after
    dare.plugins.manager.register_auto_classes(): every core module that calls an Auto class must call it."""
    core = Path(__file__).resolve().parent.parent / "dare"
    missing = []
    for path in sorted(core.rglob("*.py")):
        tree = ast.parse(path.read_text())
        uses = {n.value.id for n in ast.walk(tree) if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name)
                and n.value.id.startswith("Auto")}
        calls = any(isinstance(n, ast.Call) and getattr(n.func, "id", None) == "register_auto_classes" for n in ast.walk(tree))
        if uses and not calls and path.relative_to(core.parent).as_posix() != "dare/plugins/manager.py":
            missing.append(f"{path.relative_to(core.parent)} uses {sorted(uses)}")
    assert not missing, missing


def test_load_plugins_allow_list_takes_distribution_names(monkeypatch):
    # the unknown-component hint names the distribution (dare-plugin-llada): that name loads it too
    monkeypatch.setenv("DARE_LOAD_PLUGINS", "dare-plugin-llada")
    P.reset()
    try:
        reg = P.get_registry()
        assert reg.find("model_family", "llada") is not None
        assert reg.find("objective", "sft") is None
    finally:
        monkeypatch.delenv("DARE_LOAD_PLUGINS")
        P.reset()
