"""``dare create-model`` (a fresh model in the official format) and ``dare export`` (adapters and trainer checkpoints
to the official format)."""

from __future__ import annotations

import click

from dare.cli.group import cli
from dare.cli.helptext import CreateModelCommand
from dare.errors import DareError

__all__ = ["create_model_cmd", "export_cmd"]


@cli.command(name="create-model", cls=CreateModelCommand)
@click.argument("family")
@click.argument("out_dir", type=click.Path(file_okay=False))
@click.option("--preset", default="tiny", show_default=True, help="A preset of FAMILY (listed below).")
@click.option("--set", "overrides", multiple=True, help="config.json override key=value (YAML value).")
@click.option("--seed", default=0, type=int)
@click.option("--overwrite", is_flag=True)
def create_model_cmd(family, out_dir, preset, overrides, seed, overwrite):
    """Create a randomly initialised FAMILY model (official format) with DARE's byte tokenizer in OUT_DIR.

    FAMILY is an installed model family (listed below, with its presets); --set changes config.json values,
    e.g. --set d_model=128.
    """
    from dare.modeling import create_model
    from dare.modeling.checkpoint import new_config_problems
    from dare.plugins.manager import get_registry
    from dare.runspec import parse_override_value

    fam = get_registry().get("model_family", family).create()
    cfg = {}
    for kv in overrides:
        if "=" not in kv:
            raise DareError(f"--set {kv!r} must look like key=value")
        k, v = kv.split("=", 1)
        cfg[k.strip()] = parse_override_value(v)
    found = new_config_problems(fam, preset, cfg) if cfg else []
    if found:
        raise DareError("; ".join(f"--set {key or ', '.join(cfg)}: {msg}" for key, msg in found))
    try:
        lm = create_model(fam, out_dir, preset=preset, overrides=cfg, seed=seed, overwrite=overwrite)
    except FileExistsError:
        raise DareError(f"{out_dir} is not empty; choose another directory or pass --overwrite") from None
    n = sum(p.numel() for p in lm.model.parameters())
    click.echo(f"created {family} ({preset}, {n:,} parameters) in {out_dir}")


@cli.command(name="export")
@click.argument("src", type=click.Path(file_okay=False))
@click.argument("out", type=click.Path(file_okay=False))
@click.option("--base", default=None, help="Base model (directory or hub id): for adapters, instead of "
              "adapter_config.json's base_model_name_or_path; for checkpoints without config.json, their "
              "config/tokenizer.")
@click.option("--dtype", default=None, type=click.Choice(["float32", "bfloat16", "float16"]),
              help="Dtype of the written weights.")
@click.option("--overwrite", is_flag=True, help="Replace a non-empty OUT.")
def export_cmd(src, out, base, dtype, overwrite):
    """Write SRC (a LoRA adapter, model or trainer checkpoint directory) to OUT in the official format."""
    from dare.ops.export import export_model

    kind = export_model(src, out, base=base, dtype=dtype, overwrite=overwrite)
    click.echo(f"exported {'merged adapter' if kind == 'adapter' else 'checkpoint'} {src} -> {out}")

