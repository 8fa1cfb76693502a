"""Grouped comparison (``dare compare`` over seeds, the end of ``dare sweep``): runs whose specs differ only in
their seeds (:data:`SEED_KEYS`) and output directory form one group; per group and benchmark the report gives
n, mean, standard deviation and the 95 % t-interval of the mean over seeds (and one over seeds x test items), for
every two groups evaluated on common seeds the paired difference with its intervals and a Holm-corrected paired
t-test verdict, and with several benchmarks each group's interquartile mean (:mod:`dare.report.stats`).

Groups are found from each run's ``run.json`` (the spec it ran); a run directory without one is a group of its
own. An entry may name a sweep directory (``LABEL=DIR``): it stands for the sweep's runs (:func:`expand_sweeps`). A
group is named by the settings that set it apart from the other groups (``algorithm.name=d1``), or by its entry's label
when it has one run.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from dare.report.stats import (ALPHA, BCA_MIN_SEEDS, CONFIDENCE, ITEM_RESAMPLES, MIN_SEEDS, TARGET_POWER, apply_holm,
                             item_bootstrap, iqm, paired_difference, seeds_for_power, summarize)
from dare.run.differences import spec_differences
from dare.run.rundir import RunDir, stored_spec

__all__ = ["SEED_KEYS", "METRICS", "Group", "expand_sweeps", "group_entries", "item_scores", "group_statistics",
           "grouped_markdown", "plot_groups", "figure_size"]

#: the spec keys a seed sets (``dare sweep --seeds``); runs differing only in these are one group
SEED_KEYS = ("train.seed", "eval.seed")
#: the scores summarised per group
METRICS = ("accuracy", "mean_reward")
#: keys that never set runs apart: the seeds, where the run was written, and what the spec hash ignores
_NOT_SETTINGS = (*SEED_KEYS, "output.dir", "output.overwrite", "train.resume", "train.report_to")


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
                if isinstance(r, dict) and isinstance(r.get("name"), str)
                and RunDir(d / r["name"]).eval_file(stage).is_file()]
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
    """Group ``parsed`` entries (:func:`dare.report.compare.parse_entry`) by spec without seeds, and by stage; in the
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


def item_scores(results: list[dict[str, Any]]) -> dict[str, dict[str, dict[int, float]]]:
    """Per-item scores of one run's evaluation (``eval/<stage>.json``'s results): ``{benchmark: {"accuracy": {row
    index: 0.0 or 1.0}, "mean_reward": {row index: reward}}}`` from each result's ``samples`` (``index``, ``correct``,
    ``reward``); a benchmark without samples is left out."""
    out: dict[str, dict[str, dict[int, float]]] = {}
    for r in results:
        samples = r.get("samples") if isinstance(r, dict) else None
        if not samples or not isinstance(r.get("name"), str):
            continue
        acc, rew = {}, {}
        for s in samples:
            if not (isinstance(s, dict) and isinstance(s.get("index"), int)):
                continue
            if isinstance(s.get("correct"), (bool, int, float)):
                acc[s["index"]] = float(s["correct"])
            if isinstance(s.get("reward"), (int, float)) and math.isfinite(s["reward"]):
                rew[s["index"]] = float(s["reward"])
        out[r["name"]] = {k: v for k, v in (("accuracy", acc), ("mean_reward", rew)) if v}
    return out


def _item_matrix(per_run: list[dict[int, float] | None]) -> np.ndarray | None:
    """``[runs, items]`` over the items every run scored (None when a run has no per-item scores or none is common)."""
    if not per_run or any(not p for p in per_run):
        return None
    common = sorted(set.intersection(*(set(p) for p in per_run)))
    if not common:
        return None
    return np.array([[p[i] for i in common] for p in per_run], dtype=np.float64)


