"""The stratified ELBO Monte-Carlo estimator (dare.diffusion.elbo): counts, masks, terms, unbiasedness."""

from __future__ import annotations

import itertools
import math

import pytest
import torch

from dare.diffusion.elbo import (
    Corruptions,
    elbo_estimate,
    elbo_term,
    elbo_terms,
    masks_with_counts,
    sample_corruptions,
    stratified_mask_counts,
    uniform_mask_counts,
)


def test_stratified_counts_follow_the_formula():
    lengths = torch.tensor([8, 5, 1, 0])
    got = stratified_mask_counts(lengths, 4, torch.Generator().manual_seed(0))
    u = torch.rand(4, 1, generator=torch.Generator().manual_seed(0))  # the same single draw
    k = (u * lengths[:, None]).floor().long() + 1
    # offsets round-half-up(j L / 4): L=8 -> 0,2,4,6; L=5 -> 0,1,3,4 (1.25, 2.5, 3.75); L=1 -> 0,0,1,1
    offsets = torch.tensor([[0, 2, 4, 6], [0, 1, 3, 4], [0, 0, 1, 1], [0, 0, 0, 0]])
    want = ((k - 1 + offsets) % lengths.clamp(min=1)[:, None]) + 1
    want[3] = 0  # no eligible token: no mask
    assert got.tolist() == want.tolist()


def test_stratified_counts_cover_every_timestep_once_when_n_equals_L():
    counts = stratified_mask_counts(torch.tensor([6] * 50), 6, torch.Generator().manual_seed(1))
    assert all(sorted(row) == [1, 2, 3, 4, 5, 6] for row in counts.tolist())


def test_count_samplers_are_uniform_on_1_to_L():
    L = torch.tensor([5] * 20000)
    for draw in (stratified_mask_counts, uniform_mask_counts):
        c = draw(L, 2, torch.Generator().manual_seed(2))
        assert c.min() == 1 and c.max() == 5
        freq = torch.bincount(c[:, 1], minlength=6)[1:].float() / c.shape[0]
        assert torch.allclose(freq, torch.full((5,), 0.2), atol=0.015)


def test_masks_have_exact_counts_on_eligible_positions_only():
    eligible = torch.tensor([[False, True, True, True, False, True], [True, True, False, False, False, False]])
    counts = torch.tensor([[1, 4, 0], [2, 1, 0]])
    m = masks_with_counts(counts, eligible, torch.Generator().manual_seed(0))
    assert m.shape == (2, 3, 6)
    assert m.sum(-1).tolist() == counts.tolist()
    assert not (m & ~eligible[:, None]).any()
    with pytest.raises(ValueError, match="eligible"):
        masks_with_counts(torch.tensor([[5, 1, 0], [1, 1, 0]]), eligible)


def test_masked_positions_are_uniformly_chosen():
    eligible = torch.ones(20000, 4, dtype=torch.bool)
    m = masks_with_counts(torch.ones(20000, 1, dtype=torch.long), eligible, torch.Generator().manual_seed(3))
    assert torch.allclose(m[:, 0].float().mean(0), torch.full((4,), 0.25), atol=0.015)


def test_corruptions_p_mask_and_noisy_sequence():
    eligible = torch.tensor([[False, True, True, True]])
    c = sample_corruptions(eligible, 3, "stratified", torch.Generator().manual_seed(0))
    assert c.lengths.tolist() == [3]
    assert torch.allclose(c.p_mask, c.mask.sum(-1).float() / 3)
    ids = torch.tensor([[5, 6, 7, 8]])
    noisy = c.noisy(ids, mask_id=0, j=1)
    assert torch.equal(noisy, torch.where(c.mask[:, 1], 0, ids))
    b = sample_corruptions(eligible, 2, "bernoulli", torch.Generator().manual_seed(0), eps=0.5)
    assert (b.p_mask >= 0.5).all() and not (b.mask[:, :, 0]).any()
    with pytest.raises(ValueError, match="scheme"):
        sample_corruptions(eligible, 2, "nope")


