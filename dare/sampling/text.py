"""From prompt strings to completion strings with any sampler (left padding, batching, decoding)."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Callable

import torch

from dare.scaling import sharding
from dare.components import SamplerOutput, SpecialTokens
from dare.randomness import STREAMS, RowGenerators, key_seed
from dare.sampling.bundle import DecodingBundle

__all__ = ["encode_prompts", "decode_completions", "generate_texts", "TextGeneration"]


def encode_prompts(tokenizer, prompts: list[str], pad_id: int, device="cpu") -> tuple[torch.Tensor, torch.Tensor]:
    """Tokenise prompt strings (no extra special tokens: chat templates add their own) and left-pad.

    :returns: ``(input_ids [B, Lp] int64, attention_mask [B, Lp] int64)``.
    """
    ids = [tokenizer(p, add_special_tokens=False)["input_ids"] for p in prompts]
    width = max(len(x) for x in ids)
    input_ids = torch.full((len(ids), width), pad_id, dtype=torch.long)
    attn = torch.zeros((len(ids), width), dtype=torch.long)
    for i, x in enumerate(ids):
        if x:
            input_ids[i, width - len(x) :] = torch.tensor(x, dtype=torch.long)
            attn[i, width - len(x) :] = 1
    return input_ids.to(device), attn.to(device)


def decode_completions(tokenizer, completions: torch.Tensor, tokens: SpecialTokens) -> list[str]:
    """Text of each completion row: cut at the first stop id (EOS/EOT), drop mask tokens."""
    texts = []
    stops = set(tokens.stop_ids)
    for row in completions.tolist():
        cut = []
        for t in row:
            if t in stops:
                break
            if t != tokens.mask_id:
                cut.append(t)
        texts.append(tokenizer.decode(cut, skip_special_tokens=True))
    return texts


@dataclass
class TextGeneration:
    """Completions for a list of prompts, with the sampler outputs of each batch."""

    texts: list[str] = field(default_factory=list)
    outputs: list[SamplerOutput] = field(default_factory=list)
    prompt_ids: list[torch.Tensor] = field(default_factory=list)
    seconds: float = 0.0
    nfe: int = 0
    generated_tokens: int = 0
    batch_seconds: list[float] = field(default_factory=list)  # sampler wall time of each batch
    batch_tokens: list[int] = field(default_factory=list)  # decoded positions of each batch


def _generator(sampler, generator, seed: int | None, indices: list[int], device: torch.device):
    """Per-row generators keyed by ``(seed, "eval", 0, index)`` when the sampler draws per row; else one
    generator keyed by the batch's first index; else ``generator``. Keyed generators live on the model's
    ``device`` (samplers draw on the generator's device: a CPU generator would make a GPU sampler draw every
    noise tensor on the CPU, or fail where a draw takes the tensors' device)."""
    if seed is None:
        return generator
    if getattr(sampler, "supports_row_generators", False):
        return RowGenerators.keyed(seed, "eval", 0, indices, device=device)
    return torch.Generator(device=device).manual_seed(key_seed(seed, STREAMS["eval"], 0, indices[0]))


@torch.no_grad()
def generate_texts(decoding: DecodingBundle, prompts: list[str], batch_size: int = 32,
                   generator: torch.Generator | None = None, seed: int | None = None,
                   indices: list[int] | None = None, on_batch: Callable[[int], None] | None = None) -> TextGeneration:
    """Generate one completion per prompt with ``decoding``'s sampler, ``batch_size`` prompts at a time.

    ``generated_tokens`` counts decoded positions (``B x gen_length`` per batch); ``nfe`` sums the
    sampler's forward passes; ``seconds`` is wall time spent in the sampler (``batch_seconds``/``batch_tokens``
    per batch, so callers can leave out the first batch's start-up cost).

    :param decoding: the model, family, special ids, tokenizer and sampler (:class:`~dare.sampling.DecodingBundle`).
    :param seed: with ``indices`` (the prompts' global row indices), draw each prompt's sampling noise from a
        generator keyed by ``(seed, row index)`` (:mod:`dare.randomness`): a completion then does not depend on
        the batch it was decoded in, nor on the process (for samplers with ``supports_row_generators``).
        Without ``seed``, every batch draws from ``generator``.
    :param on_batch: called with the number of prompts of each finished batch (progress display).

    A sharded model (FSDP2, ZeRO-3: :func:`dare.scaling.sharding.is_sharded`) decodes in lock-step with the other
    processes (:func:`dare.scaling.sharding.lockstep`): every process must call this (give each the same number of
    prompts, :func:`dare.scaling.sharding.padded_shard`, so the batches line up too).
    """
    indices = list(range(len(prompts))) if indices is None else list(indices)
    model = decoding.model
    was_training = model.training
    model.eval()
    out = TextGeneration()
    try:
        with sharding.lockstep(model):  # a sharded model: every process runs the same forwards
            _decode_batches(decoding, prompts, batch_size, generator, seed, indices, on_batch, out)
    finally:
        model.train(was_training)
    return out


def _decode_batches(decoding: DecodingBundle, prompts, batch_size, generator, seed, indices, on_batch,
                    out: TextGeneration) -> None:
    """The batches of :func:`generate_texts`, appended to ``out``."""
    tokenizer, tokens = decoding.tokenizer, decoding.tokens
    device = next(decoding.model.parameters()).device
    for i in range(0, len(prompts), batch_size):
        chunk = prompts[i : i + batch_size]
        ids, attn = encode_prompts(tokenizer, chunk, tokens.pad_id, device)
        t0 = time.perf_counter()
        gen = _generator(decoding.sampler, generator, seed, indices[i : i + batch_size], device)
        res = decoding.generate(ids, attn, generator=gen)
        dt = time.perf_counter() - t0
        out.seconds += dt
        out.batch_seconds.append(dt)
        out.batch_tokens.append(res.completions.numel())
        out.nfe += res.nfe
        out.generated_tokens += res.completions.numel()
        out.outputs.append(res)
        out.prompt_ids.append(ids)
        out.texts.extend(decode_completions(tokenizer, res.completions, tokens))
        if on_batch is not None:
            on_batch(len(chunk))
