"""Reports: JSON + Markdown that explain themselves, and plots.

``report.md`` shows the results table, what each column means and how tokens/s was timed, the run's
context next to the numbers (objective, steps, wall time, training data, sampler, which rows were
evaluated), the machine (CPU model, torch CPU capability, threads, device, processes, load) and what
depends on it, and the provenance (spec, sampler params, seed, versions, git SHA). ``plot.png`` is
:mod:`dare.report.plots`'.
"""

from __future__ import annotations

import datetime as _dt
import json
import platform
import subprocess
from importlib import metadata
from pathlib import Path
from typing import Any

from dare.io import atomic_write_json, atomic_write_text
from dare.report.plots import (draw_training_curve, eval_series, plot_training,
                             read_metrics,  # noqa: F401 - their old home
                             training_curve)
from dare.run.rundir import RunDir

__all__ = ["provenance", "machine_info", "write_report", "markdown_table", "column_notes", "run_lines", "machine_lines",
           "COLUMNS"]

_PACKAGES = ("dare-dllm", "torch", "transformers", "peft", "accelerate", "pydantic", "math-verify")


def _git_sha() -> str | None:
    for cwd in (Path.cwd(), Path(__file__).resolve().parent):
        try:
            out = subprocess.run(["git", "rev-parse", "HEAD"], cwd=cwd, capture_output=True, text=True, timeout=5)
        except (OSError, subprocess.SubprocessError):
            return None
        if out.returncode == 0:
            return out.stdout.strip()
    return None


def machine_info() -> dict[str, Any]:
    """The machine a run's timings (and, through floating-point kernels, its scores) depend on.

    ``cpu_model`` (``/proc/cpuinfo`` "model name", else ``platform.processor()``), ``cpu_count``,
    ``torch_cpu_capability`` (``torch.backends.cpu.get_cpu_capability()``: the vector ISA torch's CPU
    kernels use, e.g. AVX2, AVX512), ``torch_threads`` (``torch.get_num_threads()``), ``device`` (``cpu`` or
    the CUDA device name), ``processes`` (:func:`dare.scaling.distributed.world_size`) and ``load_average``
    (1-minute: other work on the machine slows every timing).
    """
    import os

    import torch

    from dare.scaling import distributed

    cpu = None
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.lower().startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    try:
        capability = torch.backends.cpu.get_cpu_capability()
    except (AttributeError, RuntimeError):  # pragma: no cover - old torch
        capability = None
    try:
        load = round(os.getloadavg()[0], 2)
    except (OSError, AttributeError):  # pragma: no cover - not on Unix
        load = None
    return {
        "cpu_model": cpu or platform.processor() or None,
        "cpu_count": os.cpu_count(),
        "torch_cpu_capability": capability,
        "torch_threads": torch.get_num_threads(),
        "device": f"cuda: {torch.cuda.get_device_name(0)}" if torch.cuda.is_available() else "cpu",
        "processes": distributed.world_size(),
        "load_average": load,
    }


def provenance(spec=None, sampler=None, seed: int | None = None,
               machine: dict[str, Any] | None = None) -> dict[str, Any]:
    """What produced a number: resolved spec, sampler params, seed, package versions, git SHA, time, machine.

    :param machine: :func:`machine_info` taken when the run started (default: now).
    """
    versions = {}
    for pkg in _PACKAGES:
        try:
            versions[pkg] = metadata.version(pkg)
        except metadata.PackageNotFoundError:
            versions[pkg] = None
    for dist in metadata.distributions():
        name = dist.metadata["Name"] or ""
        if name.startswith("dare-plugin-"):
            versions[name] = dist.version
    return {
        "spec": spec.model_dump(mode="json") if spec is not None else None,
        "sampler": ({"name": sampler.name, "params": sampler.params.model_dump(mode="json")}
                    if sampler is not None else None),
        "seed": seed,
        "versions": versions,
        "git_sha": _git_sha(),
        "python": platform.python_version(),
        "created": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "machine": machine if machine is not None else machine_info(),
    }


def _likelihood(r) -> bool:
    return (getattr(r, "extra", None) or {}).get("style") == "loglikelihood"


#: what the columns of a results table mean (reports and ``dare compare``)
COLUMNS = {
    "accuracy": "fraction of rows the benchmark counts as solved: its reward is 1 (an exact solve, a correct final "
                "answer)",
    "mean reward": "the benchmark's reward averaged over rows, partial credit included (per benchmark below)",
    "samples": "rows evaluated",
    "NFE": "model forward passes per prompt (number of function evaluations of the sampler)",
    "tokens/s": "decoded positions (prompts x gen_length) per second of sampler wall time, on this machine; the first "
                "batch of an evaluation is left out when it has more than one (start-up: first-call allocations and "
                "kernel selection), so the rate is the steady state",
}


