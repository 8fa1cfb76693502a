"""The ``dare`` click group and what its commands share: the ``--set``/``--unset`` options of commands that read
a spec, the command line being run, and which process prints.

Each command group lives in its own module of :mod:`dare.cli` and registers itself on :data:`cli` when
imported (``@cli.command()``); :mod:`dare.cli`'s ``__init__`` imports them all.
"""

from __future__ import annotations

import click

from dare.cli.helptext import EPILOG

__all__ = ["cli", "spec_overrides", "is_main", "ARGV", "OVERRIDE_HELP", "UNSET_HELP"]

OVERRIDE_HELP = "Override a spec value, e.g. --set train.max_steps=10 (repeatable)."
UNSET_HELP = ("Remove a spec key, so its default applies, e.g. --unset algorithm.params.shrink (repeatable; applied "
              "after --set).")

#: the command line being run (``main()``'s argv), for the resume hint after Ctrl-C
ARGV: list[str] = []


@click.group(context_settings={"help_option_names": ["-h", "--help"]}, epilog=EPILOG)
@click.version_option(package_name="dare-dllm")
def cli():
    """DARE: post-train and evaluate diffusion LLMs from declarative run specs.

    Start with `dare run examples/quickstart.yaml`: it evaluates, trains, evaluates again and writes
    runs/quickstart/report.md and plot.png, showing progress as it goes; Ctrl-C, then the same command,
    resumes from the last checkpoint.
    """


def spec_overrides(command):
    """The ``--set KEY=VALUE`` and ``--unset KEY`` options (parameters ``overrides`` and ``unset``) of a command
    that reads a spec."""
    command = click.option("--unset", "unset", multiple=True, help=UNSET_HELP)(command)
    return click.option("--set", "overrides", multiple=True, help=OVERRIDE_HELP)(command)


def is_main() -> bool:
    """Whether this process prints results (the main one when several processes run the command)."""
    from dare.scaling.distributed import is_main as main_process

    return main_process()
