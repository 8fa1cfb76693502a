"""The layout rules of docs/architecture.md, checked on the source tree.

* the core (``dare/``) and every first-party plugin (``plugins/*/src``) have no import cycle, counting every
  import: module level, inside functions and under ``TYPE_CHECKING`` (a typing-only import is still a dependency
  between modules). One pattern is allowed: a model family's ``modeling_*`` module imports the generation mixin of
  its ``generation`` module (the checkpoint class must inherit ``generate``), whose ``generate`` reaches the family
  and the decoder back inside the call;
* no core module is longer than 450 lines;
* the top of ``dare/`` holds at most 10 modules besides packages, and every package's ``__init__.py`` opens with a
  paragraph saying what the package owns (docs/architecture.md, "Layout");
* the core never imports a plugin, and plugins never import each other;
* no decoder signature takes more than 8 parameters: decoders take what they decode with, the prompts, their mask
  and one options object (``dare.sampling.options.DecodeOptions``);
* no plugin class overrides a ``_``-prefixed method of a ``dare`` class: an RL objective's trainer changes the step
  through the public hooks :class:`dare.rl.hooks.RLStepHooks` lists;
* the core never reads an objective's parameter by name (``getattr(self.params, "kl_target", ...)``): it asks a
  declared method or field of the core's parameter classes (e.g. ``RLParams.uses_reference_policy``);
* decoders read ``options.params`` directly (no decoding module copies the settings into a ``NamedTuple``), and text
  generation, rollouts and benchmark evaluation take one :class:`dare.sampling.DecodingBundle`;
* no core line is longer than 120 characters.
* registration is written once: the core names no first-party plugin (distribution, package or component name),
  the first-party ``register(...)`` calls name only the class, an objective's name is one string of its plugin
  and a component's description one docstring line.
* no module but ``dare/run/rundir.py`` spells a run-directory name (``"run.json"``, ``d / "model"``, ...): every
  path of a run directory comes from :class:`dare.run.rundir.RunDir`.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
CORE = ROOT / "dare"
PLUGINS = ROOT / "plugins"
MAX_CORE_LINES = 450
MAX_TOP_MODULES = 10
MIN_OWNER_WORDS = 8


def _modules(pkg_root: Path, top: Path) -> dict[str, Path]:
    """Dotted module name -> file, for every ``.py`` under ``pkg_root`` (names relative to ``top``)."""
    out = {}
    for p in sorted(pkg_root.rglob("*.py")):
        parts = p.relative_to(top).with_suffix("").parts
        name = ".".join(parts[:-1]) if parts[-1] == "__init__" else ".".join(parts)
        out[name] = p
    return out


def _imports(module: str, path: Path, modules: dict[str, Path] | None = None) -> set[str]:
    """Every dotted name ``module`` imports (absolute; relative imports resolved), at any depth.

    ``from pkg import a, b`` gives ``pkg.a`` and ``pkg.b``, and ``pkg`` itself unless every name is a
    submodule in ``modules`` (importing a sibling submodule does not run anything else of ``pkg``).
    """
    tree = ast.parse(path.read_text())
    is_pkg = path.name == "__init__.py"
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                pkg = module.split(".") if is_pkg else module.split(".")[:-1]
                pkg = pkg[: len(pkg) - (node.level - 1)]
                base = ".".join(pkg + ([base] if base else []))
            subs = {f"{base}.{a.name}" for a in node.names}
            names |= subs
            if modules is None or not subs <= set(modules):
                names.add(base)
    return names


def import_graph(modules: dict[str, Path]) -> dict[str, set[str]]:
    """Module -> modules it depends on: the module an imported name lives in, and that module's enclosing
    packages (Python runs their ``__init__`` first) except the importer's own enclosing packages."""

    def owner(name: str) -> str | None:
        parts = name.split(".")
        for i in range(len(parts), 0, -1):
            if ".".join(parts[:i]) in modules:
                return ".".join(parts[:i])
        return None

    graph: dict[str, set[str]] = {m: set() for m in modules}
    for m, path in modules.items():
        for name in _imports(m, path, modules):
            target = owner(name)
            if target is not None and target != m:
                graph[m].add(target)
            while target is not None and "." in target:
                target = owner(target.rsplit(".", 1)[0])
                if target is not None and target != m and not m.startswith(target + "."):
                    graph[m].add(target)
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = [0]

    def visit(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                found.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_cycle_finder_finds_a_cycle():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert cycles(graph) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_core_has_no_import_cycle():
    found = cycles(import_graph(_modules(CORE, ROOT)))
    assert not found, f"import cycles in the core: {found}"


def _generation_mixin_edge(importer: str, imported: str) -> bool:
    """True for ``<pkg>.modeling_* -> <pkg>.generation``: a checkpoint class inheriting its family's generation mixin."""
    pkg, _, leaf = importer.rpartition(".")
    return leaf.startswith("modeling_") and imported == f"{pkg}.generation"


def plugin_import_graph() -> dict[str, set[str]]:
    """:func:`import_graph` of every first-party plugin package, without the generation-mixin edges."""
    modules: dict[str, Path] = {}
    for pkg in _plugin_packages().values():
        modules.update(_modules(pkg, pkg.parent))
    graph = import_graph(modules)
    return {m: {t for t in targets if not _generation_mixin_edge(m, t)} for m, targets in graph.items()}


def test_the_plugin_cycle_check_sees_function_level_imports_and_allows_only_the_mixin(tmp_path):
    pkg = tmp_path / "fam"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "modeling_fam.py").write_text("from fam.generation import FamGenerationMixin\n")
    (pkg / "generation.py").write_text("def generate():\n    from fam.family import Family\n")
    (pkg / "family.py").write_text("def model_class():\n    from fam.modeling_fam import Model\n")
    graph = import_graph(_modules(pkg, tmp_path))
    assert cycles(graph) == [["fam.family", "fam.generation", "fam.modeling_fam"]]
    allowed = {m: {t for t in ts if not _generation_mixin_edge(m, t)} for m, ts in graph.items()}
    assert cycles(allowed) == []
    (pkg / "family.py").write_text("def model_class():\n    from fam.modeling_fam import Model\n"
                                   "def decode():\n    from fam.generation import generate\n")
    graph = import_graph(_modules(pkg, tmp_path))
    allowed = {m: {t for t in ts if not _generation_mixin_edge(m, t)} for m, ts in graph.items()}
    assert cycles(allowed) == [["fam.family", "fam.generation"]]


