"""The ``dare`` command.

``dare run SPEC`` (eval before, train, eval after, report), ``dare train SPEC``, ``dare eval SPEC``,
``dare generate``, ``dare profile SPEC``, ``dare validate SPEC``, ``dare schema``, ``dare plugins``, ``dare new-plugin``,
``dare create-model``, ``dare export``. Plugins add commands through the ``register_commands`` hook.

Errors caused by input (:class:`dare.errors.DareError`) are printed as one paragraph without a
traceback, and the command exits with status 2.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import click

from dare.cli_help import EPILOG, CreateModelCommand, wide_console as _console
from dare.progress import check_environment as check_progress_environment
from dare.errors import DareError

__all__ = ["main", "cli"]

_OVERRIDE_HELP = "Override a spec value, e.g. --set train.max_steps=10 (repeatable)."


@click.group(context_settings={"help_option_names": ["-h", "--help"]}, epilog=EPILOG)
@click.version_option(package_name="dare-dllm")
def cli():
    """DARE: post-train and evaluate diffusion LLMs from declarative run specs.

    Start with `dare run examples/quickstart.yaml`: it evaluates, trains, evaluates again and writes
    runs/quickstart/report.md and plot.png, showing progress as it goes; Ctrl-C, then the same command,
    resumes from the last checkpoint.
    """


# --------------------------------------------------------------------------- run / train / eval
@cli.command()
@click.argument("spec", type=click.Path(dir_okay=False))
@click.option("--set", "overrides", multiple=True, help=_OVERRIDE_HELP)
def run(spec, overrides):
    """Evaluate (before), train, evaluate (after) and write a report, as SPEC says."""
    from dare.run import Run

    r = Run.from_file(spec, list(overrides))
    out = _execute_resumably(r)
    if _is_main():
        _print_stages(out["stages"])
        click.echo(f"run directory: {r.dir}")


@cli.command()
@click.argument("spec", type=click.Path(dir_okay=False))
@click.option("--set", "overrides", multiple=True, help=_OVERRIDE_HELP)
def train(spec, overrides):
    """Train only: skips the before/after evaluations (in-training evaluation, train.eval_steps, still runs);
    resumes from the last checkpoint of the same spec."""
    from dare.run import Run

    r = Run.from_file(spec, list(overrides))
    out = _execute_resumably(r, train=True, evaluate=False)
    if _is_main():
        click.echo(json.dumps(out["train"], indent=2))
        click.echo(f"trained model: {r.model_dir}")


@cli.command(name="eval")
@click.argument("spec", type=click.Path(dir_okay=False))
@click.option("--set", "overrides", multiple=True, help=_OVERRIDE_HELP)
def eval_cmd(spec, overrides):
    """Evaluate SPEC's model on its eval benchmarks (no training).

    When SPEC's run directory holds its trained model/ (after `dare run`/`dare train`), that model is
    evaluated; its report keeps the run's before/after rows and adds an `eval` row. Evaluation settings
    may differ from the run's (e.g. --set eval.benchmarks.0.limit=100 --set eval.batch_size=64); the
    report names them.
    """
    from dare.run import Run

    r = Run.from_file(spec, list(overrides))
    if r.spec.eval is None:
        raise DareError("the spec has no eval: section; add eval.benchmarks")
    out = _execute_resumably(r, train=False, evaluate=True)
    if _is_main():
        _print_stages(out["stages"])
        click.echo(f"report: {r.dir / 'report.md'}")


#: the command line being run (main()'s argv), for the resume hint after Ctrl-C
_ARGV: list[str] = []


def _execute_resumably(r, **kwargs):
    """``r.execute(**kwargs)`` holding the run directory's lock (:mod:`dare.runlock`); on Ctrl-C or SIGTERM
    (:mod:`dare.signals`), say what was saved and that the same command resumes (exit 130 or 143)."""
    from dare.io import disk_errors_explained
    from dare.runlock import hold_run_dir
    from dare.signals import exit_status, stop_message, terminate_as_interrupt

    try:
        with terminate_as_interrupt(), hold_run_dir(r.dir), disk_errors_explained(r.dir):
            try:
                return r.execute(**kwargs)
            except DareError:
                r.discard_unused_dir()  # a refused run leaves no files
                raise
    except KeyboardInterrupt as exc:
        if _is_main():
            import shlex

            click.echo(stop_message(exc, r.interrupted_message(_relaunch_command(shlex.join(["dare", *_ARGV])))), err=True)
        sys.exit(exit_status(exc))


def _relaunch_command(command: str) -> str:
    """``command`` as the user must re-run it: under a launcher of N processes the same launch, since resuming
    with another process count would change the global batch (refused on resume)."""
    from dare.distributed import world_size

    n = world_size()
    if n == 1:
        return command
    cpu = "ACCELERATE_USE_CPU=1 " if os.environ.get("ACCELERATE_USE_CPU") else ""
    return f"the same launch of {n} processes, e.g. {cpu}torchrun --nproc_per_node {n} --no-python {command}"


def _is_main() -> bool:
    """Whether this process prints results (the main one when several processes run the command)."""
    from dare.distributed import is_main

    return is_main()


def _print_stages(stages):
    if not stages:
        return
    from rich.table import Table

    t = Table(title="results")
    for col in ("stage", "benchmark", "accuracy", "mean reward", "samples", "NFE", "tokens/s"):
        t.add_column(col)
    for stage, results in stages.items():
        for r in results:
            t.add_row(stage, r["name"], f"{r['accuracy']:.4f}", f"{r['mean_reward']:.4f}", str(r["n"]), str(r["nfe"]),
                      f"{r['tokens_per_second']:.1f}")
    _console().print(t)


@cli.command()
@click.argument("entries", nargs=-1, required=True)
@click.option("--output", "-o", required=True, help="Directory for comparison.{md,json,png}.")
@click.option("--title", default="DARE comparison", show_default=True)
def compare(entries, output, title):
    """Put runs side by side: ENTRIES are LABEL=RUN_DIR[:STAGE] (stage before/after/eval, default after)."""
    from dare.eval.compare import compare_runs

    md, _, png = compare_runs(list(entries), output, title=title)
    click.echo(Path(md).read_text())
    if png is not None:
        click.echo(f"plot: {png}")


# --------------------------------------------------------------------------- profile
@cli.command()
@click.argument("spec", type=click.Path(dir_okay=False))
@click.option("--steps", default=5, show_default=True, type=int, help="Training steps (the first is not timed).")
@click.option("--set", "overrides", multiple=True, help=_OVERRIDE_HELP)
@click.option("--json", "as_json", is_flag=True, help="Print the measurements as JSON.")
def profile(spec, steps, overrides, as_json):
    """Parameters, peak memory, tokens/s and seconds per step of SPEC's training, over a few steps in a
    temporary directory (dare.profiling)."""
    import contextlib

    from dare.profiling import profile_spec

    # with --json, stdout carries only the JSON (the trainer's progress lines go to stderr)
    with contextlib.redirect_stdout(sys.stderr) if as_json else contextlib.nullcontext():
        result = profile_spec(spec, steps=steps, overrides=list(overrides))
    if not _is_main():
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
    _console().print(t)


# --------------------------------------------------------------------------- generate
@cli.command()
@click.option("--model", "model_path", default=None, help="Checkpoint directory (official format) or hub id.")
@click.option("--run", "run_dir", default=None, type=click.Path(file_okay=False),
              help="A run directory (output.dir): its trained model/, its sampler and params, dtype, eval seed and its "
                   "evaluation's prompt format (chat template, system prompt), so answers match the run's samples/. "
                   "The options below override them.")
@click.option("--prompt", "prompts", multiple=True, help="Prompt text (the user message; repeatable); '-' reads lines from stdin.")
@click.option("--sampler", "sampler_name", default=None, help="Sampler name (default: the run's, else the family's official decoder).")
@click.option("--param", "params", multiple=True, help="Sampler param key=value (YAML value), repeatable; with --run, "
              "changes one of the run's params.")
@click.option("--chat/--no-chat", default=None,
              help="Wrap the prompt with the tokenizer's chat template.  [default: --chat; with --run: as the run's evaluation]")
@click.option("--dtype", default=None, type=click.Choice(["float32", "bfloat16", "float16"]),
              help="Weights dtype.  [default: float32; with --run: the run's model.dtype]")
@click.option("--seed", default=None, type=int, help="Sampler seed.  [default: 0; with --run: the run's eval.seed]")
@click.option("--json", "as_json", is_flag=True, help="Print JSON with the trajectory and NFE.")
def generate(model_path, run_dir, prompts, sampler_name, params, chat, dtype, seed, as_json):
    """Prompt in, text out: with --model (and --sampler/--param), or with everything a run used (--run DIR)."""
    from dare.generate import GenerateSettings, check_generate_options, generate as generate_texts, run_settings
    from dare.spec import parse_override_value

    if (model_path is None) == (run_dir is None):
        raise DareError("give exactly one of --model DIR (a checkpoint) or --run DIR (a run directory: its model, sampler "
                        "and prompt format)")
    texts = []
    for p in prompts:
        texts.extend(line.rstrip("\n") for line in sys.stdin) if p == "-" else texts.append(p)
    if not texts:
        raise DareError("give at least one --prompt")
    raw = {}
    for kv in params:
        if "=" not in kv:
            raise DareError(f"--param {kv!r} must look like key=value")
        k, v = kv.split("=", 1)
        raw[k.strip()] = parse_override_value(v)
    settings = run_settings(run_dir) if run_dir is not None else GenerateSettings(model=model_path)
    if run_dir is not None:
        click.echo(f"using {settings.origin}", err=True)
        if sampler_name is not None and sampler_name != settings.sampler:
            settings.params = {}  # another sampler: the run's params are not its params
        raw = {**settings.params, **raw}
    settings.sampler = sampler_name or settings.sampler
    settings.chat_template = settings.chat_template if chat is None else chat
    settings.dtype = dtype or settings.dtype
    settings.seed = settings.seed if seed is None else seed
    # the spec's checks (model directory, sampler params, sampler vs family) before loading any weights
    sampler = check_generate_options(settings.model, settings.sampler, raw)
    out = generate_texts(settings, sampler, texts, strict_chat=run_dir is not None and chat is None)
    if as_json:
        click.echo(json.dumps(out))
    else:
        for c in out["completions"]:
            click.echo(c)


# --------------------------------------------------------------------------- validate / schema / plugins
@cli.command()
@click.argument("spec", type=click.Path(dir_okay=False))
@click.option("--set", "overrides", multiple=True, help=_OVERRIDE_HELP)
def validate(spec, overrides):
    """Validate SPEC (structure, component params, files, model config) without loading weights."""
    from dare.spec import load_spec

    load_spec(spec, overrides=list(overrides))
    click.echo(f"{spec}: valid")


@cli.command()
@click.option("--output", "-o", default=None, help="Write to this file instead of stdout ('-' = stdout).")
@click.option("--check", is_flag=True, help="With -o FILE: exit 1 if FILE differs from what would be written.")
@click.option("--first-party", is_flag=True,
              help="Only the core's and this repository's plugins (what the committed schemas/run-spec.schema.json covers; "
                   "`make schema` regenerates it).")
def schema(output, check, first_party):
    """Print the JSON Schema of the run spec, covering every installed component's params (-o FILE: write it)."""
    from dare.io import atomic_write_text
    from dare.plugins import FIRST_PARTY, get_registry
    from dare.spec import json_schema

    registry = get_registry().restricted(FIRST_PARTY) if first_party else None
    text = json.dumps(json_schema(registry), indent=2, sort_keys=True) + "\n"
    if check and output in (None, "-"):
        raise DareError("--check compares with a file: give it with -o FILE")
    if output in (None, "-"):
        click.echo(text, nl=False)
        return
    if check:
        cur = Path(output).read_text() if Path(output).is_file() else ""
        if cur != text:
            click.echo(f"{output} is stale; run `dare schema{' --first-party' if first_party else ''} -o {output}`", err=True)
            sys.exit(1)
        click.echo(f"{output} is up to date")
        return
    atomic_write_text(output, text)
    click.echo(f"wrote {output}")


