"""The families x online-RL objectives table, generated from the registry (``dare plugins --matrix``,
docs/algorithms.md §11).

Each (model family, online-RL objective) pair is validated as a run spec would be: a tiny model of the family
(``model.new``, ``preset: tiny``), the family's default sampler with a 4-token completion, the objective with its
default params (rollout temperature 1, for samplers that take one) and the Sudoku reward. The cell says:

* ``official``: the spec validates and the objective's release trained this family (``Params.official_families``:
  ``preset: official`` applies, and the objective's parity test compares it with the release);
* ``supported``: the spec validates, and the family is first-party, so the test suite runs the pair end to end
  (the online-RL plugin's smoke tests run every first-party family);
* ``sampler``: only the sampler settings are rejected (e.g. JustGRPO needs left-to-right decoding): the pair runs
  with the sampler settings the reason names;
* ``refused``: validation rejects the pair; the reason is the validation message (e.g. a masking-only objective on a
  block family);
* ``untested``: the spec validates but the family is a third-party plugin's (no tiny model in the test suite), or it
  has no tiny preset to validate with.

:func:`matrix_markdown` renders the table; tests/test_matrix.py regenerates it and compares it with the docs.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

__all__ = ["Cell", "objective_family_matrix", "matrix_markdown"]

Status = Literal["official", "supported", "sampler", "refused", "untested"]


@dataclass(frozen=True)
class Cell:
    """One (family, objective) pair: its ``status`` (module docstring) and ``reason`` ("" unless refused, sampler
    or untested)."""

    family: str
    objective: str
    status: Status
    reason: str = ""


def _spec(family: str, objective: str, sampler: str, sampler_params: dict, rollout: dict) -> dict:
    return {
        "model": {"new": {"family": family, "preset": "tiny"}},
        "data": {"train": {"path": "dare://sudoku/train.parquet", "limit": 4, "chat_template": False,
                           "prompt_template": "{{ extra_info.puzzle }}"}},
        "algorithm": {"name": objective, "params": {"rollout_sampler": rollout}},
        "sampler": {"name": sampler, "params": sampler_params},
        "rewards": [{"name": "sudoku", "params": {"require_answer_tags": False}}],
        "train": {"learning_rate": 1e-6, "max_steps": 1, "per_device_batch_size": 1},
        "output": {"dir": "/nonexistent/dare-matrix"},
    }


def _cell(reg, first_party: set[str], family: str, objective: str) -> Cell:
    from dare.errors import SpecError
    from dare.runspec import validate_spec

    fam = reg.get("model_family", family).cls()
    sampler = reg.get("sampler", fam.default_sampler)
    fields = sampler.cls.Params.model_fields
    wanted = {"gen_length": 4, "steps": 4, "denoising_steps": 2, "block_length": 4 if fam.attention == "full" else None}
    sparams = {k: v for k, v in wanted.items() if k in fields and v is not None}
    try:
        rollout = {"temperature": 1.0} if "temperature" in fields else {}  # a sampler without one samples already
        validate_spec(_spec(family, objective, sampler.name, sparams, rollout), source="<matrix>", check=True)
    except SpecError as exc:
        if any(loc.startswith("model") for loc, _ in exc.problems):
            return Cell(family, objective, "untested", "no tiny preset to validate with")
        if all(loc.startswith("sampler") for loc, _ in exc.problems):
            return Cell(family, objective, "sampler", "; ".join(msg for _, msg in exc.problems))
        return Cell(family, objective, "refused",
                    "; ".join(msg for loc, msg in exc.problems if not loc.startswith("sampler")))
    official = getattr(reg.get("objective", objective).cls.Params, "official_families", ())
    if family in official:
        return Cell(family, objective, "official")
    if family in first_party:
        return Cell(family, objective, "supported")
    return Cell(family, objective, "untested", "a third-party family: no tiny model in the test suite")


def objective_family_matrix(registry=None) -> tuple[list[str], list[str], dict[tuple[str, str], Cell]]:
    """``(families, objectives, {(family, objective): Cell})`` over every registered model family and online-RL
    objective (names sorted). Validates one spec per pair (no model is built; a few seconds in all).

    :param registry: a :class:`dare.plugins.registry.Registry` (default: the installed plugins').
    """
    from dare.plugins import manager as plugins

    reg = registry or plugins.get_registry()
    fams = reg.entries["model_family"]
    families = sorted(fams)
    ours = plugins.first_party()
    first_party = {n for n, e in fams.items() if e.distribution in ours}
    objectives = sorted(n for n, e in reg.entries["objective"].items()
                        if getattr(e.cls, "stage", None) == "online_rl")
    cells = {(f, o): _cell(reg, first_party, f, o) for f in families for o in objectives}
    return families, objectives, cells


_MARK = {"official": "official", "supported": "yes", "sampler": "sampler", "refused": "no", "untested": "untested"}


def matrix_markdown(registry=None, matrix=None) -> str:
    """The table as Markdown: one row per objective, one column per family, then the reasons, numbered.

    :param matrix: an :func:`objective_family_matrix` result to render (default: computed from ``registry``)."""
    families, objectives, cells = matrix or objective_family_matrix(registry)
    lines = ["| objective | " + " | ".join(families) + " |", "|---" * (len(families) + 1) + "|"]
    notes: list[str] = []
    for o in objectives:
        row = []
        for f in families:
            c = cells[(f, o)]
            mark = _MARK[c.status]
            if c.reason:
                if c.reason not in notes:
                    notes.append(c.reason)
                mark += f" ({notes.index(c.reason) + 1})"
            row.append(mark)
        lines.append(f"| `{o}` | " + " | ".join(row) + " |")
    lines.append("")
    lines += [f"{i}. {n}" for i, n in enumerate(notes, 1)]
    return "\n".join(lines) + "\n"
