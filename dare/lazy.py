"""Lazy re-exports (PEP 562): a package or module names its public objects, imported on first access.

Used where importing the defining module would pull in torch although the caller needs only torch-free
names: :mod:`dare.modeling`, :mod:`dare.eval` and the family plugins' ``sampler`` modules, whose decoding
loops live in a ``decoding`` module (docs/architecture.md, "Start-up").
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Mapping

__all__ = ["lazy_exports"]


def lazy_exports(module: str, home: Mapping[str, str]) -> tuple[Callable[[str], object], Callable[[], list[str]]]:
    """``(__getattr__, __dir__)`` for ``module``: each name of ``home`` is looked up in the module ``home[name]``
    (an absolute module name) when first accessed; nothing is imported before.

    :param module: the ``__name__`` of the module that assigns the two functions.
    :param home: public name -> absolute name of the module that defines it.
    :raises AttributeError: (from ``__getattr__``) a name that is neither defined nor in ``home``.
    """

    def __getattr__(name: str) -> object:
        if name not in home:
            raise AttributeError(f"module {module!r} has no attribute {name!r}")
        return getattr(importlib.import_module(home[name]), name)

    def __dir__() -> list[str]:
        return sorted(set(vars(sys.modules[module])) | set(home))

    return __getattr__, __dir__
