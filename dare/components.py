"""Base classes of the five component kinds: ModelFamily, Sampler, Objective, Evaluator, Reward.

DARE keeps three axes apart (see docs/architecture.md): a *model family* knows checkpoints, special ids,
attention kind and logit alignment; a *likelihood estimator* (``dare.diffusion``) knows how to
corrupt a sequence and score it; an *objective* turns scores into a loss. Samplers decode with any
family; evaluators and rewards score text and never see a model.

Each component class carries

* ``name`` (the spec's ``name:``) and optional ``aliases``;
* ``Params``: a pydantic model with ``extra="forbid"`` that validates the spec's ``params:`` block;
* ``check(ctx)``: cross-field checks that need other parts of the spec (e.g. a sampler's
  ``gen_length`` against a block family's block size). They run in ``dare validate`` before any
  weights are loaded.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict

from dare.errors import CheckpointError

if TYPE_CHECKING:  # pragma: no cover
    import torch

__all__ = [
    "Params",
    "NoParams",
    "Component",
    "SpecialTokens",
    "ModelFamily",
    "SamplerOutput",
    "Sampler",
    "Objective",
    "Evaluator",
    "Reward",
    "KINDS",
]


class Params(BaseModel):
    """Base for every component's ``Params`` model: unknown keys are errors, values are validated."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True, frozen=False)


class NoParams(Params):
    """A component without parameters."""


class Component:
    """Common base. Subclasses set ``kind`` (via the kind base class), ``name`` and ``Params``."""

    kind: ClassVar[str] = ""
    name: ClassVar[str] = ""
    aliases: ClassVar[tuple[str, ...]] = ()
    Params: ClassVar[type[Params]] = NoParams

    def __init__(self, params: Params | dict | None = None):
        if params is None:
            params = self.Params()
        elif isinstance(params, dict):
            params = self.Params.model_validate(params)
        self.params = params

    @classmethod
    def description(cls) -> str:
        """The first line of the class docstring."""
        doc = (cls.__doc__ or "").strip()
        return doc.splitlines()[0] if doc else ""

    def check(self, ctx, loc: str) -> list[tuple[str, str]]:
        """Cross-field checks against the rest of the spec; return ``(yaml_path, message)`` pairs.

        ``ctx`` is the :class:`dare.spec.ResolvedSpec` being validated (``ctx.spec``, ``ctx.family``,
        ``ctx.model_config``, ``ctx.tokenizer``, ``ctx.sampler``, ...).

        ``loc`` is this component's YAML path (e.g. ``"sampler"``). The default finds nothing.
        """
        return []


# =========================================================================== model families
@dataclass(frozen=True)
class SpecialTokens:
    """Token ids a diffusion LM needs. ``eot_id`` is the end-of-turn id (may equal ``eos_id``)."""

    mask_id: int
    eos_id: int
    pad_id: int
    eot_id: int | None = None
    bos_id: int | None = None

    @property
    def stop_ids(self) -> tuple[int, ...]:
        """Ids that end a completion (EOS and, where distinct, end-of-turn)."""
        ids = [self.eos_id]
        if self.eot_id is not None and self.eot_id != self.eos_id:
            ids.append(self.eot_id)
        return tuple(ids)


