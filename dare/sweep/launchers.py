"""Launchers of a sweep's runs: each run is the command ``dare run SPEC --set ...`` (under torchrun or accelerate
when it uses several processes), started by an existing engine: local subprocesses (one after another, or N at a
time), or submitit (https://github.com/facebookincubator/submitit): SLURM job arrays, or its local executor (the
same code path without a cluster, used by the tests).

How a run is launched (processes, nodes, GPUs per node, accelerate config) is read from the run's own spec
(``launch:``, :class:`dare.runspec.models.LaunchSpec`) unless the sweep's flags override it
(:func:`resolve_launch`); the sweep prints and records what each run asks for.

On SLURM every run is a :class:`RunJob`, a submitit ``Checkpointable``: ``S`` seconds before the time limit
(``--signal=USR2@S``, the save window) the job lets a checkpoint being written finish, stops the run (SIGTERM:
``dare run`` stops as on Ctrl-C, :mod:`dare.run.signals`) and requeues itself; the requeued job runs the same
command, which resumes from the last complete checkpoint (the run-directory rules, :mod:`dare.run.rundir`).

A launcher reports every state change through ``on_update(run, state, **info)`` (``state``: running,
finished, failed, interrupted); the sweep writes them to ``sweep.json``. It never writes into a run
directory: logs go to ``DIR/logs/``, next to the runs.
"""

from __future__ import annotations

import os
import shlex
import signal
import subprocess
import sys
import time
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from submitit.helpers import Checkpointable

from dare.errors import DareError
from dare.run.rundir import RunDir
from dare.sweep.plan import SweepRun
from dare.trainers.checkpoints import STAGING_DIR

__all__ = ["RunLaunch", "resolve_launch", "run_command", "RunJob", "LocalLauncher", "SubmititLauncher", "Update"]

Update = Callable[..., None]
#: placeholders of a multi-node command, filled on each node by :class:`RunJob` (node index, first node's host, port)
NODE_RANK, MASTER_ADDR, MASTER_PORT = "{node_rank}", "{master_addr}", "{master_port}"


@dataclass(frozen=True)
class RunLaunch:
    """How one run is launched: ``processes`` in all, spread over ``nodes`` (an equal number on each), with
    ``gpus_per_node`` GPUs per node (0: a CPU run), through accelerate with ``accelerate_config`` (FSDP2, ZeRO) or
    torchrun; ``source`` says where the values came from (the spec's ``launch:`` or the sweep's flags)."""

    processes: int = 1
    nodes: int = 1
    gpus_per_node: int = 0
    accelerate_config: str | None = None
    source: str = "no launch: in the spec"

    @property
    def per_node(self) -> int:
        """Processes on each node."""
        return self.processes // self.nodes

    def describe(self) -> str:
        """One line, e.g. ``1 node x 8 GPUs, 8 processes, accelerate examples/accelerate/zero2.yaml (from ...)``."""
        gpus = self.gpus_per_node
        devices = f"{gpus} GPU{'s' if gpus != 1 else ''}" if gpus else "no GPU"
        how = f"accelerate {self.accelerate_config}" if self.accelerate_config else (
            "torchrun" if self.processes > 1 else "one process")
        return (f"{self.nodes} node{'s' if self.nodes > 1 else ''} x {devices}, {self.processes} "
                f"process{'es' if self.processes > 1 else ''}, {how} ({self.source})")

    def to_dict(self) -> dict[str, Any]:
        return {"processes": self.processes, "nodes": self.nodes, "gpus_per_node": self.gpus_per_node,
                "accelerate_config": self.accelerate_config, "source": self.source}


