"""The code sandbox: per-program overhead, and the hostile corpus as a table.

Run: ``python benchmarks/bench_sandbox.py [--rounds 7] [--baseline-src DIR] [--corpus]``.

Overhead: in each round, one call of each variant, alternating, all in this process (the baseline
in a worker process started once): ``interpreter`` (``python -I -S -c pass``: the floor any
subprocess sandbox pays), ``run_python`` of ``pass`` with the layers ``auto`` gives here and with
the native layers only, the ``code`` reward scoring a trivial correct program (program and tests
processes) with both, and, with ``--baseline-src`` (a directory holding another version's
``dare_code`` package, e.g. ``git archive REV plugins/dare-plugin-code/src | tar -x --strip-components=3
-C DIR``; the installed core stays on the path), the same reward call of that version.
Prints min/median/max milliseconds per variant.

``--corpus``: scores every program of tests/sandbox_corpus/ (harmless stand-ins for the planted
secrets and sockets; the native library of tests/native_attack.c is built where a C compiler exists; tests/test_sandbox_corpus.py is the real check) and prints score, seconds,
how the run ended and the peak memory and disk.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from string import Template

from dare_code.outcome import code_outcome
from dare_code.sandbox import SandboxLimits, active_layers, resolve_isolation, run_python
from dare_code.sandbox.isolation import Isolation

SAMPLE = {"data_source": "x", "prompt": "def f():", "reward_model": {"ground_truth": "assert f() == 1\n"}}
COMPLETION = "```python\ndef f():\n    return 1\n```"
WORKER = """
import sys, time
from dare_code.outcome import code_outcome
from dare_code.sandbox import SandboxLimits
sample = {"data_source": "x", "prompt": "def f():", "reward_model": {"ground_truth": "assert f() == 1\\n"}}
for line in sys.stdin:
    start = time.perf_counter()
    outcome = code_outcome("```python\\ndef f():\\n    return 1\\n```", sample, SandboxLimits())
    print(time.perf_counter() - start, outcome.score, flush=True)