class ModelFamily(Component):
    """A dLLM architecture: checkpoint format, special ids, attention kind and logit alignment.

    Everything outside the family plugin asks the family for these facts; no objective or sampler
    branches on a family name. The contract an estimator relies on is :meth:`denoiser_logits`:
    logits ``[B, L, V]`` where position ``i`` scores token ``i`` of the *clean* sequence given the
    noisy input.
    """

    kind = "model_family"
    #: ``config.json`` ``model_type`` values this family loads.
    model_types: ClassVar[tuple[str, ...]] = ()
    #: ``"full"`` (bidirectional, LLaDA/Dream) or ``"block"`` (block-causal, SDAR/LLaDA2).
    attention: ClassVar[Literal["full", "block"]] = "full"
    #: True when EOS padding after the answer is part of the response (LLaDA/Dream convention);
    #: False when responses are truncated at EOS and padding is excluded (block families).
    pad_in_response: ClassVar[bool] = True
    #: Linear-module names LoRA targets for ``target_modules: all-linear`` (LM head excluded).
    lora_target_modules: ClassVar[tuple[str, ...]] = ()
    #: Name of the LM-head module (excluded from ``all-linear`` unless asked).
    lm_head_module: ClassVar[str] = "lm_head"
    #: Name of the sampler that reproduces the family's official decoder.
    default_sampler: ClassVar[str] = ""
    #: Class name of one decoder layer (FSDP auto-wrap unit).
    decoder_layer_class: ClassVar[str] = ""
    #: Chat template (jinja) written into tokenizers that DARE creates for this family.
    chat_template: ClassVar[str] = ""
    #: Special-token strings for tokenizers DARE creates: keys mask, eos, pad, bos, eot.
    special_token_strings: ClassVar[dict[str, str]] = {}

    # ------------------------------------------------------------------ checkpoint facts
    def config_class(self) -> type:
        """The ``PretrainedConfig`` subclass (registered with ``AutoConfig``)."""
        raise NotImplementedError

    def model_class(self) -> type:
        """The ``PreTrainedModel`` subclass (registered with ``AutoModel``)."""
        raise NotImplementedError

    def model_class_for(self, config) -> type:
        """The model class for one checkpoint's ``config`` (a family with several ``model_types``, e.g. a dense
        and an MoE variant, overrides this); defaults to :meth:`model_class`."""
        return self.model_class()

    def presets(self) -> dict[str, dict[str, Any]]:
        """Named config presets (``tiny`` at least) as ``config.json`` key/value dicts.

        Special-token ids and ``vocab_size`` are filled in by :meth:`new_config` from the tokenizer.
        """
        return {}

    def new_config(self, preset: str, overrides: dict[str, Any], vocab_size: int, tokens: SpecialTokens):
        """Build a config for a fresh model from a preset, the tokenizer's size and special ids.

        :raises KeyError: unknown preset (callers turn it into a :class:`~dare.errors.SpecError`).
        """
        raise NotImplementedError

    #: More special tokens for tokenizers DARE creates (e.g. chat header tokens).
    extra_special_tokens: ClassVar[tuple[str, ...]] = ()

    def tokens_from_tokenizer(self, tokenizer) -> SpecialTokens:
        """Special ids from a tokenizer: its declared ``*_token`` or the family's token strings.

        :raises dare.errors.CheckpointError: the tokenizer has no mask token (nor EOS).
        """
        vocab = tokenizer.get_vocab()

        def lookup(role: str) -> int | None:
            declared = getattr(tokenizer, f"{role}_token", None) if role in ("bos", "eos", "pad", "mask") else None
            for tok in (declared, self.special_token_strings.get(role)):
                if isinstance(tok, str) and tok in vocab:
                    return int(vocab[tok])
            return None

        mask, eos = lookup("mask"), lookup("eos")
        if mask is None:
            want = self.special_token_strings.get("mask", "a mask token")
            raise CheckpointError(
                f"the tokenizer has no mask token ({want}); a {self.name} model needs one: add it as a special token "
                "and set mask_token in tokenizer_config.json"
            )
        if eos is None:
            raise CheckpointError(f"the tokenizer has no EOS token ({self.special_token_strings.get('eos', 'eos_token')})")
        pad = lookup("pad")
        return SpecialTokens(mask_id=mask, eos_id=eos, pad_id=eos if pad is None else pad, eot_id=lookup("eot"), bos_id=lookup("bos"))

    def special_tokens(self, config, tokenizer) -> SpecialTokens:
        """Special ids of a checkpoint: ``config.json`` ids where present, else the tokenizer's.

        :raises dare.errors.CheckpointError: no mask token, or config and tokenizer disagree on it.
        """
        tok = self.tokens_from_tokenizer(tokenizer)
        mask = getattr(config, "mask_token_id", None)
        if mask is not None and int(mask) != tok.mask_id:
            raise CheckpointError(
                f"config.json mask_token_id {mask} differs from the tokenizer's mask token id {tok.mask_id}"
            )
        eos = getattr(config, "eos_token_id", None)
        if isinstance(eos, (list, tuple)):
            eos = eos[0] if eos else None
        pad = getattr(config, "pad_token_id", None)
        return SpecialTokens(
            mask_id=tok.mask_id,
            eos_id=tok.eos_id if eos is None else int(eos),
            pad_id=(tok.pad_id if pad is None else int(pad)),
            eot_id=tok.eot_id,
            bos_id=tok.bos_id,
        )


    def block_size(self, config) -> int | None:
        """Training block size of a block-diffusion family (``None`` for full attention)."""
        return None

    def validate_checkpoint(self, model_dir: str) -> None:
        """Check tensor names and shapes of a checkpoint against its config before loading.

        :raises dare.errors.CheckpointError: naming the first offending tensor.
        """

    # ------------------------------------------------------------------ forward passes
    def logits(self, model, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None) -> torch.Tensor:
        """Aligned logits ``[B, L, V]`` (float, model dtype) for ``input_ids`` ``[B, L]`` (int64).

        ``attention_mask`` ``[B, L]`` (1 = real token, 0 = left padding) follows the family's
        padding convention. Position ``i`` of the result scores token ``i``.
        """
        raise NotImplementedError

    def denoiser_logits(
        self,
        model,
        noisy_ids: torch.Tensor,
        clean_ids: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Aligned logits ``[B, L, V]`` for a corrupted sequence, as training objectives need them.

        Full-attention families run the noisy sequence alone. Block families run
        ``[noisy ; clean]`` with the block-diffusion mask (``dare.diffusion.block``) and return the
        noisy half. ``noisy_ids``/``clean_ids`` are ``[B, L]`` int64; ``attention_mask`` ``[B, L]``
        marks valid tokens.
        """
        return self.logits(model, noisy_ids, attention_mask)


# =========================================================================== samplers
@dataclass
class SamplerOutput:
    """What every sampler returns.

    * ``sequences``: ``[B, Lp + G]`` int64, prompt (left-padded) followed by the completion.
    * ``prompt_length``: ``Lp``.
    * ``completion_mask``: ``[B, G]`` bool, the completion positions that belong to the response
      under the family's padding convention (all True when EOS padding counts as response).
    * ``unmask_step``: ``[B, G]`` int64, the global denoising step (0-based) at which each completion
      token was committed; -1 for positions never committed. Trajectory objectives replay this.
    * ``nfe``: number of model forward passes (function evaluations), counting a CFG pair as 2.
    * ``steps``: total denoising steps the schedule had (the range of ``unmask_step``).
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
        start_step: int = 0,
        end_step: int | None = None,
        generator: torch.Generator | None = None,
    ) -> SamplerOutput:
        """Continue decoding an intermediate state for steps ``start_step .. end_step - 1`` of the schedule.

        Optional (tree rollouts such as d-TreeRPO branch a partly decoded state into several children).
        ``state`` ``[B, Lp + G]`` int64 is the left-padded prompt followed by a completion that this
        sampler left after ``start_step`` global steps (all mask tokens when ``start_step = 0``);
        ``attention_mask`` ``[B, Lp]`` marks real prompt tokens. ``end_step`` None runs to the end, so
        ``partial_denoise(generate's initial state, 0, None)`` decodes like :meth:`generate`.

        :returns: :class:`SamplerOutput` whose ``sequences`` is the new state and ``unmask_step`` the
            global step that committed each completion token *in this call* (-1 elsewhere).
        :raises NotImplementedError: the sampler cannot resume from a state (the default).
        """
        raise NotImplementedError(f"sampler {self.name!r} cannot resume decoding from an intermediate state")

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