@cli.command()
@click.argument("name", required=False)
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.option("--params", "with_params", is_flag=True,
              help="Also print each component's params: a table per component (with --json: its params JSON schema; "
                   "imports every component).")
@click.option("--check", is_flag=True, help="Import every component and report those that fail (slower).")
def plugins(name, as_json, with_params, check):
    """List installed components: kind, name, distribution, version; and plugins that failed to load.

    `dare plugins NAME` shows the component(s) called NAME (e.g. tracerl, llada) with their params:
    name, type, default and description; every key is what `params:` of that component accepts.
    """
    from dare.plugins import get_plugin_manager

    get_plugin_manager()  # main() loaded them already (plugin commands); loading again would repeat every hook call
    from dare import plugins as P

    reg = P._registry
    if name is not None:
        from dare.cli_help import show_component

        show_component(reg, name, as_json)
        return
    from dare.cli_help import list_components

    list_components(reg, as_json, with_params, check, _console)


# --------------------------------------------------------------------------- scaffolding
@cli.command(name="new-plugin")
@click.argument("name")
@click.option("--kind", required=True, type=click.Choice(["objective", "rl-objective", "model", "sampler", "evaluator", "reward"]),
              help="objective: a supervised objective on the core's training skeleton; rl-objective: an online-RL "
                   "objective on dare.rl.OnlineRLObjective; model, sampler, evaluator, reward.")
