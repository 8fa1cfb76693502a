"""The update of SPG (arXiv 2510.09541), whose EUBO-like surrogate couples the Monte-Carlo copies.

The base trainer's ``per_pass`` update adds one loss per pass; SPG's EUBO is a log of a mean over the
copies, so its loss is a function ``L(l_1, ..., l_M)`` of all copies' token log-probs at once
(:meth:`dare_grpo.objectives.spg.SPG.joint_loss`). :class:`SPGTrainer` evaluates it exactly with one copy
in memory, the token-level analogue of the scalar-proxy replay (docs/algorithms.md §3.8):

1. ``M = 1`` (the recipe): one forward per row chunk with gradient, the loss directly;
2. ``M > 1``: every copy scored without gradient; ``g = dL/dl`` on a leaf copy of the ``[M, N, G]``
   token log-probs; then each copy ``m`` is replayed with gradient and ``sum(l_m * g_m)`` backpropagated,
   which by the chain rule is exactly ``dL/dtheta`` (one extra forward per copy).

Rows are independent in ``L`` except through the batch-wide normaliser ``sum |y|``, so row chunks
(``micro_batch_size``) add up to the batch loss. On N processes ``sum |y|`` and the row count are the whole
batch's (:func:`dare.rl.batch_totals.whole_batch_sums`) and each process's loss is multiplied by N (DDP averages
the gradients), so N processes train and log what one does (``tests/test_distributed.py``).

The step is two public functions, :func:`spg_passes` and :func:`spg_update`, which :class:`SPGTrainer`'s hooks
(:class:`dare.rl.hooks.RLStepHooks` ``draw_passes`` and ``update``) and the parity test (``tests/parity/test_spg.py``)
call alike.
"""

from __future__ import annotations

from typing import Callable

import torch

from dare.diffusion.estimators import Pass, ScoringBatch, score_pass
from dare.rl import step
from dare.rl.batch_totals import whole_batch_metrics, whole_batch_sums
from dare.rl.conventions import cut_response_at_first_stop, mask_after_response
from dare.rl.losses import RLParams
from dare.rl.rollout import Rollout
from dare.rl.trainer import GRPOTrainer
from dare_grpo.objectives.spg.loss import JointLossInput

__all__ = ["SPGTrainer", "response_batch", "spg_passes", "spg_update"]


def response_batch(batch: ScoringBatch, params: RLParams, stop_ids: tuple[int, ...]) -> ScoringBatch:
    """``batch`` with its response ending at the first stop token under ``response_tokens: through_first_eos`` (the
    official SPG rule: blocks, mask ratios and length weights count those tokens; dare.rl.conventions)."""
    if params.response_tokens == "through_first_eos":
        return cut_response_at_first_stop(batch, stop_ids)
    return batch


def spg_passes(draw: Callable[[ScoringBatch], list[Pass]], batch: ScoringBatch, params: RLParams,
               stop_ids: tuple[int, ...]) -> list[Pass]:
    """SPG's passes: ``draw`` (the step's :func:`dare.rl.step.draw_passes` with its generator) over
    :func:`response_batch`, positions after the response always masked (SPG)."""
    cut = response_batch(batch, params, stop_ids)
    passes = draw(cut)
    return mask_after_response(passes, cut) if cut is not batch else passes


def _joint_input(token, scored, rollout: Rollout, rows, totals: tuple[float, float], params: RLParams,
                 stop_ids: tuple[int, ...]) -> JointLossInput:
    """The rows ``rows`` of ``rollout`` with the whole batch's ``(response tokens, rows)`` ``totals``."""
    batch = response_batch(rollout.batch, params, stop_ids)
    return JointLossInput(
        token=token, scored=scored, advantages=rollout.advantages[rows],
        response_lengths=batch.response_lengths[rows], total_response_tokens=totals[0],
        num_sequences=int(totals[1]),
    )