def group_statistics(groups: list[Group], rows: list[dict[str, Any]], items: dict[str, Any] | None = None,
                     min_seeds: int = MIN_SEEDS, power_effect: float | None = None) -> dict[str, Any]:
    """The statistics of a grouped comparison (:mod:`dare.report.stats`).

    Per group, benchmark and metric: the per-seed values, :func:`~dare.report.stats.summarize` (t-interval, or BCa from
    :data:`~dare.report.stats.BCA_MIN_SEEDS` seeds) and, with per-item scores, the seeds x items bootstrap interval. Per
    pair of comparable groups (two settings at one stage, not ``before``: the later group minus the earlier; one
    setting before and after training: always ``after - before``, the gain) with at least 2 common seeds:
    :func:`~dare.report.stats.paired_difference`, its per-seed differences and the paired seeds x items bootstrap; the
    tested differences of one metric are Holm-corrected together. With several benchmarks, each group's IQM over its
    seeds x benchmarks (:func:`~dare.report.stats.iqm`). With ``power_effect`` (score units), the seeds each difference
    needs for 80 % power at that effect given its per-seed standard deviation
    (:func:`~dare.report.stats.seeds_for_power`).

    :param rows: the per-entry rows of :func:`dare.report.compare.compare_runs` (``label``, ``name`` and the metrics).
    :param items: entry label -> :func:`item_scores` of its evaluation (None: no test-item intervals).
    :returns: JSON-ready ``{"confidence", "min_seeds", "alpha", "groups", "differences", "aggregate", "power"}``.
    """
    items = items or {}
    by_label: dict[str, dict[str, dict]] = {}
    for r in rows:
        by_label.setdefault(r["label"], {})[r["name"]] = r
    out_groups, values, labels_of = [], [], []
    for g in groups:
        per: dict[str, dict[str, dict[int | None, float]]] = {}
        label_of: dict[int | None, str] = {}
        for (label, _, _), seed in zip(g.entries, g.seeds):
            label_of[seed] = label
            for bench, r in by_label.get(label, {}).items():
                for metric in METRICS:
                    if isinstance(r.get(metric), (int, float)):
                        per.setdefault(bench, {}).setdefault(metric, {})[seed] = float(r[metric])
        values.append(per)
        labels_of.append(label_of)
        stats = []
        for bench, metrics in per.items():
            for metric, vals in metrics.items():
                entry = {"benchmark": bench, "metric": metric, "seeds": list(vals), "values": list(vals.values()),
                         **summarize(list(vals.values())).to_dict(), "item_low": None, "item_high": None}
                m = _item_matrix([items.get(label_of[s], {}).get(bench, {}).get(metric) for s in vals])
                if m is not None and (m.shape[0] > 1 or m.shape[1] > 1):
                    entry["item_low"], entry["item_high"] = item_bootstrap(m)
                    entry["items"] = int(m.shape[1])
                stats.append(entry)
        out_groups.append({"label": g.label, "stage": g.stage, "runs": [str(d) for _, d, _ in g.entries],
                           "stats": stats})
    diffs, records = [], []
    for i in range(len(groups)):
        for j in range(i + 1, len(groups)):
            if not _comparable(groups[i], groups[j]):
                continue
            # gain: after - before
            lo, hi = (j, i) if groups[i].stage == "after" and groups[j].stage == "before" else (i, j)
            for bench, metrics in values[hi].items():
                for metric, b in metrics.items():
                    a = values[lo].get(bench, {}).get(metric, {})
                    common = sorted(s for s in set(a) & set(b) if s is not None)
                    if len(common) < 2:
                        continue
                    d = paired_difference([a[s] for s in common], [b[s] for s in common], min_seeds=min_seeds)
                    ma = _item_matrix([items.get(labels_of[lo][s], {}).get(bench, {}).get(metric) for s in common])
                    mb = _item_matrix([items.get(labels_of[hi][s], {}).get(bench, {}).get(metric) for s in common])
                    if ma is not None and mb is not None:
                        both = _item_matrix([items[labels_of[k][s]][bench][metric] for k in (lo, hi) for s in common])
                        if both is not None:
                            d = replace(d, **dict(zip(("item_low", "item_high"),
                                                      item_bootstrap(both[len(common):], both[: len(common)]))))
                    diffs.append(d)
                    records.append({"a": groups[lo].label, "b": groups[hi].label, "benchmark": bench, "metric": metric,
                                    "seeds": common, "per_seed": [b[s] - a[s] for s in common]})
    for metric in METRICS:  # Holm across the tested differences of one metric
        idx = [k for k, r in enumerate(records) if r["metric"] == metric]
        for k, d in zip(idx, apply_holm([diffs[k] for k in idx])):
            diffs[k] = d
    differences = [{**r, **d.to_dict()} for r, d in zip(records, diffs)]
    result = {"confidence": CONFIDENCE, "min_seeds": min_seeds, "alpha": ALPHA, "groups": out_groups,
              "differences": differences, "aggregate": _aggregate(groups, values), "power": None}
    if power_effect is not None:
        result["power"] = _power_table(differences, power_effect)
    return result


