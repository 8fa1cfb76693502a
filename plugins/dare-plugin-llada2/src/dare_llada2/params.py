"""The ``llada2`` sampler's parameters (torch-free: validating a spec imports no torch), read by the component
(:mod:`dare_llada2.sampler`) and the decoder (:mod:`dare_llada2.decoding`)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator, model_validator

from dare.components import Params

__all__ = ["LLaDA2SamplerParams"]

_V20_ONLY = ("steps", "minimal_topk", "official_t0_sampling")
_V21_ONLY = ("editing_threshold", "max_post_steps", "num_to_transfer", "official_soft_mask")


class LLaDA2SamplerParams(Params):
    """Parameters of the ``llada2`` sampler (defaults: greedy LLaDA2.0 threshold decoding at 0.95, 32 steps per
    block, 256 tokens, the model's block size)."""

    variant: Literal["2.0", "2.1"] = Field(
        "2.0", description="Decoder: '2.0' (threshold + per-step quota) or '2.1' (threshold + token editing)."
    )
    gen_length: int = Field(256, gt=0, description="Completion length in tokens.")
    block_length: int | None = Field(
        None, gt=0, description="Block length; default: the model's training block size (32 for LLaDA2.0/2.1)."
    )
    steps: int = Field(32, gt=0, description="2.0: denoising steps per block (quota block_length // steps per step).")
    threshold: float = Field(0.95, ge=0.0, le=1.0, description="Commit every mask whose proposal probability exceeds this.")
    temperature: float = Field(0.0, ge=0.0, description="Sampling temperature (0 = greedy).")
    top_k: int | None = Field(None, ge=0, description="Top-k filter (None or 0 = off).")
    top_p: float | None = Field(None, gt=0.0, le=1.0, description="Top-p filter (None or 1 = off).")
    minimal_topk: int = Field(1, gt=0, description="2.0: steps are capped at gen_length // minimal_topk.")
    eos_early_stop: bool = Field(False, description="Stop a row as soon as a complete answer ends with EOS.")
    editing_threshold: float = Field(
        0.9, ge=0.0, description="2.1: rewrite a decoded token whose new proposal's probability exceeds this."
    )
    max_post_steps: int = Field(16, ge=0, description="2.1: editing-only iterations allowed once a block has no mask.")
    num_to_transfer: int = Field(1, gt=0, description="2.1: masks committed per step when too few pass the threshold.")
    use_cache: bool = Field(True, description="KV-cache committed blocks instead of recomputing the window (same output).")
    official_soft_mask: bool = Field(False, description="2.1: the release's 0/1 additive mask (needs use_cache: false).")
    official_t0_sampling: bool = Field(False, description="2.0: the release's temperature 0, which samples at T = 1.")

    @field_validator("variant", mode="before")
    @classmethod
    def _variant_number(cls, v):
        """YAML reads ``variant: 2.1`` as a float."""
        return f"{v:.1f}" if isinstance(v, (int, float)) and not isinstance(v, bool) else v

    @model_validator(mode="after")
    def _consistent(self):
        other = _V21_ONLY if self.variant == "2.0" else _V20_ONLY
        stray = [k for k in other if k in self.model_fields_set]
        if stray:
            raise ValueError(f"{', '.join(stray)} do(es) not apply to variant {self.variant}; remove them or change variant")
        if self.official_soft_mask and self.use_cache:
            raise ValueError("official_soft_mask needs use_cache: false (the 0/1 mask makes the prefix depend on the block)")
        if self.gen_length < self.minimal_topk:
            raise ValueError(f"gen_length ({self.gen_length}) must be at least minimal_topk ({self.minimal_topk})")
        return self