def test_plugins_have_no_import_cycle():
    found = cycles(plugin_import_graph())
    assert not found, f"import cycles in the plugins (besides modeling -> generation mixin): {found}"


def test_the_component_contracts_import_nothing_above_them():
    """``dare.components`` (the contracts every other module implements or calls) depends on itself and
    ``dare.errors`` only: e.g. padding-free training is ``dare.diffusion.packing.packed_denoiser_logits(family, ...)``,
    a function of the layer above that takes the family, not a family method reaching up into it."""
    graph = import_graph(_modules(CORE, ROOT))
    up = {m: sorted(t for t in targets if not t.startswith("dare.components") and t != "dare.errors")
          for m, targets in graph.items() if m.startswith("dare.components")}
    assert not {m: t for m, t in up.items() if t}, up


def test_no_core_module_over_the_line_limit():
    long = {str(p.relative_to(ROOT)): n for p in CORE.rglob("*.py") if (n := len(p.read_text().splitlines())) > MAX_CORE_LINES}
    assert not long, f"core modules over {MAX_CORE_LINES} lines: {long}"


def top_modules(pkg_root: Path) -> list[str]:
    """The modules directly in ``pkg_root`` (``__init__.py`` included), not those of its packages."""
    return sorted(p.name for p in pkg_root.glob("*.py"))


def packages_without_owner(pkg_root: Path) -> list[str]:
    """Packages under ``pkg_root`` (``pkg_root`` included) whose ``__init__.py`` does not open with a docstring paragraph
    of at least :data:`MIN_OWNER_WORDS` words, and folders of modules that are no package (no ``__init__.py``)."""
    bad = []
    for d in [pkg_root, *sorted(p for p in pkg_root.rglob("*") if p.is_dir() and p.name != "__pycache__")]:
        init = d / "__init__.py"
        if not init.is_file():
            if any(d.glob("*.py")):
                bad.append(f"{d.relative_to(pkg_root.parent)}: modules without __init__.py")
            continue
        doc = ast.get_docstring(ast.parse(init.read_text())) or ""
        if len(doc.split("\n\n")[0].split()) < MIN_OWNER_WORDS:
            bad.append(f"{init.relative_to(pkg_root.parent)}: {doc.splitlines()[0] if doc else 'no docstring'}")
    return bad


