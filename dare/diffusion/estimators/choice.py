"""An estimator chosen in the spec: ``estimator: {name, params}`` in an objective's params.

Objectives that allow several likelihood estimators (DPO/VRPO: any sequence-level ELBO estimator) declare
a field of type :class:`EstimatorChoice`; :func:`estimator_problems` validates it against the installed
estimators (``dare plugins`` lists them) in ``dare validate``, and :func:`build_estimator` builds it when
training starts.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, ValidationError

from dare.components import Estimator, Params
from dare.errors import PluginError, SpecError
from dare.plugins.manager import get_registry
from dare.runspec.problems import pydantic_problems

__all__ = ["EstimatorChoice", "estimator_problems", "build_estimator"]


class EstimatorChoice(Params):
    """A likelihood estimator by name (see ``dare plugins``) with its params."""

    name: str = Field(description="Estimator name, e.g. mc-elbo (see `dare plugins`).")
    params: dict[str, Any] = Field(default_factory=dict, description="Validated by the estimator's own Params.")


def _resolve(choice: EstimatorChoice, level: Literal["token", "sequence"] | None,
             loc: str) -> tuple[Estimator | None, list]:
    registry = get_registry()
    try:
        entry = registry.get("estimator", choice.name)
    except PluginError as exc:
        return None, [(f"{loc}.name", str(exc))]
    if level is not None and entry.cls.level != level:
        names = sorted(n for n in registry.names("estimator") if registry.get("estimator", n).cls.level == level)
        return None, [(f"{loc}.name", f"estimator {choice.name!r} gives {entry.cls.level}-level scores; this objective "
                                      f"needs a {level}-level one: {', '.join(names)}")]
    try:
        return entry.cls(entry.cls.Params.model_validate(choice.params)), []
    except ValidationError as exc:
        return None, pydantic_problems(exc, entry.cls.Params, prefix=f"{loc}.params")


def estimator_problems(choice: EstimatorChoice, level: Literal["token", "sequence"] | None = None,
                       loc: str = "algorithm.params.estimator") -> list[tuple[str, str]]:
    """``(yaml_path, message)`` problems of ``choice``: an unknown name, the wrong ``level``, or bad params."""
    return _resolve(choice, level, loc)[1]


def build_estimator(choice: EstimatorChoice, family, model_config, sampler=None,
                    level: Literal["token", "sequence"] | None = None,
                    loc: str = "algorithm.params.estimator") -> Estimator:
    """The estimator ``choice`` names, bound to the run (:meth:`dare.components.Estimator.bind`).

    :raises SpecError: the problems of :func:`estimator_problems`.
    """
    est, problems = _resolve(choice, level, loc)
    if problems:
        raise SpecError(problems)
    return est.bind(family, model_config, sampler)
