"""Bubblewrap (``bwrap``, https://github.com/containers/bubblewrap): the sandbox's namespace layer
where the binary is installed and works (Debian/Ubuntu package ``bubblewrap``).

The whole sandbox run (supervisor, program and tests) starts inside one ``bwrap`` with:

* a new mount namespace whose root holds only the :mod:`.view` (interpreter, standard library,
  allowed packages, system libraries, the dynamic linker's cache), read-only, plus a fresh
  ``/dev`` (null, zero, random, urandom, tty), a ``/proc`` of its own, and ``/tmp``: a tmpfs of
  ``max_disk_mb`` (the disk quota: writes past it fail with ``ENOSPC``) that is the program's
  working directory, ``HOME`` and ``TMPDIR`` (``/dare-sandbox`` instead when the view itself lies
  under ``/tmp``);
* new PID, network (no interface up), IPC, UTS and (where possible) cgroup namespaces: the program
  sees no other process and reaches no network. The supervisor is the namespace's PID 1
  (``--as-pid-1``: bwrap's own init would exit unreaped after it and linger as a zombie of the host's
  init); when it dies, the kernel kills every process left in the namespace;
* an empty environment plus the variables the launcher sets (``--clearenv``/``--setenv``);
* ``--die-with-parent``: if the launcher dies, the sandbox dies with it;
* run by root: no user namespace; every capability is dropped except those the supervisor needs
  to start the program under a private uid (setuid/setgid, chown of ``/tmp``), kill it and read its
  open descriptors (kill, sys_ptrace: the memfd part of the memory limit); run by another
  user: a user namespace (the caller's uid mapped to itself) in which new user namespaces are
  disabled (``--disable-userns``).

bwrap needs either root or unprivileged user namespaces; :func:`problem` runs a trivial sandbox
once per process to find out (distributions that restrict unprivileged user namespaces, e.g. with
AppArmor, make it fail; the sandbox then uses its native layers, see :mod:`dare_code.sandbox`).
"""

from __future__ import annotations

import functools
import os
import shutil
import subprocess

from dare_code.sandbox.view import View

__all__ = ["SUPERVISOR_CAPS", "executable", "workdir", "command", "problem"]

#: capabilities the supervisor keeps inside a root-started sandbox
#: (CAP_SYS_ADMIN: the supervisor remounts the program's directory noexec; the program never has it)
SUPERVISOR_CAPS = ("CAP_SETUID", "CAP_SETGID", "CAP_CHOWN", "CAP_FOWNER", "CAP_KILL", "CAP_SYS_PTRACE", "CAP_SYS_ADMIN")
#: where the program's directory (the size-limited tmpfs) is mounted inside; ``FALLBACK_WORKDIR`` when
#: a path of the view lies under ``/tmp`` (a checkout or environment there would be hidden by it)
WORKDIR = "/tmp"
#: where the run's pids cgroup ``cgroup.procs`` file appears inside the sandbox
TASKS_FILE = "/dare-tasks"
FALLBACK_WORKDIR = "/dare-sandbox"
_SHM_BYTES = 1024 * 1024


def executable() -> str | None:
    """The ``bwrap`` binary on ``PATH`` (or ``/usr/bin/bwrap``), None when absent."""
    found = shutil.which("bwrap")
    if found is None and os.access("/usr/bin/bwrap", os.X_OK):
        found = "/usr/bin/bwrap"
    return found


def workdir(view: View) -> str:
    """The program's directory inside the sandbox for this view (see :data:`WORKDIR`)."""
    paths = (*view.trees, *view.libs, *view.files)
    return FALLBACK_WORKDIR if any(p == WORKDIR or p.startswith(WORKDIR + "/") for p in paths) else WORKDIR


def command(
    binary: str, view: View, privileged: bool, disk_bytes: int, env: dict[str, str], tasks_file: str | None = None
) -> list[str]:
    """The ``bwrap`` argument list (up to and including ``--``) for one sandbox run.

    :param privileged: the caller is root (no user namespace, capabilities as in the module docstring).
    :param disk_bytes: size of the ``/tmp`` tmpfs (the program's disk quota).
    :param env: the whole environment inside.
    :param tasks_file: the ``cgroup.procs`` file of the run's pids cgroup (:mod:`.taskcap`), bound
        into the sandbox as :data:`TASKS_FILE` (the cgroup's other files, ``pids.max`` among them, are not).
    """
    args = [binary, "--die-with-parent", "--unshare-pid", "--as-pid-1", "--unshare-net", "--unshare-ipc",
            "--unshare-uts", "--unshare-cgroup-try"]
    if privileged:
        args += ["--cap-drop", "ALL"]
        for cap in SUPERVISOR_CAPS:
            args += ["--cap-add", cap]
    else:
        # CAP_SYS_ADMIN in the sandbox's own user namespace: the supervisor remounts /tmp noexec
        args += ["--unshare-user", "--disable-userns", "--cap-add", "CAP_SYS_ADMIN"]
    mounted = (*view.trees, *view.libs, *view.files)
    parents = {os.path.dirname(path) for path in mounted}
    ancestors = {a for p in parents for a in _ancestors(p)}
    for path in sorted(ancestors, key=lambda a: (a.count("/"), a)):  # traversable by the program's uid
        args += ["--perms", "0755", "--dir", path]
    for path in mounted:
        args += ["--ro-bind", path, path]
    for path, target in view.links:
        args += ["--symlink", target, path]
    args += ["--dev", "/dev", "--size", str(_SHM_BYTES), "--tmpfs", "/dev/shm", "--proc", "/proc"]
    if tasks_file is not None:
        args += ["--bind", tasks_file, TASKS_FILE]
    work = workdir(view)
    args += ["--size", str(int(disk_bytes)), "--tmpfs", work, "--chdir", work, "--clearenv"]
    for key, value in env.items():
        args += ["--setenv", key, value]
    return args + ["--"]


def _ancestors(path: str) -> list[str]:
    out = []
    while path not in ("/", ""):
        out.append(path)
        path = os.path.dirname(path)
    return out


@functools.lru_cache(maxsize=2)
def problem(view: View, privileged: bool) -> str | None:
    """Why bwrap cannot run a sandbox here (not installed, user namespaces refused...), or None
    when a trivial run of the interpreter inside it works. Cached per process."""
    binary = executable()
    if binary is None:
        return "bwrap is not installed (Debian/Ubuntu: apt-get install bubblewrap)"
    cmd = command(binary, view, privileged, 1024 * 1024, {"PATH": "/usr/bin:/bin"})
    try:
        done = subprocess.run(
            [*cmd, view.python, "-I", "-S", "-c", "print('ok')"], capture_output=True, timeout=30,
            stdin=subprocess.DEVNULL,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"bwrap failed to start: {exc}"
    if done.returncode != 0 or done.stdout.strip() != b"ok":
        tail = done.stderr.decode("utf-8", "replace").strip()[-300:]
        return f"bwrap failed here (exit {done.returncode}): {tail}"
    return None
