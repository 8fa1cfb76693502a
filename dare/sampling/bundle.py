"""What decoding text needs, as one value: :class:`DecodingBundle` (a model, its family adapter, its special ids, its
tokenizer and a sampler).

:func:`dare.sampling.text.generate_texts`, :func:`dare.rl.rollout.sample_completions` and
:func:`dare.eval.runner.evaluate_benchmark` take one bundle instead of the five objects that always travel together.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from dare.components import SamplerOutput, SpecialTokens

__all__ = ["DecodingBundle"]


@dataclass(frozen=True)
class DecodingBundle:
    """A model and everything a sampler decodes it with.

    * ``model``: the ``torch.nn.Module`` the sampler calls (unwrapped: not a DDP/DeepSpeed wrapper);
    * ``family``: its :class:`~dare.components.ModelFamily` adapter (aligned logits, KV-cache interface);
    * ``tokens``: its :class:`~dare.components.SpecialTokens` (mask, EOS, pad, end-of-turn ids);
    * ``tokenizer``: the Hugging Face tokenizer that encodes prompts and decodes completions;
    * ``sampler``: a built :class:`~dare.components.Sampler`, or None where nothing is sampled (a likelihood
      benchmark, :mod:`dare.eval.multiple_choice`).
    """

    model: Any
    family: Any
    tokens: SpecialTokens
    tokenizer: Any
    sampler: Any = None

    @classmethod
    def of(cls, loaded: Any, sampler: Any = None, model: Any = None) -> DecodingBundle:
        """The bundle of a loaded model (:class:`dare.modeling.LoadedModel`, or anything with ``model``, ``family``,
        ``tokens`` and ``tokenizer``) and ``sampler``; ``model`` replaces ``loaded.model`` when given."""
        return cls(loaded.model if model is None else model, loaded.family, loaded.tokens, loaded.tokenizer, sampler)

    def replace(self, **changes: Any) -> DecodingBundle:
        """A copy with ``changes`` (field names: ``model``, ``sampler``, ...)."""
        return dataclasses.replace(self, **changes)

    def generate(self, input_ids, attention_mask, generator: Any = None) -> SamplerOutput:
        """``sampler.generate(model, family, tokens, input_ids, attention_mask, generator=generator)``.

        :param input_ids: ``[B, Lp]`` int64 left-padded prompts; :param attention_mask: ``[B, Lp]`` (1 real, 0 pad).
        :param generator: ``torch.Generator``, :class:`dare.randomness.RowGenerators` or None (the global RNG).
        :raises ValueError: the bundle has no sampler.
        """
        if self.sampler is None:
            raise ValueError("this decoding bundle has no sampler: build it with one to generate")
        return self.sampler.generate(self.model, self.family, self.tokens, input_ids, attention_mask,
                                     generator=generator)
