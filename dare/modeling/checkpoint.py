"""Load and create checkpoints in the official format.

A model directory is always what the family's release ships: ``config.json`` (official keys and
``model_type``), safetensors with the official tensor names, tokenizer files. Family plugins
register their classes with transformers' Auto classes (:func:`dare.plugins.manager.register_auto_classes`,
called here before transformers reads or creates a checkpoint), so ``AutoModel.from_pretrained(dir)``
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

from dare.components import ModelFamily, SpecialTokens
from dare.errors import CheckpointError, DareError
from dare.io import atomic_dir, resolve_path
from dare.modeling.integrity import (
    ADAPTER_WEIGHTS,
    MIN_TOKENIZER_COVERAGE,
    check_finite,
    check_tokenizer_fits,
    embedding_rows,
    first_nonfinite_tensor,
    safetensors_header,
    tokenizer_fit_problem,
    weight_files,
)
from dare.modeling.locate import (  # re-exported: the torch-free helpers of model directories
    ADAPTER_CONFIG,
    _hub_failure,
    adapter_base,
    family_of,
    missing_local_path,
    one_line,
    resolve_family,
    trained_model_dir,
)
from dare.modeling.tokenizer import build_byte_tokenizer
from dare.plugins.manager import get_registry, register_auto_classes

__all__ = [
    "LoadedModel", "load_model", "create_model", "resolve_family", "family_of", "checkpoint_shapes",
           "verify_checkpoint", "verify_weight_index",
    "trained_model_dir", "one_line", "missing_local_path", "DTYPES", "ADAPTER_CONFIG", "ADAPTER_WEIGHTS",
    "adapter_base", "adapter_weights", "load_adapter_checkpoint",
    # re-exported from dare.modeling.integrity
    "weight_files", "safetensors_header", "first_nonfinite_tensor", "check_finite", "embedding_rows",
    "tokenizer_fit_problem", "check_tokenizer_fits", "MIN_TOKENIZER_COVERAGE",
]

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


@dataclass
class LoadedModel:
    """A model with everything needed to use it: tokenizer, family adapter and special ids."""

    model: Any
    tokenizer: Any
    family: ModelFamily
    tokens: SpecialTokens
    path: Path | None = None


def checkpoint_shapes(model_dir: str | Path) -> dict[str, tuple[int, ...]]:
    """Tensor name -> shape from the safetensors headers of a checkpoint directory (no weights read).

    :raises CheckpointError: no safetensors files, a missing shard, or a file that is not valid
        safetensors (:func:`safetensors_header`).
    """
    shapes: dict[str, tuple[int, ...]] = {}
    for path in weight_files(model_dir):
        shapes.update(safetensors_header(path))
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


def verify_weight_index(model_dir: str | Path, model_class, config) -> None:
    """Check the tensor names of a model card's ``model.safetensors.index.json`` (no shard needed) against
    what its config implies; a card without an index passes once the model class builds from the config
    on the meta device.

    :raises CheckpointError: naming the first missing or unexpected tensor.
    """
    want = expected_shapes(model_class, config)
    index = Path(model_dir) / "model.safetensors.index.json"
    if not index.is_file():
        return
    try:
        have = set(json.loads(index.read_text())["weight_map"])
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise CheckpointError(f"{index}: not a safetensors weight index ({exc})") from None
    for name in sorted(set(want) - have):
        raise CheckpointError(f"{index}: tensor {name!r} (shape {list(want[name])}) is not in the weight index; "
                              "the weights do not match config.json")
    for name in sorted(have - set(want)):
        raise CheckpointError(f"{index}: unexpected tensor {name!r}; it does not belong to a {config.model_type} "
                              "model with this config")


def load_model(path: str | Path, dtype: str = "float32", registry=None, verify: bool = True) -> LoadedModel:
    """Load a checkpoint directory (or hub id) with its tokenizer and family adapter.

    A LoRA adapter directory (``adapter_config.json``) loads its base model with the adapter merged;
    a run directory loads the run's trained ``model/``. Before any weights are loaded, a local
    directory's safetensors headers are checked against its config (:func:`verify_checkpoint`), the
    tokenizer against the config (:func:`check_tokenizer_fits`), and every tensor is streamed once for
    NaN/inf (:func:`check_finite`); a hub model's weights are checked for NaN/inf after loading.

    :param dtype: ``float32``, ``bfloat16`` or ``float16``.
    :raises CheckpointError: a local-looking path that does not exist, no ``config.json``, unknown
        ``model_type``, damaged safetensors files, tensors not matching the config, a tokenizer that does
        not fit the model or has no mask token, or NaN/inf weights.
    """
    from transformers import AutoConfig, AutoModel, AutoTokenizer

    registry = registry or get_registry()
    register_auto_classes()
    p = trained_model_dir(resolve_path(str(path)))
    if (p / "adapter_config.json").is_file():  # a LoRA adapter directory: its base + the adapter, merged
        return load_adapter_checkpoint(p, dtype=dtype, registry=registry, verify=verify)
    if p.exists():
        if not (p / "config.json").is_file():
            raise CheckpointError(f"{path} has no config.json; a model directory needs config.json, weights and "
                                  f"tokenizer files")
        src = str(p)
    elif (why := missing_local_path(path)) is not None:
        raise CheckpointError(why)
    else:
        src = str(path)
    try:
        config = AutoConfig.from_pretrained(src)
    except Exception as exc:  # noqa: BLE001
        if p.exists():
            try:
                raw = json.loads((p / "config.json").read_text())
            except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
                raise CheckpointError(f"{p / 'config.json'} is not valid JSON: {err}") from None
            resolve_family(raw.get("model_type") if isinstance(raw, dict) else None, registry)  # the clear error
        raise CheckpointError(f"could not load the config of {str(path)!r}: "
                              f"{one_line(exc) if p.exists() else _hub_failure(str(path), exc)}") from None
    family = resolve_family(getattr(config, "model_type", None), registry)
    if verify and p.exists():
        family.validate_checkpoint(str(p))
        verify_checkpoint(p, family.model_class_for(config), config)
    try:
        tokenizer = AutoTokenizer.from_pretrained(src)
    except Exception as exc:  # noqa: BLE001
        raise CheckpointError(f"could not load the tokenizer of {str(path)!r}: {one_line(exc)}") from None
    tokens = check_tokenizer_fits(config, tokenizer, family, where=src)
    if dtype not in DTYPES:
        raise CheckpointError(f"dtype {dtype!r} is not one of {', '.join(DTYPES)}")
    if verify and p.exists():
        check_finite(weight_files(p))
    model = AutoModel.from_pretrained(src, dtype=DTYPES[dtype])
    if verify and not p.exists():  # a hub model: its files are in the hub cache; check what was loaded
        _check_loaded_finite(model, str(path))
    return LoadedModel(model=model, tokenizer=tokenizer, family=family, tokens=tokens, path=p if p.exists() else None)


def _check_loaded_finite(model, source: str) -> None:
    """:raises CheckpointError: a floating-point tensor of ``model`` holds NaN/inf (named with ``source``)."""
    for name, t in model.state_dict().items():
        if t.is_floating_point() and not bool(torch.isfinite(t).all()):
            raise CheckpointError(f"{source}: tensor {name!r} holds NaN or infinite values, so this model produces NaN "
                                  "logits and can be neither trained nor evaluated")


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

    register_auto_classes()
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
            require_mask=getattr(family, "forward_process", "mask") == "mask",
        )
    from transformers import AutoTokenizer

    register_auto_classes()
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
def load_adapter_checkpoint(path: str | Path, dtype: str = "float32", registry=None,
                            verify: bool = True) -> LoadedModel:
    """Load an adapter directory as base + adapter, merged into a plain, trainable model of the family.

    The tokenizer comes from the adapter directory when it has one (DARE saves it there), else from
    the base. This is what ``model.path: <adapter dir>`` and ``dare generate --model <adapter dir>`` load.
    peft freezes the base weights while the adapter is attached; after merging, every parameter is
    made trainable again (``requires_grad``), as a model loaded from a plain checkpoint directory is, so a
    full fine-tune (SFT, DPO, RL) can start from an adapter directory.

    :raises CheckpointError: no or unreadable ``adapter_config.json``, a base model that cannot be loaded,
        missing, damaged or non-finite adapter weights, or a tokenizer that does not fit the model.
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
    weights = adapter_weights(path)
    lm = load_model(base, dtype=dtype, registry=registry, verify=verify)
    if verify and weights is not None:
        check_finite([weights], what="adapter")
    lm.model = PeftModel.from_pretrained(lm.model, str(path)).merge_and_unload()
    lm.model.requires_grad_(True)  # peft froze the base weights; the merged model is a plain model
    if (path / "tokenizer_config.json").is_file():
        try:
            lm.tokenizer = AutoTokenizer.from_pretrained(str(path))
        except Exception as exc:  # noqa: BLE001
            raise CheckpointError(f"could not load the tokenizer of {str(path)!r}: {one_line(exc)}") from None
        lm.tokens = check_tokenizer_fits(lm.model.config, lm.tokenizer, lm.family, where=path)
    lm.path = path
    return lm


def adapter_weights(path: str | Path) -> Path | None:
    """The adapter's ``adapter_model.safetensors`` with its header checked (no tensor data read), or None when
    the adapter has only a pickled ``adapter_model.bin`` (peft reads it with ``torch.load(weights_only=True)``).

    :raises CheckpointError: no adapter weights at all, or ``adapter_model.safetensors`` is not valid safetensors.
    """
    f = Path(path) / ADAPTER_WEIGHTS
    if f.is_file():
        safetensors_header(f)
        return f
    if (Path(path) / "adapter_model.bin").is_file():
        return None
    raise CheckpointError(f"{path} has no {ADAPTER_WEIGHTS}; a LoRA adapter directory needs {ADAPTER_CONFIG} and "
                          f"{ADAPTER_WEIGHTS} (a run with model.lora saves them in model/adapter and checkpoint-N)")
