"""GDPO against its release's equations (NVIDIA-NeMo/RL pull request 3550 at e03f62c, ``research/gdpo``).

The release is an open pull request: its files can be read at the pinned commit, but it is not in any fetchable
branch of NVIDIA-NeMo/RL, so no builder runs it (docs/algorithms.md §10.16). These tests check DARE against
hand-computed values of the release's and the paper's equations (arXiv 2510.08554 §3.2, Eq. 7-8):

* the quadrature rules of ``research/gdpo/gdpo/elbo.py::get_quadrature`` (Gauss-Legendre nodes ``0.5 +- sqrt(3/5)/2``
  and ``0.5`` with weights ``5/18, 8/18, 5/18`` for gauss-3; Simpson ``(0.1, 0.5, 1.0)``, ``(1/6, 4/6, 1/6)``);
* the exact mask counts ``k = min(max(floor(t L), 1), L)`` of ``SdmcElboEstimator._draw_mask``;
* the SDMC ELBO ``sum_n (w_n / t_n) sum_{masked} lp`` with every log-prob ``-log 16`` (all-zero logits over 16
  tokens): for ``L = 10``, counts (1, 5, 8) give ``-log 16 (5/18 / 0.11270 + 8/18 / 0.5 * 5 + 5/18 / 0.88730 * 8)
  = -26.10016``; ``L = 3`` (1, 1, 2): ``-11.03415``; ``L = 1`` (1, 1, 1): ``-10.16616``;
* the GSPO-shaped loss of ``configs/gdpo_llada_8b.yaml`` (sequence ratio ``exp((l - l_old) / |y|)``, clip 0.5,
  mean over sequences, Dr.GRPO advantages): rewards (1, 0 | 0, 1) give advantages (0.5, -0.5, -0.5, 0.5);
  ``l = (-10, -20, -8, -6)``, ``l_old = (-12, -35, -4.8, -5.5)``, ``|y| = (4, 10, 4, 5)``: ``rho = (e^0.5, e^1.5,
  e^-0.8, e^-0.1) = (1.64872, 4.48169, 0.44933, 0.90484)``; row 0 clipped at 1.5 (``-0.5 * 1.5 = -0.75``), row 1
  unclipped (``0.5 * 4.48169 = 2.24084``), row 2 clipped at 0.5 (``0.5 * 0.5 = 0.25``), row 3 unclipped
  (``-0.5 * 0.90484 = -0.45242``); loss ``(-0.75 + 2.24084 + 0.25 - 0.45242) / 4 = 0.32211``; gradient
  ``(0, 0.5 * 4.48169 / 10 / 4, 0, -0.5 * 0.90484 / 5 / 4) = (0, 0.05602, 0, -0.02262)``.

DARE's side is the public RL step (:mod:`dare.rl.step`): the estimator's passes (``draw_passes``, ``score_passes``)
and the scalar-proxy replay of the sequence-level loss (``update``, ``score_reduction = "pass_mean"``) with its
advantages (``rollout_advantages``), the sequence scores ``l`` given as a policy's token log-probs
(:func:`tools.parity.common.given_logprobs`). Changing any one official setting breaks one of these matches.
"""

from __future__ import annotations

import math
from dataclasses import replace

import pytest
import torch

from dare.diffusion.estimators import Pass, ScoringBatch, SDMCEstimator
from dare.diffusion.estimators.sdmc import quadrature
from dare.rl import step
from dare.rl.rollout import Rollout
from dare_grpo.objectives.gdpo import GDPO, GDPOParams
from tools.parity.common import given_logprobs, logprob_batch

GAUSS3 = ((0.1127016653792583, 0.5, 0.8872983346207417), (5 / 18, 8 / 18, 5 / 18))
ELBO = (-26.10016178522401, -11.034145777124124, -10.166158648212532)  # L = 10, 3, 1 (module docstring)
LOSS, GRAD = 0.32210645653776315, (0.0, 0.05602111337922581, 0.0, -0.022620935450898987)


def official(**overrides) -> GDPOParams:
    return GDPOParams.model_validate({"preset": "official", **overrides}, context={"family": "llada"})


def batch() -> ScoringBatch:
    P, G = 2, 10
    lengths = torch.tensor([10, 3, 1])
    ids = torch.randint(0, 15, (3, P + G), generator=torch.Generator().manual_seed(0))
    resp = torch.arange(G)[None, :] < lengths[:, None]
    return ScoringBatch(ids, torch.ones_like(ids), resp, P, 15)


def elbo(params: GDPOParams) -> tuple[torch.Tensor, list]:
    """The pass-mean SDMC ELBO of :func:`batch` under all-zero logits: the objective's estimator drawn by
    :func:`dare.rl.step.draw_passes` and scored by :func:`dare.rl.step.score_passes`."""
    b = batch()
    estimator = GDPO(params).make_estimator(None, {}, None)
    passes = step.draw_passes(estimator, b, torch.Generator().manual_seed(1), params, ())
    fn = lambda noisy, clean, a: torch.zeros(*noisy.shape, 16)  # noqa: E731  (log-prob -log 16 everywhere)
    scores = torch.stack([s.sequence for s in step.score_passes(fn, b, passes)])
    return scores.mean(0), passes


