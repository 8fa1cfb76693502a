"""The update of an online-RL step: the objective's loss over the estimator's passes, and its backwards.

:class:`PolicyUpdate` is mixed into :class:`dare.rl.trainer.GRPOTrainer` (which draws the rollout and its
passes). Two ways to update, chosen by the objective's ``score_reduction``:

* per pass (:meth:`PolicyUpdate._update_per_pass`): the objective's per-pass loss, one backward per pass and
  row chunk (``micro_batch_size``);
* pass mean (:meth:`PolicyUpdate._update_pass_mean`): the scalar-proxy replay of ``L(mean_p s_p)`` with one
  pass in memory (docs/algorithms.md §3.8).

Rows that add exactly zero gradient are skipped where that is exact (``skip_zero_advantage``,
:meth:`PolicyUpdate._trained_rows`), and every process runs as many backwards as the busiest one
(zero-gradient pads, :meth:`PolicyUpdate._backward_pads`), so DDP/FSDP collectives line up.

It uses the trainer's ``params`` (:class:`dare.rl.objective.RLParams`), ``objective``, ``likelihood_temperature``,
``_logits_fn``, ``_score_all``, ``_row_chunks`` and ``transformers.Trainer``'s ``accelerator``,
``compute_loss_context_manager`` and ``current_gradient_accumulation_steps``.
"""

from __future__ import annotations

from typing import Any

import torch

from dare import distributed
from dare.diffusion.estimators import Pass, ScoringBatch, score_pass
from dare.rl.batch_totals import whole_batch_metrics, whole_batch_normalisers, whole_batch_sums
from dare.rl.losses import LossTerms, PassLossInput, SequenceLossInput, vanishes_at_zero_advantage
from dare.rl.rollout import Rollout

__all__ = ["PolicyUpdate"]