def _aggregate(groups: list[Group], values: list[dict]) -> list[dict[str, Any]]:
    """Per group and metric with 2+ benchmarks: the IQM over seeds x benchmarks (the seeds that scored every one)."""
    out = []
    for g, per in zip(groups, values):
        benches = sorted(per)
        if len(benches) < 2:
            continue
        for metric in METRICS:
            cols = [per[b].get(metric, {}) for b in benches]
            seeds = sorted(set.intersection(*(set(c) for c in cols)), key=lambda s: (s is None, s))
            if not seeds:
                continue
            x = np.array([[c[s] for c in cols] for s in seeds])
            value, low, high = iqm(x)
            out.append({"label": g.label, "metric": metric, "benchmarks": benches, "seeds": seeds, "iqm": value,
                        "ci_low": low, "ci_high": high})
    return out


def _power_table(differences: list[dict[str, Any]], effect: float) -> dict[str, Any]:
    """Seeds for 80 % power at ``effect`` per difference, from its per-seed standard deviation (the pilot's)."""
    rows = []
    for d in differences:
        need = seeds_for_power(effect, d["std"]) if d["n"] >= 2 else None
        rows.append({"a": d["a"], "b": d["b"], "benchmark": d["benchmark"], "metric": d["metric"],
                     "pilot_seeds": d["n"], "sd": d["std"], "seeds_needed": need})
    return {"effect": effect, "target": TARGET_POWER, "alpha": ALPHA, "rows": rows}


def _comparable(a: Group, b: Group) -> bool:
    """Two groups whose paired difference means something: two settings at the same stage (not ``before``: the
    starting model, the same for every setting), or one setting before and after training (the gain)."""
    if a.stage == b.stage:
        return a.stage != "before"
    return a.spec is not None and a.spec == b.spec and {a.stage, b.stage} == {"before", "after"}


def _interval(low, high) -> str:
    return "-" if low is None else f"[{low:.4f}, {high:.4f}]"


def _p(value) -> str:
    return "-" if value is None else f"{value:.3g}"


_METHOD = {"t": "t", "bca": "BCa", None: "-"}


