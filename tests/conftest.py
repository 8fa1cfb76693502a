"""Shared fixtures for the core test suite."""

from __future__ import annotations

import os

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


@pytest.fixture(scope="session")
def tiny_llada_dir(tmp_path_factory):
    """A tiny random LLaDA checkpoint (official format) with DARE's byte tokenizer."""
    from dare.testing import tiny_model

    d = tmp_path_factory.mktemp("tiny-llada") / "model"
    tiny_model("llada", d, seed=0)
    return d


@pytest.fixture
def run_cli(capsys):
    """Call ``dare.cli.main`` in-process; returns ``(exit_code, stdout, stderr)``."""
    from dare.cli import main

    def _run(*args: str):
        code = 0
        try:
            main(list(args))
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else 1
        out = capsys.readouterr()
        return code, out.out, out.err

    return _run


def pytest_collection_modifyitems(config, items):
    """Skip tests marked ``gpu`` when no CUDA device is usable, saying why (benchmarks/device_check.sh runs them)."""
    gpu_items = [item for item in items if item.get_closest_marker("gpu") is not None]
    if not gpu_items:
        return
    import torch

    if torch.cuda.is_available():
        return
    build = f"torch {torch.__version__}, CUDA build {torch.version.cuda or 'no (CPU-only build)'}"
    skip = pytest.mark.skip(reason=f"gpu: needs a CUDA device and torch.cuda.is_available() is False ({build}); "
                                   "run benchmarks/device_check.sh on a GPU machine")
    for item in gpu_items:
        item.add_marker(skip)
