"""``dare validate`` (a spec, without loading weights) and ``dare schema`` (the run spec's JSON Schema)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import click

from dare.cli.group import cli, spec_overrides
from dare.errors import DareError

__all__ = ["validate", "schema"]


@cli.command()
@click.argument("spec", type=click.Path(dir_okay=False))
@spec_overrides
@click.option("--config-only", is_flag=True, help="model.path is a model card without weights: check config.json and "
              "the weight index's tensor names; skip shards and a tokenizer that does not load.")
@click.option("--command", "command", type=click.Choice(["run", "train", "eval"]), default="run", show_default=True,
              help="The command SPEC is meant for: output.dir is checked by its rules (train.resume: false with "
                   "this run's checkpoints in output.dir is refused for run and train, as they refuse it).")
def validate(spec, overrides, unset, config_only, command):
    """Validate SPEC (structure, component params, files, model config) without loading weights."""
    from dare.runspec import load_spec

    load_spec(spec, overrides=list(overrides), unset=list(unset), config_only=config_only, command=command)
    click.echo(f"{spec}: valid")


@cli.command()
@click.option("--output", "-o", default=None, help="Write to this file instead of stdout ('-' = stdout).")
@click.option("--check", is_flag=True, help="With -o FILE: exit 1 if FILE differs from what would be written.")
@click.option("--first-party", is_flag=True,
              help="Only the core's and this repository's plugins (what the committed schemas/run-spec.schema.json "
                   "covers; `make schema` regenerates it).")
def schema(output, check, first_party):
    """Print the JSON Schema of the run spec, covering every installed component's params (-o FILE: write it)."""
    from dare.io import atomic_write_text
    from dare.plugins import manager as plugins
    from dare.runspec import json_schema

    registry = plugins.get_registry().restricted(plugins.first_party()) if first_party else None
    text = json.dumps(json_schema(registry), indent=2, sort_keys=True) + "\n"
    if check and output in (None, "-"):
        raise DareError("--check compares with a file: give it with -o FILE")
    if output in (None, "-"):
        click.echo(text, nl=False)
        return
    if check:
        cur = Path(output).read_text() if Path(output).is_file() else ""
        if cur != text:
            click.echo(f"{output} is stale; run `dare schema{' --first-party' if first_party else ''} -o {output}`",
                       err=True)
            sys.exit(1)
        click.echo(f"{output} is up to date")
        return
    atomic_write_text(output, text)
    click.echo(f"wrote {output}")

