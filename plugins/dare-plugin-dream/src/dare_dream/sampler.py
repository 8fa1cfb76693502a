"""The ``dream`` sampler component: Dream's official masked-diffusion decoder (``diffusion_generate``) with
Fast-dLLM acceleration, as a DARE ``Sampler`` (the algorithm and its sources: :mod:`dare_dream.decoding`).

This module holds the component class (its ``alg`` values and parameters: :mod:`dare_dream.params`) and imports
torch only when a sampler decodes, so validating a spec imports no torch. The decoder's functions (``decode``,
``diffusion_generate``, ``sample_tokens``, ...) are re-exported from :mod:`dare_dream.decoding` (imported on
first access).
"""

from __future__ import annotations

from dare.components import Sampler, SamplerOutput
from dare.lazy import lazy_exports
from dare_dream.params import ALGORITHMS, DreamSamplerParams

__all__ = [
    "ALGORITHMS",
    "DreamSamplerError",
    "sample_tokens",
    "transfer_count",
    "row_transfer_counts",
    "select_positions",
    "select_positions_per_row",
    "RELEASE_CONFIG_DEFAULTS",
    "decode",
    "decode_options",
    "diffusion_generate",
    "DreamSampler",
    "DreamSamplerParams",
]

#: Names defined by :mod:`dare_dream.decoding` (torch), re-exported here and imported on first access.
_DECODING = (
    "DreamSamplerError",
    "sample_tokens",
    "transfer_count",
    "row_transfer_counts",
    "select_positions",
    "select_positions_per_row",
    "RELEASE_CONFIG_DEFAULTS",
    "decode",
    "decode_options",
    "diffusion_generate",
)

__getattr__, __dir__ = lazy_exports(__name__, dict.fromkeys(_DECODING, "dare_dream.decoding"))


class DreamSampler(Sampler):
    """Dream's diffusion_generate (origin / maskgit_plus / topk_margin / entropy), with trajectory and Fast-dLLM
    block decoding, KV cache and parallel decoding."""

    name = "dream"
    Params = DreamSamplerParams
    attention_kinds = ("full",)
    #: every draw (tokens, origin reveals, alg_temp positions) of a row comes from its own generator and is
    #: made only for that row's masked positions, so a row decodes the same in any batch (per-row counts)
    supports_row_generators = True

    def check(self, ctx, loc):
        problems = super().check(ctx, loc)
        if self.params.cache == "none":
            return problems  # nothing to import: validating a spec loads no torch
        from dare.sampling.checks import cache_problems

        return problems + cache_problems(self.params.cache, ctx.family, loc)

    def steps_per_block(self) -> int:
        """Block stride of ``unmask_step`` (one block of ``gen_length`` when ``block_length`` is null):
        ``block_length`` with threshold/factor, else the fixed schedule's ``steps // num_blocks``."""
        p = self.params
        block = p.gen_length if p.block_length is None else p.block_length
        return block if p.parallel else p.steps // (p.gen_length // block)

    def generate(self, model, family, tokens, prompt_ids, attention_mask=None, generator=None) -> SamplerOutput:
        """Decode ``gen_length`` tokens after ``prompt_ids`` ``[B, Lp]`` through ``family.logits`` (or its
        ``kv_logits`` with a cache).

        :returns: :class:`~dare.components.SamplerOutput`; ``nfe`` = forward passes (<= steps without a
            parallel rule); ``steps`` = the schedule's steps, or the steps run under ``threshold``/``factor``.
        :raises DareError: a cache the family cannot provide; :raises NonFiniteLogitsError: NaN/Inf logits.
        """
        from dare.sampling import completion_mask
        from dare.sampling.checks import bound_kv_logits
        from dare.sampling.options import DecodeOptions
        from dare_dream.decoding import decode

        p = self.params
        options = DecodeOptions(p, tokens, generator, bound_kv_logits("dream", p.cache, model, family))
        x, unmask_step, nfe = decode(lambda ids, am: family.logits(model, ids, am), prompt_ids, attention_mask, options)
        Lp = prompt_ids.shape[1]
        cmask = completion_mask(x[:, Lp:], tokens.stop_ids, family.pad_in_response)
        return SamplerOutput(
            sequences=x, prompt_length=Lp, completion_mask=cmask, unmask_step=unmask_step, nfe=nfe,
            steps=nfe if p.parallel else p.steps,
        )
