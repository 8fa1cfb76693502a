"""The ways an RL objective may change the online-RL step: :class:`RLStepHooks`, the one list of them."""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar

if TYPE_CHECKING:
    from dare.diffusion.estimators import Pass, ScoringBatch
    from dare.rl.rollout import Rollout

__all__ = ["RLStepHooks", "HOOKS"]


class RLStepHooks:
    """The public hooks of :class:`dare.rl.trainer.GRPOTrainer`: the only methods a plugin's trainer overrides.

    An RL objective changes the step in its loss (``OnlineRLObjective.pass_loss`` / ``sequence_loss``) and, when that
    is not enough, by returning a ``GRPOTrainer`` subclass from ``trainer_class`` that overrides some of these hooks
    (and nothing ``_``-prefixed of DARE's: ``tests/test_architecture.py`` fails otherwise). The default of each
    hook runs the public step of :mod:`dare.rl.step`; in the order a step calls them:

    * ``own_decoder_draws_per_row`` (class attribute, default False): True when the trainer decodes its rollouts
      with its own loop that draws per row whatever the sampler (MDPO's ``mdpo_decode``), so the rollout generator
      is one generator per completion (:class:`dare.randomness.RowGenerators`).
    * :meth:`generate_rollout` ``(model, inputs) -> Rollout``: sample, score and compute advantages, draw the passes
      of every inner iteration (:meth:`draw_passes`), call :meth:`after_passes`, score the old and reference
      policies. Replaced whole by objectives with their own rollout (MDPO's step rows, d-TreeRPO's tree), which
      return a :class:`~dare.rl.rollout.Rollout` subclass holding what their :meth:`update` needs.
    * :meth:`draw_passes` ``(batch, iteration) -> [Pass]``: the estimator's passes of one inner iteration, from the
      generators keyed by ``(seed, "rl-passes", step, completion * num_iterations + iteration)`` (SPG cuts the
      response at its first EOS first and masks what follows).
    * :meth:`after_passes` ``(rollout) -> {name: float}``: runs after the passes are drawn and before the old and
      reference policies score them; may replace ``rollout.advantages`` (TraceRL's value model: ``[N, G]`` token
      advantages from its GAE), so the rows the update runs follow them. Returns extra rollout metrics.
    * :meth:`update` ``(model, rollout, iteration) -> (loss, metrics)``: the objective's loss over inner iteration
      ``iteration`` and its backwards (default :func:`dare.rl.step.update`: per pass or the pass-mean replay);
      replaced by objectives whose loss couples the passes or scores other rows (SPG, MDPO, d-TreeRPO). The trainer
      then clips the gradients and steps the optimizer. An override runs its backwards through ``self.backprop``
      (:class:`dare.rl.step.Backprop`: equal backward counts on every process).
    * :meth:`save_extra_state` ``(output_dir)`` / :meth:`load_extra_state` ``(checkpoint)``: state besides the
      policy's (TraceRL's value model and its optimizer) written into each checkpoint directory while it is staged,
      and read back on resume and when a finished run is re-run (the final model is then published from it).
    * ``save_final(model_dir)`` (:class:`dare.trainers.DareTrainer`): extra files next to ``model/`` (call
      ``super().save_final`` first).

    What a hook may use of the trainer: ``params`` (the objective's :class:`~dare.rl.losses.RLParams`),
    ``objective``, ``estimator``, ``sampler``, ``reward``, ``family``, ``tokens``, ``reference``
    (:class:`dare.modeling.lora.ReferencePolicy` or None), ``rollout_generator``, ``row_generators``,
    ``likelihood_temperature``, ``step_settings`` (:class:`dare.rl.step.StepSettings`), ``backprop``, and the
    methods ``logits_fn(model)``, ``row_chunks(n)``, ``score_passes``, ``token_scores``, ``trained_rows``,
    ``reward_stats``, ``denoiser_logits`` and ``transformers.Trainer``'s public ones.
    """

    own_decoder_draws_per_row: ClassVar[bool] = False

    def generate_rollout(self, model, inputs: dict[str, list]) -> Rollout:
        """One rollout batch with its passes and old/reference scores (default: the sampler's completions)."""
        raise NotImplementedError

    def draw_passes(self, batch: ScoringBatch, iteration: int = 0) -> list[Pass]:
        """The estimator's passes of inner iteration ``iteration`` (default :func:`dare.rl.step.draw_passes`)."""
        raise NotImplementedError

    def after_passes(self, rollout: Rollout) -> dict[str, float]:
        """Between drawing the passes and scoring the old/reference policies; extra rollout metrics (default none)."""
        return {}

    def update(self, model, rollout: Rollout, iteration: int) -> tuple[float, dict[str, float]]:
        """The loss of inner iteration ``iteration`` and its backwards: ``(loss, metrics)`` (default
        :func:`dare.rl.step.update`)."""
        raise NotImplementedError

    def save_extra_state(self, output_dir: str) -> None:
        """Write state besides the policy's into the staged checkpoint directory ``output_dir`` (default none).
        Every process calls it; write from the main process only what is shared."""

    def load_extra_state(self, checkpoint: str) -> None:
        """Read back what :meth:`save_extra_state` wrote in ``checkpoint`` (default none); also called when a
        finished run is re-run from its last checkpoint."""


#: The names of the hooks (the public methods and attributes :class:`RLStepHooks` lists).
HOOKS: frozenset[str] = frozenset({"own_decoder_draws_per_row", "generate_rollout", "draw_passes", "after_passes",
                                   "update", "save_extra_state", "load_extra_state", "save_final"})
