"""The official settings of an objective, one switch away: ``params.preset: official``.

Each objective's ``Params`` may derive from :class:`OfficialParams` and list, in ``official``, the values
the released trainer of its paper uses (:class:`OfficialSetting`: the parameter, the official value, where
it comes from, and why DARE's default differs). ``preset: official`` sets every listed value the spec did
not set explicitly; a value the spec sets explicitly wins and is reported (a warning, and
:meth:`OfficialParams.preset_kept`). ``preset: dare`` (the default) changes nothing, so DARE's defaults
and the examples built on them stay as they are. ``dare plugins NAME`` prints the official value beside
each default (:func:`dare.paramdocs.official_values`); docs/algorithms.md §10 has the same tables with
their citations.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any, ClassVar, Literal

from pydantic import Field, PrivateAttr, model_validator

from dare.components.base import Params

__all__ = ["OfficialSetting", "OfficialParams", "Preset"]

log = logging.getLogger("dare.official")

Preset = Literal["dare", "official"]


@dataclass(frozen=True)
class OfficialSetting:
    """One official value of an objective parameter.

    * ``param``: the ``Params`` field; ``value``: its value in the official release (JSON-like);
    * ``source``: ``owner/repo@commit:path:line`` of the released code or config, or a paper section
      (``arXiv 2504.12216 §4``) where no code is released;
    * ``why``: why DARE's default differs ("" when it does not).
    """

    param: str
    value: Any
    source: str
    why: str = ""


class OfficialParams(Params):
    """A ``Params`` base with the ``preset`` switch (module docstring). Subclasses fill ``official``."""

    official: ClassVar[tuple[OfficialSetting, ...]] = ()

    preset: Preset = Field(
        "dare",
        description="dare = DARE's defaults; official = the released trainer's settings for every parameter not set "
        "explicitly (an explicit value wins and is reported; `dare plugins NAME` lists them).",
    )
    _preset_kept: tuple[str, ...] = PrivateAttr(default=())

    @classmethod
    def official_values(cls) -> dict[str, Any]:
        """``{param: official value}`` of this objective (empty when it has no official release)."""
        return {s.param: s.value for s in cls.official}

    @model_validator(mode="wrap")
    @classmethod
    def _apply_preset(cls, data: Any, handler):
        if not (isinstance(data, dict) and data.get("preset") == "official"):
            return handler(data)
        table = cls.official_values()
        kept = tuple(sorted(k for k in table if k in data and data[k] != table[k]))
        out = handler({**table, **data})
        out._preset_kept = kept
        if kept:
            log.warning("preset official: keeping the explicit %s (official: %s)",
                        ", ".join(f"{k}={data[k]!r}" for k in kept), ", ".join(f"{k}={table[k]!r}" for k in kept))
        return out

    def preset_kept(self) -> tuple[str, ...]:
        """Parameters set explicitly to a non-official value under ``preset: official`` (sorted)."""
        return self._preset_kept
