"""Fixtures for the LLaDA2 plugin tests: a tiny random model with non-trivial weights and expert bias."""

from __future__ import annotations

import os

import pytest
import torch

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


@pytest.fixture(autouse=True, scope="module")
def _one_thread():
    """Tiny models are dominated by per-op overhead; one thread is faster and steadier on a shared CPU."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="session")
def tiny_llada2_dir(tmp_path_factory):
    """A tiny LLaDA2 checkpoint (official format, DARE byte tokenizer).

    Weights use ``initializer_range`` 0.2 so that proposals differ across positions, and every
    ``expert_bias`` holds random non-zero values so expert selection and weighting differ.
    """
    from dare.testing import tiny_model

    d = tmp_path_factory.mktemp("tiny-llada2") / "model"
    lm = tiny_model("llada2", d, seed=0, initializer_range=0.2)
    g = torch.Generator().manual_seed(7)
    with torch.no_grad():
        for module in lm.model.modules():
            if hasattr(module, "expert_bias"):
                module.expert_bias.copy_(0.1 * torch.randn(module.expert_bias.shape, generator=g))
    lm.model.save_pretrained(d)
    return d


@pytest.fixture(scope="session")
def tiny_llada2(tiny_llada2_dir):
    """The tiny checkpoint loaded through ``dare.modeling.load_model`` (eval mode)."""
    from dare.modeling import load_model

    lm = load_model(tiny_llada2_dir)
    lm.model.eval()
    return lm
