"""``dare generate``: prompt in, text out, with a model or with everything a run used (:mod:`dare.ops.generate`)."""

from __future__ import annotations

import json
import sys

import click

from dare.cli.group import cli
from dare.errors import DareError

__all__ = ["generate"]


@cli.command()
@click.option("--model", "model_path", default=None, help="Checkpoint directory (official format) or hub id.")
@click.option("--run", "run_dir", default=None, type=click.Path(file_okay=False),
              help="A run directory (output.dir): its trained model/, its sampler and params, dtype, eval seed and its "
                   "evaluation's prompt format (chat template, system prompt), so answers match the run's samples/. "
                   "The options below override them.")
@click.option("--prompt", "prompts", multiple=True, help="Prompt text (the user message; repeatable); '-' reads lines "
                                                         "from stdin.")
@click.option("--sampler", "sampler_name", default=None, help="Sampler name (default: the run's, else the family's "
                                                              "official decoder).")
@click.option("--param", "params", multiple=True, help="Sampler param key=value (YAML value), repeatable; with --run, "
              "changes one of the run's params.")
@click.option("--chat/--no-chat", default=None,
              help="Wrap the prompt with the tokenizer's chat template.  [default: --chat; with --run, or --model DIR "
                   "of a DARE run (its run.json next to DIR): as the run's evaluation]")
@click.option("--dtype", default=None, type=click.Choice(["float32", "bfloat16", "float16"]),
              help="Weights dtype.  [default: float32; with --run: the run's model.dtype]")
@click.option("--seed", default=None, type=int, help="Sampler seed.  [default: 0; with --run: the run's eval.seed]")
@click.option("--json", "as_json", is_flag=True, help="Print JSON with the trajectory and NFE.")
def generate(model_path, run_dir, prompts, sampler_name, params, chat, dtype, seed, as_json):
    """Prompt in, text out: with --model (and --sampler/--param), or with everything a run used (--run DIR)."""
    from dare.ops.generate import (check_generate_options, generate as generate_texts, model_settings,
                                   prompt_format_line, run_settings)
    from dare.runspec import parse_override_value

    if (model_path is None) == (run_dir is None):
        raise DareError("give exactly one of --model DIR (a checkpoint) or --run DIR (a run directory: its model, "
                        "sampler and prompt format)")
    texts = []
    for p in prompts:
        try:
            texts.extend(line.rstrip("\n") for line in sys.stdin) if p == "-" else texts.append(p)
        except UnicodeDecodeError as exc:
            raise DareError(f"--prompt -: standard input is not valid UTF-8 text ({exc.reason} at byte {exc.start}); "
                            "pass the prompts as UTF-8") from None
    if not texts:
        raise DareError("give at least one --prompt")
    for i, text in enumerate(texts, 1):  # undecodable bytes arrive as lone surrogates, which no tokenizer encodes
        try:
            text.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise DareError(f"prompt {i} is not valid UTF-8 text (an undecodable byte or a lone surrogate at "
                            f"character {exc.start}), which no tokenizer can encode; pass the prompt as "
                            "UTF-8") from None
    raw = {}
    for kv in params:
        if "=" not in kv:
            raise DareError(f"--param {kv!r} must look like key=value")
        k, v = kv.split("=", 1)
        raw[k.strip()] = parse_override_value(v)
    settings = run_settings(run_dir) if run_dir is not None else model_settings(model_path)
    if run_dir is not None:
        click.echo(f"using {settings.origin}", err=True)
        if sampler_name is not None and sampler_name != settings.sampler:
            settings.params = {}  # another sampler: the run's params are not its params
        raw = {**settings.params, **raw}
    settings.sampler = sampler_name or settings.sampler
    if chat is not None:
        settings.chat_template, settings.format_from = chat, "--chat" if chat else "--no-chat"
    settings.dtype = dtype or settings.dtype
    settings.seed = settings.seed if seed is None else seed
    # the spec's checks (model directory, sampler params, sampler vs family) before loading any weights
    sampler = check_generate_options(settings.model, settings.sampler, raw)
    out = generate_texts(settings, sampler, texts, strict_chat=run_dir is not None and chat is None)
    click.echo(prompt_format_line(settings, out.get("chat_template", settings.chat_template)), err=True)
    if as_json:
        click.echo(json.dumps(out))
    else:
        for c in out["completions"]:
            click.echo(c)

