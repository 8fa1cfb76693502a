"""Launchers of a sweep's runs: each run is the command ``dare run SPEC --set ...`` (under torchrun when it uses
several processes), started by an existing engine: local subprocesses (one after another, or N at a time), or
submitit (https://github.com/facebookincubator/submitit): SLURM job arrays, or its local executor (the same code
path without a cluster, used by the tests).

A launcher reports every state change through ``on_update(run, state, **info)`` (``state``: running,
finished, failed, interrupted); the sweep writes them to ``sweep.json``. It never writes into a run
directory: logs go to ``DIR/logs/``, next to the runs.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dare.sweep.plan import SweepRun

__all__ = ["run_command", "LocalLauncher", "SubmititLauncher", "Update"]

Update = Callable[..., None]


def _dare_entry() -> list[str]:
    """How a child process starts the installed ``dare``: the console script next to this interpreter (the one
    ``pip install`` wrote, so a ``dare/`` folder in the working directory is never imported instead), else this
    interpreter with ``-P`` (no working directory on ``sys.path``) and ``-m dare.cli``."""
    script = Path(sys.executable).parent / "dare"
    if script.is_file():
        return [str(script)]
    return ["-P", "-m", "dare.cli"]


def run_command(spec_path: str, run: SweepRun, processes: int = 1, accelerate_config: str | None = None) -> list[str]:
    """The command line of one run: the installed ``dare run SPEC --set ... --unset ...`` (the console script next
    to ``sys.executable``, :func:`_dare_entry`); with ``processes > 1``, ``python -m torch.distributed.run
    --standalone --nproc_per_node N DARE run ...`` (torchrun: one node, every process joins the group through
    accelerate, docs/scaling.md); with ``accelerate_config`` (FSDP2, ZeRO: examples/accelerate/), ``python -m
    accelerate.commands.launch --config_file FILE --num_processes N DARE run ...``. The interpreter is this one
    (``sys.executable``), so the run uses the same environment as the sweep."""
    args = ["run", spec_path, *(x for ov in run.overrides for x in ("--set", ov)),
            *(x for key in run.unset for x in ("--unset", key))]
    entry = _dare_entry()
    if accelerate_config is not None:
        return [sys.executable, "-m", "accelerate.commands.launch", "--config_file", accelerate_config, "--num_processes",
                str(processes), *entry, *args]
    if processes > 1:
        return [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", str(processes),
                *entry, *args]
    return [*entry, *args] if entry[0] != "-P" else [sys.executable, *entry, *args]


def _die_with_sweep() -> None:  # pragma: no cover - runs in the child between fork and exec
    """Linux: the run is killed (SIGKILL) when the sweep process dies, so a killed sweep leaves no run behind that
    would go on writing its directory while a re-run resumes it (``PR_SET_PDEATHSIG``; no-op elsewhere)."""
    if sys.platform.startswith("linux"):
        import ctypes

        try:
            ctypes.CDLL(None, use_errno=True).prctl(1, int(signal.SIGKILL), 0, 0, 0)  # PR_SET_PDEATHSIG = 1
        except (OSError, AttributeError):
            pass


@dataclass
class LocalLauncher:
    """Runs as subprocesses of the sweep, ``parallel`` at a time, each with its output in ``logs/<name>.log``.

    With ``gpus_per_run`` G > 0, run slot ``k`` (0 <= k < parallel) sees GPUs ``k*G .. k*G+G-1``
    (``CUDA_VISIBLE_DEVICES``) and a run with G > 1 is launched with G processes (torchrun).
    """

    parallel: int = 1
    gpus_per_run: int = 0
    poll_seconds: float = 0.5
    accelerate_config: str | None = None

    name = "local"

    def launch(self, spec_path: str, runs: list[SweepRun], log_dir: Path, on_update: Update) -> None:
        """Run ``runs`` in order, ``parallel`` at a time, until all ended; a run's exit status 0 is ``finished``, any
        other ``failed`` (the others go on). Ctrl-C: waits for the running ones (they got the SIGINT too), marks them
        ``interrupted`` and re-raises :class:`KeyboardInterrupt`."""
        log_dir.mkdir(parents=True, exist_ok=True)
        pending = list(runs)
        active: dict[int, tuple[SweepRun, subprocess.Popen, Any]] = {}
        free = list(range(self.parallel))
        try:
            while pending or active:
                while pending and free:
                    slot, run = free.pop(0), pending.pop(0)
                    env = dict(os.environ)
                    if self.gpus_per_run:
                        g = self.gpus_per_run
                        env["CUDA_VISIBLE_DEVICES"] = ",".join(str(slot * g + i) for i in range(g))
                    log_path = log_dir / f"{run.name}.log"
                    log = open(log_path, "ab")  # noqa: SIM115 - closed when the run ends
                    cmd = run_command(spec_path, run, max(self.gpus_per_run, 1), self.accelerate_config)
                    proc = subprocess.Popen(cmd, stdout=log,
                                            stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env,
                                            preexec_fn=_die_with_sweep)
                    active[slot] = (run, proc, log)
                    on_update(run, "running", pid=proc.pid, log=str(log_path))
                time.sleep(self.poll_seconds)
                for slot, (run, proc, log) in list(active.items()):
                    rc = proc.poll()
                    if rc is None:
                        continue
                    log.close()
                    del active[slot]
                    free.append(slot)
                    on_update(run, "finished" if rc == 0 else "failed", returncode=rc)
        except KeyboardInterrupt:  # the runs got the terminal's SIGINT too: they save and stop; wait for them
            for run, proc, log in active.values():
                try:
                    proc.wait(timeout=120)
                except subprocess.TimeoutExpired:
                    proc.kill()
                log.close()
                on_update(run, "interrupted", returncode=proc.returncode)
            raise


@dataclass
class SubmititLauncher:
    """Runs as submitit jobs: on SLURM one job array (``executor.batch()``: one ``sbatch``, at most
    ``array_parallelism`` runs at once), each job one node with ``gpus_per_run`` GPUs running the run's command
    (torchrun with one process per GPU when there are several); ``cluster="local"`` runs the same jobs as local
    processes (submitit's LocalExecutor), ``"debug"`` in this process.

    Job logs (stdout/stderr, submitit's pickles) go to ``DIR/logs/submitit/``; ``sweep.json`` names each run's
    job id and log files. The sweep waits for the jobs; if it is killed, jobs already submitted go on running on
    the cluster (wait for them, or ``scancel`` them, before re-running the sweep).
    """

    cluster: str | None = None
    partition: str | None = None
    gpus_per_run: int = 0
    cpus_per_run: int | None = None
    timeout_min: int = 24 * 60
    array_parallelism: int = 256
    poll_seconds: float = 2.0
    extra: dict[str, Any] | None = None
    accelerate_config: str | None = None

    @property
    def name(self) -> str:
        return f"submitit ({self.cluster or 'auto'})"

    def executor(self, folder: Path):
        """A ``submitit.AutoExecutor`` writing its files under ``folder``, with this launcher's job parameters (one node,
        one task, ``gpus_per_run`` GPUs; SLURM: partition, array parallelism; ``extra``: any other submitit parameter)."""
        import submitit

        ex = submitit.AutoExecutor(folder=folder, cluster=self.cluster)
        params: dict[str, Any] = {"timeout_min": self.timeout_min, "nodes": 1, "tasks_per_node": 1,
                                  "slurm_array_parallelism": self.array_parallelism, "name": "dare-sweep"}
        if self.gpus_per_run:
            params["gpus_per_node"] = self.gpus_per_run
        if self.cpus_per_run:
            params["cpus_per_task"] = self.cpus_per_run
        if self.partition:
            params["slurm_partition"] = self.partition
        params.update(self.extra or {})
        ex.update_parameters(**params)
        return ex

    def launch(self, spec_path: str, runs: list[SweepRun], log_dir: Path, on_update: Update) -> None:
        """Submit every run (one job array), report each job's id and log files, then wait: a job whose command exits
        0 is ``finished``, any other (or a job the scheduler killed) ``failed`` with submitit's error text."""
        from submitit.helpers import CommandFunction

        if not runs:
            return
        ex = self.executor(log_dir / "submitit")
        fns = [CommandFunction(run_command(spec_path, run, max(self.gpus_per_run, 1), self.accelerate_config), cwd=os.getcwd())
               for run in runs]
        if self.cluster == "debug":  # the debug executor runs each job when its result is asked for
            jobs = [ex.submit(fn) for fn in fns]
        else:
            with ex.batch():
                jobs = [ex.submit(fn) for fn in fns]
        for run, job in zip(runs, jobs):
            on_update(run, "running", job_id=str(job.job_id), log=str(job.paths.stdout), err_log=str(job.paths.stderr))
        waiting = dict(enumerate(jobs))
        while waiting:
            for i, job in list(waiting.items()):
                if not job.done():
                    continue
                del waiting[i]
                try:
                    job.result()
                    on_update(runs[i], "finished", returncode=0)
                except Exception as exc:  # noqa: BLE001 - submitit's FailedJobError, UncompletedJobError, ...
                    on_update(runs[i], "failed", error=str(exc).strip().splitlines()[-1][:300] if str(exc).strip() else
                              type(exc).__name__)
            if waiting:
                time.sleep(self.poll_seconds)
