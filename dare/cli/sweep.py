"""The ``dare sweep`` command (registered by :mod:`dare.cli`); the work is :func:`dare.sweep.run_sweep`."""

from __future__ import annotations

import sys

import click

from dare.errors import DareError

__all__ = ["sweep"]

_EPILOG = """\b
How to read DIR/comparison.md (and comparison.png):
  Groups: the runs of one grid setting (they differ only by seed). n = seeds,
    mean and std over them, the 95% t-interval of the mean (BCa bootstrap
    from 20 seeds), and a 95% interval over seeds x test items. The plot
    shows each seed's score as a point and the mean with its interval.
  Paired differences: for two settings, B's score minus A's on the same
    seed (a gain is after - before), averaged over the seeds, with its
    paired-t 95% interval and the paired t-test, Holm-corrected across the
    differences of the comparison. A verdict needs --min-seeds seeds
    (default 5): fewer print "too few seeds to test" and the power at a
    1-sd effect; equal differences on every seed print "cannot assess:
    identical differences". The plot's right panel is a forest plot of them.
  --power 0.02: the seeds each difference needs to detect 0.02 with 80%
    power, from this sweep's spread (run a pilot with --seeds 0-2 first).
  Runs: every run's own scores, as `dare compare` shows them.

\b
Examples:
  dare sweep examples/quickstart-rl.yaml --grid algorithm.name=d1,tracerl --seeds 0,1,2 -o runs/sweep
  dare sweep SPEC --grid train.learning_rate=1e-4,3e-4 --seeds 0-4 --parallel 2
  dare sweep examples/recipes/d1-llada-8b-gsm8k.yaml --seeds 0,1,2 --launcher slurm \\
      --slurm-partition gpu --slurm-account proj --slurm-mem 512G --slurm-array-parallelism 4
  (each run asks for what the recipe's launch: says: 1 node x 8 GPUs, 8 processes, ZeRO-2)
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
@click.option("--min-seeds", default=5, show_default=True, type=click.IntRange(min=2),
              help="Common seeds a paired difference needs for a verdict (fewer: 'too few seeds to test').")
@click.option("--power", "power_effect", default=None, type=float, metavar="EFFECT",
              help="A difference in score units (e.g. 0.02): the comparison gives the seeds each setting pair needs to "
                   "detect it with 80% power, from this sweep's spread (a pilot).")
@click.option("--launcher", type=click.Choice(["local", "slurm", "submitit-local"]), default="local", show_default=True,
              help="local: subprocesses of this command; slurm: a SLURM job array through submitit; submitit-local: "
                   "submitit's local executor (the slurm code path on this machine).")
@click.option("--parallel", default=1, show_default=True, type=click.IntRange(min=1),
              help="local: runs at a time.")
@click.option("--gpus-per-run", default=None, type=click.IntRange(min=0),
              help="GPUs of each run, over all its nodes, one process per GPU (torchrun, or accelerate with an "
                   "accelerate config); 0: one process, no GPU.  [default: the spec's launch.num_processes, one "
                   "process without a GPU when the spec has no launch:] local with --parallel N: run slot k sees GPUs "
                   "k*G..k*G+G-1.")
@click.option("--nodes-per-run", default=None, type=click.IntRange(min=1),
              help="slurm: nodes of each run (the GPUs split evenly over them).  [default: the spec's "
                   "launch.num_machines, else 1]")
@click.option("--accelerate-config", default=None, type=click.Path(dir_okay=False, exists=True),
              help="Launch each run with accelerate and this config (e.g. examples/accelerate/fsdp2.yaml) instead of "
                   "torchrun.  [default: the spec's launch.accelerate_config]")
@click.option("--slurm-partition", default=None, help="slurm: the partition.")
@click.option("--slurm-account", default=None, help="slurm: the account charged (sbatch --account).")
@click.option("--slurm-qos", default=None, help="slurm: the quality of service (sbatch --qos).")
@click.option("--slurm-mem", default=None, metavar="SIZE",
              help="slurm: memory of each node of a run, as sbatch --mem takes it (e.g. 512G, 0 = all of it).")
@click.option("--slurm-array-parallelism", default=256, show_default=True, type=click.IntRange(min=1),
              help="slurm: runs of the job array at once.")
@click.option("--slurm-timeout-min", default=24 * 60, show_default=True, type=click.IntRange(min=1),
              help="slurm: time limit of each run's job (minutes); a run that reaches it is stopped and requeued, "
                   "and resumes from its last checkpoint.")
@click.option("--slurm-save-window-s", default=600, show_default=True, type=click.IntRange(min=10),
              help="slurm: seconds before the time limit at which the job is signalled (sbatch --signal=USR2@S): a "
                   "checkpoint being written then is finished, the run stops and the job is requeued. Longer than "
                   "one checkpoint save (a ZeRO-3 checkpoint of an 8B model is about 128 GB).")
@click.option("--slurm-max-requeues", default=20, show_default=True, type=click.IntRange(min=0),
              help="slurm: time-outs after which a run is marked failed instead of requeued (preemptions do not "
                   "count).")
@click.option("--cpus-per-run", default=None, type=click.IntRange(min=1),
              help="slurm: CPUs of each run's job (per node).")
@click.option("--max-runs", default=1000, show_default=True, type=click.IntRange(min=1),
              help="The most runs (grid combinations x seeds) the sweep plans; more is refused before any validation.")
def sweep(spec, grids, seeds, out_dir, overrides, dry_run, min_seeds, power_effect, launcher, parallel, gpus_per_run,
          nodes_per_run, accelerate_config, slurm_partition, slurm_account, slurm_qos, slurm_mem,
          slurm_array_parallelism, slurm_timeout_min, slurm_save_window_s, slurm_max_requeues, cpus_per_run, max_runs):
    """Run SPEC for every combination of --grid values times --seeds, then compare the settings over seeds.

    Every run is a normal run directory DIR/<settings>,seed=<s> (e.g. algorithm.name=d1,seed=0). All runs are
    validated (as `dare validate`) before any starts: a grid key the spec does not have, or a value it refuses,
    stops the sweep naming the --grid key; a grid over a component's name (algorithm.name=d1,tracerl) drops the
    spec's params the named component lacks or refuses (printed; their defaults apply). Re-running the same command
    skips finished runs and resumes the others from their last checkpoint. At the end DIR/comparison.md and
    comparison.png group the runs of each setting and say which differences exceed seed noise (below).
    """
    from dare.sweep import check_run_count, count_seeds, parse_grid, parse_seeds, run_sweep
    from dare.sweep.launchers import LocalLauncher, SubmititLauncher

    grid = parse_grid(list(grids))
    n_seeds = count_seeds(seeds)
    if n_seeds is not None:  # before the seeds are expanded and any run is validated
        check_run_count(grid, n_seeds, max_runs)
    seed_list = parse_seeds(seeds)
    if out_dir is None:
        from dare.runspec import load_spec

        out_dir = load_spec(spec, overrides=list(overrides), check=False).output.dir.rstrip("/") + "-sweep"
    if launcher == "local":
        given = [flag for flag, v in (("--slurm-partition", slurm_partition), ("--slurm-account", slurm_account),
                                      ("--slurm-qos", slurm_qos), ("--slurm-mem", slurm_mem),
                                      ("--nodes-per-run", nodes_per_run)) if v is not None]
        if given:
            raise DareError(f"{', '.join(given)} {'is' if len(given) == 1 else 'are'} for --launcher slurm; add "
                            "--launcher slurm or remove them")
        chosen = LocalLauncher(parallel=parallel, gpus_per_run=gpus_per_run, accelerate_config=accelerate_config)
    else:
        if parallel != 1:
            raise DareError("--parallel is for --launcher local; with slurm use --slurm-array-parallelism")
        import shutil

        missing = [c for c in ("sbatch", "srun") if shutil.which(c) is None]
        if launcher == "slurm" and not dry_run and missing:
            raise DareError(f"--launcher slurm submits with sbatch and srun; {' and '.join(missing)} "
                            f"{'is' if len(missing) == 1 else 'are'} not on this machine's PATH; run the sweep on a "
                            "SLURM login node, or use --launcher local (or submitit-local) here")
        chosen = SubmititLauncher(cluster="slurm" if launcher == "slurm" else "local", partition=slurm_partition,
                                  gpus_per_run=gpus_per_run, nodes_per_run=nodes_per_run, cpus_per_run=cpus_per_run,
                                  timeout_min=slurm_timeout_min, array_parallelism=slurm_array_parallelism,
                                  accelerate_config=accelerate_config, mem=slurm_mem, account=slurm_account,
                                  qos=slurm_qos, save_window_s=slurm_save_window_s, max_timeouts=slurm_max_requeues)
    if power_effect is not None and not (power_effect == power_effect and abs(power_effect) not in (0.0, float("inf"))):
        raise DareError(f"--power takes the difference to detect in score units, a non-zero number such as 0.02; got "
                        f"{power_effect!r}")
    out = run_sweep(spec, grid, seed_list, out_dir, chosen, overrides=list(overrides), dry_run=dry_run,
                    min_seeds=min_seeds, power_effect=power_effect, max_runs=max_runs)
    for r in out["runs"]:
        click.echo(f"{out['states'][r.name]:<12} {r.dir}")
    if dry_run:
        click.echo(f"{len(out['runs'])} runs (dry run: nothing started)")
        return
    failed = [r.name for r in out["runs"] if out["states"][r.name] != "finished"]
    if out["comparison"] is not None:
        click.echo(f"comparison: {out['comparison']} (plot: {out['comparison'].with_suffix('.png')})")
        if power_effect is not None:
            from dare.sweep import power_lines

            for line in power_lines(out["comparison"].with_suffix(".json")):
                click.echo(line)
    click.echo(f"sweep record: {out_dir}/sweep.json")
    if failed:
        click.echo(f"{len(failed)} run(s) did not finish: {', '.join(failed)}; their logs are in {out_dir}/logs/. "
                   "Re-run the same command to resume them.", err=True)
        sys.exit(1)
