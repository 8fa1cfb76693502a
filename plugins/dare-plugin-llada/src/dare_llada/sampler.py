"""The ``llada`` sampler component: LLaDA's official semi-autoregressive low-confidence remasking decoder
with Fast-dLLM acceleration, as a DARE ``Sampler`` (the algorithm: :mod:`dare_llada.decoding`).

This module holds the parameters and the component class only and imports torch when a sampler decodes,
so validating a spec imports no torch. ``decode``, ``denoise_steps`` and ``generate`` are re-exported from
:mod:`dare_llada.decoding` (imported on first access).
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from dare.components import Params, Sampler, SamplerOutput
from dare.errors import DareError
from dare.lazy import lazy_exports

__all__ = ["generate", "decode", "denoise_steps", "LLaDASampler", "LLaDASamplerParams"]

_DECODING = ("generate", "decode", "denoise_steps")

__getattr__, __dir__ = lazy_exports(__name__, dict.fromkeys(_DECODING, "dare_llada.decoding"))


class LLaDASamplerParams(Params):
    """Parameters of :class:`LLaDASampler` (official ``generate`` arguments plus Fast-dLLM's).

    Cross-field rules: ``block_length`` divides ``gen_length`` and ``steps`` is a multiple of the number
    of blocks; at most one of ``threshold``/``factor``, and either needs ``remasking: low_confidence``.
    """

    gen_length: int = Field(128, gt=0, description="Completion length in tokens.")
    block_length: int = Field(32, gt=0, description="Semi-autoregressive block length; divides gen_length.")
    steps: int = Field(128, gt=0, description="Total denoising steps; a multiple of gen_length / block_length "
                       "(not used for the per-step count by threshold/factor).")
    temperature: float = Field(0.0, ge=0.0, description="Gumbel-max temperature (0 = greedy).")
    remasking: Literal["low_confidence", "random"] = Field("low_confidence", description="Which proposals to commit.")
    cfg_scale: float = Field(0.0, ge=0.0, description="Classifier-free guidance scale (0 = off).")
    logits_eos_inf: bool = Field(False, description="Never propose EOS.")
    confidence_eos_eot_inf: bool = Field(False, description="Commit EOS/EOT proposals last.")
    cache: Literal["none", "prefix", "dual"] = Field(
        "none", description="Fast-dLLM block-wise KV cache: none, prefix (cache before the block) or dual (also the "
        "masked suffix). Approximate except at refresh steps (dare.sampling.kv_cache).")
    threshold: float | None = Field(
        None, gt=0.0, le=1.0, description="Fast-dLLM parallel decoding: commit every masked token of the block with "
        "confidence >= threshold (at least the most confident one) per step; e.g. 0.9. None = fixed schedule.")
    factor: float | None = Field(
        None, gt=0.0, description="Fast-dLLM factor rule: commit the n most confident with (n+1)(1 - c_(n)) <= factor; "
        "e.g. 1.0. None = off.")

    @model_validator(mode="after")
    def _blocks(self):
        if self.gen_length % self.block_length != 0:
            raise ValueError(
                f"gen_length ({self.gen_length}) must be a multiple of block_length ({self.block_length})"
            )
        nb = self.gen_length // self.block_length
        if self.steps % nb != 0:
            raise ValueError(f"steps ({self.steps}) must be a multiple of gen_length / block_length ({nb})")
        if self.threshold is not None and self.factor is not None:
            raise ValueError("give at most one of threshold and factor (two parallel-decoding rules)")
        if (self.threshold is not None or self.factor is not None) and self.remasking != "low_confidence":
            raise ValueError(
                "threshold/factor compare the proposals' probabilities, so they need remasking: low_confidence "
                f"(got {self.remasking!r})"
            )
        return self

    @property
    def parallel(self) -> bool:
        return self.threshold is not None or self.factor is not None


class LLaDASampler(Sampler):
    """LLaDA semi-autoregressive low-confidence remasking (official generate.py), with trajectory and Fast-dLLM
    KV cache / parallel decoding."""

    name = "llada"
    Params = LLaDASamplerParams
    attention_kinds = ("full",)
    supports_row_generators = True  # Gumbel noise and random remasking draw per row (dare.sampling)

    def _kv_logits(self, model, family):
        """The family's cached forward bound to ``model`` when ``cache`` is on, else None.

        :raises DareError: a cache was asked for but the family has no ``kv_logits``.
        """
        p = self.params
        if p.cache == "none":
            return None
        from dare.sampling import kv_logits_of

        fn = kv_logits_of(family)
        if fn is None:
            raise DareError(
                f"sampler llada: cache {p.cache!r} needs the model family's cached forward (kv_logits), which family "
                f"{family.name!r} does not provide; use cache: none"
            )
        return lambda ids, am, past, start, end, use_cache: fn(model, ids, am, past, start, end, use_cache)

    def check(self, ctx, loc):
        problems = super().check(ctx, loc)
        fam = ctx.family
        if fam is None or self.params.cache == "none":
            return problems
        from dare.sampling import kv_logits_of

        if kv_logits_of(fam) is None:
            problems.append((f"{loc}.params.cache", f"cache {self.params.cache!r} needs the model family's cached "
                             f"forward (kv_logits), which family {fam.name!r} does not provide; use cache: none"))
        return problems

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
        from dare_llada.decoding import decode

        p = self.params
        x, unmask_step, nfe = decode(
            lambda ids, am: family.logits(model, ids, am),
            prompt_ids,
            attention_mask,
            steps=p.steps,
            gen_length=p.gen_length,
            block_length=p.block_length,
            temperature=p.temperature,
            cfg_scale=p.cfg_scale,
            remasking=p.remasking,
            mask_id=tokens.mask_id,
            logits_eos_inf=p.logits_eos_inf,
            confidence_eos_eot_inf=p.confidence_eos_eot_inf,
            eos_id=tokens.eos_id,
            eot_id=tokens.eot_id,
            generator=generator,
            cache=p.cache,
            kv_logits=self._kv_logits(model, family),
            threshold=p.threshold,
            factor=p.factor,
        )
        Lp = prompt_ids.shape[1]
        cmask = completion_mask(x[:, Lp:], tokens.stop_ids, family.pad_in_response)
        steps = nfe // (2 if p.cfg_scale > 0 else 1) if p.parallel else p.steps
        return SamplerOutput(
            sequences=x, prompt_length=Lp, completion_mask=cmask, unmask_step=unmask_step, nfe=nfe, steps=steps
        )

    def partial_denoise(self, model, family, tokens, state, prompt_length, attention_mask=None, start_step=0,
                        end_step=None, generator=None) -> SamplerOutput:
        """Steps ``start_step .. end_step - 1`` of this sampler's schedule from ``state`` (:func:`denoise_steps`),
        through ``family.logits`` so any full-attention family (LLaDA, Dream) decodes.

        :returns: ``SamplerOutput`` with the new state; ``unmask_step`` covers this call only.
        :raises DareError: ``threshold``/``factor`` is set (no fixed schedule to resume).
        """
        from dare.sampling import completion_mask
        from dare_llada.decoding import denoise_steps

        p = self.params
        if p.parallel:
            raise DareError(
                "sampler llada: partial denoising (tree rollouts) resumes a fixed step schedule, which threshold/factor "
                "parallel decoding does not have; remove sampler.params.threshold/factor for this objective"
            )
        x, unmask_step, nfe = denoise_steps(
            lambda ids, am: family.logits(model, ids, am),
            state,
            prompt_length,
            attention_mask,
            start_step=start_step,
            end_step=end_step,
            steps=p.steps,
            gen_length=p.gen_length,
            block_length=p.block_length,
            temperature=p.temperature,
            cfg_scale=p.cfg_scale,
            remasking=p.remasking,
            mask_id=tokens.mask_id,
            logits_eos_inf=p.logits_eos_inf,
            confidence_eos_eot_inf=p.confidence_eos_eot_inf,
            eos_id=tokens.eos_id,
            eot_id=tokens.eot_id,
            generator=generator,
            cache=p.cache,
            kv_logits=self._kv_logits(model, family),
        )
        cmask = completion_mask(x[:, prompt_length:], tokens.stop_ids, family.pad_in_response)
        return SamplerOutput(
            sequences=x, prompt_length=prompt_length, completion_mask=cmask, unmask_step=unmask_step, nfe=nfe,
            steps=p.steps,
        )
