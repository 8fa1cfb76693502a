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
"""

from __future__ import annotations

import torch

from dare.diffusion.estimators import ScoringBatch, score_pass
from dare_grpo.loss_spg import JointLossInput
from dare.rl.batch_totals import whole_batch_metrics, whole_batch_sums
from dare.rl.conventions import cut_response_at_first_stop, mask_after_response
from dare.rl.rollout import Rollout
from dare.rl.trainer import GRPOTrainer

__all__ = ["SPGTrainer"]


class SPGTrainer(GRPOTrainer):
    """:class:`~dare.rl.trainer.GRPOTrainer` whose update evaluates SPG's coupled loss (module docstring)."""

    def _response(self, batch: ScoringBatch) -> ScoringBatch:
        """``batch`` with its response ending at the first EOS under ``response_tokens: through_first_eos`` (the
        official SPG rule: blocks, mask ratios and length weights count those tokens; dare.rl.conventions)."""
        if self.params.response_tokens == "through_first_eos":
            return cut_response_at_first_stop(batch, self.tokens.stop_ids)
        return batch

    def _draw_passes(self, batch: ScoringBatch, iteration: int = 0):
        """The estimator's passes over :meth:`_response`; positions after the response always masked (SPG)."""
        cut = self._response(batch)
        passes = super()._draw_passes(cut, iteration)
        return mask_after_response(passes, cut) if cut is not batch else passes

    def _joint_input(self, token, scored, rollout: Rollout, rows, totals: tuple[float, float]) -> JointLossInput:
        """The rows ``rows`` of ``rollout`` with the whole batch's ``(response tokens, rows)`` ``totals``."""
        batch = self._response(rollout.batch)
        return JointLossInput(
            token=token, scored=scored, advantages=rollout.advantages[rows],
            response_lengths=batch.response_lengths[rows], total_response_tokens=totals[0],
            num_sequences=int(totals[1]),
        )

    def _update_per_pass(self, model, rollout: Rollout, iteration: int) -> tuple[float, dict[str, float]]:
        """One optimizer step's gradient of SPG's loss (module docstring). :returns: ``(loss, metrics)``."""
        batch, passes = rollout.batch, rollout.passes[iteration]
        fn = self._logits_fn(model)
        T = self.likelihood_temperature
        metrics: dict[str, float] = {}
        total, forwards = 0.0, 0
        entropy_sum, entropy_count = 0.0, 0.0
        totals, world = whole_batch_sums(float(self._response(batch).response_lengths.sum()), batch.num_rows)
        chunks = self._row_chunks(batch.num_rows)
        pads = self._backward_pads(len(passes) * len(chunks))
        pad_loss = self._first_row_loss(fn, batch, passes)
        if len(passes) == 1:
            for r in chunks:
                with self.compute_loss_context_manager():
                    cur = score_pass(fn, batch.rows(r), passes[0].rows(r), T, with_entropy=True)
                inp = self._joint_input(cur.token[None], cur.scored[None], rollout, r, totals)
                terms = self.objective.joint_loss(inp)
                self._backward_or_pad(terms.loss * world, pad_loss)
                total += float(terms.loss.detach()) * world
                self._accumulate(metrics, terms)
                entropy_sum += float((cur.entropy * cur.scored).sum())
                entropy_count += float(cur.scored.sum())
                forwards += int((passes[0].weight[:, r] != 0).flatten(1).any(dim=1).sum())
        else:
            with self.compute_loss_context_manager():
                scores = self._score_all(model, batch, passes, with_entropy=True)
            leaf = torch.stack([s.token for s in scores]).detach().requires_grad_(True)
            scored = torch.stack([s.scored for s in scores])
            terms = self.objective.joint_loss(self._joint_input(leaf, scored, rollout, slice(None), totals))
            (grad,) = torch.autograd.grad(terms.loss * world, leaf)
            total = float(terms.loss.detach()) * world
            self._accumulate(metrics, terms)
            for m, pas in enumerate(passes):
                for r in chunks:
                    with self.compute_loss_context_manager():
                        cur = score_pass(fn, batch.rows(r), pas.rows(r), T)
                    self._backward_or_pad((cur.token * grad[m, r]).sum(), pad_loss)
                    forwards += 2 * int((pas.weight[:, r] != 0).flatten(1).any(dim=1).sum())
            for s in scores:
                entropy_sum += float((s.entropy * s.scored).sum())
                entropy_count += float(s.scored.sum())
        self._pad_backward(pads, pad_loss)
        metrics, entropy_sum, entropy_count = whole_batch_metrics(metrics, entropy_sum, entropy_count)
        metrics["nfe/update"] = float(forwards)
        metrics["entropy"] = entropy_sum / max(entropy_count, 1.0)
        return total, metrics
