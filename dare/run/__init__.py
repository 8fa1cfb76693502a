"""A run and its directory: this package owns what ``dare run``/``train``/``eval`` do and every file they write.

:class:`RunDir` (:mod:`dare.run.rundir`) is the run directory: the path of every entry a run writes (``run.json``,
``init-model/``, ``checkpoints/``, ``model/``, ``eval/``, ``samples/``, ``metrics.jsonl``, ``tensorboard/``,
``report.{json,md}``, ``plot.png``, ``run.log``, the lock next to it) and its rules (use, replace or refuse a
directory, the run record, discarding a refused run's files); no other module names those files. :class:`Run`
(:mod:`dare.run.run`) is a validated spec made concrete (model, sampler, rewards, objective, its :class:`RunDir`);
:mod:`dare.run.stages` holds the stages of a command (evaluate before, train, evaluate after, report) as functions
of (run, run directory, state); :mod:`dare.run.info` says in words what a run's numbers come from and what an
interrupted command saved; :mod:`dare.run.lock` holds one command per run directory, :mod:`dare.run.log` keeps the
console in ``run.log``, :mod:`dare.run.signals` turns SIGTERM into Ctrl-C, and :mod:`dare.run.differences` names
the spec keys two runs differ in. Names are imported on first access, so reading a run directory's layout
imports no torch.
"""

from __future__ import annotations

from dare.lazy import lazy_exports

__all__ = ["Run", "RunDir", "STAGES"]

__getattr__, __dir__ = lazy_exports(__name__, {"Run": "dare.run.run", "RunDir": "dare.run.rundir",
                                               "STAGES": "dare.run.stages"})
