"""LLaDA's Monte-Carlo ELBO (ML-GSAI/LLaDA@b7e6c35, ``get_log_likelihood.py``) against DARE's
``dare.diffusion.elbo`` (the ELBO of VRPO and BGPO).

The fixture (``tests/fixtures/parity/mc_elbo/``, built by ``tools/parity/build_mc_elbo.py``) holds the
official masks, mask ratios and the ELBO value it returned (the official function runs without gradient and
returns a float, so there are no official gradients to compare). DARE's stratified counts from the same
``k`` and DARE's ELBO of the same masks with the official normaliser (``none``: nats per sequence) must
match to 1e-5; DARE's default ``length`` normaliser must not. The ``mc-elbo`` estimator (the passes VRPO and BGPO
train with), fed the official masks and scored by the public RL step's :func:`dare.rl.step.score_passes`, must give
the official ELBO as its pass-mean sequence score.
"""

from __future__ import annotations

from unittest import mock

import pytest
import torch

from dare.diffusion import elbo as elbo_module
from dare.diffusion.elbo import Corruptions, elbo_estimate, elbo_terms, stratified_mask_counts
from dare.diffusion.estimators import ScoringBatch
from dare.diffusion.estimators import stratified as stratified_module
from dare.rl import step
from tools.parity.common import model_from_state, plain_logits, read_fixture, rel_diff

TOL = 1e-5


def _official():
    t, meta = read_fixture("mc_elbo")
    P = meta["prompt_length"]
    L = t["input_ids"].shape[0] - P
    counts = (t["p_mask"] * L).round().long()
    return t, meta, P, L, counts


def test_stratified_counts_match_the_official_forward_process():
    t, meta, P, L, counts = _official()
    assert torch.equal(t["masks"][:, P:].sum(dim=1), counts) and not bool(t["masks"][:, :P].any())
    b = meta["batch_size"]
    for first in range(0, meta["mc_num"], b):  # one k per official mini-batch: its first count
        k = counts[first].reshape(1, 1)
        with mock.patch.object(elbo_module, "_uniform_count", lambda lengths, shape, g: k):
            ours = stratified_mask_counts(torch.tensor([L]), b)
        assert ours[0].tolist() == counts[first:first + b].tolist()


def dare_elbo(normalizer: str) -> tuple[torch.Tensor, torch.Tensor]:
    t, meta, P, L, counts = _official()
    model = model_from_state(t, "current.")
    ids = t["input_ids"][None]
    corr = Corruptions(mask=t["masks"][None], p_mask=(counts.float() / L)[None], lengths=torch.tensor([L]))
    terms = elbo_terms(lambda noisy: model(noisy).logits, ids, corr, meta["mask_id"])
    return elbo_estimate(terms, corr.lengths, normalizer), t["expected.elbo"]


def test_dare_elbo_with_the_official_normaliser_matches():
    ours, want = dare_elbo("none")
    assert rel_diff(ours, want.float()) <= TOL


@pytest.mark.parametrize("normalizer", ["length"])
def test_dare_default_normaliser_differs(normalizer):
    ours, want = dare_elbo(normalizer)
    assert rel_diff(ours, want.float()) > 1e-3


def test_the_mc_elbo_estimator_scored_by_the_public_step_gives_the_official_elbo():
    t, meta, P, L, counts = _official()
    model = model_from_state(t, "current.")
    ids = t["input_ids"][None]
    batch = ScoringBatch(ids, torch.ones_like(ids), torch.ones(1, L, dtype=torch.bool), P, meta["mask_id"])
    official = Corruptions(mask=t["masks"][None, :, P:], p_mask=(counts.float() / L)[None], lengths=torch.tensor([L]))
    estimator = stratified_module.StratifiedELBOEstimator({"mc_num": meta["mc_num"]})
    with mock.patch.object(stratified_module, "sample_corruptions", lambda *a, **k: official):
        passes = estimator.draw(batch, None)
    scores = step.score_passes(plain_logits(model), batch, passes)
    elbo = torch.stack([s.sequence for s in scores]).mean(0)
    assert rel_diff(elbo, t["expected.elbo"].float().reshape(1)) <= TOL