def resolve_launch(run: SweepRun, gpus_per_run: int | None = None, nodes_per_run: int | None = None,
                   accelerate_config: str | None = None) -> RunLaunch:
    """The launch of ``run``: each flag given (not None) wins over the run's spec ``launch:``.

    - processes: ``gpus_per_run`` (the run's GPUs over all its nodes, one process per GPU; 0: one process on the
      CPU), else ``launch.num_processes`` (one GPU per process), else one process without a GPU;
    - nodes: ``nodes_per_run``, else ``launch.num_machines``, else 1;
    - accelerate config: ``accelerate_config``, else ``launch.accelerate_config``, else none (torchrun).

    :raises DareError: the processes do not divide evenly over the nodes.
    """
    spec = run.launch or {}
    flags, from_spec = [], []
    if gpus_per_run is not None:
        processes, gpus = max(gpus_per_run, 1), gpus_per_run > 0
        flags.append("--gpus-per-run")
    elif run.launch is not None:
        processes, gpus = int(spec.get("num_processes", 1)), True
        from_spec.append("num_processes")
    else:
        processes, gpus = 1, False
    if nodes_per_run is not None:
        nodes = nodes_per_run
        flags.append("--nodes-per-run")
    else:
        nodes = int(spec.get("num_machines", 1) or 1)
        if run.launch is not None:
            from_spec.append("num_machines")
    if accelerate_config is not None:
        flags.append("--accelerate-config")
    elif spec.get("accelerate_config"):
        accelerate_config = spec["accelerate_config"]
        from_spec.append("accelerate_config")
    if processes % nodes:
        raise DareError(f"run {run.name}: {processes} processes do not divide over {nodes} nodes (every node runs the "
                        "same number); give --gpus-per-run a multiple of --nodes-per-run (or fix the spec's "
                        "launch.num_processes / launch.num_machines)")
    parts = ([f"flags {', '.join(flags)}"] if flags else []) + (
        [f"the spec's launch.{', launch.'.join(from_spec)}"] if from_spec else [])
    source = "from " + " and ".join(parts) if parts else "no launch: in the spec, no flag"
    return RunLaunch(processes, nodes, processes // nodes if gpus else 0, accelerate_config, source)


def _dare_entry() -> list[str]:
    """The installed ``dare`` of a child: the console script next to this interpreter (a ``dare/`` folder in the
    working directory is never imported instead), else ``-m dare.cli`` (run with ``python -P``)."""
    script = Path(sys.executable).parent / "dare"
    return [str(script)] if script.is_file() else ["-m", "dare.cli"]


def run_command(spec_path: str, run: SweepRun, launch: RunLaunch | None = None) -> list[str]:
    """One run's command (on one node): the installed ``dare run SPEC --set ... --unset ...`` (:func:`_dare_entry`);
    several processes: ``python -m torch.distributed.run --standalone --nproc_per_node N DARE run ...``;
    ``launch.accelerate_config`` (FSDP2, ZeRO): ``python -m accelerate.commands.launch --config_file FILE
    --num_processes N DARE run ...``. Over several nodes every node's command is the same, with :data:`NODE_RANK`,
    :data:`MASTER_ADDR` and :data:`MASTER_PORT` that :class:`RunJob` fills on each node. The interpreter is
    ``sys.executable``: the run uses the sweep's environment."""
    launch = launch or RunLaunch()
    args = ["run", spec_path, *(x for ov in run.overrides for x in ("--set", ov)),
            *(x for key in run.unset for x in ("--unset", key))]
    entry = _dare_entry()
    many = launch.nodes > 1
    if launch.accelerate_config is not None:
        nodes = ["--num_machines", str(launch.nodes), "--machine_rank", NODE_RANK, "--main_process_ip", MASTER_ADDR,
                 "--main_process_port", MASTER_PORT] if many else []
        return [sys.executable, "-m", "accelerate.commands.launch", "--config_file", launch.accelerate_config, *nodes,
                "--num_processes", str(launch.processes), *entry, *args]
    if launch.processes > 1:
        nodes = (["--nnodes", str(launch.nodes), "--node_rank", NODE_RANK, "--master_addr", MASTER_ADDR,
                  "--master_port", MASTER_PORT] if many else ["--standalone"])
        return [sys.executable, "-m", "torch.distributed.run", *nodes, "--nproc_per_node", str(launch.per_node),
                *entry, *args]
    return [*entry, *args] if entry[0] != "-m" else [sys.executable, "-P", *entry, *args]


def _die_with_sweep() -> None:  # pragma: no cover - runs in the child between fork and exec
    """Linux: the run is killed (SIGKILL) when the sweep process dies, so a killed sweep leaves no run behind that
    would go on writing its directory while a re-run resumes it (``PR_SET_PDEATHSIG``; no-op elsewhere)."""
    if sys.platform.startswith("linux"):
        import ctypes

        try:
            ctypes.CDLL(None, use_errno=True).prctl(1, int(signal.SIGKILL), 0, 0, 0)  # PR_SET_PDEATHSIG = 1
        except (OSError, AttributeError):
            pass


def _job_child() -> None:  # pragma: no cover - runs in the child between fork and exec
    """The run inside a job ignores SIGUSR2 (SLURM's ``--signal`` reaches every process of the job step; the job
    process handles it for the run) and dies with the job process (:func:`_die_with_sweep`)."""
    signal.signal(signal.SIGUSR2, signal.SIG_IGN)  # an ignored signal stays ignored across exec
    _die_with_sweep()


def _ended(proc: subprocess.Popen, seconds: float) -> bool:
    """Whether ``proc`` ended within ``seconds`` (polled: usable inside a signal handler)."""
    end = time.monotonic() + seconds
    while proc.poll() is None and time.monotonic() < end:
        time.sleep(0.2)
    return proc.poll() is not None


class RunJob(Checkpointable):
    """One run as a submitit job: ``__call__`` runs ``command`` (from :func:`run_command`; its placeholders filled
    with this node's index, the first node's host name and a port derived from the job id) in ``cwd``, its output
    going to the job's log, and returns 0 or raises ``RuntimeError`` naming the exit status.

    Requeue on time-out or preemption (submitit calls :meth:`checkpoint` on the job's ``USR2`` signal, sent
    ``save_window_s`` seconds before the time limit): while ``<run dir>/checkpoints/.staging`` holds a checkpoint
    being written, wait for it (up to the window less a stop margin), then stop the run with SIGTERM (it stops as
    on Ctrl-C, keeping its last complete checkpoint; SIGKILL after the margin) and resubmit this same job, whose
    command then resumes the run.
    """

    def __init__(self, command: list[str], cwd: str, run_dir: str, save_window_s: float = 600.0):
        self.command = list(command)
        self.cwd = cwd
        self.run_dir = run_dir
        self.save_window_s = float(save_window_s)
        self._proc: subprocess.Popen | None = None

    def __getstate__(self) -> dict[str, Any]:  # the running child is not part of what is resubmitted
        return {k: v for k, v in self.__dict__.items() if k != "_proc"}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._proc = None

    def node_command(self) -> list[str]:
        """``command`` with the placeholders filled from submitit's job environment (only when it has some)."""
        if not any(p in a for a in self.command for p in (NODE_RANK, MASTER_ADDR, MASTER_PORT)):
            return list(self.command)
        import submitit

        env = submitit.JobEnvironment()
        values = {NODE_RANK: str(env.node), MASTER_ADDR: env.hostnames[0],
                  MASTER_PORT: str(29500 + zlib.crc32(str(env.job_id).encode()) % 1000)}
        out = []
        for a in self.command:
            for k, v in values.items():
                a = a.replace(k, v)
            out.append(a)
        return out

    def __call__(self) -> int:
        cmd = self.node_command()
        print(f"dare sweep job: {shlex.join(cmd)}", flush=True)
        self._proc = subprocess.Popen(cmd, cwd=self.cwd, stdin=subprocess.DEVNULL, preexec_fn=_job_child)
        # poll, not wait(): submitit's signal handler runs in this thread and must be able to reap the run itself
        # (Popen.wait would hold the lock that the handler's own poll needs)
        while self._proc.poll() is None:
            time.sleep(0.5)
        rc = self._proc.returncode
        self._proc = None
        if rc != 0:
            raise RuntimeError(f"the run exited with status {rc}; its output is in this job's log")
        return 0

    def stop_run(self, window_s: float | None = None, margin_s: float | None = None) -> int | None:
        """Stop the running command for a requeue: wait while a checkpoint is being written (``.staging`` not
        empty) for up to ``window_s - margin_s`` seconds, then SIGTERM and up to ``margin_s`` seconds for it to end,
        then SIGKILL. :returns: its exit status (None when none was running)."""
        proc = self._proc
        if proc is None or proc.poll() is not None:
            return None if proc is None else proc.returncode
        window = self.save_window_s if window_s is None else window_s
        margin = min(60.0, window / 3) if margin_s is None else margin_s
        staging = RunDir(self.run_dir).checkpoints / STAGING_DIR
        deadline = time.monotonic() + max(window - margin, 0.0)
        while proc.poll() is None and time.monotonic() < deadline and staging.is_dir() and any(staging.iterdir()):
            time.sleep(0.5)
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            if not _ended(proc, margin):
                proc.kill()
                _ended(proc, 10.0)
        print(f"dare sweep job: the run stopped (exit status {proc.returncode}) for a requeue; the requeued job "
              f"resumes it from its last complete checkpoint", flush=True)
        return proc.returncode

    def checkpoint(self, *args: Any, **kwargs: Any):
        """submitit's requeue hook: stop the run (:meth:`stop_run`), then resubmit this job unchanged."""
        self.stop_run()
        return super().checkpoint(*args, **kwargs)


@dataclass
class LocalLauncher:
    """Runs as subprocesses of the sweep, ``parallel`` at a time, each with its output in ``logs/<name>.log``.

    Each run's launch is :func:`resolve_launch` (its spec's ``launch:`` unless ``gpus_per_run``/``accelerate_config``
    override it); one node only. With GPUs and ``parallel`` > 1 (or ``gpus_per_run`` given), run slot ``k``
    (0 <= k < parallel) sees GPUs ``k*G .. k*G+G-1`` (``CUDA_VISIBLE_DEVICES``, G the run's GPUs).
    """

    parallel: int = 1
    gpus_per_run: int | None = None
    poll_seconds: float = 0.5
    accelerate_config: str | None = None

    name = "local"

    def resolve(self, run: SweepRun) -> RunLaunch:
        """The launch of ``run`` (:func:`resolve_launch`). :raises DareError: it needs several nodes."""
        launch = resolve_launch(run, self.gpus_per_run, None, self.accelerate_config)
        if launch.nodes > 1:
            raise DareError(f"run {run.name} asks for {launch.nodes} nodes (launch.num_machines), which --launcher "
                            f"local cannot give; use --launcher slurm, or --nodes-per-run 1 with --launcher slurm, or "
                            f"set launch.num_machines=1 with --set")
        return launch

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
                    launch = self.resolve(run)
                    env = dict(os.environ)
                    g = launch.gpus_per_node
                    if g and (self.parallel > 1 or self.gpus_per_run is not None):
                        env["CUDA_VISIBLE_DEVICES"] = ",".join(str(slot * g + i) for i in range(g))
                    log_path = log_dir / f"{run.name}.log"
                    log = open(log_path, "ab")  # noqa: SIM115 - closed when the run ends
                    cmd = run_command(spec_path, run, launch)
                    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                            env=env, preexec_fn=_die_with_sweep)
                    active[slot] = (run, proc, log)
                    on_update(run, "running", pid=proc.pid, log=str(log_path), command=cmd)
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
    """Runs as submitit jobs. On SLURM (``cluster="slurm"``) the runs with the same launch form one job array (one
    ``sbatch``, at most ``array_parallelism`` runs at once); each job asks for the run's nodes (one task per node),
    GPUs per node, ``cpus_per_run`` CPUs and ``mem`` per node, ``account``, ``qos``, ``partition``, a time limit
    of ``timeout_min`` and ``--signal=USR2@save_window_s``; each task runs the run's command (:func:`run_command`)
    as a :class:`RunJob`, which requeues on time-out or preemption (at most ``max_timeouts`` time-outs).
    ``cluster="local"`` runs the same jobs as local processes (submitit's LocalExecutor: one node, the same
    signal and requeue), ``"debug"`` in this process.

    Job logs (stdout/stderr, submitit's pickles) go to ``DIR/logs/submitit/``; ``sweep.json`` names each run's
    job id, log files and launch. The sweep waits for the jobs; if it is killed, jobs already submitted go on
    running on the cluster (wait for them, or ``scancel`` them, before re-running the sweep).
    """

    cluster: str | None = None
    partition: str | None = None
    gpus_per_run: int | None = None
    nodes_per_run: int | None = None
    cpus_per_run: int | None = None
    timeout_min: float = 24 * 60
    array_parallelism: int = 256
    poll_seconds: float = 2.0
    extra: dict[str, Any] | None = None
    accelerate_config: str | None = None
    mem: str | None = None
    account: str | None = None
    qos: str | None = None
    save_window_s: int = 600
    max_timeouts: int = 20

    @property
    def name(self) -> str:
        return f"submitit ({self.cluster or 'auto'})"

    def resolve(self, run: SweepRun) -> RunLaunch:
        """The launch of ``run`` (:func:`resolve_launch`). :raises DareError: several nodes off SLURM, or a save
        window not shorter than the time limit."""
        launch = resolve_launch(run, self.gpus_per_run, self.nodes_per_run, self.accelerate_config)
        if launch.nodes > 1 and self.cluster != "slurm":
            raise DareError(f"run {run.name} asks for {launch.nodes} nodes, which only --launcher slurm gives; use it, "
                            f"or --nodes-per-run 1")
        if self.save_window_s >= self.timeout_min * 60:
            raise DareError(f"the save window ({self.save_window_s} s before the time limit) is not shorter than the "
                            f"time limit ({self.timeout_min} min); lower --slurm-save-window-s or raise "
                            f"--slurm-timeout-min")
        return launch

    def executor(self, folder: Path, launch: RunLaunch | None = None):
        """A submitit executor (SlurmExecutor, LocalExecutor or DebugExecutor) writing its files under ``folder``, with
        this launcher's job parameters for runs launched as ``launch``; ``extra``: any other parameter of that
        executor (submitit's names, e.g. ``{"constraint": "a100"}`` on SLURM)."""
        import submitit

        launch = launch or RunLaunch()
        if self.cluster == "debug":
            ex = submitit.DebugExecutor(folder=folder)
            params: dict[str, Any] = {}
        elif self.cluster == "local":
            ex = submitit.LocalExecutor(folder=folder, max_num_timeout=self.max_timeouts)
            params = {"timeout_min": self.timeout_min, "nodes": 1, "tasks_per_node": 1,
                      "signal_delay_s": self.save_window_s}
            if launch.gpus_per_node:
                params["gpus_per_node"] = launch.gpus_per_node
        else:
            ex = submitit.SlurmExecutor(folder=folder, max_num_timeout=self.max_timeouts)
            params = {"time": max(int(round(self.timeout_min)), 1), "nodes": launch.nodes, "ntasks_per_node": 1,
                      "array_parallelism": self.array_parallelism, "job_name": "dare-sweep",
                      "signal_delay_s": self.save_window_s}
            if launch.gpus_per_node:
                params["gpus_per_node"] = launch.gpus_per_node
            for key, value in (("cpus_per_task", self.cpus_per_run), ("partition", self.partition), ("mem", self.mem),
                               ("account", self.account), ("qos", self.qos)):
                if value is not None:
                    params[key] = value
        params.update(self.extra or {})
        if params:
            ex.update_parameters(**params)
        return ex

    def launch(self, spec_path: str, runs: list[SweepRun], log_dir: Path, on_update: Update) -> None:
        """Submit every run (one job array per distinct launch), report each job's id, log files and launch, then
        wait: a job whose command exits 0 is ``finished``, any other (or a job the scheduler killed, or one that
        timed out ``max_timeouts`` times) ``failed`` with submitit's error text. A requeued job stays ``running``."""
        if not runs:
            return
        groups: dict[RunLaunch, list[int]] = {}
        for i, run in enumerate(runs):
            groups.setdefault(self.resolve(run), []).append(i)
        jobs: dict[int, Any] = {}
        for launch, idx in groups.items():
            ex = self.executor(log_dir / "submitit", launch)
            fns = [RunJob(run_command(spec_path, runs[i], launch), cwd=os.getcwd(), run_dir=str(runs[i].dir),
                          save_window_s=self.save_window_s) for i in idx]
            if self.cluster == "debug":  # the debug executor runs each job when its result is asked for
                submitted = [ex.submit(fn) for fn in fns]
            else:
                with ex.batch():
                    submitted = [ex.submit(fn) for fn in fns]
            for i, fn, job in zip(idx, fns, submitted):
                jobs[i] = job
                on_update(runs[i], "running", job_id=str(job.job_id), log=str(job.paths.stdout),
                          err_log=str(job.paths.stderr), command=fn.command)
        waiting = dict(jobs)
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