def grouped_markdown(stats: dict[str, Any]) -> list[str]:
    """Markdown lines: the group table, the paired differences, the aggregate over benchmarks, the seeds a stated
    effect needs (``power``) and how to read them."""
    pct = f"{stats['confidence']:.0%}"
    md = ["## Groups: runs that differ only by seed\n",
          f"| group | benchmark | metric | n | mean | std | {pct} CI of the mean (method) | {pct} CI, seeds x test "
          f"items | per seed |",
          "|---|---|---|---:|---:|---:|---|---|---|"]
    for g in stats["groups"]:
        for s in g["stats"]:
            seeds = ", ".join(f"{seed}: {v:.4f}" for seed, v in zip(s["seeds"], s["values"]))
            items = _interval(s["item_low"], s["item_high"]) + (f" ({s['items']} items)" if s.get("items") else "")
            md.append(f"| {g['label']} | {s['benchmark']} | {s['metric'].replace('_', ' ')} | {s['n']} | "
                      f"{s['mean']:.4f} | {s['std']:.4f} | {_interval(s['ci_low'], s['ci_high'])} "
                      f"({_METHOD[s['method']]}) | {items} | {seeds} |")
    if stats["differences"]:
        md += ["", "## Paired differences (same seeds; gain = after - before)\n",
               f"| B - A | benchmark | metric | seeds | mean difference | {pct} paired-t CI | {pct} CI, seeds x test "
               f"items | p | Holm p | verdict |", "|---|---|---|---|---:|---|---|---:|---:|---|"]
        for d in stats["differences"]:
            md.append(f"| {d['b']} - {d['a']} | {d['benchmark']} | {d['metric'].replace('_', ' ')} | "
                      f"{', '.join(map(str, d['seeds']))} | {d['mean']:+.4f} | {_interval(d['t_low'], d['t_high'])} | "
                      f"{_interval(d['item_low'], d['item_high'])} | {_p(d['p_value'])} | {_p(d['p_holm'])} | "
                      f"**{d['verdict']}** |")
    if stats.get("aggregate"):
        md += ["", "## Aggregate over benchmarks: interquartile mean (IQM)\n",
               f"| group | metric | benchmarks | seeds | IQM | {pct} CI (stratified bootstrap) |",
               "|---|---|---|---:|---:|---|"]
        for a in stats["aggregate"]:
            md.append(f"| {a['label']} | {a['metric'].replace('_', ' ')} | {', '.join(a['benchmarks'])} | "
                      f"{len(a['seeds'])} | {a['iqm']:.4f} | {_interval(a['ci_low'], a['ci_high'])} |")
    if stats.get("power"):
        pw = stats["power"]
        md += ["", f"## Seeds for {pw['target']:.0%} power at a difference of {pw['effect']:g}\n",
               "| B - A | benchmark | metric | pilot seeds | sd of the per-seed difference | seeds needed |",
               "|---|---|---|---:|---:|---:|"]
        for r in pw["rows"]:
            need = "-" if r["seeds_needed"] is None else str(r["seeds_needed"])
            md.append(f"| {r['b']} - {r['a']} | {r['benchmark']} | {r['metric'].replace('_', ' ')} | "
                      f"{r['pilot_seeds']} | {r['sd']:.4f} | {need} |")
        md.append(f"\nPaired t-test at alpha {pw['alpha']}, two-sided; the pilot's sd is itself uncertain with few "
                  f"seeds.")
    md += ["", "How to read the groups:\n",
           "- **n**: runs (seeds) in the group; **mean**, **std**: mean and sample standard deviation over them",
           f"- **{pct} CI of the mean**: the Student-t interval mean ± t·std/√n (method *t*); from "
           f"{BCA_MIN_SEEDS} seeds the BCa bootstrap (scipy.stats.bootstrap, method *BCa*). It covers the mean of "
           "infinitely many seeds on this test set",
           f"- **{pct} CI, seeds x test items**: a bootstrap that resamples both the seeds and the test items "
           f"({ITEM_RESAMPLES} resamples): every seed scores the same items, so this is the interval for a new draw of "
           "both (wider with a small test set)",
           "- **mean difference**: per seed, B's score minus A's on the same seed, averaged (a gain is always after "
           "minus before); the paired-t interval (scipy.stats.ttest_rel) is that of the mean",
           f"- **verdict**: the paired t-test; its p-values are Holm-corrected across the differences of one metric in "
           f"this comparison; *significant* when the Holm p < {stats['alpha']}. A verdict needs {stats['min_seeds']} "
           "common seeds (fewer: *too few seeds to test*, with the power the test would have against a difference of "
           "one standard deviation); equal per-seed differences have no spread to test (*cannot assess: identical "
           "differences*, e.g. a collapsed model). `--power EFFECT` prints the seeds an effect needs", ""]
    return md


#: rows a panel of the grouped plot shows at most (groups x benchmarks, or paired differences); the tables list all
MAX_PLOT_ROWS = 16


def _wrap(text: str, width: int = 38) -> str:
    import textwrap

    return "\n".join(textwrap.wrap(text, width, break_long_words=True)) or text


