"""Entry point of ``dare-plugin-code``: registers the code-execution reward and the code benchmarks.

Lazy references (see :mod:`dare.plugins.hookspecs`): :mod:`dare_code.reward` and :mod:`dare_code.benchmarks`
are imported when a spec first uses one of them.
"""

from dare import hookimpl


@hookimpl
def register_rewards(register):
    register("dare_code.reward:CodeReward")


@hookimpl
def register_evaluators(register):
    register("dare_code.benchmarks:HumanEval")
    register("dare_code.benchmarks:HumanEvalPlus")
    register("dare_code.benchmarks:MBPP")
