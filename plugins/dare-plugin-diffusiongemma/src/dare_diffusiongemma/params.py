"""The ``diffusiongemma`` sampler's parameters (torch-free: validating a spec imports no torch), read by the
component (:mod:`dare_diffusiongemma.sampler`) and the decoder (:mod:`dare_diffusiongemma.decoding`).

Defaults are transformers' ``DiffusionGemmaGenerationConfig._get_default_generation_params`` (48 steps, entropy bound
0.1, temperatures 0.8 -> 0.4, stability 1, confidence 0.005).
"""

from __future__ import annotations

from pydantic import Field, model_validator

from dare.components import Params

__all__ = ["DiffusionGemmaSamplerParams"]


class DiffusionGemmaSamplerParams(Params):
    """Parameters of the ``diffusiongemma`` sampler (transformers' ``DiffusionGemmaGenerationConfig`` names)."""

    gen_length: int = Field(256, gt=0, description="Completion length in tokens (max_new_tokens); a multiple of the "
                                                   "model's canvas_length: the decoder writes whole canvases.")
    max_denoising_steps: int = Field(48, gt=0, description="Denoising steps per canvas at most (N).")
    entropy_bound: float = Field(0.1, gt=0.0, description="A step accepts the k lowest-entropy proposals with "
                                                          "sum(entropy) - max(entropy) <= entropy_bound.")
    t_min: float = Field(0.4, ge=0.0, description="Temperature at the last step of the linear schedule.")
    t_max: float = Field(0.8, ge=0.0, description="Temperature at the first step of the linear schedule.")
    stability_threshold: int | None = Field(1, ge=0, description="Stop a canvas once its argmax stayed the same for "
                                                                "this many steps and is confident (None: never stop early).")
    confidence_threshold: float | None = Field(0.005, gt=0.0, description="... and the mean entropy of the "
                                                                          "temperature-scaled logits is below this.")
    stop_at_eos: bool = Field(True, description="Stop a row after the canvas that produced EOS or end-of-turn; "
                                                "tokens after it become padding.")

    @model_validator(mode="after")
    def _schedule(self):
        if self.t_max <= self.t_min:
            raise ValueError(f"t_max ({self.t_max}) must be > t_min ({self.t_min}): the temperature falls linearly "
                             "from t_max at the first step to t_min at the last")
        if (self.stability_threshold is None) != (self.confidence_threshold is None):
            raise ValueError("stability_threshold and confidence_threshold go together: set both (adaptive stopping) "
                             "or neither")
        return self
