"""What a sweep runs: every combination of the grid values times the seeds, each a normal run directory.

A run is the spec with ``--set`` overrides: the sweep's own ``--set`` values, one value per grid key (a grid over
a component's ``name`` also removes the spec's params that the replacing component lacks or refuses:
:func:`replaced_params`), the seed
(``train.seed`` and ``eval.seed``: the seed of every random stream of the run, see :data:`SEED_KEYS`) and
``output.dir`` = ``DIR/<name>``, where the name lists the run's settings (``algorithm.name=d1,seed=0``, characters
outside ``[A-Za-z0-9._=,+-]`` replaced by ``_``). Every run is validated as ``dare validate`` does, and its
directory is checked by the run-directory rules (:func:`dare.run.rundir.plan_output_dir`), before any run starts.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from dare.errors import DareError, SpecError
from dare.run.rundir import RunDir, plan_output_dir
from dare.trainers.checkpoints import resume_problem

__all__ = ["SEED_KEYS", "DEFAULT_MAX_RUNS", "SweepRun", "parse_grid", "parse_seeds", "count_seeds", "check_run_count",
           "plan_runs", "run_name", "is_finished", "replaced_params"]

#: the spec keys ``--seeds`` sets. ``train.seed`` keys the trainer's streams (data order, SFT masks, RL rollouts
#: and likelihood passes: dare.randomness, transformers' seed, LoRA initialisation); ``eval.seed`` keys the
#: evaluation's sampling. ``model.new.seed`` (the fresh model's initialisation) is the starting point and stays
#: the spec's: grid it (``--grid model.new.seed=0,1``) to vary the start too.
SEED_KEYS = ("train.seed", "eval.seed")
_NAME_CHARS = re.compile(r"[^A-Za-z0-9._=,+-]")
_MAX_NAME = 120


@dataclass
class SweepRun:
    """One run of a sweep: its name, grid settings, seed, ``--set`` overrides (all of them) and directory."""

    name: str
    settings: dict[str, Any]
    seed: int
    overrides: list[str]
    dir: Path
    spec_hash: str = ""
    #: whether ``dare run`` writes a report (the spec has ``eval:``); else a finished run is one with ``model/``
    evaluates: bool = True
    #: the spec's ``launch:`` section (``num_processes``, ``num_machines``, ``accelerate_config``, ...), None
    #: without one
    launch: dict[str, Any] | None = None
    #: the ``--unset`` keys: the spec's params the component a grid value names lacks or refuses
    unset: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "settings": self.settings, "seed": self.seed, "dir": str(self.dir),
                "spec_hash": self.spec_hash, "overrides": self.overrides, "unset": self.unset}


def parse_grid(items: list[str]) -> list[tuple[str, list[Any]]]:
    """``["algorithm.name=d1,tracerl", "train.learning_rate=1e-4,3e-4"]`` -> ``[(key, values), ...]``.

    The values are a YAML flow sequence without its brackets (``1e-4,3e-4``; ``"a,b",c``; ``[1,2],[3,4]``),
    each parsed like a ``--set`` value.

    :raises DareError: no ``=``, no value, a key given twice, a seed key (use ``--seeds``), unparsable values.
    """
    grid: list[tuple[str, list[Any]]] = []
    for item in items:
        if "=" not in item:
            raise DareError(f"--grid {item!r} must look like KEY=V1,V2,..., e.g. --grid algorithm.name=d1,tracerl")
        key, text = (s.strip() for s in item.split("=", 1))
        if not key or not text:
            raise DareError(f"--grid {item!r}: give a spec key and at least one value, e.g. --grid "
                            f"train.learning_rate=1e-4,3e-4")
        if key in SEED_KEYS:
            raise DareError(f"--grid {key}: the seeds are set by --seeds (it sets {' and '.join(SEED_KEYS)}); "
                            "remove this --grid and give e.g. --seeds 0,1,2")
        if key in (k for k, _ in grid):
            raise DareError(f"--grid {key} is given twice; list every value in one --grid {key}=V1,V2,...")
        if key == "output.dir" or key.startswith("output."):
            raise DareError(f"--grid {key}: the sweep chooses each run's output.dir (under -o DIR); grid another key")
        try:
            values = yaml.safe_load(f"[{text}]")
        except yaml.YAMLError as exc:
            raise DareError(f"--grid {key}: the values {text!r} are not a comma-separated list of YAML values "
                            f"({str(exc).splitlines()[0]}); quote values that contain commas, e.g. \"a,b\",c") from None
        if len({json.dumps(v, sort_keys=True) for v in values}) != len(values):
            raise DareError(f"--grid {key}: a value is listed twice in {text!r}")
        grid.append((key, values))
    return grid


def parse_seeds(text: str) -> list[int]:
    """``"0,1,2"`` -> ``[0, 1, 2]``; ``"0-4"`` -> ``[0, 1, 2, 3, 4]``.

    :raises DareError: not integers, a negative seed, or a seed given twice.
    """
    seeds: list[int] = []
    for part in (p.strip() for p in text.split(",")):
        m = re.fullmatch(r"(\d+)(?:-(\d+))?", part)
        if m is None:
            raise DareError(f"--seeds {text!r}: give non-negative integers separated by commas (0,1,2) or a range "
                            f"(0-4)")
        lo, hi = int(m.group(1)), int(m.group(2) or m.group(1))
        seeds += list(range(lo, hi + 1))
    if len(set(seeds)) != len(seeds) or not seeds:
        raise DareError(f"--seeds {text!r}: every seed once, at least one")
    return seeds


#: the most runs a sweep plans unless ``--max-runs`` (``run_sweep(max_runs=...)``) raises it: every run is a whole
#: training run, and planning validates each one before any starts
DEFAULT_MAX_RUNS = 1000


def count_seeds(text: str) -> int | None:
    """How many seeds ``--seeds text`` lists (ranges counted, not expanded); None when malformed."""
    total = 0
    for part in (p.strip() for p in text.split(",")):
        m = re.fullmatch(r"(\d+)(?:-(\d+))?", part)
        if m is None:
            return None
        total += max(int(m.group(2) or m.group(1)) - int(m.group(1)) + 1, 0)
    return total


def check_run_count(grid: list[tuple[str, list[Any]]], n_seeds: int, max_runs: int = DEFAULT_MAX_RUNS) -> int:
    """The number of runs (grid combinations x seeds), refused above ``max_runs`` before anything is validated.

    :raises DareError: more runs than ``max_runs``, naming the count, each grid key's size and the flag.
    """
    n = n_seeds
    for _, values in grid:
        n *= len(values)
    if n > max_runs:
        sizes = " x ".join([f"{len(v)} ({k})" for k, v in grid] + [f"{n_seeds} (seeds)"])
        raise DareError(f"the sweep would plan {n:,} runs ({sizes}), more than the limit of {max_runs:,}; every run "
                        "is a whole training run, validated before any starts. Narrow the --grid values or --seeds, "
                        f"or raise the limit with --max-runs {n}")
    return n


def _value_text(v: Any) -> str:
    return v if isinstance(v, str) else json.dumps(v, separators=(",", ":"))


def run_name(settings: dict[str, Any], seed: int) -> str:
    """``"algorithm.name=d1,seed=0"``: the settings then the seed, sanitised for a directory name; a name longer
    than 120 characters is cut and ends with 8 hex digits of its full text's SHA-256 (so names stay unique)."""
    full = ",".join([*(f"{k}={_value_text(v)}" for k, v in settings.items()), f"seed={seed}"])
    name = _NAME_CHARS.sub("_", full)
    if len(name) > _MAX_NAME:
        name = name[: _MAX_NAME - 9] + "-" + hashlib.sha256(full.encode()).hexdigest()[:8]
    return name


