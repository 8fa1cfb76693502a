"""The Linux process table, read from ``/proc`` (stdlib only).

Used on both sides of the sandbox: the runner finds the processes it must kill (its descendants),
the launcher checks that a sandbox uid is unused and counts a user's tasks for ``RLIMIT_NPROC``.
On systems without ``/proc`` every function reports nothing (:func:`available` is False).

The formats are those of proc(5): ``/proc/<pid>/stat`` (the command name, field 2, may contain
spaces and parentheses, so fields are split after its last ``)``) and ``/proc/<pid>/status``
(``Uid:`` lists the real, effective, saved and filesystem uid; ``Threads:`` the task count).
"""

from __future__ import annotations

import os

__all__ = ["available", "parents", "descendants", "session_members", "owned_by", "task_count"]

_PROC = "/proc"


def available() -> bool:
    """Whether ``/proc`` has per-process entries (Linux)."""
    return os.path.exists(os.path.join(_PROC, "self", "stat"))


def _pids() -> list[int]:
    try:
        return [int(name) for name in os.listdir(_PROC) if name.isdigit()]
    except OSError:
        return []


def _stat(pid: int) -> list[str] | None:
    """Fields 3.. of ``/proc/<pid>/stat`` (state, ppid, pgrp, session, ...); None if the process is gone."""
    try:
        with open(os.path.join(_PROC, str(pid), "stat"), "rb") as f:
            raw = f.read().decode("ascii", "replace")
    except OSError:
        return None
    return raw[raw.rfind(")") + 2 :].split()


def _status(pid: int) -> dict[str, str]:
    """``/proc/<pid>/status`` as ``{key: value}``; empty if the process is gone."""
    try:
        with open(os.path.join(_PROC, str(pid), "status"), "rb") as f:
            lines = f.read().decode("ascii", "replace").splitlines()
    except OSError:
        return {}
    return dict(line.split(":", 1) for line in lines if ":" in line)


def parents() -> dict[int, int]:
    """``{pid: parent pid}`` for every process (zombies included)."""
    table = {}
    for pid in _pids():
        fields = _stat(pid)
        if fields:
            table[pid] = int(fields[1])
    return table


def descendants(root: int) -> list[int]:
    """Pids of all processes below ``root`` in the process tree (children, grandchildren, ...)."""
    children: dict[int, list[int]] = {}
    for pid, ppid in parents().items():
        children.setdefault(ppid, []).append(pid)
    found, todo = [], [root]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def session_members(sid: int) -> list[int]:
    """Pids of the processes whose session id is ``sid``."""
    members = []
    for pid in _pids():
        fields = _stat(pid)
        if fields and int(fields[3]) == sid:
            members.append(pid)
    return members


def owned_by(uid: int) -> list[int]:
    """Pids of the processes whose real uid is ``uid`` (zombies included)."""
    found = []
    for pid in _pids():
        uids = _status(pid).get("Uid", "").split()
        if uids and int(uids[0]) == uid:
            found.append(pid)
    return found


def task_count(uid: int) -> int:
    """Tasks (threads) whose real uid is ``uid``: what the kernel compares with ``RLIMIT_NPROC``."""
    total = 0
    for pid in _pids():
        status = _status(pid)
        uids = status.get("Uid", "").split()
        if uids and int(uids[0]) == uid:
            total += int(status.get("Threads", "1").strip() or 1)
    return total
