"""Monte-Carlo ELBO of a continuation given a context: likelihood scoring for evaluation.

A masked-diffusion LM has no tractable ``log p(y | c)``; it is scored by its ELBO (LLaDA, arXiv
2502.09992 eq. (12) and Appendix B, "conditional likelihood evaluation")::

    B(y | c) = E_{k ~ U{1..L}} E_{|m| = k} [ (L / k) * sum_{i : m_i = 1} log p_theta(y_i | c, y_m) ]  <=  log p(y | c)

with ``L = |y|`` and ``m`` a uniformly random set of ``k`` masked continuation positions (the context
is never masked). The estimate is the mean of ``mc_samples`` Monte-Carlo terms, one forward pass
each, with the mask counts drawn by :func:`dare.diffusion.elbo.sample_corruptions` (``scheme``):

* ``"stratified"`` (default): one ``k ~ U{1..L}`` per request, then ``mc_samples`` counts spread evenly
  over ``[1, L]`` (each still marginally uniform, so the estimate stays unbiased). This is the
  low-variance form of the official LLaDA evaluation (``get_log_likelihood.py``: stratified counts
  ``round(linspace(k, k + (n - 1) L / n, n))``) and of VRPO (arXiv 2505.19223 §3);
* ``"uniform"``: independent ``k ~ U{1..L}`` (the plain estimator of eq. (12));
* ``"bernoulli"``: the ``t``-form of the pre-training forward process (i.i.d. masks at ratio ``t``).

**Block-diffusion families** (``ModelFamily.attention == "block"``: SDAR, LLaDA2) factorise the
likelihood over blocks, ``log p(y | c) = sum_b log p(x^b | x^{<b})`` (BD3-LM, arXiv 2503.09573 eq. (3)),
and bound each factor by the masked-diffusion ELBO of that block. Blocks are counted from the first
token of ``[c ; y]`` (DARE's global origin, ``dare.diffusion.block``); a block's eligible tokens are its
continuation tokens (context tokens sharing a block stay clean). Every block gets its own stratified
mask counts, and one ``[x_t ; x_0]`` forward (``family.denoiser_logits``) scores all blocks at once, each
noisy block seeing itself and the clean earlier blocks, so one term is
``sum_b (L_b / k_b) sum_{i in m_b} log p(y_i | ...)``: an unbiased estimate of the block-diffusion ELBO.

**Randomness and batching.** The corruptions of a request are drawn from its own ``torch.Generator``
seeded by :func:`request_seed` ``(seed, *key)`` (stream ``likelihood`` of :mod:`dare.randomness`; the key is
the request's index, or ``(doc_id, choice)`` in a harness), never from the global RNG, so a request's estimate does not
depend on which other requests are scored with it. Forward passes batch up to ``batch_size`` corrupted rows of the
*same* length (never padded), so the logits of a row do not depend on the batch either: estimates are identical
across batch sizes.
"""

from __future__ import annotations

import hashlib
import math
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Sequence

import torch

from dare.diffusion.elbo import Scheme, sample_corruptions
from dare.diffusion.likelihood import token_logprobs

__all__ = ["ElboEstimate", "request_seed", "draw_corruptions", "elbo_loglikelihood", "greedy_matches", "encode_pair",
           "max_context_length", "SCHEMES"]

#: Mask-count schemes :func:`elbo_loglikelihood` accepts (see the module docstring).
SCHEMES: tuple[str, ...] = ("stratified", "uniform", "bernoulli")


def request_seed(seed: int, *key: int) -> int:
    """The generator seed of one request: ``key_seed(seed, STREAMS["likelihood"], *key)`` (:mod:`dare.randomness`).

    ``key`` identifies the request by integers (its index, or ``(doc_id, choice_index)``); different keys
    give unrelated streams, the same key always the same stream.

    :raises ValueError: a key part that is not an integer.
    """
    from dare.randomness import STREAMS, key_seed

    return key_seed(int(seed), STREAMS["likelihood"], *(int(k) for k in key))


@dataclass(frozen=True)
class ElboEstimate:
    """The MC-ELBO of one continuation.

    * ``logprob``: the estimate ``mean_j terms[j]`` in nats (a lower bound of ``log p(y | c)`` in
      expectation); 0 for an empty continuation;
    * ``stderr``: ``std(terms) / sqrt(n)`` (unbiased std; conservative for stratified draws, whose
      terms are negatively correlated); NaN when ``n = 1``;
    * ``num_samples``: ``n`` (forward passes spent on the estimate); ``num_tokens``: ``L = |y|``;
    * ``is_greedy``: whether greedy decoding of the continuation reproduces it (:func:`greedy_matches`),
      or None when not computed;
    * ``terms``: the ``n`` Monte-Carlo terms.
    """

    logprob: float
    stderr: float
    num_samples: int
    num_tokens: int
    is_greedy: bool | None = None
    terms: tuple[float, ...] = field(default=(), repr=False)


