"""Processes: how many there are, which one owns the run directory, barriers, sharding and gathering.

DARE never launches processes itself: ``accelerate launch`` or ``torchrun`` start them (docs/scaling.md)
and :func:`setup` joins the process group through accelerate (``PartialState``: gloo on CPU, nccl on
GPU). One process, the main one (rank 0), creates and renames everything in the run directory; the
others compute and wait at barriers. Evaluation is sharded: each process decodes a contiguous slice of
the rows (:func:`shard`) and the results are gathered (:func:`gather`) before scoring and reporting.

Misconfigured launches that would silently train alone are refused by :func:`check_launch`.

Sharded models (FSDP2, ZeRO-3: lock-step decoding, the reference policy's placement, the CPU switch) are
:mod:`dare.scaling.sharding`; ``DARE_CPU_SHARDING=1`` (:func:`cpu_sharding`) applies a launch's sharding on CPU
processes.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator
from typing import Any

import torch

from dare.errors import DareError

__all__ = [
    "LaunchError",
    "setup",
    "check_launch",
    "world_size",
    "rank",
    "is_main",
    "barrier",
    "shard",
    "gather",
    "from_main",
    "main_first",
    "teardown",
    "device",
    "shards_model",
    "CPU_SHARDING_ENV",
    "cpu_sharding",
]

CPU_SHARDING_ENV = "DARE_CPU_SHARDING"

_ENV_FIX = ("on a CPU machine launch with `ACCELERATE_USE_CPU=1 torchrun --nproc_per_node N --no-python dare run SPEC` "
            "or `ACCELERATE_USE_CPU=1 accelerate launch --multi_gpu --num_processes N $(which dare) run SPEC` "
            "(docs/scaling.md)")


class LaunchError(DareError):
    """The environment asks for several processes but they did not form one process group."""


def _requested_world_size() -> int:
    """Processes the launcher says there are (``WORLD_SIZE`` and its MPI equivalents), 1 when unset."""
    for key in ("WORLD_SIZE", "PMI_SIZE", "OMPI_COMM_WORLD_SIZE", "MV2_COMM_WORLD_SIZE"):
        value = os.environ.get(key)
        if value and value.isdigit():
            return int(value)
    return 1


def check_launch(num_processes: int) -> None:
    """Refuse a launch that would train alone while the user asked for several processes.

    * the launcher set ``WORLD_SIZE > 1`` but the process group has ``num_processes`` = 1 (e.g. a GPU
      launch config on a machine without GPUs);
    * ``accelerate launch --cpu --num_processes N`` (N > 1): accelerate's simple launcher starts ONE
      process (it sets ``ACCELERATE_USE_CPU`` and ``MASTER_ADDR`` but no ``WORLD_SIZE``).

    :raises LaunchError: naming what was asked, what formed, and the launch command that works.
    """
    asked = _requested_world_size()
    if asked > 1 and num_processes != asked:
        raise LaunchError(f"the launcher started {asked} processes (WORLD_SIZE={asked}) but they formed a process "
                          f"group of {num_processes}: each would train alone on the whole data; {_ENV_FIX}")
    simple_launcher = ("ACCELERATE_USE_CPU" in os.environ and "MASTER_ADDR" in os.environ
                       and "WORLD_SIZE" not in os.environ)
    if simple_launcher and os.environ.get("ACCELERATE_MIXED_PRECISION") is not None and num_processes == 1:
        raise LaunchError("`accelerate launch --cpu --num_processes N` starts ONE process whatever N is (accelerate's "
                          f"simple launcher), so this run would silently use one process; {_ENV_FIX}. For one process, "
                          "run `dare run SPEC` directly")


def setup():
    """Join the process group (accelerate ``PartialState``; CPU when no CUDA device) and check the launch.

    :returns: the ``accelerate.PartialState``. :raises LaunchError: see :func:`check_launch`.
    """
    from accelerate import PartialState  # accelerate is imported only by commands that run models

    if cpu_sharding() and not torch.cuda.is_available():  # DeepSpeed's CPU accelerator (before deepspeed is imported)
        os.environ.setdefault("DS_ACCELERATOR", "cpu")
    state = PartialState(cpu=not torch.cuda.is_available())
    check_launch(state.num_processes)
    if state.num_processes > 1:
        _exit_with_launcher()
    if shards_model() and state.device.type == "cpu" and state.is_main_process and not cpu_sharding():
        print("warning: the launch asks for FSDP/DeepSpeed but this process runs on the CPU, where accelerate "
              "uses plain data parallelism: every process holds the whole model; set DARE_CPU_SHARDING=1 to shard "
              "it on the CPU processes too (docs/scaling.md)", file=sys.stderr)
    return state


def _exit_with_launcher() -> None:
    """Ask the kernel to kill this worker when the launcher that started it dies (Linux ``PR_SET_PDEATHSIG``).

    torchrun starts each worker in a session of its own, so ``kill -9`` of torchrun (or of its process group)
    leaves the workers running as orphans: they go on training and writing the run directory, and a relaunch
    collides with them. With this, they are killed with the launcher (SIGKILL, which every DARE write survives:
    temp path, then rename). No-op off Linux; a worker whose launcher is already gone exits at once.
    """
    if not sys.platform.startswith("linux") or "TORCHELASTIC_RUN_ID" not in os.environ:
        return
    import ctypes
    import signal

    parent = os.getppid()
    try:
        ctypes.CDLL(None, use_errno=True).prctl(1, int(signal.SIGKILL), 0, 0, 0)  # PR_SET_PDEATHSIG = 1
    except (OSError, AttributeError):
        return
    if os.getppid() != parent:  # the launcher died before the request took effect
        os._exit(1)


def shards_model() -> bool:
    """Whether the launch shards the model over the processes (accelerate FSDP or DeepSpeed): the trainer then
    places the model on the devices itself, so DARE leaves it where it was loaded (CPU)."""
    keys = ("ACCELERATE_USE_FSDP", "ACCELERATE_USE_DEEPSPEED")
    return any(os.environ.get(k, "").lower() in ("1", "true") for k in keys)


def cpu_sharding() -> bool:
    """Whether ``DARE_CPU_SHARDING`` (``1``/``true``) asks for the launch's sharding (FSDP2, DeepSpeed ZeRO) on CPU
    processes, where accelerate 1.16 silently falls back to DDP
    (:func:`dare.scaling.sharding.sharding_accelerator_state`)."""
    return os.environ.get(CPU_SHARDING_ENV, "").lower() in ("1", "true")


def device() -> torch.device:
    """This process's compute device: ``cuda:LOCAL_RANK`` when CUDA is available (and ``ACCELERATE_USE_CPU`` is
    not set), else the CPU. Models are moved there after loading (:class:`dare.run.Run`, ``dare generate``)."""
    if torch.cuda.is_available() and os.environ.get("ACCELERATE_USE_CPU", "").lower() not in ("1", "true"):
        return torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")))
    return torch.device("cpu")


def _initialized() -> bool:
    return torch.distributed.is_available() and torch.distributed.is_initialized()


def world_size() -> int:
    """Processes in the group (1 without one)."""
    return torch.distributed.get_world_size() if _initialized() else 1


def rank() -> int:
    """This process's global rank (0 without a group)."""
    return torch.distributed.get_rank() if _initialized() else 0


