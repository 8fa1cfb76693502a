"""Entry point of ``dare-plugin-dream``: registers the Dream family and sampler."""

from dare import hookimpl

import dare_dream  # noqa: F401  (registers the Auto classes)
from dare_dream.family import DreamFamily
from dare_dream.sampler import DreamSampler


@hookimpl
def register_model_families(register):
    register(DreamFamily)


@hookimpl
def register_samplers(register):
    register(DreamSampler)