def _grid_problem(exc: SpecError, grid_sets: dict[str, str]) -> str | None:
    """The problems of ``exc`` caused by a grid value, reworded to name ``--grid KEY`` (None when none is)."""
    def norm(key: str) -> str:
        return re.sub(r"\[(\w*)\]", r".\1", key.strip())

    found = []
    for loc, msg in exc.problems:
        loc_key = norm(loc.removeprefix("--set "))
        for key, value in grid_sets.items():
            k = norm(key)
            if loc_key and (loc_key == k or loc_key.startswith(k + ".") or k.startswith(loc_key + ".")):
                msg = re.sub(r" \(set by --set [^)]*\)$", "", msg)
                found.append(f"--grid {key} (value {value}): {msg}")
                break
    return "; ".join(found) or None


def _lookup(raw: Any, dotted: str) -> Any:
    """The value at ``dotted`` (``algorithm``, ``rewards.0``) in the spec mapping ``raw`` (None when absent)."""
    node = raw
    for part in dotted.split("."):
        if isinstance(node, dict):
            node = node.get(part)
        elif isinstance(node, list) and part.isdigit() and int(part) < len(node):
            node = node[int(part)]
        else:
            return None
    return node


#: the component kind of each spec section with a ``name`` and ``params``
_KINDS = {"algorithm": "objective", "sampler": "sampler", "rewards": "reward"}


