"""``dare profile``: parameters, peak memory, seconds per step and tokens/s of a few training steps."""

from __future__ import annotations

import json
import sys

import click

from dare.cli.group import cli, is_main, spec_overrides
from dare.cli.helptext import wide_console

__all__ = ["profile"]


@cli.command()
@click.argument("spec", type=click.Path(dir_okay=False))
@click.option("--steps", default=5, show_default=True, type=int, help="Training steps (the first is not timed).")
@spec_overrides
@click.option("--json", "as_json", is_flag=True, help="Print the measurements as JSON.")
@click.option("--estimate", is_flag=True, help="Do not train: per-GPU memory from config.json on the meta device (a "
              "model card is enough) under the spec's launch.accelerate_config, for --gpus process counts "
              "(dare.ops.memory_estimate).")
@click.option("--gpus", default=None, help="With --estimate: process counts to estimate for, comma-separated.  "
              "[default: 1 and the spec's launch.num_processes]")
def profile(spec, steps, overrides, unset, as_json, estimate, gpus):
    """Parameters, peak memory, tokens/s and seconds per step of SPEC's training, over a few steps in a
    temporary directory (dare.ops.profiling); with --estimate, a per-GPU memory estimate without weights."""
    import contextlib

    if estimate:
        from dare.ops.memory_estimate import estimate_report

        click.echo(estimate_report(spec, overrides, gpus, as_json, unset=unset))
        return

    from dare.ops.profiling import profile_spec

    # with --json, stdout carries only the JSON (the trainer's progress lines go to stderr)
    with contextlib.redirect_stdout(sys.stderr) if as_json else contextlib.nullcontext():
        result = profile_spec(spec, steps=steps, overrides=list(overrides), unset=list(unset))
    if not is_main():
        return
    if as_json:
        click.echo(json.dumps(result.to_dict(), indent=2))
        return
    from rich.table import Table

    t = Table(title=f"dare profile {spec} ({steps} steps, first not timed)")
    t.add_column("measure")
    t.add_column("value", justify="right")
    for name, value in result.rows():
        t.add_row(name, value)
    wide_console().print(t)

