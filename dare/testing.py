"""Test helpers for DARE and plugin authors (importable from tests; no pytest import at module load).

* :func:`shared_path`: files of the project's shared data/model cards, or ``pytest.skip`` with a clear
  reason when they are absent (a user's fresh clone has no ``../shared``).
* :func:`tiny_model`: a fresh tiny model of any installed family, saved in the official format.
* :class:`LogitsStub`: a fake model with scripted logits, for exact sampler tests.
* :func:`decode_batched_and_alone`: a sampler's batch vs one prompt at a time with the same keyed
  per-row generators (batch invariance of sampled decoding).
* :func:`check_parallel_block_steps`: the per-block ``unmask_step`` numbering of parallel decoding.
* :func:`seeded_weights`: overwrite a model's parameters from a seed (the same weights in any class with
  the same tensor names), for fixtures that store a recipe instead of weights.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Callable

import torch

__all__ = ["shared_path", "tiny_model", "LogitsStub", "repo_root", "left_pad", "decode_batched_and_alone",
           "check_parallel_block_steps", "seeded_weights"]


def repo_root() -> Path:
    return Path(__file__).resolve().parent.parent


def seeded_weights(model: torch.nn.Module, seed: int, out_name: str, out_scale: float = 1.0,
                   zero_out_rows: tuple[int, ...] = ()) -> torch.nn.Module:
    """Overwrite every parameter of ``model`` from ``seed`` and return it in eval mode.

    Parameters are visited in sorted name order and drawn from one ``torch.Generator(seed)`` (the global
    RNG is untouched): matrices ``0.3 * N(0, 1)``, vectors (norm gains, biases) ``1 + 0.1 * N(0, 1)``. The
    output layer ``out_name`` is then multiplied by ``out_scale`` (a confident model: top probabilities
    within ~1e-6 of 1.0, so confidences nearly tie) and its rows ``zero_out_rows`` set to 0 (their logit is
    0: the mask token is never proposed). Two classes with the same tensor names and shapes (DARE's and
    an official modeling file) get bit-identical weights.

    :raises KeyError: ``out_name`` is not a parameter of ``model``.
    """
    g = torch.Generator().manual_seed(seed)
    params = dict(model.named_parameters())
    if out_name not in params:
        raise KeyError(f"out_name {out_name!r} is not a parameter of {type(model).__name__}")
    with torch.no_grad():
        for name in sorted(params):
            p = params[name]
            r = torch.randn(p.shape, generator=g, dtype=torch.float32)
            p.copy_(0.3 * r if p.ndim > 1 else 1 + 0.1 * r)
        params[out_name].mul_(out_scale)
        for row in zero_out_rows:
            params[out_name][row] = 0.0
    return model.eval()


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
    from dare.plugins.manager import get_registry

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


def left_pad(rows: list[torch.Tensor], pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``(ids [B, W] int64, attention_mask [B, W] int64)`` of the 1-D ``rows`` left-padded to the longest."""
    width = max(len(r) for r in rows)
    ids = torch.full((len(rows), width), pad_id, dtype=torch.long)
    attn = torch.zeros(len(rows), width, dtype=torch.long)
    for i, r in enumerate(rows):
        ids[i, width - len(r):], attn[i, width - len(r):] = r, 1
    return ids, attn


def decode_batched_and_alone(sampler, model, family, tokens, prompts: list[torch.Tensor], seed: int = 0, step: int = 0):
    """Decode ``prompts`` as one left-padded batch and one at a time, each row drawing from the generator
    :meth:`dare.randomness.RowGenerators.keyed` gives its index (stream ``rollout``) in both runs.

    :param sampler: a ``Sampler`` with ``supports_row_generators``. :param tokens: the ``SpecialTokens``.
    :param prompts: 1-D int64 prompts (different lengths exercise the padding).
    :returns: ``(batched SamplerOutput, [SamplerOutput of each prompt alone])``; for a sampler whose rows
        are independent the completions, ``unmask_step`` and completion masks agree row for row.
    """
    from dare.randomness import RowGenerators

    ids, attn = left_pad(prompts, tokens.pad_id)
    gens = RowGenerators.keyed(seed, "rollout", step, range(len(prompts)))
    batched = sampler.generate(model, family, tokens, ids, attn, generator=gens)
    alone = []
    for i, p in enumerate(prompts):
        one = RowGenerators.keyed(seed, "rollout", step, [i])
        alone.append(sampler.generate(model, family, tokens, p[None], torch.ones(1, len(p), dtype=torch.long),
                                      generator=one))
    return batched, alone


def check_parallel_block_steps(unmask_step: torch.Tensor, block_length: int, nfe: int) -> None:
    """Assert the ``unmask_step`` numbering of a Fast-dLLM parallel block decoder (``threshold``/``factor``).

    :param unmask_step: ``[B, G]`` int64 from ``SamplerOutput``, ``G`` a multiple of ``block_length``.
    :param nfe: forward passes the decoder reported (no CFG).
    :raises AssertionError: a token never committed; a token numbered outside its own block's range
        ``[nb * block_length, (nb + 1) * block_length)`` (committed outside the current block); a row's numbers
        in a block that are not ``nb * block_length + 0, 1, ..., k - 1`` (a step that committed nothing while
        the row's block still had a mask); or ``nfe`` other than the sum over blocks of the most steps a row took.
    """
    B, G = unmask_step.shape
    assert bool((unmask_step >= 0).all()), "a completion token was never committed"
    own_block = (torch.arange(G, device=unmask_step.device) // block_length).expand(B, G)
    assert torch.equal(unmask_step // block_length, own_block), "a step committed outside its block"
    forwards = 0
    for nb in range(G // block_length):
        local = unmask_step[:, nb * block_length : (nb + 1) * block_length] - nb * block_length
        counts = []
        for r in range(B):
            used = sorted(set(local[r].tolist()))
            assert used == list(range(len(used))), f"row {r}, block {nb}: steps {used} skip a step"
            counts.append(len(used))
        forwards += max(counts)
    assert nfe == forwards, f"nfe {nfe}, but the blocks took {forwards} steps"
