"""The kernel layers against native code one by one, without the Python guard and without the rest
of the sandbox: a child process applies one layer, then native code (tests/native_attack.c, built
with the system C compiler) or a direct request tries what the layer must refuse.

* seccomp + a new session keyring: the library is loaded from a directory that stays executable
  (the filter allows executable mappings of files), so its constructor runs and every attack it
  makes must fail: no write outside is refused here (that is Landlock's), but no SysV IPC object,
  no key of the caller's keyring, no ``prlimit`` of the caller, no fork, no Unix socket connection,
  no writable-executable memory, no memfd; the child's session keyring is empty;
* the noexec directory (root): a shared object written there cannot be loaded;
* Landlock: a file in the writable directory cannot be executed.
"""

from __future__ import annotations

import ctypes
import os
import secrets
import shutil
import socket
import struct
import subprocess
import sys
from pathlib import Path

import pytest

from dare_code.sandbox import landlock
from native_build import build_native

SANDBOX = Path(__import__("dare_code.sandbox", fromlist=["x"]).__file__).parent
_LOAD = f"""
import ctypes, importlib.util, os, sys
def load(name):
    spec = importlib.util.spec_from_file_location(name, os.path.join({str(SANDBOX)!r}, name + ".py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
identity, seccomp, landlock = load("identity"), load("seccomp"), load("landlock")
"""
_KEYCTL = {"x86_64": (250, 248), "aarch64": (219, 217)}


def _needs_compiler():
    if shutil.which("cc") is None and shutil.which("gcc") is None:
        pytest.skip("no C compiler (cc/gcc) to build tests/native_attack.c")


def _sysv_ipc() -> list[str]:
    rows = []
    for kind in ("shm", "msg", "sem"):
        try:
            with open(f"/proc/sysvipc/{kind}") as f:
                rows += [f"{kind}: {line.split()[1]}" for line in f.readlines()[1:]]
        except OSError:
            pass
    return rows


def _child(script: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-I", "-c", _LOAD + script], cwd=cwd, capture_output=True, text=True,
                          timeout=60)


def test_seccomp_and_keyring_refuse_every_attack_of_loaded_native_code(tmp_path):
    _needs_compiler()
    if os.uname().machine not in _KEYCTL:
        pytest.skip(f"the seccomp filter covers x86-64 and arm64, not {os.uname().machine}")
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    join, add = _KEYCTL[os.uname().machine]
    assert libc.syscall(join, 1, b"dare-layers-test") >= 0  # this test process: a keyring of its own
    secret = secrets.token_hex(16)
    assert libc.syscall(add, b"user", b"dare-corpus", secret.encode(), len(secret), -3) >= 0
    outside = tmp_path / "outside"
    outside.mkdir()
    sock_path = str(tmp_path / "host.sock")
    server = socket.socket(socket.AF_UNIX)
    server.bind(sock_path)
    server.listen(4)
    server.setblocking(False)
    lib = tmp_path / "attack.so"
    build_native(lib, outside, sock_path, os.getpid())
    work = tmp_path / "work"
    work.mkdir()
    ipc_before = _sysv_ipc()
    done = _child(f"""
assert identity.new_session_keyring() and identity.forbid_new_privileges()
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
print("session keyring bytes:", libc.syscall({_KEYCTL[os.uname().machine][0]}, 11, -3, None, 0))
assert seccomp.restrict(block_fork=True)
ctypes.CDLL({str(lib)!r})
""", work)
    try:
        assert done.returncode == 0, done.stderr[-2000:]
        assert "session keyring bytes: 0" in done.stdout  # a new, empty session keyring
        assert secret not in done.stdout + done.stderr
        # the constructor ran (the file mapping is allowed) and only the write outside worked
        assert (work / "native_ran.txt").read_text().split("\n")[:-1] == ["loaded", "wrote outside"]
        assert _sysv_ipc() == ipc_before
        with pytest.raises(BlockingIOError):
            server.accept()
        import resource
        assert resource.getrlimit(resource.RLIMIT_FSIZE)[0] != 1 << 20
    finally:
        server.close()


