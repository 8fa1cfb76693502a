"""Entry point of ``dare-plugin-llada``: registers the LLaDA family and sampler.

Lazy references (see :mod:`dare.plugins.hookspecs`): ``dare_llada.family`` and ``dare_llada.sampler`` are
imported when a spec or command first uses them, and ``dare_llada.auto`` (transformers) when DARE
first reads or creates a checkpoint, so listing plugins does not import torch.
"""

from dare import hookimpl


@hookimpl
def register_model_families(register):
    register("dare_llada.family:LLaDAFamily")


@hookimpl
def register_samplers(register):
    register("dare_llada.sampler:LLaDASampler")


@hookimpl
def register_auto_classes():
    import dare_llada.auto  # noqa: F401  (importing it registers LLaDA's transformers classes)
