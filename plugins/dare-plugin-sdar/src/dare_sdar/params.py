"""The ``sdar`` sampler's parameters and remasking strategies (torch-free: validating a spec imports no torch),
read by the component (:mod:`dare_sdar.sampler`) and the decoder (:mod:`dare_sdar.decoding`)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from dare.components import Params

__all__ = ["REMASKING_STRATEGIES", "SDARSamplerParams"]

REMASKING_STRATEGIES = ("low_confidence_dynamic", "low_confidence_static", "sequential")


class SDARSamplerParams(Params):
    """Parameters of the ``sdar`` sampler (defaults: the SDAR README's greedy setting, block 4 / 4 steps,
    ``low_confidence_dynamic`` at 0.9)."""

    gen_length: int = Field(256, gt=0, description="Completion length in tokens; a multiple of block_length.")
    block_length: int = Field(
        4, gt=0, description="Decoding block length; a multiple of the model's training block size (4 for SDAR)."
    )
    denoising_steps: int = Field(4, gt=0, description="Denoising steps per block (<= block_length).")
    temperature: float = Field(
        0.0, ge=0.0, description="Softmax temperature; 0 = greedy (argmax, confidence = softmax prob)."
    )
    top_k: int = Field(0, ge=0, description="Top-k filter before sampling (0 = off).")
    top_p: float = Field(1.0, gt=0.0, le=1.0, description="Nucleus (top-p) filter before sampling (1.0 = off).")
    remasking: Literal["low_confidence_dynamic", "low_confidence_static", "sequential"] = Field(
        "low_confidence_dynamic", description="Which masked positions a step commits."
    )
    confidence_threshold: float = Field(
        0.9, ge=0.0, le=1.0, description="low_confidence_dynamic: commit every proposal above this confidence."
    )
    use_cache: bool = Field(True, description="KV cache of committed blocks (False recomputes the prefix every step).")
    stop_at_eos: bool = Field(True, description="Stop a row after the block that produced EOS or end-of-turn.")

    @model_validator(mode="after")
    def _blocks(self):
        if self.gen_length % self.block_length != 0:
            raise ValueError(
                f"gen_length ({self.gen_length}) must be a multiple of block_length ({self.block_length}): "
                "the decoder commits whole blocks, so a partial last block would be cut off"
            )
        if self.denoising_steps > self.block_length:
            raise ValueError(
                f"denoising_steps ({self.denoising_steps}) must be <= block_length ({self.block_length}): "
                "each step commits at least one token of the block"
            )
        return self
