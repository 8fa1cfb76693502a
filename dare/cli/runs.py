"""``dare run``, ``dare train``, ``dare eval`` (a spec's stages, :class:`dare.run.Run`) and ``dare compare`` (runs side
by side); what an interrupted command says (Ctrl-C or SIGTERM: what was saved, the command that resumes)."""

from __future__ import annotations

import json
import os
import shlex
import sys
from pathlib import Path

import click

from dare.cli.group import ARGV, cli, is_main, spec_overrides
from dare.cli.helptext import wide_console
from dare.errors import DareError

__all__ = ["run", "train", "eval_cmd", "compare", "run_resumably", "relaunch_command"]


@cli.command()
@click.argument("spec", type=click.Path(dir_okay=False))
@spec_overrides
def run(spec, overrides, unset):
    """Evaluate (before), train, evaluate (after) and write a report, as SPEC says."""
    from dare.run import Run

    r, out = run_resumably(spec, overrides, unset)
    if is_main():
        _print_stages(out["stages"])
        click.echo(f"run directory: {r.dir}")


@cli.command()
@click.argument("spec", type=click.Path(dir_okay=False))
@spec_overrides
def train(spec, overrides, unset):
    """Train only: skips the before/after evaluations (in-training evaluation, train.eval_steps, still runs);
    resumes from the last checkpoint of the same spec."""
    from dare.run import Run

    r, out = run_resumably(spec, overrides, unset, train=True, evaluate=False)
    if is_main():
        click.echo(json.dumps(out["train"], indent=2))
        click.echo(f"trained model: {r.model_dir}")


@cli.command(name="eval")
@click.argument("spec", type=click.Path(dir_okay=False))
@spec_overrides
def eval_cmd(spec, overrides, unset):
    """Evaluate SPEC's model on its eval benchmarks (no training).

    When SPEC's run directory holds its trained model/ (after `dare run`/`dare train`), that model is
    evaluated; its report keeps the run's before/after rows and adds an `eval` row. Evaluation settings
    may differ from the run's (e.g. --set eval.benchmarks.0.limit=100 --set eval.batch_size=64); the
    report names them.
    """
    from dare.run import Run

    r, out = run_resumably(spec, overrides, unset, train=False, evaluate=True)
    if is_main():
        _print_stages(out["stages"])
        click.echo(f"report: {r.rundir.report_md}")


def run_resumably(path: str, overrides, unset, **kwargs):
    """``(run, r.execute(**kwargs))`` of the spec file ``path``, holding the run directory's lock
    (:mod:`dare.run.lock`) from before the slow checks (model config and weights, data files) to the end: the
    spec's structure is read first (it names ``output.dir``), then the lock is taken, then the run is resolved and
    executed, so a second command on the same ``output.dir`` stops at once. On Ctrl-C or SIGTERM
    (:mod:`dare.run.signals`), say what was saved and that the same command resumes (exit 130 or 143). ``dare eval``
    (``train=False``) needs an ``eval:`` section."""
    from dare.io import disk_errors_explained
    from dare.run import Run
    from dare.run.rundir import RunDir
    from dare.run.signals import exit_status, stop_message, terminate_as_interrupt
    from dare.runspec import load_spec

    spec = load_spec(path, overrides=list(overrides), check=False, unset=list(unset))
    if kwargs.get("train") is False and spec.eval is None:
        raise DareError("the spec has no eval: section; add eval.benchmarks")
    r = None
    try:
        with terminate_as_interrupt(), RunDir(spec.output.dir).hold():
            r = Run.from_file(path, list(overrides), list(unset), spec=spec)
            with disk_errors_explained(r.dir):
                try:
                    return r, r.execute(**kwargs)
                except DareError:
                    r.discard_unused_dir()  # a refused run leaves no files
                    raise
    except KeyboardInterrupt as exc:
        if is_main():
            said = ("stopped while checking the spec; nothing was written" if r is None
                    else r.interrupted_message(relaunch_command(shlex.join(["dare", *ARGV]))))
            click.echo(stop_message(exc, said), err=True)
        sys.exit(exit_status(exc))


def relaunch_command(command: str) -> str:
    """``command`` as the user must re-run it: under a launcher of N processes the same launch, since resuming
    with another process count would change the global batch (refused on resume)."""
    from dare.scaling.distributed import world_size

    n = world_size()
    if n == 1:
        return command
    cpu = "ACCELERATE_USE_CPU=1 " if os.environ.get("ACCELERATE_USE_CPU") else ""
    return f"the same launch of {n} processes, e.g. {cpu}torchrun --nproc_per_node {n} --no-python {command}"


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
    wide_console().print(t)


@cli.command()
@click.argument("entries", nargs=-1, required=True)
@click.option("--output", "-o", required=True, help="Directory for comparison.{md,json,png}.")
@click.option("--title", default="DARE comparison", show_default=True)
@click.option("--min-seeds", default=5, show_default=True, type=click.IntRange(min=2),
              help="Common seeds a paired difference needs for a verdict (fewer: 'too few seeds to test').")
@click.option("--power", "power_effect", default=None, type=float, metavar="EFFECT",
              help="A difference in score units (e.g. 0.02): print the seeds each paired difference needs to detect it "
                   "with 80% power, from these runs' spread (a pilot sweep).")
def compare(entries, output, title, min_seeds, power_effect):
    """Put runs side by side: ENTRIES are LABEL=RUN_DIR[:STAGE] (stage before/after/eval, default after).

    RUN_DIR may be a `dare sweep` directory (all its runs). Runs that differ only by seed form groups: n, mean, std
    and 95% t-interval per benchmark, and paired differences (gain = after - before) with a paired t-test verdict,
    Holm-corrected, from --min-seeds seeds on (docs/scaling.md, "Reading the comparison")."""
    from dare.report.compare import compare_runs

    md, _, png = compare_runs(list(entries), output, title=title, min_seeds=min_seeds, power_effect=power_effect)
    click.echo(Path(md).read_text())
    if png is not None:
        click.echo(f"plot: {png}")

