"""Entry point of ``dare-plugin-dpo``: registers the ``dpo`` and ``vrpo`` objectives."""

from dare import hookimpl

from dare_dpo.objective import DPO, VRPO


@hookimpl
def register_objectives(register):
    register(DPO)
    register(VRPO)
