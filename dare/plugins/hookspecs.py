"""The whole DARE plugin surface, in one place.

A plugin is a module registered under the entry-point group ``dare`` (``[project.entry-points.dare]``
in its ``pyproject.toml``). It implements some of the hooks below with ``@dare.hookimpl``. Each
``register_*`` hook receives a ``register`` callback bound to the calling plugin; the host stamps
every registered component with the plugin's distribution and version and rejects two components of
the same kind and name.

Components are classes deriving from :mod:`dare.components` (``ModelFamily``, ``Sampler``,
``Objective``, ``Estimator``, ``Evaluator``, ``Reward``); each carries a ``name`` and a pydantic ``Params`` model
that validates its ``params:`` block in a run spec. ``register`` takes either

* a lazy reference, the usual form: ``register("my_pkg.reward:MyReward")``. The component's name,
  aliases, one-line description and (a model family's) ``model_types`` are written once, in the class
  (literals of its body, the docstring's first line), and read from its source without importing it
  (:func:`dare.plugins.registry.declared_in_source`); ``my_pkg.reward`` is imported when the component is first
  used, so a plugin module that imports only ``dare.hookimpl`` keeps ``dare`` quick to start;
* the class: ``register(MyReward)`` (its module is imported with the plugin).

A class whose metadata is not literal in its body may give it in the call instead (``name=``,
``description=``, ``aliases=``, ``model_types=``); the class must agree when imported.

A model-family plugin also implements ``register_auto_classes`` (its transformers classes, registered
only when DARE first loads or creates a checkpoint).
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

    :param register: ``register("module:Class")`` or ``register(cls)``; call once per family this plugin
        provides.
    """


# --------------------------------------------------------------------------- samplers
@hookspec
def register_samplers(register):
    """Register :class:`dare.components.Sampler` subclasses (decoding loops).

    :param register: ``register("module:Class")`` or ``register(cls)``; call once per sampler this plugin
        provides.
    """


# --------------------------------------------------------------------------- objectives
@hookspec
def register_objectives(register):
    """Register :class:`dare.components.Objective` subclasses (training algorithms).

    :param register: ``register("module:Class")`` or ``register(cls)``; call once per objective this plugin
        provides.
    """


# --------------------------------------------------------------------------- likelihood estimators
@hookspec
def register_estimators(register):
    """Register :class:`dare.components.Estimator` subclasses (likelihood estimators objectives may select).

    :param register: ``register("module:Class")`` or ``register(cls)``; call once per estimator this plugin
        provides.
    """


# --------------------------------------------------------------------------- evaluators
@hookspec
def register_evaluators(register):
    """Register :class:`dare.components.Evaluator` subclasses (benchmarks).

    :param register: ``register("module:Class")`` or ``register(cls)``; call once per evaluator this plugin
        provides.
    """


# --------------------------------------------------------------------------- rewards
@hookspec
def register_rewards(register):
    """Register :class:`dare.components.Reward` subclasses (verifiable reward functions).

    :param register: ``register("module:Class")`` or ``register(cls)``; call once per reward this plugin
        provides.
    """


# --------------------------------------------------------------------------- transformers classes
@hookspec
def register_auto_classes():
    """Register this plugin's transformers classes (config, model, tokenizer) with transformers' Auto
    classes (``AutoConfig.register``, ``AutoModel.register``, ...), so ``AutoModel.from_pretrained(dir)``
    loads the family's checkpoints without ``trust_remote_code``.

    DARE calls it once per process (:func:`dare.plugins.manager.register_auto_classes`) before it reads or
    creates a checkpoint through transformers. Import the modeling modules inside the hook, not at the
    plugin module's top level, so that ``dare --help``, ``dare plugins`` and ``dare validate`` do not
    import them.
    """


# --------------------------------------------------------------------------- CLI
@hookspec
def register_commands(cli):
    """Add subcommands to the ``dare`` command.

    :param cli: the root :class:`click.Group`; call ``cli.command()`` / ``cli.add_command``.
    """
