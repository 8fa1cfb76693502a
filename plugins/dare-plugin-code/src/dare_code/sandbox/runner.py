"""The sandbox's process side: ``python -I -S -B -X utf8 runner.py`` (stdlib only).

Started by :func:`dare_code.sandbox.run_python`, inside ``bwrap`` where it works (:mod:`.bwrap`),
else directly. It never imports :mod:`dare` (that would cost a pydantic import per program); it
loads its sibling modules by file path. Input on stdin: an 8-byte big-endian length, that many
bytes of JSON config (the keys below, including the program's units), then, until end of file, the
test source (only when the config says there are tests). It runs as up to three processes:

* the **supervisor** (this process) reads the config, becomes a subreaper, forks the program
  process, only *then* reads the tests (so they were never in the program's memory) and forks the
  test process. It drains the program's stdout/stderr, enforces the wall-clock limit, the
  whole-tree memory limit (resident anonymous + shared memory of every program process, polled every
  :data:`POLL_S`, plus the size of the memfd files they hold open, every :data:`MEMFD_EVERY` polls),
  the task cap (the ``Threads:`` of every program process above ``max_processes``: the tree is killed,
  ``killed_for: "tasks"``; exact where the pids cgroup of :mod:`dare_code.sandbox.taskcap` holds it)
  and the disk quota and entry count of the program's directory (polled likewise;
  under bwrap the tmpfs size is the hard quota and ``statvfs`` counts its inodes, else the
  directory is walked); then it kills and reaps *every* descendant and prints one JSON report;
* the **program process** and the **test process** (only with tests): see :mod:`.child`. The
  test process's exit status is the verdict; the program cannot write to it.

Config keys: ``units`` ([name, source] pairs), ``setup_count`` (leading units the test process runs
too), ``test_units`` (trusted [name, source] pairs only the test process runs), ``bound_names`` (the
only names the tests take from the program, or null), ``tests_name`` (null: no tests), ``entry_points``,
``packages``, ``sys_path``, ``readable``,
``listable``, ``workdir``, ``bwrap`` (bool), ``timeout_s``, ``cpu_time_s``, ``memory_mb``,
``max_processes``, ``max_file_mb``, ``max_disk_mb``, ``uid`` (int or null), ``read_all`` (bool),
``tasks_cgroup`` (the ``cgroup.procs`` file the program joins, or null).
"""

from __future__ import annotations

import importlib.util
import json
import os
import resource
import select
import signal
import struct
import sys
import time

TAIL_BYTES = 4096
KILL_DEADLINE_S = 5.0
#: seconds between two checks of the program tree's memory and disk use
POLL_S = 0.01
#: seconds the program may take to end by itself after the test process has ended
END_GRACE_S = 0.2
#: the memory held in open memfd files is added up every this many polls (it lists each process's descriptors)
MEMFD_EVERY = 5
#: most files and directories the program may create
MAX_ENTRIES = 10_000

_HERE = os.path.dirname(os.path.abspath(__file__))


def _sibling(name: str):
    """Load ``<name>.py`` next to this file under a private module name."""
    spec = importlib.util.spec_from_file_location(f"_dare_sandbox_{name}", os.path.join(_HERE, f"{name}.py"))
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


procfs, identity, landlock, seccomp, guard, wire, remote, child = (
    _sibling(n) for n in ("procfs", "identity", "landlock", "seccomp", "guard", "wire", "remote", "child")
)


# ------------------------------------------------------------------------------------ supervisor
class _Stop(Exception):
    """SIGTERM from the launcher."""


def _on_term(signum, frame):
    raise _Stop


def _read_exact(fd: int, n: int) -> bytes:
    chunks, left = [], n
    while left:
        chunk = os.read(fd, min(left, 1 << 20))
        if not chunk:
            raise EOFError(f"stdin ended {left} bytes early")
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def _read_rest(fd: int) -> bytes:
    chunks = []
    while chunk := os.read(fd, 1 << 20):
        chunks.append(chunk)
    return b"".join(chunks)


def _disk_use(root: str, own_filesystem: bool) -> tuple[int, int]:
    """Allocated bytes and entry count beneath ``root``: from ``statvfs`` when ``root`` is a file
    system of its own (bubblewrap's tmpfs: O(1)), else by walking it (stops past :data:`MAX_ENTRIES`)."""
    if own_filesystem:
        fs = os.statvfs(root)
        return (fs.f_blocks - fs.f_bfree) * fs.f_frsize, fs.f_files - fs.f_ffree - 1
    total, entries, todo = 0, 0, [root]
    while todo and entries <= MAX_ENTRIES:
        try:
            with os.scandir(todo.pop()) as it:
                for entry in it:
                    entries += 1
                    try:
                        st = entry.stat(follow_symlinks=False)
                    except OSError:
                        continue
                    total += st.st_blocks * 512
                    if entry.is_dir(follow_symlinks=False):
                        todo.append(entry.path)
        except OSError:
            continue
    return total, entries


