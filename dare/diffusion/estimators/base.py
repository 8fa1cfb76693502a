"""The common shape of every likelihood estimator: corrupted copies with per-token weights.

An RL objective needs, for each completion, a differentiable score under the current policy that
it can compare with the same score under the old and the reference policy. Every estimator DARE
implements is a weighted sum of per-token log-probabilities of the clean completion under a few
corrupted inputs, so one representation covers them all (docs/algorithms.md §9.3):

* a :class:`Pass` is ``K`` corrupted copies of the batch, ``mask[k]`` ``[N, S]`` (which positions
  of ``[prompt ; completion]`` become the mask token) and ``weight[k]`` ``[N, G]`` (how much the
  log-prob of completion token ``g`` under copy ``k`` counts);
* its token score is ``s[n, g] = sum_k weight[k, n, g] * log p_theta(x0[n, g] | copy k)`` and its
  sequence score is ``sum_g s[n, g]``;
* an estimator (a :class:`dare.components.Estimator` component, re-exported here) :meth:`Estimator.draw` s
  a list of passes (Monte-Carlo samples, denoising steps or
  position chunks), using only an explicit ``torch.Generator`` (never the global RNG), so the same
  passes can be scored by the old, reference and current policies (docs/algorithms.md §9.2).

Objectives combine passes: token-level losses add one loss per pass (one backward per pass keeps
memory at one pass), sequence-level losses use the mean of the passes' sequence scores. Logits come
from ``ModelFamily.denoiser_logits`` through a ``logits_fn`` closure, so estimators never see a
family name; block families get the block-diffusion ``[x_t ; x_0]`` forward automatically.
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace
from typing import Callable

import torch

from dare.components import Estimator
from dare.diffusion.likelihood import token_logprobs, token_logprobs_and_entropy
from dare.randomness import rand

__all__ = ["ScoringBatch", "Pass", "PassScore", "Estimator", "LogitsFn", "score_pass", "uniform"]

#: ``(noisy_ids [N, S], clean_ids [N, S], attention_mask [N, S] | None) -> aligned logits [N, S, V]``; called with
#: the keyword ``block_anchor`` too when the batch sets it (:attr:`ScoringBatch.block_anchor`, block families).
LogitsFn = Callable[[torch.Tensor, torch.Tensor, "torch.Tensor | None"], torch.Tensor]


def uniform(shape: tuple[int, ...], generator, device) -> torch.Tensor:
    """``U[0, 1)`` float32 of ``shape``, drawn on the generator's own device (so a CPU generator gives the
    same draws whatever the model's device), then moved to ``device``; with per-row
    :class:`dare.randomness.RowGenerators` (``shape[0]`` rows) each row draws from its own generator."""
    return rand(shape, generator, device=device)


def _rows(value, index):
    return value[index] if isinstance(value, torch.Tensor) else value


@dataclass
class ScoringBatch:
    """Completed rollouts, as estimators see them.

    * ``input_ids``: ``[N, S]`` int64, prompt (left-padded to ``P``) then the completion (``G``
      tokens), i.e. the clean sequence ``x0``; ``S = P + G``;
    * ``attention_mask``: ``[N, S]`` int64, 0 on prompt padding and on completion positions that are
      not part of the response (after EOS for families with ``pad_in_response = False``);
    * ``completion_mask``: ``[N, G]`` bool, the completion tokens that belong to the response (the
      tokens an estimator may mask and score; ``SamplerOutput.completion_mask``);
    * ``prompt_length``: ``P``; ``mask_id``: the family's mask token id;
    * ``unmask_step``: ``[N, G]`` int64 or None, the denoising step that committed each completion
      token (``SamplerOutput.unmask_step``; -1 = never), for trajectory replay;
    * ``block_anchor``: None (blocks of block families start at each row's first real token), or the column
      where a block starts in every row (``P``: the padded prompt's end,
      :func:`dare.rl.conventions.align_blocks_at_prompt_end`),
      passed to the logits function as ``block_anchor=`` (:meth:`dare.modeling.BlockDiffusionFamily.denoiser_logits`).
    """

    input_ids: torch.Tensor
    attention_mask: torch.Tensor
    completion_mask: torch.Tensor
    prompt_length: int
    mask_id: int
    unmask_step: torch.Tensor | None = None
    block_anchor: int | None = None

    def __post_init__(self):
        N, S = self.input_ids.shape
        G = S - self.prompt_length
        if self.attention_mask.shape != (N, S):
            raise ValueError(f"attention_mask {tuple(self.attention_mask.shape)} must be [N, S] = {(N, S)}")
        if self.completion_mask.shape != (N, G):
            raise ValueError(f"completion_mask {tuple(self.completion_mask.shape)} must be [N, G] = {(N, G)}")
        if self.unmask_step is not None and self.unmask_step.shape != (N, G):
            raise ValueError(f"unmask_step {tuple(self.unmask_step.shape)} must be [N, G] = {(N, G)}")

    @property
    def num_rows(self) -> int:
        return self.input_ids.shape[0]

    @property
    def completion_length(self) -> int:
        """``G``, the (padded) completion length."""
        return self.input_ids.shape[1] - self.prompt_length

    @property
    def response_lengths(self) -> torch.Tensor:
        """``[N]`` int64, response tokens per row (``|y|``; ``G`` for EOS-padded families)."""
        return self.completion_mask.sum(dim=1)

    @property
    def prompt_valid(self) -> torch.Tensor:
        """``[N, P]`` bool, real (non-padding) prompt tokens."""
        return self.attention_mask[:, : self.prompt_length].bool()

    def rows(self, index) -> ScoringBatch:
        """The sub-batch of rows ``index`` (slice, index tensor or bool mask)."""
        return replace(self, **{f.name: _rows(getattr(self, f.name), index) for f in fields(self)})


@dataclass
class Pass:
    """``K`` corrupted copies of a batch and the weight of each completion token's log-prob.

    * ``mask``: ``[K, N, S]`` bool, positions replaced by the mask token in copy ``k``;
    * ``weight``: ``[K, N, G]`` float32, weight of ``log p(x0_g | copy k)`` in the token score
      (0 = not scored by that copy);
    * ``key``: the pass's identity across processes where the passes depend on the rows (trajectory replay:
      the transition index, so each process holds the steps present in its own rows); ``None``: the pass is
      identified by its position in the list, which is the same on every process;
    * ``noise``: ``[K, N, S]`` int64 or None, the token each corrupted position holds in copy ``k`` under
      uniform-noise diffusion (:mod:`dare.diffusion.estimators.uniform`); None = the batch's mask token.
    """

    mask: torch.Tensor
    weight: torch.Tensor
    key: int | None = None
    noise: torch.Tensor | None = None

    def __post_init__(self):
        if self.mask.ndim != 3 or self.weight.ndim != 3 or self.mask.shape[:2] != self.weight.shape[:2]:
            raise ValueError(f"Pass needs mask [K, N, S] and weight [K, N, G]; got {tuple(self.mask.shape)} and "
                             f"{tuple(self.weight.shape)}")

    @property
    def scored(self) -> torch.Tensor:
        """``[N, G]`` bool, completion tokens that some copy scores."""
        return (self.weight != 0).any(dim=0)

    def rows(self, index) -> Pass:
        """The same pass restricted to rows ``index``."""
        noise = None if self.noise is None else self.noise[:, index]
        return Pass(mask=self.mask[:, index], weight=self.weight[:, index], key=self.key, noise=noise)

    def corrupted(self, k: int, clean: torch.Tensor, mask_id: int | None) -> torch.Tensor:
        """``[N, S]`` int64 copy ``k`` of ``clean``: masked positions hold ``noise[k]`` (uniform noise) or
        ``mask_id``."""
        fill = torch.full_like(clean, mask_id) if self.noise is None else self.noise[k].to(clean.device)
        return torch.where(self.mask[k], fill, clean)


@dataclass
class PassScore:
    """A pass scored by one policy.

    * ``token``: ``[N, G]`` float32, ``sum_k weight[k] * log p`` (0 where not scored);
    * ``scored``: ``[N, G]`` bool (``Pass.scored``);
    * ``entropy``: ``[N, G]`` float32 or None, mean predictive entropy (nats) of the copies that
      score each token (no gradient).
    """

    token: torch.Tensor
    scored: torch.Tensor
    entropy: torch.Tensor | None = None

    @property
    def sequence(self) -> torch.Tensor:
        """``[N]`` float32, the pass's sequence score ``sum_g token[:, g]``."""
        return self.token.sum(dim=-1)


