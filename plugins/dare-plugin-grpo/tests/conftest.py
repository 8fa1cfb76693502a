"""Fixtures for dare-plugin-grpo tests: a tiny LLaDA checkpoint and a trainer factory."""

from __future__ import annotations

import os

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


@pytest.fixture(scope="session")
def tiny_llada_dir(tmp_path_factory):
    """A tiny random LLaDA checkpoint (official format) with DARE's byte tokenizer."""
    pytest.importorskip("dare_llada")
    from dare.testing import tiny_model

    d = tmp_path_factory.mktemp("tiny-llada") / "model"
    tiny_model("llada", d, seed=0)
    return d
