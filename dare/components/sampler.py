"""The sampler component: a decoding loop over any family of the matching attention kind."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

from dare.components.base import Component
from dare.components.family import ModelFamily, SpecialTokens

if TYPE_CHECKING:  # pragma: no cover
    import torch

__all__ = ["SamplerOutput", "Sampler", "ResolvedSampler"]


@dataclass
class SamplerOutput:
    """What every sampler returns.

    * ``sequences``: ``[B, Lp + G]`` int64, prompt (left-padded) followed by the completion.
    * ``prompt_length``: ``Lp``.
    * ``completion_mask``: ``[B, G]`` bool, the completion positions that belong to the response
      under the family's padding convention (all True when EOS padding counts as response).
    * ``unmask_step``: ``[B, G]`` int64, the denoising step (0-based) at which each completion token was
      committed; -1 for positions never committed. Trajectory objectives replay this, grouping the tokens of
      all rows that carry the same number, so a row's numbers must not depend on the other rows of its batch:
      block decoders number ``block index * (most steps a block can take) + step within the block``.
    * ``nfe``: number of model forward passes (function evaluations), counting a CFG pair as 2.
    * ``steps``: denoising steps of the schedule, or the steps run where the count adapts (parallel decoding);
      ``unmask_step`` may then exceed it (numbers of blocks that finished early are skipped).
    """

    sequences: Any
    prompt_length: int
    completion_mask: Any
    unmask_step: Any
    nfe: int
    steps: int
    extras: dict[str, Any] = field(default_factory=dict)

    @property
    def completions(self):
        """``[B, G]`` completion ids."""
        return self.sequences[:, self.prompt_length :]


class Sampler(Component):
    """A decoding loop over any family with the matching attention kind.

    ``generate`` receives the model, its family and special ids, left-padded prompts, and an
    optional ``torch.Generator`` for the stochastic parts (Gumbel noise, random remasking).
    """

    kind = "sampler"
    #: Attention kinds (``ModelFamily.attention``) this sampler can decode.
    attention_kinds: ClassVar[tuple[str, ...]] = ("full",)
    #: Whether ``generate`` accepts per-row generators (:class:`dare.randomness.RowGenerators`): each row's
    #: random draws then come from its own generator, so a row's completion does not depend on the other
    #: rows of the batch (RL rollouts and evaluation use them when available).
    supports_row_generators: ClassVar[bool] = False

    @property
    def gen_length(self) -> int:
        """Completion length ``G`` in tokens."""
        return int(self.params.gen_length)  # type: ignore[attr-defined]

    def generate(
        self,
        model,
        family: ModelFamily,
        tokens: SpecialTokens,
        prompt_ids: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        generator: torch.Generator | None = None,
    ) -> SamplerOutput:
        raise NotImplementedError

    def partial_denoise(
        self,
        model,
        family: ModelFamily,
        tokens: SpecialTokens,
        state: torch.Tensor,
        prompt_length: int,
        attention_mask: torch.Tensor | None = None,
        step_range: tuple[int, int | None] = (0, None),
        generator: torch.Generator | None = None,
    ) -> SamplerOutput:
        """Continue decoding an intermediate state for steps ``start_step .. end_step - 1`` of the schedule,
        ``step_range = (start_step, end_step)``.

        Optional (tree rollouts such as d-TreeRPO branch a partly decoded state into several children).
        ``state`` ``[B, Lp + G]`` int64 is the left-padded prompt followed by a completion that this
        sampler left after ``start_step`` global steps (all mask tokens when ``start_step = 0``);
        ``attention_mask`` ``[B, Lp]`` marks real prompt tokens. ``end_step`` None runs to the end, so
        ``partial_denoise(generate's initial state, step_range=(0, None))`` decodes like :meth:`generate`.

        :returns: :class:`SamplerOutput` whose ``sequences`` is the new state and ``unmask_step`` the
            global step that committed each completion token *in this call* (-1 elsewhere).
        :raises NotImplementedError: the sampler cannot resume from a state (the default).
        """
        raise NotImplementedError(f"sampler {self.name!r} cannot resume decoding from an intermediate state")

    def steps_per_block(self) -> int | None:
        """The stride ``b`` that separates blocks in this sampler's ``unmask_step`` numbers: block ``nb``'s steps
        are numbered ``nb b .. nb b + b - 1`` for every row, or None where no stride marks the blocks (the
        default: unknown; LLaDA2 counts each row's steps consecutively across blocks).

        Trajectory objectives merge steps within a block with it (CJ-GRPO ``step_merge``, TraceRL ``shrink``:
        :mod:`dare.diffusion.estimators.trajectory`). A fixed schedule of ``steps`` over ``gen_length /
        block_length`` blocks has ``b = steps // num_blocks``; parallel decoding whose step count per block
        adapts numbers each block from ``nb * block_length`` (at most ``block_length`` steps), ``b = block_length``.
        """
        return None

    @classmethod
    def supports_partial_denoise(cls) -> bool:
        """Whether this sampler implements :meth:`partial_denoise`."""
        return cls.partial_denoise is not Sampler.partial_denoise

    def check(self, ctx, loc: str) -> list[tuple[str, str]]:
        fam = ctx.family
        if fam is not None and fam.attention not in self.attention_kinds:
            return [
                (
                    f"{loc}.name",
                    f"sampler {self.name!r} decodes {'/'.join(self.attention_kinds)}-attention families, but model "
                    f"family {fam.name!r} uses {fam.attention} attention; use {fam.default_sampler!r}",
                )
            ]
        return []


@dataclass(frozen=True)
class ResolvedSampler:
    """A sampler as a run uses it, with the YAML path that set each of its parameters.

    RL objectives decode their training rollouts with the spec's ``sampler:`` and the overrides of
    ``algorithm.params.rollout_sampler`` (:meth:`dare.rl.objective.OnlineRLObjective.resolve_rollout_sampler`); the
    spec resolution builds it once (``ResolvedSpec.rollout_sampler``) and checks and training read it from there.

    * ``sampler``: the built component (its ``Params`` validated with the overrides applied);
    * ``origin``: parameter name -> YAML path of the value (``algorithm.params.rollout_sampler.<key>`` for an
      override); a parameter not listed comes from ``sampler.params.<key>`` or the ``Params`` default.
    """

    sampler: Sampler
    origin: dict[str, str] = field(default_factory=dict)

    @property
    def name(self) -> str:
        return self.sampler.name

    @property
    def params(self):
        return self.sampler.params

    def where(self, key: str) -> str:
        """The YAML path to name in a message about ``key`` (a parameter name, or ``"name"``: ``sampler.name``)."""
        if key == "name":
            return "sampler.name"
        return self.origin.get(key, f"sampler.params.{key}")
