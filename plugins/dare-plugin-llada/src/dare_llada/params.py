"""The ``llada`` sampler's parameters (torch-free: validating a spec imports no torch), read by the component
(:mod:`dare_llada.sampler`) and the decoder (:mod:`dare_llada.decoding`)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from dare.components import Params

__all__ = ["LLaDASamplerParams"]


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
