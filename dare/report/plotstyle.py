"""Shared plot styling of ``plot.png`` (:func:`dare.report.plots.plot_training`) and ``comparison.png``
(:mod:`dare.report.compare`): integer step axes and the markers that keep every evaluation series distinct."""

from __future__ import annotations

from typing import Any

__all__ = ["SERIES_MARKERS", "step_axis", "reward_marker"]


def step_axis(ax) -> None:
    """Integer ticks on an optimizer-step x axis (never 0.96, 0.98, ...)."""
    from matplotlib.ticker import MaxNLocator

    ax.xaxis.set_major_locator(MaxNLocator(integer=True))


#: markers of the evaluation series of one axis (with the colours: every series looks different)
SERIES_MARKERS = "osD^vP<>Xh"


def reward_marker(metric: str, n: int) -> dict[str, Any]:
    """Marker style of series ``n``: accuracy filled, mean reward hollow with another marker (never the same)."""
    m = SERIES_MARKERS[(n if metric == "accuracy" else n + 5) % len(SERIES_MARKERS)]
    return {"marker": m, "markersize": 4 if metric == "accuracy" else 5,
            "mfc": None if metric == "accuracy" else "none"}
