"""Reports: JSON + Markdown with provenance (spec, sampler params, seed, versions, git SHA), and plots."""

from __future__ import annotations

import datetime as _dt
import json
import platform
import subprocess
from importlib import metadata
from pathlib import Path
from typing import Any

from dare.io import atomic_write_json, atomic_write_text

__all__ = ["provenance", "write_report", "markdown_table", "plot_training"]

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


def provenance(spec=None, sampler=None, seed: int | None = None) -> dict[str, Any]:
    """What produced a number: resolved spec, sampler params, seed, package versions, git SHA, time."""
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
        "sampler": {"name": sampler.name, "params": sampler.params.model_dump(mode="json")} if sampler is not None else None,
        "seed": seed,
        "versions": versions,
        "git_sha": _git_sha(),
        "python": platform.python_version(),
        "created": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
    }


def _likelihood(r) -> bool:
    return (getattr(r, "extra", None) or {}).get("style") == "loglikelihood"


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
                f"| {stage} | {r.name} | {r.accuracy:.4f} | {r.mean_reward:.4f} | {r.n} | {r.nfe} | {r.tokens_per_second:.1f} |"
            )
    if len(lines) == 2:
        lines = []
    if mc:
        lines += (["", "Likelihood benchmarks (choices scored by Monte-Carlo ELBO):", ""] if lines else []) + [
            "| stage | benchmark | acc | acc_norm | mean reward | samples | estimator | mc_samples | scheme | forward passes/row |",
            "|---|---|---:|---:|---:|---:|---|---:|---|---:|",
        ]
        for stage, r in mc:
            x = r.extra
            lines.append(f"| {stage} | {r.name} | {r.accuracy:.4f} | {x.get('acc_norm', float('nan')):.4f} | "
                         f"{r.mean_reward:.4f} | {r.n} | {x.get('estimator')} | {x.get('mc_samples')} | "
                         f"{x.get('mc_scheme')} | {r.nfe} |")
    return "\n".join(lines) + "\n"


def write_report(out_dir: str | Path, stages: dict[str, list], prov: dict[str, Any], extra: dict[str, Any] | None = None, name: str = "report") -> tuple[Path, Path]:
    """Write ``<name>.json`` (metrics, samples, provenance) and ``<name>.md`` atomically.

    :param stages: stage label (e.g. ``before``, ``after``) -> list of ``BenchmarkResult``.
    """
    out_dir = Path(out_dir)
    data = {
        "results": {s: [r.to_dict(with_samples=False) for r in rs] for s, rs in stages.items()},
        "provenance": prov,
        **(extra or {}),
    }
    js = out_dir / f"{name}.json"
    atomic_write_json(js, data)
    for s, rs in stages.items():
        for r in rs:
            atomic_write_json(out_dir / "samples" / f"{s}-{r.name}.json", r.samples)
    md = out_dir / f"{name}.md"
    p = prov
    body = [
        "# DARE report\n",
        markdown_table(stages),
        "",
        f"- sampler: `{json.dumps(p.get('sampler'))}`",
        f"- seed: {p.get('seed')}",
        f"- git SHA: {p.get('git_sha')}",
        f"- versions: {', '.join(f'{k} {v}' for k, v in p.get('versions', {}).items() if v)}",
        f"- created: {p.get('created')}",
    ]
    if extra:
        for k, v in extra.items():
            if isinstance(v, (str, int, float)):
                body.append(f"- {k}: {v}")
        tm = extra.get("train_metrics") or {}
        if isinstance(tm, dict) and "best_step" in tm:
            body.append(f"- final weights (train.keep_best): step {tm['best_step']}, validation accuracy "
                        f"{tm.get('best_validation_accuracy', float('nan')):.4f}; the `after` row evaluates them")
    atomic_write_text(md, "\n".join(body) + "\n")
    return js, md


def plot_training(metrics_file: str | Path, out_png: str | Path, before: dict[str, float] | None = None, after: dict[str, float] | None = None, title: str = "") -> Path | None:
    """PNG of training loss and eval score against step (from ``metrics.jsonl``).

    Eval points are the ``eval/<benchmark>/accuracy`` and ``.../mean_reward`` records; ``before`` and
    ``after`` add the full evaluations at step 0 and the last step. Returns None without metrics.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    metrics_file = Path(metrics_file)
    if not metrics_file.is_file():
        return None
    recs = [json.loads(line) for line in metrics_file.read_text().splitlines() if line.strip()]
    loss = [(r["step"], r["loss"]) for r in recs if "loss" in r]
    evals: dict[str, list[tuple[int, float]]] = {}
    for r in recs:
        for k, v in r.items():
            if k.startswith("eval/") and isinstance(v, (int, float)) and (k.endswith("accuracy") or k.endswith("mean_reward")):
                evals.setdefault(k[len("eval/") :], []).append((r["step"], v))
    last_step = max([s for s, _ in loss] + [0])
    for label, d in (("before", before), ("after", after)):
        if d:
            for k, v in d.items():
                evals.setdefault(k, []).append((0 if label == "before" else last_step, v))
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4))
    if loss:
        ax1.plot(*zip(*loss), label="train loss")
    ax1.set_xlabel("step")
    ax1.set_ylabel("loss")
    ax1.set_title("training loss")
    for k, pts in sorted(evals.items()):
        pts = sorted(pts)
        ax2.plot([s for s, _ in pts], [v for _, v in pts], marker="o", label=k)
    ax2.set_xlabel("step")
    ax2.set_ylabel("score")
    ax2.set_ylim(0, 1.02)
    ax2.set_title("evaluation")
    if evals:
        ax2.legend(fontsize=8)
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    out_png = Path(out_png)
    out_png.parent.mkdir(parents=True, exist_ok=True)
    tmp = out_png.with_name(f".{out_png.name}.tmp.png")
    fig.savefig(tmp, dpi=110)
    plt.close(fig)
    tmp.replace(out_png)
    return out_png
