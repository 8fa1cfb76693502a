"""Load and create checkpoints in the official format.

A model directory is always what the family's release ships: ``config.json`` (official keys and
``model_type``), safetensors with the official tensor names, tokenizer files. Importing a family
plugin registers its classes with transformers' Auto classes, so ``AutoModel.from_pretrained(dir)``
works without ``trust_remote_code``.
"""

from __future__ import annotations

import inspect
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from safetensors import safe_open

from dare.components import ModelFamily, SpecialTokens
from dare.errors import CheckpointError, DareError
from dare.io import atomic_dir, resolve_path
from dare.modeling.tokenizer import build_byte_tokenizer
from dare.plugins import get_registry

__all__ = ["LoadedModel", "load_model", "create_model", "resolve_family", "checkpoint_shapes", "verify_checkpoint",
           "trained_model_dir", "DTYPES", "ADAPTER_CONFIG", "adapter_base", "load_adapter_checkpoint"]

ADAPTER_CONFIG = "adapter_config.json"

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


@dataclass
class LoadedModel:
    """A model with everything needed to use it: tokenizer, family adapter and special ids."""

    model: Any
    tokenizer: Any
    family: ModelFamily
    tokens: SpecialTokens
    path: Path | None = None


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
            "install the family's plugin, e.g. pip install dare-plugin-llada"
        )
    return entry.create()


def family_of(path: str | Path, registry=None) -> ModelFamily:
    """The family of a local checkpoint directory from its ``config.json`` (no weights read).

    :raises CheckpointError: no ``config.json`` or an unknown ``model_type``.
    """
    p = resolve_path(str(path))
    if not p.exists():  # a hub id: ask the hub (or its cache) for config.json
        from transformers import AutoConfig

        get_registry()  # imports the family plugins (Auto-class registration)
        try:
            return resolve_family(AutoConfig.from_pretrained(str(path)).model_type, registry)
        except CheckpointError:
            raise
        except Exception as exc:  # noqa: BLE001
            raise CheckpointError(f"could not load the config of {str(path)!r} (not a local directory; hub: {exc})") from None
    cfg = p / "config.json"
    if not cfg.is_file():
        raise CheckpointError(f"{path} has no config.json; a model directory needs config.json, weights and tokenizer files")
    try:
        model_type = json.loads(cfg.read_text()).get("model_type")
    except json.JSONDecodeError as exc:
        raise CheckpointError(f"{cfg} is not valid JSON: {exc}") from None
    return resolve_family(model_type, registry)


def checkpoint_shapes(model_dir: str | Path) -> dict[str, tuple[int, ...]]:
    """Tensor name -> shape from the safetensors headers of a checkpoint directory (no weights read).

    :raises CheckpointError: no safetensors files.
    """
    model_dir = Path(model_dir)
    index = model_dir / "model.safetensors.index.json"
    if index.is_file():
        files = sorted(set(json.loads(index.read_text())["weight_map"].values()))
    else:
        files = sorted(p.name for p in model_dir.glob("*.safetensors"))
    if not files:
        raise CheckpointError(f"{model_dir} has no *.safetensors weights")
    shapes: dict[str, tuple[int, ...]] = {}
    for name in files:
        with safe_open(str(model_dir / name), framework="pt") as f:
            for key in f.keys():
                shapes[key] = tuple(f.get_slice(key).get_shape())
    return shapes


def expected_shapes(model_class, config) -> dict[str, tuple[int, ...]]:
    """Tensor name -> shape the model class builds for ``config`` (built on the meta device)."""
    with torch.device("meta"):
        model = model_class(config)
    names = {k: tuple(v.shape) for k, v in model.state_dict().items()}
    tied = getattr(model, "all_tied_weights_keys", None) or {}
    for k in tied:
        names.pop(k, None)
    return names


def verify_checkpoint(model_dir: str | Path, model_class, config) -> None:
    """Check a checkpoint's tensor names and shapes against what its config implies.

    :raises CheckpointError: naming the first missing, unexpected or mis-shaped tensor.
    """
    have = checkpoint_shapes(model_dir)
    want = expected_shapes(model_class, config)
    for name in sorted(want):
        if name not in have:
            raise CheckpointError(
                f"{model_dir}: tensor {name!r} (shape {list(want[name])}) is missing from the checkpoint; "
                "the weights do not match config.json"
            )
        if have[name] != want[name]:
            raise CheckpointError(
                f"{model_dir}: tensor {name!r} has shape {list(have[name])} but config.json implies {list(want[name])}"
            )
    for name in sorted(have):
        if name not in want:
            raise CheckpointError(
                f"{model_dir}: unexpected tensor {name!r} (shape {list(have[name])}); it does not belong to a "
                f"{config.model_type} model with this config"
            )