def draw_corruptions(
    eligible: torch.Tensor,
    mc_samples: int,
    scheme: Scheme = "stratified",
    generator: torch.Generator | None = None,
    block_size: int | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Masks and per-token weights of ``mc_samples`` corruptions of one sequence.

    :param eligible: ``[S]`` bool, the continuation positions (the only ones that may be masked).
    :param mc_samples: ``n >= 1``.
    :param scheme: ``stratified``, ``uniform`` or ``bernoulli`` (:func:`dare.diffusion.elbo.sample_corruptions`).
    :param block_size: block-diffusion block size (blocks ``i // block_size`` from position 0, each drawn
        separately), or None for one masked-diffusion "block" over the whole continuation.
    :returns: ``(mask [n, S] bool, weight [n, S] float32)``: ``weight = 1 / p_mask`` of the position's
        block on masked positions (``L_b / k_b`` for count schemes), 0 elsewhere.
    :raises ValueError: ``mc_samples < 1``, an unknown scheme or ``block_size < 1``.
    """
    eligible = eligible.bool()
    S = eligible.shape[0]
    if block_size is None:
        groups = eligible[None]
    else:
        if block_size < 1:
            raise ValueError(f"block_size must be >= 1, got {block_size}")
        blocks = torch.arange(S, device=eligible.device) // block_size
        ids = torch.unique(blocks[eligible]).tolist()
        groups = torch.stack([eligible & (blocks == b) for b in ids]) if ids else eligible[None]
    corr = sample_corruptions(groups, mc_samples, scheme=scheme, generator=generator)
    mask = corr.mask.any(dim=0)  # blocks are disjoint
    weight = (corr.mask.float() / corr.p_mask[:, :, None]).sum(dim=0)
    return mask, weight


@torch.no_grad()
def elbo_loglikelihood(
    model,
    family,
    mask_id: int,
    requests: Sequence[tuple[Sequence[int], Sequence[int]]],
    keys: Sequence | None = None,
    *,
    mc_samples: int = 128,
    scheme: Scheme = "stratified",
    seed: int = 0,
    batch_size: int = 32,
    greedy: bool = False,
) -> list[ElboEstimate]:
    """MC-ELBO of each continuation given its context (module docstring).

    :param model: the DARE model (any family); run in eval mode, no gradients.
    :param family: its :class:`~dare.components.ModelFamily`; ``family.denoiser_logits`` gives the aligned
        logits of a corrupted sequence (the ``[x_t ; x_0]`` forward for block families), and
        ``family.block_size(model.config)`` the block size (None for full attention).
    :param mask_id: the family's mask token id.
    :param requests: ``(context_ids, continuation_ids)`` token-id lists; the scored sequence is their
        concatenation (no special tokens added).
    :param keys: one key per request for :func:`request_seed`: an int or a tuple of ints (default: the
        request's index).
    :param mc_samples: Monte-Carlo terms (forward passes) per request, ``>= 1``.
    :param batch_size: corrupted rows per forward pass (rows of equal length only, never padded; the draws
        do not depend on it, the logits only through kernels whose rounding depends on the batch shape).
    :param greedy: also compute ``is_greedy`` with :func:`greedy_matches` (``|y|`` more forward passes
        per request).
    :returns: one :class:`ElboEstimate` per request, in order.
    :raises ValueError: ``mc_samples < 1``, ``batch_size < 1``, an unknown scheme, or ``keys`` of the
        wrong length.
    """
    if mc_samples < 1:
        raise ValueError(f"mc_samples must be >= 1, got {mc_samples}")
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    if scheme not in SCHEMES:
        raise ValueError(f"unknown mask-count scheme {scheme!r}; use one of {', '.join(SCHEMES)}")
    keys = list(range(len(requests))) if keys is None else list(keys)
    if len(keys) != len(requests):
        raise ValueError(f"{len(keys)} keys for {len(requests)} requests")
    device = next(model.parameters()).device
    block_size = family.block_size(model.config) if getattr(family, "attention", "full") == "block" else None

    seqs: list[torch.Tensor] = []
    masks: list[torch.Tensor] = []
    weights: list[torch.Tensor] = []
    for (ctx, cont), key in zip(requests, keys):
        ids = torch.tensor(list(ctx) + list(cont), dtype=torch.long)
        eligible = torch.zeros(ids.shape[0], dtype=torch.bool)
        eligible[len(ctx):] = True
        gen = torch.Generator().manual_seed(request_seed(seed, *(key if isinstance(key, tuple) else (key,))))
        m, w = draw_corruptions(eligible, mc_samples, scheme, gen, block_size)
        seqs.append(ids)
        masks.append(m)
        weights.append(w)

    # rows (request, j) grouped by sequence length: no padding, so a row's logits never depend on its batch
    by_length: dict[int, list[tuple[int, int]]] = defaultdict(list)
    for i, ids in enumerate(seqs):
        if len(requests[i][1]) == 0:
            continue
        for j in range(masks[i].shape[0]):
            by_length[ids.shape[0]].append((i, j))
    terms = [torch.zeros(mc_samples, dtype=torch.float64) for _ in seqs]
    was_training = model.training
    model.eval()
    try:
        for length in sorted(by_length):
            rows = by_length[length]
            for start in range(0, len(rows), batch_size):
                chunk = rows[start : start + batch_size]
                clean = torch.stack([seqs[i] for i, _ in chunk]).to(device)
                mask = torch.stack([masks[i][j] for i, j in chunk]).to(device)
                noisy = torch.where(mask, torch.full_like(clean, mask_id), clean)
                logits = family.denoiser_logits(model, noisy, clean, None)
                lp = token_logprobs(logits, clean, mask)  # [R, S] float32
                weight = torch.stack([weights[i][j] for i, j in chunk]).to(device)
                row_terms = (lp * weight).sum(dim=1).double().cpu()
                for r, (i, j) in enumerate(chunk):
                    terms[i][j] = row_terms[r]
        greedy_ok = [greedy_matches(model, family, mask_id, ctx, cont) if greedy else None for ctx, cont in requests]
    finally:
        model.train(was_training)

    out = []
    for i, t in enumerate(terms):
        n = t.numel()
        mean = float(t.mean())
        se = float(t.std(unbiased=True) / math.sqrt(n)) if n > 1 else float("nan")
        out.append(ElboEstimate(logprob=mean, stderr=se, num_samples=n, num_tokens=len(requests[i][1]),
                                is_greedy=greedy_ok[i], terms=tuple(t.tolist())))
    return out


@torch.no_grad()
def greedy_matches(model, family, mask_id: int, context: Sequence[int], continuation: Sequence[int]) -> bool:
    """Whether greedy decoding of ``|y|`` masked positions after the context reproduces ``y``.

    The check of the official LLaDA lm-eval wrapper (``eval_llada.py``, ``suffix_greedy_prediction``),
    for metrics such as LAMBADA's ``acc`` that ask whether the target is the greedy output: starting
    from ``[c ; MASK * |y|]``, each of ``|y|`` steps predicts every masked position (argmax of
    ``family.logits``, the inference forward: block-causal for block families) and commits only the
    most confident one (softmax probability). One forward pass per continuation token.

    :param context: ``[P]`` token ids; :param continuation: ``[L]`` token ids (``L = 0`` gives True).
    """
    device = next(model.parameters()).device
    target = torch.tensor(list(continuation), dtype=torch.long, device=device)
    seq = torch.tensor(list(context) + [mask_id] * len(target), dtype=torch.long, device=device)[None]
    P = len(context)
    for _ in range(len(target)):
        masked = seq[0] == mask_id
        if not bool(masked.any()):
            break
        logits = family.logits(model, seq, None)[0][masked].float()
        x0 = logits.argmax(dim=-1)
        conf = torch.softmax(logits, dim=-1).gather(-1, x0[:, None]).squeeze(-1)
        pos = torch.nonzero(masked).flatten()[int(conf.argmax())]
        seq[0, pos] = x0[int(conf.argmax())]
    return bool((seq[0, P:] == target).all())


def encode_pair(tokenizer, context: str, continuation: str,
                max_length: int | None = None) -> tuple[list[int], list[int]]:
    """Token ids of ``(context, continuation)`` as lm-eval's HF model encodes a loglikelihood request.

    Trailing whitespace of the context moves to the continuation; the continuation's ids are those of
    ``tokenizer(context + continuation)`` after the context's ids (so a BPE merge across the boundary
    is tokenised as in the whole string). No special tokens are added. With ``max_length``, the context
    is cut from the left so that both fit.

    :raises DareError: the continuation alone is longer than ``max_length``.
    """
    from dare.errors import DareError

    n_spaces = len(context) - len(context.rstrip())
    if n_spaces:
        continuation = context[-n_spaces:] + continuation
        context = context[:-n_spaces]
    whole = tokenizer(context + continuation, add_special_tokens=False)["input_ids"]
    ctx = list(tokenizer(context, add_special_tokens=False)["input_ids"]) if context else []
    cont = list(whole[len(ctx):])
    if max_length is not None and len(ctx) + len(cont) > max_length:
        if len(cont) > max_length:
            raise DareError(f"a continuation of {len(cont)} tokens does not fit the model's context of {max_length} "
                            "tokens; shorten it")
        ctx = ctx[len(ctx) + len(cont) - max_length:]
    return ctx, cont


def max_context_length(config) -> int | None:
    """A model config's context length (``max_position_embeddings`` or ``max_sequence_length``), if declared."""
    for key in ("max_position_embeddings", "max_sequence_length"):
        v = getattr(config, key, None)
        if isinstance(v, int) and not isinstance(v, bool) and v > 0:
            return v
    return None
