"""Packaged data needed offline (the quickstart's Sudoku puzzles). ``dare://<name>`` in a spec."""

from __future__ import annotations

from pathlib import Path

__all__ = ["path"]

_ROOT = Path(__file__).parent


def path(name: str) -> Path:
    """Filesystem path of a packaged asset (``name`` relative to ``dare/assets``)."""
    return _ROOT / name
