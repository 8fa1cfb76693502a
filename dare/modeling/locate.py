"""Model directories without torch: a checkpoint's family from its ``config.json``, DARE run and LoRA
adapter directories, and which paths count as local.

Spec validation (:mod:`dare.runspec`) uses these before any weights load, so they import neither torch nor
transformers at module level (a hub id's config is read through transformers when asked for);
:mod:`dare.modeling.checkpoint` re-exports them.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

from dare.errors import CheckpointError
from dare.io import looks_local, resolve_path
from dare.plugins.manager import get_registry, register_auto_classes
from dare.run.rundir import RunDir

if TYPE_CHECKING:  # pragma: no cover
    from dare.components import ModelFamily

__all__ = ["ADAPTER_CONFIG", "resolve_family", "family_of", "one_line", "trained_model_dir", "missing_local_path",
           "run_first_hint",
           "adapter_base"]

ADAPTER_CONFIG = "adapter_config.json"


def resolve_family(model_type: str | None, registry=None) -> ModelFamily:
    """The installed family that loads ``model_type``.

    :raises CheckpointError: no installed family loads it.
    """
    reg = registry or get_registry()
    entry = reg.family_for_model_type(model_type) if model_type else None
    if entry is None:
        known = sorted(t for e in reg.entries["model_family"].values() for t in e.cls.model_types)
        raise CheckpointError(
            f"model_type {model_type!r} is not loaded by any installed model family (known: {', '.join(known)}); "
            "install the plugin of the family that loads it (`dare plugins` lists the installed ones)"
        )
    return entry.create()


def family_of(path: str | Path, registry=None) -> ModelFamily:
    """The family of a local checkpoint directory from its ``config.json`` (no weights read).

    :raises CheckpointError: no ``config.json`` or an unknown ``model_type``.
    """
    p = resolve_path(str(path))
    if not p.exists() and (why := missing_local_path(path)) is not None:
        raise CheckpointError(why)
    if not p.exists():  # a hub id: ask the hub (or its cache) for config.json
        from transformers import AutoConfig

        register_auto_classes()
        try:
            return resolve_family(AutoConfig.from_pretrained(str(path)).model_type, registry)
        except CheckpointError:
            raise
        except Exception as exc:  # noqa: BLE001
            raise CheckpointError(f"could not load the config of {str(path)!r} (not a local directory; hub: "
                                  f"{_hub_failure(str(path), exc)})") from None
    cfg = p / "config.json"
    if not cfg.is_file():
        raise CheckpointError(f"{path} has no config.json; a model directory needs config.json, weights and tokenizer "
                              f"files")
    try:
        model_type = json.loads(cfg.read_text()).get("model_type")
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, AttributeError) as exc:
        raise CheckpointError(f"{cfg} is not valid JSON: {exc}") from None
    return resolve_family(model_type, registry)


def one_line(exc: BaseException | str) -> str:
    """An exception's text (libraries' messages span lines) as one line, for a one-paragraph error."""
    text = " ".join(str(exc).split())
    return text or (type(exc).__name__ if isinstance(exc, BaseException) else "")


def _hub_failure(repo_id: str, exc: BaseException) -> str:
    """Why a hub id did not load: with ``HF_HUB_OFFLINE`` set (transformers then fails at once, without
    retries) a plain statement that it is not in the local cache, else the library's message."""
    from huggingface_hub import constants

    if constants.HF_HUB_OFFLINE:
        return (f"{repo_id} is not in the local hub cache ({constants.HF_HUB_CACHE}) and HF_HUB_OFFLINE is set; "
                "download it first (hf download) or point at a local checkpoint directory")
    return one_line(exc)


def trained_model_dir(path: Path) -> Path:
    """``path/model`` when ``path`` is a DARE run directory (``run.json``) holding a trained model, else ``path``."""
    rundir = RunDir(path)
    return rundir.model if rundir.is_run() and rundir.has_model() else path


def missing_local_path(path: str | Path) -> str | None:
    """Why ``path`` cannot be a model: it looks local (:func:`dare.io.looks_local`) but does not exist; else None.

    Such a path is never sent to the hub: a typo in ``runs/my-run`` is a missing directory, not a repository.
    """
    if looks_local(str(path)) and not resolve_path(str(path)).exists():
        return (f"no such local directory {str(path)!r}: it looks like a local path, so it is not looked up on the "
                f"hub; check the spelling{run_first_hint(path)} (a hub id has the form org/name)")
    return None


def run_first_hint(path: str | Path) -> str:
    """``" or run the spec that produces it first (e.g. dare run examples/<run>.yaml)"`` when the missing ``path``
    looks like (the model or a checkpoint of) a run directory: it ends in ``/model`` or
    ``/checkpoints/checkpoint-N``, its parent holds ``run.json``, or its
    run folder is named like an ``examples/*.yaml`` spec; else ``""``."""
    p = Path(str(path).rstrip("/\\"))
    run_dir = p.parent if p.name == RunDir.MODEL else p
    if p.parent.name == RunDir.CHECKPOINTS and p.name.startswith(RunDir.CHECKPOINT_PREFIX):  # a run's checkpoint
        run_dir = p.parent.parent
    candidates = [run_dir.name, p.parent.name]
    for examples in (Path("examples"), Path(__file__).resolve().parents[2] / "examples"):
        for stem in candidates:
            if stem and (examples / f"{stem}.yaml").is_file():
                shown = Path("examples") / f"{stem}.yaml" if examples == Path("examples") else examples / f"{stem}.yaml"
                return f" or run the spec that produces it first (e.g. dare run {shown})"
    if p.name == RunDir.MODEL or RunDir(resolve_path(str(p.parent))).is_run():
        return f" or run the spec whose output.dir is {str(run_dir)!r} first"
    return ""


def adapter_base(path: str | Path) -> str | None:
    """The base model of an adapter directory (``base_model_name_or_path``), or None if ``path`` is not one.

    :raises CheckpointError: ``adapter_config.json`` is unreadable or names no base model.
    """
    cfg_file = Path(path) / ADAPTER_CONFIG
    if not cfg_file.is_file():
        return None
    try:
        base = json.loads(cfg_file.read_text()).get("base_model_name_or_path")
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, AttributeError) as exc:
        raise CheckpointError(f"{cfg_file} is not a valid peft adapter config: {exc}") from None
    if not base:
        raise CheckpointError(f"{cfg_file} names no base model (base_model_name_or_path); set it to the base "
                              f"checkpoint directory the adapter was trained on")
    return str(base)


