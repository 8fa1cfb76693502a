"""The ``dare`` command line: the click group and one module per command group, each parsing its options and
printing results while the library modules it calls do the work.

``dare run SPEC`` (eval before, train, eval after, report), ``dare train SPEC``, ``dare eval SPEC``,
``dare generate``, ``dare profile SPEC``, ``dare validate SPEC``, ``dare schema``, ``dare plugins``, ``dare
new-plugin``, ``dare create-model``, ``dare export``, ``dare compare``, ``dare sweep`` (:mod:`dare.cli.sweep`). Plugins
add commands through the ``register_commands`` hook.

One module per command group, each registering its commands on the click group of :mod:`dare.cli.group` when
imported (below): :mod:`~dare.cli.runs` (run, train, eval, compare), :mod:`~dare.cli.generate`,
:mod:`~dare.cli.profile`, :mod:`~dare.cli.specs` (validate, schema), :mod:`~dare.cli.components` (plugins,
new-plugin), :mod:`~dare.cli.models` (create-model, export). A new command group is a new module here and one
import line.

Errors caused by input (:class:`dare.errors.DareError`) are printed as one paragraph without a
traceback, and the command exits with status 2. A run's console output is kept in its ``run.log``
(:mod:`dare.run.log`) for the whole command.
"""

from __future__ import annotations

import os
import shlex
import sys

import click

from dare.cli import components, generate, models, profile, runs, specs  # noqa: F401 - they register their commands
from dare.cli.sweep import sweep as _sweep
from dare.cli.group import ARGV, cli
from dare.errors import DareError
from dare.progress import check_environment as check_progress_environment
from dare.run.log import command as command_log

__all__ = ["main", "cli"]

cli.add_command(_sweep)


def _load_plugin_commands():
    try:
        from dare.plugins.manager import get_plugin_manager

        get_plugin_manager().hook.register_commands(cli=cli)
    except DareError:
        pass  # reported by the command that needs the registry


def _quiet_libraries() -> None:
    """No per-file progress bars from transformers (loading/saving shards) on the console.

    Through the environment variables transformers and huggingface_hub read when imported, so that a
    command that never loads a model does not import them; directly if they are already imported.
    """
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    if "transformers" in sys.modules:
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()
        hf_logging.set_verbosity_error()


def _leave_process_group() -> None:
    """After a multi-process command: barrier, then destroy the process group (dare.scaling.distributed.teardown)."""
    if "torch" in sys.modules:
        from dare.scaling.distributed import teardown

        teardown()


def main(argv: list[str] | None = None) -> None:
    """Console entry point: runs the CLI, printing :class:`DareError` as one paragraph (exit 2)."""
    ARGV[:] = list(sys.argv[1:] if argv is None else argv)
    _quiet_libraries()
    _load_plugin_commands()
    with command_log(shlex.join(["dare", *ARGV])):  # a run's run.log keeps the whole command's console output
        try:
            check_progress_environment()
            cli.main(args=argv, standalone_mode=False)
            _leave_process_group()
        except click.exceptions.Abort:
            click.echo("aborted", err=True)
            sys.exit(130)
        except click.ClickException as exc:
            exc.show()
            sys.exit(exc.exit_code)
        except (DareError, FileExistsError) as exc:
            click.echo(f"error: {exc}", err=True)
            sys.exit(2)
        except KeyboardInterrupt:
            click.echo("interrupted", err=True)
            sys.exit(130)
