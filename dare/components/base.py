"""The common base of every component: ``name``, aliases, a pydantic ``Params`` model, ``check``."""

from __future__ import annotations

import typing
from typing import ClassVar

from pydantic import BaseModel, ConfigDict, field_validator

__all__ = ["Params", "NoParams", "Component"]


class Params(BaseModel):
    """Base for every component's ``Params`` model: unknown keys are errors, values are validated."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True, frozen=False, allow_inf_nan=False)

    @field_validator("*", mode="before")
    @classmethod
    def _no_bool_numbers(cls, value, info):
        """``true``/``false`` for a number param is a mistake (pydantic would read it as 1/0), as in the run spec's
        own sections (``dare.runspec.models._Strict``)."""
        if isinstance(value, bool):
            field_info = cls.model_fields.get(info.field_name)
            todo, kinds = [field_info.annotation if field_info else None], set()
            while todo:
                a = todo.pop()
                kinds.add(a)
                todo.extend(typing.get_args(a))
            if bool not in kinds and (int in kinds or float in kinds):
                raise ValueError(f"expected {'an integer' if int in kinds else 'a number'}, not a boolean")
        return value


class NoParams(Params):
    """A component without parameters."""


class Component:
    """Common base. Subclasses set ``kind`` (via the kind base class), ``name`` and ``Params``."""

    kind: ClassVar[str] = ""
    name: ClassVar[str] = ""
    aliases: ClassVar[tuple[str, ...]] = ()
    Params: ClassVar[type[Params]] = NoParams

    def __init__(self, params: Params | dict | None = None, **values):
        """Build with validated params: a ``Params`` instance, a dict, or keyword values (``None``: defaults).

        :raises pydantic.ValidationError: values the component's ``Params`` rejects.
        """
        if params is None:
            params = self.Params.model_validate(values)
        elif isinstance(params, dict):
            params = self.Params.model_validate({**params, **values})
        elif values:
            params = self.Params.model_validate({**params.model_dump(exclude_unset=True), **values})
        self.params = params

    @classmethod
    def description(cls) -> str:
        """The first line of the class docstring."""
        doc = (cls.__doc__ or "").strip()
        return doc.splitlines()[0] if doc else ""

    def check(self, ctx, loc: str) -> list[tuple[str, str]]:
        """Cross-field checks against the rest of the spec; return ``(yaml_path, message)`` pairs.

        ``ctx`` is the :class:`dare.runspec.ResolvedSpec` being validated (``ctx.spec``, ``ctx.family``,
        ``ctx.model_config``, ``ctx.tokenizer``, ``ctx.sampler``, ...).

        ``loc`` is this component's YAML path (e.g. ``"sampler"``). The default finds nothing.
        """
        return []