class _Tail:
    """The last :data:`TAIL_BYTES` of a stream, and its total size."""

    def __init__(self):
        self.data, self.total = b"", 0

    def add(self, chunk: bytes) -> None:
        self.total += len(chunk)
        self.data = (self.data + chunk)[-TAIL_BYTES:]

    def text(self) -> str:
        return self.data.decode("utf-8", "replace")


def _supervise(cfg: dict, pids: dict, streams: dict, tests_pid: int | None) -> dict:
    """Wait for the end of the run, enforcing the wall clock, memory and disk limits."""
    deadline = time.monotonic() + float(cfg["timeout_s"])
    memory_limit_kib = int(cfg["memory_mb"]) * 1024
    disk_limit = int(cfg["max_disk_mb"]) * 1024 * 1024
    skip = frozenset({tests_pid}) if tests_pid else frozenset()
    statuses: dict[int, int] = {}
    max_tasks = int(cfg["max_processes"])
    out = {"timed_out": False, "killed_for": None, "peak_memory_mb": 0.0, "peak_disk_mb": 0.0, "peak_tasks": 0,
           "statuses": statuses}
    waiting_for = tests_pid if tests_pid else pids["program"]
    open_fds = dict(streams)
    polls, hidden, grace_end = 0, 0, None
    try:
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                out["timed_out"] = True
                break
            ready, _, _ = select.select(list(open_fds), [], [], min(POLL_S, left))
            for fd in ready:
                chunk = os.read(fd, 65536)
                if chunk:
                    open_fds[fd].add(chunk)
                else:
                    del open_fds[fd]
            try:
                while True:
                    pid, status = os.waitpid(-1, os.WNOHANG)
                    if pid == 0:
                        break
                    statuses[pid] = status
            except ChildProcessError:
                pass
            if pids["program"] in statuses and (not tests_pid or tests_pid in statuses):
                break
            if waiting_for in statuses:  # the verdict is in: the program gets a moment to end by itself
                if grace_end is None:
                    grace_end = time.monotonic() + END_GRACE_S
                elif time.monotonic() > grace_end:
                    break
            tree = procfs.subtree(os.getpid(), skip)
            polls += 1
            if polls % MEMFD_EVERY == 1:
                hidden = sum(procfs.memfd_kib(p) for p in tree)
            tasks = sum(procfs.threads(p) for p in tree)
            out["peak_tasks"] = max(out["peak_tasks"], tasks)
            if tasks > max_tasks:  # the cap where no pids cgroup holds it (root: RLIMIT_NPROC does not bind)
                out["killed_for"] = "tasks"
                break
            used = hidden + sum(procfs.private_kib(p) for p in tree)
            out["peak_memory_mb"] = max(out["peak_memory_mb"], used / 1024)
            if used > memory_limit_kib:
                out["killed_for"] = "memory"
                break
            size, entries = _disk_use(cfg["workdir"], cfg["bwrap"])
            out["peak_disk_mb"] = max(out["peak_disk_mb"], size / 2**20)
            if size > disk_limit or entries > MAX_ENTRIES:
                out["killed_for"] = "disk"
                break
    except _Stop:
        out["timed_out"] = True
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    return out


def _kill_descendants(statuses: dict[int, int], known: set[int]) -> int:
    """SIGKILL and reap every descendant; returns how many besides ``known`` were still there
    (running or zombie) when the run ended.

    As a subreaper this process inherits every orphan, so the tree walk sees them all, and reaping
    them leaves no zombie behind (PID 1 in a container may never reap).
    """
    killed: set[int] = set()
    deadline = time.monotonic() + KILL_DEADLINE_S
    while time.monotonic() < deadline:
        alive = procfs.subtree(os.getpid())
        for pid in alive:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        killed.update(alive)
        try:
            while True:
                pid, status = os.waitpid(-1, os.WNOHANG)
                if pid == 0:
                    break
                statuses.setdefault(pid, status)
        except ChildProcessError:
            if not alive:
                break
        time.sleep(0.002)
    return len(killed - known)


