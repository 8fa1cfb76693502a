"""Side-by-side reports across runs (``dare compare``): e.g. untrained vs SFT vs RL.

Each entry is ``LABEL=RUN_DIR[:STAGE]``: the benchmark results that run wrote for ``STAGE``
(``before``, ``after`` or ``eval``; default ``after``) in ``RUN_DIR/eval/<stage>.json``. The output is a
Markdown + JSON table (one row per label and benchmark) and a PNG with every entry's accuracy per
benchmark and, for every run directory that trained, its training reward (RL runs) or loss (supervised
runs), labelled by the entry that evaluates its trained model (``:after``), and its in-training
evaluation scores against step. Labels must be unique.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from dare.errors import DareError
from dare.io import atomic_write_json, atomic_write_text

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
    f = run_dir / "eval" / f"{stage}.json"
    if not run_dir.exists():
        raise DareError(f"run directory {run_dir} does not exist; give LABEL=RUN_DIR[:STAGE] with the output.dir of a run")
    if not run_dir.is_dir():
        raise DareError(f"{run_dir} is not a directory; give LABEL=RUN_DIR[:STAGE] with the output.dir of a run")
    if not f.is_file():
        have = sorted(p.stem for p in (run_dir / "eval").glob("*.json")) if (run_dir / "eval").is_dir() else []
        raise DareError(f"{run_dir} has no '{stage}' evaluation ({f} is missing; it has: {', '.join(have) or 'none'}); run it first")
    return json.loads(f.read_text())["results"]


def _curves(run_dir: Path) -> dict[str, list[tuple[int, float]]]:
    f = run_dir / "metrics.jsonl"
    out: dict[str, list[tuple[int, float]]] = {}
    if not f.is_file():
        return out
    for line in f.read_text().splitlines():
        if not line.strip():
            continue
        rec = json.loads(line)
        for key in ("reward", "loss"):
            if isinstance(rec.get(key), (int, float)):
                out.setdefault(key, []).append((rec["step"], rec[key]))
        for k, v in rec.items():
            if k.startswith("eval/") and isinstance(v, (int, float)):
                out.setdefault(k, []).append((rec["step"], v))
    return out


def compare_runs(entries: list[str], out_dir: str | Path, title: str = "DARE comparison") -> tuple[Path, Path, Path | None]:
    """Write ``comparison.md``, ``comparison.json`` and ``comparison.png`` to ``out_dir``.

    :raises DareError: a malformed entry or a missing evaluation.
    """
    out_dir = Path(out_dir)
    parsed = [parse_entry(e) for e in entries]
    labels = [label for label, _, _ in parsed]
    if "" in labels:
        raise DareError("a compare entry has an empty label; write LABEL=RUN_DIR[:STAGE], e.g. sft=runs/quickstart")
    dups = sorted({label for label in labels if labels.count(label) > 1})
    if dups:
        raise DareError(f"compare labels must be unique, but {', '.join(repr(d) for d in dups)} is given more than once; "
                        "name each entry differently, e.g. untrained=RUN:before sft=RUN:after")
    rows = []
    for label, run_dir, stage in parsed:
        for r in load_stage(run_dir, stage):
            rows.append({"label": label, "run": str(run_dir), "stage": stage, **{k: r[k] for k in
                         ("name", "n", "accuracy", "mean_reward", "nfe", "tokens_per_second")}})
    md = [f"# {title}\n", "| model | benchmark | accuracy | mean reward | samples | run | stage |", "|---|---|---:|---:|---:|---|---|"]
    for r in rows:
        md.append(f"| {r['label']} | {r['name']} | {r['accuracy']:.4f} | {r['mean_reward']:.4f} | {r['n']} | {r['run']} | {r['stage']} |")
    js = out_dir / "comparison.json"
    mdp = out_dir / "comparison.md"
    atomic_write_json(js, {"rows": rows, "entries": entries})
    atomic_write_text(mdp, "\n".join(md) + "\n")
    png = _plot(parsed, out_dir / "comparison.png", title, rows)
    return mdp, js, png


def _curve_label(run_dir: Path, parsed) -> str:
    """A run's training curve is the training of the model its ``after`` entry evaluates: that entry's label
    (with the directory name); without one, the directory name."""
    after = [label for label, d, stage in parsed if d.resolve() == run_dir.resolve() and stage == "after"]
    return f"{after[0]} ({run_dir.name})" if after else run_dir.name


def _panels(parsed, rows) -> dict[str, list]:
    """Plot content: ``accuracy``: ``(entry label, {benchmark: accuracy})`` for every entry, in order; the
    curve panels: ``(legend label, [(step, value), ...])`` once per run directory."""
    panels: dict[str, list] = {"accuracy": [], "training loss": [], "training reward": [], "evaluation during training": []}
    for label, _, _ in parsed:
        panels["accuracy"].append((label, {r["name"]: r["accuracy"] for r in rows if r["label"] == label}))
    seen: set[Path] = set()
    for _, run_dir, _ in parsed:
        if run_dir.resolve() in seen:
            continue
        seen.add(run_dir.resolve())
        c = _curves(run_dir)
        if "reward" in c:
            panels["training reward"].append((_curve_label(run_dir, parsed), c["reward"]))
        elif "loss" in c:
            panels["training loss"].append((_curve_label(run_dir, parsed), c["loss"]))
        for k, pts in sorted(c.items()):
            if k.startswith("eval/"):
                panels["evaluation during training"].append((f"{run_dir.name}: {k[5:]}", pts))
    return panels


def _plot(parsed, out_png: Path, title: str, rows=()) -> Path | None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    used = [(name, lines) for name, lines in _panels(parsed, rows).items() if lines and (rows or name != "accuracy")]
    if not used:
        return None
    fig, axes = plt.subplots(1, len(used), figsize=(5.5 * len(used), 4), squeeze=False)
    for ax, (name, lines) in zip(axes[0], used):
        if name == "accuracy":  # one group of bars per entry, one bar per benchmark
            benches = sorted({b for _, accs in lines for b in accs})
            width = 0.8 / max(len(benches), 1)
            for j, bench in enumerate(benches):
                xs = [i + (j - (len(benches) - 1) / 2) * width for i in range(len(lines))]
                ax.bar(xs, [accs.get(bench, 0.0) for _, accs in lines], width, label=bench)
            ax.set_xticks(range(len(lines)), [lab for lab, _ in lines], rotation=15, fontsize=8)
            ax.set_title("accuracy")
            ax.set_ylim(0, 1.02)
            ax.legend(fontsize=7)
            continue
        for lab, pts in lines:
            ax.plot([s for s, _ in pts], [v for _, v in pts], marker="o" if name.startswith("evaluation") else None,
                    markersize=3, label=lab)
        ax.set_xlabel("step")
        ax.set_title(name)
        if name != "training loss":
            ax.set_ylim(0, 1.02)
        ax.legend(fontsize=7)
    fig.suptitle(title)
    fig.tight_layout()
    out_png.parent.mkdir(parents=True, exist_ok=True)
    tmp = out_png.with_name(f".{out_png.name}.tmp.png")
    fig.savefig(tmp, dpi=110)
    plt.close(fig)
    tmp.replace(out_png)
    return out_png
