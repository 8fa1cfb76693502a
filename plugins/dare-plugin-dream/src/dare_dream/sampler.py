"""Dream's official masked-diffusion decoder (``diffusion_generate``).

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
  ``sum p log p``) and commits ``n = int(num_mask * (1 - s/t))`` positions per row
  (``int(num_mask)`` at the last step; ``num_mask`` = masked tokens per row, averaged over the
  batch): the ``n`` most confident, or ``n`` drawn without replacement from
  ``softmax(confidence / alg_temp)`` when ``alg_temp > 0`` (MaskGIT, arXiv 2202.04200).

Tokens are drawn by ``sample_tokens``: logits / temperature (when > 0), top-p then top-k filtering
(filled with ``finfo.min``), softmax, then a categorical draw (argmax at temperature 0).

Two behaviours of the release are reproduced only when ``release_quirks`` is on (always for
:func:`diffusion_generate`, opt-in for :class:`DreamSampler`):

1. a row may commit non-masked positions, which then get the mask id: a row holding fewer masks
   than ``n`` (possible once the model has proposed the mask token itself, which keeps that position
   masked) still commits ``n`` positions via ``torch.topk``, and with ``alg_temp`` a
   ``softmax(confidence / alg_temp)`` that underflows to fewer than ``n`` positive entries lets
   ``torch.multinomial`` return zero-probability (non-masked) positions. Without quirks a row
   commits only its own masked positions (underflowed draws are completed by confidence order);
2. ``torch.distributions.Categorical`` validates its probabilities (simplex to 1e-6) and the
   release's bare ``except`` then falls back to argmax for the whole step; in bf16 rounding alone can
   fail the check, so temperature is silently ignored at such a step. Without quirks the draw
   always happens.

With ``generator=None`` every random draw uses torch's global RNG in the release's order, so
:func:`diffusion_generate` returns the release's sequences for the same seed, not only at
temperature 0.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Literal

import torch
from pydantic import Field, model_validator

from dare.components import Params, Sampler, SamplerOutput
from dare.errors import DareError
from dare.sampling import Trajectory, completion_mask, filter_top_k_top_p

__all__ = [
    "ALGORITHMS",
    "DreamSamplerError",
    "sample_tokens",
    "transfer_count",
    "select_positions",
    "decode",
    "diffusion_generate",
    "DreamSampler",
    "DreamSamplerParams",
]

Algorithm = Literal["origin", "maskgit_plus", "topk_margin", "entropy"]
Confidence = Literal["probability", "margin", "neg_entropy"]

#: The official ``alg`` values and the confidence each one ranks positions by (``origin`` ranks none).
ALGORITHMS: dict[str, Confidence | None] = {
    "origin": None,
    "maskgit_plus": "probability",
    "topk_margin": "margin",
    "entropy": "neg_entropy",
}


class DreamSamplerError(DareError, ValueError):
    """An invalid argument of :func:`diffusion_generate` / :func:`decode` (the message names it)."""


# --------------------------------------------------------------------------- token proposals
def _categorical(probs: torch.Tensor, generator: torch.Generator | None, validate: bool) -> torch.Tensor:
    """One draw per row of ``probs`` ``[N, V]``, as ``torch.distributions.Categorical(probs).sample()``.

    Same normalisation and the same ``torch.multinomial`` call, so the global RNG advances exactly as
    in the release. With ``validate`` the probabilities must pass ``Categorical``'s simplex check.

    :raises ValueError: ``validate`` and a row is not on the simplex to 1e-6.
    """
    p = probs / probs.sum(-1, keepdim=True)
    if validate and not bool(((p >= 0).all(-1) & ((p.sum(-1) - 1).abs() < 1e-6)).all()):
        raise ValueError("probabilities are not on the simplex")
    return torch.multinomial(p.reshape(-1, p.shape[-1]), 1, True, generator=generator).T.reshape(p.shape[:-1])


def sample_tokens(
    logits: torch.Tensor,
    temperature: float = 0.0,
    top_p: float | None = None,
    top_k: int | None = None,
    confidence: Confidence = "probability",
    generator: torch.Generator | None = None,
    release_quirks: bool = False,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Propose a token and its confidence for each row (Dream ``generation_utils.sample_tokens``).

    :param logits: ``[N, V]`` aligned logits of masked positions (any float dtype; kept).
    :param temperature: ``> 0`` samples from ``softmax(logits / T)``; ``0`` takes the argmax.
    :param top_p: nucleus mass (None or ``>= 1`` = off); :param top_k: None = off.
    :param confidence: ``probability`` of the proposed token, ``margin`` top-1 minus top-2
        probability, or ``neg_entropy`` ``sum p log(p + 1e-10)`` (all after filtering).
    :param release_quirks: fall back to argmax when ``Categorical`` would reject the probabilities.
    :returns: ``(confidence [N] logits dtype, tokens [N] int64)``.
    """
    if temperature > 0:
        logits = logits / temperature
    logits = filter_top_k_top_p(logits, top_k, top_p, fill=torch.finfo(logits.dtype).min)
    probs = torch.softmax(logits, dim=-1)
    if temperature > 0:
        try:
            x0 = _categorical(probs, generator, validate=release_quirks)
            conf = torch.gather(probs, -1, x0.unsqueeze(-1)).squeeze(-1)
        except ValueError:
            conf, x0 = probs.max(dim=-1)
    else:
        conf, x0 = probs.max(dim=-1)
    if confidence == "margin":
        top2 = torch.topk(probs, 2, dim=-1).values
        conf = top2[:, 0] - top2[:, 1]
    elif confidence == "neg_entropy":
        conf = torch.sum(probs * torch.log(probs + 1e-10), dim=-1)
    return conf, x0


