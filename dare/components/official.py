"""The official settings of an objective, one switch away: ``params.preset: official``.

Each objective's ``Params`` may derive from :class:`OfficialParams` and list, in ``official``, the values
the released trainer of its paper uses (:class:`OfficialSetting`: the parameter, the official value, where
it comes from, and why DARE's default differs). ``preset: official`` sets every listed value the spec did
not set explicitly; a value the spec sets explicitly wins and is reported (a warning, and
:meth:`OfficialParams.preset_kept`). ``preset: dare`` (the default) changes nothing, so DARE's defaults
and the examples built on them stay as they are. ``dare plugins NAME`` prints the official value beside
each default (:func:`dare.paramdocs.official_values`); docs/algorithms.md §10 has the same tables with
their citations.

A release may train several model families with different trainers (TraceRL: ``rl_llada.py`` for LLaDA,
``rl_sdar.py`` for SDAR). A row then names its ``family``; ``preset: official`` takes, for each parameter, the
row of the spec's model family (the spec resolution validates an objective's params with the validation context
``{"family": <family name>}``), else the row without a family. A family the table has no rows for (or no family
known, e.g. ``Params.model_validate`` without a context) takes the rows of the table's first family.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any, ClassVar, Literal

from pydantic import Field, PrivateAttr, ValidationInfo, model_validator

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
    * ``why``: why DARE's default differs ("" when it does not);
    * ``family``: the model family (``ModelFamily.name``) whose release trainer the row comes from; None = every
      family the release trains.
    """

    param: str
    value: Any
    source: str
    why: str = ""
    family: str | None = None


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
    def official_families(cls) -> tuple[str, ...]:
        """The model families the table has rows of its own for, in table order (empty: one set for every family)."""
        return tuple(dict.fromkeys(s.family for s in cls.official if s.family is not None))

    @classmethod
    def official_settings(cls, family: str | None = None) -> dict[str, OfficialSetting]:
        """``{param: row}`` that ``preset: official`` applies for ``family`` (module docstring): the family's own row,
        else the row without a family; an unknown or absent family takes the first family's rows."""
        families = cls.official_families()
        if families and family not in families:
            family = families[0]
        out: dict[str, OfficialSetting] = {}
        for s in cls.official:
            if s.family is None:
                out.setdefault(s.param, s)
            elif s.family == family:
                out[s.param] = s
        return out

    @classmethod
    def official_values(cls, family: str | None = None) -> dict[str, Any]:
        """``{param: official value}`` of this objective for ``family`` (:meth:`official_settings`; empty when it has
        no official release)."""
        return {k: s.value for k, s in cls.official_settings(family).items()}

    @model_validator(mode="wrap")
    @classmethod
    def _apply_preset(cls, data: Any, handler, info: ValidationInfo):
        if not (isinstance(data, dict) and data.get("preset") == "official"):
            return handler(data)
        context = info.context if isinstance(info.context, dict) else {}
        table = cls.official_values(context.get("family"))
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