def trained_model_dir(path: Path) -> Path:
    """``path/model`` when ``path`` is a DARE run directory (``run.json``) holding a trained model, else ``path``."""
    return path / "model" if (path / "run.json").is_file() and (path / "model" / "config.json").is_file() else path


def load_model(path: str | Path, dtype: str = "float32", registry=None, verify: bool = True) -> LoadedModel:
    """Load a checkpoint directory (or hub id) with its tokenizer and family adapter.

    A LoRA adapter directory (``adapter_config.json``) loads its base model with the adapter merged;
    a run directory loads the run's trained ``model/``.

    :param dtype: ``float32``, ``bfloat16`` or ``float16``.
    :raises CheckpointError: no ``config.json``, unknown ``model_type``, tensors not matching the
        config, or a tokenizer without a mask token.
    """
    from transformers import AutoConfig, AutoModel, AutoTokenizer

    registry = registry or get_registry()  # imports the family plugins (Auto-class registration)
    p = trained_model_dir(resolve_path(str(path)))
    if (p / "adapter_config.json").is_file():  # a LoRA adapter directory: its base + the adapter, merged
        return load_adapter_checkpoint(p, dtype=dtype, registry=registry, verify=verify)
    if p.exists():
        if not (p / "config.json").is_file():
            raise CheckpointError(f"{path} has no config.json; a model directory needs config.json, weights and tokenizer files")
        src = str(p)
    else:
        src = str(path)
    try:
        config = AutoConfig.from_pretrained(src)
    except Exception as exc:  # noqa: BLE001
        if p.exists():
            raw = json.loads((p / "config.json").read_text())
            resolve_family(raw.get("model_type"), registry)  # raises the clear error
        raise CheckpointError(f"could not load the config of {path!r}: {exc}") from None
    family = resolve_family(getattr(config, "model_type", None), registry)
    if verify and p.exists():
        family.validate_checkpoint(str(p))
        verify_checkpoint(p, family.model_class_for(config), config)
    try:
        tokenizer = AutoTokenizer.from_pretrained(src)
    except Exception as exc:  # noqa: BLE001
        raise CheckpointError(f"could not load the tokenizer of {path!r}: {exc}") from None
    tokens = family.special_tokens(config, tokenizer)
    if dtype not in DTYPES:
        raise CheckpointError(f"dtype {dtype!r} is not one of {', '.join(DTYPES)}")
    model = AutoModel.from_pretrained(src, dtype=DTYPES[dtype])
    return LoadedModel(model=model, tokenizer=tokenizer, family=family, tokens=tokens, path=p if p.exists() else None)


def create_model(
    family: ModelFamily,
    out_dir: str | Path,
    preset: str = "tiny",
    overrides: dict[str, Any] | None = None,
    tokenizer: str = "byte",
    seed: int = 0,
    overwrite: bool = False,
) -> LoadedModel:
    """Create a randomly initialised model in the official format and save it to ``out_dir``.

    The directory is written atomically (temp dir, then rename).

    :param tokenizer: ``"byte"`` for DARE's byte-level tokenizer with the family's special tokens and
        chat template, or a tokenizer directory.
    :raises CheckpointError: unknown preset, or a tokenizer without the family's mask token.
    :raises FileExistsError: ``out_dir`` is non-empty and ``overwrite`` is False.
    """
    from transformers import AutoModel

    presets = family.presets()
    if preset not in presets:
        raise CheckpointError(f"unknown preset {preset!r} for family {family.name}; available: {', '.join(presets)}")
    tok = _new_tokenizer(family, tokenizer)
    tokens = family.tokens_from_tokenizer(tok)
    config = family.new_config(preset, dict(overrides or {}), len(tok), tokens)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = AutoModel.from_config(config)
    with atomic_dir(out_dir, overwrite=overwrite) as tmp:
        model.save_pretrained(tmp)
        tok.save_pretrained(tmp)
    return LoadedModel(model=model, tokenizer=tok, family=family, tokens=tokens, path=Path(out_dir))


def _new_tokenizer(family: ModelFamily, tokenizer: str = "byte"):
    """DARE's byte tokenizer with ``family``'s special tokens (``"byte"``), or a tokenizer directory's."""
    if tokenizer == "byte":
        return build_byte_tokenizer(
            family.special_token_strings,
            extra_special=tuple(getattr(family, "extra_special_tokens", ())),
            chat_template=family.chat_template or None,
        )
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(tokenizer)


