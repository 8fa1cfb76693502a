"""The ``sdar`` sampler component: SDAR block-diffusion decoding with a KV cache (JetAstra/SDAR ``generate.py``)
as a DARE ``Sampler`` (the algorithm and its sources: :mod:`dare_sdar.decoding`).

This module holds the component class (its remasking strategies and parameters: :mod:`dare_sdar.params`) and
imports torch only when a sampler decodes, so validating a spec imports no torch. ``block_decode``, ``block_diffusion_generate``,
``select_transfer`` and ``BlockDecodeResult`` are re-exported from :mod:`dare_sdar.decoding` (imported on
first access).
"""

from __future__ import annotations

from dare.components import Sampler, SamplerOutput
from dare.lazy import lazy_exports
from dare.modeling.block_family import block_decoder_problem

from dare_sdar.errors import SDARInputError
from dare_sdar.params import REMASKING_STRATEGIES, SDARSamplerParams

__all__ = [
    "REMASKING_STRATEGIES",
    "BlockDecodeResult",
    "select_transfer",
    "block_decode",
    "block_diffusion_generate",
    "SDARSamplerParams",
    "SDARSampler",
]

#: Names defined by :mod:`dare_sdar.decoding` (torch), re-exported here and imported on first access.
_DECODING = ("BlockDecodeResult", "select_transfer", "block_decode", "block_diffusion_generate")

__getattr__, __dir__ = lazy_exports(__name__, dict.fromkeys(_DECODING, "dare_sdar.decoding"))


class SDARSampler(Sampler):
    """SDAR block diffusion decoding with a KV cache (JetAstra/SDAR generate.py), with trajectory and NFE."""

    name = "sdar"
    Params = SDARSamplerParams
    attention_kinds = ("block",)
    #: each row draws its proposals from its own generator, only while it has masks (:func:`_propose`)
    supports_row_generators = True

    def check(self, ctx, loc: str) -> list[tuple[str, str]]:
        """Besides the attention kind: the family must offer the cached block forward, and ``block_length``
        and ``gen_length`` must be multiples of the model's training block size."""
        problems = super().check(ctx, loc)
        family = ctx.family
        if problems or family is None:
            return problems
        problem = block_decoder_problem(family, self.name)
        if problem:
            return [(f"{loc}.name", problem)]
        if ctx.model_config is None:
            return problems
        block = family.block_size(ctx.model_config)
        why = {
            "block_length": "the model attends block-causally over blocks of that size, and a decoding block that "
            "splits one attends in a pattern the model was never trained on",
            "gen_length": "the completion budget is decoded in whole training blocks",
        }
        for key, reason in why.items():
            value = getattr(self.params, key)
            if value % block != 0:
                problems.append((
                    f"{loc}.params.{key}",
                    f"{key} ({value}) must be a multiple of the model's block size {block} (config.json block_size): "
                    f"{reason}",
                ))
        return problems

    def steps_per_block(self) -> int:
        """Block stride of ``unmask_step``: ``denoising_steps`` (block ``k`` of the canvas after the prompt's
        last block numbers its steps ``k * denoising_steps + i``, dare_sdar/decoding.py)."""
        return int(self.params.denoising_steps)

    def generate(self, model, family, tokens, prompt_ids, attention_mask=None, generator=None) -> SamplerOutput:
        """Decode ``prompt_ids`` ``[B, Lp]`` (left-padded; ``attention_mask`` ``[B, Lp]``) with the family's
        cached block forward. ``nfe`` counts denoising forwards; ``extras['forward_passes']`` all model calls.

        :raises SDARInputError: the family has no cached block forward, or bad prompts/masks.
        :raises dare.sampling.NonFiniteLogitsError: the model returned NaN/Inf logits.
        """
        import torch

        from dare.sampling import completion_mask
        from dare.sampling.options import DecodeOptions
        from dare_sdar.decoding import block_decode

        problem = block_decoder_problem(family, self.name)
        if problem:
            raise SDARInputError(problem)
        res = block_decode(family, model, prompt_ids, attention_mask, DecodeOptions(self.params, tokens, generator))
        Lp = prompt_ids.shape[1]
        return SamplerOutput(
            sequences=torch.cat([prompt_ids, res.completions], dim=1),
            prompt_length=Lp,
            completion_mask=completion_mask(res.completions, tokens.stop_ids, family.pad_in_response),
            unmask_step=res.unmask_step,
            nfe=res.nfe,
            steps=res.steps,
            extras={"forward_passes": res.forward_passes},
        )
