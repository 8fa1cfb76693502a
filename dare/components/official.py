"""The official settings of an objective, one switch away: ``params.preset: official``.

Each objective's ``Params`` may derive from :class:`OfficialParams` and list, in ``official``, the values
the released trainer of its paper uses (:class:`OfficialSetting`: the parameter, the official value, where
it comes from, why DARE's default differs, and the model family or families the row is for). A release
trains one or more model families (``official_families``, e.g. d1 trains LLaDA only; TraceRL has one
trainer per family): ``preset: official`` resolves the rows of the spec's model family (the spec resolution
passes it as the validation context ``{"family": name}``), sets every listed value the spec did not set
explicitly, and refuses, by name, a family the release did not train. A value the spec sets explicitly
wins and is reported (a warning, and :meth:`OfficialParams.preset_kept`). ``preset: dare`` (the default)
changes nothing, so DARE's defaults and the examples built on them stay as they are. ``dare plugins NAME``
prints the official value beside each default, per family, with the file each family's rows come from
(:func:`dare.plugins.paramdocs.official_values`); docs/algorithms.md §10 has the same tables with their citations.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any, ClassVar, Literal

from pydantic import Field, PrivateAttr, ValidationInfo, model_validator

from dare.components.base import Params

__all__ = ["OfficialSetting", "OfficialParams", "Preset", "source_file"]

log = logging.getLogger("dare.official")

Preset = Literal["dare", "official"]


def source_file(source: str) -> str:
    """The file of an :class:`OfficialSetting` source: ``owner/repo@commit:path:line`` -> ``owner/repo@commit:path``
    (line numbers dropped); a paper section (``arXiv 2504.12216 §4``) is returned as it is."""
    parts = source.split(":")
    if "@" not in parts[0] or len(parts) < 2:
        return source
    keep = [p for p in parts[1:] if not p.replace("-", "").replace(",", "").strip().isdigit()]
    return ":".join([parts[0], *keep])


@dataclass(frozen=True)
class OfficialSetting:
    """One official value of an objective parameter.

    * ``param``: the ``Params`` field; ``value``: its value in the official release (JSON-like);
    * ``source``: ``owner/repo@commit:path:line`` of the released code or config, or a paper section
      (``arXiv 2504.12216 §4``) where no code is released;
    * ``why``: why DARE's default differs ("" when it does not);
    * ``family``: the model family (``"sdar"``) or families (``("llada", "dream")``) whose released trainer
      uses this value; None (the default) = every family of the objective's ``official_families``.
    """

    param: str
    value: Any
    source: str
    why: str = ""
    family: str | tuple[str, ...] | None = None

    @property
    def families(self) -> tuple[str, ...]:
        """``family`` as a tuple (empty: every family the release trained)."""
        if self.family is None:
            return ()
        return (self.family,) if isinstance(self.family, str) else tuple(self.family)

    def applies_to(self, family: str) -> bool:
        """Whether this row is the release's value for the model family ``family``."""
        return not self.families or family in self.families


