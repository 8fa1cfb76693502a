"""Shared pieces of the parity fixture builders (``tools/parity/build_<algo>.py``) and their tests.

A builder is run by hand, never in CI: it takes the path of a checkout of the official repository,
checks that its ``HEAD`` is the pinned commit (:func:`official_checkout`), imports only the official
functions it needs (heavy imports stubbed: :func:`stub_modules`), runs them on :class:`TinyDenoiser` with
recorded random draws, and writes a small fixture (:func:`write_fixture`: safetensors tensors + JSON
metadata, no pickle) under ``tests/fixtures/parity/<algo>/``. The test ``tests/parity/test_<algo>.py``
reads it back (:func:`read_fixture`), feeds the same draws to DARE's code with the official settings and
compares (:func:`rel_diff`). Nothing of the official code is stored in the repository.
"""

from __future__ import annotations

import ast
import importlib.machinery
import json
import os
import subprocess
import sys
import tempfile
import types
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file, save_file

__all__ = ["REPO", "FIXTURES", "TinyDenoiser", "policy_models", "official_checkout", "stub_modules",
           "official_functions", "official_lines", "write_fixture", "read_fixture", "rel_diff", "model_from_state"]

REPO = Path(__file__).resolve().parents[2]
FIXTURES = REPO / "tests" / "fixtures" / "parity"


class TinyDenoiser(torch.nn.Module):
    """A bidirectional one-layer transformer denoiser: ``model(ids [N, S], attention_mask=None).logits``
    ``[N, S, V]`` float32. Small enough for a fixture (vocabulary 16, width 16); attention to positions with
    ``attention_mask == 0`` is blocked, as in the dLLM families."""

    def __init__(self, vocab: int = 16, width: int = 16, heads: int = 2):
        super().__init__()
        self.embed = torch.nn.Embedding(vocab, width)
        self.pos = torch.nn.Parameter(torch.zeros(64, width))
        self.attn = torch.nn.MultiheadAttention(width, heads, batch_first=True)
        self.mlp = torch.nn.Sequential(torch.nn.Linear(width, 2 * width), torch.nn.GELU(), torch.nn.Linear(2 * width, width))
        self.head = torch.nn.Linear(width, vocab)

    @property
    def device(self) -> torch.device:
        return self.head.weight.device

    def get_output_embeddings(self) -> torch.nn.Linear:
        return self.head

    def set_output_embeddings(self, head: torch.nn.Linear) -> None:
        self.head = head

    def hidden(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None) -> torch.Tensor:
        """``[N, S, width]`` last hidden states (the output layer's input)."""
        h = self.embed(input_ids) + self.pos[: input_ids.shape[1]]
        pad = None if attention_mask is None else ~attention_mask.bool()
        a, _ = self.attn(h, h, h, key_padding_mask=pad, need_weights=False)
        h = h + a
        return h + self.mlp(h)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None):
        return types.SimpleNamespace(logits=self.head(self.hidden(input_ids, attention_mask)))


def policy_models(seed: int = 0) -> dict[str, TinyDenoiser]:
    """``{"current", "old", "ref"}``: a :class:`TinyDenoiser` drawn with ``torch.manual_seed(seed)`` and two copies
    of it perturbed by Gaussian noise of scale 0.15 (the rollout policy) and 0.1 (the reference policy), drawn
    in that order, so a builder's later draws are the same whichever builder calls it."""
    torch.manual_seed(seed)
    models = {"current": TinyDenoiser(), "old": TinyDenoiser(), "ref": TinyDenoiser()}
    with torch.no_grad():
        for name, scale in (("old", 0.15), ("ref", 0.1)):
            models[name].load_state_dict(models["current"].state_dict())
            for p in models[name].parameters():
                p.add_(scale * torch.randn_like(p))
    return models


def model_from_state(state: dict[str, torch.Tensor], prefix: str) -> TinyDenoiser:
    """A :class:`TinyDenoiser` with the weights stored under ``prefix`` in a fixture's tensors."""
    model = TinyDenoiser()
    model.load_state_dict({k[len(prefix):]: v for k, v in state.items() if k.startswith(prefix)})
    return model


def official_checkout(path: str | os.PathLike, commit: str) -> Path:
    """``path`` as a checkout of the official repository at ``commit`` (``git -C path rev-parse HEAD``).

    :raises SystemExit: not a git checkout, or another commit (the fixture would not match its citation).
    """
    p = Path(path).resolve()
    try:
        head = subprocess.run(["git", "-C", str(p), "rev-parse", "HEAD"], check=True, capture_output=True,
                              text=True).stdout.strip()
    except (subprocess.CalledProcessError, FileNotFoundError) as exc:
        raise SystemExit(f"{p} is not a git checkout of the official repository: {exc}") from exc
    if head != commit:
        raise SystemExit(f"{p} is at {head}, the fixture is pinned to {commit}: `git -C {p} checkout {commit}`")
    return p


