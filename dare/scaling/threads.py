"""How many CPU threads torch uses in a run (``torch.set_num_threads``: intra-op threads of every CPU kernel).

A spec chooses with ``train.num_threads`` (commands that train) or ``eval.num_threads`` (commands that only
evaluate, e.g. ``dare eval``: no ``train`` section needed); each falls back on the other. Without either,
DARE chooses (:func:`choose_threads`): torch's own default (one thread per physical core, or
``OMP_NUM_THREADS`` when set), but at most this process's share of the CPUs it may run on when a launcher
started several processes on the machine (``LOCAL_WORLD_SIZE``), so N processes do not each start one thread
per core (oversubscription: every thread then waits for a core, and a step can take several times longer).
The default never depends on the machine's load, so the same spec on the same machine computes with the
same threads (thread count changes floating-point summation order); when the machine is busy a run says
so (:func:`load_warning`) and names the setting that helps.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

__all__ = ["ThreadChoice", "choose_threads", "apply", "usable_cpus", "local_processes", "load_warning"]


@dataclass(frozen=True)
class ThreadChoice:
    """``threads`` torch uses and ``reason``: the spec key that set it, or how the default was reached."""

    threads: int
    reason: str

    def describe(self) -> str:
        """``"2 (default: ...)"`` or ``"4 (train.num_threads)"``."""
        return f"{self.threads} ({self.reason})"


def usable_cpus() -> int:
    """CPUs this process may run on (its affinity mask; ``os.cpu_count()`` where there is none)."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # pragma: no cover - not on Linux
        return os.cpu_count() or 1


def local_processes() -> int:
    """Processes a launcher (torchrun, accelerate) started on this machine: ``LOCAL_WORLD_SIZE``, else 1."""
    try:
        return max(1, int(os.environ.get("LOCAL_WORLD_SIZE", "1")))
    except ValueError:
        return 1


def choose_threads(train_threads: int | None, eval_threads: int | None, training: bool, torch_default: int,
                   cpus: int, processes: int, omp_env: str | None = None) -> ThreadChoice:
    """The CPU threads of one command.

    :param train_threads: / :param eval_threads: ``train.num_threads`` / ``eval.num_threads`` (None: unset); a
        command that trains uses the first that is set, one that only evaluates the second, then the first.
    :param torch_default: ``torch.get_num_threads()`` before any change (physical cores, or ``OMP_NUM_THREADS``).
    :param cpus: :func:`usable_cpus`. :param processes: :func:`local_processes`.
    :param omp_env: ``$OMP_NUM_THREADS``; when set it is the user's choice and kept.
    :returns: e.g. 8 processes on 16 CPUs with torch's default of 16 -> ``ThreadChoice(2, "default: ...")``.
    """
    order = (("train.num_threads", train_threads), ("eval.num_threads", eval_threads))
    for key, n in order if training else order[::-1]:
        if n:
            return ThreadChoice(n, key)
    if omp_env and omp_env.strip():
        return ThreadChoice(torch_default, f"OMP_NUM_THREADS={omp_env.strip()}")
    share = max(1, cpus // max(1, processes))
    n = max(1, min(torch_default, share))
    per = f"{cpus} CPUs / {processes} processes on this machine" if processes > 1 else f"{cpus} CPUs"
    return ThreadChoice(n, f"default: torch's {torch_default}, at most {per}; set "
                           f"{'train' if training else 'eval'}.num_threads to choose")


def apply(spec, training: bool) -> ThreadChoice:
    """Choose (:func:`choose_threads`) from ``spec`` (a :class:`dare.runspec.RunSpec`) and set torch's threads.

    On a CUDA machine the CPU threads are left as torch chose them unless the spec sets them (``reason`` says so).
    """
    import torch

    train_threads = spec.train.num_threads if spec.train is not None else None
    eval_threads = spec.eval.num_threads if spec.eval is not None else None
    if torch.cuda.is_available():
        return ThreadChoice(torch.get_num_threads(), "torch's default (CUDA device: the GPU computes)")
    choice = choose_threads(train_threads, eval_threads, training, torch.get_num_threads(), usable_cpus(),
                            local_processes(), os.environ.get("OMP_NUM_THREADS"))
    if choice.threads != torch.get_num_threads():
        torch.set_num_threads(choice.threads)
    return choice


def load_warning(threads: int, cpus: int | None = None, processes: int | None = None,
                 load: float | None = None) -> str | None:
    """One line when other work keeps the machine busy (the 1-minute load average, less this command's own
    processes, plus the threads this command adds exceed the usable CPUs), naming the setting that helps; None otherwise
    or where there is no load average. ``cpus``/``processes``/``load`` default to this machine's (:func:`usable_cpus`,
    :func:`local_processes`, ``os.getloadavg()[0]``)."""
    cpus = usable_cpus() if cpus is None else cpus
    processes = local_processes() if processes is None else processes
    if load is None:
        try:
            load = os.getloadavg()[0]
        except (OSError, AttributeError):  # pragma: no cover - not on Unix
            return None
    ours = threads * processes
    others = max(0.0, load - processes)  # the load average counts this command's processes (starting up) too
    if threads <= 1 or others + ours <= cpus + 0.5:
        return None
    return (f"the machine is busy (load average {load:.1f} on {cpus} CPUs) and this command adds {ours} threads: "
            f"they will wait for cores and every step slows down; fewer threads (e.g. train.num_threads: 1 or "
            f"eval.num_threads: 1) can be several times faster under load")
