"""Grouped comparison (``dare compare`` over seeds, the end of ``dare sweep``): runs whose specs differ only in
their seeds (:data:`SEED_KEYS`) and output directory form one group; per group and benchmark the report gives
n, mean, standard deviation and a 95 % bootstrap interval of the mean over seeds, and for every two groups
evaluated on common seeds the paired difference with its intervals and a verdict (:mod:`dare.eval.stats`).

Groups are found from each run's ``run.json`` (the spec it ran); a run directory without one is a group of its
own. An entry may name a sweep directory (``LABEL=DIR``): it stands for the sweep's runs (:func:`expand_sweeps`). A group is named by the settings that set it apart from the other groups (``algorithm.name=d1``), or by
its entry's label when it has one run.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dare.eval.stats import CONFIDENCE, paired_difference, summarize
from dare.rundir import spec_differences, stored_spec

__all__ = ["SEED_KEYS", "METRICS", "Group", "expand_sweeps", "group_entries", "group_statistics", "grouped_markdown", "plot_groups"]

#: the spec keys a seed sets (``dare sweep --seeds``); runs differing only in these are one group
SEED_KEYS = ("train.seed", "eval.seed")
#: the scores summarised per group
METRICS = ("accuracy", "mean_reward")
#: keys that never set runs apart: the seeds, where the run was written, and what the spec hash ignores
_NOT_SETTINGS = (*SEED_KEYS, "output.dir", "output.overwrite", "train.resume")


@dataclass
class Group:
    """Entries (``(label, run_dir, stage)``) of runs that differ only by seed; ``seeds[i]`` is entry ``i``'s seed
    (``train.seed``, else ``eval.seed``; None without ``run.json``)."""

    label: str
    stage: str
    entries: list[tuple[str, Path, str]] = field(default_factory=list)
    seeds: list[int | None] = field(default_factory=list)
    spec: dict | None = None


def _strip(spec: dict | None) -> dict | None:
    """The spec dump without :data:`_NOT_SETTINGS` (what the runs of one group share)."""
    if spec is None:
        return None
    out = json.loads(json.dumps(spec))
    for key in _NOT_SETTINGS:
        section, name = key.split(".")
        if isinstance(out.get(section), dict):
            out[section].pop(name, None)
    return out


def _seed(spec: dict | None) -> int | None:
    if spec is None:
        return None
    for section in ("train", "eval"):
        if isinstance(spec.get(section), dict) and isinstance(spec[section].get("seed"), int):
            return spec[section]["seed"]
    return None


def _short(value: Any) -> str:
    text = value if isinstance(value, str) else json.dumps(value)
    return text if len(text) <= 30 else text[:27] + "..."


def expand_sweeps(parsed: list[tuple[str, Path, str]]) -> list[tuple[str, Path, str]]:
    """Entries whose directory is a sweep's (it has ``sweep.json``, :mod:`dare.sweep`) stand for its runs that wrote the
    entry's stage: ``LABEL/<run name>`` each, in the sweep's order; other entries stay as they are."""
    out = []
    for label, d, stage in parsed:
        try:
            runs = json.loads((d / "sweep.json").read_text())["runs"]
        except (OSError, ValueError, KeyError, TypeError):
            out.append((label, d, stage))
            continue
        out += [(f"{label}/{r['name']}", d / r["name"], stage) for r in runs
                if isinstance(r, dict) and isinstance(r.get("name"), str) and (d / r["name"] / "eval" / f"{stage}.json").is_file()]
    return out


def _common_label(g: Group) -> str:
    """A group's name when no setting sets it apart: its labels' common prefix without seed parts (``rl-s0``, ``rl-s1``
    -> ``rl``), else ``all seeds``."""
    import os
    import re

    labels = [re.sub(r"[,_-]?seed=?\d+$", "", re.sub(r"\s*\([a-z]+\)$", "", label)) for label, _, _ in g.entries]
    prefix = os.path.commonprefix(labels).rstrip(",_-= s")
    return prefix or "all seeds"


def group_entries(parsed: list[tuple[str, Path, str]]) -> list[Group]:
    """Group ``parsed`` entries (:func:`dare.eval.compare.parse_entry`) by spec without seeds, and by stage; in the
    order of their first entry. Entries of one run directory at one stage are never grouped twice."""
    groups: list[Group] = []
    keys: list[str] = []
    for label, run_dir, stage in parsed:
        spec = stored_spec(run_dir)
        stripped = _strip(spec)
        key = json.dumps([stripped, stage], sort_keys=True) if stripped is not None else f"{run_dir.resolve()}:{stage}"
        if key in keys:
            g = groups[keys.index(key)]
        else:
            keys.append(key)
            g = Group(label=label, stage=stage, spec=stripped)
            groups.append(g)
        g.entries.append((label, run_dir, stage))
        g.seeds.append(_seed(spec))
    for g in groups:
        if len(g.entries) < 2:
            continue
        others = [o.spec for o in groups if o is not g and o.spec is not None]
        diffs: dict[str, Any] = {}
        for other in others:
            for k, _, mine in spec_differences(other, g.spec):
                diffs.setdefault(k, mine)
        stage = "" if all(o.stage == g.stage for o in groups) else f" ({g.stage})"
        g.label = (", ".join(f"{k}={_short(v)}" for k, v in diffs.items()) if diffs else _common_label(g)) + stage
    return groups


def group_statistics(groups: list[Group], rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Per group, benchmark and metric: the per-seed values and :func:`dare.eval.stats.summarize`; per pair of groups
    (in order: the later minus the earlier) with at least 2 common seeds: :func:`dare.eval.stats.paired_difference`,
    for two settings at one stage (not ``before``) and for one setting's ``after`` minus its ``before`` (the gain).

    :param rows: the per-entry rows of :func:`dare.eval.compare.compare_runs` (``label``, ``name`` and the metrics).
    :returns: ``{"groups": [...], "differences": [...]}`` (JSON-ready).
    """
    by_label = {}
    for r in rows:
        by_label.setdefault(r["label"], {})[r["name"]] = r
    out_groups, values = [], []
    for g in groups:
        per: dict[str, dict[str, dict[int | None, float]]] = {}
        for (label, _, _), seed in zip(g.entries, g.seeds):
            for bench, r in by_label.get(label, {}).items():
                for metric in METRICS:
                    if isinstance(r.get(metric), (int, float)):
                        per.setdefault(bench, {}).setdefault(metric, {})[seed] = float(r[metric])
        values.append(per)
        stats = [{"benchmark": bench, "metric": metric, "seeds": list(vals), "values": list(vals.values()),
                  **summarize(list(vals.values())).to_dict()}
                 for bench, metrics in per.items() for metric, vals in metrics.items()]
        out_groups.append({"label": g.label, "stage": g.stage, "runs": [str(d) for _, d, _ in g.entries], "stats": stats})
    diffs = []
    for i in range(len(groups)):
        for j in range(i + 1, len(groups)):
            if not _comparable(groups[i], groups[j]):
                continue
            for bench, metrics in values[j].items():
                for metric, b in metrics.items():
                    a = values[i].get(bench, {}).get(metric, {})
                    common = sorted(s for s in set(a) & set(b) if s is not None)
                    if len(common) < 2:
                        continue
                    d = paired_difference([a[s] for s in common], [b[s] for s in common])
                    diffs.append({"a": groups[i].label, "b": groups[j].label, "benchmark": bench, "metric": metric,
                                  "seeds": common, **d.to_dict(), "verdict": d.verdict})
    return {"confidence": CONFIDENCE, "groups": out_groups, "differences": diffs}


