"""Entry point of ``dare-plugin-code``: registers the ``code`` reward and the code benchmarks.

Lazy references (see :mod:`dare.hookspecs`): :mod:`dare_code.reward` and :mod:`dare_code.benchmarks`
are imported when a spec first uses one of them.
"""

from dare import hookimpl


@hookimpl
def register_rewards(register):
    register("dare_code.reward:CodeReward", name="code",
             description="Program from the completion passes the sample's tests in the sandbox (1/0; format error 0).")


@hookimpl
def register_evaluators(register):
    register("dare_code.benchmarks:HumanEval", name="humaneval",
             description="HumanEval (164 Python functions); pass@1 of the fenced program against check(), sandboxed.")
    register("dare_code.benchmarks:HumanEvalPlus", name="humanevalplus", aliases=("humaneval+",),
             description="HumanEval+ (EvalPlus, 163 problems with many more inputs); pass@1 of the fenced program, "
                         "sandboxed.")
    register("dare_code.benchmarks:MBPP", name="mbpp",
             description="MBPP (500 test problems, 3-shot [BEGIN]/[DONE] prompts); pass@1 on the assert list, "
                         "sandboxed.")
