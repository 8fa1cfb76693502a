"""DARE's built-in plugin (part of ``dare-dllm``): the rewards of :mod:`dare.builtins.rewards`, the
benchmarks of :mod:`dare.builtins.benchmarks` and the likelihood estimators of
:mod:`dare.diffusion.estimators` (as components, so objectives that allow several take one by name and
``dare plugins`` lists them).

The host loads this module by path (``dare.plugins.manager.DEFAULT_PLUGINS``), whatever ``DARE_LOAD_PLUGINS``
says. It registers lazy references (see :mod:`dare.plugins.hookspecs`): the modules are imported when a spec
or command first uses one of their components, not when plugins are listed.
"""

from __future__ import annotations

from dare.plugins.hookspecs import hookimpl

__all__ = ["register_estimators", "register_evaluators", "register_rewards"]


@hookimpl
def register_rewards(register):
    register("dare.builtins.rewards:MathReward")
    register("dare.builtins.rewards:GSM8KReward")
    register("dare.builtins.rewards:CountdownReward")
    register("dare.builtins.rewards:SudokuReward")
    register("dare.builtins.rewards:FormatReward")
    register("dare.builtins.multiple_choice:ChoiceReward")


@hookimpl
def register_evaluators(register):
    register("dare.builtins.benchmarks:GSM8K")
    register("dare.builtins.benchmarks:MATH500")
    register("dare.builtins.benchmarks:AIME")
    register("dare.builtins.benchmarks:Countdown")
    register("dare.builtins.benchmarks:Sudoku")
    register("dare.builtins.multiple_choice:MultipleChoice")
    register("dare.builtins.multiple_choice:SudokuMC")


@hookimpl
def register_estimators(register):
    register("dare.diffusion.estimators.onestep:OneStepEstimator")
    register("dare.diffusion.estimators.coupled:CoupledEstimator")
    register("dare.diffusion.estimators.elbo_complement:ComplementaryELBOEstimator")
    register("dare.diffusion.estimators.blockwise:BlockwiseELBOEstimator")
    register("dare.diffusion.estimators.trajectory:TrajectoryEstimator")
    register("dare.diffusion.estimators.autoregressive:AutoregressiveEstimator")
    register("dare.diffusion.estimators.stratified:StratifiedELBOEstimator")
    register("dare.diffusion.estimators.random_block:RandomBlockEstimator")
    register("dare.diffusion.estimators.sdmc:SDMCEstimator")
    register("dare.diffusion.estimators.uniform:UniformELBOEstimator")
