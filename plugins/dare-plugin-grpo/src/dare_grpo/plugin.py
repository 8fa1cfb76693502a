"""Entry point of ``dare-plugin-grpo``: registers the online-RL objectives (and EBPO's response-block ELBO
estimator).

Lazy references (see :mod:`dare.hookspecs`): an objective's module (with the RL trainer stack) is
imported when a spec first uses it. The objectives are ``dare_grpo.objectives.OBJECTIVES +
EXTRA_OBJECTIVES`` (tests/test_plugins.py checks every first-party registration against its class).
"""

from dare import hookimpl


@hookimpl
def register_objectives(register):
    register("dare_grpo.objectives.d1:D1", name="d1", aliases=("diffu-grpo",),
             description="d1 / diffu-GRPO (arXiv 2504.12216): one-step mean-field likelihood, token-level clipped GRPO.")
    register("dare_grpo.objectives.coupled_grpo:CoupledGRPO", name="coupled-grpo",
             description="Coupled-GRPO (DiffuCoder, arXiv 2506.20639): complementary masks (+ full mask), token-level "
                         "GRPO.")
    register("dare_grpo.objectives.bgpo:BGPO", name="bgpo",
             description="BGPO (arXiv 2510.11683): stratified ELBO terms, piecewise (linear for A > 0) ratio, one term "
                         "in memory.")
    register("dare_grpo.objectives.espo:ESPO", name="espo",
             description="ESPO (arXiv 2512.03759): sequence-level ratio of complementary-mask ELBOs, RLOO, mu "
                         "iterations.")
    register("dare_grpo.objectives.cj_grpo:CJGRPO", name="cj-grpo",
             description="CJ-GRPO (arXiv 2509.23924): GRPO on the replayed decoding trajectory, averaged over steps.")
    register("dare_grpo.objectives.tracerl.objective:TraceRL", name="tracerl",
             description="TraceRL (arXiv 2509.06949): trajectory-aware PPO with shrinkage, optionally with its value model.")
    # objectives with their own rollouts or (objective, family, sampler) rules
    register("dare_grpo.objectives.mdpo.objective:MDPO", name="mdpo",
             description="MDPO (arXiv 2508.13148): step-wise rewards on intermediate predictions, top-K steps, weighted "
                         "PPO.")
    register("dare_grpo.objectives.spg.objective:SPG", name="spg",
             description="SPG (arXiv 2510.09541): ELBO/EUBO sandwich by advantage sign, block-wise masking, REINFORCE.")
    register("dare_grpo.objectives.ebpo:EBPO", name="ebpo",
             description="EBPO (LLaDA2.1, arXiv 2602.08676): all-block composite ELBO, sequence PPO with log-domain "
                         "clipping.")
    register("dare_grpo.objectives.dtreerpo.objective:DTreeRPO", name="d-treerpo", aliases=("dtreerpo",),
             description="d-TreeRPO (arXiv 2512.09675): tree rollout, local transition PPO, k3 KL, sibling "
                         "self-distillation.")
    register("dare_grpo.objectives.justgrpo:JustGRPO", name="justgrpo",
             description="JustGRPO (arXiv 2601.15165): AR decoding (block length 1), exact AR likelihood, clipped GRPO.")
    register("dare_grpo.objectives.gdpo:GDPO", name="gdpo",
             description="GDPO (arXiv 2510.08554): SDMC sequence ELBO, length-normalised sequence ratio, Dr.GRPO "
                         "advantages.")
    register("dare_grpo.objectives.dipo:DiPO", name="dipo",
             description="DiPO (DiRL, arXiv 2512.22234): block-round trajectory replay, clipped PPO, k3 KL, per-row "
                         "token means.")
    register("dare_grpo.objectives.lightningrl.objective:LightningRL", name="lightningrl",
             description="LightningRL (arXiv 2603.13319): accuracy + tokens-per-forward reward, dynamic sampling, PPO "
                         "+ NLL on correct completions, block-diffusion one-step scores.")


@hookimpl
def register_estimators(register):
    register("dare_grpo.objectives.ebpo:ResponseBlockwiseELBOEstimator", name="response-blockwise-elbo",
             description="The composite ELBO with blocks counted from the response start (full-attention families).")
