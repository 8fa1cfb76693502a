"""Start-up time of the ``dare`` command: ``dare --help``, ``dare plugins`` and ``dare validate``.

Run: ``python benchmarks/bench_startup.py`` (about a minute on 2 CPU cores), or, to compare with another
source tree of DARE (e.g. ``git archive main | tar -x -C /tmp/dare-main``)::

    python benchmarks/bench_startup.py --baseline /tmp/dare-main

Each measurement is the wall time of one fresh subprocess running what the ``dare`` console script runs
(``from dare.cli import main; main()``) under ``python -P`` (the working directory is not on ``sys.path``):
interpreter start included, output discarded, exit status checked. A tree runs with its own directory
and its ``plugins/*/src`` folders first on ``PYTHONPATH``, both trees with this interpreter, its
installed packages and the installed plugins' entry points; so the comparison is of the code, on the
same dependencies. With
``--baseline`` every round runs the baseline and this tree back to back, command by command, so a
change of machine load hits both. Prints min / median / max seconds per command and tree over
``--rounds`` rounds (default 5), the CPU model and the load average before and after.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

#: What the ``dare`` console script (``[project.scripts]``) runs.
_SCRIPT = "import sys; from dare.cli import main; sys.exit(main())"

COMMANDS = {
    "dare --help": ["--help"],
    "dare plugins": ["plugins"],
    "dare validate examples/quickstart.yaml": ["validate", "examples/quickstart.yaml"],
}


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:  # pragma: no cover - not Linux
        pass
    return platform.processor() or "unknown"


def _env(tree: Path) -> dict[str, str]:
    paths = [str(tree), *sorted(str(p) for p in (tree / "plugins").glob("*/src"))]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(paths), HF_HUB_OFFLINE="1", TOKENIZERS_PARALLELISM="false")
    env.pop("DARE_LOAD_PLUGINS", None)
    env.pop("DARE_TRACE_PLUGINS", None)
    return env


def time_once(tree: Path, args: list[str]) -> float:
    """Wall seconds of one fresh ``dare ARGS`` process for ``tree``, run from this repository's root.

    :raises RuntimeError: the command exited non-zero (its stderr is included).
    """
    start = time.perf_counter()
    proc = subprocess.run([sys.executable, "-P", "-c", _SCRIPT, *args], cwd=ROOT, env=_env(tree),
                          stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    elapsed = time.perf_counter() - start
    if proc.returncode != 0:
        raise RuntimeError(f"{tree}: dare {' '.join(args)} exited {proc.returncode}: {proc.stderr[-2000:]}")
    return elapsed


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=5, help="Runs per command and tree (median of these).")
    ap.add_argument("--baseline", type=Path, default=None, help="Another DARE source tree to time alternately.")
    args = ap.parse_args()

    trees = {"this tree": ROOT}
    if args.baseline is not None:
        if not any((args.baseline / "dare" / c).exists() for c in ("cli.py", "cli/__init__.py")):
            sys.exit(f"--baseline {args.baseline}: not a DARE source tree (no dare/cli)")
        trees = {"baseline": args.baseline.resolve(), "this tree": ROOT}
    print(f"CPU: {_cpu_model()} ({os.cpu_count()} logical CPUs); load average before: {os.getloadavg()}")
    for label, tree in trees.items():
        print(f"{label}: {tree}")
    times: dict[tuple[str, str], list[float]] = {(c, t): [] for c in COMMANDS for t in trees}
    for label, tree in trees.items():  # warm the file cache (not timed)
        time_once(tree, COMMANDS["dare --help"])
    for _ in range(args.rounds):
        for cmd, cli_args in COMMANDS.items():
            for label, tree in trees.items():
                times[(cmd, label)].append(time_once(tree, cli_args))
    print(f"load average after: {os.getloadavg()}")
    print(f"\nwall seconds per fresh process, {args.rounds} rounds")
    print(f"{'command':42s} {'tree':10s} {'min':>7s} {'median':>7s} {'max':>7s}")
    for (cmd, label), ts in times.items():
        print(f"{cmd:42s} {label:10s} {min(ts):7.2f} {statistics.median(ts):7.2f} {max(ts):7.2f}")


if __name__ == "__main__":
    main()