def column_notes(evaluators: dict[str, str] | None = None) -> list[str]:
    """Markdown bullets defining the columns, then one per benchmark (its evaluator's description)."""
    lines = [f"- **{k}**: {v}" for k, v in COLUMNS.items()]
    for name, desc in sorted((evaluators or {}).items()):
        if desc:
            lines.append(f"- benchmark **{name}**: {desc}")
    return lines


def markdown_table(stages: dict[str, list]) -> str:
    """One row per (stage, benchmark): accuracy, mean reward, samples, NFE, tokens/s; likelihood
    (multiple-choice) benchmarks in a second table: acc, acc_norm, mean reward, samples, estimator,
    mc_samples and scheme, forward passes per row."""
    lines = [
        "| stage | benchmark | accuracy | mean reward | samples | NFE | tokens/s |",
        "|---|---|---:|---:|---:|---:|---:|",
    ]
    mc = []
    for stage, results in stages.items():
        for r in results:
            if _likelihood(r):
                mc.append((stage, r))
                continue
            lines.append(
                f"| {stage} | {r.name} | {r.accuracy:.4f} | {r.mean_reward:.4f} | {r.n} | {r.nfe} | "
                f"{r.tokens_per_second:.1f} |"
            )
    if len(lines) == 2:
        lines = []
    if mc:
        lines += (["", "Likelihood benchmarks (choices scored by Monte-Carlo ELBO):", ""] if lines else []) + [
            "| stage | benchmark | acc | acc_norm | mean reward | samples | estimator | mc_samples | scheme | forward "
            "passes/row |",
            "|---|---|---:|---:|---:|---:|---|---:|---|---:|",
        ]
        for stage, r in mc:
            x = r.extra
            lines.append(f"| {stage} | {r.name} | {r.accuracy:.4f} | {x.get('acc_norm', float('nan')):.4f} | "
                         f"{r.mean_reward:.4f} | {r.n} | {x.get('estimator')} | {x.get('mc_samples')} | "
                         f"{x.get('mc_scheme')} | {r.nfe} |")
    return "\n".join(lines) + "\n"


def _seconds(s: float | None) -> str:
    from dare.progress import format_seconds

    return "?" if s is None else format_seconds(float(s))


def _component(d: dict | None) -> str:
    if not d:
        return "?"
    params = d.get("params")
    return f"{d.get('name')} `{json.dumps(params, sort_keys=True)}`" if params else str(d.get("name"))


def run_lines(info: dict[str, Any], stages: dict[str, list] | None = None) -> list[str]:
    """Markdown table rows (``| what | value |``) of a run's context: objective, steps, wall time, training data,
    sampler, in-training evaluation and the evaluated sets (``info``: :func:`dare.run.info.run_info`)."""
    rows = []
    if info.get("objective"):
        rows.append(("objective", _component(info["objective"])))
    if info.get("max_steps") is not None:
        steps = f"{info.get('steps', '?')} of {info['max_steps']}"
        if info.get("resumed_from_step"):
            steps += f" (the last command resumed at step {info['resumed_from_step']})"
        rows.append(("steps", steps))
    times = []
    if info.get("train_seconds") is not None:
        last = " (last command)" if info.get("resumed_from_step") else ""
        times.append(f"train {_seconds(info['train_seconds'])}" + last)
    times += [f"evaluate {k} {_seconds(v)}" for k, v in (info.get("stage_seconds") or {}).items()]
    if times:
        rows.append(("wall time", ", ".join(times)))
    td = info.get("training_data")
    if td:
        part = "all rows" if not td.get("limit") else f"{td['limit']} rows"
        if td.get("offset"):
            part += f" from row {td['offset']}"
        ex = f", {td['examples']} training examples" if td.get("examples") is not None else ""
        rows.append(("training data", f"{td['path']} ({part}{ex})"))
    if info.get("sampler"):
        rows.append(("sampler", _component(info["sampler"])))
    ite = info.get("in_training_eval")
    sets = info.get("eval_sets") or {}
    if ite:
        which = next((v for k, v in sets.items() if ":" not in k), "the first benchmark")
        rows.append(("in-training evaluation", f"every {ite['every_steps']} steps on {which}"))
    for stage in stages or {}:
        shown = [v for k, v in sets.items() if k.startswith(f"{stage}:")]
        if shown:
            rows.append((f"{stage} rows", "; ".join(shown)))
    return [f"| {k} | {v} |" for k, v in rows]


