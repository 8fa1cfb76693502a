"""Dream's official masked-diffusion decoder (``diffusion_generate``), with Fast-dLLM acceleration.

Source: HKUNLP Dream ``generation_utils.py`` (``DreamGenerationMixin._sample`` and ``sample_tokens``;
Dream 7B, arXiv 2508.15487; docs/model-families.md §2.7; docs/algorithms.md §5.3). The completion starts as
``max_new_tokens`` mask tokens after the prompt. With mask ratios ``t_i = linspace(1, eps, steps+1)``,
step ``i`` (``t = t_i``, ``s = t_{i+1}``) runs the model on the whole sequence, takes the aligned
logits of every masked position and

* ``origin``: reveals each masked position independently with probability ``1 - s/t`` (1 at the last
  step), sampling its token (the masked-diffusion reverse step with a linear schedule ``alpha_t = 1 - t``:
  ``(alpha_s - alpha_t) / (1 - alpha_t) = 1 - s/t``; MDLM, arXiv 2406.07524);
* ``maskgit_plus`` / ``topk_margin`` / ``entropy``: proposes a token per masked position with a
  confidence (probability of the token; top-1 minus top-2 probability; negative entropy
  ``sum p log p``) and commits ``n = int(num_mask * (1 - s/t))`` positions of each row
  (``int(num_mask)`` at the last step; ``num_mask`` = the row's masked tokens): the ``n`` most
  confident, or ``n`` drawn without replacement from ``softmax(confidence / alg_temp)`` when
  ``alg_temp > 0`` (MaskGIT, arXiv 2202.04200).

Tokens are drawn by ``sample_tokens``: logits / temperature (when > 0), top-p then top-k filtering
(filled with ``finfo.min``), softmax, then a categorical draw (argmax at temperature 0).

Per-row schedules (batch invariance). The release computes ``num_mask`` as the batch's *mean* mask
count, so a row's tokens depend on which rows share its batch (evaluation scores then depend on
``eval.batch_size``). DARE counts each row's own masks, so a row decodes the same at any batch size
(greedy; draws from a shared generator follow the batch order); the release's coupling is kept under
``release_quirks``. Batch size 1 is the same either way.

Three behaviours of the release are reproduced only when ``release_quirks`` is on (always for
:func:`diffusion_generate`, opt-in for :class:`dare_dream.sampler.DreamSampler`):

1. the batch-mean count above;
2. a row may commit non-masked positions, which then get the mask id: a row holding fewer masks
   than ``n`` (possible once the model has proposed the mask token itself, which keeps that position
   masked, or under the batch-mean count) still commits ``n`` positions via ``torch.topk``, and with
   ``alg_temp`` a ``softmax(confidence / alg_temp)`` that underflows to fewer than ``n`` positive entries
   lets ``torch.multinomial`` return zero-probability (non-masked) positions. Without quirks a row
   commits only its own masked positions (underflowed draws are completed by confidence order);
3. ``torch.distributions.Categorical`` validates its probabilities (simplex to 1e-6) and the
   release's bare ``except`` then falls back to argmax for the whole step; in bf16 rounding alone can
   fail the check, so temperature is silently ignored at such a step. Without quirks the draw
   always happens.

Generation defaults (top_k). The release builds its settings with
``DreamGenerationConfig.from_model_config(model.config)``; under the transformers it pins (4.46.2)
``PretrainedConfig`` still carries the legacy generation defaults ``temperature=1.0, top_k=50,
top_p=1.0``, so every argument the caller omits takes those values, although the checkpoint's
``generation_config.json`` says ``top_k: null, top_p: null`` (and no temperature, i.e. 0). The usual
published call passes ``temperature`` and ``top_p`` but not ``top_k``, so the release decodes with
``top_k=50``, which changes ``entropy`` and ``topk_margin`` confidences. DARE's choice:
:func:`diffusion_generate`, a drop-in for the release, reproduces the release (``generation_defaults=
"release"``: omitted arguments resolve as above; ``"generation_config"`` gives the file's values), while
:class:`dare_dream.sampler.DreamSampler`, configured explicitly in a spec, defaults to the checkpoint's stated settings
(greedy, ``top_k: null``); set ``top_k: 50`` there to match numbers produced with the release.

Fast-dLLM (arXiv 2505.22618; NVlabs/Fast-dLLM ``dream/model/generation_utils_block.py``), as parameters:

* ``block_length``: decode the completion in blocks left to right, ``steps / num_blocks`` steps each
  with the schedule above inside the block (``t`` runs from 1 to ``eps`` in every block); ``None`` (the
  default) is one block, the release's decoder.
* ``cache: prefix | dual``: block-wise approximate KV cache (:mod:`dare.sampling.kv_cache`) through the
  family's ``kv_logits`` (Dream's shifted logits are aligned exactly by running one extra position,
  :meth:`dare_dream.family.DreamFamily.kv_logits`). The block's first step refreshes the cache and
  commits like any step; only the block's positions compete. Exact at refresh steps and for a 1-layer
  model. ``refresh_commit="first"`` is Fast-dLLM's Dream code instead (token for token, checked by
  ``tests/test_parity_fastdllm.py``): the refresh commits only the block's first position (its exact
  proposal, whatever its confidence) and the cached steps run ``[start, stop)``, so the position before the
  block keeps its refresh-time keys/values (the default re-runs it in every cached step to score ``start``);
  the fixed schedule then ranks over that code's columns (:func:`fastdllm_window`: block plus suffix, or the
  block), so exact ties break as its ``torch.topk`` breaks them when the confidences are scored in its dtype.
* ``threshold`` / ``factor``: confidence-aware parallel decoding (:mod:`dare.sampling.parallel`) ranked by
  the proposal's probability (``alg: maskgit_plus``, Fast-dLLM's ``confidence_threshold``): each block is
  denoised until it has no mask, every step committing the positions the rule picks (at least one).

Confidence dtype: under a Fast-dLLM rule (a cache, a threshold, a factor) the confidences (probability, margin,
entropy) are computed in float64 (:func:`dare.sampling.fastdllm_probs`), as Fast-dLLM's LLaDA code does; the
tokens are drawn as before. Fast-dLLM's Dream code scores in the logits' dtype (``generation_utils_block.py``
``sample_tokens``): on fp32 logits both give its tokens on the parity fixture (``tests/test_parity_fastdllm.py``,
whose near-ties lie at 1.0 above the threshold), while in bf16 (~3 significant digits) the logits' dtype ties many
confidences at 1.0 and the order falls back to position order. The cache-free decoder keeps the release's rule
(the logits' dtype), so :func:`diffusion_generate` stays the release token for token.

Without a cache and a parallel rule, masked positions before the block's end compete (for one block:
the whole sequence, as in the release). NaN/Inf logits raise :class:`dare.sampling.NonFiniteLogitsError`.

With ``generator=None`` every random draw uses torch's global RNG in the release's order, so
:func:`diffusion_generate` returns the release's sequences for the same seed, not only at
temperature 0.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Literal

import torch

from dare.components import SpecialTokens
from dare.errors import DareError
from dare.randomness import RowGenerators, multinomial, rand_entries, row_generator
from dare.sampling import (
    CACHE_MODES,
    BlockKVCache,
    Trajectory,
    factor_transfer,
    fastdllm_probs,
    filter_top_k_top_p,
    require_finite_logits,
    threshold_transfer,
)
from dare.sampling.options import DecodeOptions
from dare_dream.params import ALGORITHMS, Confidence, DreamSamplerParams

__all__ = [
    "DreamSamplerError",
    "sample_tokens",
    "fastdllm_window",
    "transfer_count",
    "row_transfer_counts",
    "select_positions",
    "select_positions_per_row",
    "RELEASE_CONFIG_DEFAULTS",
    "decode",
    "decode_options",
    "diffusion_generate",
]


class DreamSamplerError(DareError, ValueError):
    """An invalid argument of :func:`diffusion_generate` / :func:`decode` (the message names it)."""


# --------------------------------------------------------------------------- token proposals
def _categorical(probs: torch.Tensor, generator: torch.Generator | RowGenerators | None, validate: bool,
                 rows: torch.Tensor | None = None) -> torch.Tensor:
    """One draw per row of ``probs`` ``[N, V]``, as ``torch.distributions.Categorical(probs).sample()``.

    Same normalisation and the same ``torch.multinomial`` call, so the global RNG advances exactly as
    in the release. With ``validate`` the probabilities must pass ``Categorical``'s simplex check. With
    :class:`dare.randomness.RowGenerators` row ``i`` of ``probs`` draws from generator ``rows[i]``.

    :raises ValueError: ``validate`` and a row is not on the simplex to 1e-6.
    """
    p = probs / probs.sum(-1, keepdim=True)
    if validate and not bool(((p >= 0).all(-1) & ((p.sum(-1) - 1).abs() < 1e-6)).all()):
        raise ValueError("probabilities are not on the simplex")
    if isinstance(generator, RowGenerators):
        return multinomial(p.reshape(-1, p.shape[-1]), 1, generator, replacement=True, rows=rows).reshape(p.shape[:-1])
    return torch.multinomial(p.reshape(-1, p.shape[-1]), 1, True, generator=generator).T.reshape(p.shape[:-1])


def sample_tokens(
    logits: torch.Tensor,
    temperature: float = 0.0,
    top_p: float | None = None,
    top_k: int | None = None,
    confidence: Confidence = "probability",
    generator: torch.Generator | RowGenerators | None = None,
    release_quirks: bool = False,
    rows: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Propose a token and its confidence for each row (Dream ``generation_utils.sample_tokens``); the confidence in
    the logits' dtype, the release's rule (:func:`_sample_tokens` with ``fastdllm`` documents every argument)."""
    return _sample_tokens(logits, temperature, top_p, top_k, confidence, generator, release_quirks, rows)