def test_the_layout_checks_find_what_they_look_for(tmp_path):
    core = tmp_path / "core"
    (core / "owned").mkdir(parents=True)
    (core / "terse").mkdir()
    (core / "loose").mkdir()
    (core / "data").mkdir()
    (core / "__init__.py").write_text('"""The core: every piece of the framework that plugins build on, by package."""\n')
    (core / "owned" / "__init__.py").write_text('"""Owned: the pieces that read and write the run directory.\n\nMore."""\n')
    (core / "terse" / "__init__.py").write_text('"""Terse.\n\nWhat it holds comes too late."""\n')
    (core / "loose" / "a.py").write_text("")
    (core / "data" / "rows.json").write_text("[]")
    (core / "io.py").write_text("")
    assert top_modules(core) == ["__init__.py", "io.py"]
    assert packages_without_owner(core) == ["core/loose: modules without __init__.py", "core/terse/__init__.py: Terse."]


def test_the_top_of_the_core_holds_few_modules():
    """At most 10 modules at the top of ``dare/`` (``__init__.py`` counted); the rest live in packages whose names
    say what they hold."""
    top = top_modules(CORE)
    assert len(top) <= MAX_TOP_MODULES, f"{len(top)} modules at the top of dare/ (at most {MAX_TOP_MODULES}): {top}"


def test_every_core_package_says_what_it_owns():
    bad = packages_without_owner(CORE)
    assert not bad, f"packages whose __init__.py does not open with what they own ({MIN_OWNER_WORDS}+ words): {bad}"


def _plugin_packages() -> dict[str, Path]:
    """Top-level import package of each first-party plugin -> its src directory."""
    out = {}
    for src in sorted(PLUGINS.glob("dare-plugin-*/src")):
        for pkg in src.iterdir():
            if (pkg / "__init__.py").is_file():
                out[pkg.name] = pkg
    return out


def test_core_never_imports_a_plugin():
    plugins = set(_plugin_packages())
    bad = []
    for m, path in _modules(CORE, ROOT).items():
        for name in _imports(m, path):
            if name.split(".")[0] in plugins:
                bad.append(f"{m} imports {name}")
    assert not bad, bad


@pytest.mark.parametrize("package", sorted(_plugin_packages()))
def test_plugins_never_import_each_other(package):
    pkgs = _plugin_packages()
    others = set(pkgs) - {package}
    bad = []
    for m, path in _modules(pkgs[package], pkgs[package].parent).items():
        for name in _imports(m, path):
            if name.split(".")[0] in others:
                bad.append(f"{m} imports {name}")
    assert not bad, bad


def _plugin_sources() -> list[Path]:
    return sorted(p for src in PLUGINS.glob("dare-plugin-*/src") for p in src.rglob("*.py"))


def test_no_objective_copies_the_training_skeleton():
    """Objectives override the skeleton's pieces (datasets, trainer class, loss); ``train(run)`` lives in
    dare/trainers/objective.py only."""
    bad = []
    for path in _plugin_sources() + [CORE / "templates" / "plugin" / "objective.py.j2"]:
        text = path.read_text()
        tree = ast.parse(text.replace("{{ class_name }}", "X").replace("{{ component }}", "x"))
        for node in ast.walk(tree):
            if isinstance(node, ast.FunctionDef) and node.name == "train" and [a.arg for a in node.args.args][:2] == ["self", "run"]:
                bad.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert not bad, f"objectives defining their own train(run): {bad}"


def test_trainer_configs_declare_no_objective_param():
    """One parameter schema per component: a DareConfig subclass may hold training-loop settings only, never a
    field that an objective's Params declares."""
    from dare.plugins.manager import get_registry

    objective_fields = set()
    for name in get_registry().names("objective"):
        objective_fields |= set(get_registry().get("objective", name).cls.Params.model_fields)
    dup = []
    for path in _plugin_sources() + sorted(CORE.rglob("*.py")):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef) and any(getattr(b, "id", getattr(b, "attr", "")) in ("DareConfig", "TrainingArguments")
                                                      for b in node.bases):
                for stmt in node.body:
                    if isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name) and stmt.target.id in objective_fields:
                        dup.append(f"{path.relative_to(ROOT)}: {node.name}.{stmt.target.id}")
    assert not dup, f"trainer config fields that objectives' Params also declare: {dup}"


