"""Side-by-side reports across runs (``dare compare``): e.g. untrained vs SFT vs RL.

Each entry is ``LABEL=RUN_DIR[:STAGE]``: the benchmark results that run wrote for ``STAGE``
(``before``, ``after`` or ``eval``; default ``after``) in ``RUN_DIR/eval/<stage>.json``. Labels must be
unique. The output:

* ``comparison.md``/``.json``: one row per label and benchmark with the scores and, next to them, what
  produced them (objective, optimizer steps, training wall time; for a ``before`` entry: the untrained
  starting model), then what the columns mean and, per run, its training data, sampler, evaluated rows
  and machine (read from the run's ``report.json``);
* ``comparison.png``: the accuracy of every entry per benchmark (bars labelled with their values, the
  panel title naming the rows scored), then one row of panels per run directory that trained, each on
  its own step axis (a 750-step SFT run and a 60-step RL run are never drawn on one axis): its training
  curve (RL: mean reward with its spread; supervised: loss) and its in-training evaluations, named by
  the set they score.

An entry may name a ``dare sweep`` directory (``LABEL=DIR``): it stands for the sweep's runs. Runs that differ only by
seed (their ``run.json`` specs agree but for ``train.seed``/``eval.seed`` and ``output.dir``) form groups
(:mod:`dare.report.groups`): the comparison then starts with each group's n, mean, standard deviation and 95 %
t-interval per benchmark (and one over seeds x test items, from the runs' per-item scores), the paired difference of
every two groups on their common seeds with a Holm-corrected paired t-test verdict (from ``min_seeds`` seeds on), an
interquartile mean over several benchmarks and, with ``power_effect``, the seeds that effect needs; ``comparison.png``
shows each group's per-seed points, mean and interval, and a forest plot of the paired differences.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from dare.errors import DareError
from dare.report.merge import read_report
from dare.io import atomic_write_json, atomic_write_text
from dare.run.rundir import RunDir

__all__ = ["parse_entry", "load_stage", "compare_runs"]

_STAGES = ("before", "after", "eval")


def parse_entry(entry: str) -> tuple[str, Path, str]:
    """``LABEL=RUN_DIR[:STAGE]`` -> ``(label, run_dir, stage)``.

    :raises DareError: malformed entry or unknown stage.
    """
    if "=" not in entry:
        raise DareError(f"compare entry {entry!r} must look like LABEL=RUN_DIR[:STAGE], e.g. sft=runs/quickstart:after")
    label, rest = entry.split("=", 1)
    stage = "after"
    if ":" in rest and rest.rsplit(":", 1)[1] in _STAGES:
        rest, stage = rest.rsplit(":", 1)
    elif ":" in rest:
        raise DareError(f"compare entry {entry!r}: stage must be one of {', '.join(_STAGES)}")
    return label.strip(), Path(rest), stage


def load_stage(run_dir: Path, stage: str) -> list[dict[str, Any]]:
    """The benchmark results ``run_dir`` wrote for ``stage``.

    :raises DareError: the run has no such evaluation.
    """
    rundir = RunDir(run_dir)
    f = rundir.eval_file(stage)
    if not run_dir.exists():
        raise DareError(f"run directory {run_dir} does not exist; give LABEL=RUN_DIR[:STAGE] with the output.dir of a "
                        f"run")
    if not run_dir.is_dir():
        raise DareError(f"{run_dir} is not a directory; give LABEL=RUN_DIR[:STAGE] with the output.dir of a run")
    if not f.is_file():
        have = sorted(p.stem for p in rundir.eval_dir.glob("*.json")) if rundir.eval_dir.is_dir() else []
        raise DareError(f"{run_dir} has no '{stage}' evaluation ({f} is missing; it has: {', '.join(have) or 'none'}); "
                        "run it first")
    return json.loads(f.read_text())["results"]


def _report(run_dir: Path) -> dict[str, Any]:
    """The run's ``report.json`` ({} when absent or unreadable: the comparison then shows "?")."""
    return read_report(run_dir) or {}


def _context(run_dir: Path, stage: str) -> dict[str, Any]:
    """What produced an entry's numbers: objective, steps and training wall time (``before``: the untrained start)."""
    rep = _report(run_dir)
    info = rep.get("run") or {}
    if stage == "before":
        return {"objective": "none (the starting model)", "steps": 0, "train_seconds": None}
    obj = info.get("objective") or {}
    tm = rep.get("train_metrics")
    kept = tm.get("best_step") if isinstance(tm, dict) else None  # train.keep_best: model/ holds that step's weights
    return {"objective": obj.get("name", "?") if obj else "?", "steps": info.get("steps"),
            "train_seconds": info.get("train_seconds"), **({"weights_step": kept} if kept is not None else {})}


