"""``dare sweep``: a grid of spec settings times seeds, each a normal run directory, run by a launcher
(:mod:`dare.sweep.launchers`), recorded in ``sweep.json``, and compared over seeds at the end
(:mod:`dare.report.groups`).

Layout of the sweep directory ``DIR``::

    sweep.json            the spec, grid, seeds, launcher and every run: settings, seed, directory, state
                          (pending, running, finished, failed, interrupted), job id, log; written atomically
    <run name>/           one run directory per run (dare.run), e.g. algorithm.name=d1,seed=0/
    logs/                 <run name>.log (local launcher), submitit/ (submitit's job logs)
    comparison.{md,json,png}   the grouped comparison of the finished runs (dare.report.compare)

Re-running the same command skips finished runs (never retrained) and starts the others, each resuming from
its last checkpoint by the run-directory rules (:mod:`dare.run.rundir`, :mod:`dare.run`). One sweep command at a
time may use ``DIR`` (a lock, released when the process dies, even by ``kill -9``).
"""

from __future__ import annotations

import fcntl
import json
import sys
import time
from pathlib import Path
from typing import Any

from dare.errors import DareError
from dare.io import atomic_write_json
from dare.run.rundir import RunDir
from dare.sweep.plan import (
    DEFAULT_MAX_RUNS,
    SEED_KEYS,
    SweepRun,
    check_run_count,
    count_seeds,
    is_finished,
    parse_grid,
    parse_seeds,
    plan_runs,
    run_name,
)

__all__ = ["run_sweep", "write_comparison", "power_lines", "read_record", "SweepRecord", "SEED_KEYS", "SweepRun",
           "parse_grid", "parse_seeds", "count_seeds", "check_run_count", "DEFAULT_MAX_RUNS", "plan_runs", "run_name",
           "is_finished"]


class SweepRecord:
    """``DIR/sweep.json``: written (temp file, then rename) by the sweep process alone, at every state change."""

    def __init__(self, path: Path, header: dict[str, Any], runs: list[SweepRun], states: dict[str, str]):
        self.path = path
        self.data = {**header, "runs": [{**r.to_dict(), "state": states[r.name]} for r in runs]}
        self._index = {r.name: i for i, r in enumerate(runs)}
        self.write()

    def update(self, run: SweepRun, state: str, **info: Any) -> None:
        """Set ``run``'s state (and ``info``: pid, job id, log, exit status, error), write the record, print one
        line."""
        entry = self.data["runs"][self._index[run.name]]
        entry.update(state=state, **info, updated=time.strftime("%Y-%m-%dT%H:%M:%S%z"))
        self.write()
        print(f"{run.name}: {state}" + (f" (log: {info['log']})" if "log" in info else "")
              + (f" (exit status {info['returncode']})" if info.get("returncode") not in (None, 0) else ""),
              file=sys.stderr)

    def write(self) -> None:
        atomic_write_json(self.path, self.data)


def _lock(out_dir: Path):
    """An exclusive ``flock`` on ``DIR/.sweep.lock`` for this process's lifetime (the kernel drops it when the process
    dies). :raises DareError: another sweep command holds it."""
    f = open(out_dir / ".sweep.lock", "a")  # noqa: SIM115 - held until the process exits
    try:
        fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        f.close()
        raise DareError(f"another `dare sweep` is running in {out_dir}; wait for it to end (or stop it) before running "
                        "this one") from None
    return f