def _comparable(a: Group, b: Group) -> bool:
    """Two groups whose paired difference means something: two settings at the same stage (not ``before``: the
    starting model, the same for every setting), or one setting before and after training (the gain)."""
    if a.stage == b.stage:
        return a.stage != "before"
    return a.spec is not None and a.spec == b.spec


def _interval(low, high) -> str:
    return "-" if low is None else f"[{low:.4f}, {high:.4f}]"


def grouped_markdown(stats: dict[str, Any]) -> list[str]:
    """Markdown lines: the group table, the paired differences and how to read them."""
    pct = f"{stats['confidence']:.0%}"
    md = ["## Groups: runs that differ only by seed\n",
          f"| group | benchmark | metric | n | mean | std | {pct} bootstrap CI | per seed |", "|---|---|---|---:|---:|---:|---|---|"]
    for g in stats["groups"]:
        for s in g["stats"]:
            seeds = ", ".join(f"{seed}: {v:.4f}" for seed, v in zip(s["seeds"], s["values"]))
            md.append(f"| {g['label']} | {s['benchmark']} | {s['metric'].replace('_', ' ')} | {s['n']} | {s['mean']:.4f} | "
                      f"{s['std']:.4f} | {_interval(s['ci_low'], s['ci_high'])} | {seeds} |")
    if stats["differences"]:
        md += ["", "## Paired differences (same seeds)\n",
               f"| B - A | benchmark | metric | seeds | mean difference | {pct} bootstrap CI | {pct} paired-t CI | verdict |",
               "|---|---|---|---|---:|---|---|---|"]
        for d in stats["differences"]:
            md.append(f"| {d['b']} - {d['a']} | {d['benchmark']} | {d['metric'].replace('_', ' ')} | "
                      f"{', '.join(map(str, d['seeds']))} | {d['mean']:+.4f} | {_interval(d['ci_low'], d['ci_high'])} | "
                      f"{_interval(d['t_low'], d['t_high'])} | **{d['verdict']}** |")
    md += ["", "How to read the groups:\n",
           "- **n**: runs (seeds) in the group; **mean**, **std**: mean and sample standard deviation over them",
           f"- **{pct} bootstrap CI**: scipy.stats.bootstrap (percentile, 9999 resamples, random_state 0) of the mean over "
           "seeds: where the mean of more seeds would likely fall. With few seeds it is too narrow (3 seeds: it spans at "
           "most the lowest to the highest value)",
           "- **mean difference**: per seed, B's score minus A's on the same seed, averaged; the intervals are those of that "
           f"mean: bootstrap over the per-seed differences, and the paired Student-t interval (scipy.stats.ttest_rel)",
           "- **verdict**: *significant* when both intervals exclude 0; *not significant* when either contains 0: the "
           "difference may be seed noise. More seeds narrow the intervals. Each pair is judged on its own (no "
           "correction for comparing several pairs)", ""]
    return md