def spg_update(settings: step.StepSettings, fn: step.LogitsFn, rollout: Rollout, iteration: int,
               backprop: step.Backprop | None = None) -> tuple[float, dict[str, float]]:
    """One optimizer step's gradient of SPG's loss over inner iteration ``iteration`` (module docstring).

    :returns: ``(loss, metrics)``; gradients are accumulated into the parameters behind ``fn``.
    """
    backprop = backprop or step.Backprop()
    objective, params, T, stop = settings.objective, settings.params, settings.temperature, settings.stop_ids
    batch, passes = rollout.batch, rollout.passes[iteration]
    metrics: dict[str, float] = {}
    total, forwards = 0.0, 0
    entropy_sum, entropy_count = 0.0, 0.0
    totals, world = whole_batch_sums(float(response_batch(batch, params, stop).response_lengths.sum()), batch.num_rows)
    chunks = step.row_chunks(batch.num_rows, params.micro_batch_size)
    pads = backprop.pads(len(passes) * len(chunks))
    first = slice(0, 1)
    pad_loss = lambda: score_pass(fn, batch.rows(first), passes[0].rows(first), T).token.sum()  # noqa: E731
    if len(passes) == 1:
        for r in chunks:
            with backprop.context():
                cur = score_pass(fn, batch.rows(r), passes[0].rows(r), T, with_entropy=True)
            terms = objective.joint_loss(_joint_input(cur.token[None], cur.scored[None], rollout, r, totals, params, stop))
            backprop.backward_or_pad(terms.loss * world, pad_loss)
            total += float(terms.loss.detach()) * world
            step.accumulate_metrics(metrics, terms)
            entropy_sum += float((cur.entropy * cur.scored).sum())
            entropy_count += float(cur.scored.sum())
            forwards += int((passes[0].weight[:, r] != 0).flatten(1).any(dim=1).sum())
    else:
        with backprop.context():
            scores = step.score_passes(fn, batch, passes, T, params.micro_batch_size, with_entropy=True)
        leaf = torch.stack([s.token for s in scores]).detach().requires_grad_(True)
        scored = torch.stack([s.scored for s in scores])
        terms = objective.joint_loss(_joint_input(leaf, scored, rollout, slice(None), totals, params, stop))
        (grad,) = torch.autograd.grad(terms.loss * world, leaf)
        total = float(terms.loss.detach()) * world
        step.accumulate_metrics(metrics, terms)
        for m, pas in enumerate(passes):
            for r in chunks:
                with backprop.context():
                    cur = score_pass(fn, batch.rows(r), pas.rows(r), T)
                backprop.backward_or_pad((cur.token * grad[m, r]).sum(), pad_loss)
                forwards += 2 * int((pas.weight[:, r] != 0).flatten(1).any(dim=1).sum())
        for s in scores:
            entropy_sum += float((s.entropy * s.scored).sum())
            entropy_count += float(s.scored.sum())
    backprop.pad(pads, pad_loss)
    metrics, entropy_sum, entropy_count = whole_batch_metrics(metrics, entropy_sum, entropy_count)
    metrics["nfe/update"] = float(forwards)
    metrics["entropy"] = entropy_sum / max(entropy_count, 1.0)
    return total, metrics


class SPGTrainer(GRPOTrainer):
    """:class:`~dare.rl.trainer.GRPOTrainer` whose passes and update are SPG's (module docstring)."""

    def draw_passes(self, batch: ScoringBatch, iteration: int = 0) -> list[Pass]:
        """:func:`spg_passes` with the base hook's per-completion generators."""
        return spg_passes(lambda cut: super(SPGTrainer, self).draw_passes(cut, iteration), batch, self.params,
                          self.step_settings.stop_ids)

    def update(self, model, rollout: Rollout, iteration: int) -> tuple[float, dict[str, float]]:
        """:func:`spg_update` over the model's logits."""
        return spg_update(self.step_settings, self.logits_fn(model), rollout, iteration, self.backprop)