def replaced_params(raw: dict, settings: dict[str, Any]) -> list[str]:
    """The ``--unset`` keys of one grid setting: for a grid key ``X.name`` (``algorithm.name``, ``sampler.name``,
    ``rewards.0.name``) whose value replaces the spec's component, the keys of the spec's ``X.params`` that the
    replacing component does not have (its ``Params`` model): TraceRL's ``shrink`` is no d1 param, while
    ``group_size`` or ``rollout_sampler``, which both have, are kept. A value equal to the spec's own name, or a
    name no installed plugin registers (validation reports it), unsets nothing."""
    from dare.errors import PluginError
    from dare.plugins.manager import get_registry

    out = []
    for key, value in settings.items():
        parent = key[: -len(".name")] if key.endswith(".name") else None
        section = _lookup(raw, parent) if parent else None
        kind = _KINDS.get(parent.split(".")[0]) if parent else None
        if (kind is None or not isinstance(section, dict) or not isinstance(section.get("params"), dict)
                or section.get("name") == value):
            continue
        try:
            fields = get_registry().get(kind, str(value)).cls.Params.model_fields
        except PluginError:
            continue
        out += [f"{parent}.params.{k}" for k in section["params"] if k not in fields]
    return out


def _load_replacing(spec_path: str, overrides: list[str], unset: list[str], raw: dict,
                    settings: dict[str, Any]) -> tuple[Any, list[str]]:
    """The run's spec with ``unset`` removed, and with the spec's params that a component named by the grid
    refuses (SPG refuses ``clip_eps_low``: it has no ratio) removed too, so their defaults apply; returns the spec
    and every removed key. :raises SpecError: the problems that remain."""
    from dare.runspec import load_spec

    replaced = {key[: -len(".name")]: _lookup(raw, key[: -len(".name")]) for key, value in settings.items()
                if key.endswith(".name") and isinstance(_lookup(raw, key[: -len(".name")]), dict)
                and _lookup(raw, key[: -len(".name")]).get("name") != value}
    unset = list(unset)
    while True:
        try:
            return load_spec(spec_path, overrides=overrides, unset=unset), unset
        except SpecError as exc:
            more = []
            for loc, _ in exc.problems:
                for parent, section in replaced.items():
                    m = re.match(re.escape(parent) + r"\.params\.(\w+)", re.sub(r"\[(\w*)\]", r".\1", loc))
                    key = f"{parent}.params.{m.group(1)}" if m else None
                    if m and m.group(1) in (section.get("params") or {}) and key not in unset and key not in more:
                        more.append(key)
            if not more:
                raise
            unset += more


