"""The uniform-noise likelihood estimator (dare.diffusion.estimators.uniform, docs/algorithms.md §3.16): its draws
in the documented order, its scores against hand-computed values, and the wrapper of a [MASK] estimator."""

from __future__ import annotations

import math

import pytest
import torch

from dare.diffusion.estimators import ScoringBatch, TrajectoryEstimator, UniformELBOEstimator, UniformNoise, score_pass
from dare.diffusion.estimators.uniform import for_forward_process, vocab_size_of
from dare.randomness import RowGenerators

V = 4


def _batch() -> ScoringBatch:
    # row 0: one prompt token after left padding, response of 2 tokens (the third position is after EOS)
    # row 1: two prompt tokens, a response of 3 tokens
    return ScoringBatch(
        input_ids=torch.tensor([[0, 3, 1, 2, 0], [2, 3, 3, 0, 1]]),
        attention_mask=torch.tensor([[0, 1, 1, 1, 0], [1, 1, 1, 1, 1]]),
        completion_mask=torch.tensor([[True, True, False], [True, True, True]]),
        prompt_length=2, mask_id=None,
        unmask_step=torch.tensor([[1, 0, -1], [0, 2, 2]]))


def _keyed():
    return RowGenerators.keyed(7, "rl-passes", 3, [0, 1])


def test_stratified_draws_follow_the_documented_order():
    """Per row: u, then for each copy the response uniforms [G] and the noise tokens [S] (no prompt draw at p = 0)."""
    batch = _batch()
    (pas,) = UniformELBOEstimator(mc_num=2, t_eps=0.0, vocab_size=V).draw(batch, _keyed())
    assert pas.mask.shape == (2, 2, 5) and pas.noise.shape == (2, 2, 5)
    for n, g in enumerate(_keyed().generators):
        u = torch.rand((), generator=g)
        t = [(0 + u) / 2, (1 + u) / 2]  # stratified over [0, 1)
        for k in range(2):
            r = torch.rand(3, generator=g)
            noise = torch.randint(0, V, (5,), generator=g)
            want = torch.cat([torch.zeros(2, dtype=torch.bool), batch.completion_mask[n] & (r < t[k])])
            assert torch.equal(pas.mask[k, n], want)
            assert torch.equal(pas.noise[k, n], noise)
    # weight 1 / K on every response token of every copy, 0 after the response
    assert torch.equal(pas.weight, torch.tensor([[[0.5, 0.5, 0.0], [0.5, 0.5, 0.5]]] * 2))


def test_fixed_t_one_replaces_the_whole_response_and_the_prompt_at_p_mask_prompt():
    batch = _batch()
    (pas,) = UniformELBOEstimator(t=1.0, p_mask_prompt=0.5, vocab_size=V).draw(batch, _keyed())
    for n, g in enumerate(_keyed().generators):
        p = torch.rand(2, generator=g)
        torch.rand(3, generator=g)  # the response uniforms (all below t = 1)
        noise = torch.randint(0, V, (5,), generator=g)
        want = torch.cat([batch.prompt_valid[n] & (p < 0.5), batch.completion_mask[n]])
        assert torch.equal(pas.mask[0, n], want) and torch.equal(pas.noise[0, n], noise)


def _logits_fn(noisy, clean, attn, **options):
    """Position i: p(clean_i) = 1/2 where the noisy token equals the clean one, else 1/4 on every token (V = 4)."""
    logits = torch.zeros(*noisy.shape, V)
    same = (noisy == clean).float()
    return logits.scatter(-1, clean[..., None], (same * math.log(3.0))[..., None])


def test_score_is_the_mean_over_copies_of_the_clean_token_log_probs():
    """Hand-computed: every response token scores log 1/2 where its copy kept (or redrew) its value, else log 1/4."""
    batch = _batch()
    (pas,) = UniformELBOEstimator(mc_num=2, vocab_size=V).draw(batch, _keyed())
    score = score_pass(_logits_fn, batch, pas)
    clean = batch.input_ids[:, 2:]
    for n in range(2):
        for g in range(3):
            if not batch.completion_mask[n, g]:
                assert score.token[n, g] == 0.0
                continue
            kept = [bool(pas.noise[k, n, 2 + g] == clean[n, g]) or not bool(pas.mask[k, n, 2 + g]) for k in range(2)]
            want = sum(math.log(0.5) if keep else math.log(0.25) for keep in kept) / 2
            assert float(score.token[n, g]) == pytest.approx(want, abs=1e-6)
    # a fixed example: row 1's three response tokens, both copies at t = 1 with noise 3, 3, 3 (two tokens redrawn)
    fixed = ScoringBatch(input_ids=torch.tensor([[2, 3, 3, 0]]), attention_mask=torch.ones(1, 4, dtype=torch.long),
                         completion_mask=torch.ones(1, 2, dtype=torch.bool), prompt_length=2, mask_id=None)
    from dare.diffusion.estimators import Pass

    p = Pass(mask=torch.tensor([[[False, False, True, True]]]), weight=torch.ones(1, 1, 2),
             noise=torch.tensor([[[0, 0, 3, 3]]]))
    # token 3 redrew itself (log 1/2), token 0 got noise 3 (log 1/4): sequence score log(1/8)
    assert float(score_pass(_logits_fn, fixed, p).sequence[0]) == pytest.approx(math.log(1 / 8), abs=1e-6)


def test_same_draws_for_a_row_whatever_the_batch():
    batch = _batch()
    est = UniformELBOEstimator(mc_num=3, p_mask_prompt=0.3, vocab_size=V)
    (both,) = est.draw(batch, _keyed())
    (alone,) = est.draw(batch.rows(slice(1, 2)), RowGenerators.keyed(7, "rl-passes", 3, [1]))
    assert torch.equal(both.rows(slice(1, 2)).mask, alone.mask) and torch.equal(both.noise[:, 1:], alone.noise)


def test_wrapper_keeps_the_masks_and_weights_and_adds_noise():
    batch = _batch()
    base = TrajectoryEstimator()
    wrapped = UniformNoise(base, V)
    plain, noisy = base.draw(batch, None), wrapped.draw(batch, _keyed())
    assert wrapped.level == "token" and len(plain) == len(noisy) == 3
    gens = _keyed().generators
    for a, b in zip(plain, noisy):
        assert torch.equal(a.mask, b.mask) and torch.equal(a.weight, b.weight) and a.key == b.key and a.noise is None
        for n in range(2):  # trajectory replay draws nothing: each pass's noise is the next [S] tokens of the row
            assert torch.equal(b.noise[0, n], torch.randint(0, V, (5,), generator=gens[n]))
    # the state before step 2 of row 1: the token of step 0 clean, the two of step 2 random
    last = noisy[2]
    corrupted = last.corrupted(0, batch.input_ids, None)
    assert torch.equal(corrupted[1, :3], batch.input_ids[1, :3])
    assert torch.equal(corrupted[1, 3:], last.noise[0, 1, 3:])


def test_forward_process_picks_the_wrapper_and_the_vocabulary():
    class Mask:
        forward_process = "mask"

    class Uniform:
        forward_process = "uniform"

    base = TrajectoryEstimator()
    assert for_forward_process(base, Mask(), {"vocab_size": 9}) is base
    wrapped = for_forward_process(base, Uniform(), {"text_config": {"vocab_size": 9}})
    assert isinstance(wrapped, UniformNoise) and wrapped.vocab_size == 9
    with pytest.raises(ValueError, match="vocab_size"):
        vocab_size_of({})
    with pytest.raises(ValueError, match="vocabulary size"):
        UniformELBOEstimator().draw(_batch(), None)
