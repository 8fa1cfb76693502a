"""The sandbox's error type."""

from __future__ import annotations

from dare.errors import DareError

__all__ = ["SandboxError"]


class SandboxError(DareError):
    """The sandbox cannot run here as configured, or its runner failed (never raised because the
    program under test misbehaved: that is a failed result)."""
