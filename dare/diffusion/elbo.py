"""Monte-Carlo ELBO of a masked-diffusion LM, with stratified mask counts (VRPO, BGPO).

A masked-diffusion LM bounds the log-likelihood of a response ``y`` (``L`` eligible tokens) by the
ELBO in its mask-count form (LLaDA, arXiv 2502.09992 eq. (12); LLaDA 1.5 / VRPO, arXiv 2505.19223
eq. (4))::

    B(y) = E_{k ~ U{1..L}} E_{|m| = k} [ (L / k) * sum_{i : m_i = 1} log p_theta(y_i | y_m) ]

where ``m`` is a uniformly random set of ``k`` masked positions and ``y_m`` the corrupted sequence.
One Monte-Carlo *term* of a corruption ``(m, p_mask)`` is ``sum_{i masked} log p_theta(y_i | y_m) / p_mask``
with ``p_mask = k / L`` (or the Bernoulli ratio ``t``); it is an unbiased estimate of ``B(y)``.

Usage (an objective; the estimator never sees a family name)::

    corr = sample_corruptions(loss_mask, num_samples=4, scheme="stratified", generator=g)
    denoise = lambda noisy: family.denoiser_logits(model, noisy, input_ids, attention_mask)
    terms = elbo_terms(denoise, input_ids, corr, mask_id)          # [B, n], one term per corruption
    score = elbo_estimate(terms, corr.lengths, normalizer="length")  # [B]
    # the same ``corr`` scores the reference policy: antithetic sampling (VRPO)

Corruption schemes (``scheme``):

* ``"stratified"`` (VRPO/BGPO, docs/algorithms.md §3.3): one ``k ~ U{1..L}`` per sequence, then
  ``k_j = ((k - 1 + round(j L / n)) mod L) + 1`` for ``j = 0..n-1``: a low-discrepancy set of mask
  counts covering ``[1, L]`` evenly; each ``k_j`` is marginally uniform, so every term stays
  unbiased. One mask per count (the whole budget on timesteps). ``round`` is half-up here (the DARE
  repo uses Python's half-to-even on ``k + jL/n``, which makes the marginal very slightly non-uniform).
* ``"uniform"``: ``n`` independent counts ``k_j ~ U{1..L}`` (the same estimator without stratification).
* ``"bernoulli"``: ``n`` independent ratios ``t_j = (1 - eps) u + eps`` and i.i.d. Bernoulli(``t_j``)
  masks, ``p_mask = t_j`` (the pre-training/SFT forward process, :mod:`dare.diffusion.forward`).

Normalisers (:func:`elbo_estimate`): ``"none"`` gives the ELBO in nats (the paper's sequence score);
``"length"`` divides by ``L`` (DARE's ``/R``, with ``R = |y|`` when EOS padding counts as response,
i.e. ``ModelFamily.pad_in_response``; ``/|y|`` for block families, as DARE's BGPO does for SDAR/LLaDA2).

Randomness: every draw takes an optional ``torch.Generator`` (CPU or the tensors' device); ``None``
uses torch's global RNG (which ``transformers.Trainer`` checkpoints, so resumed runs redraw the same
corruptions).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Literal

import torch

from dare.diffusion.likelihood import token_logprobs
from dare.randomness import RowGenerators, rand

__all__ = [
    "Scheme",
    "Corruptions",
    "stratified_mask_counts",
    "uniform_mask_counts",
    "masks_with_counts",
    "sample_corruptions",
    "elbo_term",
    "elbo_terms",
    "elbo_estimate",
]

Scheme = Literal["stratified", "uniform", "bernoulli"]
Normalizer = Literal["length", "none"]


def _rand(shape: tuple[int, ...], generator, device: torch.device) -> torch.Tensor:
    """``U[0, 1)`` float32 of ``shape`` on ``device``, drawn on the generator's own device (per row with
    :class:`dare.randomness.RowGenerators`)."""
    return rand(shape, generator, device=device)


def _uniform_count(lengths: torch.Tensor, shape: tuple[int, ...], generator: torch.Generator | None) -> torch.Tensor:
    """``k ~ U{1..L_b}`` int64 of ``shape`` (first dim ``B``); 0 where ``L_b == 0``."""
    L = lengths.reshape(-1, *([1] * (len(shape) - 1)))
    u = _rand(shape, generator, lengths.device)
    k = (u * L).floor().long() + 1
    return torch.minimum(k, L) * (L > 0)


def _eligible_uniform(eligible: torch.Tensor, n: int, generator) -> torch.Tensor:
    """``[B, n, S]`` uniforms for ``n`` corruptions of every row. With per-row generators
    (:class:`dare.randomness.RowGenerators`) row ``b`` draws ``n x L_b`` values for its ``L_b`` eligible
    positions only (2.0 elsewhere), so its masks do not depend on how far the batch is padded."""
    B, S = eligible.shape
    if not isinstance(generator, RowGenerators):
        return _rand((B, n, S), generator, eligible.device)
    out = torch.full((B, n, S), 2.0, device=eligible.device)
    for b, g in enumerate(generator.generators):
        where = eligible[b].nonzero().flatten()
        out[b][:, where] = torch.rand((n, where.numel()), generator=g, device=g.device).to(eligible.device)
    return out


def stratified_mask_counts(lengths: torch.Tensor, num_samples: int,
                           generator: torch.Generator | None = None) -> torch.Tensor:
    """Low-discrepancy mask counts (VRPO, arXiv 2505.19223 §3; DARE ``_forward_process_vrpo``).

    :param lengths: ``[B]`` int64 eligible tokens per sequence ``L_b >= 0``.
    :param num_samples: ``n >= 1`` counts per sequence.
    :returns: ``[B, n]`` int64, ``k_bj = ((k_b - 1 + floor(j L_b / n + 1/2)) mod L_b) + 1`` with one
        ``k_b ~ U{1..L_b}``; all zeros for rows with ``L_b == 0``.
    :raises ValueError: ``num_samples < 1``.
    """
    if num_samples < 1:
        raise ValueError(f"num_samples must be >= 1, got {num_samples}")
    lengths = lengths.long()
    k = _uniform_count(lengths, (lengths.shape[0], 1), generator)
    L = lengths[:, None]
    j = torch.arange(num_samples, device=lengths.device)[None, :]
    offset = torch.div(2 * j * L + num_samples, 2 * num_samples, rounding_mode="floor")  # round-half-up(j L / n)
    counts = torch.remainder(k - 1 + offset, L.clamp(min=1)) + 1
    return counts * (L > 0)


def uniform_mask_counts(lengths: torch.Tensor, num_samples: int,
                        generator: torch.Generator | None = None) -> torch.Tensor:
    """Independent mask counts ``k_bj ~ U{1..L_b}``: ``[B, n]`` int64 (0 where ``L_b == 0``).

    :raises ValueError: ``num_samples < 1``.
    """
    if num_samples < 1:
        raise ValueError(f"num_samples must be >= 1, got {num_samples}")
    return _uniform_count(lengths.long(), (lengths.shape[0], num_samples), generator)


def masks_with_counts(counts: torch.Tensor, eligible: torch.Tensor,
                      generator: torch.Generator | None = None) -> torch.Tensor:
    """Masks with exactly ``counts[b, j]`` eligible positions, chosen uniformly without replacement.

    :param counts: ``[B, n]`` int64, ``0 <= counts[b, j] <= eligible[b].sum()``.
    :param eligible: ``[B, S]`` bool, positions that may be masked (response tokens).
    :returns: ``[B, n, S]`` bool.
    :raises ValueError: a count exceeds its row's eligible tokens.
    """
    lengths = eligible.sum(dim=1)
    if bool((counts > lengths[:, None]).any()) or bool((counts < 0).any()):
        raise ValueError("mask counts must lie in [0, number of eligible positions] of their row")
    B, n = counts.shape
    scores = _eligible_uniform(eligible, n, generator).masked_fill(~eligible[:, None, :], 2.0)  # ineligible sort last
    ranks = scores.argsort(dim=-1).argsort(dim=-1)
    return ranks < counts[:, :, None]


@dataclass(frozen=True)
class Corruptions:
    """``n`` corruptions of each of ``B`` sequences, reusable across policy and reference passes.

    * ``mask``: ``[B, n, S]`` bool, the masked positions of corruption ``j`` (only eligible ones);
    * ``p_mask``: ``[B, n]`` float32, the masking probability each term is divided by (``k / L`` for
      count schemes, ``t`` for Bernoulli; 1 for rows without eligible tokens, whose terms are 0);
    * ``lengths``: ``[B]`` int64, eligible tokens ``L`` per sequence.
    """

    mask: torch.Tensor
    p_mask: torch.Tensor
    lengths: torch.Tensor

    @property
    def num_samples(self) -> int:
        """``n``, the corruptions per sequence (the Monte-Carlo budget in forward passes)."""
        return int(self.mask.shape[1])

    def noisy(self, input_ids: torch.Tensor, mask_id: int, j: int) -> torch.Tensor:
        """``x_t`` of corruption ``j``: ``[B, S]`` int64, ``input_ids`` with its masked positions set to ``mask_id``."""
        m = self.mask[:, j]
        return torch.where(m, torch.full_like(input_ids, mask_id), input_ids)


def sample_corruptions(
    eligible: torch.Tensor,
    num_samples: int,
    scheme: Scheme = "stratified",
    generator: torch.Generator | None = None,
    eps: float = 1e-3,
) -> Corruptions:
    """Draw ``num_samples`` corruptions of every sequence (module docstring for the schemes).

    :param eligible: ``[B, S]`` bool, positions that may be masked (response tokens, padding
        included iff the family counts it as response).
    :param num_samples: ``n >= 1``.
    :param scheme: ``"stratified"``, ``"uniform"`` or ``"bernoulli"``.
    :param eps: smallest Bernoulli ratio (``"bernoulli"`` only), in ``[0, 1)``.
    :raises ValueError: unknown scheme, ``num_samples < 1`` or ``eps`` outside ``[0, 1)``.
    """
    eligible = eligible.bool()
    lengths = eligible.sum(dim=1)
    if scheme in ("stratified", "uniform"):
        draw = stratified_mask_counts if scheme == "stratified" else uniform_mask_counts
        counts = draw(lengths, num_samples, generator)
        mask = masks_with_counts(counts, eligible, generator)
        p_mask = torch.where(lengths[:, None] > 0, counts.float() / lengths.clamp(min=1)[:, None].float(), 1.0)
    elif scheme == "bernoulli":
        if num_samples < 1:
            raise ValueError(f"num_samples must be >= 1, got {num_samples}")
        if not 0.0 <= eps < 1.0:
            raise ValueError(f"eps must be in [0, 1), got {eps}")
        t = (1.0 - eps) * _rand((eligible.shape[0], num_samples), generator, eligible.device) + eps
        mask = (_eligible_uniform(eligible, num_samples, generator) < t[:, :, None]) & eligible[:, None, :]
        p_mask = t
    else:
        raise ValueError(f"unknown corruption scheme {scheme!r}; use stratified, uniform or bernoulli")
    return Corruptions(mask=mask, p_mask=p_mask.float(), lengths=lengths)


def elbo_term(
    denoise: Callable[[torch.Tensor], torch.Tensor],
    input_ids: torch.Tensor,
    corruptions: Corruptions,
    mask_id: int,
    j: int,
) -> torch.Tensor:
    """One Monte-Carlo term per sequence: ``sum_{i masked in j} log p(x_i | x_t^j) / p_mask_j``.

    :param denoise: ``noisy [B, S] int64 -> aligned logits [B, S, V]`` (position ``i`` scores token
        ``i``), e.g. ``lambda x: family.denoiser_logits(model, x, input_ids, attention_mask)``.
    :param input_ids: ``[B, S]`` int64 clean sequences.
    :param j: which corruption, ``0 <= j < n``.
    :returns: ``[B]`` float32 (differentiable through ``denoise``); 0 for rows with nothing masked.
    """
    mask = corruptions.mask[:, j]
    logits = denoise(corruptions.noisy(input_ids, mask_id, j))
    lp = token_logprobs(logits, input_ids, mask)
    return lp.sum(dim=1) / corruptions.p_mask[:, j]


def elbo_terms(
    denoise: Callable[[torch.Tensor], torch.Tensor],
    input_ids: torch.Tensor,
    corruptions: Corruptions,
    mask_id: int,
) -> torch.Tensor:
    """All terms, one forward pass per corruption: ``[B, n]`` float32 (see :func:`elbo_term`).

    Objectives that need one backward per term (constant memory in ``n``, e.g. BGPO) call
    :func:`elbo_term` in their own loop instead.
    """
    return torch.stack(
        [elbo_term(denoise, input_ids, corruptions, mask_id, j) for j in range(corruptions.num_samples)], dim=1
    )


def elbo_estimate(terms: torch.Tensor, lengths: torch.Tensor, normalizer: Normalizer = "length") -> torch.Tensor:
    """Sequence ELBO estimate ``B_hat = mean_j terms[:, j]``, optionally divided by the length.

    :param terms: ``[B, n]`` float32 from :func:`elbo_terms`.
    :param lengths: ``[B]`` eligible tokens ``L`` (``Corruptions.lengths``).
    :param normalizer: ``"length"``: ``B_hat / L`` (nats per response token; DARE's VRPO/BGPO
        normaliser); ``"none"``: ``B_hat`` in nats (the paper's sequence score).
    :returns: ``[B]`` float32.
    :raises ValueError: unknown normaliser.
    """
    est = terms.mean(dim=1)
    if normalizer == "length":
        return est / lengths.clamp(min=1).to(est.dtype)
    if normalizer == "none":
        return est
    raise ValueError(f"unknown ELBO normalizer {normalizer!r}; use 'length' or 'none'")
