"""Entry point of ``dare-plugin-diffusiongemma``: registers the DiffusionGemma family and its sampler.

Lazy references (:mod:`dare.plugins.hookspecs`): the family and sampler modules are imported when a spec or command
first uses them, and :mod:`dare_diffusiongemma.auto` (transformers) when DARE first reads or creates a checkpoint.
"""

from dare import hookimpl


@hookimpl
def register_model_families(register):
    register("dare_diffusiongemma.family:DiffusionGemmaFamily")


@hookimpl
def register_samplers(register):
    register("dare_diffusiongemma.sampler:DiffusionGemmaSampler")


@hookimpl
def register_auto_classes():
    import dare_diffusiongemma.auto  # noqa: F401  (importing it maps diffusion_gemma to the block-diffusion head)
