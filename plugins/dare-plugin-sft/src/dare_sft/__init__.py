"""DARE plugin: masked-diffusion SFT (arXiv 2502.09992) for every model family.

``SFTTrainer`` is imported lazily, so listing plugins does not load the trainer stack.
"""

__all__ = ["SFTTrainer"]


def __getattr__(name):
    if name in __all__:
        from dare_sft import trainer

        return getattr(trainer, name)
    raise AttributeError(name)
