"""``plot.png`` of a run: its training curve (RL: mean reward and its spread; supervised: loss) and the
measured evaluation points, each series named by the set it scores; and the readers of ``metrics.jsonl``
that ``dare compare`` shares.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from dare.report.plotstyle import reward_marker, step_axis

__all__ = ["read_metrics", "training_curve", "eval_series", "draw_training_curve", "plot_training"]


def read_metrics(metrics_file: str | Path) -> list[dict[str, Any]]:
    """The records of a ``metrics.jsonl`` (unreadable lines skipped; [] without the file)."""
    path = Path(metrics_file)
    if not path.is_file():
        return []
    out = []
    for line in path.read_text().splitlines():
        try:
            rec = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(rec, dict) and "step" in rec:
            out.append(rec)
    return out


def training_curve(recs: list[dict[str, Any]]) -> tuple[str, list[tuple[int, float, float | None]]]:
    """What a run's training curve shows: ``("reward", [(step, mean, std)])`` for RL runs (their loss is mostly
    rounding noise around 0: advantages are centred per group), else ``("loss", [(step, loss, None)])``."""
    reward = [(r["step"], float(r["reward"]),
               float(r["reward_std"]) if isinstance(r.get("reward_std"), (int, float)) else None)
              for r in recs if isinstance(r.get("reward"), (int, float))]
    if reward:
        return "reward", reward
    return "loss", [(r["step"], float(r["loss"]), None) for r in recs if isinstance(r.get("loss"), (int, float))]


def eval_series(recs: list[dict[str, Any]]) -> dict[str, dict[str, list[tuple[int, float]]]]:
    """In-training evaluations: ``{prefix: {"accuracy": [(step, v)], "mean_reward": [...]}}`` from the
    ``eval/<prefix>/accuracy`` and ``eval/<prefix>/mean_reward`` records (measured points only)."""
    out: dict[str, dict[str, list[tuple[int, float]]]] = {}
    for r in recs:
        for k, v in r.items():
            if not k.startswith("eval/") or not isinstance(v, (int, float)):
                continue
            prefix, _, metric = k[len("eval/"):].rpartition("/")
            if metric in ("accuracy", "mean_reward") and prefix:
                out.setdefault(prefix, {}).setdefault(metric, []).append((r["step"], float(v)))
    return out


def draw_training_curve(ax, kind: str, points, label: str | None = None, color=None,
                        max_step: int | None = None) -> None:
    """The training curve on ``ax``: reward with a ±1 std band (spread over the step's completions), or loss;
    the x axis spans 0..``max_step`` (the run's steps) when given, else 0..the last logged step."""
    steps = [s for s, _, _ in points]
    values = [v for _, v, _ in points]
    line = ax.plot(steps, values, color=color, marker="o" if len(points) <= 40 else None, markersize=3,
                   label=label or ("mean reward per step" if kind == "reward" else "training loss"))[0]
    lows = values
    if kind == "reward":
        spread = [(s, v, d) for s, v, d in points if d is not None]
        if spread:
            lows = lows + [v - d for _, v, d in spread]
            ax.fill_between([s for s, _, _ in spread], [v - d for _, v, d in spread], [v + d for _, v, d in spread],
                            color=line.get_color(), alpha=0.2,
                            label="± 1 std over the step's completions" if label is None else None)
    if kind == "reward":
        ax.set_ylabel("reward (mean over completions)")
        ax.set_title("training reward")
    else:
        ax.set_ylabel("loss")
        ax.set_title("training loss")
    ax.set_xlabel("optimizer step")
    ax.set_ylim(bottom=min([0.0, *lows]))  # 0 on the axis: a loss of 7.3 -> 7.0 is not a collapse
    last = max([*steps, max_step or 0], default=1)
    ax.set_xlim(-0.03 * max(last, 1), 1.05 * max(last, 1))  # the steps of the evaluation panel beside it
    step_axis(ax)


def _metric_of(result, key: str):
    return result.get(key) if isinstance(result, dict) else getattr(result, key, None)


def plot_training(metrics_file: str | Path, out_png: str | Path, before: dict[str, Any] | None = None,
                  after: dict[str, Any] | None = None, title: str = "", labels: dict[str, str] | None = None,
                  after_step: int | None = None, max_step: int | None = None) -> Path | None:
    """PNG of one run: its training curve and its evaluations against the optimizer step.

    * left: RL runs (records with ``reward``) plot the mean reward per step with a ±1 std band (the spread
      over that step's completions); other runs plot the training loss;
    * right: every measured evaluation, and nothing in between: the in-training evaluations
      (``eval/<prefix>/accuracy``, solid, and ``.../mean_reward``, dashed, with markers at the measured steps)
      and the full evaluations ``before`` (step 0) and ``after`` (the last step, or ``after_step``: the
      weights ``train.keep_best`` kept) as separate star markers, since they score other rows.

    :param before: / :param after: benchmark name -> result (``accuracy``, ``mean_reward``; a ``BenchmarkResult``
        or a dict).
    :param labels: legend labels naming each set: in-training prefix -> text, ``"before:<name>"``/``"after:<name>"``
        -> text (:func:`dare.run.info.eval_set_labels`).
    :returns: the PNG path, or None without metrics.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    recs = read_metrics(metrics_file)
    if not recs:
        return None
    labels = labels or {}
    kind, curve = training_curve(recs)
    evals = eval_series(recs)
    last_step = max([r["step"] for r in recs] + [max_step or 0])  # max_step: the run's steps (0..max_steps on x)
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(12, 5.6))
    if curve:
        draw_training_curve(ax1, kind, curve, max_step=last_step)
        ax1.legend(fontsize=7)
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    i = 0
    for prefix, series in sorted(evals.items()):
        color = colors[i % len(colors)]
        i += 1
        name = labels.get(prefix, prefix)
        for metric, style in (("accuracy", "-"), ("mean_reward", "--")):
            pts = sorted(series.get(metric, []))
            if pts:  # on top of the before/after markers; mean reward hollow, with its own marker
                ax2.plot([s for s, _ in pts], [v for _, v in pts], style, **reward_marker(metric, i - 1), color=color,
                         label=f"{name}: {metric.replace('_', ' ')}", zorder=5, clip_on=False)
    for stage, results in (("before", before), ("after", after)):
        for bname, res in (results or {}).items():
            color = colors[i % len(colors)]
            i += 1
            step = 0 if stage == "before" else (after_step if after_step is not None else last_step)
            name = labels.get(f"{stage}:{bname}", bname)
            when = "before training" if stage == "before" else (
                f"after training (weights of step {after_step}, train.keep_best)" if after_step is not None
                else "after training")
            for metric, marker in (("accuracy", "*"), ("mean_reward", "P")):
                v = _metric_of(res, metric)
                if isinstance(v, (int, float)):  # before: large and hollow, so an `after` at the same step shows inside
                    ax2.plot([step], [v], linestyle="none", marker=marker, markersize=15 if stage == "before" else 9,
                             color=color, mfc="none" if stage == "before" else color, mew=1.6, clip_on=False, zorder=3,
                             label=f"{name}, {when}: {metric.replace('_', ' ')} {v:.3f}")
    ax2.set_xlabel("optimizer step")
    ax2.set_ylabel("score (fraction of rows / mean reward)")
    ax2.set_ylim(0, 1.02)
    ax2.set_xlim(-0.03 * max(last_step, 1), 1.05 * max(last_step, 1))
    step_axis(ax2)
    ax2.set_title("evaluation (measured points only)")
    if ax2.lines:  # below the axes: the labels name the rows, which makes them long
        ax2.legend(fontsize=6.5, loc="upper center", bbox_to_anchor=(0.5, -0.13), ncol=1, frameon=False)
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    out_png = Path(out_png)
    out_png.parent.mkdir(parents=True, exist_ok=True)
    tmp = out_png.with_name(f".{out_png.name}.tmp.png")
    fig.savefig(tmp, dpi=110, bbox_inches="tight")
    plt.close(fig)
    tmp.replace(out_png)
    return out_png
