"""Entry point of ``dare-plugin-llada2``: registers the LLaDA2.x family and its block decoder."""

from dare import hookimpl

import dare_llada2  # noqa: F401  (registers the Auto classes)
from dare_llada2.family import LLaDA2Family
from dare_llada2.sampler import LLaDA2Sampler


@hookimpl
def register_model_families(register):
    register(LLaDA2Family)


@hookimpl
def register_samplers(register):
    register(LLaDA2Sampler)
