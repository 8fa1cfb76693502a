"""Entry point of ``dare-plugin-llada``: registers the LLaDA family and sampler."""

from dare import hookimpl

import dare_llada  # noqa: F401  (registers the Auto classes)
from dare_llada.family import LLaDAFamily
from dare_llada.sampler import LLaDASampler


@hookimpl
def register_model_families(register):
    register(LLaDAFamily)


@hookimpl
def register_samplers(register):
    register(LLaDASampler)
