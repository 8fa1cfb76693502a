"""Entry point of ``dare-plugin-grpo``: registers the online-RL objectives (and EBPO's response-block ELBO
estimator).

Lazy references (see :mod:`dare.plugins.hookspecs`): an objective's module (with the RL trainer stack) is
imported when a spec first uses it. Each line names a class; its name, aliases and description are
read from the class's source (the one place they are written, :func:`dare.plugins.registry.declared_in_source`).
"""

from dare import hookimpl


@hookimpl
def register_objectives(register):
    register("dare_grpo.objectives.d1:D1")
    register("dare_grpo.objectives.coupled_grpo:CoupledGRPO")
    register("dare_grpo.objectives.bgpo:BGPO")
    register("dare_grpo.objectives.espo:ESPO")
    register("dare_grpo.objectives.cj_grpo:CJGRPO")
    register("dare_grpo.objectives.tracerl.objective:TraceRL")
    # objectives with their own rollouts or (objective, family, sampler) rules
    register("dare_grpo.objectives.mdpo.objective:MDPO")
    register("dare_grpo.objectives.spg.objective:SPG")
    register("dare_grpo.objectives.ebpo:EBPO")
    register("dare_grpo.objectives.dtreerpo.objective:DTreeRPO")
    register("dare_grpo.objectives.justgrpo:JustGRPO")
    register("dare_grpo.objectives.gdpo:GDPO")
    register("dare_grpo.objectives.dipo:DiPO")
    register("dare_grpo.objectives.lightningrl.objective:LightningRL")


@hookimpl
def register_estimators(register):
    register("dare_grpo.objectives.ebpo:ResponseBlockwiseELBOEstimator")
