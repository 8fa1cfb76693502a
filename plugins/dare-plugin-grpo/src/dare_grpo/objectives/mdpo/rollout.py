"""MDPO's rollout decoder: a non-cached semi-autoregressive categorical sampler that records every step.

Source: MDPO (He et al., "MDPO: Overcoming the Training-Inference Divide of Masked Diffusion Language
Models", arXiv 2508.13148, Algorithm 1), as DARE runs it (``mdpo_llada_rollout.mdpo_diffusion_generate_llada``,
``mdpo_dream_rollout.py``; docs/algorithms.md §3.4, §5.6). The completion is decoded in ``gen_length /
block_length`` blocks, ``steps_per_block = max(1, steps // num_blocks)`` steps each (LLaDA's
:func:`dare.sampling.num_transfer_tokens` quota). At every step ``s``:

1. record the input state ``x^(s)`` (completion part);
2. one forward on the whole sequence (no cache), ``logits / T`` (``T > 0``), top-p then top-k filtering,
   ``p = softmax``; at every masked position draw ``x0 ~ Categorical(p)`` (argmax at ``T = 0``) with
   confidence ``c = p[x0]``, the probability of the drawn token under the sampling distribution;
3. record the one-shot prediction ``y^(s)`` (``x0`` at masked positions, current tokens elsewhere) and ``c``;
4. remasking score by ``conf_alg``: ``llada`` = ``c``; ``entropy`` = ``sum p log(p + 1e-10)`` (negative
   entropy); ``topk_margin`` = top-1 minus top-2 probability; ``random`` = ``U(0, 1)``; only masked
   positions of the current block compete; the quota's most confident are committed.

Positions are decoded through ``logits_fn`` (``family.logits``), so any full-attention family works (the
Dream recipe uses ``conf_alg: entropy``). DARE's running-confidence remasking (``rcr``) is off in every
recipe and not implemented. Confidence is recorded at masked positions only (0 elsewhere), the only
positions MDPO's loss weights. All draws use ``generator``; with :class:`dare.randomness.RowGenerators` (what
the MDPO trainer passes) each row draws its categorical samples and random scores from its own generator, so a
row's trajectory does not depend on the rows it is decoded with (the batch split, the process count).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Literal

import torch

from dare.randomness import RowGenerators, rand_entries
from dare.sampling import filter_top_k_top_p, num_transfer_tokens, sample_categorical, topk_transfer
from dare.sampling.options import DecodeOptions

__all__ = ["ConfAlg", "MDPORolloutParams", "MDPOTrajectory", "mdpo_decode", "remasking_scores"]

ConfAlg = Literal["llada", "entropy", "topk_margin", "random"]


@dataclass
class MDPOTrajectory:
    """Everything an MDPO rollout records (``B`` rows, ``T`` steps, ``G`` completion positions).

    * ``sequences``: ``[B, Lp + G]`` int64 final state (leftover masks possible if the model proposed
      the mask token);
    * ``inputs``: ``[B, T, G]`` int64 ``x^(s)``; ``predictions``: ``[B, T, G]`` int64 ``y^(s)``;
    * ``confidence``: ``[B, T, G]`` float32 ``c^(s)`` (0 at positions not masked in ``x^(s)``);
    * ``nfe``: forward passes (``T``).
    """

    sequences: torch.Tensor
    inputs: torch.Tensor
    predictions: torch.Tensor
    confidence: torch.Tensor
    nfe: int


def remasking_scores(probs: torch.Tensor, confidence: torch.Tensor, conf_alg: ConfAlg,
                     generator: torch.Generator | RowGenerators | None = None,
                     rows: torch.Tensor | None = None) -> torch.Tensor:
    """Remasking score of each proposal (module docstring, step 4).

    :param probs: ``[n, V]`` sampling distribution; :param confidence: ``[n]`` probability of the drawn token.
    :param rows: ``[n]`` int64 batch row of each proposal, required with :class:`dare.randomness.RowGenerators`.
    :returns: ``[n]`` float32. :raises ValueError: unknown ``conf_alg``.
    """
    if conf_alg == "llada":
        return confidence.float()
    if conf_alg == "entropy":
        return (probs * torch.log(probs + 1e-10)).sum(dim=-1).float()
    if conf_alg == "topk_margin":
        top2 = torch.topk(probs, min(2, probs.shape[-1]), dim=-1).values
        return (top2[:, 0] - top2[:, -1]).float() if top2.shape[-1] > 1 else top2[:, 0].float()
    if conf_alg == "random":
        if isinstance(generator, RowGenerators):
            return rand_entries(rows, generator, probs.device)
        gen_device = generator.device if generator is not None else probs.device
        return torch.rand(probs.shape[0], generator=generator, device=gen_device).to(probs.device)
    raise ValueError(f"unknown conf_alg {conf_alg!r}; use llada, entropy, topk_margin or random")


def _propose(logits: torch.Tensor, temperature: float, top_k: int | None, top_p: float | None,
             generator: torch.Generator | RowGenerators | None,
             rows: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(x0 [n] int64, confidence [n] float32, probs [n, V] float32)`` from masked-position logits ``[n, V]``
    (``rows`` ``[n]``: the batch row of each)."""
    logits = logits.float()
    if temperature > 0:
        logits = logits / temperature
    logits = filter_top_k_top_p(logits, top_k, top_p, fill=torch.finfo(logits.dtype).min)
    probs = torch.softmax(logits, dim=-1)
    if temperature > 0:
        x0 = sample_categorical(probs, generator, rows=rows)
        conf = torch.gather(probs, -1, x0[:, None]).squeeze(-1)
    else:
        conf, x0 = probs.max(dim=-1)
    return x0, conf, probs