def plan_runs(spec_path: str, grid: list[tuple[str, list[Any]]], seeds: list[int], out_dir: Path,
              overrides: list[str] | None = None) -> list[SweepRun]:
    """Every run of the sweep, each validated (structure, component params, files, model config: ``dare validate``)
    and its directory checked, before anything runs.

    :raises DareError: a grid value the spec refuses (naming ``--grid KEY``), an unknown grid key, the spec's
        own problems, two runs with one directory name, or a run directory that holds a different run.
    """
    from dare.runspec import load_spec, spec_hash

    overrides = list(overrides or [])
    base = load_spec(spec_path, overrides=overrides, check=False)  # the spec's own structural problems first
    from dare.runspec.overrides import read_spec_file

    raw = read_spec_file(spec_path, overrides)
    seed_keys = [k for k in SEED_KEYS if getattr(base, k.split(".")[0]) is not None]
    if not seed_keys:
        raise DareError(f"{spec_path} has neither a train: nor an eval: section, so a seed changes nothing; add one")
    runs: list[SweepRun] = []
    problems: list[str] = []
    for combo in itertools.product(*(values for _, values in grid)):
        settings = {key: v for (key, _), v in zip(grid, combo)}
        grid_sets = {key: _value_text(v) for key, v in settings.items()}
        for seed in seeds:
            name = run_name(settings, seed)
            run_dir = out_dir / name
            ovs = [*overrides, *(f"{k}={json.dumps(v)}" for k, v in settings.items()),
                   *(f"{k}={seed}" for k in seed_keys), f"output.dir={json.dumps(str(run_dir))}"]
            unset = replaced_params(raw, settings)
            try:
                spec, unset = _load_replacing(spec_path, ovs, unset, raw, settings)
            except SpecError as exc:
                why = _grid_problem(exc, grid_sets)
                if why is None and not grid_sets:
                    raise
                # why is None: elsewhere in the spec, but only with these grid values (e.g. another objective's params)
                if why is None:
                    detail = "; ".join(f"{loc}: {msg}" if loc else msg for loc, msg in exc.problems)
                    why = f"with --grid {', '.join(f'{k}={v}' for k, v in grid_sets.items())}: {detail}"
                if why not in problems:
                    problems.append(why)
                continue
            run = SweepRun(name, settings, seed, ovs, run_dir, spec_hash(spec), spec.eval is not None,
                           launch=spec.launch.model_dump() if spec.launch is not None else None, unset=unset)
            if any(r.name == name for r in runs):
                raise DareError(f"two runs of the sweep get the directory name {name!r}; give grid values that differ "
                                f"in letters or digits")
            resume = spec.train.resume if spec.train is not None else True
            action, found = plan_output_dir(run_dir, run.spec_hash, spec.output.overwrite, resume=resume,
                                            train=spec.algorithm is not None, spec=spec.model_dump(mode="json"),
                                            damaged=resume_problem)
            problems += [f"run {name}: {loc}: {msg}" for loc, msg in found]
            runs.append(run)
    if problems:
        more = [f"and {len(problems) - 6} more"] if len(problems) > 6 else []
        if len(problems) == 1:
            raise DareError("the sweep was not started: " + problems[0])
        raise DareError("the sweep was not started:" + "".join(f"\n  {p}" for p in [*problems[:6], *more]))
    return runs


def is_finished(run: SweepRun) -> bool:
    """The run's directory holds this run (same spec hash in ``run.json``) and what ``dare run`` writes last: its
    report (``report.json``), or for a spec without ``eval:`` its trained ``model/``."""
    rundir = RunDir(run.dir)
    if rundir.stored_hash() != run.spec_hash:
        return False
    return rundir.report_json.is_file() if run.evaluates else rundir.has_model()