"""


def overhead(rounds: int, baseline_src: str | None) -> None:
    auto = resolve_isolation("auto")
    native = Isolation(auto.mode, auto.read_all, bwrap=False)
    python = sys.executable
    variants = {
        "interpreter": lambda: subprocess.run([python, "-I", "-S", "-c", "pass"], check=True),
        "run_python auto": lambda: run_python(["pass"], isolation=auto),
        "run_python native": lambda: run_python(["pass"], isolation=native),
        "code reward auto": lambda: code_outcome(COMPLETION, SAMPLE, SandboxLimits(), isolation=auto),
        "code reward native": lambda: code_outcome(COMPLETION, SAMPLE, SandboxLimits(), isolation=native),
    }
    worker = None
    if baseline_src:
        core = str(Path(__file__).resolve().parents[3])  # the repository root, holding dare/
        env = {"PYTHONPATH": f"{baseline_src}:{core}", "PATH": "/usr/bin:/bin"}
        worker = subprocess.Popen([python, "-c", WORKER], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                                  env=env)

        def baseline():
            worker.stdin.write("go\n")
            worker.stdin.flush()
            seconds, score = worker.stdout.readline().split()
            assert float(score) == 1.0
            return float(seconds)

        variants["code reward baseline"] = baseline
    times: dict[str, list[float]] = {name: [] for name in variants}
    for name, call in variants.items():  # warm-up (probes, imports)
        call()
    for _ in range(rounds):
        for name, call in variants.items():
            start = time.perf_counter()
            out = call()
            elapsed = out if isinstance(out, float) else time.perf_counter() - start
            if hasattr(out, "score"):
                assert out.score == 1.0, out
            times[name].append(elapsed)
    if worker:
        worker.stdin.close()
        worker.wait()
    print(f"{'variant':24s} {'min':>8s} {'median':>8s} {'max':>8s}  (ms, {rounds} rounds)")
    for name, values in times.items():
        print(f"{name:24s} {min(values) * 1e3:8.1f} {statistics.median(values) * 1e3:8.1f} {max(values) * 1e3:8.1f}")


def _mode(name: str) -> Isolation:
    """auto, native (the uid layers without bubblewrap), process (bubblewrap where it works), process-native."""
    auto = resolve_isolation("auto")
    return {"auto": auto, "native": Isolation(auto.mode, auto.read_all, bwrap=False),
            "process": resolve_isolation("process"), "process-native": Isolation("process")}[name]


def corpus(mode: str = "auto") -> None:
    limits = SandboxLimits(timeout_s=2.0, cpu_time_s=4, memory_mb=512, max_processes=8, max_file_mb=8, max_disk_mb=32)
    values = {"OUTSIDE": "/nonexistent/outside", "SECRET_FILE": "/nonexistent/key", "SECRET_ENV_NAME": "DARE_NO_SUCH",
              "CALLER_DIR": str(Path(__file__).parent), "TCP_PORT": "9", "UDP_PORT": "9", "UDP6_PORT": "9",
              "MEMORY_MB": str(limits.memory_mb), "MAX_DISK_MB": str(limits.max_disk_mb), "RUNNER": "/nonexistent"}
    sys.path.insert(0, str(Path(__file__).parent.parent / "tests"))
    from native_build import build_native  # tests/native_attack.c (harmless targets), None without cc

    with tempfile.TemporaryDirectory() as tmp:
        native = build_native(Path(tmp) / "attack.so", Path("/nonexistent/outside"), "/nonexistent/sock", 0)
    if native is not None:
        values["NATIVE_SO_HEX"] = native.hex()
    iso = _mode(mode)
    print(f"limits: {limits}; isolation {mode}: {iso}")
    print(f"{'case':34s} {'score':>5s} {'s':>5s} {'run s':>5s} {'ended':>10s} {'mem MiB':>8s} {'disk MiB':>8s} "
          f"{'tasks':>5s}")
    for path in sorted((Path(__file__).parent.parent / "tests" / "sandbox_corpus").glob("[0-9]*.py")):
        source = Template(path.read_text()).safe_substitute(values)
        tests, prompt = "assert f() == 1\n", "def f():"
        for line in source.splitlines():
            if line.startswith("# tests: "):
                tests = line[len("# tests: "):].replace("\\n", "\n") + "\n"
                source = source.replace(line + "\n", "")
            elif line.startswith("# prompt: "):  # the task's prompt: trusted helpers its tests call
                prompt = line[len("# prompt: "):].replace("\\n", "\n")
                source = source.replace(line + "\n", "")
        sample = {"data_source": "corpus", "prompt": prompt, "reward_model": {"ground_truth": tests}}
        start = time.monotonic()
        outcome = code_outcome(f"```python\n{source}\n```", sample, limits, per_test_timeout_s=limits.timeout_s,
                               isolation=iso)
        seconds = time.monotonic() - start
        r = outcome.result
        ended = "timeout" if r.timed_out else (r.killed_for or f"exit {r.returncode}")
        print(f"{path.stem:34s} {outcome.score:5.1f} {seconds:5.2f} {r.run_s:5.2f} {ended:>10s} "
              f"{r.peak_memory_mb:8.0f} {r.peak_disk_mb:8.1f} {r.peak_tasks:5d}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--baseline-src", default=None)
    parser.add_argument("--corpus", action="store_true")
    parser.add_argument("--mode", choices=["auto", "native", "process", "process-native"], default="auto",
                        help="isolation of the --corpus runs")
    parser.add_argument("--no-overhead", action="store_true", help="skip the per-program overhead rounds")
    args = parser.parse_args()
    print(json.dumps(active_layers(), indent=1))
    if not args.no_overhead:
        overhead(args.rounds, args.baseline_src)
    if args.corpus:
        corpus(args.mode)


if __name__ == "__main__":
    main()