def compare_runs(entries: list, out_dir: str | Path, title: str = "DARE comparison", min_seeds: int = 5,
                 power_effect: float | None = None) -> tuple[Path, Path, Path | None]:
    """Write ``comparison.md``, ``comparison.json`` and ``comparison.png`` to ``out_dir``.

    :param entries: ``LABEL=RUN_DIR[:STAGE]`` strings, or ``(label, run_dir, stage)`` tuples (labels may then hold
    ``=``).
    :param min_seeds: common seeds a paired difference needs for a verdict
        (:func:`dare.report.stats.paired_difference`).
    :param power_effect: a difference in score units (e.g. 0.02): the grouped comparison then gives the seeds each
        paired difference needs to detect it with 80 % power, from its per-seed standard deviation.
    :raises DareError: a malformed entry, a missing evaluation, ``min_seeds < 2`` or a zero or non-finite
    ``power_effect``.
    """
    import math

    if not (isinstance(min_seeds, int) and min_seeds >= 2):
        raise DareError(f"the minimum number of seeds for a verdict must be an integer >= 2 (a t-test needs 2), got "
                        f"{min_seeds!r}; e.g. --min-seeds 5")
    if power_effect is not None and not (math.isfinite(power_effect) and power_effect != 0.0):
        raise DareError(f"--power takes the difference to detect in score units, a non-zero number such as 0.02 "
                        f"(2 points of accuracy); got {power_effect!r}")
    from dare.report.report import column_notes, machine_lines, run_lines
    from dare.progress import format_seconds

    out_dir = Path(out_dir)
    from dare.report.groups import expand_sweeps

    parsed = expand_sweeps([parse_entry(e) if isinstance(e, str) else (e[0], Path(e[1]), e[2]) for e in entries])
    if not parsed:
        raise DareError("no run to compare: the sweep directories given have no run with that evaluation yet")
    entries = [f"{label}={d}:{stage}" for label, d, stage in parsed]  # as given, sweeps expanded
    labels = [label for label, _, _ in parsed]
    if "" in labels:
        raise DareError("a compare entry has an empty label; write LABEL=RUN_DIR[:STAGE], e.g. sft=runs/quickstart")
    dups = sorted({label for label in labels if labels.count(label) > 1})
    if dups:
        raise DareError(f"compare labels must be unique, but {', '.join(repr(d) for d in dups)} is given more than "
                        f"once; name each entry differently, e.g. untrained=RUN:before sft=RUN:after")
    from dare.report.groups import item_scores

    rows, items = [], {}
    for label, run_dir, stage in parsed:
        ctx = _context(run_dir, stage)
        results = load_stage(run_dir, stage)
        items[label] = item_scores(results)
        for r in results:
            rows.append({"label": label, "run": str(run_dir), "stage": stage, **ctx, **{k: r.get(k) for k in
                         ("name", "n", "accuracy", "mean_reward", "nfe", "tokens_per_second")}})
    md = [f"# {title}\n",
          "| model | benchmark | accuracy | mean reward | samples | objective | steps | train wall time | run "
          "| stage |",
          "|---|---|---:|---:|---:|---|---:|---:|---|---|"]
    for r in rows:
        wall = format_seconds(r["train_seconds"]) if isinstance(r["train_seconds"], (int, float)) else "-"
        steps = r["steps"] if r["steps"] is not None else "?"
        if r.get("weights_step") is not None:
            steps = f"{steps} (weights of step {r['weights_step']}, keep_best)"
        md.append(f"| {r['label']} | {r['name']} | {r['accuracy']:.4f} | {r['mean_reward']:.4f} | {r['n']} | "
                  f"{r['objective']} | {steps} | {wall} | {r['run']} | {r['stage']} |")
    evaluators = {}
    for r in rows:
        evaluators.setdefault(r["name"], _evaluator_description(r["name"]))
    md += ["", "What the columns mean:\n",
           *[c for c in column_notes(evaluators) if not c.startswith(("- **NFE", "- **tokens/s"))],
           "- **objective**, **steps**: what trained the evaluated model (a `before` entry is the run's starting "
           "model; with train.keep_best, the weights of the step it kept)",
           "- **train wall time**: the training command's wall time (the last command, when a run was resumed); "
           "it depends on the machine and its load"]
    seen: set[Path] = set()
    for _, run_dir, _ in parsed:
        if run_dir.resolve() in seen:
            continue
        seen.add(run_dir.resolve())
        rep = _report(run_dir)
        if not rep:
            continue
        md += ["", f"## {run_dir}\n", "| | |", "|---|---|",
               *run_lines(rep.get("run") or {}, rep.get("results") or {}), "",
               *machine_lines((rep.get("provenance") or {}).get("machine"))]
    from dare.report.groups import group_entries, group_statistics, grouped_markdown

    groups = group_entries(parsed)
    stats = (group_statistics(groups, rows, items, min_seeds=min_seeds, power_effect=power_effect)
             if any(len(g.entries) > 1 for g in groups) else None)
    if stats is not None:  # runs that differ only by seed: their spread first, then every run
        md[1:1] = ["", *grouped_markdown(stats), "## Runs\n"]
    js = out_dir / "comparison.json"
    mdp = out_dir / "comparison.md"
    atomic_write_json(js, {"rows": rows, "entries": entries, **({"grouped": stats} if stats is not None else {})})
    atomic_write_text(mdp, "\n".join(md) + "\n")
    if stats is None:
        png = _plot(parsed, out_dir / "comparison.png", title, rows)
    else:
        png = _plot_groups(stats, out_dir, title)
    return mdp, js, png


