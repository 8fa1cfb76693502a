"""The ``diffusiongemma`` sampler component: transformers' DiffusionGemma ``generate`` (entropy-bound canvas decoding,
linear temperature schedule, stable-and-confident stopping) as a DARE ``Sampler`` with per-row random streams
(the algorithm and its source: :mod:`dare_diffusiongemma.decoding`). Torch is imported when it decodes."""

from __future__ import annotations

from dare.components import Sampler, SamplerOutput

from dare_diffusiongemma.params import DiffusionGemmaSamplerParams

__all__ = ["DiffusionGemmaSampler", "DiffusionGemmaSamplerParams"]


class DiffusionGemmaSampler(Sampler):
    """DiffusionGemma canvas decoding, token for token transformers' ``generate`` for each row alone."""

    name = "diffusiongemma"
    Params = DiffusionGemmaSamplerParams
    attention_kinds = ("block",)
    #: each row draws its canvas, proposals and re-noising from its own generator while its canvas runs
    supports_row_generators = True

    def check(self, ctx, loc: str) -> list[tuple[str, str]]:
        """Besides the attention kind: the family must run the encoder/canvas forwards, and ``gen_length`` must be a
        multiple of the model's ``canvas_length``."""
        problems = super().check(ctx, loc)
        family = ctx.family
        if problems or family is None:
            return problems
        if not hasattr(family, "canvas_logits"):
            return [(f"{loc}.name", f"sampler {self.name!r} decodes DiffusionGemma-style canvases (an encoder KV cache "
                                    f"and a self-conditioned canvas decoder); model family {family.name!r} has none: use "
                                    f"{family.default_sampler!r}")]
        canvas = getattr(ctx.model_config, "canvas_length", None) if ctx.model_config is not None else None
        if canvas and self.params.gen_length % int(canvas) != 0:
            problems.append((f"{loc}.params.gen_length", f"gen_length ({self.params.gen_length}) must be a multiple of "
                                                         f"the model's canvas_length {canvas} (config.json): the decoder "
                                                         "writes whole canvases"))
        return problems

    def steps_per_block(self) -> int:
        """Block stride of ``unmask_step``: ``max_denoising_steps`` (canvas ``k`` numbers its steps ``k N + s``)."""
        return int(self.params.max_denoising_steps)

    def generate(self, model, family, tokens, prompt_ids, attention_mask=None, generator=None) -> SamplerOutput:
        """Decode ``prompt_ids`` ``[B, Lp]`` (left-padded; ``attention_mask`` ``[B, Lp]``). ``nfe`` counts decoder
        forwards; ``extras['encoder_forwards']`` the encoder calls (the prompt, then each canvas but the last).

        :raises ValueError: ``gen_length`` is not a multiple of the model's ``canvas_length``.
        """
        import torch

        from dare.sampling import completion_mask
        from dare.sampling.options import DecodeOptions
        from dare_diffusiongemma.decoding import canvas_decode

        with torch.no_grad():
            options = DecodeOptions(self.params, tokens, generator)
            res = canvas_decode(model, family, prompt_ids, attention_mask, options)
        return SamplerOutput(
            sequences=torch.cat([prompt_ids, res.completion], dim=1),
            prompt_length=prompt_ids.shape[1],
            completion_mask=completion_mask(res.completion, tokens.stop_ids, family.pad_in_response),
            unmask_step=res.unmask_step,
            nfe=res.nfe,
            steps=res.steps,
            extras={"encoder_forwards": res.encoder_forwards},
        )
