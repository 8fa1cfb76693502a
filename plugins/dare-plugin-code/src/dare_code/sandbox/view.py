"""What a sandboxed program may see of the file system: the interpreter, the standard library, a
few allowed packages, the system's shared libraries and its own directory.

The same list drives both confinement layers that restrict reading: the bubblewrap mount namespace
(:mod:`.bwrap`: only these paths are mounted, read-only, at their usual places) and Landlock
(:mod:`.landlock`: reading anything else is denied). Nothing under ``/etc`` but the dynamic linker's
cache, no home directory, no ``/proc`` and no other part of the caller's tree is in it.
"""

from __future__ import annotations

import functools
import importlib.util
import os
import sys
from dataclasses import dataclass

__all__ = ["DEFAULT_PACKAGES", "View", "view"]

#: third-party packages a program may import by default (HumanEval+ tests and many solutions use numpy)
DEFAULT_PACKAGES = ("numpy",)
_SYSTEM_LIBS = ("/usr/lib", "/usr/lib64", "/usr/lib32", "/lib", "/lib64", "/lib32")
_SYSTEM_FILES = ("/etc/ld.so.cache",)
_DEVICES = ("/dev/null", "/dev/zero", "/dev/urandom", "/dev/random")


@dataclass(frozen=True)
class View:
    """Host paths a program may read (all read-only) and how to start the interpreter there.

    * ``python``: the real interpreter binary (no virtual-environment indirection);
    * ``trees``: directories mounted/allowed whole (interpreter prefixes, the runner's own
      directory, allowed package directories);
    * ``libs``: system library directories; ``links``: ``{path: target}`` for those that are
      symbolic links (a merged ``/usr``), recreated as links;
    * ``files``: single files (the dynamic linker's cache); ``devices``: ``/dev`` nodes;
    * ``sys_path``: directories the runner appends to ``sys.path`` (parents of allowed packages;
      under Landlock they may be listed, not read);
    * ``packages``: the allowed package names.
    """

    python: str
    trees: tuple[str, ...]
    libs: tuple[str, ...]
    links: tuple[tuple[str, str], ...]
    files: tuple[str, ...]
    devices: tuple[str, ...]
    sys_path: tuple[str, ...]
    packages: tuple[str, ...]

    def readable(self) -> list[str]:
        """Every path of the view that may be read, for Landlock's read rules."""
        return [*self.trees, *self.libs, *self.files, *self.devices]

    def listable(self) -> list[str]:
        """Directories that may be listed but whose files may not be read (import needs to list
        ``sys.path`` entries)."""
        return list(self.sys_path)


def _package_dirs(name: str) -> tuple[list[str], str | None]:
    """The directories of an installed top-level package (with its ``<name>.libs`` of vendored
    shared libraries) and the ``sys.path`` entry that holds it; empty when not installed."""
    try:
        spec = importlib.util.find_spec(name)
    except (ImportError, ValueError):
        spec = None
    if spec is None or not spec.submodule_search_locations:
        return [], None
    where = os.path.realpath(list(spec.submodule_search_locations)[0])
    parent = os.path.dirname(where)
    dirs = [where] + [p for p in (os.path.join(parent, f"{name}.libs"),) if os.path.isdir(p)]
    return dirs, parent


@functools.lru_cache(maxsize=8)
def view(packages: tuple[str, ...] = DEFAULT_PACKAGES) -> View:
    """The view for this interpreter and the allowed ``packages`` (cached; missing ones skipped)."""
    python = os.path.realpath(sys.executable)
    trees = []
    for prefix in (sys.base_prefix, sys.base_exec_prefix, os.path.dirname(os.path.dirname(python))):
        real = os.path.realpath(prefix)
        if real not in trees and not any(real.startswith(t + "/") for t in trees):
            trees.append(real)
    trees.append(os.path.dirname(os.path.abspath(__file__)))
    sys_path, found = [], []
    for name in packages:
        dirs, parent = _package_dirs(name)
        if parent is None:
            continue
        found.append(name)
        trees.extend(d for d in dirs if not any(d.startswith(t + "/") for t in trees))
        if parent not in sys_path:
            sys_path.append(parent)
    libs, links = [], []
    for path in _SYSTEM_LIBS:
        if os.path.islink(path):
            links.append((path, os.readlink(path)))
        elif os.path.isdir(path) and not any(path.startswith(t + "/") or path == t for t in trees):
            libs.append(path)
    return View(
        python=python,
        trees=tuple(trees),
        libs=tuple(libs),
        links=tuple(links),
        files=tuple(p for p in _SYSTEM_FILES if os.path.isfile(p)),
        devices=tuple(p for p in _DEVICES if os.path.exists(p)),
        sys_path=tuple(sys_path),
        packages=tuple(found),
    )
