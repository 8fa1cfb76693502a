"""A cheap guard against decoding from non-finite logits (a diverged or corrupted checkpoint).

Without it a sampler fed NaN logits silently emits token 0 (``argmax`` of NaN) or leaves positions
masked (a NaN confidence is never selected), and evaluation reports a low score with no warning.
"""

from __future__ import annotations

import torch

from dare.errors import DareError

__all__ = ["NonFiniteLogitsError", "check_finite_logits"]


class NonFiniteLogitsError(DareError):
    """The model produced NaN or +Inf logits while decoding (the message names the step)."""


def check_finite_logits(logits: torch.Tensor, step: int, sampler: str) -> None:
    """Raise :class:`NonFiniteLogitsError` if an entry of ``logits`` is NaN or ``+inf``.

    ``-inf`` is allowed: it is a valid logit (probability 0, e.g. a vocabulary entry a model or a
    sampler rule excludes). One ``(logits < inf).all()`` reduction (a single host sync) per forward pass;
    NaN compares False, so it fails the test like ``+inf``.

    :param logits: the logits the step reads (any shape, float).
    :param step: global denoising step (0-based), for the message.
    :param sampler: sampler name, for the message.
    :raises NonFiniteLogitsError: some entry is NaN or +Inf.
    """
    if bool((logits < torch.inf).all()):
        return
    bad = int((~(logits < torch.inf)).sum())
    raise NonFiniteLogitsError(
        f"sampler {sampler!r}: the model produced non-finite logits (NaN or +Inf; {bad} of {logits.numel()} values "
        f"read at denoising step {step}). The checkpoint has most likely diverged during training or is corrupted "
        "(a NaN/Inf weight); decoding from it would silently emit arbitrary tokens. Check the run's loss and "
        "grad_norm logs, or load an earlier checkpoint."
    )
