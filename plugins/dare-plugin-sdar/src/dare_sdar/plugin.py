"""Entry point of ``dare-plugin-sdar``: registers the SDAR family and its block decoder.

Lazy references (see :mod:`dare.plugins.hookspecs`): ``dare_sdar.family`` and ``dare_sdar.sampler`` are
imported when a spec or command first uses them, and ``dare_sdar.auto`` (transformers) when DARE
first reads or creates a checkpoint, so listing plugins does not import torch.
"""

from dare import hookimpl


@hookimpl
def register_model_families(register):
    register("dare_sdar.family:SDARFamily")


@hookimpl
def register_samplers(register):
    register("dare_sdar.sampler:SDARSampler")


@hookimpl
def register_auto_classes():
    import dare_sdar.auto  # noqa: F401  (importing it registers SDAR's transformers classes)
