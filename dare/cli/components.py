"""``dare plugins`` (installed components and their params) and ``dare new-plugin`` (scaffold a plugin package)."""

from __future__ import annotations

from pathlib import Path

import click

from dare.cli.group import cli
from dare.cli.helptext import wide_console

__all__ = ["plugins", "new_plugin"]


@cli.command()
@click.argument("name", required=False)
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.option("--params", "with_params", is_flag=True,
              help="Also print each component's params: a table per component (with --json: its params JSON schema; "
                   "imports every component).")
@click.option("--check", is_flag=True, help="Import every component and report those that fail (slower).")
@click.option("--matrix", is_flag=True, help="Print the families x online-RL objectives table (supported, refused and "
                                             "why, untested), validating one spec per pair (docs/algorithms.md §11).")
def plugins(name, as_json, with_params, check, matrix):
    """List installed components: kind, name, distribution, version; and plugins that failed to load.

    `dare plugins NAME` shows the component(s) called NAME (e.g. tracerl, llada) with their params:
    name, type, default and description; every key is what `params:` of that component accepts.
    """
    from dare.plugins.manager import get_plugin_manager

    get_plugin_manager()  # main() loaded them already (plugin commands); loading again would repeat every hook call
    from dare.plugins import manager as P

    reg = P._registry
    if matrix:
        from dare.plugins.matrix import matrix_markdown

        click.echo(matrix_markdown(reg), nl=False)
        return
    if name is not None:
        from dare.cli.helptext import show_component

        show_component(reg, name, as_json)
        return
    from dare.cli.helptext import list_components

    list_components(reg, as_json, with_params, check, wide_console)



@cli.command(name="new-plugin")
@click.argument("name")
@click.option("--kind", required=True, type=click.Choice(["objective", "rl-objective", "model", "sampler", "evaluator",
                                                          "reward"]),
              help="objective: a supervised objective on the core's training skeleton; rl-objective: an online-RL "
                   "objective on dare.rl.OnlineRLObjective; model, sampler, evaluator, reward.")
@click.option("--output", "-o", default=".", show_default=True, help="Parent directory of the new package.")
def new_plugin(name, kind, output):
    """Scaffold an installable plugin package NAME with one component of KIND and a passing test."""
    from dare.ops.scaffold import render_plugin

    path = render_plugin(name, kind, Path(output))
    click.echo(f"created {path}\nnext: pip install -e {path} && dare plugins && pytest {path}")