def _context_model(V: int = 4):
    """Aligned logits whose confidence in the clean token depends on how many tokens are masked."""

    def denoise_for(clean: torch.Tensor, mask_id: int):
        def denoise(noisy: torch.Tensor) -> torch.Tensor:
            n_masked = (noisy == mask_id).sum(1, keepdim=True).float()  # [B, 1]
            logits = torch.zeros(*noisy.shape, V)
            return logits.scatter(-1, clean[..., None], (3.0 - n_masked)[..., None].expand(*noisy.shape, 1))

        return denoise

    return denoise_for


def test_elbo_term_by_hand():
    clean = torch.tensor([[0, 1, 2, 1]])
    corr = Corruptions(mask=torch.tensor([[[False, True, False, True]]]), p_mask=torch.tensor([[2 / 3]]),
                       lengths=torch.tensor([3]))
    term = elbo_term(_context_model()(clean, 3), clean, corr, mask_id=3, j=0)
    lp = math.log(math.e / (math.e + 3))  # two masks: logit 1 on the clean token, 0 on the 3 others
    assert math.isclose(term.item(), 2 * lp / (2 / 3), rel_tol=1e-6)
    est = elbo_estimate(term[:, None], corr.lengths, "length")
    assert math.isclose(est.item(), 2 * lp / (2 / 3) / 3, rel_tol=1e-6)
    assert math.isclose(elbo_estimate(term[:, None], corr.lengths, "none").item(), term.item())


@pytest.mark.parametrize("scheme", ["stratified", "uniform", "bernoulli"])
def test_estimators_are_unbiased_for_the_exact_elbo(scheme):
    """E[term] equals B(y) = sum_k (1/L) (L/k) E_{|m|=k} sum_masked log p, enumerated exactly (L = 3)."""
    L, mask_id = 3, 3
    clean = torch.tensor([[0, 1, 2]])
    denoise = _context_model()(clean.expand(1, -1), mask_id)
    exact = 0.0
    for k in range(1, L + 1):
        subsets = list(itertools.combinations(range(L), k))
        for s in subsets:
            noisy = clean.clone()
            noisy[0, list(s)] = mask_id
            lp = torch.log_softmax(denoise(noisy), -1)[0, list(s), clean[0, list(s)]].sum().item()
            exact += (1 / L) * (L / k) * lp / len(subsets)
    n = 20000
    ids = clean.expand(n, -1)
    corr = sample_corruptions(torch.ones(n, L, dtype=torch.bool), 2, scheme, torch.Generator().manual_seed(0), eps=0.0)
    terms = elbo_terms(_context_model()(ids, mask_id), ids, corr, mask_id)
    tol = 0.15 if scheme == "bernoulli" else 0.03  # 1/t makes the Bernoulli estimator heavy-tailed
    assert abs(terms.mean().item() - exact) < tol * abs(exact)


def test_shared_corruptions_cancel_between_identical_models():
    clean = torch.randint(0, 3, (6, 5))
    corr = sample_corruptions(torch.ones(6, 5, dtype=torch.bool), 4, "stratified", torch.Generator().manual_seed(0))
    f = _context_model()(clean, 3)
    assert torch.equal(elbo_terms(f, clean, corr, 3), elbo_terms(f, clean, corr, 3))


def test_rows_without_eligible_tokens_score_zero():
    eligible = torch.tensor([[True, True], [False, False]])
    for scheme in ("stratified", "uniform", "bernoulli"):
        c = sample_corruptions(eligible, 2, scheme, torch.Generator().manual_seed(0))
        clean = torch.tensor([[0, 1], [1, 0]])
        terms = elbo_terms(_context_model()(clean, 3), clean, c, 3)
        assert terms[1].tolist() == [0.0, 0.0] and torch.isfinite(terms).all()
