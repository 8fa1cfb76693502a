"""Paths and atomic writes: where a spec's paths point, and nothing on disk half-written.

Files are written to a temporary sibling and renamed into place; directories are built in a
temporary sibling directory and renamed (an existing target is moved aside first, then removed).
What lands in place has the modes an ordinary write would give under the process's umask (files
``0o666 & ~umask``, directories ``0o777 & ~umask``), although the temporary files and directories
(``tempfile``) and some writers (safetensors) create them ``0600``/``0700``.
:func:`resolve_path` maps a spec path (``dare://`` packaged asset, ``~``, relative) to a local path;
:func:`looks_local` tells a local path from a hub id (``org/name``).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import stat
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from safetensors import SafetensorError

from dare import assets
from dare.errors import DareError

__all__ = ["atomic_dir", "replace_dir", "describe_write_error", "WRITE_ERRORS", "disk_errors_explained",
           "atomic_write_text", "atomic_write_json", "resolve_path", "looks_local", "current_umask", "apply_umask"]


#: what a failed write raises: OSError (Python's own writes), RuntimeError (``torch.save``: "PytorchStreamWriter
#: failed writing file"), ``safetensors.SafetensorError`` ("Error while serializing: I/O error: ... (os error 28)")
WRITE_ERRORS: tuple[type[BaseException], ...] = (OSError, RuntimeError, SafetensorError)


def current_umask() -> int:
    """The process's umask, read from ``/proc/self/status`` (Linux) without changing it; elsewhere set and
    restored at once (``os.umask``), which another thread creating a file at that instant could observe."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def apply_umask(path: str | os.PathLike, umask: int | None = None) -> None:
    """Give ``path`` (a file, or a directory and everything under it; symlinks untouched) the mode an ordinary
    write would: ``0o666 & ~umask`` for files (``0o777`` for files executable by their owner), ``0o777 & ~umask``
    for directories.

    :param umask: default :func:`current_umask`.
    """
    umask = current_umask() if umask is None else umask
    path = Path(path)

    def fix(p: Path) -> None:
        st = p.lstat()
        if stat.S_ISLNK(st.st_mode):
            return
        full = 0o777 if stat.S_ISDIR(st.st_mode) or st.st_mode & stat.S_IXUSR else 0o666
        os.chmod(p, full & ~umask)

    fix(path)
    if path.is_dir() and not path.is_symlink():
        for root, dirs, files in os.walk(path):
            for name in dirs + files:
                fix(Path(root) / name)


@contextlib.contextmanager
def atomic_dir(target: str | os.PathLike, overwrite: bool = False) -> Iterator[Path]:
    """Yield a temporary directory that replaces ``target`` only if the block succeeds.

    :raises FileExistsError: ``target`` exists, is non-empty and ``overwrite`` is False.
    """
    target = Path(target)
    nonempty = (target.is_dir() and any(target.iterdir())) or (target.exists() and not target.is_dir())
    if nonempty:
        if not overwrite:
            raise FileExistsError(f"{target} already exists and is not empty")
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.tmp-", dir=target.parent))
    try:
        yield tmp
    except WRITE_ERRORS as exc:
        shutil.rmtree(tmp, ignore_errors=True)
        if isinstance(exc, RuntimeError) and _io_errno(exc) is None \
                and not any(m in str(exc) for m in _TORCH_SHORT_WRITE):
            raise  # a RuntimeError of the computation, not of the write
        raise DareError(f"writing {target} failed: {describe_write_error(exc, tmp)}. Nothing was half-written: the "
                        f"temporary copy was "
                        f"removed{' and the previous ' + str(target) + ' is intact' if nonempty else ''}. "
                        "Free space (or fix the permissions) and run the command again") from None
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    replace_dir(tmp, target)


def replace_dir(src: str | os.PathLike, target: str | os.PathLike) -> None:
    """Rename the directory ``src`` to ``target`` (same filesystem), replacing ``target`` if it exists: the old
    one is renamed aside first and deleted after, so ``target`` is always either complete or the previous one.

    Everything under ``src`` first gets the modes of the process's umask (:func:`apply_umask`)."""
    src, target = Path(src), Path(target)
    apply_umask(src)
    old = None
    if target.exists():
        old = target.parent / f".{target.name}.old-{os.getpid()}"
        os.replace(target, old)
    os.replace(src, target)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True) if old.is_dir() else old.unlink()


