"""The Linux process table, read from ``/proc`` (stdlib only).

Used on both sides of the sandbox: the runner finds the processes it must kill (its descendants),
the launcher checks that a sandbox uid is unused and counts a user's tasks for ``RLIMIT_NPROC``.
On systems without ``/proc`` every function reports nothing (:func:`available` is False).

The formats are those of proc(5): ``/proc/<pid>/stat`` (the command name, field 2, may contain
spaces and parentheses, so fields are split after its last ``)``) and ``/proc/<pid>/status``
(``Uid:`` lists the real, effective, saved and filesystem uid; ``Threads:`` the task count;
``RssAnon``/``RssShmem``: resident anonymous and shared-memory kB), and
``/proc/<pid>/task/<tid>/children`` (``CONFIG_PROC_CHILDREN``).
"""

from __future__ import annotations

import os

__all__ = [
    "available",
    "parents",
    "descendants",
    "children",
    "subtree",
    "private_kib",
    "memfd_kib",
    "threads",
    "session_members",
    "owned_by",
    "task_count",
    "pid_namespace",
    "in_namespace",
]

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


def children(pid: int) -> list[int] | None:
    """Direct children of ``pid`` (of all its threads); None when the kernel does not list them
    (no ``CONFIG_PROC_CHILDREN``) or the process is gone."""
    try:
        tids = os.listdir(os.path.join(_PROC, str(pid), "task"))
    except OSError:
        return None
    found = []
    for tid in tids:
        try:
            with open(os.path.join(_PROC, str(pid), "task", tid, "children"), "rb") as f:
                found.extend(int(x) for x in f.read().split())
        except OSError:
            if not found and tid == tids[0]:
                return None
    return found


def subtree(root: int, skip: frozenset = frozenset()) -> list[int]:
    """Pids below ``root`` (children, grandchildren, ...), leaving out ``skip`` and their subtrees.
    Walks the children lists (cheap); falls back to a scan of every process."""
    found, todo = [], [root]
    while todo:
        kids = children(todo.pop())
        if kids is None:
            return [p for p in descendants(root) if p not in skip]
        for kid in kids:
            if kid not in skip:
                found.append(kid)
                todo.append(kid)
    return found


def private_kib(pid: int) -> int:
    """Resident anonymous plus shared-memory kB of ``pid`` (``RssAnon + RssShmem``): the memory it
    holds that no file backs; 0 if the process is gone or exiting."""
    status = _status(pid)
    total = 0
    for key in ("RssAnon", "RssShmem"):
        try:
            total += int(status.get(key, "0 kB").split()[0])
        except (ValueError, IndexError):
            pass
    return total


def threads(pid: int) -> int:
    """Tasks (threads) of process ``pid`` (``Threads:``); 0 if the process is gone."""
    try:
        return int(_status(pid).get("Threads", "0").strip() or 0)
    except ValueError:
        return 0


def memfd_kib(pid: int) -> int:
    """kB held in anonymous memory files (``memfd_create``) that ``pid`` has open: memory that
    neither its resident set nor any file system's usage shows while unmapped. Needs ptrace access
    to ``pid`` (same uid, or ``CAP_SYS_PTRACE``); 0 if the process is gone or unreadable."""
    fd_dir = os.path.join(_PROC, str(pid), "fd")
    total = 0
    try:
        names = os.listdir(fd_dir)
    except OSError:
        return 0
    for name in names:
        path = os.path.join(fd_dir, name)
        try:
            if os.readlink(path).startswith("/memfd:"):
                total += os.stat(path).st_size
        except OSError:
            pass
    return total // 1024


def pid_namespace(pid: int | str = "self") -> str | None:
    """The PID namespace of ``pid`` (e.g. ``pid:[4026532178]``; the same text in every namespace)."""
    try:
        return os.readlink(os.path.join(_PROC, str(pid), "ns", "pid"))
    except OSError:
        return None


def in_namespace(namespace: str) -> list[int]:
    """Pids of the processes in the PID namespace ``namespace`` (as :func:`pid_namespace` names it)."""
    return [pid for pid in _pids() if pid_namespace(pid) == namespace]


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
