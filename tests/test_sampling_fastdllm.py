"""Shared Fast-dLLM pieces: parallel-decoding rules and the block KV cache driver."""

from __future__ import annotations

import pytest
import torch

from dare.sampling import BlockKVCache, factor_transfer, threshold_transfer
from dare.sampling.kv_cache import replace_span

NO = -torch.inf


def test_threshold_commits_everything_above_it_and_always_the_most_confident():
    conf = torch.tensor(
        [
            [0.95, 0.20, 0.90, NO, 0.91],  # three pass (>= 0.9, equality included)
            [0.30, 0.60, NO, 0.10, 0.40],  # none passes: the most confident alone
            [NO, NO, NO, NO, NO],  # nothing may be committed
        ]
    )
    got = threshold_transfer(conf, 0.9)
    assert got.tolist() == [
        [True, False, True, False, True],
        [False, True, False, False, False],
        [False, False, False, False, False],
    ]


def test_factor_rule_takes_the_longest_prefix_with_n_plus_one_times_one_minus_c_at_most_f():
    conf = torch.tensor(
        [
            # sorted 0.99, 0.95, 0.90, 0.70: (n+1)(1-c) = 0.02, 0.15, 0.40, 1.50 -> n = 3 with f = 1
            [0.70, 0.99, NO, 0.90, 0.95],
            # sorted 0.60, 0.55: 0.80 (always one), 1.35 -> n = 1
            [0.55, NO, 0.60, NO, NO],
            # the bound is inclusive: 0.75 -> 2 * 0.25 = 0.5 <= 0.5; 3 * 0.25 = 0.75 > 0.5
            [0.75, 0.75, NO, NO, NO],
        ]
    )
    got = factor_transfer(conf, 1.0)
    assert got.tolist()[:2] == [[False, True, False, True, True], [False, False, True, False, False]]
    assert factor_transfer(conf[2:], 0.5).sum().item() == 1
    assert factor_transfer(conf[2:], 0.75).sum().item() == 2
    assert not factor_transfer(torch.full((1, 4), NO), 1.0).any()


def test_replace_span_wants_one_contiguous_span_shared_by_all_rows():
    rp = torch.zeros(2, 6, dtype=torch.bool)
    rp[:, 2:5] = True
    assert replace_span(rp) == (2, 5)
    with pytest.raises(ValueError, match="no position"):
        replace_span(torch.zeros(2, 6, dtype=torch.bool))
    gap = rp.clone()
    gap[:, 3] = False
    with pytest.raises(ValueError, match="contiguous"):
        replace_span(gap)
    ragged = rp.clone()
    ragged[1, 4] = False
    with pytest.raises(ValueError, match="every row"):
        replace_span(ragged)


def test_block_cache_refreshes_with_a_full_pass_then_runs_the_block_or_block_plus_suffix():
    calls = []

    def kv_logits(ids, am, past, start, end, use_cache):
        calls.append((past, start, end, use_cache))
        width = end - start
        return torch.arange(width, dtype=torch.float)[None, :, None].expand(ids.shape[0], width, 3), "KV"

    x = torch.zeros(2, 10, dtype=torch.long)
    for mode, stop in (("prefix", 10), ("dual", 7)):
        calls.clear()
        cache = BlockKVCache(kv_logits, mode)
        first = cache.block_logits(x, None, 4, 7, refresh=True)
        later = cache.block_logits(x, None, 4, 7, refresh=False)
        assert calls == [(None, 0, 10, True), ("KV", 4, stop, False)]
        assert first[0, :, 0].tolist() == [4.0, 5.0, 6.0]  # the block's rows of the full pass
        assert later[0, :, 0].tolist() == [0.0, 1.0, 2.0] and later.shape == (2, 3, 3)
    with pytest.raises(ValueError, match="prefix or dual"):
        BlockKVCache(kv_logits, "none")


def test_fastdllm_confidence_is_float64_and_keeps_near_ties_that_float32_merges():
    from dare.sampling import confidence_scores, fastdllm_confidence, proposal_probability

    # two positions proposing token 0 with probability 1/(1 + e^-15) ~ 1 - 3.1e-7 and 1/(1 + e^-15.01):
    # 3.0e-9 apart, below float32's spacing near 1.0 (6e-8), so float32 scores them equal
    logits = torch.tensor([[[15.0, 0.0], [15.01, 0.0]]])
    x0 = torch.zeros((1, 2), dtype=torch.long)
    c64 = fastdllm_confidence(logits, x0)
    assert c64.dtype == torch.float64
    expected = 1 / (1 + torch.exp(-logits[0, :, 0].double()))
    torch.testing.assert_close(c64[0], expected, rtol=0, atol=1e-15)
    assert c64[0, 1] - c64[0, 0] > 2e-9
    c32 = proposal_probability(logits, x0)
    assert c32.dtype == torch.float32 and c32[0, 0] == c32[0, 1]
    assert torch.topk(c64[0], 1).indices.item() == 1  # float64: the surer position first
    assert torch.equal(confidence_scores(logits, x0, "low_confidence", fastdllm=True), c64)
    assert torch.equal(confidence_scores(logits, x0, "low_confidence"), c32)