MAX_DECODER_PARAMS = 8
#: The release-compatible functions keep their release's signature: thin adapters that build a DecodeOptions.
RELEASE_SIGNATURES = frozenset({"generate", "generate_v21", "diffusion_generate", "block_diffusion_generate"})


def _param_count(fn: ast.FunctionDef, method: bool) -> int:
    a = fn.args
    n = len(a.posonlyargs) + len(a.args) + len(a.kwonlyargs) + (a.vararg is not None) + (a.kwarg is not None)
    return n - 1 if method else n


def decoder_signatures(paths) -> dict[str, int]:
    """``"file:function" -> parameter count`` (``self`` not counted) of every decoder: the public functions of
    modules named ``decoding*.py`` (release-compatible adapters aside), public functions named ``*decode*``
    elsewhere (objectives' own rollout decoders, e.g. ``mdpo_decode``), and the ``generate``/``partial_denoise``
    methods of sampler classes (``Sampler`` and classes with a base named ``...Sampler``)."""
    out = {}
    for path in paths:
        tree = ast.parse(path.read_text())
        where = str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else path.name
        for node in tree.body:
            decoder = path.name.startswith("decoding") or "decode" in getattr(node, "name", "")
            if (isinstance(node, ast.FunctionDef) and decoder and not node.name.startswith("_")
                    and node.name not in RELEASE_SIGNATURES):
                out[f"{where}:{node.name}"] = _param_count(node, method=False)
            if isinstance(node, ast.ClassDef) and (node.name == "Sampler" or any(
                    getattr(b, "id", getattr(b, "attr", "")).endswith("Sampler") for b in node.bases)):
                for fn in node.body:
                    if isinstance(fn, ast.FunctionDef) and fn.name in ("generate", "partial_denoise"):
                        out[f"{where}:{node.name}.{fn.name}"] = _param_count(fn, method=True)
    return out


def test_the_signature_check_counts_parameters(tmp_path):
    src = tmp_path / "decoding.py"
    src.write_text("def decode(logits_fn, prompt, attention_mask, options):\n    pass\n"
                   "def wide(a, b, c, d, e, f, g, h, *, i=0, **kw):\n    pass\n"
                   "def generate(model, a, b, c, d, e, f, g, h, i):\n    pass\n"
                   "class S(Sampler):\n    def generate(self, model, family, tokens, ids, mask=None, generator=None):\n"
                   "        pass\n")
    assert decoder_signatures([src]) == {"decoding.py:decode": 4, "decoding.py:wide": 10, "decoding.py:S.generate": 6}


def test_no_decoder_takes_more_than_eight_parameters():
    paths = sorted(CORE.rglob("*.py")) + _plugin_sources()
    found = decoder_signatures(paths)
    assert any(k.endswith("dare_llada/decoding.py:decode") for k in found)  # the check sees the decoders
    wide = {k: n for k, n in found.items() if n > MAX_DECODER_PARAMS}
    assert not wide, f"decoders with more than {MAX_DECODER_PARAMS} parameters (use one DecodeOptions): {wide}"


def settings_tuples(paths: list[Path]) -> dict[str, list[str]]:
    """``{"file": [class names]}``: the ``NamedTuple`` classes each decoding module defines (a copy of the sampler's
    settings beside ``options.params``)."""
    out = {}
    for path in paths:
        if not path.name.startswith("decoding"):
            continue
        tree = ast.parse(path.read_text())
        names = [node.name for node in ast.walk(tree) if isinstance(node, ast.ClassDef)
                 and any(getattr(b, "id", getattr(b, "attr", "")) == "NamedTuple" for b in node.bases)]
        if names:
            out[str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else path.name] = names
    return out


def test_the_settings_tuple_check_finds_a_named_tuple(tmp_path):
    src = tmp_path / "decoding.py"
    src.write_text("from typing import NamedTuple\nimport typing\nclass _Step(NamedTuple):\n    temperature: float\n"
                   "class _Other(typing.NamedTuple):\n    x: int\nclass Fine:\n    pass\n")
    assert settings_tuples([src]) == {"decoding.py": ["_Step", "_Other"]}