def loss(params: GDPOParams):
    """The loss and its gradient with respect to the sequence scores ``l``, by the public RL step's scalar-proxy
    replay (:func:`dare.rl.step.update`, ``score_reduction = "pass_mean"``) over one pass that scores the first
    completion token of each row, under a policy whose log-prob of that token is ``l``
    (:func:`tools.parity.common.given_logprobs`); two prompts of two completions."""
    params = params.model_copy(update={"group_size": 2})
    objective = GDPO(params)
    adv = step.rollout_advantages(torch.tensor([1.0, 0.0, 0.0, 1.0]), params)
    cur = torch.tensor([-10.0, -20.0, -8.0, -6.0], requires_grad=True)
    ref = torch.tensor([-11.0, -21.0, -7.0, -6.5])
    old = torch.tensor([-12.0, -35.0, -4.8, -5.5])
    lengths = torch.tensor([4, 10, 4, 5])
    N, G = 4, 10
    b = replace(logprob_batch(N, G), completion_mask=torch.arange(G)[None, :] < lengths[:, None])  # |y| = lengths
    first = torch.zeros(N, G, dtype=torch.bool)
    first[:, 0] = True                                      # the one masked and scored token of each row
    pas = Pass(mask=torch.cat([torch.zeros(N, 1, dtype=torch.bool), first], 1)[None], weight=first.float()[None])
    logp = torch.cat([cur[:, None, None], torch.full((N, 1, G - 1), -1.0)], -1)
    at_first = lambda x: torch.where(first, x[:, None], torch.zeros(N, G))  # noqa: E731
    rollout = Rollout(b, [], torch.zeros(N), {}, adv, passes=[[pas]], old=[[at_first(old)]], ref=[[at_first(ref)]])
    assert objective.score_reduction == "pass_mean"
    policy = given_logprobs(logp, first[:, None], 1, b.mask_id)
    value, _ = step.update(step.StepSettings(objective), policy, rollout, 0)
    return adv, value, cur.grad


def test_quadrature_rules_are_the_releases():
    for got, want in zip(quadrature("gauss-3"), GAUSS3):
        assert got == pytest.approx(want, rel=1e-12)
    times, weights = quadrature("gauss-2")
    assert times == pytest.approx((0.5 - 0.5 / math.sqrt(3), 0.5 + 0.5 / math.sqrt(3)), rel=1e-12)
    assert weights == pytest.approx((0.5, 0.5), rel=1e-12)
    assert quadrature("simpson") == ((0.1, 0.5, 1.0), (1 / 6, 4 / 6, 1 / 6))
    for rule in ("gauss-1", "gauss-4", "gauss-5"):
        assert sum(quadrature(rule)[1]) == pytest.approx(1.0, rel=1e-12)
    with pytest.raises(ValueError, match="gauss-1 ... gauss-5 or simpson"):
        quadrature("gauss-7")


def test_official_sdmc_elbo_masks_exact_counts_and_weights_them():
    value, passes = elbo(official())
    assert len(passes) == 3  # gauss-3 x one mask per node: 3 forwards
    counts = torch.stack([p.mask[0, :, 2:].sum(-1) for p in passes], 1)
    assert counts.tolist() == [[1, 5, 8], [1, 1, 2], [1, 1, 1]]
    assert all(not p.mask[0, :, :2].any() for p in passes)  # the prompt is never masked
    assert value.tolist() == pytest.approx(ELBO, rel=1e-5)


def test_official_loss_and_gradient_are_the_hand_computed_ones():
    adv, value, grad = loss(official())
    assert adv.tolist() == [0.5, -0.5, -0.5, 0.5]
    assert value == pytest.approx(LOSS, rel=1e-6)
    assert grad.tolist() == pytest.approx(GRAD, rel=1e-6, abs=1e-9)


def test_the_official_settings_are_the_releases():
    p = official()
    assert (p.group_size, p.num_iterations, p.advantage, p.clip_eps_low, p.clip_eps_high) == (6, 12, "drgrpo", 0.5, 0.5)
    assert (p.dual_clip_c, p.beta, p.quadrature, p.mc_samples) == (None, 0.0, "gauss-3", 1)


@pytest.mark.parametrize("override", [
    {"quadrature": "gauss-2"}, {"quadrature": "simpson"}, {"mc_samples": 2}, {"clip_eps_low": 0.2},
    {"clip_eps_high": 0.2}, {"advantage": "grpo"}, {"dual_clip_c": 3.0}, {"beta": 0.1},
])
def test_changing_one_official_setting_breaks_the_match(override):
    p = official(**override)
    value, passes = elbo(p)
    adv, lv, grad = loss(p)
    same_elbo = len(passes) == 3 and value.tolist() == pytest.approx(ELBO, rel=1e-5)
    same_loss = lv == pytest.approx(LOSS, rel=1e-6) and grad.tolist() == pytest.approx(GRAD, rel=1e-6, abs=1e-9)
    assert not (same_elbo and same_loss)


def test_sdmc_masks_of_a_row_do_not_depend_on_the_batch():
    """With per-row generators (what the RL trainer passes) a row's masks are the same in any batch, so two processes
    draw the masks of one."""
    from dare.randomness import RowGenerators

    b = batch()
    est = SDMCEstimator(quadrature="gauss-3", mc_samples=2)
    whole = est.draw(b, RowGenerators.keyed(0, "rl-passes", 3, [0, 1, 2]))
    part = est.draw(b.rows(torch.tensor([1, 2])), RowGenerators.keyed(0, "rl-passes", 3, [1, 2]))
    assert len(whole) == len(part) == 6
    for w, p in zip(whole, part):
        assert torch.equal(w.mask[:, 1:], p.mask) and torch.equal(w.weight[:, 1:], p.weight)
