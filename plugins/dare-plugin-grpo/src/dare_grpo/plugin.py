"""Entry point of ``dare-plugin-grpo``: registers the online-RL objectives (and EBPO's response-block ELBO estimator)."""

from dare import hookimpl

from dare_grpo.objectives import EXTRA_OBJECTIVES, OBJECTIVES
from dare_grpo.objectives.ebpo import ResponseBlockwiseELBOEstimator


@hookimpl
def register_objectives(register):
    for cls in OBJECTIVES + EXTRA_OBJECTIVES:
        register(cls)


@hookimpl
def register_estimators(register):
    register(ResponseBlockwiseELBOEstimator)
