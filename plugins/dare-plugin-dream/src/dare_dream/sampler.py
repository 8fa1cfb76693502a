"""The ``dream`` sampler component: Dream's official masked-diffusion decoder (``diffusion_generate``) with
Fast-dLLM acceleration, as a DARE ``Sampler`` (the algorithm and its sources: :mod:`dare_dream.decoding`).

This module holds the ``alg`` values, the parameters and the component class, and imports torch only when a
sampler decodes, so validating a spec imports no torch. The decoder's functions (``decode``,
``diffusion_generate``, ``sample_tokens``, ...) are re-exported from :mod:`dare_dream.decoding` (imported on
first access).
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from dare.components import Params, Sampler, SamplerOutput
from dare.errors import DareError
from dare.lazy import lazy_exports

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
    "diffusion_generate",
)

__getattr__, __dir__ = lazy_exports(__name__, dict.fromkeys(_DECODING, "dare_dream.decoding"))


Algorithm = Literal["origin", "maskgit_plus", "topk_margin", "entropy"]
Confidence = Literal["probability", "margin", "neg_entropy"]

#: The official ``alg`` values and the confidence each one ranks positions by (``origin`` ranks none).
ALGORITHMS: dict[str, Confidence | None] = {
    "origin": None,
    "maskgit_plus": "probability",
    "topk_margin": "margin",
    "entropy": "neg_entropy",
}


class DreamSamplerParams(Params):
    """Parameters of :class:`DreamSampler`, named as the release's ``diffusion_generate`` arguments
    (``gen_length`` is its ``max_new_tokens``). Defaults follow the Dream README call (``alg="entropy"``,
    ``steps = gen_length``) with the checkpoint's stated sampling settings (``generation_config.json``:
    greedy, ``top_k`` and ``top_p`` off); the release itself would apply ``top_k=50`` when the caller omits
    it (module docstring, "Generation defaults"): set ``top_k: 50`` to match numbers produced with it.

    Cross-field rules: ``alg_temp`` is only meaningful for the confidence algs; ``block_length`` divides
    ``gen_length`` and ``steps`` is a multiple of the number of blocks; at most one of
    ``threshold``/``factor``, which need ``alg: maskgit_plus`` without ``alg_temp``.
    """

    gen_length: int = Field(256, gt=0, description="Completion length in tokens (Dream's max_new_tokens).")
    steps: int = Field(256, gt=0, description="Denoising steps (one forward each; NFE <= steps). Not the per-step "
                       "count under threshold/factor.")
    eps: float = Field(1e-3, ge=0.0, lt=1.0, description="Final mask ratio: the schedule is linspace(1, eps, steps+1).")
    alg: Algorithm = Field(
        "entropy",
        description="origin (random reveal) or a confidence order: maskgit_plus (probability), topk_margin, entropy.",
    )
    alg_temp: float | None = Field(
        None,
        ge=0.0,
        description="Confidence algs only: None/0 commits the top-n, > 0 samples from softmax(conf / alg_temp).",
    )
    temperature: float = Field(0.0, ge=0.0, description="Token sampling temperature (0 = argmax).")
    top_p: float | None = Field(None, gt=0.0, le=1.0, description="Nucleus mass (None = off).")
    top_k: int | None = Field(
        None, ge=1, description="Keep the k most likely tokens (None = off, as generation_config.json states; the "
        "release applies 50 when the caller omits it).")
    release_quirks: bool = Field(
        False,
        description="Reproduce the release exactly, including its batch-mean commit count, short-row overwrite and "
        "bf16 argmax fallback (dare_dream.sampler docstring). Off: per-row counts (batch-invariant).",
    )
    block_length: int | None = Field(
        None, gt=0, description="Decode in blocks of this many tokens, steps / num_blocks steps each (Fast-dLLM's "
        "Dream block decoding); None = one block (the release).")
    cache: Literal["none", "prefix", "dual"] = Field(
        "none", description="Fast-dLLM block-wise KV cache: none, prefix or dual (dare.sampling.kv_cache).")
    threshold: float | None = Field(
        None, gt=0.0, le=1.0, description="Fast-dLLM parallel decoding: commit every masked token of the block whose "
        "probability >= threshold (at least the most confident) per step; needs alg: maskgit_plus.")
    factor: float | None = Field(
        None, gt=0.0, description="Fast-dLLM factor rule: commit the n most probable with (n+1)(1 - c_(n)) <= factor; "
        "needs alg: maskgit_plus.")
    refresh_commit: Literal["rule", "first"] = Field(
        "rule", description="With a cache, what a block's refresh step commits: 'rule' (the step's rule over the "
        "block, as LLaDA) or 'first' (only the block's first position, as Fast-dLLM's Dream code).")

    @model_validator(mode="after")
    def _cross_fields(self):
        if self.alg == "origin" and self.alg_temp not in (None, 0):
            raise ValueError(
                "alg_temp only applies to maskgit_plus, topk_margin and entropy (origin reveals positions at random); "
                "remove alg_temp or choose one of those algs"
            )
        if self.block_length is not None:
            if self.gen_length % self.block_length:
                raise ValueError(
                    f"gen_length ({self.gen_length}) must be a multiple of block_length ({self.block_length})"
                )
            nb = self.gen_length // self.block_length
            if self.steps % nb:
                raise ValueError(f"steps ({self.steps}) must be a multiple of gen_length / block_length ({nb})")
        if self.threshold is not None and self.factor is not None:
            raise ValueError("give at most one of threshold and factor (two parallel-decoding rules)")
        if self.parallel and (self.alg != "maskgit_plus" or self.alg_temp not in (None, 0)):
            raise ValueError(
                "threshold/factor rank positions by the proposal's probability (Fast-dLLM's confidence_threshold): "
                f"set alg: maskgit_plus and no alg_temp (got alg {self.alg!r}, alg_temp {self.alg_temp})"
            )
        return self

    @property
    def parallel(self) -> bool:
        return self.threshold is not None or self.factor is not None


class DreamSampler(Sampler):
    """Dream's diffusion_generate (origin / maskgit_plus / topk_margin / entropy), with trajectory and Fast-dLLM
    block decoding, KV cache and parallel decoding."""

    name = "dream"
    Params = DreamSamplerParams
    attention_kinds = ("full",)
    #: every draw (tokens, origin reveals, alg_temp positions) of a row comes from its own generator and is
    #: made only for that row's masked positions, so a row decodes the same in any batch (per-row counts)
    supports_row_generators = True

    def _kv_logits(self, model, family):
        """The family's cached forward bound to ``model`` when ``cache`` is on, else None.

        :raises DareError: a cache was asked for but the family has no ``kv_logits``.
        """
        if self.params.cache == "none":
            return None
        from dare.sampling import kv_logits_of

        fn = kv_logits_of(family)
        if fn is None:
            raise DareError(
                f"sampler dream: cache {self.params.cache!r} needs the model family's cached forward (kv_logits), which "
                f"family {family.name!r} does not provide; use cache: none"
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
        from dare_dream.decoding import decode

        p = self.params
        x, unmask_step, nfe = decode(
            lambda ids, am: family.logits(model, ids, am),
            prompt_ids,
            attention_mask,
            tokens.mask_id,
            max_new_tokens=p.gen_length,
            steps=p.steps,
            eps=p.eps,
            alg=p.alg,
            alg_temp=p.alg_temp,
            temperature=p.temperature,
            top_p=p.top_p,
            top_k=p.top_k,
            generator=generator,
            release_quirks=p.release_quirks,
            block_length=p.block_length,
            cache=p.cache,
            kv_logits=self._kv_logits(model, family),
            threshold=p.threshold,
            factor=p.factor,
            refresh_commit=p.refresh_commit,
        )
        Lp = prompt_ids.shape[1]
        cmask = completion_mask(x[:, Lp:], tokens.stop_ids, family.pad_in_response)
        return SamplerOutput(
            sequences=x, prompt_length=Lp, completion_mask=cmask, unmask_step=unmask_step, nfe=nfe,
            steps=nfe if p.parallel else p.steps,
        )
