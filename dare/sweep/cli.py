"""The ``dare sweep`` command (registered by :mod:`dare.cli`); the work is :func:`dare.sweep.run_sweep`."""

from __future__ import annotations

import sys

import click

from dare.errors import DareError

__all__ = ["sweep"]

_EPILOG = """\b
How to read DIR/comparison.md (and comparison.png):
  Groups: the runs of one grid setting (they differ only by seed). n = seeds,
    mean and std over them, and the 95% bootstrap interval of the mean
    (scipy.stats.bootstrap). The plot shows each seed's score as a point,
    the mean as a bar and the interval as an error bar.
  Paired differences: for two settings, B's score minus A's on the same
    seed, averaged over the seeds, with its bootstrap and paired-t 95%
    intervals. "not significant" = an interval contains 0: the difference
    may be seed noise; "significant" = both exclude 0. With 3 seeds the
    intervals are rough: more seeds (--seeds 0-9) narrow them.
  Runs: every run's own scores, as `dare compare` shows them.

\b
Examples:
  dare sweep examples/quickstart-rl.yaml --grid algorithm.name=d1,tracerl --seeds 0,1,2 -o runs/sweep
  dare sweep SPEC --grid train.learning_rate=1e-4,3e-4 --seeds 0-4 --parallel 2
  dare sweep SPEC --grid algorithm.name=d1,tracerl --seeds 0,1,2 --launcher slurm \\
      --slurm-partition gpu --gpus-per-run 8 --slurm-array-parallelism 4
See docs/scaling.md ("Sweeps") for the cluster setup."""


@click.command(epilog=_EPILOG)
@click.argument("spec", type=click.Path(dir_okay=False))
@click.option("--grid", "grids", multiple=True, metavar="KEY=V1,V2,...",
              help="A spec key and its values (YAML, comma-separated; repeatable: every combination runs).")
@click.option("--seeds", default="0", show_default=True,
              help="Seeds (0,1,2 or 0-4): each sets train.seed and eval.seed, i.e. every random stream of the run "
                   "(data order, masks, rollouts, evaluation sampling).")
@click.option("--output", "-o", "out_dir", default=None,
              help="Sweep directory: one run directory per run, sweep.json, logs/, comparison.*  [default: the spec's "
                   "output.dir + '-sweep']")
@click.option("--set", "overrides", multiple=True, help="Override a spec value for every run (repeatable).")
@click.option("--dry-run", is_flag=True, help="List the runs (validated) and their state; run nothing.")
@click.option("--launcher", type=click.Choice(["local", "slurm", "submitit-local"]), default="local", show_default=True,
              help="local: subprocesses of this command; slurm: a SLURM job array through submitit; submitit-local: "
                   "submitit's local executor (the slurm code path on this machine).")
@click.option("--parallel", default=1, show_default=True, type=click.IntRange(min=1),
              help="local: runs at a time.")
@click.option("--gpus-per-run", default=0, show_default=True, type=click.IntRange(min=0),
              help="GPUs of each run; with more than 1 the run is launched with one process per GPU (torchrun). local "
                   "with --parallel N: run slot k sees GPUs k*G..k*G+G-1.")
@click.option("--accelerate-config", default=None, type=click.Path(dir_okay=False, exists=True),
              help="Launch each run with accelerate and this config (e.g. examples/accelerate/fsdp2.yaml), "
                   "--gpus-per-run processes, instead of torchrun.")
@click.option("--slurm-partition", default=None, help="slurm: the partition.")
@click.option("--slurm-array-parallelism", default=256, show_default=True, type=click.IntRange(min=1),
              help="slurm: runs of the job array at once.")
@click.option("--slurm-timeout-min", default=24 * 60, show_default=True, type=click.IntRange(min=1),
              help="slurm: time limit of each run's job (minutes).")
@click.option("--cpus-per-run", default=None, type=click.IntRange(min=1), help="slurm: CPUs of each run's job.")
def sweep(spec, grids, seeds, out_dir, overrides, dry_run, launcher, parallel, gpus_per_run, accelerate_config,
          slurm_partition, slurm_array_parallelism, slurm_timeout_min, cpus_per_run):
    """Run SPEC for every combination of --grid values times --seeds, then compare the settings over seeds.

    Every run is a normal run directory DIR/<settings>,seed=<s> (e.g. algorithm.name=d1,seed=0). All runs are
    validated (as `dare validate`) before any starts: a grid key the spec does not have, or a value it refuses,
    stops the sweep naming the --grid key; a grid over a component's name (algorithm.name=d1,tracerl) drops the
    spec's params the named component lacks or refuses (printed; their defaults apply). Re-running the same command skips finished runs and resumes the
    others from their last checkpoint. At the end DIR/comparison.md and comparison.png group the runs of each
    setting and say which differences exceed seed noise (below).
    """
    from dare.sweep import parse_grid, parse_seeds, run_sweep
    from dare.sweep.launchers import LocalLauncher, SubmititLauncher

    grid = parse_grid(list(grids))
    seed_list = parse_seeds(seeds)
    if out_dir is None:
        from dare.spec import load_spec

        out_dir = load_spec(spec, overrides=list(overrides), check=False).output.dir.rstrip("/") + "-sweep"
    if launcher == "local":
        if slurm_partition:
            raise DareError("--slurm-partition is for --launcher slurm; add --launcher slurm or remove it")
        chosen = LocalLauncher(parallel=parallel, gpus_per_run=gpus_per_run, accelerate_config=accelerate_config)
    else:
        if parallel != 1:
            raise DareError("--parallel is for --launcher local; with slurm use --slurm-array-parallelism")
        import shutil

        if launcher == "slurm" and not dry_run and shutil.which("sbatch") is None:
            raise DareError("--launcher slurm submits with sbatch, which is not on this machine's PATH; run the sweep on "
                            "a SLURM login node, or use --launcher local (or submitit-local) here")
        chosen = SubmititLauncher(cluster="slurm" if launcher == "slurm" else "local", partition=slurm_partition,
                                  gpus_per_run=gpus_per_run, cpus_per_run=cpus_per_run, timeout_min=slurm_timeout_min,
                                  array_parallelism=slurm_array_parallelism, accelerate_config=accelerate_config)
    out = run_sweep(spec, grid, seed_list, out_dir, chosen, overrides=list(overrides), dry_run=dry_run)
    for r in out["runs"]:
        click.echo(f"{out['states'][r.name]:<12} {r.dir}")
    if dry_run:
        click.echo(f"{len(out['runs'])} runs (dry run: nothing started)")
        return
    failed = [r.name for r in out["runs"] if out["states"][r.name] != "finished"]
    if out["comparison"] is not None:
        click.echo(f"comparison: {out['comparison']} (plot: {out['comparison'].with_suffix('.png')})")
    click.echo(f"sweep record: {out_dir}/sweep.json")
    if failed:
        click.echo(f"{len(failed)} run(s) did not finish: {', '.join(failed)}; their logs are in {out_dir}/logs/. "
                   "Re-run the same command to resume them.", err=True)
        sys.exit(1)
