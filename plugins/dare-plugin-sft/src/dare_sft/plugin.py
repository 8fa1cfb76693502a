"""Entry point of ``dare-plugin-sft``."""

from dare import hookimpl

from dare_sft.objective import SFT


@hookimpl
def register_objectives(register):
    register(SFT)