def test_decoders_read_the_options_params_directly():
    paths = sorted(CORE.rglob("*.py")) + _plugin_sources()
    assert any(p.name == "decoding.py" for p in paths)  # the check sees the decoders
    copies = settings_tuples(paths)
    assert not copies, f"decoding modules that copy options.params into a NamedTuple (read options.params): {copies}"


def test_text_generation_takes_one_decoding_bundle():
    """``generate_texts``, ``sample_completions`` and ``evaluate_benchmark`` take the model, family, special ids,
    tokenizer and sampler as one :class:`dare.sampling.DecodingBundle` (their first parameter, ``decoding``)."""
    import inspect

    from dare.eval.runner import evaluate_benchmark
    from dare.rl.rollout import sample_completions
    from dare.sampling import DecodingBundle
    from dare.sampling.text import generate_texts

    for fn in (generate_texts, sample_completions, evaluate_benchmark):
        params = inspect.signature(fn).parameters
        assert list(params)[0] == "decoding", fn.__name__
        assert params["decoding"].annotation in (DecodingBundle, "DecodingBundle"), fn.__name__
        assert not {"model", "family", "tokens", "tokenizer", "sampler"} & set(params), fn.__name__
        assert len(params) <= MAX_DECODER_PARAMS, fn.__name__


# --------------------------------------------------------------------------- line length
MAX_LINE_CHARS = 120
#: Core modules allowed lines over the limit (none).
LONG_LINES_ALLOWED: tuple[str, ...] = ()


def long_lines(paths: list[Path], root: Path, limit: int = MAX_LINE_CHARS) -> dict[str, list[int]]:
    """``{"path relative to root": [1-based line numbers]}`` of the lines longer than ``limit`` characters."""
    out = {}
    for path in paths:
        numbers = [i for i, line in enumerate(path.read_text().splitlines(), 1) if len(line) > limit]
        if numbers:
            out[path.relative_to(root).as_posix()] = numbers
    return out


def test_the_line_check_finds_a_long_line(tmp_path):
    (tmp_path / "a.py").write_text("x = 1\n" + "y = '" + "z" * 114 + "'\n" + "# " + "w" * 119 + "\n")
    (tmp_path / "b.py").write_text("x = 1\n")
    assert long_lines([tmp_path / "a.py", tmp_path / "b.py"], tmp_path) == {"a.py": [3]}


def test_no_core_line_over_120_characters():
    found = long_lines(sorted(CORE.rglob("*.py")), ROOT)
    long = {p: n for p, n in found.items() if not p.startswith(LONG_LINES_ALLOWED)}
    assert not long, f"core lines over {MAX_LINE_CHARS} characters (wrap them): {long}"



# --------------------------------------------------------------------------- plugins change DARE through public hooks
def private_overrides(cls: type) -> list[str]:
    """``"Class._name"`` for each ``_``-prefixed (not dunder) method ``cls`` defines that a base class from a
    ``dare`` module (the core) also defines: a plugin overriding one of DARE's private methods."""
    import inspect

    out = []
    for name, value in vars(cls).items():
        if not name.startswith("_") or (name.startswith("__") and name.endswith("__")):
            continue
        if not (inspect.isfunction(value) or isinstance(value, (classmethod, staticmethod, property))):
            continue
        for base in cls.__mro__[1:]:
            if base.__module__.split(".")[0] == "dare" and name in vars(base):
                out.append(f"{cls.__qualname__}.{name} (overrides {base.__module__}.{base.__qualname__})")
                break
    return out


def _plugin_classes() -> list[type]:
    """Every class defined in a first-party plugin module (each module of every installed plugin imported)."""
    import importlib
    import importlib.util
    import inspect

    classes = []
    for package, root in sorted(_plugin_packages().items()):
        if importlib.util.find_spec(package) is None:  # a plugin this environment does not install
            continue
        for module in _modules(root, root.parent):
            mod = importlib.import_module(module)
            classes += [c for _, c in inspect.getmembers(mod, inspect.isclass) if c.__module__ == module]
    return classes


def test_the_override_check_finds_a_private_override():
    from dare.rl.trainer import GRPOTrainer

    class Public(GRPOTrainer):
        def update(self, model, rollout, iteration):  # a listed hook
            return 0.0, {}

        def _own_helper(self):  # the plugin's own private method
            return None

    class Private(GRPOTrainer):
        def _get_train_sampler(self, train_dataset=None):  # DARE's private method
            return None

    assert private_overrides(Public) == []
    assert private_overrides(Private) == [f"{Private.__qualname__}._get_train_sampler (overrides "
                                          "dare.rl.trainer.GRPOTrainer)"]


