"""The ``llada2`` sampler component: LLaDA2's official block decoder (2.0 threshold decoding, 2.1 token
editing), batched and KV-cached, as a DARE ``Sampler`` (the algorithm and its sources:
:mod:`dare_llada2.decoding`).

This module holds the parameters and the component class and imports torch only when a sampler decodes, so
validating a spec imports no torch. ``decode``, ``BlockDecoding``, ``generate`` and ``generate_v21`` are
re-exported from :mod:`dare_llada2.decoding` (imported on first access).
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Literal

from pydantic import Field, field_validator, model_validator

from dare.components import Params, Sampler, SamplerOutput
from dare.errors import DareError
from dare.lazy import lazy_exports
from dare.modeling.block_family import block_decoder_problem

__all__ = ["decode", "BlockDecoding", "generate", "generate_v21", "LLaDA2Sampler", "LLaDA2SamplerParams"]

#: Names defined by :mod:`dare_llada2.decoding` (torch), re-exported here and imported on first access.
_DECODING = ("decode", "BlockDecoding", "generate", "generate_v21")

__getattr__, __dir__ = lazy_exports(__name__, dict.fromkeys(_DECODING, "dare_llada2.decoding"))


# =========================================================================== the DARE sampler
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
        from dare_llada2.decoding import decode

        problem = block_decoder_problem(family, self.name)
        if problem:
            raise DareError(problem)
        p = self.params
        res = decode(
            model, prompt_ids, attention_mask, variant=p.variant, gen_length=p.gen_length,
            block_length=self._block_length(model, family), steps=p.steps, threshold=p.threshold,
            temperature=p.temperature, top_k=p.top_k, top_p=p.top_p, minimal_topk=p.minimal_topk,
            eos_early_stop=p.eos_early_stop, editing_threshold=p.editing_threshold, max_post_steps=p.max_post_steps,
            num_to_transfer=p.num_to_transfer, mask_id=tokens.mask_id, eos_id=tokens.eos_id, pad_id=tokens.pad_id,
            use_cache=p.use_cache, official_soft_mask=p.official_soft_mask,
            official_t0_sampling=p.official_t0_sampling, generator=generator, family=family,
        )
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