def run_sweep(spec_path: str, grid: list[tuple[str, list[Any]]], seeds: list[int], out_dir: str | Path, launcher,
              overrides: list[str] | None = None, dry_run: bool = False, min_seeds: int = 5,
              power_effect: float | None = None, max_runs: int = DEFAULT_MAX_RUNS) -> dict[str, Any]:
    """Plan, validate and run the sweep; write ``sweep.json`` and the grouped comparison (``min_seeds``,
    ``power_effect``: :func:`dare.report.compare.compare_runs`).

    :param launcher: a :class:`dare.sweep.launchers.LocalLauncher` or :class:`~dare.sweep.launchers.SubmititLauncher`.
    :param max_runs: the most runs (grid combinations x seeds) planned; more is refused before any validation.
    :returns: ``{"runs": [SweepRun], "states": {name: state}, "comparison": path or None, "launches": {name:
        RunLaunch}}``; what each run asks for (nodes, GPUs, processes, accelerate config and whether the spec's
        ``launch:`` or a flag set it) is printed once per distinct launch and recorded in ``sweep.json``.
    :raises DareError: a bad grid or spec (before any run starts), a launch the launcher cannot give, ``DIR`` is a
        run directory, or another sweep holds it.
    """
    check_run_count(grid, len(seeds), max_runs)
    out_dir = Path(out_dir)
    if RunDir(out_dir).is_run():
        raise DareError(f"{out_dir} is a run directory (it has {RunDir.RECORD}); give the sweep its own "
                        "directory with -o DIR")
    runs = plan_runs(spec_path, grid, seeds, out_dir, overrides)
    removed: dict[str, list[str]] = {}
    for r in runs:  # the spec's params of the component a grid value replaces, which the named one lacks or refuses
        if r.unset:
            removed.setdefault(", ".join(f"{k}={v}" for k, v in r.settings.items()), r.unset)
    for setting, keys in removed.items():
        print(f"{setting}: {' '.join(f'--unset {k}' for k in keys)} (the spec's params of another component; "
              "their defaults apply)", file=sys.stderr)
    launches = {r.name: launcher.resolve(r) for r in runs}  # the launch each run asks for (a bad one stops here)
    states = _states(runs, read_record(out_dir))
    for text in dict.fromkeys(launches[r.name].describe() for r in runs if states[r.name] != "finished"):
        print(f"dare sweep: {launcher.name} asks for {text} per run", file=sys.stderr)
    if dry_run:
        return {"runs": runs, "states": states, "comparison": None, "launches": launches}
    out_dir.mkdir(parents=True, exist_ok=True)
    lock = _lock(out_dir)
    try:
        header = {"spec": spec_path, "grid": {k: v for k, v in grid}, "seeds": seeds,
                  "overrides": list(overrides or []), "seed_keys": list(SEED_KEYS), "launcher": launcher.name}
        record = SweepRecord(out_dir / "sweep.json", header, runs, states)
        for r in runs:
            record.data["runs"][record._index[r.name]]["launch"] = launches[r.name].to_dict()
        record.write()
        todo = [r for r in runs if states[r.name] != "finished"]
        skipped = len(runs) - len(todo)
        print(f"dare sweep: {len(runs)} runs ({skipped} finished, kept; {len(todo)} to run) in {out_dir}, "
              f"launcher {launcher.name}", file=sys.stderr)

        def on_update(run: SweepRun, state: str, **info: Any) -> None:
            states[run.name] = state
            record.update(run, state, **info)

        try:
            launcher.launch(spec_path, todo, out_dir / "logs", on_update)
        except KeyboardInterrupt:
            print(f"dare sweep interrupted: the record is {out_dir / 'sweep.json'}; the same command resumes (finished "
                  f"runs are kept, the others resume from their last checkpoint)", file=sys.stderr)
            raise
        comparison = write_comparison(out_dir, runs, states, title=f"dare sweep {spec_path}", min_seeds=min_seeds,
                                      power_effect=power_effect)
    finally:
        lock.close()
    return {"runs": runs, "states": states, "comparison": comparison, "launches": launches}


def _states(runs: list[SweepRun], record: dict[str, Any] | None) -> dict[str, str]:
    """Each run's state before the sweep starts: ``finished`` (:func:`is_finished`); else ``failed`` or
    ``interrupted`` as the last sweep recorded it; else ``interrupted`` when its directory holds its ``run.json``
    (started, not finished: the next sweep resumes it from its last checkpoint); else ``pending``."""
    recorded = {e.get("name"): e.get("state") for e in (record or {}).get("runs", []) if isinstance(e, dict)}
    states = {}
    for r in runs:
        if is_finished(r):
            states[r.name] = "finished"
        elif recorded.get(r.name) in ("failed", "interrupted"):
            states[r.name] = recorded[r.name]
        else:
            states[r.name] = "interrupted" if RunDir(r.dir).is_run() else "pending"
    return states


def write_comparison(out_dir: Path, runs: list[SweepRun], states: dict[str, str], title: str, min_seeds: int = 5,
                     power_effect: float | None = None) -> Path | None:
    """``DIR/comparison.{md,json,png}`` over the finished runs that wrote an ``after`` evaluation (None when none did):
    their ``before`` evaluations first (when the spec has ``eval.before_train``), so each setting's gain (after minus
    before, per seed) is a paired difference too. A sweep of a spec without ``algorithm:`` compares the runs'
    ``eval`` evaluations."""
    from dare.report.compare import compare_runs

    finished = [r for r in runs if states[r.name] == "finished"]
    done = [r for r in finished if RunDir(r.dir).eval_file("after").is_file()]
    entries = [(f"{r.name} (before)", r.dir, "before") for r in done if RunDir(r.dir).eval_file("before").is_file()]
    entries += [(r.name, r.dir, "after") for r in done]
    entries += [(r.name, r.dir, "eval") for r in finished
                if r not in done and RunDir(r.dir).eval_file("eval").is_file()]
    if not entries:
        return None
    md, _, _ = compare_runs(entries, out_dir, title=title, min_seeds=min_seeds, power_effect=power_effect)
    return md


def power_lines(comparison_json: Path) -> list[str]:
    """What ``dare sweep --power`` prints: per paired difference of ``comparison.json``, the seeds its effect needs for
    80 % power ([] without a grouped comparison or a power table)."""
    try:
        pw = (json.loads(comparison_json.read_text()).get("grouped") or {}).get("power")
    except (OSError, ValueError):
        return []
    if not pw:
        return []
    out = [f"seeds for {pw['target']:.0%} power at a difference of {pw['effect']:g} (paired t-test, alpha "
           f"{pw['alpha']}):"]
    for r in pw["rows"]:
        need = "more than 100000" if r["seeds_needed"] is None else r["seeds_needed"]
        out.append(f"  {r['b']} - {r['a']}, {r['benchmark']} {r['metric'].replace('_', ' ')}: {need} seeds "
                   f"(sd {r['sd']:.4f} over {r['pilot_seeds']} pilot seeds)")
    if not pw["rows"]:
        out.append("  no paired difference to size: the sweep needs two settings (or before and after) on common seeds")
    return out


def read_record(out_dir: str | Path) -> dict[str, Any] | None:
    """``DIR/sweep.json`` parsed (None when absent or unreadable)."""
    try:
        return json.loads((Path(out_dir) / "sweep.json").read_text())
    except (OSError, json.JSONDecodeError):
        return None