class PolicyUpdate:
    """The objective's update over a rollout's passes, with equal backwards on every process (module docstring)."""

    def _trained_rows(self, rollout: Rollout) -> torch.Tensor | None:
        """``[n]`` int64 indices of the rows the update must run, or None for every row.

        With ``params.skip_zero_advantage``, an objective whose per-row loss is identically 0 at advantage 0
        (``OnlineRLObjective.zero_advantage_rows_vanish``) and ``beta = 0`` (no KL term), a row whose
        advantage is exactly 0 (every row of a group of equal rewards, :mod:`dare.rl.advantages`) adds exactly
        zero gradient, so its forward and backward are skipped. The normalisers still count it (computed from
        the whole batch), so the loss and the gradient are those of the whole batch.
        """
        a = self.params
        if not (a.skip_zero_advantage and vanishes_at_zero_advantage(self.objective) and a.beta == 0):
            return None
        adv = rollout.advantages
        return torch.nonzero((adv != 0).reshape(adv.shape[0], -1).any(dim=1)).flatten()

    def _jobs(self, passes: list[Pass], rows: torch.Tensor | None, num_rows: int) -> list[tuple[int, Any]]:
        """``(pass index, row index)`` of every forward/backward job of an update: each pass over row chunks
        of ``rows`` (all rows when None; ``micro_batch_size`` rows per chunk), without the jobs whose rows
        the pass does not score (their loss would be a constant)."""
        if rows is None:
            chunks = self._row_chunks(num_rows)
        else:
            chunks = [rows[c] for c in self._row_chunks(len(rows))]
        return [(p, r) for p, pas in enumerate(passes) for r in chunks if bool((pas.weight[:, r] != 0).any())]

    def _run_pads(self, num_jobs: int) -> int:
        """The zero-gradient pad jobs to add to ``num_jobs`` real ones (:meth:`_backward_pads`), at least one when
        there is no real job, so every parameter still gets a (zero) gradient and the optimizer steps exactly
        as it would over rows that all add zero gradient (Adam's moments, weight decay)."""
        return self._backward_pads(max(num_jobs, 1)) + (1 if num_jobs == 0 else 0)

    def _update_per_pass(self, model, rollout: Rollout, iteration: int) -> tuple[float, dict[str, float]]:
        """Sum of the objective's per-pass losses, one backward per pass and row chunk.

        Rows of advantage 0 are skipped where that is exact (:meth:`_trained_rows`); ``entropy`` and
        ``nfe/update`` then cover the rows run.

        :returns: ``(loss of the whole batch, summed metric contributions)``; gradients are accumulated.
        """
        batch, passes = rollout.batch, rollout.passes[iteration]
        fn = self._logits_fn(model)
        lengths = batch.response_lengths
        num_tokens, num_sequences, response_tokens, world, num_passes = whole_batch_normalisers(passes, batch)
        (row_passes,), _ = whole_batch_sums(sum(float(p.scored.any(dim=-1).sum()) for p in passes))
        jobs = self._jobs(passes, self._trained_rows(rollout), batch.num_rows)
        pads = self._run_pads(len(jobs))
        pad_loss = self._first_row_loss(fn, batch, passes)
        total, metrics, forwards = 0.0, {}, 0
        entropy_sum, entropy_count = 0.0, 0.0
        for p, r in jobs:
            pas = passes[p]
            with self.compute_loss_context_manager():
                current = score_pass(fn, batch.rows(r), pas.rows(r), self.likelihood_temperature, with_entropy=True)
            old = rollout.old[iteration][p][r] if rollout.old is not None else current.token.detach()
            ref = rollout.ref[iteration][p][r] if rollout.ref is not None else None
            terms = self.objective.pass_loss(
                PassLossInput(current=current, old=old, ref=ref, advantages=rollout.advantages[r],
                              response_lengths=lengths[r], pass_index=p, num_passes=num_passes,
                              num_tokens=num_tokens[p], num_sequences=num_sequences,
                              total_response_tokens=response_tokens, num_row_passes=row_passes,
                              row_values={k: v[r] for k, v in rollout.row_values.items()}),
            )
            self._backward_or_pad(terms.loss * world, pad_loss)
            total += float(terms.loss.detach()) * world
            self._accumulate(metrics, terms)
            entropy_sum += float((current.entropy * current.scored).sum())
            entropy_count += float(current.scored.sum())
            forwards += int((pas.weight[:, r] != 0).flatten(1).any(dim=1).sum())
        self._pad_backward(pads, pad_loss)
        metrics, entropy_sum, entropy_count = whole_batch_metrics(metrics, entropy_sum, entropy_count)
        metrics["nfe/update"] = float(forwards)
        if entropy_count > 0:  # nothing run (every row skipped): no entropy to report, not an entropy of 0
            metrics["entropy"] = entropy_sum / entropy_count
        return total, metrics

    def _update_pass_mean(self, model, rollout: Rollout, iteration: int) -> tuple[float, dict[str, float]]:
        """Scalar-proxy replay of ``L(mean_p s_p)`` with one pass in memory (docs/algorithms.md §3.8).

        ``z = mean_p s_p`` is computed without gradient, ``g = dL/dz`` on a leaf copy of ``z``, then
        every pass is replayed with gradient and ``sum_n s_p[n] g[n] / P`` backpropagated: by the
        chain rule this is exactly ``dL/dtheta``. Costs one extra forward per pass. With
        ``params.skip_zero_advantage`` the replay skips the rows whose ``g`` is exactly 0 (exact for any loss).
        """
        batch, passes = rollout.batch, rollout.passes[iteration]
        P = len(passes)
        with self.compute_loss_context_manager():
            scores = self._score_all(model, batch, passes, with_entropy=True)
        current = torch.stack([s.sequence for s in scores]).mean(dim=0)
        old = torch.stack([s.sum(-1) for s in rollout.old[iteration]]).mean(0) if rollout.old is not None else current
        ref = torch.stack([s.sum(-1) for s in rollout.ref[iteration]]).mean(0) if rollout.ref is not None else None
        proxy = current.detach().clone().requires_grad_(True)
        terms = self.objective.sequence_loss(
            SequenceLossInput(current=proxy, old=old.detach(), ref=ref, advantages=rollout.advantages,
                              response_lengths=batch.response_lengths),
        )
        (grad,) = torch.autograd.grad(terms.loss, proxy)
        fn = self._logits_fn(model)
        # a row with dL/dz = 0 (advantage 0, a clipped sequence ratio, ...) adds exactly zero gradient
        rows = torch.nonzero(grad != 0).flatten() if self.params.skip_zero_advantage else None
        jobs = self._jobs(passes, rows, batch.num_rows)
        pads = self._run_pads(len(jobs))
        pad_loss = self._first_row_loss(fn, batch, passes)
        forwards = 0
        for p, r in jobs:
            pas = passes[p]
            with self.compute_loss_context_manager():
                seq = score_pass(fn, batch.rows(r), pas.rows(r), self.likelihood_temperature).sequence
            self._backward_or_pad((seq * grad[r]).sum() / P, pad_loss)
            forwards += int((pas.weight[:, r] != 0).flatten(1).any(dim=1).sum())
        self._pad_backward(pads, pad_loss)
        metrics: dict[str, float] = {}
        self._accumulate(metrics, terms)
        scoring = sum(int((passes[p].weight[:, r] != 0).flatten(1).any(dim=1).sum())
                      for p, r in self._jobs(passes, None, batch.num_rows))
        metrics["nfe/update"] = float(scoring + forwards)
        scored = torch.stack([s.scored for s in scores]).float()
        # the loss and its metrics are row means (every process holds as many rows: their mean over processes,
        # which the log takes, is the whole batch's); the entropy is a token mean over every process's tokens
        _, entropy_sum, entropy_count = whole_batch_metrics(
            {}, float((torch.stack([s.entropy for s in scores]) * scored).sum()), float(scored.sum()))
        metrics["entropy"] = entropy_sum / max(entropy_count, 1.0)
        return float(terms.loss.detach()), metrics

    def _backward(self, loss: torch.Tensor) -> None:
        self.accelerator.backward(loss / self.current_gradient_accumulation_steps)

    # ------------------------------------------------------------------ the same number of backwards everywhere
    def _backward_pads(self, num_backwards: int) -> int:
        """How many zero-gradient forward/backward jobs this process must add to its ``num_backwards`` so that
        every process runs as many as the busiest one. Collective: every process calls it once per update,
        before its first backward.

        Under DDP every ``backward`` all-reduces the gradients (and under FSDP every forward gathers the
        weights), so the processes must run the same number of them. Trajectory replay has one pass per
        denoising step present in the process's own rows, and with confidence-threshold rollouts (or any
        decoder whose step count depends on the rows) that number differs between processes; without the
        pads the 2-process run waits forever in the first update (``tests/test_distributed.py``).
        """
        counts = distributed.gather(int(num_backwards))
        return max(counts) - int(num_backwards)

    def _pad_backward(self, n: int, loss_fn) -> None:
        """``n`` forward/backward jobs whose gradient is exactly zero: ``0 * loss_fn()``, ``loss_fn`` a
        differentiable scalar computed through the (wrapped) model (see :meth:`_backward_pads`)."""
        for _ in range(n):
            with self.compute_loss_context_manager():
                loss = loss_fn()
            self._backward(loss * 0.0)

    def _backward_or_pad(self, loss: torch.Tensor, pad_loss) -> None:
        """``loss``'s backward, or a pad job (:meth:`_pad_backward`) when ``loss`` has no graph: no row of the
        chunk is scored by the pass (``score_pass`` skips that forward; with ``micro_batch_size`` and trajectory
        replay a chunk can have no token committed at a step), which would otherwise raise in ``backward`` and,
        skipped, leave this process one backward short of the others."""
        if loss.requires_grad:
            self._backward(loss)
        else:
            self._pad_backward(1, pad_loss)

    def _first_row_loss(self, fn, batch: ScoringBatch, passes: list[Pass]):
        """A pad job's loss (:meth:`_pad_backward`): the first row's token scores under the first pass's corruption,
        every completion token weighted 1 (so the forward runs even where the pass scores nothing of that row, e.g.
        a group left out by ``group_filter``)."""
        first = slice(0, 1)
        pas = passes[0].rows(first)
        pas = Pass(mask=pas.mask, weight=torch.ones_like(pas.weight), key=pas.key)
        return lambda: score_pass(fn, batch.rows(first), pas, self.likelihood_temperature).token.sum()

    @staticmethod
    def _accumulate(metrics: dict[str, float], terms: LossTerms) -> None:
        for k, v in terms.metrics.items():
            metrics[k] = metrics.get(k, 0.0) + float(v)
