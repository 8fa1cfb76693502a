"""DARE's built-in plugin (part of ``dare-dllm``): the rewards of :mod:`dare.builtins.rewards`, the
benchmarks of :mod:`dare.builtins.benchmarks` and the likelihood estimators of
:mod:`dare.diffusion.estimators` (as components, so objectives that allow several take one by name and
``dare plugins`` lists them).

The host loads this module by path (``dare.plugins.DEFAULT_PLUGINS``), whatever ``DARE_LOAD_PLUGINS``
says. It registers lazy references (see :mod:`dare.hookspecs`): the modules are imported when a spec
or command first uses one of their components, not when plugins are listed.
"""

from __future__ import annotations

from dare.hookspecs import hookimpl

__all__ = ["register_estimators", "register_evaluators", "register_rewards"]


@hookimpl
def register_rewards(register):
    register("dare.builtins.rewards:MathReward", name="math",
             description="Last \\boxed{} answer equivalent to the ground truth under math-verify (1/0).")
    register("dare.builtins.rewards:GSM8KReward", name="gsm8k",
             description="GSM8K: boxed, <answer> or '#### n' answer equal to the ground truth (1/0).")
    register("dare.builtins.rewards:CountdownReward", name="countdown",
             description="Countdown (d1 rule): 1 for a correct expression using the given numbers, 0.1 format credit, "
                         "else 0.")
    register("dare.builtins.rewards:SudokuReward", name="sudoku",
             description="4x4 Sudoku: fraction of originally empty cells filled correctly (d1/DARE rule), plus")
    register("dare.builtins.rewards:FormatReward", name="format",
             description="1 if the completion matches the <reasoning>…</reasoning><answer>…</answer> format.")
    register("dare.builtins.multiple_choice:ChoiceReward", name="choice",
             description="1 when the completion is the gold choice's text (gold: reward_model.ground_truth / ground_truth / "
                         "answer, index into 'choices' or text), else 0.")


@hookimpl
def register_evaluators(register):
    register("dare.builtins.benchmarks:GSM8K", name="gsm8k",
             description="GSM8K test set (1319 grade-school word problems); exact numeric answer.")
    register("dare.builtins.benchmarks:MATH500", name="math500",
             description="MATH500 (500 competition problems); boxed answer, math-verify equivalence.")
    register("dare.builtins.benchmarks:AIME", name="aime", aliases=("aime2024",),
             description="AIME 2024 (30 problems); boxed integer answer.")
    register("dare.builtins.benchmarks:Countdown", name="countdown",
             description="Countdown (256 test targets); correct expression inside <answer> tags (format credit 0.1 is "
                         "not a solve).")
    register("dare.builtins.benchmarks:Sudoku", name="sudoku",
             description="4x4 Sudoku (500 test puzzles); accuracy = exact solves, mean reward = empty-cell accuracy.")
    register("dare.builtins.multiple_choice:MultipleChoice", name="multiple-choice", aliases=("mc",),
             description="Any multiple-choice data file: rows with 'choices' and the gold answer (index or text), "
                         "scored by MC-ELBO.")
    register("dare.builtins.multiple_choice:SudokuMC", name="sudoku-mc",
             description="4x4 Sudoku (500 test puzzles) as multiple choice: the solution vs three corrupted grids, "
                         "scored by MC-ELBO.")


@hookimpl
def register_estimators(register):
    register("dare.diffusion.estimators.onestep:OneStepEstimator", name="one-step",
             description="d1's one-step estimator: fully masked completion, prompt masked with ``p_mask_prompt``.")
    register("dare.diffusion.estimators.coupled:CoupledEstimator", name="coupled",
             description="DiffuCoder's coupled (complementary) mask pair, with the released trainer's full-mask term (optional).")
    register("dare.diffusion.estimators.elbo_complement:ComplementaryELBOEstimator", name="complementary-elbo",
             description="ESPO's sequence ELBO: stratified ``k/(L+1)`` masks plus the complementary copy, ``mc_num`` "
                         "passes.")
    register("dare.diffusion.estimators.blockwise:BlockwiseELBOEstimator", name="blockwise-elbo",
             description="EBPO's all-block composite ELBO: every block masked in every MC row, stratified noise "
                         "levels.")
    register("dare.diffusion.estimators.trajectory:TrajectoryEstimator", name="trajectory",
             description="Exact (``shrink = 1``) or shrunk replay of the recorded decoding trajectory.")
    register("dare.diffusion.estimators.autoregressive:AutoregressiveEstimator", name="autoregressive",
             description="Left-to-right exact likelihood (block length 1), ``chunk_size`` positions per pass.")
    register("dare.diffusion.estimators.stratified:StratifiedELBOEstimator", name="mc-elbo",
             description="``mc_num`` ELBO terms with stratified (or uniform/Bernoulli) mask counts, one pass each.")
    register("dare.diffusion.estimators.random_block:RandomBlockEstimator", name="random-block",
             description="SPG's block-wise corruption: random block ``j`` partly masked, later blocks masked, earlier "
                         "at 15%.")
    register("dare.diffusion.estimators.sdmc:SDMCEstimator", name="sdmc-elbo",
             description="GDPO's semi-deterministic Monte-Carlo ELBO: quadrature over the mask ratio, exact-count "
                         "random masks at each node.")
    register("dare.diffusion.estimators.uniform:UniformELBOEstimator", name="uniform-elbo",
             description="Uniform-noise denoising score (NeMo's flat canvas cross-entropy): every response token under "
                         "``mc_num`` noise levels.")