def _parse_setup(raw: bytes) -> dict:
    try:
        return json.loads(raw)
    except ValueError:
        return {"error": f"incomplete setup report {raw[:200]!r} (the child died during setup)"}


def _code(status: int | None) -> int | None:
    return None if status is None else os.waitstatus_to_exitcode(status)


def _prepare_workdir(cfg: dict) -> None:
    """Inside bwrap: hand the size-limited ``/tmp`` to the program's uid, private to it."""
    if cfg["bwrap"]:
        if cfg["uid"] is not None:
            os.chown(cfg["workdir"], cfg["uid"], cfg["uid"])
        os.chmod(cfg["workdir"], 0o700)


def main() -> int:
    """Supervise one sandboxed program; prints the JSON report (see the module docstring)."""
    (size,) = struct.unpack(">Q", _read_exact(0, 8))
    cfg = json.loads(_read_exact(0, size))
    sys.path.extend(cfg["sys_path"])
    subreaper = identity.become_subreaper()
    _prepare_workdir(cfg)
    # before forbid_inspection: a process that is not dumpable cannot write its own uid_map
    cfg["noexec"] = identity.noexec_workdir(cfg["workdir"], cfg["bwrap"], cfg["max_disk_mb"], cfg["uid"])
    identity.forbid_inspection()
    signal.signal(signal.SIGTERM, _on_term)
    out_r, out_w = os.pipe()
    err_r, err_w = os.pipe()
    setup_r, setup_w = os.pipe()
    request_r, request_w = os.pipe()
    reply_r, reply_w = os.pipe()
    tests = cfg["tests_name"] is not None
    pids: dict[str, int] = {}
    streams: dict[int, _Tail] = {}
    started = time.monotonic()
    try:
        pids["program"] = os.fork()
        if pids["program"] == 0:
            child.program(cfg, {"out": out_w, "err": err_w, "setup": setup_w, "request": request_r, "reply": reply_w})
        for fd in (out_w, err_w, setup_w, request_r, reply_w):
            os.close(fd)
        streams.update({out_r: _Tail(), err_r: _Tail(), setup_r: _Tail()})
        tests_pid = None
        if tests:
            source = _read_rest(0).decode("utf-8", "replace")
            tests_err_r, tests_err_w = os.pipe()
            tests_pid = os.fork()
            if tests_pid == 0:
                child.tests(cfg, source, {"request": request_w, "reply": reply_r, "tests_err": tests_err_w})
            del source
            os.close(tests_err_w)
            streams[tests_err_r] = _Tail()
            pids["tests"] = tests_pid
        os.close(request_w)
        os.close(reply_r)
        run = _supervise(cfg, pids, streams, tests_pid)
    except _Stop:
        run = {"timed_out": True, "killed_for": None, "peak_memory_mb": 0.0, "peak_disk_mb": 0.0, "peak_tasks": 0,
               "statuses": {}}
    statuses = run.pop("statuses")
    leftover = _kill_descendants(dict(statuses), set(pids.values()))  # statuses: those that ended by themselves
    run_s = time.monotonic() - started
    for fd, tail in streams.items():  # what was written before the end
        os.set_blocking(fd, False)
        try:
            while chunk := os.read(fd, 65536):
                tail.add(chunk)
        except OSError:
            pass
    program_status = statuses.get(pids.get("program", -1))
    tests_status = statuses.get(pids.get("tests", -1)) if tests else None
    finished = not run["timed_out"] and run["killed_for"] is None
    verdict = tests_status if tests else program_status
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    tails = list(streams.values()) + [_Tail()] * (4 - len(streams))
    if cfg["bwrap"]:  # the size-limited tmpfs: what the program left in it
        run["peak_disk_mb"] = max(run["peak_disk_mb"], _disk_use(cfg["workdir"], True)[0] / 2**20)
    print(
        json.dumps(
            {
                "pid": pids.get("program"),
                "pidns": procfs.pid_namespace() if cfg["bwrap"] else None,
                "returncode": _code(program_status),
                "tests_returncode": _code(tests_status),
                "passed": finished and verdict is not None and _code(verdict) == 0,
                "leftover": leftover,
                "run_s": run_s,
                "subreaper": subreaper,
                "cpu_s": usage.ru_utime + usage.ru_stime,
                "maxrss_mb": usage.ru_maxrss / 1024,
                "setup": _parse_setup(tails[2].data),
                "stdout": tails[0].text(),
                "stderr": tails[1].text(),
                "tests_stderr": tails[3].text() if tests else "",
                "stdout_bytes": tails[0].total,
                **run,
            }
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
