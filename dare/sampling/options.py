"""The settings of one decoder call as one typed object: :class:`DecodeOptions`.

A decoder (each model-family plugin's ``decoding.decode`` or ``decoding.block_decode``) takes what it decodes
with (a logits function, or a model and its family's KV-cache interface), the prompts, their attention mask and one
:class:`DecodeOptions`: the sampler's ``Params`` (the decoding settings a spec gives under ``sampler.params``), the
special token ids, and the run-time pieces of the call (the random generator, the family's cached forward). Samplers
build it from their validated ``Params``; the release-compatible ``generate()`` functions build it from their keyword
arguments (:meth:`DecodeOptions.of`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from dare.components import SpecialTokens

__all__ = ["DecodeOptions"]


@dataclass(frozen=True)
class DecodeOptions:
    """Everything a decoder call reads besides the model, the prompts and their mask.

    * ``params``: the sampler's ``Params`` (pydantic), e.g. ``LLaDASamplerParams``;
    * ``tokens``: the special ids (``mask_id``, ``eos_id``, ``pad_id``, ``eot_id``) of
      :class:`~dare.components.SpecialTokens`;
    * ``generator``: ``torch.Generator``, :class:`dare.randomness.RowGenerators` (one per row) or None (the global
      RNG) for the stochastic parts;
    * ``kv_logits``: the family's cached forward bound to the model (:func:`dare.sampling.checks.bound_kv_logits`)
      when ``params.cache`` is not ``none``, else None.
    """

    params: Any
    tokens: SpecialTokens
    generator: Any = None
    kv_logits: Callable | None = None

    @classmethod
    def of(cls, params_class: type, tokens: SpecialTokens, generator: Any = None, kv_logits: Callable | None = None,
           **settings: Any) -> DecodeOptions:
        """Options from keyword settings, as the release-compatible ``generate()`` adapters receive them.

        ``params_class(**settings)`` is built *without* validation (``model_construct``; unnamed fields take their
        defaults): the decoders check the values they read and raise the errors their release counterparts raise,
        so a bad argument fails exactly as before. Samplers pass their validated ``Params`` to the constructor.
        """
        return cls(params_class.model_construct(**settings), tokens, generator, kv_logits)
