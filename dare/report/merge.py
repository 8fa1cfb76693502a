"""What a report keeps from an earlier command of the same run directory.

Two cases (:mod:`dare.run.stages`'s report stage):

* the same finished run, run again (:func:`keep_run_facts`): nothing is trained or evaluated again, so the
  report keeps the run's own training metrics, ``run`` block and provenance;
* ``dare eval`` of a finished run (:func:`merge_later_evaluation`): the report keeps the run's ``before``/``after``
  rows, training metrics, ``run`` block (this command's evaluation wall time added) and provenance (this
  command's time, machine and versions recorded apart, under ``evaluated_later``), and adds the ``eval`` row.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from dare.run.rundir import RunDir

__all__ = ["read_report", "earlier_run_report", "keep_run_facts", "merge_later_evaluation", "LATER_KEYS"]

#: what ``provenance["evaluated_later"]`` records of the later command
LATER_KEYS = ("created", "machine", "sampler", "seed", "git_sha", "versions")


def read_report(run_dir: str | Path) -> dict[str, Any] | None:
    """``report.json`` of ``run_dir`` as a dict; None when absent, unreadable or not a JSON object."""
    try:
        old = json.loads(RunDir(run_dir).report_json.read_text())
    except (OSError, json.JSONDecodeError):
        return None
    return old if isinstance(old, dict) else None


def earlier_run_report(run_dir: str | Path) -> dict[str, Any] | None:
    """``report.json`` of an earlier command of the run in ``run_dir`` (a dict with a ``run`` block), else None."""
    old = read_report(run_dir)
    return old if old is not None and isinstance(old.get("run"), dict) else None


def keep_run_facts(earlier: dict[str, Any], extra: dict[str, Any], prov: dict[str, Any]
                   ) -> tuple[dict[str, Any], dict[str, Any]]:
    """``(extra, provenance)`` of a report of a finished run run again: ``earlier``'s (its ``report.json``)
    ``train_metrics``, ``run`` and ``provenance`` where it has them, else this command's."""
    extra = {**extra, "train_metrics": earlier.get("train_metrics", extra.get("train_metrics")),
             "run": earlier.get("run", extra.get("run"))}
    return extra, earlier.get("provenance", prov)


def merge_later_evaluation(earlier: dict[str, Any] | None, earlier_stages: dict[str, list], stages: dict[str, list],
                           extra: dict[str, Any], prov: dict[str, Any], stage_seconds: dict[str, float]
                           ) -> tuple[dict[str, list], dict[str, Any], dict[str, Any]]:
    """``(stages, extra, provenance)`` of the report of ``dare eval`` of a finished run.

    :param earlier: the run's ``report.json`` (:func:`read_report`), or None.
    :param earlier_stages: the run's own rows (``before``/``after`` results of its spec hash); they come first.
    :param stages: this command's rows (``eval``). :param extra: / :param prov: this command's report data and
        provenance. :param stage_seconds: this command's evaluation wall times, added to the run's.
    """
    stages = earlier_stages | stages
    if earlier is None:
        return stages, extra, prov
    extra = {**extra, "train_metrics": earlier.get("train_metrics", {})}
    run = earlier.get("run")
    if isinstance(run, dict):  # the training facts are the run's, not this command's
        extra["run"] = {**run, "stage_seconds": {**run.get("stage_seconds", {}), **stage_seconds}}
    old_prov = earlier.get("provenance")
    if isinstance(old_prov, dict):  # keep the run's machine; record this command's apart
        prov = {**old_prov, "evaluated_later": {k: prov.get(k) for k in LATER_KEYS}}
    return stages, extra, prov