@dataclass(frozen=True)
class MDPORolloutParams:
    """The settings of an MDPO rollout (:meth:`dare_grpo.objectives.mdpo.MDPO.rollout_settings` takes them from the
    rollout sampler): ``gen_length``, ``steps``, ``block_length`` (None = one block of ``gen_length``),
    ``temperature``, ``top_k``/``top_p`` (None = off) and the remasking score ``conf_alg``."""

    gen_length: int
    steps: int
    block_length: int | None = None
    temperature: float = 1.0
    top_k: int | None = None
    top_p: float | None = None
    conf_alg: ConfAlg = "llada"


@torch.no_grad()
def mdpo_decode(
    logits_fn: Callable[[torch.Tensor, torch.Tensor | None], torch.Tensor],
    prompt: torch.Tensor,
    attention_mask: torch.Tensor | None,
    options: DecodeOptions,
) -> MDPOTrajectory:
    """Decode and record every step (module docstring).

    :param logits_fn: ``(x [B, L] int64, attention_mask [B, L] | None) -> aligned logits [B, L, V]``.
    :param prompt: ``[B, Lp]`` int64, left-padded; :param attention_mask: ``[B, Lp]`` or None.
    :param options: :class:`~dare.sampling.options.DecodeOptions` with ``params`` a :class:`MDPORolloutParams`,
        ``tokens.mask_id`` and the ``generator``: a ``torch.Generator`` (None: the global RNG) or ``B`` row generators.
    :raises ValueError: ``gen_length % block_length != 0``, non-positive sizes, or row generators whose count
        is not ``B``.
    """
    p, mask_id, generator = options.params, options.tokens.mask_id, options.generator
    gen_length, steps, temperature, top_k, top_p = p.gen_length, p.steps, p.temperature, p.top_k, p.top_p
    block_length = p.block_length or gen_length
    if gen_length <= 0 or steps <= 0 or block_length <= 0 or gen_length % block_length != 0:
        raise ValueError(f"need positive gen_length ({gen_length}) and steps ({steps}), and gen_length a multiple "
                         f"of block_length ({block_length})")
    B, Lp = prompt.shape
    if isinstance(generator, RowGenerators) and len(generator) != B:
        raise ValueError(f"{len(generator)} row generators for {B} rows")
    num_blocks = gen_length // block_length
    spb = max(1, steps // num_blocks)
    x = torch.full((B, Lp + gen_length), mask_id, dtype=torch.long, device=prompt.device)
    x[:, :Lp] = prompt
    attn = None
    if attention_mask is not None:
        attn = torch.cat([attention_mask, torch.ones((B, gen_length), dtype=attention_mask.dtype,
                                                     device=prompt.device)], dim=-1)
    inputs, preds, confs = [], [], []
    for nb in range(num_blocks):
        start, end = Lp + nb * block_length, Lp + (nb + 1) * block_length
        quota = num_transfer_tokens(x[:, start:end] == mask_id, spb)
        for i in range(spb):
            mask_index = x == mask_id
            inputs.append(x[:, Lp:].clone())
            logits = logits_fn(x, attn)
            rows = mask_index.nonzero()[:, 0]
            x0, conf, probs = _propose(logits[mask_index], temperature, top_k, top_p, generator, rows)
            pred = x.clone()
            pred[mask_index] = x0
            conf_full = torch.zeros(x.shape, dtype=torch.float32, device=x.device)
            conf_full[mask_index] = conf
            preds.append(pred[:, Lp:].clone())
            confs.append(conf_full[:, Lp:].clone())
            score = torch.full(x.shape, -torch.inf, dtype=torch.float32, device=x.device)
            score[mask_index] = remasking_scores(probs, conf, p.conf_alg, generator, rows)
            score[:, end:] = -torch.inf
            transfer = topk_transfer(score, quota[:, i])
            x[transfer] = pred[transfer]
    return MDPOTrajectory(
        sequences=x, inputs=torch.stack(inputs, 1), predictions=torch.stack(preds, 1),
        confidence=torch.stack(confs, 1), nfe=len(inputs),
    )
