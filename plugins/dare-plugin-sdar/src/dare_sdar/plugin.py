"""Entry point of ``dare-plugin-sdar``: registers the SDAR family and its block decoder."""

from dare import hookimpl

import dare_sdar  # noqa: F401  (registers the Auto classes)
from dare_sdar.family import SDARFamily
from dare_sdar.sampler import SDARSampler


@hookimpl
def register_model_families(register):
    register(SDARFamily)


@hookimpl
def register_samplers(register):
    register(SDARSampler)