@click.option("--output", "-o", default=".", show_default=True, help="Parent directory of the new package.")
def new_plugin(name, kind, output):
    """Scaffold an installable plugin package NAME with one component of KIND and a passing test."""
    from dare.scaffold import render_plugin

    path = render_plugin(name, kind, Path(output))
    click.echo(f"created {path}\nnext: pip install -e {path} && dare plugins && pytest {path}")


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
    from dare.plugins import get_registry
    from dare.spec import parse_override_value

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
              "adapter_config.json's base_model_name_or_path; for checkpoints without config.json, their config/tokenizer.")
@click.option("--dtype", default=None, type=click.Choice(["float32", "bfloat16", "float16"]), help="Dtype of the written weights.")
@click.option("--overwrite", is_flag=True, help="Replace a non-empty OUT.")
def export_cmd(src, out, base, dtype, overwrite):
    """Write SRC (a LoRA adapter, model or trainer checkpoint directory) to OUT in the official format."""
    from dare.export import export_model

    kind = export_model(src, out, base=base, dtype=dtype, overwrite=overwrite)
    click.echo(f"exported {'merged adapter' if kind == 'adapter' else 'checkpoint'} {src} -> {out}")


def _load_plugin_commands():
    try:
        from dare.plugins import get_plugin_manager

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
    """After a multi-process command: barrier, then destroy the process group (dare.distributed.teardown)."""
    if "torch" in sys.modules:
        from dare.distributed import teardown

        teardown()


def main(argv: list[str] | None = None) -> None:
    """Console entry point: runs the CLI, printing :class:`DareError` as one paragraph (exit 2)."""
    _ARGV[:] = list(sys.argv[1:] if argv is None else argv)
    _quiet_libraries()
    _load_plugin_commands()
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
    except DareError as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(2)
    except FileExistsError as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(2)
    except KeyboardInterrupt:
        click.echo("interrupted", err=True)
        sys.exit(130)


if __name__ == "__main__":  # pragma: no cover
    main()