class OfficialParams(Params):
    """A ``Params`` base with the ``preset`` switch (module docstring). Subclasses fill ``official`` and, where
    the release trains named model families only, ``official_families`` (the first is the paper's main family:
    the table shown, and used, when no model family is known, e.g. ``Params(preset="official")`` in Python)."""

    official: ClassVar[tuple[OfficialSetting, ...]] = ()
    #: The model families whose released trainer the table holds (``ModelFamily.name``; the families the release
    #: trains, or those of them compared so far); () = not recorded: the rows apply to any family, none is refused.
    official_families: ClassVar[tuple[str, ...]] = ()

    preset: Preset = Field(
        "dare",
        description="dare = DARE's defaults; official = the released trainer's settings for the spec's model family, "
        "for every parameter not set explicitly (an explicit value wins and is reported; a family the release did not "
        "train is refused; `dare plugins NAME` lists them per family).",
    )
    _preset_kept: tuple[str, ...] = PrivateAttr(default=())
    _preset_family: str | None = PrivateAttr(default=None)

    # ------------------------------------------------------------------ the table
    @classmethod
    def official_table_families(cls) -> tuple[str, ...]:
        """The families the official table distinguishes: ``official_families``, else every family a row names,
        else ``("",)`` (one table for any family)."""
        if cls.official_families:
            return cls.official_families
        named = tuple(dict.fromkeys(f for s in cls.official for f in s.families))
        return named or ("",)

    @classmethod
    def official_family(cls, family: str | None = None) -> str | None:
        """The family whose rows ``preset: official`` uses for a model of ``family`` (None: unknown -> the
        release's main family); None when the table has no family rows at all.

        :raises ValueError: ``family`` is not among ``official_families`` (the message names the release, the
            families its table holds, and the fix).
        """
        if not cls.official_families:
            return family if family is not None else (cls.official_table_families()[0] or None)
        if family is None:
            return cls.official_families[0]
        if family in cls.official_families:
            return family
        repos = sorted({s.source.split("@")[0] for s in cls.official if "@" in s.source}) or ["the paper"]
        trained = ", ".join(cls.official_families)
        raise ValueError(
            f"preset: official has no settings for the model family {family!r}: the official table "
            f"({', '.join(repos)}) holds the released trainer's settings for {trained} only, and another "
            f"architecture's would not be the release's. Use a {trained} model, or set preset: dare and give the "
            f"settings yourself (`dare plugins NAME` lists the official values per family).")

    @classmethod
    def official_rows(cls, family: str | None = None) -> tuple[OfficialSetting, ...]:
        """The official rows for a model of ``family`` (None: the release's main family); a row without a family
        applies to every family. :raises ValueError: as :meth:`official_family`."""
        fam = cls.official_family(family)
        return tuple(s for s in cls.official if fam is None or s.applies_to(fam))

    @classmethod
    def official_values(cls, family: str | None = None) -> dict[str, Any]:
        """``{param: official value}`` of this objective for ``family`` (None: the release's main family; empty
        when it has no official release). :raises ValueError: as :meth:`official_family`."""
        return {s.param: s.value for s in cls.official_rows(family)}

    @classmethod
    def official_sources(cls, family: str | None = None) -> dict[str, str]:
        """``{param: source}`` of the rows :meth:`official_values` returns."""
        return {s.param: s.source for s in cls.official_rows(family)}

    # ------------------------------------------------------------------ the switch
    @model_validator(mode="wrap")
    @classmethod
    def _apply_preset(cls, data: Any, handler, info: ValidationInfo):
        if not (isinstance(data, dict) and data.get("preset") == "official"):
            return handler(data)
        if not cls.official:
            raise ValueError("preset: official: this objective has no official table (no released trainer has been "
                             "compared with it, docs/algorithms.md §10), so the preset would change nothing; remove "
                             "preset or set preset: dare, and give the settings yourself")
        family = (info.context or {}).get("family") if info is not None else None
        fam = cls.official_family(family)  # ValueError: a family the release did not train
        table = cls.official_values(fam)
        kept = tuple(sorted(k for k in table if k in data and not _same(data[k], table[k])))
        merged = {**table, **data}
        for k, v in table.items():  # a mapping (rollout_sampler) keeps the official keys the spec does not set
            if isinstance(v, dict) and isinstance(data.get(k), dict):
                merged[k] = {**v, **data[k]}
        out = handler(merged)
        out._preset_kept = kept
        out._preset_family = fam
        if kept:
            log.warning("preset official: keeping the explicit %s (official: %s)",
                        ", ".join(f"{k}={data[k]!r}" for k in kept), ", ".join(f"{k}={table[k]!r}" for k in kept))
        return out

    def preset_kept(self) -> tuple[str, ...]:
        """Parameters set explicitly to a non-official value under ``preset: official`` (sorted)."""
        return self._preset_kept

    def preset_family(self) -> str | None:
        """The family whose official rows ``preset: official`` applied (None under ``preset: dare`` or for a table
        without families)."""
        return self._preset_family


def _same(given: Any, official: Any) -> bool:
    """Whether an explicit value agrees with the official one (a mapping: no official key given another value)."""
    if isinstance(official, dict) and isinstance(given, dict):
        return all(given.get(k, v) == v for k, v in official.items())
    return given == official
