"""Fixtures for dare-plugin-grpo tests: a tiny LLaDA checkpoint and a trainer factory."""

from __future__ import annotations

import os

import pytest
import torch

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


@pytest.fixture(scope="module")
def one_thread():
    """Tiny models run fastest on one CPU thread (and the CI machine is shared); restored afterwards.
    Modules opt in with ``pytestmark = pytest.mark.usefixtures("one_thread")``."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
