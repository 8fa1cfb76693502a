"""Entry point of ``dare-plugin-dpo``: registers the ``dpo`` and ``vrpo`` objectives.

Lazy references (see :mod:`dare.hookspecs`): ``dare_dpo.objective`` is imported when a spec first
uses one of them.
"""

from dare import hookimpl


@hookimpl
def register_objectives(register):
    register("dare_dpo.objective:DPO", name="dpo",
             description="ELBO-based DPO for diffusion LMs (arXiv 2305.18290 with Monte-Carlo ELBO scores).")
    register("dare_dpo.objective:VRPO", name="vrpo",
             description="VRPO (LLaDA 1.5, arXiv 2505.19223): DPO with stratified, antithetic ELBO estimates.")