def new_config_problems(family: ModelFamily, preset: str, overrides: dict[str, Any],
                        tokenizer: str = "byte") -> list[tuple[str | None, str]]:
    """Check ``config.json`` overrides of a fresh model without creating weights.

    Builds the config and the model on the meta device, as :func:`create_model` would, and returns
    ``(override key or None, message)`` pairs: keys the family's config does not have, negative values
    of non-negative integer settings, and errors raised by the config or model class (attributed to the
    override key the message names). An unknown preset or an unreadable tokenizer gives no problems
    here (the caller reports those).
    """
    presets = family.presets()
    if preset not in presets:
        return []
    try:
        tok = _new_tokenizer(family, tokenizer)
        tokens = family.tokens_from_tokenizer(tok)
        base = family.new_config(preset, {}, len(tok), tokens)
    except Exception:  # noqa: BLE001 - tokenizer/preset problems are reported by the caller
        return []
    base_values = base.to_dict()
    problems: list[tuple[str | None, str]] = []
    config, built_error = None, None
    try:
        config = family.new_config(preset, dict(overrides), len(tok), tokens)
        with torch.device("meta"):
            family.model_class_for(config)(config)
    except (DareError, ValueError, TypeError, ZeroDivisionError, AssertionError, KeyError, IndexError) as exc:
        built_error = str(exc).strip("'\"") or type(exc).__name__
    known = set(base_values) | set(presets[preset])
    classes = {type(base), type(config)} - {type(None)}
    for other in presets:  # keys of the family's other config classes (e.g. a MoE variant)
        try:
            classes.add(type(family.new_config(other, {}, len(tok), tokens)))
        except Exception:  # noqa: BLE001
            pass
    for cls in classes:
        known |= {n for n, prm in inspect.signature(cls.__init__).parameters.items()
                  if prm.kind not in (prm.VAR_KEYWORD, prm.VAR_POSITIONAL) and n != "self"}
    for key, value in overrides.items():
        if key not in known:
            near = sorted(k for k in known if not k.startswith("_") and (key in k or k in key))[:5]
            hint = f" (did you mean {', '.join(near)}?)" if near else ""
            problems.append((key, f"{family.name} models have no config key {key!r}{hint}; see the preset's "
                                  "config.json for the keys"))
            continue
        default = base_values.get(key, presets[preset].get(key))
        if (isinstance(value, int) and not isinstance(value, bool) and value < 0 and isinstance(default, int)
                and not isinstance(default, bool) and default >= 0):
            problems.append((key, f"must not be negative, got {value} ({preset} preset: {default})"))
    if built_error is not None and not problems:
        named = [(m.start(), k) for k in overrides if (m := re.search(rf"\b{re.escape(k)}\b", built_error))]
        problems.append((min(named)[1] if named else None, built_error))
    return problems


# =========================================================================== adapter directories
def adapter_base(path: str | Path) -> str | None:
    """The base model of an adapter directory (``base_model_name_or_path``), or None if ``path`` is not one.

    :raises CheckpointError: ``adapter_config.json`` is unreadable or names no base model.
    """
    cfg_file = Path(path) / ADAPTER_CONFIG
    if not cfg_file.is_file():
        return None
    try:
        base = json.loads(cfg_file.read_text()).get("base_model_name_or_path")
    except (json.JSONDecodeError, AttributeError) as exc:
        raise CheckpointError(f"{cfg_file} is not a valid peft adapter config: {exc}") from None
    if not base:
        raise CheckpointError(f"{cfg_file} names no base model (base_model_name_or_path); set it to the base checkpoint "
                              "directory the adapter was trained on")
    return str(base)


def load_adapter_checkpoint(path: str | Path, dtype: str = "float32", registry=None, verify: bool = True) -> LoadedModel:
    """Load an adapter directory as base + adapter, merged into a plain model of the family.

    The tokenizer comes from the adapter directory when it has one (DARE saves it there), else from
    the base. This is what ``model.path: <adapter dir>`` and ``dare generate --model <adapter dir>`` load.

    :raises CheckpointError: no or unreadable ``adapter_config.json``, or a base model that cannot be loaded.
    """
    from peft import PeftModel
    from transformers import AutoTokenizer

    path = Path(path)
    base = adapter_base(path)
    if base is None:
        raise CheckpointError(f"{path} has no {ADAPTER_CONFIG}")
    if Path(base).is_absolute() and not Path(base).is_dir():
        raise CheckpointError(f"{path}: its base model {base!r} (adapter_config.json base_model_name_or_path) does not "
                              "exist; fix that path or export the adapter with `dare export --base`")
    lm = load_model(base, dtype=dtype, registry=registry, verify=verify)
    lm.model = PeftModel.from_pretrained(lm.model, str(path)).merge_and_unload()
    if (path / "tokenizer_config.json").is_file():
        lm.tokenizer = AutoTokenizer.from_pretrained(str(path))
        lm.tokens = lm.family.special_tokens(lm.model.config, lm.tokenizer)
    lm.path = path
    return lm
