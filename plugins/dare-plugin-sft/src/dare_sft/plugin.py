"""Entry point of ``dare-plugin-sft``: registers the masked-diffusion SFT objective.

A lazy reference (see :mod:`dare.plugins.hookspecs`): ``dare_sft.objective`` is imported when a spec first
uses it.
"""

from dare import hookimpl


@hookimpl
def register_objectives(register):
    register("dare_sft.objective:SFT")