# --------------------------------------------------------------------------- commit schedule
def transfer_count(mask_index: torch.Tensor, t: torch.Tensor, s: torch.Tensor, last: bool) -> int:
    """Tokens each row commits at one step: ``int(num_mask * (1 - s/t))``, ``int(num_mask)`` at the last.

    ``num_mask`` is the number of masks per row averaged over the batch, and the product is computed
    in float32 like the release (so ``7 * (1 - 0.75/0.875)`` rounds as it does there).

    :param mask_index: ``[B, L]`` bool; :param t: ``[]`` float32 current ratio; :param s: ``[]``
        float32 next ratio.
    """
    num_mask = mask_index.sum() / mask_index.shape[0]
    return int(num_mask) if last else int(num_mask * (1 - s / t))


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
        cols = torch.multinomial(probs, num_samples=n, generator=generator)
        rows = torch.arange(B, device=confidence.device)[:, None].expand_as(cols)
        return rows.reshape(-1), cols.reshape(-1)
    available = torch.isfinite(confidence).sum(dim=1)
    picks = [_draw_positions(probs[b], confidence[b], min(n, int(available[b])), generator) for b in range(B)]
    rows = torch.cat([torch.full_like(p, b) for b, p in enumerate(picks)])
    return rows, torch.cat(picks)


# --------------------------------------------------------------------------- one denoising step
@dataclass(frozen=True)
class _Proposer:
    """:func:`sample_tokens` with one call's sampling settings bound."""

    temperature: float
    top_p: float | None
    top_k: int | None
    generator: torch.Generator | None
    release_quirks: bool

    def __call__(self, logits: torch.Tensor, confidence: Confidence = "probability"):
        return sample_tokens(logits, self.temperature, self.top_p, self.top_k, confidence, self.generator,
                             self.release_quirks)


def _origin_step(x, mask_index, mask_logits, p_transfer, mask_id: int, propose: _Proposer) -> None:
    """``origin``: each masked position reveals with probability ``p_transfer``; ``x`` is updated in place."""
    x0 = torch.full((mask_logits.shape[0],), mask_id, dtype=torch.long, device=x.device)
    reveal = torch.rand(x0.shape, device=x.device, generator=propose.generator) < p_transfer
    if bool(reveal.any()):
        _, x0[reveal] = propose(mask_logits[reveal])
    x[mask_index] = x0


