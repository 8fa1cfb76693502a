"""DARE's built-in likelihood estimators (:mod:`dare.diffusion.estimators`), registered as components so
objectives that allow several can take one by name and ``dare plugins`` lists them."""

from __future__ import annotations

from dare.diffusion.estimators import (
    AutoregressiveEstimator,
    BlockwiseELBOEstimator,
    ComplementaryELBOEstimator,
    CoupledEstimator,
    OneStepEstimator,
    RandomBlockEstimator,
    StratifiedELBOEstimator,
    TrajectoryEstimator,
)
from dare.hookspecs import hookimpl

ESTIMATORS = (
    OneStepEstimator,
    CoupledEstimator,
    ComplementaryELBOEstimator,
    BlockwiseELBOEstimator,
    TrajectoryEstimator,
    AutoregressiveEstimator,
    StratifiedELBOEstimator,
    RandomBlockEstimator,
)


@hookimpl
def register_estimators(register):
    for cls in ESTIMATORS:
        register(cls)
