"""Test helpers for DARE and plugin authors (importable from tests; no pytest import at module load).

* :func:`shared_path`: files of the project's shared data/model cards, or ``pytest.skip`` with a clear
  reason when they are absent (a user's fresh clone has no ``../shared``).
* :func:`tiny_model`: a fresh tiny model of any installed family, saved in the official format.
* :class:`LogitsStub`: a fake model with scripted logits, for exact sampler tests.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Callable

import torch

__all__ = ["shared_path", "tiny_model", "LogitsStub", "repo_root"]


def repo_root() -> Path:
    return Path(__file__).resolve().parent.parent


def shared_path(*parts: str) -> Path:
    """``$DARE_SHARED_DIR/<parts>`` (default: ``<repo>/../shared``); skips the calling test if missing."""
    import pytest

    root = Path(os.environ.get("DARE_SHARED_DIR", repo_root().parent / "shared"))
    p = root.joinpath(*parts)
    if not p.exists():
        pytest.skip(f"needs the project's shared files ({p} is absent; set DARE_SHARED_DIR to run this test)")
    return p


def tiny_model(family: str, out_dir: str | os.PathLike, preset: str = "tiny", seed: int = 0, **overrides):
    """Create (and save) a tiny randomly initialised model of ``family``; returns a ``LoadedModel``."""
    from dare.modeling import create_model
    from dare.plugins import get_registry

    fam = get_registry().get("model_family", family).create()
    return create_model(fam, out_dir, preset=preset, overrides=overrides, seed=seed, overwrite=True)


class LogitsStub(torch.nn.Module):
    """A stand-in model whose logits come from ``fn(input_ids [B, L]) -> [B, L, V]``.

    ``model(input_ids, attention_mask=None, **kw).logits`` calls ``fn``; ``calls`` counts forwards.
    Use it with a family adapter whose ``logits`` calls the model, or directly with a sampler's
    functional decoder.
    """

    def __init__(self, fn: Callable[[torch.Tensor], torch.Tensor]):
        super().__init__()
        self.fn = fn
        self.calls = 0
        self.dummy = torch.nn.Parameter(torch.zeros(1))

    def forward(self, input_ids=None, attention_mask=None, **kwargs):
        self.calls += 1

        class _Out:
            pass

        out = _Out()
        out.logits = self.fn(input_ids)
        return out
