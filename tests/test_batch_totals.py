"""Whole-batch normalisers and metrics over processes (dare.rl.batch_totals), with the other process's share
injected through ``dare.scaling.distributed.gather`` (the 2-process runs themselves: tests/test_distributed.py)."""

import pytest
import torch

from dare.diffusion.estimators import Pass, ScoringBatch
from dare.rl import batch_totals
from dare.rl.batch_totals import whole_batch_metrics, whole_batch_normalisers, whole_batch_sums, whole_batch_values


def _pass(scored_per_row: list[int], key=None, G: int = 4) -> Pass:
    weight = torch.zeros(1, len(scored_per_row), G)
    for r, n in enumerate(scored_per_row):
        weight[0, r, :n] = 1.0
    return Pass(mask=torch.zeros(1, len(scored_per_row), 2 + G, dtype=torch.bool), weight=weight, key=key)


def _batch(lengths: list[int], G: int = 4) -> ScoringBatch:
    n = len(lengths)
    return ScoringBatch(torch.zeros(n, 2 + G, dtype=torch.long), torch.ones(n, 2 + G, dtype=torch.long),
                        torch.arange(G)[None] < torch.tensor(lengths)[:, None], 2, 9, None)


def _as_other_process(monkeypatch, other):
    """``gather`` returns (this process's object, ``other``): rank 0 of 2."""
    monkeypatch.setattr(batch_totals.distributed, "gather", lambda obj: [obj, other])


def test_one_process_keeps_its_own_counts():
    passes = [_pass([2, 1], key=0), _pass([1, 3], key=3)]
    tokens, rows, response, world, num_passes = whole_batch_normalisers(passes, _batch([3, 4]))
    assert (tokens, rows, response, world, num_passes) == ([3.0, 4.0], 2, 7.0, 1, 2)
    assert whole_batch_metrics({"approx_kl": 0.25}, 3.0, 6.0) == ({"approx_kl": 0.25}, 3.0, 6.0)


def test_replay_passes_are_matched_by_step_across_processes(monkeypatch):
    # this process replays steps 0 and 3; the other steps 0, 1 and 3 (its rows took more steps)
    passes = [_pass([2, 1], key=0), _pass([1, 3], key=3)]
    _as_other_process(monkeypatch, ([0, 1, 3], [5.0, 2.0, 1.0], 3, 9.0))
    tokens, rows, response, world, num_passes = whole_batch_normalisers(passes, _batch([3, 4]))
    assert tokens == [3.0 + 5.0, 4.0 + 1.0]  # by key, not by list position (position would give 3+5, 4+2)
    assert (rows, response, world, num_passes) == (5, 16.0, 2, 3)  # distinct steps over both processes


def test_unkeyed_passes_are_matched_by_position(monkeypatch):
    passes = [_pass([2, 1]), _pass([1, 3])]
    _as_other_process(monkeypatch, ([None, None], [5.0, 2.0], 2, 8.0))
    assert whole_batch_normalisers(passes, _batch([3, 4])) == ([8.0, 6.0], 4, 15.0, 2, 2)
    _as_other_process(monkeypatch, ([None], [5.0], 2, 8.0))  # row-dependent pass count without keys: per process
    assert whole_batch_normalisers(passes, _batch([3, 4]))[0] == [6.0, 8.0]


def test_metric_shares_are_summed_and_entropy_is_the_token_mean(monkeypatch):
    _as_other_process(monkeypatch, ({"approx_kl": 0.5, "clip_fraction": 0.125}, 2.0, 2.0))
    metrics, ent_sum, ent_count = whole_batch_metrics({"approx_kl": 0.25, "clip_fraction": 0.0}, 3.0, 6.0)
    assert metrics == {"approx_kl": 0.75, "clip_fraction": 0.125}
    assert ent_sum / ent_count == pytest.approx(5.0 / 8.0)  # not the mean of 0.5 and 1.0
    # a process that ran no row (all its groups tied) contributes nothing, and receives the other's values
    _as_other_process(monkeypatch, ({"approx_kl": 0.5}, 2.0, 2.0))
    assert whole_batch_metrics({}, 0.0, 0.0) == ({"approx_kl": 0.5}, 2.0, 2.0)


def test_row_values_are_concatenated_in_rank_order(monkeypatch):
    _as_other_process(monkeypatch, {"reward": [1.0, 1.0], "advantage": [0.0, 0.0]})
    got = whole_batch_values({"reward": torch.tensor([0.0, 1.0]), "advantage": torch.tensor([-0.5, 0.5])})
    assert got["reward"].tolist() == [0.0, 1.0, 1.0, 1.0] and got["advantage"].tolist() == [-0.5, 0.5, 0.0, 0.0]
    assert float(got["reward"].std()) == pytest.approx(0.5)  # the mean of the processes' stds would say 0.354


def test_sums_add_every_process_value(monkeypatch):
    assert whole_batch_sums(3, 2.5) == ([3.0, 2.5], 1)  # one process: its own values
    _as_other_process(monkeypatch, (4.0, 0.5))
    assert whole_batch_sums(3, 2.5) == ([7.0, 3.0], 2)