def plot_groups(fig, stats: dict[str, Any]) -> None:
    """Draw a grouped comparison on ``fig``: per metric (rows), left the groups (each seed's score as a point, the
    mean and its interval as a horizontal bar), right a forest plot of the paired differences (per-seed differences
    as points, the mean with its paired-t interval, the seeds x items interval as a thin line, a line at 0), one row
    per group or difference with its label and verdict wrapped; at most :data:`MAX_PLOT_ROWS` rows a panel (the
    differences with the smallest Holm p), the title saying so."""
    metrics = [m for m in METRICS if any(s["metric"] == m for g in stats["groups"] for s in g["stats"])]
    diffs = stats["differences"]
    ncols = 2 if diffs else 1
    axes = fig.subplots(len(metrics), ncols, squeeze=False)
    pct = f"{stats['confidence']:.0%}"
    for row, metric in enumerate(metrics):
        ax = axes[row][0]
        rows = [(g["label"], s) for g in stats["groups"] for s in g["stats"] if s["metric"] == metric]
        shown_rows = rows[:MAX_PLOT_ROWS]
        for y, (label, s) in enumerate(shown_rows):
            ax.plot(s["values"], [y] * len(s["values"]), "o", color="C0", alpha=0.6, markersize=4,
                    label="one seed" if y == 0 else None)
            if s["ci_low"] is not None:
                ax.errorbar(s["mean"], y, xerr=[[s["mean"] - s["ci_low"]], [s["ci_high"] - s["mean"]]], fmt="s",
                            color="black", capsize=4, markersize=5, label=f"mean, {pct} CI" if y == 0 else None)
            else:
                ax.plot([s["mean"]], [y], "s", color="black")
        ax.set_yticks(range(len(shown_rows)), [_wrap(f"{label} · {s['benchmark']}") for label, s in shown_rows],
                      fontsize=7)
        ax.invert_yaxis()
        ax.set_xlabel(metric.replace("_", " "))
        more = f" (first {len(shown_rows)} of {len(rows)}; all in comparison.md)" if len(rows) > len(shown_rows) else ""
        ax.set_title(f"{metric.replace('_', ' ')} per group{more}", fontsize=9)
        ax.grid(axis="x", alpha=0.3)
        ax.legend(fontsize=7)
        if ncols == 1:
            continue
        ax = axes[row][1]
        every = [d for d in diffs if d["metric"] == metric]
        drows = sorted(every, key=lambda d: (d["p_holm"] is None, d["p_holm"] or 0.0))[:MAX_PLOT_ROWS]
        drows = [d for d in every if any(d is x for x in drows)]  # the smallest Holm p, in the table's order
        for y, d in enumerate(drows):
            ax.plot(d["per_seed"], [y] * len(d["per_seed"]), "o", color="C1", alpha=0.6, markersize=4,
                    label="one seed's difference" if y == 0 else None)
            if d["item_low"] is not None:
                ax.hlines(y + 0.22, d["item_low"], d["item_high"], color="C2", linewidth=1.5,
                          label=f"{pct} CI, seeds x items" if y == 0 else None)
            color = "C3" if d["significant"] else "black"
            if d["t_low"] is not None:
                ax.errorbar(d["mean"], y, xerr=[[d["mean"] - d["t_low"]], [d["t_high"] - d["mean"]]], fmt="D",
                            color=color, capsize=4, markersize=5, label=f"mean, {pct} paired-t CI" if y == 0 else None)
        ax.axvline(0.0, color="gray", linestyle="--", linewidth=1)
        ax.set_yticks(range(len(drows)), [_wrap(f"{d['b']} - {d['a']} · {d['benchmark']}") + "\n" + _wrap(d["verdict"])
                                          for d in drows], fontsize=7)
        ax.invert_yaxis()
        ax.set_xlabel(f"difference in {metric.replace('_', ' ')} (B - A)")
        more = f"; {len(drows)} of {len(every)}: the smallest Holm p" if len(every) > len(drows) else ""
        ax.set_title(f"paired differences (red: significant, Holm){more}", fontsize=9)
        ax.grid(axis="x", alpha=0.3)
        if drows:
            ax.legend(fontsize=7)


def figure_size(stats: dict[str, Any]) -> tuple[float, float]:
    """The grouped plot's size in inches: a fixed width (14 in, 8 without differences) and 0.5 in per row of its
    tallest panel (at most :data:`MAX_PLOT_ROWS` rows), between 3.5 and 9 in per metric: never wider with more
    groups."""
    per_metric = min(MAX_PLOT_ROWS, max([sum(1 for g in stats["groups"] for s in g["stats"] if s["metric"] == m)
                                         for m in METRICS] + [sum(1 for d in stats["differences"] if d["metric"] == m)
                                                              for m in METRICS]))
    metrics = sum(1 for m in METRICS if any(s["metric"] == m for g in stats["groups"] for s in g["stats"]))
    height = min(9.0, max(3.5, 1.2 + 0.5 * per_metric)) * max(metrics, 1)
    return (14.0 if stats["differences"] else 8.0), height
