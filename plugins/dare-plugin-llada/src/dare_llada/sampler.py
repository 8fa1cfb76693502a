"""The ``llada`` sampler component: LLaDA's official semi-autoregressive low-confidence remasking decoder
with Fast-dLLM acceleration, as a DARE ``Sampler`` (the algorithm: :mod:`dare_llada.decoding`).

This module holds the component class (its parameters: :mod:`dare_llada.params`) and imports torch when a sampler
decodes, so validating a spec imports no torch. ``decode``, ``denoise_steps`` and ``generate`` are re-exported
from :mod:`dare_llada.decoding` (imported on first access).
"""

from __future__ import annotations

from dare.components import Sampler, SamplerOutput
from dare.errors import DareError
from dare.lazy import lazy_exports
from dare_llada.params import LLaDASamplerParams

__all__ = ["generate", "decode", "denoise_steps", "decode_options", "LLaDASampler", "LLaDASamplerParams"]

_DECODING = ("generate", "decode", "denoise_steps", "decode_options")

__getattr__, __dir__ = lazy_exports(__name__, dict.fromkeys(_DECODING, "dare_llada.decoding"))


class LLaDASampler(Sampler):
    """LLaDA semi-autoregressive low-confidence remasking (official generate.py), with trajectory and Fast-dLLM
    KV cache / parallel decoding."""

    name = "llada"
    Params = LLaDASamplerParams
    attention_kinds = ("full",)
    supports_row_generators = True  # Gumbel noise and random remasking draw per row (dare.sampling)

    def check(self, ctx, loc):
        problems = super().check(ctx, loc)
        if self.params.cache == "none":
            return problems  # nothing to import: validating a spec loads no torch
        from dare.sampling.checks import cache_problems

        return problems + cache_problems(self.params.cache, ctx.family, loc)

    def steps_per_block(self) -> int:
        """Block stride of ``unmask_step``: ``block_length`` with threshold/factor (each block's steps numbered
        from ``nb * block_length``), else the fixed schedule's ``steps // num_blocks``."""
        p = self.params
        return p.block_length if p.parallel else p.steps // (p.gen_length // p.block_length)

    def generate(self, model, family, tokens, prompt_ids, attention_mask=None, generator=None) -> SamplerOutput:
        """Decode ``gen_length`` tokens after ``prompt_ids`` ``[B, Lp]`` (left-padded).

        :returns: :class:`~dare.components.SamplerOutput`; ``steps`` is the schedule's ``steps``, or with
            ``threshold``/``factor`` the number of steps run (``unmask_step`` is then
            ``block index * block_length + step within the block``, per row).
        :raises DareError: a cache the family cannot provide; :raises NonFiniteLogitsError: NaN/Inf logits.
        """
        from dare.sampling import completion_mask
        from dare.sampling.checks import bound_kv_logits
        from dare.sampling.options import DecodeOptions
        from dare_llada.decoding import decode

        p = self.params
        options = DecodeOptions(p, tokens, generator, bound_kv_logits("llada", p.cache, model, family))
        x, unmask_step, nfe = decode(lambda ids, am: family.logits(model, ids, am), prompt_ids, attention_mask, options)
        Lp = prompt_ids.shape[1]
        cmask = completion_mask(x[:, Lp:], tokens.stop_ids, family.pad_in_response)
        steps = nfe // (2 if p.cfg_scale > 0 else 1) if p.parallel else p.steps
        return SamplerOutput(
            sequences=x, prompt_length=Lp, completion_mask=cmask, unmask_step=unmask_step, nfe=nfe, steps=steps
        )

    def partial_denoise(self, model, family, tokens, state, prompt_length, attention_mask=None, step_range=(0, None),
                        generator=None) -> SamplerOutput:
        """Steps ``start_step .. end_step - 1`` (``step_range``) of this sampler's schedule from ``state``
        (:func:`denoise_steps`), through ``family.logits`` so any full-attention family (LLaDA, Dream) decodes.

        :returns: ``SamplerOutput`` with the new state; ``unmask_step`` covers this call only.
        :raises DareError: ``threshold``/``factor`` is set (no fixed schedule to resume).
        """
        from dare.sampling import completion_mask
        from dare.sampling.checks import bound_kv_logits
        from dare.sampling.options import DecodeOptions
        from dare_llada.decoding import denoise_steps

        p = self.params
        if p.parallel:
            raise DareError(
                "sampler llada: partial denoising (tree rollouts) resumes a fixed step schedule, which threshold/factor "
                "parallel decoding does not have; remove sampler.params.threshold/factor for this objective"
            )
        options = DecodeOptions(p, tokens, generator, bound_kv_logits("llada", p.cache, model, family))
        x, unmask_step, nfe = denoise_steps(lambda ids, am: family.logits(model, ids, am), state, prompt_length,
                                            attention_mask, options, *step_range)
        cmask = completion_mask(x[:, prompt_length:], tokens.stop_ids, family.pad_in_response)
        return SamplerOutput(
            sequences=x, prompt_length=prompt_length, completion_mask=cmask, unmask_step=unmask_step, nfe=nfe,
            steps=p.steps,
        )