def stub_modules(names: dict[str, dict[str, Any]]) -> None:
    """Put placeholder modules in ``sys.modules`` (``{module name: {attribute: value}}``), with their parent
    packages, so that an official module imports without its heavy dependencies (trl, wandb, ...). Every
    attribute not given is a placeholder class."""

    class _Module(types.ModuleType):
        def __getattr__(self, attr):
            if attr.startswith("__"):
                raise AttributeError(attr)
            value = type(attr, (), {})
            setattr(self, attr, value)
            return value

    for name, attrs in names.items():
        parts = name.split(".")
        for i in range(1, len(parts) + 1):
            sub = ".".join(parts[:i])
            if sub not in sys.modules:
                mod = _Module(sub)
                mod.__path__ = []
                mod.__spec__ = importlib.machinery.ModuleSpec(sub, None)
                sys.modules[sub] = mod
        for k, v in attrs.items():
            setattr(sys.modules[name], k, v)


def official_functions(path: str | os.PathLike, names: tuple[str, ...], namespace: dict[str, Any]) -> dict[str, Any]:
    """The functions or methods called ``names`` in the official source file ``path``, compiled from that file
    (wherever they are defined: module level, a class body or nested in a function) into ``namespace`` (the
    globals they need), for official modules whose imports cannot be satisfied here. Decorators are dropped.

    :raises SystemExit: a name is not defined in the file.
    """
    tree = ast.parse(Path(path).read_text(encoding="utf-8"), filename=str(path))
    found = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef) and node.name in names and node.name not in found:
            node.decorator_list = []
            found[node.name] = node
    missing = sorted(set(names) - set(found))
    if missing:
        raise SystemExit(f"{path} defines no {', '.join(missing)}: is the checkout at the pinned commit?")
    module = ast.Module(body=[found[n] for n in names], type_ignores=[])
    exec(compile(module, str(path), "exec"), namespace)  # noqa: S102 (the pinned official source, run by hand)
    return {n: namespace[n] for n in names}


def official_lines(path: str | os.PathLike, first: int, last: int, namespace: dict[str, Any]) -> dict[str, Any]:
    """Run lines ``first..last`` (1-based, inclusive) of the official source file ``path``, dedented, in
    ``namespace`` (the variables they read), for official code written inline in a larger function (a loss
    inside a model's ``forward``, a reward rule inside ``main``). :returns: ``namespace`` with what they set.

    :raises SystemExit: the file is shorter than ``last`` lines.
    """
    import textwrap

    lines = Path(path).read_text(encoding="utf-8").splitlines()
    if last > len(lines):
        raise SystemExit(f"{path} has {len(lines)} lines, not {last}: is the checkout at the pinned commit?")
    code = textwrap.dedent("\n".join(lines[first - 1:last]))
    exec(compile(code, f"{path}:{first}-{last}", "exec"), namespace)  # noqa: S102 (pinned official source, by hand)
    return namespace


def write_fixture(algo: str, tensors: dict[str, torch.Tensor], meta: dict[str, Any]) -> Path:
    """Write ``tests/fixtures/parity/<algo>/{tensors.safetensors,meta.json}`` (temp files, then rename)."""
    out = FIXTURES / algo
    out.mkdir(parents=True, exist_ok=True)
    for name, write in (("tensors.safetensors", lambda p: save_file({k: v.contiguous() for k, v in tensors.items()}, p)),
                        ("meta.json", lambda p: Path(p).write_text(json.dumps(meta, indent=2, sort_keys=True) + "\n"))):
        fd, tmp = tempfile.mkstemp(dir=out, suffix=".tmp")
        os.close(fd)
        write(tmp)
        os.replace(tmp, out / name)
    return out


def read_fixture(algo: str) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
    """``(tensors, meta)`` of ``tests/fixtures/parity/<algo>/``."""
    d = FIXTURES / algo
    return load_file(str(d / "tensors.safetensors")), json.loads((d / "meta.json").read_text())


def rel_diff(a: torch.Tensor, b: torch.Tensor) -> float:
    """``max |a - b| / max(max |b|, 1e-12)`` in float64 (0 for equal tensors)."""
    a, b = a.detach().double(), b.detach().double()
    return float((a - b).abs().max() / b.abs().max().clamp(min=1e-12))
