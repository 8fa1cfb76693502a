"""One command at a time per run directory: an OS file lock held for the whole command.

Two commands writing one ``output.dir`` at once would mix their ``metrics.jsonl`` and leave ``model/``
to whichever finished last. :func:`hold_run_dir` takes an exclusive, non-blocking ``flock`` on the
file :attr:`dare.run.RunDir.lock` (``.<name>.lock`` next to the run directory ``<name>``: next to it, not in it, so
the directory's own rules stay untouched and the lock exists before the directory does). The
lock file records who holds it (pid, host, command, start time), so a second command stops at once
with a message naming the running one.

* The kernel releases a ``flock`` when its process ends in any way (exit, exception, SIGKILL); on a
  normal exit the lock file is also removed. A lock file left by a killed process is *stale*: the
  next command takes the lock and says whose it was.
* Several processes of one launch (``torchrun``/``accelerate launch``): only the main process takes the
  lock; it tells the others whether it got it (:func:`dare.scaling.distributed.from_main`), so every process
  of a refused launch stops with the same error and none of them waits at a barrier.
* The lock is advisory: it keeps out other DARE commands, not other programs.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import shlex
import socket
import sys
import time
from collections.abc import Iterator
from pathlib import Path

from dare.errors import DareError

__all__ = ["RunDirLocked", "hold_run_dir", "acquire", "release"]


class RunDirLocked(DareError):
    """Another command holds the run directory's lock."""


def _holder_text(record: dict | None) -> str:
    if not record:
        return "another DARE process (it has not written its pid yet)"
    since = record.get("started")
    when = f", running since {time.strftime('%Y-%m-%d %H:%M:%S', time.localtime(since))}" if since else ""
    return (f"process {record.get('pid')} on host {record.get('host')} (`{record.get('command')}`{when})")


def _read_record(fd: int) -> dict | None:
    try:
        os.lseek(fd, 0, os.SEEK_SET)
        data = os.read(fd, 64 * 1024)
        record = json.loads(data) if data.strip() else None
        return record if isinstance(record, dict) else None
    except (OSError, ValueError):
        return None


def acquire(rundir) -> tuple[int, Path, list[Path]] | None:
    """Take the lock of the run directory ``rundir`` (a :class:`dare.run.rundir.RunDir`: its ``lock`` file) for this
    process, or raise.

    :returns: ``(fd, lock file, parent directories created for it)`` for :func:`release`; None when the
        lock file cannot be created (a read-only or foreign parent: the run's own checks report that).
    :raises RunDirLocked: a live process holds it (named: pid, host, command, start time).
    """
    run_dir, path = rundir.path, rundir.lock
    created: list[Path] = []
    for p in [path.parent, *path.parent.parents]:
        if p.exists():
            break
        created.append(p)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError:
        return None
    for _ in range(10):  # retry when the holder removed the file between our open and our lock
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        except OSError:
            _remove_dirs(created)
            return None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            record = _read_record(fd)
            os.close(fd)
            if exc.errno not in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                return None  # a filesystem without flock: run unlocked, as before
            raise RunDirLocked(
                f"output.dir {str(run_dir)!r} is in use by {_holder_text(record)}: two commands writing one run "
                f"directory would mix their metrics and models; wait for it to finish, stop it, or choose another "
                f"output.dir (the lock is {path})") from None
        try:
            same = os.fstat(fd).st_ino == os.stat(path).st_ino
        except FileNotFoundError:
            same = False
        if not same:
            os.close(fd)
            continue
        stale = _read_record(fd)
        if stale:
            print(f"{run_dir}: taking over the stale lock of {_holder_text(stale)}, which is no longer running",
                  file=sys.stderr)
        record = {"pid": os.getpid(), "host": socket.gethostname(), "command": shlex.join(["dare", *sys.argv[1:]])
                  if Path(sys.argv[0]).name == "dare" else shlex.join(sys.argv), "started": time.time()}
        os.ftruncate(fd, 0)
        os.pwrite(fd, (json.dumps(record) + "\n").encode(), 0)
        return fd, path, created
    return None  # pragma: no cover - the file kept being replaced


def release(handle: tuple[int, Path, list[Path]] | None) -> None:
    """Remove the lock file, then drop the lock (in that order: a command waiting on the old file retries)."""
    if handle is None:
        return
    fd, path, created = handle
    with contextlib.suppress(OSError):
        path.unlink()
    os.close(fd)
    _remove_dirs(created)


def _remove_dirs(created: list[Path]) -> None:
    """Remove the parent directories made for the lock file, innermost first, while empty."""
    for p in created:
        try:
            p.rmdir()
        except OSError:
            break


@contextlib.contextmanager
def hold_run_dir(rundir) -> Iterator[None]:
    """Hold the lock of the run directory ``rundir`` (a :class:`dare.run.rundir.RunDir`) for the block (the main
    process of a launch; see the module docstring); :meth:`dare.run.rundir.RunDir.hold` is the usual way in.

    Joins the launch's process group first (:func:`dare.scaling.distributed.setup`) when several processes run.

    :raises RunDirLocked: on every process of the launch, when another command holds the lock.
    """
    from dare.scaling import distributed

    several = distributed._requested_world_size() > 1
    if several:
        distributed.setup()
    handle, refusal = None, None
    if distributed.is_main():
        try:
            handle = acquire(rundir)
        except RunDirLocked as exc:
            refusal = str(exc)
    if several:
        refusal = distributed.from_main(refusal)
    if refusal is not None:
        raise RunDirLocked(refusal)
    try:
        yield
    finally:
        release(handle)
