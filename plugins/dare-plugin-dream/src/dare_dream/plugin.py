"""Entry point of ``dare-plugin-dream``: registers the Dream family and sampler.

Lazy references (see :mod:`dare.plugins.hookspecs`): ``dare_dream.family`` and ``dare_dream.sampler`` are
imported when a spec or command first uses them, and ``dare_dream.auto`` (transformers) when DARE
first reads or creates a checkpoint, so listing plugins does not import torch.
"""

from dare import hookimpl


@hookimpl
def register_model_families(register):
    register("dare_dream.family:DreamFamily")


@hookimpl
def register_samplers(register):
    register("dare_dream.sampler:DreamSampler")


@hookimpl
def register_auto_classes():
    import dare_dream.auto  # noqa: F401  (importing it registers Dream's transformers classes)
