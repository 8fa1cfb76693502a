"""The ``llada2`` sampler component: LLaDA2's official block decoder (2.0 threshold decoding, 2.1 token
editing), batched and KV-cached, as a DARE ``Sampler`` (the algorithm and its sources:
:mod:`dare_llada2.decoding`).

This module holds the component class (its parameters: :mod:`dare_llada2.params`) and imports torch only when a
sampler decodes, so validating a spec imports no torch. ``decode``, ``BlockDecoding``, ``generate`` and
``generate_v21`` are re-exported from :mod:`dare_llada2.decoding` (imported on first access).
"""

from __future__ import annotations

from types import SimpleNamespace

from dare.components import Sampler, SamplerOutput
from dare.errors import DareError
from dare.lazy import lazy_exports
from dare.modeling.block_family import block_decoder_problem
from dare_llada2.params import LLaDA2SamplerParams

__all__ = ["decode", "decode_options", "BlockDecoding", "generate", "generate_v21", "LLaDA2Sampler", "LLaDA2SamplerParams"]

#: Names defined by :mod:`dare_llada2.decoding` (torch), re-exported here and imported on first access.
_DECODING = ("decode", "decode_options", "BlockDecoding", "generate", "generate_v21")

__getattr__, __dir__ = lazy_exports(__name__, dict.fromkeys(_DECODING, "dare_llada2.decoding"))


class LLaDA2Sampler(Sampler):
    """LLaDA2's official block decoder (2.0 threshold decoding / 2.1 token editing), batched, KV-cached."""

    name = "llada2"
    Params = LLaDA2SamplerParams
    attention_kinds = ("block",)
    #: only rows still decoding a block draw, each from its own generator (:func:`_propose`)
    supports_row_generators = True

    def _block_length(self, model, family) -> int:
        if self.params.block_length is not None:
            return self.params.block_length
        config = getattr(model, "config", None)
        size = family.block_size(config) if config is not None else None
        if size is None:
            raise DareError("sampler.params.block_length is not set and the model has no training block size; set it")
        return int(size)

    def generate(self, model, family, tokens, prompt_ids, attention_mask=None, generator=None) -> SamplerOutput:
        """Decode ``gen_length`` tokens per prompt; positions still masked after the first EOS become padding.

        ``extras``: ``edits`` ``[B]`` (2.1 token edits), ``cache_forwards`` (cache-filling forwards).

        :raises DareError: ``family`` has no KV-cached block forward, or bad prompts/settings (see :func:`decode`).
        """
        import torch

        from dare.sampling import completion_mask
        from dare.sampling.options import DecodeOptions
        from dare_llada2.decoding import decode

        problem = block_decoder_problem(family, self.name)
        if problem:
            raise DareError(problem)
        p = self.params
        params = p.model_copy(update={"block_length": self._block_length(model, family)})
        res = decode(model, prompt_ids, attention_mask, DecodeOptions(params, tokens, generator), family)
        completions = res.completions()
        after_eos = torch.cumsum((completions == tokens.eos_id).long(), dim=1) - (completions == tokens.eos_id).long() > 0
        completions = completions.masked_fill(after_eos & (completions == tokens.mask_id), tokens.pad_id)
        Lp = prompt_ids.shape[1]
        return SamplerOutput(
            sequences=torch.cat([prompt_ids, completions], dim=1),
            prompt_length=Lp,
            completion_mask=completion_mask(completions, tokens.stop_ids, family.pad_in_response),
            unmask_step=res.unmask_step,
            nfe=res.nfe,
            steps=res.steps,
            extras={"edits": res.edits, "cache_forwards": res.cache_forwards},
        )

    def check(self, ctx, loc: str) -> list[tuple[str, str]]:
        """Attention kind (base class), a family with the block-decoder KV-cache interface, then ``block_length``
        against the model's training block size."""
        problems = super().check(ctx, loc)
        if problems or ctx.family is None:
            return problems
        problem = block_decoder_problem(ctx.family, self.name)
        if problem:
            return [(f"{loc}.name", problem)]
        if ctx.model_config is None or self.params.block_length is None:
            return problems
        size = ctx.family.block_size(SimpleNamespace(**ctx.model_config))
        if size is not None and size != self.params.block_length:
            problems.append(
                (
                    f"{loc}.params.block_length",
                    f"block_length {self.params.block_length} differs from the block size {size} the model was trained "
                    f"with (config.json block_size, or the family default); remove block_length or set it to {size}",
                )
            )
        return problems
