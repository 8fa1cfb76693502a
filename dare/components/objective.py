"""The objective component: a training algorithm (supervised, preference or online RL)."""

from __future__ import annotations

from typing import Any, ClassVar, Literal

from dare.components.base import Component

__all__ = ["Objective"]


class Objective(Component):
    """A training algorithm. ``train(run)`` trains ``run.model`` and returns final metrics.

    ``stage`` tells the runner what the objective needs: ``"supervised"`` (``data.train`` with
    responses), ``"preference"`` (chosen/rejected pairs) or ``"online_rl"`` (a sampler and rewards).
    """

    kind = "objective"
    stage: ClassVar[Literal["supervised", "preference", "online_rl"]] = "supervised"
    #: The forward (corruption) processes this objective's loss is defined for (``ModelFamily.forward_process``):
    #: ``"mask"`` (absorbing [MASK], LLaDA/Dream/SDAR/LLaDA2) and/or ``"uniform"`` (uniformly random tokens,
    #: DiffusionGemma). A family whose process is not listed is refused at validation, naming the family.
    forward_processes: ClassVar[tuple[str, ...]] = ("mask",)

    def train(self, run) -> dict[str, float]:
        raise NotImplementedError

    def resolve_rollout_sampler(self, sampler, loc: str) -> tuple[Any, list[tuple[str, str]]]:
        """``(ResolvedSampler or None, problems)``: the sampler this objective's training decodes with, when it
        decodes (online RL; :class:`~dare.components.sampler.ResolvedSampler`), built once by the spec resolution
        (``ResolvedSpec.rollout_sampler``). ``loc`` is the objective's YAML path. Default: none, no problem."""
        return None, []

    def check(self, ctx, loc: str) -> list[tuple[str, str]]:
        problems = []
        spec = ctx.spec
        family = getattr(ctx, "family", None)
        process = getattr(family, "forward_process", "mask")
        if family is not None and process not in self.forward_processes:
            problems.append((f"{loc}.name", (
                f"objective {self.name!r} is defined for {' and '.join(self.forward_processes)}-noise diffusion, but "
                f"model family {family.name!r} corrupts with {process} noise (no [MASK] token): its loss scores "
                f"masked positions that such a model never sees; use an objective that supports {process} noise "
                "(sft, or an online-RL objective that `dare plugins --matrix` marks yes for this family)")))
        if spec.data is None or spec.data.train is None:
            problems.append(("data.train", f"objective {self.name!r} needs a training dataset; add data.train.path"))
        if spec.train is None:
            problems.append(("train", f"objective {self.name!r} needs a train: section (learning_rate, max_steps, "
                                      "...)"))
        if self.stage == "online_rl":
            if spec.sampler is None:
                problems.append(("sampler", f"objective {self.name!r} rolls out completions; add a sampler: section"))
            if not spec.rewards:
                problems.append(("rewards", f"objective {self.name!r} needs at least one reward under rewards:"))
        return problems
