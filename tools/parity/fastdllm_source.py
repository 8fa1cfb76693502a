"""The official NVlabs/Fast-dLLM code at a pinned commit, for the Fast-dLLM parity fixture builders.

Run by hand, never in CI; nothing fetched here is committed. ``official_tree(repo, out)`` writes the
pinned commit's ``llada/`` and ``dream/`` Python files under ``out`` (``git show COMMIT:path``, so
``repo`` may be a checkout or a bare mirror) after checking with git that the commit is there; with
``repo=None`` it clones https://github.com/NVlabs/Fast-dLLM first (needs network).
"""

from __future__ import annotations

import subprocess
import tempfile
from pathlib import Path

URL = "https://github.com/NVlabs/Fast-dLLM"
#: 2025-06-27 "Merge pull request #2 from nfrumkin/main".
PINNED_COMMIT = "24cc59e75f20a6384bae8c905965bb090b96388e"


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True).stdout


def official_tree(repo: str | Path | None, out: Path, commit: str = PINNED_COMMIT) -> Path:
    """Write ``llada/**.py`` and ``dream/**.py`` of ``commit`` under ``out``; returns ``out``.

    :raises SystemExit: ``commit`` is not in ``repo`` (fetch it or pass another checkout).
    """
    if repo is None:
        repo = Path(tempfile.mkdtemp(prefix="fastdllm-")) / "repo"
        subprocess.run(["git", "clone", "--quiet", URL, str(repo)], check=True)
    repo = Path(repo)
    try:
        _git(repo, "rev-parse", "--verify", "--quiet", f"{commit}^{{commit}}")
    except subprocess.CalledProcessError:
        raise SystemExit(f"commit {commit} is not in {repo}: run `git -C {repo} fetch {URL}` or pass a clone "
                         f"of {URL} with --repo") from None
    for path in _git(repo, "ls-tree", "-r", "--name-only", commit, "llada", "dream").split():
        if path.endswith(".py"):
            dest = out / path
            dest.parent.mkdir(parents=True, exist_ok=True)
            dest.write_text(_git(repo, "show", f"{commit}:{path}"))
    return out