# =========================================================================== objectives
class Objective(Component):
    """A training algorithm. ``train(run)`` trains ``run.model`` and returns final metrics.

    ``stage`` tells the runner what the objective needs: ``"supervised"`` (``data.train`` with
    responses), ``"preference"`` (chosen/rejected pairs) or ``"online_rl"`` (a sampler and rewards).
    """

    kind = "objective"
    stage: ClassVar[Literal["supervised", "preference", "online_rl"]] = "supervised"

    def train(self, run) -> dict[str, float]:
        raise NotImplementedError

    def check(self, ctx, loc: str) -> list[tuple[str, str]]:
        problems = []
        spec = ctx.spec
        if spec.data is None or spec.data.train is None:
            problems.append(("data.train", f"objective {self.name!r} needs a training dataset; add data.train.path"))
        if spec.train is None:
            problems.append(("train", f"objective {self.name!r} needs a train: section (learning_rate, max_steps, ...)"))
        if self.stage == "online_rl":
            if spec.sampler is None:
                problems.append(("sampler", f"objective {self.name!r} rolls out completions; add a sampler: section"))
            if not spec.rewards:
                problems.append(("rewards", f"objective {self.name!r} needs at least one reward under rewards:"))
        return problems


# =========================================================================== rewards
class Reward(Component):
    """A verifiable reward: ``score(completion, sample) -> float``.

    ``sample`` is one dataset row as a dict (``data_source``, ``prompt``, ``reward_model`` with
    ``ground_truth``, ``extra_info``). Raising is allowed: the caller logs the sample and scores 0.
    """

    kind = "reward"

    def score(self, completion: str, sample: dict[str, Any]) -> float:
        raise NotImplementedError

    @staticmethod
    def ground_truth(sample: dict[str, Any]) -> Any:
        """``sample['reward_model']['ground_truth']`` (or a top-level ``ground_truth``/``answer``)."""
        rm = sample.get("reward_model")
        if isinstance(rm, dict) and "ground_truth" in rm:
            return rm["ground_truth"]
        for key in ("ground_truth", "answer"):
            if key in sample:
                return sample[key]
        raise KeyError("ground_truth")


# =========================================================================== evaluators
class Evaluator(Component):
    """A benchmark: which rows to read, how to pose them, which reward scores them.

    The core runner (``dare.eval``) generates with the spec's sampler and calls the reward.
    ``accuracy`` is the fraction of samples whose reward is 1 (a full solve / correct answer);
    ``mean_reward`` is the mean reward (partial credit included).
    """

    kind = "evaluator"
    #: Reward component name that scores this benchmark.
    reward: ClassVar[str] = ""
    #: Default reward params.
    reward_params: ClassVar[dict[str, Any]] = {}
    #: ``data_source`` values this benchmark accepts (empty = any).
    data_sources: ClassVar[tuple[str, ...]] = ()
    #: Default data file, relative to a data root (``$DARE_DATA`` or ``../shared/data``).
    default_path: ClassVar[str | None] = None

    def is_correct(self, reward: float) -> bool:
        """Whether a reward counts as a solve for ``accuracy``."""
        return math.isclose(reward, 1.0, abs_tol=1e-9) or reward > 1.0


KINDS: dict[str, type[Component]] = {
    "model_family": ModelFamily,
    "sampler": Sampler,
    "objective": Objective,
    "evaluator": Evaluator,
    "reward": Reward,
}