def test_no_plugin_overrides_a_private_dare_method():
    """Plugins change DARE through public hooks (the RL trainer's: dare.rl.hooks.RLStepHooks), never by overriding
    a ``_``-prefixed method of a core class, which the core may rename or stop calling without notice."""
    bad = [x for cls in _plugin_classes() for x in private_overrides(cls)]
    assert not bad, f"plugin classes overriding private DARE methods (use a public hook instead): {bad}"


def test_every_rl_hook_is_documented_in_one_place():
    """The hooks a plugin's RL trainer may override are the public methods and attributes of RLStepHooks, each named
    in its docstring; GRPOTrainer implements them."""
    from dare.rl.hooks import HOOKS, RLStepHooks
    from dare.rl.trainer import GRPOTrainer

    doc = RLStepHooks.__doc__
    assert all(f"{name}" in doc for name in HOOKS), [n for n in HOOKS if n not in doc]
    declared = {n for n in vars(RLStepHooks) if not n.startswith("_")}
    assert declared <= HOOKS and issubclass(GRPOTrainer, RLStepHooks)


def core_param_reads(path: Path, allowed: set[str]) -> list[str]:
    """``"file:line getattr(..., 'name')"`` for each ``getattr(<...params...>, "name"[, default])`` in ``path`` whose
    object is an objective's parameters (its source names ``params``, not a sampler's) and whose ``name`` is not in
    ``allowed`` (the names the core's own parameter classes declare)."""
    out = []
    tree = ast.parse(path.read_text())
    for node in ast.walk(tree):
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "getattr"
                and len(node.args) >= 2 and isinstance(node.args[1], ast.Constant) and isinstance(node.args[1].value, str)):
            target = ast.unparse(node.args[0])
            if "params" in target and "sampler" not in target and node.args[1].value not in allowed:
                out.append(f"{path.name}:{node.lineno} getattr({target}, {node.args[1].value!r})")
    return out


def _core_param_names() -> set[str]:
    from dare.components import Params
    from dare.components.official import OfficialParams
    from dare.rl.losses import RLParams

    return {n for cls in (Params, OfficialParams, RLParams) for n in set(dir(cls)) | set(cls.model_fields)}


def test_the_param_read_check_finds_a_read_by_name(tmp_path):
    src = tmp_path / "trainer.py"
    src.write_text("def f(self, obj, sampler):\n"
                   "    a = getattr(self.params, 'kl_target', 'reference')\n"
                   "    b = getattr(getattr(obj, 'params', None), 'beta', 0.0)\n"
                   "    c = getattr(sampler.params, 'temperature', None)\n"
                   "    d = getattr(self.params, 'group_size')\n")
    assert core_param_reads(src, _core_param_names()) == ["trainer.py:2 getattr(self.params, 'kl_target')"]


def test_the_core_reads_no_objective_param_by_name():
    """The core asks an objective's parameters through what the core declares (RLParams fields and methods such as
    ``uses_reference_policy``), never by a plugin's field name with a getattr default."""
    allowed = _core_param_names()
    bad = [x for path in sorted(CORE.rglob("*.py")) for x in core_param_reads(path, allowed)]
    assert not bad, bad


# --------------------------------------------------------------------------- registration written once
def _stream_ids() -> set[str]:
    """The random streams of :data:`dare.randomness.STREAMS` (``"sft"`` is SFT's mask draws, not the objective)."""
    from dare.randomness import STREAMS

    return set(STREAMS)


def _first_party_plugin_names() -> set[str]:
    """Distribution (folder) and import package of every first-party plugin."""
    return {p.name for p in PLUGINS.glob("dare-plugin-*")} | set(_plugin_packages())


def _string_constants(path: Path) -> list[tuple[int, str]]:
    """``(line, value)`` of every string constant of a module except docstrings and the random-stream argument of
    ``RowGenerators.keyed(seed, stream, ...)`` (``"sft"`` names SFT's stream of :data:`dare.randomness.STREAMS`)."""
    tree = ast.parse(path.read_text())
    skip = {id(n.body[0].value) for n in ast.walk(tree)
            if isinstance(n, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and n.body
            and isinstance(n.body[0], ast.Expr) and isinstance(n.body[0].value, ast.Constant)}
    skip |= {id(n.args[1]) for n in ast.walk(tree) if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute)
             and n.func.attr == "keyed" and len(n.args) > 1}
    return [(n.lineno, n.value) for n in ast.walk(tree)
            if isinstance(n, ast.Constant) and isinstance(n.value, str) and id(n) not in skip]