#: torch.save's messages for a short write (its zip writer gets fewer bytes written than it gave: a full disk)
_TORCH_SHORT_WRITE = ("unexpected pos", "PytorchStreamWriter failed writing", "file write failed")


def describe_write_error(exc: BaseException, path: str | os.PathLike) -> str:
    """One sentence for a failed write under ``path``: "no space left" (errno 28, or a torch.save failure with
    the disk full), "permission denied", or the error itself."""
    import errno

    err = exc
    while err is not None:
        code = err.errno if isinstance(err, OSError) else _io_errno(err)
        if code in (errno.ENOSPC, errno.EDQUOT):
            quota = " (disk quota exceeded)" if code == errno.EDQUOT else ""
            return f"no space left on the device holding {path}" + quota
        if code in (errno.EACCES, errno.EPERM) or isinstance(err, PermissionError):
            return f"permission denied writing {path}"
        if code == errno.EROFS:
            return f"the device holding {path} is read-only"
        err = err.__cause__ or err.__context__
    try:
        free = shutil.disk_usage(Path(path).parent if not Path(path).exists() else path).free
    except OSError:
        free = None
    if free is not None and free < 64 * 2**20:
        return f"the device holding {path} is full ({free // 2**20} MiB free): {exc}"
    if isinstance(exc, RuntimeError) and any(m in str(exc) for m in _TORCH_SHORT_WRITE):
        shown = f" ({free // 2**20} MiB free once the partial copy was removed)" if free is not None else ""
        return f"the device holding {path} is full: torch.save could not write all of a file{shown}"
    return f"could not write {path}: {type(exc).__name__}: {exc}"


def _io_errno(exc: BaseException) -> int | None:
    """The OS error number a non-OSError write error reports in its text (safetensors: ``(os error 28)``,
    torch: ``No space left on device``), or None."""
    import errno
    import re

    text = str(exc)
    if m := re.search(r"os error (\d+)", text):
        return int(m.group(1))
    for code in (errno.ENOSPC, errno.EDQUOT, errno.EACCES, errno.EROFS):
        if os.strerror(code) in text:
            return code
    return None


@contextlib.contextmanager
def disk_errors_explained(where: str | os.PathLike) -> Iterator[None]:
    """Within the block, an ``OSError`` of a full, read-only or forbidden device (a log line, a report, a
    checkpoint) becomes a one-paragraph :class:`DareError` (:func:`describe_write_error`); other errors pass."""
    import errno

    try:
        yield
    except OSError as exc:
        if exc.errno not in (errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EACCES, errno.EPERM):
            raise
        raise DareError(f"writing under {where} failed: {describe_write_error(exc, exc.filename or where)}. Files "
                        "are written to a temporary name and renamed, so what was written before is intact. Free space "
                        "(or fix the permissions) and re-run the same command to resume") from None


def atomic_write_text(path: str | os.PathLike, text: str) -> None:
    """Write ``text`` to ``path`` via a temporary file and ``os.replace``; the file gets mode ``0o666 & ~umask``."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        os.fchmod(fd, 0o666 & ~current_umask())
        with os.fdopen(fd, "w") as f:
            f.write(text)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


def atomic_write_json(path: str | os.PathLike, data: Any) -> None:
    atomic_write_text(path, json.dumps(data, indent=2, sort_keys=False, default=str) + "\n")


def resolve_path(path: str | os.PathLike) -> Path:
    """``dare://rel`` -> the packaged asset ``rel`` (:mod:`dare.assets`); ``~`` is expanded; other paths
    stay relative to the working directory."""
    path = str(path)
    if path.startswith("dare://"):
        return assets.path(path[len("dare://") :])
    return Path(os.path.expanduser(path))


def looks_local(path: str) -> bool:
    """Whether a model/data ``path`` names a local file or directory rather than a hub id.

    Local: it exists, is a ``dare://`` asset, starts with ``.``, ``/`` or ``~``, does not have the hub's
    ``org/name`` shape (exactly one ``/``), or its first segment is an existing local directory (a typo
    in ``runs/my-run`` is a missing local directory, not a hub repository).
    """
    path = str(path)
    if path.startswith(("dare://", ".", "/", "~")) or path.count("/") != 1:
        return True
    return resolve_path(path).exists() or Path(path.split("/", 1)[0]).is_dir()