def _save(fig, out_png: Path) -> Path:
    import matplotlib.pyplot as plt

    out_png.parent.mkdir(parents=True, exist_ok=True)
    tmp = out_png.with_name(f".{out_png.name}.tmp.png")
    fig.savefig(tmp, dpi=110)
    plt.close(fig)
    tmp.replace(out_png)
    return out_png


def _plot_groups(stats: dict[str, Any], out_dir: Path, title: str) -> Path:
    """``comparison.png`` of a grouped comparison (:func:`dare.report.groups.plot_groups`), its size capped by
    :func:`dare.report.groups.figure_size`."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from dare.report.groups import figure_size, plot_groups

    fig = plt.figure(figsize=figure_size(stats), layout="constrained")
    plot_groups(fig, stats)
    fig.suptitle(title)
    return _save(fig, out_dir / "comparison.png")


def _evaluator_description(name: str) -> str:
    """The benchmark's description from the plugin registry ("" when it is not installed)."""
    try:
        from dare.plugins.manager import get_registry

        return get_registry().get("evaluator", name).cls.description()
    except Exception:  # noqa: BLE001 - a comparison of finished runs does not need the plugin
        return ""


def _curve_label(run_dir: Path, parsed) -> str:
    """A run's training curve is the training of the model its ``after`` entry evaluates: that entry's label
    (with the directory name); without one, the directory name."""
    after = [label for label, d, stage in parsed if d.resolve() == run_dir.resolve() and stage == "after"]
    return f"{after[0]} ({run_dir.name})" if after else run_dir.name


def _panels(parsed, rows) -> dict[str, Any]:
    """Plot content: ``accuracy`` / ``mean_reward``: ``(entry label, {benchmark: value})`` for every entry, in order;
    ``rows``:
    ``{benchmark: sorted row counts}``; ``runs``: one ``(curve label, kind, curve points, eval series,
    set labels, steps, objective)`` per run directory that trained (:func:`dare.report.plots.training_curve`)."""
    from dare.report.plots import eval_series, read_metrics, training_curve

    panels: dict[str, Any] = {"accuracy": [], "mean_reward": [], "rows": {}, "runs": []}
    for label, _, _ in parsed:
        panels["accuracy"].append((label, {r["name"]: r["accuracy"] for r in rows if r["label"] == label}))
        panels["mean_reward"].append((label, {r["name"]: r["mean_reward"] for r in rows if r["label"] == label}))
    for r in rows:
        panels["rows"].setdefault(r["name"], set()).add(r["n"])
    panels["rows"] = {k: sorted(v) for k, v in panels["rows"].items()}
    seen: set[Path] = set()
    for _, run_dir, _ in parsed:
        if run_dir.resolve() in seen:
            continue
        seen.add(run_dir.resolve())
        recs = read_metrics(RunDir(run_dir).metrics)
        kind, curve = training_curve(recs)
        if not curve:
            continue
        info = _report(run_dir).get("run") or {}
        obj = (info.get("objective") or {}).get("name")
        steps = info.get("steps") or max(s for s, _, _ in curve)
        panels["runs"].append((_curve_label(run_dir, parsed), kind, curve, eval_series(recs),
                               info.get("eval_sets") or {}, steps, obj))
    return panels