def is_main() -> bool:
    """Whether this process owns the run directory (rank 0)."""
    return rank() == 0


def barrier() -> None:
    """Wait until every process gets here (no-op with one process)."""
    if _initialized() and world_size() > 1:
        torch.distributed.barrier()


def shard(n: int) -> range:
    """This process's contiguous slice of ``n`` items: ``ceil(n / world)`` per process, the last ones shorter."""
    w, r = world_size(), rank()
    per = -(-n // w)
    return range(min(r * per, n), min((r + 1) * per, n))


def gather(obj: Any) -> list[Any]:
    """Every process's ``obj`` (small Python objects: lists of records, numbers), in rank order, on every
    process. Objects travel between this run's own processes only (``torch.distributed.all_gather_object``)."""
    if not _initialized() or world_size() == 1:
        return [obj]
    out: list[Any] = [None] * world_size()
    torch.distributed.all_gather_object(out, obj)
    return out


def from_main(obj: Any) -> Any:
    """The main process's ``obj`` on every process (a decision only one process may take, e.g. which checkpoint to
    resume from while files may still be appearing). Collective: every process must call it."""
    return gather(obj)[0]


@contextlib.contextmanager
def main_first() -> Iterator[None]:
    """Run the block on the main process first, then on the others (e.g. create a file once, then read it)."""
    if not is_main():
        barrier()
    yield
    if is_main():
        barrier()


def teardown() -> None:
    """Barrier, then destroy the process group (a destroy right after a collective can abort a gloo rank)."""
    if _initialized():
        barrier()
        torch.distributed.destroy_process_group()