def names_in_text(text: str, names: set[str]) -> list[str]:
    """The ``names`` that occur in ``text`` as whole words (``dare-plugin-llada`` is not ``dare-plugin-llada2``)."""
    pattern = re.compile(r"(?<![\w-])(" + "|".join(sorted(map(re.escape, names), key=len, reverse=True)) + r")(?![\w-])")
    return [m.group(1) for m in pattern.finditer(text)]


def test_the_name_check_matches_whole_names_only():
    names = {"dare-plugin-llada", "dare_llada"}
    assert names_in_text("pip install dare-plugin-llada2; import dare_llada2; dare_llada.family", names) == ["dare_llada"]
    assert names_in_text("(``dare-plugin-llada``)", names) == ["dare-plugin-llada"]


def test_the_core_names_no_first_party_plugin():
    """The core knows no first-party plugin: no distribution or package name in any file under ``dare/`` (the
    unknown-name hint asks the plugins themselves, :func:`dare.plugins.manager.provider_of`)."""
    names = _first_party_plugin_names()
    bad = [f"{p.relative_to(ROOT)}: {n}" for p in sorted(CORE.rglob("*"))
           if p.is_file() and p.suffix in {".py", ".j2", ".md", ".toml", ".yaml", ".json", ".txt"}
           for n in names_in_text(p.read_text(encoding="utf-8"), names)]
    assert not bad, bad


def _first_party_entries():
    from dare.plugins import manager as P

    P.reset()
    return P.get_registry().restricted(P.first_party()).all()


def test_the_core_code_holds_no_first_party_component_name():
    """No string in the core's code is the name or alias of a first-party plugin's component."""
    entries = _first_party_entries()
    core = {n for e in entries if e.distribution == "dare-dllm" for n in (e.name, *e.aliases)}
    names = {n for e in entries if e.distribution != "dare-dllm" for n in (e.name, *e.aliases)} - core - _stream_ids()
    assert {"d1", "dpo", "llada", "humaneval"} <= names
    bad = [f"{p.relative_to(ROOT)}:{line} {value!r}" for p in sorted(CORE.rglob("*.py"))
           for line, value in _string_constants(p) if value in names]
    assert not bad, bad


def _source_of(distribution: str) -> list[Path]:
    if distribution == "dare-dllm":
        return sorted(CORE.rglob("*.py"))
    return sorted((PLUGINS / distribution / "src").rglob("*.py"))


def test_each_objective_name_is_written_once_in_its_plugin():
    """An objective's name and each alias are one string literal of its plugin (the class body), so renaming or
    adding one touches one line; the plugin's register() call names only the class."""
    bad = []
    entries = [e for e in _first_party_entries() if e.kind == "objective"]
    assert len(entries) >= 17
    for e in entries:
        for name in (e.name, *e.aliases):
            where = [f"{p.relative_to(ROOT)}:{line}" for p in _source_of(e.distribution)
                     for line, value in _string_constants(p) if value == name]
            if len(where) != 1:
                bad.append(f"objective {name!r} of {e.distribution}: {where}")
    assert not bad, bad


def test_each_description_is_written_once():
    """A component's one-line description is its class docstring's first line, nowhere else in its plugin (or the
    core, for the built-ins)."""
    bad = []
    for e in _first_party_entries():
        count = sum(n.value.count(e.description) for p in _source_of(e.distribution)
                    for n in ast.walk(ast.parse(p.read_text())) if isinstance(n, ast.Constant) and isinstance(n.value, str))
        if count != 1:
            bad.append(f"{e.kind} {e.name} ({e.distribution}): {count} copies of {e.description!r}")
    assert not bad, bad


def _plugin_entry_modules() -> list[Path]:
    return [CORE / "builtins" / "__init__.py", *sorted(PLUGINS.glob("dare-plugin-*/src/*/plugin.py"))]


