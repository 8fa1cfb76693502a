"""The ``sft`` objective: masked-diffusion supervised fine-tuning on ``data.train``."""

from __future__ import annotations

from pydantic import Field

from dare.components import Params
from dare.trainers.supervised import SupervisedObjective

__all__ = ["SFT", "SFTParams"]


class SFTParams(Params):
    mask_eps: float = Field(1e-3, ge=0.0, lt=1.0, description="Smallest mask ratio: t = (1 - eps) u + eps.")
    block_length: int | None = Field(
        None, ge=1,
        description="Blockwise SFT (arXiv 2508.19529): per example one active response block of this many tokens is "
                    "masked with ratio t, earlier blocks stay clean, later ones are hidden (masked, not in the loss); "
                    "set it to the sampler's block_length. None: classic LLaDA SFT (the whole response masked).")
    padding_block_weight: float = Field(
        1.0, gt=0.0, le=1.0,
        description="Blockwise SFT only: relative probability of drawing, as the active block, a block whose response "
                    "tokens are all end-of-sequence padding (EOS/EOT, as in LLaDA's EOS-padded SFT data); other "
                    "blocks have weight 1. 1: uniform over blocks (the paper). Below 1, long EOS-padded responses "
                    "spend more steps on their content blocks and still train the padding blocks.")
    self_conditioning_p: float = Field(
        0.5, ge=0.0, le=1.0,
        description="Uniform-noise families (DiffusionGemma) only: probability that an example's second decoder pass "
                    "is self-conditioned on the first pass's logits (NeMo AutoModel dllm.self_conditioning_p).")
    encoder_loss_weight: float = Field(
        1.0, ge=0.0,
        description="Uniform-noise families (DiffusionGemma) only: weight of the encoder's autoregressive loss added to "
                    "the canvas cross-entropy (NeMo AutoModel dllm.encoder_loss_weight).")


class SFT(SupervisedObjective):
    """Masked-diffusion SFT (LLaDA, arXiv 2502.09992): CE/t on masked response tokens / response length.

    For a uniform-noise family (DiffusionGemma), NeMo AutoModel's recipe: flat canvas CE plus the encoder's AR loss.

    With ``block_length``, Blockwise SFT (arXiv 2508.19529): the same on one active response block per
    example, divided by that block's length (:mod:`dare_sft.trainer`)."""

    name = "sft"
    Params = SFTParams
    forward_processes = ("mask", "uniform")

    def check(self, ctx, loc: str) -> list[tuple[str, str]]:
        problems = super().check(ctx, loc)
        fam = ctx.family
        if self.params.block_length is not None and fam is not None and fam.attention == "block":
            problems.append((f"{loc}.params.block_length",
                             f"Blockwise SFT is for full-attention families decoded in blocks (LLaDA, Dream); model "
                             f"family {fam.name!r} is block diffusion: its [x_t ; x_0] training already scores every "
                             "block against a clean prefix on its own block grid. Remove block_length"))
        if fam is not None and getattr(fam, "forward_process", "mask") == "uniform" and self.params.block_length is not None:
            problems.append((f"{loc}.params.block_length",
                             f"Blockwise SFT masks blocks with [MASK]; model family {fam.name!r} trains with uniform "
                             "noise on one canvas per example (NeMo AutoModel's recipe). Remove block_length"))
        if self.params.padding_block_weight != 1.0 and self.params.block_length is None:
            problems.append((f"{loc}.params.padding_block_weight",
                             "padding_block_weight weights the active-block draw of Blockwise SFT, but block_length "
                             "is not set (classic SFT masks the whole response). Set block_length to the sampler's "
                             "block length, or remove padding_block_weight"))
        return problems

    def trainer_class(self) -> type:
        from dare_sft.trainer import SFTTrainer  # the trainer stack loads only when training

        return SFTTrainer