def _bar_title(bench: str, counts: list[int]) -> str:
    rows = " / ".join(str(c) for c in counts)
    return f"{bench}: {rows} rows" if bench else f"{rows} rows"


def _plot(parsed, out_png: Path, title: str, rows=()) -> Path | None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from dare.report.plotstyle import reward_marker, step_axis
    from dare.report.plots import draw_training_curve

    panels = _panels(parsed, rows)
    runs = panels["runs"]
    have_bars = bool(rows)
    if not have_bars and not runs:
        return None
    nrows = int(have_bars) + len(runs)
    fig = plt.figure(figsize=(12, 3.9 * nrows))
    grid = fig.add_gridspec(nrows, 2)
    r0 = 0
    if have_bars:  # one group of bars per entry: accuracy (filled) and mean reward (hatched) per benchmark, with values
        ax = fig.add_subplot(grid[0, :])
        lines, rewards = panels["accuracy"], dict(panels["mean_reward"])
        benches = sorted({b for _, accs in lines for b in accs})
        bars_per_entry = [(b, m) for b in benches for m in ("accuracy", "mean_reward")]
        width = 0.8 / max(len(bars_per_entry), 1)
        colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
        values = []
        for j, (bench, metric) in enumerate(bars_per_entry):
            xs = [i + (j - (len(bars_per_entry) - 1) / 2) * width for i in range(len(lines))]
            vals = [(accs if metric == "accuracy" else rewards.get(lab, {})).get(bench, 0.0) or 0.0
                    for lab, accs in lines]
            values += vals
            what = "accuracy" if metric == "accuracy" else "mean reward"
            bars = ax.bar(xs, vals, width, color=colors[benches.index(bench) % len(colors)],
                          hatch=None if metric == "accuracy" else "//", alpha=1.0 if metric == "accuracy" else 0.55,
                          label=f"{_bar_title(bench, panels['rows'][bench])}: {what}")
            ax.bar_label(bars, fmt="%.3f", fontsize=8, padding=2)
        ax.set_xticks(range(len(lines)), [lab for lab, _ in lines], fontsize=8)
        ax.set_ylabel("accuracy (fraction of rows solved) / mean reward")
        ax.set_ylim(min([0.0, *values]) * 1.15, max([1.0, *values]) * 1.12)
        names = ", ".join(_bar_title(b, panels["rows"][b]) for b in benches)
        ax.set_title(f"accuracy and mean reward per model on {names}")
        ax.legend(fontsize=7)
        r0 = 1
    for k, (label, kind, curve, evals, sets, steps, obj) in enumerate(runs):
        ax1 = fig.add_subplot(grid[r0 + k, 0])
        draw_training_curve(ax1, kind, curve, max_step=steps)
        ax1.set_title(f"{label}: training {kind} ({obj or '?'}, {steps} steps)", fontsize=9)
        ax1.legend(fontsize=7)
        ax2 = fig.add_subplot(grid[r0 + k, 1])
        for n, (prefix, series) in enumerate(sorted(evals.items())):
            name = sets.get(prefix, prefix)
            color = None
            for metric, style in (("accuracy", "-"), ("mean_reward", "--")):
                pts = sorted(series.get(metric, []))
                if pts:
                    line = ax2.plot([s for s, _ in pts], [v for _, v in pts], style, **reward_marker(metric, n),
                                    color=color, label=f"{name}: {metric.replace('_', ' ')}", clip_on=False)[0]
                    color = line.get_color()
        ax2.set_xlabel("optimizer step")
        ax2.set_ylabel("score (fraction of rows / mean reward)")
        ax2.set_ylim(0, 1.02)
        ax2.set_xlim(-0.03 * max(steps, 1), 1.05 * max(steps, 1))
        step_axis(ax2)
        ax2.set_title(f"{label}: in-training evaluation", fontsize=9)
        if ax2.lines:
            ax2.legend(fontsize=6.5)
        else:
            ax2.text(0.5, 0.5, "no in-training evaluation", ha="center", va="center", transform=ax2.transAxes)
    fig.suptitle(title)
    fig.tight_layout(rect=(0, 0, 1, 1 - 0.35 / (3.9 * nrows)))  # room for the title above the first panel
    return _save(fig, out_png)
