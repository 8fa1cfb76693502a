"""Token proposals: one ``sample_tokens`` for every decoder, and the non-finite-logits check.

A denoising step turns the logits of the positions it may commit into a proposed token and a
confidence per position (docs/algorithms.md §5.3-5.5; docs/model-families.md §2.7, §3.5 and §5.6). The official
samplers agree on the pipeline (temperature, top-k/top-p filtering, softmax, one categorical draw; argmax at
temperature 0) and differ in four details, which :class:`ProposalRule` names:

===================  =======================================  ======================================
detail               block decoders (SDAR ``generate.py``,     Dream ``generation_utils.sample_tokens``
                     LLaDA2 ``generate``): :data:`BLOCK_RULE`  :data:`DREAM_RULE`
===================  =======================================  ======================================
filter order         top-k, then top-p on what is left        top-p, then top-k
filtered logits      ``-inf``                                 ``torch.finfo(dtype).min``
temperature 0        argmax of the raw logits; confidence     filters, then the most probable token
                     from ``softmax(logits)`` (T = 1, no      of the filtered distribution and its
                     filtering)                               probability
draw                 ``torch.multinomial(probs)``             ``torch.distributions.Categorical``:
                                                              probabilities renormalised first; with
                                                              ``validate_simplex`` (Dream's
                                                              ``release_quirks``) a step whose
                                                              probabilities fail its simplex check
                                                              (1e-6) falls back to the argmax, as
                                                              the release's bare ``except`` does
===================  =======================================  ======================================

Confidences (Dream's ``alg`` values; the block decoders use ``probability``): ``probability`` of the
proposed token, ``margin`` top-1 minus top-2 probability, ``neg_entropy`` ``sum p log(p + 1e-10)``,
all of the distribution the token was drawn from. Top-p is the usual right-shifted nucleus rule of
:func:`dare.sampling.filter_top_k_top_p`. Draws use ``generator`` (None: torch's global RNG, as the
official code) and consume it exactly as the official code does.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import torch

from dare.errors import DareError
from dare.randomness import RowGenerators, multinomial
from dare.sampling.noise import filter_top_k_top_p

__all__ = [
    "Confidence",
    "ProposalRule",
    "BLOCK_RULE",
    "DREAM_RULE",
    "sample_tokens",
    "row_index",
    "NonFiniteLogitsError",
    "require_finite_logits",
]

Confidence = Literal["probability", "margin", "neg_entropy"]


@dataclass(frozen=True)
class ProposalRule:
    """Where the official samplers differ in turning logits into proposals (module docstring).

    * ``filter_order``: ``"top_k_first"`` (top-p acts on the top-k renormalised distribution) or
      ``"top_p_first"``;
    * ``fill``: value of filtered logits, ``"-inf"`` or ``"finfo_min"`` (the dtype's most negative
      finite value; on ordinary finite logits both give the same probabilities, as ``exp`` underflows to
      0 either way, and the choice keeps each release's arithmetic);
    * ``greedy``: at temperature 0, ``"raw_argmax"`` (argmax of the unfiltered logits, confidence from
      their softmax) or ``"filtered_max"`` (filter, then the most probable token);
    * ``draw``: ``"multinomial"`` on the softmax, or ``"categorical"`` on the renormalised softmax
      (``torch.distributions.Categorical``);
    * ``validate_simplex``: ``"categorical"`` only: fall back to the greedy choice for the whole call
      when a row is not on the simplex to 1e-6.
    """

    filter_order: Literal["top_k_first", "top_p_first"] = "top_k_first"
    fill: Literal["-inf", "finfo_min"] = "-inf"
    greedy: Literal["raw_argmax", "filtered_max"] = "raw_argmax"
    draw: Literal["multinomial", "categorical"] = "multinomial"
    validate_simplex: bool = False


#: SDAR's ``sample_with_temperature_topk_topp`` and LLaDA2's ``_sample_with_temperature_topk_topp``, with
#: temperature 0 as greedy (LLaDA2.1's rule; see the SDAR and LLaDA2 sampler docstrings).
BLOCK_RULE = ProposalRule()

#: Dream's ``generation_utils.sample_tokens`` (``validate_simplex=True`` adds its ``release_quirks``).
DREAM_RULE = ProposalRule(filter_order="top_p_first", fill="finfo_min", greedy="filtered_max", draw="categorical")


def _filter(logits: torch.Tensor, top_k: int | None, top_p: float | None, rule: ProposalRule) -> torch.Tensor:
    fill = float("-inf") if rule.fill == "-inf" else torch.finfo(logits.dtype).min
    if rule.filter_order == "top_p_first":
        return filter_top_k_top_p(logits, top_k, top_p, fill=fill)  # its own order: top-p, then top-k
    logits = filter_top_k_top_p(logits, top_k=top_k, fill=fill)
    return filter_top_k_top_p(logits, top_p=top_p, fill=fill)


def _draw(probs: torch.Tensor, rule: ProposalRule, generator: torch.Generator | RowGenerators | None,
          rows: torch.Tensor | None = None) -> torch.Tensor | None:
    """One token per row of ``probs`` ``[..., V]``; None when ``validate_simplex`` rejects the probabilities
    (nothing is drawn then, so the RNG does not advance, as in the release). With :class:`RowGenerators`
    the flattened position ``i`` draws from generator ``rows[i]`` (:func:`dare.randomness.multinomial`)."""
    if rule.draw == "categorical":
        probs = probs / probs.sum(-1, keepdim=True)
        if rule.validate_simplex and not bool(((probs >= 0).all(-1) & ((probs.sum(-1) - 1).abs() < 1e-6)).all()):
            return None
    flat = probs.reshape(-1, probs.shape[-1])
    if isinstance(generator, RowGenerators):
        return multinomial(flat, 1, generator, rows=rows).reshape(probs.shape[:-1])
    return torch.multinomial(flat, 1, generator=generator).reshape(probs.shape[:-1])


def row_index(batch_rows: torch.Tensor, positions: int) -> torch.Tensor:
    """``[len(batch_rows) * positions]`` int64: the batch row of each position of ``logits[batch_rows]``
    flattened to ``[-1, V]`` (``positions`` per row), the ``rows`` argument of :func:`sample_tokens`.

    :param batch_rows: ``[R]`` int64 row indices, or ``[B]`` bool (the True rows).
    """
    if batch_rows.dtype == torch.bool:
        batch_rows = batch_rows.nonzero().flatten()
    return batch_rows.cpu().repeat_interleave(positions)


def sample_tokens(
    logits: torch.Tensor,
    temperature: float = 0.0,
    top_k: int | None = None,
    top_p: float | None = None,
    *,
    confidence: Confidence = "probability",
    rule: ProposalRule = BLOCK_RULE,
    generator: torch.Generator | RowGenerators | None = None,
    rows: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """A proposed token and its confidence at every position (module docstring).

    :param logits: ``[..., V]`` float, finite (check with :func:`require_finite_logits`).
    :param temperature: ``0`` = greedy; ``> 0`` samples from ``softmax(logits / temperature)`` after filtering.
    :param top_k: keep the ``k`` largest logits (None or 0 = off).
    :param top_p: keep the smallest nucleus of mass ``>= top_p`` (None or >= 1 = off).
    :param confidence: ``probability``, ``margin`` or ``neg_entropy`` (module docstring).
    :param rule: the official sampler to follow, :data:`BLOCK_RULE` or :data:`DREAM_RULE`.
    :param generator: RNG of the draw (None = torch's global RNG), or :class:`dare.randomness.RowGenerators`:
        then position ``i`` of ``logits`` flattened to ``[N, V]`` draws from generator ``rows[i]`` (``rows``
        ``[N]`` int64, default ``arange(N)``; :func:`row_index` builds it), one draw per position in order, so a
        batch row's tokens depend only on its own generator and positions, not on the other rows.
    :returns: ``(tokens [...] int64, confidence [...] in the logits' dtype)``.
    :raises ValueError: a negative temperature or an unknown confidence.
    """
    if temperature < 0:
        raise ValueError(f"temperature must be >= 0, got {temperature}")
    if confidence not in ("probability", "margin", "neg_entropy"):
        raise ValueError(f"confidence must be probability, margin or neg_entropy, got {confidence!r}")
    if temperature == 0 and rule.greedy == "raw_argmax":
        tokens = torch.argmax(logits, dim=-1)
        probs = torch.softmax(logits, dim=-1)
    else:
        if temperature > 0:
            logits = logits / temperature
        probs = torch.softmax(_filter(logits, top_k, top_p, rule), dim=-1)
        tokens = _draw(probs, rule, generator, rows) if temperature > 0 else None
        if tokens is None:
            tokens = probs.max(dim=-1).indices
    if confidence == "margin":
        top2 = torch.topk(probs, 2, dim=-1).values
        return tokens, top2[..., 0] - top2[..., 1]
    if confidence == "neg_entropy":
        return tokens, torch.sum(probs * torch.log(probs + 1e-10), dim=-1)
    return tokens, torch.gather(probs, -1, tokens.unsqueeze(-1)).squeeze(-1)


class NonFiniteLogitsError(DareError):
    """The model returned NaN or infinite logits while decoding (the message says where)."""


def require_finite_logits(logits: torch.Tensor, where: str) -> None:
    """Refuse NaN/+Inf logits (and positions whose logits are all ``-inf``) before a decoder turns them
    into tokens.

    ``argmax`` of a NaN row is token 0 and a multinomial over NaN probabilities fails or draws
    garbage, so a diverged model would otherwise decode silently into nonsense. A ``-inf`` entry is a
    banned token (``logits_eos_inf``, top-k filtering, a logits hook) and is accepted as long as some
    token of the position stays finite.

    :param logits: ``[..., V]`` float, the logits a step is about to sample from.
    :param where: the decoding position for the message, e.g. ``"block 3, denoising step 2"``.
    :raises NonFiniteLogitsError: any element is NaN or +Inf, or every logit of a position is -Inf.
    """
    # one reduction over the vocabulary: the maximum of a position is NaN when any of its logits is NaN, +Inf when
    # one is +Inf and -Inf when every one is -Inf, so it is finite exactly when the position may be decoded
    if bool(torch.isfinite(logits.amax(dim=-1) if logits.dim() else logits).all()):
        return
    finite = torch.isfinite(logits)
    nan = int(torch.isnan(logits).sum())
    pos_inf = int(torch.isposinf(logits).sum())
    dead = int((~finite.any(dim=-1)).sum()) if logits.dim() else 0  # positions with no finite logit
    if nan == 0 and pos_inf == 0 and dead == 0:
        return
    neg_inf = int(torch.isneginf(logits).sum())
    raise NonFiniteLogitsError(
        f"the model produced non-finite logits at {where} ({nan} NaN and {pos_inf + neg_inf} infinite values among "
        f"{logits.numel()}; {dead} position(s) without any finite logit), so no token can be chosen. The checkpoint "
        "has most likely diverged in training or is corrupted (check its weights for NaN/Inf and the training loss); "
        "an fp16 model can also overflow, then load it in bf16 or fp32."
    )
