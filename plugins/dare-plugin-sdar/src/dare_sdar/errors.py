"""Errors raised by the SDAR plugin (both are :class:`dare.errors.DareError` subclasses)."""

from __future__ import annotations

from dare.errors import CheckpointError, DareError

__all__ = ["SDARConfigError", "SDARInputError"]


class SDARConfigError(CheckpointError, ValueError):
    """A ``config.json`` value an SDAR model cannot be built from; the message names the key and the fix."""


class SDARInputError(DareError, ValueError):
    """A bad argument to an SDAR forward pass or decoder (shape, dtype, range); the message names it."""
