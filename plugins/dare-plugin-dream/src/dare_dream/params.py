"""The ``dream`` sampler's parameters and ``alg`` values (torch-free: validating a spec imports no torch), read by
the component (:mod:`dare_dream.sampler`) and the decoder (:mod:`dare_dream.decoding`)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from dare.components import Params

__all__ = ["ALGORITHMS", "Algorithm", "Confidence", "DreamSamplerParams"]


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
    it (:mod:`dare_dream.decoding` docstring, "Generation defaults"): set ``top_k: 50`` to match numbers produced with it.

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
        "bf16 argmax fallback (dare_dream.decoding docstring). Off: per-row counts (batch-invariant).",
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
