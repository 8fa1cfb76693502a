"""Fixtures for the Dream plugin tests (offline, tiny models, CPU)."""

from __future__ import annotations

import os

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

from dream_helpers import TINY, perturbed_tiny_model  # noqa: E402,F401


@pytest.fixture(scope="module")
def tiny():
    return perturbed_tiny_model()


@pytest.fixture(scope="session")
def tiny_dream_dir(tmp_path_factory):
    """A tiny random Dream checkpoint created by DARE (official format, DARE's byte tokenizer)."""
    from dare.testing import tiny_model

    d = tmp_path_factory.mktemp("tiny-dream") / "model"
    tiny_model("dream", d, seed=0)
    return d