def test_the_same_library_attacks_freely_without_the_layers(tmp_path):
    """The control: without the layers the constructor's attacks succeed (it
    leaves nothing: it runs in throw-away IPC and PID namespaces)."""
    _needs_compiler()
    if os.geteuid() != 0:
        pytest.skip("the control runs in a private IPC namespace (unshare needs root)")
    outside = tmp_path / "outside"
    outside.mkdir()
    lib = tmp_path / "attack.so"
    build_native(lib, outside, str(tmp_path / "none.sock"), 0)  # pid 0: its own limits
    done = subprocess.run(["unshare", "--ipc", "--pid", "--fork", sys.executable, "-I", "-c",
                           f"import ctypes; ctypes.CDLL({str(lib)!r})"], cwd=tmp_path, capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0, done.stderr[-2000:]
    marks = (tmp_path / "native_ran.txt").read_text().split("\n")
    assert {"loaded", "wrote outside", "shm", "msg", "sem", "prlimit", "forked", "rwx", "memfd"} <= set(marks)


@pytest.mark.skipif(os.geteuid() != 0, reason="a noexec mount needs root (CAP_SYS_ADMIN)")
def test_noexec_directory_refuses_a_written_shared_object(tmp_path):
    _needs_compiler()
    lib = tmp_path / "attack.so"
    build_native(lib, tmp_path, str(tmp_path / "none.sock"), 0)
    work = tmp_path / "work"
    work.mkdir()
    done = _child(f"""
assert identity.noexec_workdir({str(work)!r}, False, 8, None)
data = open({str(lib)!r}, "rb").read()
with open({str(work / 'attack.so')!r}, "wb") as f:
    f.write(data)
try:
    ctypes.CDLL({str(work / 'attack.so')!r})
    print("loaded")
except OSError as exc:
    print("refused:", exc)
""", tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.startswith("refused:") and "map" in done.stdout
    assert not (tmp_path / "native_ran.txt").exists() and list(work.iterdir()) == []  # the tmpfs is gone


@pytest.mark.skipif(landlock.abi_version() < 1, reason="Landlock is unavailable here")
def test_landlock_refuses_executing_a_written_file(tmp_path):
    work = tmp_path / "work"
    work.mkdir()
    done = _child(f"""
import shutil
assert identity.forbid_new_privileges()
readable = [os.path.dirname(sys.executable), "/usr", "/lib", "/lib64", "/etc", sys.base_prefix]
landlock.restrict([{str(work)!r}], ["/dev/null"], readable)
shutil.copy("/bin/true", "true")
try:
    os.execv("./true", ["true"])
except PermissionError as exc:
    print("refused:", exc)
""", work)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.startswith("refused:")


@pytest.mark.parametrize("arch", ["x86_64", "aarch64"])
@pytest.mark.parametrize("block_fork", [False, True])
def test_seccomp_filter_assembles_for_each_architecture(arch, block_fork):
    """The filter builds for both tables (every jump in range): 8-byte instructions, it checks the
    architecture first and ends with the allow and deny returns."""
    from dare_code.sandbox import seccomp

    audit_arch, numbers = seccomp.ARCHES[arch]
    code = seccomp._filter(audit_arch, numbers, block_fork)
    assert len(code) % 8 == 0 and len(code) // 8 < 256
    first = [int.from_bytes(code[i:i + 8][4:], "little") for i in range(0, 16, 8)]
    assert first == [4, audit_arch]  # load seccomp_data.arch, compare with this machine's
    ret = 0x06  # BPF_RET | BPF_K
    assert code[-16:] == struct.pack("=HBBI", ret, 0, 0, 0x7FFF0000) + struct.pack("=HBBI", ret, 0, 0, 0x00050001)


def test_seccomp_refuses_every_socket_family_without_the_guard(tmp_path):
    """Process mode without bubblewrap shares the host's network namespace: the filter alone (no Python
    guard, as in a subinterpreter or a re-executed interpreter) refuses ``socket()`` for IPv4 and IPv6
    datagrams, netlink (NETLINK_SOCK_DIAG lists the host's sockets), Unix and packet sockets with EPERM,
    nothing reaches this test's own loopback listener, and ``socketpair`` still works."""
    if os.uname().machine not in _KEYCTL:
        pytest.skip(f"the seccomp filter covers x86-64 and arm64, not {os.uname().machine}")
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as listener:
        listener.bind(("127.0.0.1", 0))
        listener.setblocking(False)
        port = listener.getsockname()[1]
        done = _child(f"""
import errno, socket
identity.forbid_new_privileges()
assert seccomp.restrict(block_fork=False)
out = []
for family, kind, proto in ((socket.AF_INET, socket.SOCK_DGRAM, 0), (socket.AF_INET6, socket.SOCK_DGRAM, 0),
                            (socket.AF_NETLINK, socket.SOCK_RAW, 4), (socket.AF_UNIX, socket.SOCK_DGRAM, 0),
                            (socket.AF_PACKET, socket.SOCK_DGRAM, 0), (socket.AF_INET, socket.SOCK_STREAM, 0)):
    try:
        s = socket.socket(family, kind, proto)
        if family == socket.AF_INET and kind == socket.SOCK_DGRAM:
            s.sendto(b"escaped", ("127.0.0.1", {port}))
        out.append("open")
    except OSError as exc:
        out.append(errno.errorcode[exc.errno])
a, b = socket.socketpair()
a.send(b"x")
out.append(b.recv(1).decode())
print(",".join(out))
""", tmp_path)
        assert done.returncode == 0, done.stderr[-2000:]
        assert done.stdout.split() == ["EPERM,EPERM,EPERM,EPERM,EPERM,EPERM,x"]
        with pytest.raises(BlockingIOError):
            listener.recvfrom(64)


def test_guard_refuses_subinterpreters_and_c_test_modules(tmp_path):
    """The guard refuses ``_xxsubinterpreters``/``_interpreters`` and ``_testcapi``/``_testinternalcapi``
    by name and by spec, and a new interpreter even from a module imported before it was installed (the
    ``cpython.PyInterpreterState_New`` event)."""
    done = _child(f"""
import importlib.util
try:
    import _xxsubinterpreters as early
except ImportError:
    early = None
guard = load("guard")
guard.install({str(tmp_path)!r}, block_fork=False)
out = []
for name in ("_xxsubinterpreters", "_interpreters", "_xxinterpchannels", "_testcapi", "_testinternalcapi"):
    try:
        __import__(name)
        out.append(name + ":imported")
    except PermissionError:
        out.append(name + ":refused")
    except ImportError:
        out.append(name + ":absent")
spec = importlib.util.find_spec("_testcapi") if "_testcapi:refused" in out else None
if spec is not None:
    try:
        importlib.util.module_from_spec(spec)
        out.append("spec:loaded")
    except PermissionError:
        out.append("spec:refused")
if early is not None:
    try:
        early.create()
        out.append("create:ran")
    except Exception:
        out.append("create:refused")
print(" ".join(out))
""", tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    words = done.stdout.split()
    assert not any(w.endswith((":imported", ":loaded", ":ran")) for w in words), words
    # the import event comes before the module is looked for: a name this Python lacks is refused too
    assert words[:5] == ["_xxsubinterpreters:refused", "_interpreters:refused", "_xxinterpchannels:refused",
                         "_testcapi:refused", "_testinternalcapi:refused"]
    if sys.version_info[:2] == (3, 11):  # both modules exist there
        assert words[5:] == ["spec:refused", "create:refused"]


_THREADS = """
import threading, time
threading.stack_size(32768)
started = 0
try:
    for _ in range(700):
        threading.Thread(target=time.sleep, args=(30,), daemon=True).start()
        started += 1
except RuntimeError as exc:
    print("stopped:", exc)
print("started", started)
"""


@pytest.mark.parametrize("cgroup", [True, False], ids=["pids-cgroup", "watchdog"])
def test_threads_are_capped_in_process_mode(cgroup, monkeypatch):
    """Process mode (the caller's uid; as root RLIMIT_NPROC does not bind) caps tasks, threads included, at
    max_processes: the pids cgroup refuses the 8th thread where one can be made; without it (patched away)
    the supervisor's watchdog counts ``Threads:`` and kills the tree (``killed_for == "tasks"``)."""
    from dare_code.sandbox import SandboxLimits, run_python, taskcap
    from dare_code.sandbox.isolation import Isolation

    if cgroup and taskcap.cgroup_parent() is None:
        pytest.skip("no pids cgroup can be made here (needs root and a pids controller)")
    if not cgroup:
        monkeypatch.setattr(taskcap, "cgroup_parent", lambda: None)
    limits = SandboxLimits(timeout_s=5.0, cpu_time_s=5, memory_mb=512, max_processes=8)
    result = run_python([_THREADS], limits, Isolation("process"))
    assert result.layers["tasks_cgroup"] is cgroup
    if cgroup:
        assert result.passed and "started 7" in result.stdout and result.peak_tasks <= 8
    elif os.geteuid() == 0:
        assert result.killed_for == "tasks" and not result.passed and result.peak_tasks > 8
    else:  # RLIMIT_NPROC binds a non-root caller: the thread start fails
        assert "stopped:" in result.stdout
    assert result.leftover >= 0 and result.elapsed_s < limits.timeout_s + 5


def test_task_cgroup_is_removed_after_the_run():
    """The run's cgroup is gone afterwards (no directory left under the pids hierarchy)."""
    from dare_code.sandbox import SandboxLimits, run_python, taskcap

    parent = taskcap.cgroup_parent()
    if parent is None:
        pytest.skip("no pids cgroup can be made here (needs root and a pids controller)")
    before = {p.name for p in Path(parent).iterdir() if p.name.startswith("dare-sandbox-")}
    result = run_python(["x = 1"], SandboxLimits(timeout_s=5.0))
    assert result.passed and result.layers["tasks_cgroup"] is True
    assert {p.name for p in Path(parent).iterdir() if p.name.startswith("dare-sandbox-")} <= before
