"""The online-RL step as public, pure functions: rollout batch and draws -> passes -> old/reference scores -> loss.

:class:`dare.rl.trainer.GRPOTrainer` is an adapter over these functions (it supplies the model's logits function,
the per-example generators and ``transformers.Trainer``'s backward), and the parity tests (``tests/parity/``) call
the same functions with the official draws, so they check the wiring the trainer runs, not a copy of it. One
function per stage (docs/algorithms.md §9.2):

1. :func:`rollout_batch`: the sampled completions as the objective scores them (``prompt_padding``,
   :mod:`dare.rl.conventions`); :func:`rollout_advantages`: group advantages of the rewards (:mod:`dare.rl.advantages`);
2. :func:`draw_passes`: the estimator's corrupted copies of one inner iteration (``response_tokens``);
3. :func:`score_passes` / :func:`token_scores`: scores without gradient under the rollout (old) or reference policy,
   in row chunks of ``micro_batch_size``;
4. :func:`update`: the objective's loss over one inner iteration's passes and its backwards (per pass, or the
   scalar-proxy replay of a pass-mean loss, docs/algorithms.md §3.8), returning the loss and metrics.

Inputs are typed: :class:`StepSettings` (the objective and the run facts the step needs), a
:class:`~dare.rl.rollout.Rollout` (the rollout batch, its passes and old/reference scores) and a :class:`Backprop`
(how a backward runs: plain ``loss.backward()`` by default; the trainer passes ``accelerator.backward`` divided by
the gradient-accumulation steps and its autocast context). Nothing here reads trainer state or a global RNG. On
several processes the normalisers are summed over processes (:mod:`dare.rl.batch_totals`) and every process runs
as many backwards as the busiest one (:meth:`Backprop.pads`); on one process these are the identity.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field, replace
from typing import Any, Callable, ContextManager

import torch

from dare.scaling import distributed
from dare.components import Estimator
from dare.diffusion.estimators import Pass, PassScore, ScoringBatch, score_pass
from dare.rl.advantages import group_advantages, groups_in_range, overlong_as_incorrect
from dare.rl.batch_totals import whole_batch_metrics, whole_batch_normalisers, whole_batch_sums
from dare.rl.conventions import (
    align_blocks_at_prompt_end,
    attend_prompt_padding,
    attend_response_padding,
    mask_after_response,
    score_through_first_stop,
)
from dare.rl.losses import LossTerms, PassLossInput, RLParams, SequenceLossInput, vanishes_at_zero_advantage
from dare.rl.rollout import Rollout, content_lengths

__all__ = ["LogitsFn", "StepSettings", "Backprop", "row_activation_bytes", "training_state_bytes", "rollout_batch",
           "overlong_rewards", "rollout_advantages", "kept_groups", "drop_filtered_groups", "draw_passes",
           "row_chunks", "score_passes", "token_scores", "trained_rows", "update", "update_per_pass",
           "update_pass_mean", "accumulate_metrics"]

#: ``fn(noisy_ids [N, S], clean_ids [N, S], attention_mask [N, S] | None) -> [N, S, V]`` aligned logits of the
#: policy being scored (``family.denoiser_logits`` of a model); called with the keyword ``block_anchor`` too when the
#: batch sets it (:attr:`dare.diffusion.estimators.ScoringBatch.block_anchor`, ``block_alignment: prompt_end``).
LogitsFn = Callable[[torch.Tensor, torch.Tensor, Any], torch.Tensor]


@dataclass(frozen=True)
class StepSettings:
    """What the step needs besides the rollout: the objective (its loss and every RL setting, ``objective.params``,
    an :class:`~dare.rl.losses.RLParams`), the likelihood temperature (a number:
    ``OnlineRLObjective.resolved_likelihood_temperature``) and the stop token ids (EOS, end of turn) that end a
    response under ``response_tokens: through_first_eos``."""

    objective: Any
    temperature: float = 1.0
    stop_ids: tuple[int, ...] = ()
    #: ``fn(seq_len) -> bytes``: one row's training activations at ``seq_len`` tokens (:func:`row_activation_bytes`
    #: bound to the model), and the budget in bytes (``params.activation_budget_mib`` resolved); both None: no bound
    row_bytes: Callable[[int], float] | None = None
    activation_budget: float | None = None

    @property
    def params(self) -> RLParams:
        return self.objective.params

    def micro_batch_size(self, batch: ScoringBatch) -> int | None:
        """Rows of one forward/backward of the update: ``params.micro_batch_size`` when set, else as many rows as
        keep ``row_bytes(S) * rows <= activation_budget`` (at least 1; ``S`` the batch's sequence length), else None
        (every row). Chunking changes only the float summation order of the loss and gradients (the normalisers
        are the whole batch's)."""
        explicit = self.params.micro_batch_size
        if explicit is not None or self.row_bytes is None or self.activation_budget is None:
            return explicit
        per_row = self.row_bytes(batch.input_ids.shape[1])
        if per_row <= 0:
            return None
        return max(1, min(batch.num_rows, int(self.activation_budget // per_row)))


@dataclass
class Backprop:
    """How the step's backwards run.

    * ``backward(loss)``: one backward (default ``loss.backward()``; the trainer passes ``accelerator.backward`` of
      the loss over the gradient-accumulation steps);
    * ``context()``: the context of a forward with gradient (default none; the trainer's autocast).

    Under DDP every backward all-reduces the gradients (under FSDP every forward gathers the weights), so every
    process must run as many backwards: :meth:`pads` says how many zero-gradient jobs this process adds and
    :meth:`pad` runs them (trajectory replay has one pass per denoising step present in the process's own rows;
    with confidence-threshold rollouts that number differs between processes, ``tests/test_distributed.py``).
    """

    backward: Callable[[torch.Tensor], None] = field(default=lambda loss: loss.backward())
    context: Callable[[], ContextManager] = field(default=contextlib.nullcontext)

    def pads(self, num_backwards: int) -> int:
        """The zero-gradient jobs this process adds to its ``num_backwards`` so that every process runs as many as the
        busiest one. Collective: every process calls it once per update, before its first backward."""
        counts = distributed.gather(int(num_backwards))
        return max(counts) - int(num_backwards)

    def run_pads(self, num_jobs: int) -> int:
        """:meth:`pads` for ``num_jobs`` real jobs, at least one when there is none, so every parameter still gets a
        (zero) gradient and the optimizer steps as it would over rows that all add zero gradient (Adam's moments,
        weight decay)."""
        return self.pads(max(num_jobs, 1)) + (1 if num_jobs == 0 else 0)

    def pad(self, n: int, loss_fn: Callable[[], torch.Tensor]) -> None:
        """``n`` forward/backward jobs of exactly zero gradient: ``0 * loss_fn()``, ``loss_fn`` a differentiable scalar
        computed through the (wrapped) model."""
        for _ in range(n):
            with self.context():
                loss = loss_fn()
            self.backward(loss * 0.0)

    def backward_or_pad(self, loss: torch.Tensor, pad_loss: Callable[[], torch.Tensor]) -> None:
        """``loss``'s backward, or a pad job when ``loss`` has no graph (no row of the chunk is scored by the pass:
        ``score_pass`` skips that forward), which would otherwise raise in ``backward`` and, skipped, leave this
        process one backward short of the others."""
        if loss.requires_grad:
            self.backward(loss)
        else:
            self.pad(1, pad_loss)


# ---------------------------------------------------------------------------------------------- rollout batch
def rollout_batch(batch: ScoringBatch, params: RLParams) -> ScoringBatch:
    """The sampled completions as the objective scores them (:mod:`dare.rl.conventions`): with ``prompt_padding:
    attend`` the prompt's left padding is attended (the d1/SPG/coupled-GRPO releases); with ``block_alignment:
    prompt_end`` the blocks of a block family start at the padded prompt's end; with ``response_padding: masked``
    the padding after a truncating family's response is attended as masks (the TraceRL SDAR release). Else
    ``batch`` unchanged."""
    if params.prompt_padding == "attend":
        batch = attend_prompt_padding(batch)
    if params.block_alignment == "prompt_end":
        batch = align_blocks_at_prompt_end(batch)
    if params.response_padding == "masked":
        batch = attend_response_padding(batch)
    return batch


def overlong_rewards(rewards: torch.Tensor, batch: ScoringBatch, params: RLParams,
                     stop_ids: tuple[int, ...]) -> torch.Tensor:
    """``[N]`` rewards with the overlong rule (``params.overlong_margin``,
    :func:`dare.rl.advantages.overlong_as_incorrect`): a completion within the margin of the generation budget scores
    as incorrect; ``rewards`` unchanged when the rule is off."""
    if params.overlong_margin is None:
        return rewards
    lengths = content_lengths(batch.input_ids[:, batch.prompt_length:], stop_ids)
    return overlong_as_incorrect(rewards, lengths, batch.completion_length, params.overlong_margin)


def kept_groups(rewards: torch.Tensor, params: RLParams) -> torch.Tensor | None:
    """``[N]`` bool, the rows of the groups ``params.group_filter`` trains (group accuracy in the range,
    :func:`dare.rl.advantages.groups_in_range`), or None when there is no filter."""
    return None if params.group_filter is None else groups_in_range(rewards, params.group_size, *params.group_filter)


def rollout_advantages(rewards: torch.Tensor, params: RLParams) -> torch.Tensor:
    """``[N]`` float32 group advantages of ``[N]`` rewards (groups of ``params.group_size`` consecutive rows,
    ``params.advantage``, ``params.advantage_std_eps``, ``params.advantage_std``;
    :func:`dare.rl.advantages.group_advantages`), 0 in the groups ``params.group_filter`` leaves out."""
    advantages = group_advantages(rewards, params.group_size, params.advantage, params.advantage_std_eps,
                                  params.advantage_std == "sample")
    keep = kept_groups(rewards, params)
    return advantages if keep is None else advantages * keep.to(advantages.device)


def drop_filtered_groups(passes: list[Pass], rewards: torch.Tensor, params: RLParams) -> list[Pass]:
    """``passes`` with weight 0 in the groups ``params.group_filter`` leaves out: they are not scored, nor counted by
    the token or (row, pass) normalisers; unchanged without a filter."""
    keep = kept_groups(rewards, params)
    if keep is None or not passes:
        return passes
    w = keep.to(device=passes[0].weight.device, dtype=torch.float32)[None, :, None]
    return [replace(p, weight=p.weight * w) for p in passes]


def draw_passes(estimator: Estimator, batch: ScoringBatch, generator, params: RLParams,
                stop_ids: tuple[int, ...]) -> list[Pass]:
    """The estimator's passes of one inner iteration (``estimator.draw(batch, generator)``), scored only through
    each row's first stop token under ``response_tokens: through_first_eos``, and with the padding after a
    response masked under ``response_padding: masked`` (:mod:`dare.rl.conventions`).

    :param generator: a :class:`dare.randomness.RowGenerators` (one generator per row) or None (the estimator's
        own default).
    """
    passes = estimator.draw(batch, generator)
    if params.response_tokens == "through_first_eos":
        passes = score_through_first_stop(passes, batch, stop_ids)
    if params.response_padding == "masked":
        passes = mask_after_response(passes, batch)
    return passes


# ---------------------------------------------------------------------------------------------- scores
def row_activation_bytes(model, family, bf16: bool = False) -> Callable[[int], float] | None:
    """``fn(seq_len) -> bytes``: the activations one row of ``seq_len`` tokens keeps for the backward of a training
    forward of ``model`` (layers and logits, :func:`dare.ops.memory_estimate.layer_activation_bytes` and
    :func:`~dare.ops.memory_estimate.logits_bytes`; block-diffusion families run ``[x_t ; x_0]``, twice the tokens),
    at 2 bytes a value under bf16 autocast, else the weights' element size; with gradient checkpointing only each
    layer's input is kept. An estimate, used to size the update's row chunks (:meth:`StepSettings.micro_batch_size`).

    None when the model has no ``config`` with a hidden size, a layer count and a vocabulary size (nothing to size).
    """
    from dare.errors import SpecError
    from dare.ops.memory_estimate import layer_activation_bytes, logits_bytes

    config = getattr(model, "config", None)
    w = 2 if bf16 else next(model.parameters()).element_size()
    ckpt = bool(getattr(model, "is_gradient_checkpointing", False))
    factor = 2 if getattr(family, "attention", None) == "block" else 1
    try:
        layer_activation_bytes(config, 1, 1, w, ckpt) + logits_bytes(config, 1, 1, w)
    except (SpecError, TypeError, ValueError, AttributeError):
        return None
    return lambda seq_len: (layer_activation_bytes(config, 1, factor * seq_len, w, ckpt)
                            + logits_bytes(config, 1, factor * seq_len, w))


def training_state_bytes(model, fp32_master: bool = False) -> float:
    """Bytes of ``model``'s training state on this process: every parameter, plus a gradient and AdamW's two moments
    for each trainable one (their element size; 4 bytes each with ``fp32_master``, the float32 master weights of
    ``train.bf16``, dare/trainers/precision.py), the ``auto`` activation budget (``RLParams.activation_budget_mib``)."""
    seen = {id(p): p for p in model.parameters()}.values()
    return float(sum(p.numel() * (4 * (4 if fp32_master else p.element_size()) if p.requires_grad else p.element_size())
                     for p in seen))


def row_chunks(n: int, micro_batch_size: int | None) -> list[slice]:
    """``n`` rows cut into slices of ``micro_batch_size`` rows (one slice when None)."""
    step = micro_batch_size or max(n, 1)
    return [slice(i, min(i + step, n)) for i in range(0, n, step)]


@torch.no_grad()
def score_passes(fn: LogitsFn, batch: ScoringBatch, passes: list[Pass], temperature: float = 1.0,
                 micro_batch_size: int | None = None, with_entropy: bool = False) -> list[PassScore]:
    """Every pass scored under ``fn`` without gradient, in row chunks: one :class:`PassScore` of ``[N, G]``
    float32 tensors per pass (``entropy`` only ``with_entropy``)."""
    out = []
    for pas in passes:
        parts = [score_pass(fn, batch.rows(r), pas.rows(r), temperature, with_entropy)
                 for r in row_chunks(batch.num_rows, micro_batch_size)]
        entropy = torch.cat([x.entropy for x in parts]) if with_entropy else None
        out.append(PassScore(torch.cat([x.token for x in parts]), pas.scored, entropy))
    return out


@torch.no_grad()
def token_scores(fn: LogitsFn, batch: ScoringBatch, passes: list[Pass], temperature: float = 1.0,
                 micro_batch_size: int | None = None, rows: torch.Tensor | None = None) -> list[torch.Tensor]:
    """``[N, G]`` float32 token scores of every pass under ``fn`` (no gradient), computed for ``rows`` only (``[n]``
    int64; every row when None) and 0 elsewhere: the old (rollout-policy) and reference scores of a rollout."""
    if rows is None:
        return [x.token for x in score_passes(fn, batch, passes, temperature, micro_batch_size)]
    out = []
    for pas in passes:
        token = torch.zeros(pas.weight.shape[1:], dtype=torch.float32, device=pas.weight.device)
        for r in (rows[c] for c in row_chunks(len(rows), micro_batch_size)):
            token[r] = score_pass(fn, batch.rows(r), pas.rows(r), temperature).token
        out.append(token)
    return out


def trained_rows(objective, advantages: torch.Tensor) -> torch.Tensor | None:
    """``[n]`` int64 indices of the rows the update must run, or None for every row.

    With ``params.skip_zero_advantage``, an objective whose per-row loss is identically 0 at advantage 0
    (``OnlineRLObjective.zero_advantage_rows_vanish``) and ``beta = 0`` (no KL term), a row whose advantages
    (``[N]`` or ``[N, G]``) are all exactly 0 adds exactly zero gradient, so its forward and backward are skipped.
    The normalisers still count it (computed from the whole batch): the loss and gradient are the whole batch's.
    """
    a = objective.params
    if not (a.skip_zero_advantage and vanishes_at_zero_advantage(objective) and a.beta == 0):
        return None
    return torch.nonzero((advantages != 0).reshape(advantages.shape[0], -1).any(dim=1)).flatten()


def _jobs(passes: list[Pass], rows: torch.Tensor | None, num_rows: int,
          micro_batch_size: int | None) -> list[tuple[int, Any]]:
    """``(pass index, rows)`` of every forward/backward job: each pass over row chunks of ``rows`` (all rows when
    None), without the jobs whose rows the pass does not score (their loss would be a constant)."""
    if rows is None:
        chunks = row_chunks(num_rows, micro_batch_size)
    else:
        chunks = [rows[c] for c in row_chunks(len(rows), micro_batch_size)]
    return [(p, r) for p, pas in enumerate(passes) for r in chunks if bool((pas.weight[:, r] != 0).any())]


def _first_row_loss(fn: LogitsFn, batch: ScoringBatch, passes: list[Pass], temperature: float):
    """A pad job's loss (:meth:`Backprop.pad`): the first row's token scores under the first pass's corruption,
    every completion token weighted 1 (so the forward runs even where the pass scores nothing of that row, e.g. a
    group left out by ``group_filter``)."""
    first = slice(0, 1)
    pas = passes[0].rows(first)
    pas = replace(pas, weight=torch.ones_like(pas.weight))
    return lambda: score_pass(fn, batch.rows(first), pas, temperature).token.sum()


def accumulate_metrics(metrics: dict[str, float], terms: LossTerms) -> None:
    """Add ``terms.metrics`` (numbers or 0-d tensors) into ``metrics`` (summed contributions)."""
    for k, v in terms.metrics.items():
        metrics[k] = metrics.get(k, 0.0) + float(v)


# ---------------------------------------------------------------------------------------------- the update
def update(settings: StepSettings, fn: LogitsFn, rollout: Rollout, iteration: int,
           backprop: Backprop | None = None) -> tuple[float, dict[str, float]]:
    """The objective's update over inner iteration ``iteration`` of ``rollout``: :func:`update_pass_mean` when the
    objective's ``score_reduction`` is ``"pass_mean"``, else :func:`update_per_pass`.

    :returns: ``(loss of the whole batch, metrics)``; gradients are accumulated into the parameters behind ``fn``.
    """
    run = update_pass_mean if settings.objective.score_reduction == "pass_mean" else update_per_pass
    return run(settings, fn, rollout, iteration, backprop or Backprop())


def update_per_pass(settings: StepSettings, fn: LogitsFn, rollout: Rollout, iteration: int,
                    backprop: Backprop | None = None) -> tuple[float, dict[str, float]]:
    """Sum of the objective's per-pass losses (``OnlineRLObjective.pass_loss``), one backward per pass and row chunk.

    ``rollout.old[iteration]`` / ``rollout.ref[iteration]`` hold the ``[N, G]`` old/reference scores of each pass
    (``rollout.old`` None: ``old = current.detach()``, exact for one inner iteration). Rows of advantage 0 are
    skipped where that is exact (:func:`trained_rows`); ``entropy`` and ``nfe/update`` then cover the rows run.

    :returns: ``(loss of the whole batch, metrics)``: ``nfe/update``, ``entropy`` and the loss's metrics summed.
    """
    backprop = backprop or Backprop()
    objective, T = settings.objective, settings.temperature
    batch, passes = rollout.batch, rollout.passes[iteration]
    micro = settings.micro_batch_size(batch)
    lengths = batch.response_lengths
    num_tokens, num_sequences, response_tokens, world, num_passes = whole_batch_normalisers(passes, batch)
    (row_passes,), _ = whole_batch_sums(sum(float(p.scored.any(dim=-1).sum()) for p in passes))
    jobs = _jobs(passes, trained_rows(objective, rollout.advantages), batch.num_rows, micro)
    pads = backprop.run_pads(len(jobs))
    pad_loss = _first_row_loss(fn, batch, passes, T)
    total, metrics, forwards = 0.0, {}, 0
    entropy_sum, entropy_count = 0.0, 0.0
    for p, r in jobs:
        pas = passes[p]
        with backprop.context():
            current = score_pass(fn, batch.rows(r), pas.rows(r), T, with_entropy=True)
        old = rollout.old[iteration][p][r] if rollout.old is not None else current.token.detach()
        ref = rollout.ref[iteration][p][r] if rollout.ref is not None else None
        terms = objective.pass_loss(
            PassLossInput(current=current, old=old, ref=ref, advantages=rollout.advantages[r],
                          response_lengths=lengths[r], pass_index=p, num_passes=num_passes,
                          num_tokens=num_tokens[p], num_sequences=num_sequences,
                          total_response_tokens=response_tokens, num_row_passes=row_passes,
                          row_values={k: v[r] for k, v in rollout.row_values.items()}),
        )
        backprop.backward_or_pad(terms.loss * world, pad_loss)
        total += float(terms.loss.detach()) * world
        accumulate_metrics(metrics, terms)
        entropy_sum += float((current.entropy * current.scored).sum())
        entropy_count += float(current.scored.sum())
        forwards += int((pas.weight[:, r] != 0).flatten(1).any(dim=1).sum())
    backprop.pad(pads, pad_loss)
    metrics, entropy_sum, entropy_count = whole_batch_metrics(metrics, entropy_sum, entropy_count)
    metrics["nfe/update"] = float(forwards)
    if entropy_count > 0:  # nothing run (every row skipped): no entropy to report, not an entropy of 0
        metrics["entropy"] = entropy_sum / entropy_count
    return total, metrics


def update_pass_mean(settings: StepSettings, fn: LogitsFn, rollout: Rollout, iteration: int,
                     backprop: Backprop | None = None) -> tuple[float, dict[str, float]]:
    """Scalar-proxy replay of ``L(mean_p s_p)`` (``OnlineRLObjective.sequence_loss``) with one pass in memory
    (docs/algorithms.md §3.8).

    ``z = mean_p s_p`` is computed without gradient, ``g = dL/dz`` on a leaf copy of ``z``, then every pass is
    replayed with gradient and ``sum_n s_p[n] g[n] / P`` backpropagated: by the chain rule exactly ``dL/dtheta``, for
    one extra forward per pass. With ``params.skip_zero_advantage`` the replay skips the rows whose ``g`` is exactly
    0 (exact for any loss).

    :returns: ``(loss, metrics)`` as :func:`update_per_pass`.
    """
    backprop = backprop or Backprop()
    objective, T = settings.objective, settings.temperature
    batch, passes = rollout.batch, rollout.passes[iteration]
    micro = settings.micro_batch_size(batch)
    P = len(passes)
    with backprop.context():
        scores = score_passes(fn, batch, passes, T, micro, with_entropy=True)
    current = torch.stack([s.sequence for s in scores]).mean(dim=0)
    old = torch.stack([s.sum(-1) for s in rollout.old[iteration]]).mean(0) if rollout.old is not None else current
    ref = torch.stack([s.sum(-1) for s in rollout.ref[iteration]]).mean(0) if rollout.ref is not None else None
    proxy = current.detach().clone().requires_grad_(True)
    terms = objective.sequence_loss(
        SequenceLossInput(current=proxy, old=old.detach(), ref=ref, advantages=rollout.advantages,
                          response_lengths=batch.response_lengths),
    )
    (grad,) = torch.autograd.grad(terms.loss, proxy)
    # a row with dL/dz = 0 (advantage 0, a clipped sequence ratio, ...) adds exactly zero gradient
    rows = torch.nonzero(grad != 0).flatten() if settings.params.skip_zero_advantage else None
    jobs = _jobs(passes, rows, batch.num_rows, micro)
    pads = backprop.run_pads(len(jobs))
    pad_loss = _first_row_loss(fn, batch, passes, T)
    forwards = 0
    for p, r in jobs:
        pas = passes[p]
        with backprop.context():
            seq = score_pass(fn, batch.rows(r), pas.rows(r), T).sequence
        backprop.backward_or_pad((seq * grad[r]).sum() / P, pad_loss)
        forwards += int((pas.weight[:, r] != 0).flatten(1).any(dim=1).sum())
    backprop.pad(pads, pad_loss)
    metrics: dict[str, float] = {}
    accumulate_metrics(metrics, terms)
    scoring = sum(int((passes[p].weight[:, r] != 0).flatten(1).any(dim=1).sum())
                  for p, r in _jobs(passes, None, batch.num_rows, micro))
    metrics["nfe/update"] = float(scoring + forwards)
    scored = torch.stack([s.scored for s in scores]).float()
    # the loss and its metrics are row means (every process holds as many rows: their mean over processes, which
    # the log takes, is the whole batch's); the entropy is a token mean over every process's tokens
    _, entropy_sum, entropy_count = whole_batch_metrics(
        {}, float((torch.stack([s.entropy for s in scores]) * scored).sum()), float(scored.sum()))
    metrics["entropy"] = entropy_sum / max(entropy_count, 1.0)
    return float(terms.loss.detach()), metrics
