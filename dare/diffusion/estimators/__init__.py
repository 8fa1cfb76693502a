"""Likelihood estimators for RL on diffusion LMs (docs/algorithms.md §3, §9.3-9.4).

Each estimator draws :class:`~dare.diffusion.estimators.base.Pass` es (corrupted copies with
per-token weights) that :func:`~dare.diffusion.estimators.base.score_pass` turns into scores from
the family's aligned logits. Family-agnostic by construction.

=========================  ======================================  ==========  ====================
module                     estimator                               level       used by
=========================  ======================================  ==========  ====================
``onestep``                one-step mean-field (masked prompt)     token       d1
``coupled``                complementary pair (+ full mask)        token       coupled-grpo
``elbo_complement``        k/(L+1) mask + complement, sequence     sequence    espo
``blockwise``              per-block stratified composite ELBO     sequence    ebpo
``trajectory``             replay of the decoding trajectory       token       cj-grpo, tracerl
``autoregressive``         exact left-to-right (block length 1)    token       justgrpo
``stratified``             stratified ELBO-MC, counts k/L          sequence    bgpo
``random_block``           random block j, later blocks masked     token       spg
``sdmc``                   quadrature over t, exact-count masks    sequence    gdpo
``uniform``                uniform-noise denoising score           token       d1, tracerl (uniform noise)
=========================  ======================================  ==========  ====================

The stratified corruptions themselves live in :mod:`dare.diffusion.elbo` (shared with VRPO);
``stratified`` only presents them as passes.
"""

from dare.diffusion.estimators.autoregressive import AutoregressiveEstimator
from dare.diffusion.estimators.base import Estimator, LogitsFn, Pass, PassScore, ScoringBatch, score_pass
from dare.diffusion.estimators.blockwise import BlockwiseELBOEstimator
from dare.diffusion.estimators.coupled import CoupledEstimator
from dare.diffusion.estimators.elbo_complement import ComplementaryELBOEstimator
from dare.diffusion.estimators.onestep import OneStepEstimator
from dare.diffusion.estimators.random_block import RandomBlockEstimator
from dare.diffusion.estimators.sdmc import SDMCEstimator
from dare.diffusion.estimators.stratified import StratifiedELBOEstimator
from dare.diffusion.estimators.trajectory import TrajectoryEstimator
from dare.diffusion.estimators.uniform import UniformELBOEstimator, UniformNoise

__all__ = [
    "Estimator",
    "LogitsFn",
    "Pass",
    "PassScore",
    "ScoringBatch",
    "score_pass",
    "OneStepEstimator",
    "CoupledEstimator",
    "ComplementaryELBOEstimator",
    "BlockwiseELBOEstimator",
    "TrajectoryEstimator",
    "AutoregressiveEstimator",
    "StratifiedELBOEstimator",
    "RandomBlockEstimator",
    "SDMCEstimator",
    "UniformELBOEstimator",
    "UniformNoise",
]