def plot_groups(ax_row, stats: dict[str, Any]) -> None:
    """Draw the spread: one axis per metric in ``ax_row``; per group and benchmark the per-seed values (points, left),
    the mean (a bar) and the bootstrap interval (an error bar, right), labelled with the mean and n."""
    labels = [g["label"] for g in stats["groups"]]
    benches = sorted({s["benchmark"] for g in stats["groups"] for s in g["stats"]})
    width = 0.8 / max(len(benches), 1)
    for ax, metric in zip(ax_row, METRICS):
        top = 0.0
        for k, bench in enumerate(benches):
            for i, g in enumerate(stats["groups"]):
                s = next((s for s in g["stats"] if s["benchmark"] == bench and s["metric"] == metric), None)
                if s is None:
                    continue
                x = i + (k - (len(benches) - 1) / 2) * width
                color = f"C{k}"
                ax.bar(x, s["mean"], width * 0.9, color=color, alpha=0.25, label=bench if i == 0 else None)
                m = len(s["values"])
                xs = [x - width * (0.3 - 0.25 * j / max(m - 1, 1)) for j in range(m)]
                ax.plot(xs, s["values"], "o", color=color, markersize=4, clip_on=False,
                        label=f"{bench}: one seed" if i == 0 else None)
                high = max(s["values"])
                if s["ci_low"] is not None:
                    ax.errorbar(x + width * 0.25, s["mean"], yerr=[[s["mean"] - s["ci_low"]], [s["ci_high"] - s["mean"]]],
                                fmt="_", color="black", capsize=5, linewidth=1.2,
                                label=f"{stats['confidence']:.0%} CI" if i == 0 and k == 0 else None)
                    high = max(high, s["ci_high"])
                top = max(top, high)
                ax.annotate(f"{s['mean']:.3f} (n={s['n']})", (x, high), textcoords="offset points", xytext=(0, 6),
                            ha="center", fontsize=7)
        ax.set_ylim(0.0, max(top * 1.2, 0.05))
        ax.set_xticks(range(len(labels)), labels, fontsize=7)
        ax.set_ylabel(metric.replace("_", " "))
        ax.set_title(f"{metric.replace('_', ' ')}: per seed (points), mean (bar), {stats['confidence']:.0%} bootstrap CI",
                     fontsize=9)
        ax.legend(fontsize=7)