def test_first_party_register_calls_name_only_the_class():
    """Every ``register(...)`` of the core's built-ins and the first-party plugins passes only ``"module:Class"``:
    the name, aliases, model types and description are read from the class (``dare.plugins.registry.declared_in_source``)."""
    bad = []
    for path in _plugin_entry_modules():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "register":
                if node.keywords or len(node.args) != 1 or not isinstance(node.args[0], ast.Constant):
                    bad.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert len(_plugin_entry_modules()) >= 10 and not bad, bad
#: run-directory entries whose names only :mod:`dare.run.rundir` spells (:class:`dare.run.rundir.RunDir`)
RUN_FILE_NAMES = frozenset({"run.json", "init-model", "checkpoints", "metrics.jsonl", "report.json", "report.md",
                            "plot.png", "run.log", "trainer_state.json", "dare_batch.json", "best.json", ".staging"})
#: entries named by common words: flagged where code joins them to a path (``d / "model"``, ``os.path.join(d, "eval")``)
RUN_DIR_WORDS = frozenset({"model", "eval", "samples", "tensorboard", "best"})
#: the module that owns the run directory's layout
RUNDIR_MODULE = CORE / "run" / "rundir.py"


def _docstrings(tree: ast.AST) -> set[int]:
    """ids of the docstring constants of a module and its classes and functions."""
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                out.add(id(first.value))
    return out


def _names_a_run_file(text: str) -> bool:
    """A string (or f-string piece) spelling a run-directory file: the name itself or a path through it
    (``"/run.json"``, ``"eval/after.json"`` is not, ``"run.log"`` is); prose (with spaces) is not a path."""
    if not text or any(c.isspace() for c in text):
        return False
    parts = text.split("/")
    return text == ".lock" or any(p in RUN_FILE_NAMES or p.startswith("checkpoint-") for p in parts)


def run_dir_literals(path: Path) -> list[str]:
    """``"line N: 'name'"`` for every run-directory name the module at ``path`` spells outside docstrings
    (:func:`_names_a_run_file`, or a :data:`RUN_DIR_WORDS` entry joined to a path)."""
    tree = ast.parse(path.read_text())
    skip = _docstrings(tree)
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in skip:
            if _names_a_run_file(node.value):
                found.append((node.lineno, f"line {node.lineno}: {node.value!r}"))
        joined: list[ast.expr] = []
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div):
            joined = [node.right]
        elif isinstance(node, ast.Call) and ast.unparse(node.func) in ("os.path.join", "Path", "pathlib.Path"):
            joined = node.args[1:]
        for arg in joined:
            if isinstance(arg, ast.Constant) and arg.value in RUN_DIR_WORDS:
                found.append((arg.lineno, f"line {arg.lineno}: {arg.value!r} joined to a path"))
    return [text for _, text in sorted(found)]


def test_the_run_dir_check_finds_literal_names(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text('"""A docstring may say run.json and d / "model"."""\nimport os\n\n\n'
                   'def f(d, e, stage):\n'
                   '    """Writes metrics.jsonl."""\n'
                   '    a = d / "run.json"\n'
                   '    b = os.path.join(d, "metrics.jsonl")\n'
                   '    c = f"{d}/report.md"\n'
                   '    g = d / "eval" / f"{stage}.json"\n'
                   '    h = os.path.join(e, "tensorboard")\n'
                   '    i = f".{d.name}.lock"\n'
                   '    j = d.glob("checkpoint-*"), f"checkpoint-{stage}"\n'
                   '    return "no run.json here", {"model": 1}, d.name == "model"\n')
    assert run_dir_literals(bad) == [
        "line 7: 'run.json'", "line 8: 'metrics.jsonl'", "line 9: '/report.md'", "line 10: 'eval' joined to a path",
        "line 11: 'tensorboard' joined to a path", "line 12: '.lock'", "line 13: 'checkpoint-'",
        "line 13: 'checkpoint-*'"]
    assert run_dir_literals(RUNDIR_MODULE)  # the owner spells them: the check sees its names


def test_only_the_run_dir_module_names_run_directory_files():
    """Every path of a run directory comes from :class:`dare.run.rundir.RunDir` (docs/architecture.md, "Runs")."""
    sources = sorted(CORE.rglob("*.py")) + _plugin_sources()
    found = {str(p.relative_to(ROOT)): hits for p in sources if p != RUNDIR_MODULE and (hits := run_dir_literals(p))}
    assert not found, f"run-directory names spelled outside dare/run/rundir.py (use RunDir): {found}"
