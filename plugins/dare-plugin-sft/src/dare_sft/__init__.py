"""DARE plugin: masked-diffusion SFT (arXiv 2502.09992) for every model family."""

from dare_sft.trainer import SFTConfig, SFTTrainer

__all__ = ["SFTConfig", "SFTTrainer"]
