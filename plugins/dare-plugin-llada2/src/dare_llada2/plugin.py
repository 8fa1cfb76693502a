"""Entry point of ``dare-plugin-llada2``: registers the LLaDA2.x family and its block decoder.

Lazy references (see :mod:`dare.plugins.hookspecs`): ``dare_llada2.family`` and ``dare_llada2.sampler`` are
imported when a spec or command first uses them, and ``dare_llada2.auto`` (transformers) when DARE
first reads or creates a checkpoint, so listing plugins does not import torch.
"""

from dare import hookimpl


@hookimpl
def register_model_families(register):
    register("dare_llada2.family:LLaDA2Family")


@hookimpl
def register_samplers(register):
    register("dare_llada2.sampler:LLaDA2Sampler")


@hookimpl
def register_auto_classes():
    import dare_llada2.auto  # noqa: F401  (importing it registers LLaDA2's transformers classes)