def evaluated_later_lines(prov: dict[str, Any]) -> list[str]:
    """Markdown bullets for a ``dare eval`` of a finished run (``prov["evaluated_later"]``): when and on what
    machine (and load) the ``eval`` row was measured; the report's machine line stays the training run's."""
    later = prov.get("evaluated_later") if isinstance(prov, dict) else None
    if not isinstance(later, dict):
        return []
    m = machine_lines(later.get("machine"))
    where = m[0].replace("- machine: ", "on ", 1).replace("when the run started", "when it started") if m else ""
    return [f"- evaluated later (the `eval` row, `dare eval`): {later.get('created')}"
            + (f", {where}" if where else "")]


def machine_lines(machine: dict[str, Any] | None) -> list[str]:
    """Markdown bullets: the machine, and what depends on it."""
    if not machine:
        return []
    load = machine.get("load_average")
    return [
        f"- machine: {machine.get('cpu_model') or 'unknown CPU'} ({machine.get('cpu_count')} logical CPUs), torch CPU "
        f"capability {machine.get('torch_cpu_capability')}, {machine.get('torch_threads')} torch threads"
        + (f" ({machine['torch_threads_from']})" if machine.get("torch_threads_from") else "") + ", device "
        f"{machine.get('device')}, {machine.get('processes')} process(es)"
        + (f", load average {load} when the run started" if load is not None else ""),
        "- what depends on the machine: tokens/s and wall times (other work on the machine slows them), and a little "
        "the scores too: another CPU, torch CPU capability or thread count rounds floating-point sums differently, so "
        "the same spec and seed can train to a somewhat different model. Compare numbers measured on one machine.",
    ]


def write_report(out_dir: str | Path, stages: dict[str, list], prov: dict[str, Any],
                 extra: dict[str, Any] | None = None, evaluators: dict[str, str] | None = None) -> tuple[Path, Path]:
    """Write the run directory ``out_dir``'s ``report.json`` (metrics, provenance), ``samples/`` (per-row completions
    and rewards) and ``report.md``, each atomically (paths: :class:`dare.run.rundir.RunDir`).

    ``report.md``: the results table, what its columns mean and how each row's tokens/s was timed, the run's
    context (``extra["run"]``, :func:`run_lines`), the machine and what depends on it (:func:`machine_lines`),
    and the provenance.

    :param stages: stage label (e.g. ``before``, ``after``) -> list of ``BenchmarkResult``.
    :param evaluators: benchmark name -> its description (what accuracy and mean reward mean there).
    """
    rundir = RunDir(out_dir)
    extra = extra or {}
    data = {
        "results": {s: [r.to_dict(with_samples=False) for r in rs] for s, rs in stages.items()},
        "provenance": prov,
        **extra,
    }
    js = rundir.report_json
    atomic_write_json(js, data)
    for s, rs in stages.items():
        for r in rs:
            atomic_write_json(rundir.samples_file(s, r.name), r.samples)
    md, p = rundir.report_md, prov
    title = extra.get("run_dir")
    body = [f"# DARE report{': ' + str(title) if title else ''}\n", markdown_table(stages), "What the columns mean:\n"]
    body += column_notes(evaluators)
    timing = [f"{s} {r.name}: {r.timing()}" for s, rs in stages.items() for r in rs if hasattr(r, "timing")]
    if timing:
        body.append("- tokens/s timed over: " + "; ".join(timing))
    info = extra.get("run")
    if isinstance(info, dict):
        body += ["", "## Run\n", "| | |", "|---|---|", *run_lines(info, stages)]
    tm = extra.get("train_metrics") or {}
    if isinstance(tm, dict) and "best_step" in tm:
        body.append(f"\nFinal weights (train.keep_best): step {tm['best_step']}, validation accuracy "
                    f"{tm.get('best_validation_accuracy', float('nan')):.4f}; the `after` row evaluates them.")
    if extra.get("eval_overrides"):
        body.append(f"\nThe `eval` row was measured with other evaluation settings than the run's: "
                    f"{extra['eval_overrides']}.")
    body += ["", "## Machine and provenance\n", *machine_lines(p.get("machine")), *evaluated_later_lines(p),
             f"- sampler: `{json.dumps(p.get('sampler'))}`",
             f"- seed: {p.get('seed')}",
             f"- git SHA: {p.get('git_sha')}",
             f"- versions: {', '.join(f'{k} {v}' for k, v in p.get('versions', {}).items() if v)}",
             f"- created: {p.get('created')}"]
    for k, v in extra.items():
        if isinstance(v, (str, int, float)) and k not in ("run_dir", "eval_overrides"):
            body.append(f"- {k}: {v}")
    atomic_write_text(md, "\n".join(body) + "\n")
    return js, md