def _sample_tokens(
    logits: torch.Tensor,
    temperature: float = 0.0,
    top_p: float | None = None,
    top_k: int | None = None,
    confidence: Confidence = "probability",
    generator: torch.Generator | RowGenerators | None = None,
    release_quirks: bool = False,
    rows: torch.Tensor | None = None,
    fastdllm: bool = False,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Propose a token and its confidence for each row (Dream ``generation_utils.sample_tokens``).

    :param logits: ``[N, V]`` aligned logits of masked positions (any float dtype; kept).
    :param temperature: ``> 0`` samples from ``softmax(logits / T)``; ``0`` takes the argmax.
    :param top_p: nucleus mass (None or ``>= 1`` = off); :param top_k: None = off.
    :param confidence: ``probability`` of the proposed token, ``margin`` top-1 minus top-2
        probability, or ``neg_entropy`` ``sum p log(p + 1e-10)`` (all after filtering).
    :param release_quirks: fall back to argmax when ``Categorical`` would reject the probabilities.
    :param generator: a ``torch.Generator`` (None = the global RNG), or :class:`dare.randomness.RowGenerators`
        with ``rows`` ``[N]``: the batch row (generator) of each of ``logits``' rows.
    :param fastdllm: score the confidence from the same (tempered, filtered) logits in float64
        (:func:`dare.sampling.fastdllm_probs`), for decoding under a Fast-dLLM rule; the tokens are unchanged.
    :returns: ``(confidence [N] logits dtype (float64 with ``fastdllm``), tokens [N] int64)``.
    """
    if temperature > 0:
        logits = logits / temperature
    logits = filter_top_k_top_p(logits, top_k, top_p, fill=torch.finfo(logits.dtype).min)
    probs = torch.softmax(logits, dim=-1)
    if temperature > 0:
        try:
            x0 = _categorical(probs, generator, validate=release_quirks, rows=rows)
            conf = torch.gather(probs, -1, x0.unsqueeze(-1)).squeeze(-1)
        except ValueError:
            conf, x0 = probs.max(dim=-1)
    else:
        conf, x0 = probs.max(dim=-1)
    if fastdllm:
        probs = fastdllm_probs(logits)
        conf = torch.gather(probs, -1, x0.unsqueeze(-1)).squeeze(-1)
    if confidence == "margin":
        top2 = torch.topk(probs, 2, dim=-1).values
        conf = top2[:, 0] - top2[:, 1]
    elif confidence == "neg_entropy":
        conf = torch.sum(probs * torch.log(probs + 1e-10), dim=-1)
    return conf, x0


# --------------------------------------------------------------------------- commit schedule
def transfer_count(mask_index: torch.Tensor, t: torch.Tensor, s: torch.Tensor, last: bool) -> int:
    """The release's count for every row at one step: ``int(num_mask * (1 - s/t))``, ``int(num_mask)`` at the last.

    ``num_mask`` is the number of masks per row averaged over the batch (the batch coupling kept under
    ``release_quirks``), and the product is computed in float32 like the release (so
    ``7 * (1 - 0.75/0.875)`` rounds as it does there).

    :param mask_index: ``[B, L]`` bool; :param t: ``[]`` float32 current ratio; :param s: ``[]``
        float32 next ratio.
    """
    num_mask = mask_index.sum() / mask_index.shape[0]
    return int(num_mask) if last else int(num_mask * (1 - s / t))


def row_transfer_counts(mask_index: torch.Tensor, t: torch.Tensor, s: torch.Tensor, last: bool) -> torch.Tensor:
    """Per-row counts: ``int(n_b * (1 - s/t))`` (``n_b`` at the last step), ``n_b`` = row ``b``'s masks.

    The release's formula and float32 rounding applied to each row's own mask count, so a row's count
    does not depend on the batch (for ``B = 1`` it equals :func:`transfer_count`).

    :param mask_index: ``[B, L]`` bool; :param t: ``[]`` float32; :param s: ``[]`` float32.
    :returns: ``[B]`` int64.
    """
    num_mask = mask_index.sum(dim=1).to(torch.float32)
    if last:
        return num_mask.to(torch.int64)
    return torch.floor(num_mask * (1 - s / t)).to(torch.int64)


def _draw_positions(probs: torch.Tensor, confidence: torch.Tensor, k: int, generator) -> torch.Tensor:
    """``k`` distinct indices of one row drawn from ``probs`` ``[L]`` without replacement; when fewer
    than ``k`` have positive probability (underflow of ``softmax(conf / alg_temp)``) the rest are the
    most confident remaining finite positions (the ``alg_temp -> 0`` limit)."""
    positive = int((probs > 0).sum())
    if positive:
        drawn = torch.multinomial(probs, min(k, positive), generator=generator)
    else:
        drawn = torch.empty(0, dtype=torch.long, device=probs.device)
    if drawn.numel() == k:
        return drawn
    rest = confidence.clone()
    rest[drawn] = -torch.inf
    return torch.cat([drawn, torch.topk(rest, k - drawn.numel()).indices])


def select_positions(
    confidence: torch.Tensor,
    n: int,
    alg_temp: float | None,
    generator: torch.Generator | None = None,
    release_quirks: bool = False,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Which positions each row commits: ``(rows, cols)`` int64 index vectors.

    :param confidence: ``[B, L]``, ``-inf`` at positions that are not masked.
    :param n: positions per row (> 0). Top-``n`` confidence when ``alg_temp`` is None/0, else ``n``
        draws without replacement from ``softmax(confidence / alg_temp)`` (one batched
        ``torch.multinomial`` as the release when every row has ``n`` candidates).
    :param release_quirks: keep the release's ``-inf`` picks of short rows (see module docstring);
        otherwise a row commits at most its finite-confidence positions.
    """
    B = confidence.shape[0]
    if alg_temp is None or alg_temp == 0:
        cols = torch.topk(confidence, n).indices
        rows = torch.arange(B, device=confidence.device)[:, None].expand_as(cols)
        if not release_quirks:
            keep = torch.isfinite(torch.gather(confidence, 1, cols))
            rows, cols = rows[keep], cols[keep]
        return rows.reshape(-1), cols.reshape(-1)
    probs = torch.softmax(confidence / alg_temp, dim=-1)
    if release_quirks or bool(((probs > 0).sum(dim=1) >= n).all()):
        cols = multinomial(probs, n, generator)
        rows = torch.arange(B, device=confidence.device)[:, None].expand_as(cols)
        return rows.reshape(-1), cols.reshape(-1)
    available = torch.isfinite(confidence).sum(dim=1)
    picks = [_draw_positions(probs[b], confidence[b], min(n, int(available[b])), row_generator(generator, b))
             for b in range(B)]
    rows = torch.cat([torch.full_like(p, b) for b, p in enumerate(picks)])
    return rows, torch.cat(picks)


def select_positions_per_row(
    confidence: torch.Tensor,
    counts: torch.Tensor,
    alg_temp: float | None,
    generator: torch.Generator | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """:func:`select_positions` with a count per row (``counts`` ``[B]`` int64), each row on its own.

    Row ``b`` commits ``min(counts[b], its finite positions)``: its top confidences, or (``alg_temp > 0``)
    draws without replacement from ``softmax(confidence[b] / alg_temp)`` completed by confidence order on
    underflow. Rows are handled one at a time, so a row's choice never depends on the others; with
    :class:`dare.randomness.RowGenerators` row ``b`` draws from generator ``b`` over its finite positions only.

    :returns: ``(rows, cols)`` int64 index vectors.
    """
    available = torch.isfinite(confidence).sum(dim=1)
    rows, cols = [], []
    for b in range(confidence.shape[0]):
        n = min(int(counts[b]), int(available[b]))
        if n <= 0:
            continue
        if alg_temp is None or alg_temp == 0:
            picks = torch.topk(confidence[b], n).indices
        elif isinstance(generator, RowGenerators):
            # draw among the row's own candidates only: torch.multinomial consumes one value per entry, so the
            # batch's padded length must not change which value lands on which position
            cand = torch.isfinite(confidence[b]).nonzero().flatten()
            conf = confidence[b, cand]
            picks = cand[_draw_positions(torch.softmax(conf / alg_temp, dim=-1), conf, n, generator.generators[b])]
        else:
            picks = _draw_positions(torch.softmax(confidence[b] / alg_temp, dim=-1), confidence[b], n, generator)
        rows.append(torch.full_like(picks, b))
        cols.append(picks)
    if not rows:
        empty = torch.empty(0, dtype=torch.long, device=confidence.device)
        return empty, empty
    return torch.cat(rows), torch.cat(cols)


# --------------------------------------------------------------------------- one denoising step
@dataclass(frozen=True)
class _Proposer:
    """:func:`sample_tokens` with one call's sampling settings bound: ``params`` (a
    :class:`~dare_dream.params.DreamSamplerParams`: ``temperature``, ``top_p``, ``top_k``, ``release_quirks``), the
    ``generator`` and ``fastdllm`` (a Fast-dLLM rule applies: confidences in float64)."""

    params: Any
    generator: torch.Generator | None
    fastdllm: bool = False

    @property
    def release_quirks(self) -> bool:
        return self.params.release_quirks

    def __call__(self, logits: torch.Tensor, confidence: Confidence = "probability", rows: torch.Tensor | None = None):
        p = self.params
        return _sample_tokens(logits, p.temperature, p.top_p, p.top_k, confidence, self.generator, p.release_quirks,
                              rows, self.fastdllm)


def _origin_step(x, mask_index, mask_logits, p_transfer, mask_id: int, propose: _Proposer) -> None:
    """``origin``: each masked position reveals with probability ``p_transfer``; ``x`` is updated in place."""
    x0 = torch.full((mask_logits.shape[0],), mask_id, dtype=torch.long, device=x.device)
    rows = mask_index.nonzero(as_tuple=True)[0]
    reveal = rand_entries(rows, propose.generator, x.device) < p_transfer
    if bool(reveal.any()):
        _, x0[reveal] = propose(mask_logits[reveal], rows=rows[reveal])
    x[mask_index] = x0


def fastdllm_window(cache: str, start: int, end: int, length: int) -> tuple[int, int]:
    """The columns Fast-dLLM's Dream code ranks at a cached step after the refresh of the block ``[start, end)``:
    the block plus the suffix ``[start, length)`` with the prefix cache, the block with the dual cache
    (NVlabs/Fast-dLLM ``dream/model/generation_utils_block.py``, ``full_confidence`` of ``x[:, current_block_start:]``
    or of the block, ``-inf`` off the masked positions, then ``torch.topk``). CPU ``torch.topk`` may pick another
    member of an exact tie at another width, so ``refresh_commit="first"`` ranks over these columns.

    :raises ValueError: ``cache`` is neither ``"prefix"`` nor ``"dual"``.
    """
    if cache not in ("prefix", "dual"):
        raise ValueError(f"fastdllm_window needs cache prefix or dual, got {cache!r}")
    return (start, length) if cache == "prefix" else (start, end)


def _confidence_step(x, mask_index, mask_logits, counts: tuple, mask_id: int, alg: str, alg_temp, propose: _Proposer,
                     window: tuple[int, int] | None = None):
    """``maskgit_plus`` / ``topk_margin`` / ``entropy``: commit the chosen proposals in place.

    ``counts`` is ``(t, s, last)`` for :func:`row_transfer_counts` (:func:`transfer_count`, the batch
    mean, under ``release_quirks``); proposals are drawn first, as in the release, so the RNG advances the
    same way even at a step that commits nothing. ``window = (w0, w1)``: rank over those columns only (the
    masked positions lie inside), as Fast-dLLM's Dream code ranks a cached step over the block plus the suffix
    (prefix cache) or the block (dual cache), so exact ties break as its ``torch.topk`` breaks them; None = the
    whole sequence.
    """
    conf, x0 = propose(mask_logits, ALGORITHMS[alg], rows=mask_index.nonzero(as_tuple=True)[0])
    full = torch.full(x.shape, -torch.inf, dtype=conf.dtype, device=x.device)
    full[mask_index] = conf
    w0, w1 = (0, x.shape[1]) if window is None else window
    if propose.release_quirks:
        n = transfer_count(mask_index, *counts)
        if n <= 0:
            return
        rows, cols = select_positions(full[:, w0:w1], n, alg_temp, propose.generator, release_quirks=True)
    else:
        rows, cols = select_positions_per_row(full[:, w0:w1], row_transfer_counts(mask_index, *counts), alg_temp,
                                              propose.generator)
    cols = cols + w0
    proposal = torch.full_like(x, mask_id)
    proposal[mask_index] = x0
    x[rows, cols] = proposal[rows, cols]


def _parallel_step(x, mask_index, mask_logits, mask_id: int, threshold, factor, propose: _Proposer) -> None:
    """Fast-dLLM parallel decoding: propose tokens with their probabilities, commit what the rule picks
    (:func:`dare.sampling.threshold_transfer` / :func:`~dare.sampling.factor_transfer`); proposals of the
    mask token are never candidates."""
    conf, x0 = propose(mask_logits, "probability", rows=mask_index.nonzero(as_tuple=True)[0])
    full = torch.full(x.shape, -torch.inf, dtype=conf.dtype, device=x.device)
    full[mask_index] = conf
    proposal = torch.full_like(x, mask_id)
    proposal[mask_index] = x0
    full = full.masked_fill(proposal == mask_id, -torch.inf)
    transfer = threshold_transfer(full, threshold) if threshold is not None else factor_transfer(full, factor)
    x[transfer] = proposal[transfer]


def _check_params(p) -> None:
    """Every problem of ``p`` (:class:`~dare_dream.params.DreamSamplerParams`, possibly built unvalidated by
    :func:`decode_options`) in one :class:`DreamSamplerError`, named as the release names the arguments."""
    steps, max_new_tokens, eps, alg, alg_temp = p.steps, p.gen_length, p.eps, p.alg, p.alg_temp
    temperature, top_p, top_k, block_length = p.temperature, p.top_p, p.top_k, p.block_length
    cache, threshold, factor = p.cache, p.threshold, p.factor
    problems = []
    if steps <= 0:
        problems.append(f"steps must be positive (got {steps})")
    if max_new_tokens <= 0:
        problems.append(f"max_new_tokens must be positive (got {max_new_tokens})")
    if not 0.0 <= eps < 1.0:
        problems.append(f"eps must be in [0, 1) (got {eps})")
    if alg not in ALGORITHMS:
        problems.append(f"alg must be one of {', '.join(ALGORITHMS)} (got {alg!r})")
    if alg_temp is not None and alg_temp < 0:
        problems.append(f"alg_temp must be None or >= 0 (got {alg_temp})")
    if temperature < 0:
        problems.append(f"temperature must be >= 0 (got {temperature})")
    if top_p is not None and not 0.0 < top_p <= 1.0:
        problems.append(f"top_p must be None or in (0, 1] (got {top_p})")
    if top_k is not None and top_k < 1:
        problems.append(f"top_k must be None or >= 1 (got {top_k})")
    if block_length is not None:
        if block_length <= 0 or max_new_tokens % block_length:
            problems.append(f"max_new_tokens ({max_new_tokens}) must be a multiple of block_length ({block_length})")
        elif steps > 0 and steps % (max_new_tokens // block_length):
            problems.append(f"steps ({steps}) must be a multiple of the number of blocks "
                            f"({max_new_tokens // block_length})")
    if cache not in CACHE_MODES:
        problems.append(f"cache must be one of {', '.join(CACHE_MODES)} (got {cache!r})")
    if threshold is not None and factor is not None:
        problems.append("give at most one of threshold and factor")
    if threshold is not None and not 0.0 < threshold <= 1.0:
        problems.append(f"threshold must be in (0, 1] (got {threshold})")
    if factor is not None and factor <= 0:
        problems.append(f"factor must be > 0 (got {factor})")
    if (threshold is not None or factor is not None) and (alg != "maskgit_plus" or alg_temp not in (None, 0)):
        problems.append("threshold/factor rank positions by the proposal's probability (Fast-dLLM): use "
                        f"alg='maskgit_plus' without alg_temp (got alg={alg!r}, alg_temp={alg_temp})")
    if problems:
        raise DreamSamplerError("; ".join(problems))


# --------------------------------------------------------------------------- the loop
@torch.no_grad()
def decode(
    logits_fn: Callable[[torch.Tensor, torch.Tensor | None], torch.Tensor],
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor | None,
    options: DecodeOptions,
) -> tuple[torch.Tensor, torch.Tensor, int]:
    """The decoding loop over an aligned-logits function (module docstring).

    A block stops early once none of its positions is masked: later steps would change nothing and
    draw nothing.

    :param logits_fn: ``(x [B, L] int64, attention_mask [B, L] | None) -> [B, L, V]`` aligned logits
        (position i scores token i), e.g. ``family.logits`` bound to a model.
    :param input_ids: ``[B, Lp]`` int64 prompts, left-padded.
    :param attention_mask: ``[B, Lp]`` (1 real, 0 pad) or None; extended with ones.
    :param options: :class:`~dare.sampling.options.DecodeOptions` with ``params`` a
        :class:`~dare_dream.params.DreamSamplerParams`: ``gen_length`` (the release's ``max_new_tokens``), ``steps``,
        ``eps``, ``alg``, ``alg_temp``, ``temperature``, ``top_p``, ``top_k``, ``release_quirks``, ``block_length``
        (``None`` = ``gen_length``: one block, the release), ``cache`` (``none``/``prefix``/``dual``; needs
        ``options.kv_logits`` ``(x, attention_mask, past, start, end, use_cache) -> (logits, cache)``,
        :mod:`dare.sampling.kv_cache`), ``threshold`` / ``factor`` (Fast-dLLM parallel decoding: at most one,
        ``alg="maskgit_plus"``), ``refresh_commit`` (with a cache, what a block's refresh step, its first, a full
        forward, commits: ``rule``, the step's rule over the block's positions, DARE's default, as LLaDA; ``first``,
        only the block's first position, its proposal from the exact logits, as Fast-dLLM's Dream code,
        ``generation_utils_block.py``: the cached steps never score that position, whose aligned logits come from
        the position before the window; the fixed schedule then runs steps ``1 .. steps_per_block - 1`` on the
        rest); ``tokens.mask_id``; the ``generator``.
    :returns: ``(x [B, Lp + gen_length] int64, unmask_step [B, gen_length] int64, nfe)``;
        ``unmask_step`` is the step that committed each completion token (-1: still masked); with
        ``threshold``/``factor`` a token committed at block ``nb``'s ``i``-th step gets ``nb * block_length + i``
        (a block takes at most ``block_length`` steps), so a row's numbers do not depend on the other rows.
    :raises DreamSamplerError: an argument out of range (all problems in one message), or a cache
        without ``kv_logits``.
    :raises NonFiniteLogitsError: the model returned NaN/Inf logits.
    """
    p, mask_id = options.params, options.tokens.mask_id
    _check_params(p)
    if p.cache != "none" and options.kv_logits is None:
        raise DreamSamplerError(f"cache={p.cache!r} needs kv_logits (the family's cached forward)")
    if p.refresh_commit not in ("rule", "first"):
        raise DreamSamplerError(f"refresh_commit must be 'rule' or 'first' (got {p.refresh_commit!r})")
    B, Lp = input_ids.shape
    x = torch.nn.functional.pad(input_ids, (0, p.gen_length), value=mask_id)
    if attention_mask is not None:
        ones = torch.ones((B, p.gen_length), dtype=attention_mask.dtype, device=attention_mask.device)
        attention_mask = torch.cat([attention_mask, ones], dim=1)
    block_length = p.gen_length if p.block_length is None else p.block_length
    num_blocks = p.gen_length // block_length
    spb = p.steps // num_blocks
    parallel = p.threshold is not None or p.factor is not None
    timesteps = torch.linspace(1, p.eps, spb + 1, device=x.device)
    propose = _Proposer(p, options.generator, p.cache != "none" or parallel)
    kv = None if p.cache == "none" else BlockKVCache(options.kv_logits, p.cache)
    traj = Trajectory(B, p.gen_length, device=x.device)
    nfe = 0
    for nb in range(num_blocks):
        start, end = Lp + nb * block_length, Lp + (nb + 1) * block_length
        lo = 0 if kv is None and not parallel else start  # which masked positions compete
        for i in range(block_length if parallel else spb):
            mask_index = x == mask_id
            mask_index[:, :lo] = False
            mask_index[:, end:] = False
            if not bool(mask_index.any()):
                break
            step = nb * (block_length if parallel else spb) + i  # per block: independent of the other rows
            if kv is None:
                mask_logits = logits_fn(x, attention_mask)[mask_index]
            else:
                # Fast-dLLM's Dream rule ("first"): the refresh commits position start alone; later steps run the
                # window [start, stop) and score positions start + 1 .. end - 1
                w0 = start + 1 if p.refresh_commit == "first" and i > 0 else start
                w1 = start + 1 if p.refresh_commit == "first" and i == 0 else end
                mask_index[:, :w0] = False
                mask_index[:, w1:] = False
                mask_logits = kv.block_logits(x, attention_mask, w0, w1, refresh=i == 0)[mask_index[:, w0:w1]]
            nfe += 1
            require_finite_logits(mask_logits, f"denoising step {step} (sampler 'dream')")
            if kv is not None and i == 0 and p.refresh_commit == "first":
                _, x0 = propose(mask_logits, rows=mask_index.nonzero(as_tuple=True)[0])
                x[mask_index] = x0
            elif parallel:
                _parallel_step(x, mask_index, mask_logits, mask_id, p.threshold, p.factor, propose)
            else:
                t, s, last = timesteps[i], timesteps[i + 1], i == spb - 1
                if p.alg == "origin":
                    _origin_step(x, mask_index, mask_logits, 1 if last else 1 - s / t, mask_id, propose)
                else:
                    # Fast-dLLM's Dream rule ranks a cached step over [start, L) (prefix) or the block (dual)
                    window = None
                    if kv is not None and p.refresh_commit == "first":
                        window = fastdllm_window(p.cache, start, end, x.shape[1])
                    _confidence_step(x, mask_index, mask_logits, (t, s, last), mask_id, p.alg, p.alg_temp, propose,
                                     window)
            now_masked = (x == mask_id)[:, Lp:]
            traj.unmask_step[now_masked & ~mask_index[:, Lp:]] = -1  # re-masked by a release quirk: decoded again
            traj.record(mask_index[:, Lp:] & ~now_masked, step)
    return x, traj.unmask_step, nfe


def decode_options(mask_id: int, generator=None, kv_logits: Callable | None = None, eos_id: int = 151643,
                   **settings) -> DecodeOptions:
    """:class:`~dare.sampling.options.DecodeOptions` for :func:`decode` from keyword settings
    (:class:`~dare_dream.params.DreamSamplerParams` fields; unnamed ones take its defaults); ``eos_id`` (also the pad
    id; Dream-v0's ``<|endoftext|>`` by default) is not read by the decoder. Built unvalidated
    (:meth:`DecodeOptions.of`): :func:`decode` checks the settings and raises :class:`DreamSamplerError`."""
    tokens = SpecialTokens(mask_id=mask_id, eos_id=eos_id, pad_id=eos_id)
    return DecodeOptions.of(DreamSamplerParams, tokens, generator, kv_logits, **settings)


class _Unset:
    """Marker of an argument the caller did not pass (``None`` is a real value: "off")."""

    def __repr__(self) -> str:
        return "UNSET"


UNSET = _Unset()

#: What the release's ``DreamGenerationConfig.from_model_config(model.config)`` yields, under the
#: transformers it pins (4.46.2), for sampling arguments the caller omits and ``config.json`` lacks:
#: ``PretrainedConfig``'s legacy generation defaults (module docstring, "Generation defaults").
RELEASE_CONFIG_DEFAULTS: dict[str, float | int | None] = {"temperature": 1.0, "top_p": 1.0, "top_k": 50}
#: The values the checkpoint's ``generation_config.json`` states (no temperature key: DreamGenerationConfig's 0.0).
GENERATION_CONFIG_DEFAULTS: dict[str, float | int | None] = {"temperature": 0.0, "top_p": None, "top_k": None}


def resolve_generation_defaults(model, generation_defaults: str, **given) -> dict:
    """``temperature``/``top_p``/``top_k`` for :func:`diffusion_generate`: the given value, else the default.

    ``"release"``: ``model.config``'s attribute when it has one, else :data:`RELEASE_CONFIG_DEFAULTS`
    (what the release does under transformers 4.46.2); ``"generation_config"``:
    :data:`GENERATION_CONFIG_DEFAULTS`. A ``top_p`` of 1.0 means off.

    :raises DreamSamplerError: an unknown ``generation_defaults``.
    """
    if generation_defaults == "release":
        config = getattr(model, "config", None)
        table = {k: getattr(config, k, v) for k, v in RELEASE_CONFIG_DEFAULTS.items()}
    elif generation_defaults == "generation_config":
        table = dict(GENERATION_CONFIG_DEFAULTS)
    else:
        raise DreamSamplerError(
            f"generation_defaults must be 'release' or 'generation_config' (got {generation_defaults!r})"
        )
    return {k: table[k] if isinstance(v, _Unset) else v for k, v in given.items()}


def diffusion_generate(
    model,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor | None = None,
    max_new_tokens: int = 512,
    steps: int = 512,
    eps: float = 1e-3,
    alg: str = "origin",
    alg_temp: float | None = None,
    temperature: float | _Unset = UNSET,
    top_p: float | None | _Unset = UNSET,
    top_k: int | None | _Unset = UNSET,
    mask_token_id: int | None = None,
    generator: torch.Generator | None = None,
    generation_defaults: Literal["release", "generation_config"] = "release",
    block_length: int | None = None,
    cache: str = "none",
    threshold: float | None = None,
    factor: float | None = None,
) -> torch.Tensor:
    """Drop-in for the release's ``model.diffusion_generate(input_ids, ...)``: returns the sequences.

    Runs ``model(x, attention_mask=..., position_ids=...)`` (any Dream-architecture model, the
    release's class included), shifts its logits (:func:`dare_dream.family.shift_logits`) and
    decodes with ``release_quirks`` on, so the result is the release's token for token for the same
    weights and seed (argmax at temperature 0; the global RNG otherwise, unless ``generator``).
    ``alg="origin"``, ``steps=512`` and ``eps=1e-3`` are the release's defaults. ``temperature``,
    ``top_p`` and ``top_k`` that are not passed resolve as the release resolves them under its pinned
    transformers (``generation_defaults="release"``: temperature 1.0, top_p 1.0, top_k 50 unless
    ``model.config`` has them), or as ``generation_config.json`` states them
    (``"generation_config"``: temperature 0, no top-p, no top-k); see the module docstring. Pass
    ``top_k=None`` explicitly to switch top-k off.

    ``block_length``, ``cache``, ``threshold``, ``factor``: Fast-dLLM's block decoding, KV cache and
    parallel decoding (module docstring; Fast-dLLM's ``diffusion_generate`` exposes them as
    ``block_length``, ``dual_cache`` and ``threshold``); the defaults are the release's decoder.

    :param input_ids: ``[B, Lp]`` int64 prompts (left-padded when ``attention_mask`` has zeros).
    :param attention_mask: ``[B, Lp]`` 1/0 or None.
    :param mask_token_id: default ``model.config.mask_token_id``.
    :returns: ``[B, Lp + max_new_tokens]`` int64.
    :raises DreamSamplerError: an argument out of range, or no mask token id.
    """
    from dare_dream.family import DreamFamily

    if mask_token_id is None:
        mask_token_id = getattr(getattr(model, "config", None), "mask_token_id", None)
        if mask_token_id is None:
            raise DreamSamplerError(
                "mask_token_id is not given and model.config has no mask_token_id; pass mask_token_id="
            )
    sampling = resolve_generation_defaults(model, generation_defaults, temperature=temperature, top_p=top_p,
                                           top_k=top_k)
    family = DreamFamily()

    def kv_logits(ids, am, past, start, end, use_cache):
        return family.kv_logits(model, ids, am, past, start, end, use_cache)

    options = decode_options(int(mask_token_id), generator, kv_logits, gen_length=max_new_tokens, steps=steps, eps=eps,
                             alg=alg, alg_temp=alg_temp, release_quirks=True, block_length=block_length, cache=cache,
                             threshold=threshold, factor=factor, **sampling)
    x, _, _ = decode(lambda ids, am: family.logits(model, ids, am), input_ids, attention_mask, options)
    return x


# --------------------------------------------------------------------------- the component
