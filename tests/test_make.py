"""The Makefile's choices, read from `make -n` (nothing runs): the PyTorch build (`TORCH_BUILD`), the test
commands, and the test tiers of the root conftest.py that `make test-fast` selects."""

from __future__ import annotations

import importlib.util
import re
import shutil
import subprocess
import tomllib

import pytest

from dare.testing import repo_root

ROOT = repo_root()
needs_make = pytest.mark.skipif(shutil.which("make") is None, reason="GNU make is not installed")


def _dry_run(tmp_path, *args: str) -> subprocess.CompletedProcess:
    """`make -n -B ARGS` in the repository with a virtual environment path under ``tmp_path``."""
    return subprocess.run(["make", "-C", str(ROOT), "-n", "-B", f"VENV={tmp_path / 'venv'}", *args],
                          capture_output=True, text=True, timeout=60)


def _torch_install_line(out: str, venv) -> str:
    (line,) = [x for x in out.splitlines() if x.startswith(f"{venv}/bin/pip install --quiet \"torch")]
    return line


@needs_make
@pytest.mark.parametrize("build,requirement,index", [
    ("cpu", "torch==2.13.0+cpu", "https://download.pytorch.org/whl/cpu"),
    ("cuda", "torch==2.13.0+cu128", "https://download.pytorch.org/whl/cu128"),
    ("default", "torch==2.13.0", None),
    (None, "torch==2.13.0", None),  # TORCH_BUILD unset: the documented default
])
def test_torch_build_choice(tmp_path, build, requirement, index):
    res = _dry_run(tmp_path, "install", *([f"TORCH_BUILD={build}"] if build else []))
    assert res.returncode == 0, res.stderr
    venv = tmp_path / "venv"
    line = _torch_install_line(res.stdout, venv)
    assert line.startswith(f'{venv}/bin/pip install --quiet "{requirement}"')
    if index is None:
        assert "download.pytorch.org" not in res.stdout and "--index-url" not in line
    else:
        # PyTorch's index only when pip's own sources (e.g. local wheels) cannot install the pinned build
        probe = f'{venv}/bin/pip install --quiet --dry-run --no-index --no-deps "{requirement}"'
        assert f"$({probe} >/dev/null 2>&1 || echo --extra-index-url {index})" in line
    # pip's configured index serves every other package: the Makefile names no package index of its own
    assert "pypi.org" not in res.stdout and "pypi.org" not in (ROOT / "Makefile").read_text()
    # the install reports the build it got and checks it against the choice
    (check,) = [x for x in res.stdout.splitlines() if x.startswith(f"{venv}/bin/python -c 'import sys, torch")]
    assert check.endswith(f" {build or 'default'}") and "torch.version.cuda" in check
    assert f"touch {venv}/.dare-installed-{build or 'default'}" in res.stdout


@needs_make
def test_an_unknown_torch_build_is_refused(tmp_path):
    res = _dry_run(tmp_path, "install", "TORCH_BUILD=gpu")
    assert res.returncode != 0 and "TORCH_BUILD must be cpu, cuda or default (got 'gpu')" in res.stderr


def _check_build(tmp_path, build: str, cuda: str | None) -> subprocess.CompletedProcess:
    """The Makefile's build check, run against a stand-in ``torch`` module with ``version.cuda = cuda``."""
    res = _dry_run(tmp_path, "install", f"TORCH_BUILD={build}")
    (check,) = [x for x in res.stdout.splitlines() if x.startswith(f"{tmp_path / 'venv'}/bin/python -c 'import sys")]
    code = re.match(r".*? -c '(.*)' \w+$", check).group(1)
    fake = tmp_path / "fake"
    fake.mkdir(exist_ok=True)
    (fake / "torch.py").write_text(f"import types\n__version__ = 'X'\nversion = types.SimpleNamespace(cuda={cuda!r})\n")
    import sys

    return subprocess.run([sys.executable, "-c", code, build], capture_output=True, text=True, cwd=fake,
                          env={"PYTHONPATH": str(fake)}, timeout=60)