def _confidence_step(x, mask_index, mask_logits, counts: tuple, mask_id: int, alg: str, alg_temp, propose: _Proposer):
    """``maskgit_plus`` / ``topk_margin`` / ``entropy``: commit the chosen proposals in place.

    ``counts`` is ``(t, s, last)`` for :func:`transfer_count`; proposals are drawn first, as in the
    release, so the RNG advances the same way even at a step that commits nothing.
    """
    conf, x0 = propose(mask_logits, ALGORITHMS[alg])
    n = transfer_count(mask_index, *counts)
    if n <= 0:
        return
    full = torch.full(x.shape, -torch.inf, dtype=mask_logits.dtype, device=x.device)
    full[mask_index] = conf
    rows, cols = select_positions(full, n, alg_temp, propose.generator, propose.release_quirks)
    proposal = torch.full_like(x, mask_id)
    proposal[mask_index] = x0
    x[rows, cols] = proposal[rows, cols]


def _check_args(steps: int, max_new_tokens: int, eps: float, alg: str, alg_temp, temperature, top_p, top_k) -> None:
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
    if problems:
        raise DreamSamplerError("; ".join(problems))


# --------------------------------------------------------------------------- the loop
@torch.no_grad()
def decode(
    logits_fn: Callable[[torch.Tensor, torch.Tensor | None], torch.Tensor],
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor | None,
    mask_id: int,
    max_new_tokens: int = 512,
    steps: int = 512,
    eps: float = 1e-3,
    alg: str = "origin",
    alg_temp: float | None = None,
    temperature: float = 0.0,
    top_p: float | None = None,
    top_k: int | None = None,
    generator: torch.Generator | None = None,
    release_quirks: bool = False,
) -> tuple[torch.Tensor, torch.Tensor, int]:
    """The decoding loop over an aligned-logits function (module docstring).

    Stops early once no mask is left: later steps would change nothing and draw nothing.

    :param logits_fn: ``(x [B, L] int64, attention_mask [B, L] | None) -> [B, L, V]`` aligned logits
        (position i scores token i), e.g. ``family.logits`` bound to a model.
    :param input_ids: ``[B, Lp]`` int64 prompts, left-padded.
    :param attention_mask: ``[B, Lp]`` (1 real, 0 pad) or None; extended with ones.
    :returns: ``(x [B, Lp + max_new_tokens] int64, unmask_step [B, max_new_tokens] int64, nfe)``;
        ``unmask_step`` is the step that committed each completion token (-1: still masked).
    :raises DreamSamplerError: an argument out of range (all problems in one message).
    """
    _check_args(steps, max_new_tokens, eps, alg, alg_temp, temperature, top_p, top_k)
    B, Lp = input_ids.shape
    x = torch.nn.functional.pad(input_ids, (0, max_new_tokens), value=mask_id)
    if attention_mask is not None:
        ones = torch.ones((B, max_new_tokens), dtype=attention_mask.dtype, device=attention_mask.device)
        attention_mask = torch.cat([attention_mask, ones], dim=1)
    timesteps = torch.linspace(1, eps, steps + 1, device=x.device)
    propose = _Proposer(temperature, top_p, top_k, generator, release_quirks)
    traj = Trajectory(B, max_new_tokens, device=x.device)
    nfe = 0
    for i in range(steps):
        mask_index = x == mask_id
        if not bool(mask_index.any()):
            break
        mask_logits = logits_fn(x, attention_mask)[mask_index]
        nfe += 1
        t, s, last = timesteps[i], timesteps[i + 1], i == steps - 1
        if alg == "origin":
            _origin_step(x, mask_index, mask_logits, 1 if last else 1 - s / t, mask_id, propose)
        else:
            _confidence_step(x, mask_index, mask_logits, (t, s, last), mask_id, alg, alg_temp, propose)
        now_masked = (x == mask_id)[:, Lp:]
        traj.unmask_step[now_masked & ~mask_index[:, Lp:]] = -1  # re-masked by a release quirk: decoded again
        traj.record(mask_index[:, Lp:] & ~now_masked, i)
    return x, traj.unmask_step, nfe


