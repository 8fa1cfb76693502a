"""Experiment trackers of ``train.report_to``: TensorBoard (DARE's own callback, :mod:`dare.trainers.callbacks`) and
wandb, trackio and MLflow through transformers' Trainer integrations (``TrainingArguments.report_to``:
``transformers.integrations.WandbCallback``, ``TrackioCallback``, ``MLflowCallback``). ``metrics.jsonl`` is always
written; each tracker logs the same records (the Trainer's ``on_log``), under its own key names.

Where their files go: each integration reads its usual environment variables (``WANDB_MODE``, ``WANDB_PROJECT``,
``WANDB_DIR``, ``TRACKIO_DIR``, ``MLFLOW_TRACKING_URI``, ``MLFLOW_EXPERIMENT_NAME``, ...). wandb's and MLflow's left
unset point, while the run trains, into the run directory (:func:`tracker_environment`); trackio logs to its local
store.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
from collections.abc import Iterator, Sequence
from pathlib import Path

__all__ = ["TRACKERS", "missing_trackers", "integrations", "tracker_environment", "PROJECT"]

#: the names ``train.report_to`` takes
TRACKERS = ("tensorboard", "wandb", "trackio", "mlflow")
#: the project (wandb, trackio) or experiment (MLflow) of a run that names none
PROJECT = "dare"
#: tracker -> (module that must import, the pip extra that installs it)
_PACKAGES = {"wandb": ("wandb", "wandb"), "trackio": ("trackio", "trackio"), "mlflow": ("mlflow", "mlflow")}


def missing_trackers(report_to: Sequence[str]) -> list[tuple[int, str]]:
    """``(index in report_to, message)`` for every tracker whose package is not installed; the message names the
    install (``pip install 'dare-dllm[wandb]'``)."""
    out = []
    for i, name in enumerate(report_to):
        if name not in _PACKAGES:
            continue
        module, extra = _PACKAGES[name]
        if importlib.util.find_spec(module) is None:
            out.append((i, f"{name} is not installed: run pip install 'dare-dllm[{extra}]' (or pip install {module}), "
                           f"or remove {name} from train.report_to"))
    return out


def integrations(report_to: Sequence[str]) -> list[str]:
    """The names for ``TrainingArguments.report_to``: every tracker but TensorBoard, which DARE writes itself
    (``["none"]`` when there is no other)."""
    names = [n for n in report_to if n != "tensorboard"]
    return names or ["none"]


@contextlib.contextmanager
def tracker_environment(report_to: Sequence[str], run_dir: str | os.PathLike) -> Iterator[dict[str, str]]:
    """While the block runs, the unset environment variables of the named trackers point at the run directory:
    wandb ``WANDB_DIR=<run_dir>`` (it writes ``<run_dir>/wandb``) and ``WANDB_PROJECT=dare``; MLflow
    ``MLFLOW_TRACKING_URI=file://<run_dir>/mlruns`` (the file store, with ``MLFLOW_ALLOW_FILE_STORE=true``, which
    MLflow 3 needs for it) and ``MLFLOW_EXPERIMENT_NAME=dare``. trackio
    keeps its own local store (``TRACKIO_DIR``, default ``$HF_HOME/trackio``, which ``trackio show`` reads; project
    ``dare``, the run named after its directory). Variables already set are kept (a tracking server,
    ``WANDB_MODE=offline``); those set here are removed afterwards, and the wandb run is finished (transformers leaves
    it open until the process exits).

    :yields: the variables set here.
    """
    run_dir = Path(run_dir).resolve()
    wanted: dict[str, str] = {}
    if "wandb" in report_to:
        wanted |= {"WANDB_DIR": str(run_dir), "WANDB_PROJECT": PROJECT}
    if "mlflow" in report_to:
        wanted |= {"MLFLOW_TRACKING_URI": (run_dir / "mlruns").as_uri(), "MLFLOW_EXPERIMENT_NAME": PROJECT}
        if "MLFLOW_TRACKING_URI" not in os.environ:  # MLflow 3 refuses its file store unless allowed
            wanted["MLFLOW_ALLOW_FILE_STORE"] = "true"
    added = {k: v for k, v in wanted.items() if k not in os.environ}
    os.environ.update(added)
    failed = True
    try:
        yield added
        failed = False
    finally:
        for k in added:
            os.environ.pop(k, None)
        _finish_wandb(failed)


def _finish_wandb(failed: bool) -> None:
    """End the wandb run transformers' ``WandbCallback`` started (it leaves it open until the process exits), so its
    records are complete when training returns (exit code 1 when training raised)."""
    import sys

    wandb = sys.modules.get("wandb")
    if wandb is not None and getattr(wandb, "run", None) is not None:
        wandb.finish(exit_code=1 if failed else 0)