@needs_make
@pytest.mark.parametrize("build,cuda,ok,says", [
    ("cpu", None, True, "installed torch X (CPU build; TORCH_BUILD=cpu)"),
    ("cpu", "12.8", False, "installed torch X (CUDA 12.8 build; TORCH_BUILD=cpu)"),
    ("cuda", "12.8", True, "installed torch X (CUDA 12.8 build; TORCH_BUILD=cuda)"),
    ("cuda", None, False, "installed torch X (CPU build; TORCH_BUILD=cuda)"),
    ("default", None, True, "installed torch X (CPU build; TORCH_BUILD=default)"),
    ("default", "12.8", True, "installed torch X (CUDA 12.8 build; TORCH_BUILD=default)"),
])
def test_the_install_says_which_build_it_got(tmp_path, build, cuda, ok, says):
    res = _check_build(tmp_path, build, cuda)
    assert res.stdout.strip() == says
    assert (res.returncode == 0) == ok, res.stderr
    if not ok:
        assert f"TORCH_BUILD={build} asked for another build" in res.stderr


@needs_make
def test_test_targets(tmp_path):
    res = _dry_run(tmp_path, "test")
    assert res.returncode == 0, res.stderr
    assert f"{tmp_path / 'venv'}/bin/python -m pytest -q --durations=25" in res.stdout.splitlines()
    res = _dry_run(tmp_path, "test-fast")
    assert f"OMP_NUM_THREADS=1 {tmp_path / 'venv'}/bin/python -m pytest -q -m unit -n 2" in res.stdout.splitlines()
    assert "make test" in (ROOT / ".ci" / "run").read_text()  # CI keeps the whole suite


# --------------------------------------------------------------------------- test tiers (root conftest.py)

def _root_conftest():
    spec = importlib.util.spec_from_file_location("dare_root_conftest", ROOT / "conftest.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_tier_of_a_test():
    tiers = _root_conftest()
    assert tiers.tier_of("tests/test_distributed.py::test_x[llada]") == "process"
    assert tiers.tier_of("plugins/dare-plugin-grpo/tests/test_trainer.py::test_y") == "train"
    assert tiers.tier_of("tests/test_rl.py::test_z[0.1]") == "unit"  # not named: unit
    assert tiers.tier_of("tests/test_plugins.py::test_import_dare_is_light") == "process"  # one test of a file
    assert tiers.tier_of("tests/test_bad_inputs.py::test_bad_input[output-read-only-train]") == "process"
    assert tiers.tier_of("tests/test_bad_inputs.py::test_bad_input[spec-not-yaml]") == "unit"  # one parametrization
    # a file that moves (into a plugin) keeps its kind
    assert tiers.tier_of("plugins/" + "dare-plugin-x/tests/test_distributed.py::test_a[1]") == "process"


def test_every_kind_is_a_registered_marker():
    tiers = _root_conftest()
    markers = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["pytest"]["ini_options"]["markers"]
    registered = {m.split(":")[0] for m in markers}
    kinds = set(tiers.FILE_KIND.values()) | set(tiers.TEST_KIND.values())
    assert kinds <= set(tiers.KINDS) <= registered


def test_named_test_files_exist_or_are_the_code_plugins():
    """A renamed test file would silently fall back to ``unit``: every file the tiers name exists."""
    tiers = _root_conftest()
    present = {p.name for p in [*ROOT.glob("tests/test_*.py"), *ROOT.glob("plugins/*/tests/test_*.py")]}
    named = set(tiers.FILE_KIND) | {k.split("::")[0] for k in tiers.TEST_KIND}
    # test files of pieces developed alongside (the code plugin, sweeps, hostile inputs, recipes), named before
    # they land in every checkout
    optional = {"test_kernel_layers.py", "test_remote_backend.py", "test_sandbox_corpus.py", "test_rewards_code.py",
                "test_hostile_inputs.py", "test_sweep.py", "test_recipes.py"}
    assert named - optional <= present, sorted(named - optional - present)