def diffusion_generate(
    model,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor | None = None,
    max_new_tokens: int = 512,
    steps: int = 512,
    eps: float = 1e-3,
    alg: str = "origin",
    alg_temp: float | None = None,
    temperature: float = 0.0,
    top_p: float | None = None,
    top_k: int | None = None,
    mask_token_id: int | None = None,
    generator: torch.Generator | None = None,
) -> torch.Tensor:
    """Drop-in for the release's ``model.diffusion_generate(input_ids, ...)``: returns the sequences.

    Runs ``model(x, attention_mask=..., position_ids=...)`` (any Dream-architecture model, the
    release's class included), shifts its logits (:func:`dare_dream.family.shift_logits`) and
    decodes with ``release_quirks`` on, so the result is the release's token for token for the same
    weights and seed (argmax at temperature 0; the global RNG otherwise, unless ``generator``).
    Defaults follow the release's ``generation_config.json`` (``alg="origin"``, ``steps=512``,
    ``eps=1e-3``, temperature 0).

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
    family = DreamFamily()
    x, _, _ = decode(
        lambda ids, am: family.logits(model, ids, am),
        input_ids,
        attention_mask,
        int(mask_token_id),
        max_new_tokens=max_new_tokens,
        steps=steps,
        eps=eps,
        alg=alg,
        alg_temp=alg_temp,
        temperature=temperature,
        top_p=top_p,
        top_k=top_k,
        generator=generator,
        release_quirks=True,
    )
    return x


# --------------------------------------------------------------------------- the component
class DreamSamplerParams(Params):
    """Parameters of :class:`DreamSampler`, named as the release's ``diffusion_generate`` arguments
    (``gen_length`` is its ``max_new_tokens``). Defaults follow the Dream README call (``alg="entropy"``,
    ``steps = gen_length``) with greedy tokens (``temperature=0``, the release's generation_config).

    Cross-field rule: ``alg_temp`` is only meaningful for the confidence algs.
    """

    gen_length: int = Field(256, gt=0, description="Completion length in tokens (Dream's max_new_tokens).")
    steps: int = Field(256, gt=0, description="Denoising steps (one forward each; NFE <= steps).")
    eps: float = Field(1e-3, ge=0.0, lt=1.0, description="Final mask ratio: the schedule is linspace(1, eps, steps+1).")
    alg: Algorithm = Field(
        "entropy",
        description="origin (random reveal) or a confidence order: maskgit_plus (probability), topk_margin, entropy.",
    )
    alg_temp: float | None = Field(
        None,
        ge=0.0,
        description="Confidence algs only: None/0 commits the top-n, > 0 samples from softmax(conf / alg_temp).",
    )
    temperature: float = Field(0.0, ge=0.0, description="Token sampling temperature (0 = argmax).")
    top_p: float | None = Field(None, gt=0.0, le=1.0, description="Nucleus mass (None = off).")
    top_k: int | None = Field(None, ge=1, description="Keep the k most likely tokens (None = off).")
    release_quirks: bool = Field(
        False,
        description="Reproduce the release exactly, including its short-row overwrite and bf16 argmax fallback "
        "(dare_dream.sampler docstring).",
    )

    @model_validator(mode="after")
    def _alg_temp_needs_confidence(self):
        if self.alg == "origin" and self.alg_temp not in (None, 0):
            raise ValueError(
                "alg_temp only applies to maskgit_plus, topk_margin and entropy (origin reveals positions at random); "
                "remove alg_temp or choose one of those algs"
            )
        return self


class DreamSampler(Sampler):
    """Dream's diffusion_generate (origin / maskgit_plus / topk_margin / entropy), with trajectory."""

    name = "dream"
    Params = DreamSamplerParams
    attention_kinds = ("full",)

    def generate(self, model, family, tokens, prompt_ids, attention_mask=None, generator=None) -> SamplerOutput:
        """Decode ``gen_length`` tokens after ``prompt_ids`` ``[B, Lp]`` through ``family.logits``.

        :returns: :class:`~dare.components.SamplerOutput`; ``nfe`` = forward passes (<= steps).
        """
        p = self.params
        x, unmask_step, nfe = decode(
            lambda ids, am: family.logits(model, ids, am),
            prompt_ids,
            attention_mask,
            tokens.mask_id,
            max_new_tokens=p.gen_length,
            steps=p.steps,
            eps=p.eps,
            alg=p.alg,
            alg_temp=p.alg_temp,
            temperature=p.temperature,
            top_p=p.top_p,
            top_k=p.top_k,
            generator=generator,
            release_quirks=p.release_quirks,
        )
        Lp = prompt_ids.shape[1]
        cmask = completion_mask(x[:, Lp:], tokens.stop_ids, family.pad_in_response)
        return SamplerOutput(
            sequences=x, prompt_length=Lp, completion_mask=cmask, unmask_step=unmask_step, nfe=nfe, steps=p.steps
        )