def score_pass(
    logits_fn: LogitsFn,
    batch: ScoringBatch,
    pas: Pass,
    temperature: float = 1.0,
    with_entropy: bool = False,
) -> PassScore:
    """Score one pass: one forward per copy, log-probs of the clean completion tokens.

    Copies without a scored token are skipped (no forward). The log-softmax is taken over
    ``logits / temperature`` (1 = the model's distribution; the sampler's temperature gives the
    decoding-matched likelihood of Gumbel-max sampling at that temperature).

    :param logits_fn: see :data:`LogitsFn`; the attention mask passed is None when all ones.
    :param batch: the rows to score. :param pas: a pass over the same rows.
    :returns: :class:`PassScore`; differentiable when called with gradients enabled.
    :raises ValueError: ``temperature <= 0`` or the pass does not match the batch.
    """
    if temperature <= 0:
        raise ValueError(f"temperature must be positive, got {temperature}")
    if pas.mask.shape[1:] != batch.input_ids.shape:
        raise ValueError(f"pass mask {tuple(pas.mask.shape)} does not match batch {tuple(batch.input_ids.shape)}")
    clean = batch.input_ids
    P = batch.prompt_length
    targets = clean[:, P:]
    attn = None if bool(batch.attention_mask.all()) else batch.attention_mask
    token = torch.zeros(targets.shape, dtype=torch.float32, device=clean.device)
    ent_sum = torch.zeros_like(token) if with_entropy else None
    ent_count = torch.zeros_like(token) if with_entropy else None
    for k in range(pas.mask.shape[0]):
        where = pas.weight[k] != 0
        if not bool(where.any()):
            continue
        noisy = pas.corrupted(k, clean, batch.mask_id)
        if batch.block_anchor is None:
            logits = logits_fn(noisy, clean, attn)[:, P:]
        else:
            logits = logits_fn(noisy, clean, attn, block_anchor=batch.block_anchor)[:, P:]
        if temperature != 1.0:
            logits = logits / temperature
        if with_entropy:  # the entropy metric from the log-softmax of the log-probs (no second softmax)
            lp, ent = token_logprobs_and_entropy(logits, targets, where)
            ent_sum += ent
            ent_count += where.float()
        else:
            lp = token_logprobs(logits, targets, where)
        token = token + pas.weight[k].to(token.device) * lp
    entropy = ent_sum / ent_count.clamp(min=1.0) if with_entropy else None
    return PassScore(token=token, scored=pas.scored, entropy=entropy)
