"""Entry point of ``dare-plugin-grpo``: registers the online-RL objectives."""

from dare import hookimpl

from dare_grpo.objectives import EXTRA_OBJECTIVES, OBJECTIVES


@hookimpl
def register_objectives(register):
    for cls in OBJECTIVES + EXTRA_OBJECTIVES:
        register(cls)
