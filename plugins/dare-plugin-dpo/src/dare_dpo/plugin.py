"""Entry point of ``dare-plugin-dpo``: registers the preference objectives (DPO, VRPO).

Lazy references (see :mod:`dare.plugins.hookspecs`): ``dare_dpo.objective`` is imported when a spec first
uses one of them.
"""

from dare import hookimpl


@hookimpl
def register_objectives(register):
    register("dare_dpo.objective:DPO")
    register("dare_dpo.objective:VRPO")
