"""The whole DARE plugin surface, in one place.

A plugin is a module registered under the entry-point group ``dare`` (``[project.entry-points.dare]``
in its ``pyproject.toml``). It implements some of the hooks below with ``@dare.hookimpl``. Each
``register_*`` hook receives a ``register`` callback; the host stamps every registered component with
the plugin's distribution and version and rejects two components of the same kind and name.

Components are classes deriving from :mod:`dare.components` (``ModelFamily``, ``Sampler``,
``Objective``, ``Estimator``, ``Evaluator``, ``Reward``); each carries a ``name`` and a pydantic ``Params`` model
that validates its ``params:`` block in a run spec.
"""

from __future__ import annotations

import pluggy

__all__ = ["hookspec", "hookimpl"]

hookspec = pluggy.HookspecMarker("dare")
hookimpl = pluggy.HookimplMarker("dare")


# --------------------------------------------------------------------------- model families
@hookspec
def register_model_families(register):
    """Register :class:`dare.components.ModelFamily` subclasses.

    :param register: ``register(family_cls)``; call once per family this plugin provides.
    """


# --------------------------------------------------------------------------- samplers
@hookspec
def register_samplers(register):
    """Register :class:`dare.components.Sampler` subclasses (decoding loops).

    :param register: ``register(sampler_cls)``.
    """


# --------------------------------------------------------------------------- objectives
@hookspec
def register_objectives(register):
    """Register :class:`dare.components.Objective` subclasses (training algorithms).

    :param register: ``register(objective_cls)``.
    """


# --------------------------------------------------------------------------- likelihood estimators
@hookspec
def register_estimators(register):
    """Register :class:`dare.components.Estimator` subclasses (likelihood estimators objectives may select).

    :param register: ``register(estimator_cls)``.
    """


# --------------------------------------------------------------------------- evaluators
@hookspec
def register_evaluators(register):
    """Register :class:`dare.components.Evaluator` subclasses (benchmarks).

    :param register: ``register(evaluator_cls)``.
    """


# --------------------------------------------------------------------------- rewards
@hookspec
def register_rewards(register):
    """Register :class:`dare.components.Reward` subclasses (verifiable reward functions).

    :param register: ``register(reward_cls)``.
    """


# --------------------------------------------------------------------------- CLI
@hookspec
def register_commands(cli):
    """Add subcommands to the ``dare`` command.

    :param cli: the root :class:`click.Group`; call ``cli.command()`` / ``cli.add_command``.
    """
