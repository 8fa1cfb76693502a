"""``dare export``: turn an adapter or a trainer checkpoint into an official-format model directory.

Sources (detected from the files in ``src``; a run directory stands for its trained ``model/``):

* **LoRA adapter** (``adapter_config.json``: a LoRA run's ``model/adapter``, or any ``checkpoint-N``
  of a LoRA run): the base model named by ``base_model_name_or_path`` (or ``--base``) is loaded, the
  adapter merged (``W + (alpha / r) B A``, peft ``merge_and_unload``) and saved.
* **full weights** in one of the layouts ``transformers.Trainer`` writes on one machine:

  - ``model.safetensors`` or ``model-*.safetensors`` + ``model.safetensors.index.json`` (the default);
  - ``pytorch_model.bin`` or ``pytorch_model-*.bin`` + ``pytorch_model.bin.index.json`` (``save_safetensors=False``);
  - ``pytorch_model_fsdp.bin`` (accelerate FSDP, ``FULL_STATE_DICT``);
  - ``pytorch_model_fsdp_0/`` (accelerate FSDP, ``SHARDED_STATE_DICT``: a ``torch.distributed.checkpoint``
    directory holding ``{"model": state_dict}``), merged on CPU without a process group.

  Wrapper prefixes are stripped (``module.`` from DDP, ``_orig_mod.`` from ``torch.compile``,
  ``_fsdp_wrapped_module.``, ``base_model.model.`` and ``.base_layer`` from peft); a state dict that
  still holds ``lora_`` tensors is refused (export the adapter directory instead). ``config.json``
  and tokenizer files come from ``src``, else from ``--base``.

The output is written by the family's model class (``save_pretrained``: official tensor names,
sharding, ``config.json``) plus the tokenizer, verified against the config, into a temporary
directory renamed into place (:func:`dare.io.atomic_dir`). It loads with ``AutoModel.from_pretrained``.
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

import torch

from dare.errors import CheckpointError

__all__ = ["export_model", "read_state_dict", "clean_state_dict", "WRAPPER_PREFIXES"]

#: Prefixes that training wrappers add to parameter names.
WRAPPER_PREFIXES = ("module.", "_orig_mod.", "_fsdp_wrapped_module.", "base_model.model.")

_FSDP_SHARDED = "pytorch_model_fsdp_0"


def _load_file(path: Path) -> dict[str, torch.Tensor]:
    if path.suffix == ".safetensors":
        from safetensors.torch import load_file

        return load_file(str(path), device="cpu")
    return torch.load(str(path), map_location="cpu", weights_only=True)


def _load_sharded(src: Path) -> dict[str, torch.Tensor]:
    from torch.distributed.checkpoint.format_utils import dcp_to_torch_save

    with tempfile.TemporaryDirectory(prefix="dare-export-") as tmp:
        out = Path(tmp) / "merged.pt"
        dcp_to_torch_save(str(src / _FSDP_SHARDED), str(out))
        state = torch.load(str(out), map_location="cpu", weights_only=True)
    return state["model"] if set(state) == {"model"} else state


def read_state_dict(src: str | Path) -> dict[str, torch.Tensor]:
    """The raw tensors of a checkpoint directory (layouts in the module docstring), on CPU.

    :raises CheckpointError: no known weights layout in ``src``.
    """
    src = Path(src)
    for index_name in ("model.safetensors.index.json", "pytorch_model.bin.index.json"):
        index = src / index_name
        if index.is_file():
            state: dict[str, torch.Tensor] = {}
            for shard in sorted(set(json.loads(index.read_text())["weight_map"].values())):
                state.update(_load_file(src / shard))
            return state
    for name in ("model.safetensors", "pytorch_model.bin", "pytorch_model_fsdp.bin"):
        if (src / name).is_file():
            return _load_file(src / name)
    if (src / _FSDP_SHARDED / ".metadata").is_file():
        return _load_sharded(src)
    raise CheckpointError(
        f"{src} holds no weights DARE can export: expected model.safetensors(.index.json), pytorch_model.bin(.index.json), "
        f"pytorch_model_fsdp.bin, {_FSDP_SHARDED}/ or a LoRA adapter (adapter_config.json)"
    )


def clean_state_dict(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Strip wrapper prefixes and peft's ``.base_layer`` from every name.

    :raises CheckpointError: LoRA tensors (``lora_``) are present, or two names collide after cleaning.
    """
    lora = [k for k in state if ".lora_" in k]
    if lora:
        raise CheckpointError(f"the checkpoint holds LoRA tensors ({lora[0]!r}, ...) inside a full state dict; export "
                              "the adapter directory (with adapter_config.json) so the adapter is merged into its base")
    out: dict[str, torch.Tensor] = {}
    for key, value in state.items():
        clean = key
        stripped = True
        while stripped:
            stripped = False
            for prefix in WRAPPER_PREFIXES:
                if clean.startswith(prefix):
                    clean, stripped = clean[len(prefix):], True
        clean = clean.replace("._fsdp_wrapped_module.", ".").replace(".base_layer.", ".")
        if clean in out:
            raise CheckpointError(f"tensor names {clean!r} collide after removing wrapper prefixes")
        out[clean] = value
    return out


def _config_source(src: Path, base: str | None) -> str:
    if (src / "config.json").is_file():
        return str(src)
    if base is None:
        raise CheckpointError(f"{src} has no config.json; pass --base with the model directory the checkpoint was trained from")
    return base


def _tokenizer(src: Path, fallback: str):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(src) if (src / "tokenizer_config.json").is_file() else fallback)


def _model_from_state(config, state: dict[str, torch.Tensor]):
    """The family's model class holding exactly ``state`` (built on the meta device, tensors assigned)."""
    from transformers import AutoModel

    with torch.device("meta"):
        model = AutoModel.from_config(config)
    result = model.load_state_dict(state, strict=False, assign=True)
    if result.unexpected_keys:
        raise CheckpointError(f"unexpected tensor {result.unexpected_keys[0]!r}: it does not belong to a "
                              f"{config.model_type} model with this config.json")
    model.tie_weights()
    missing = sorted({n for n, t in list(model.named_parameters()) + list(model.named_buffers()) if t.is_meta})
    if missing:
        raise CheckpointError(f"tensor {missing[0]!r} is missing from the checkpoint ({len(missing)} missing in all)")
    return model


def _cast(model, dtype: str | None):
    if dtype is not None:
        from dare.modeling.checkpoint import DTYPES

        model.to(DTYPES[dtype])
    return model


def export_model(src: str | Path, out: str | Path, base: str | None = None, dtype: str | None = None,
                 overwrite: bool = False) -> str:
    """Write ``src`` (adapter or trainer checkpoint) to ``out`` as an official-format model directory.

    :param base: base model directory or hub id (adapters: overrides ``base_model_name_or_path``;
        checkpoints without ``config.json``: where config and tokenizer come from).
    :param dtype: ``float32``/``bfloat16``/``float16`` for the written weights (default: as stored;
        adapters merge in float32).
    :param overwrite: replace a non-empty ``out``.
    :returns: ``"adapter"`` or ``"checkpoint"``, the kind of source exported.
    :raises CheckpointError: ``out`` is non-empty without ``overwrite``, ``src`` is not a directory,
        or its weights/config cannot be read or do not match.
    """
    from dare.io import atomic_dir
    from dare.modeling.checkpoint import DTYPES, resolve_family, trained_model_dir, verify_checkpoint
    from dare.plugins import get_registry, register_auto_classes

    given, out = Path(src), Path(out)
    src = trained_model_dir(given)
    if not src.is_dir():
        raise CheckpointError(f"{src} is not a directory; export takes an adapter, model or checkpoint-N directory")
    o = out.resolve()
    for s in {given.resolve(), src.resolve()}:
        if o == s or s in o.parents or o in s.parents:
            how = "is" if o == s else ("is inside" if s in o.parents else "contains")
            raise CheckpointError(f"the output directory {out} {how} the source {given}; writing it would replace or "
                                  "mix with the source: choose an output directory outside the source, e.g. next to it")
    if out.exists() and (not out.is_dir() or any(out.iterdir())) and not overwrite:
        raise CheckpointError(f"{out} is not empty; choose another output directory or pass --overwrite")
    if dtype is not None and dtype not in DTYPES:
        raise CheckpointError(f"dtype {dtype!r} is not one of {', '.join(DTYPES)}")
    registry = get_registry()
    register_auto_classes()
    kind = "adapter" if (src / "adapter_config.json").is_file() else "checkpoint"
    model, tokenizer = (_merge_adapter if kind == "adapter" else _convert_checkpoint)(src, base, dtype, registry)
    family = resolve_family(model.config.model_type, registry)
    with atomic_dir(out, overwrite=True) as tmp:
        model.save_pretrained(str(tmp))
        tokenizer.save_pretrained(str(tmp))
        verify_checkpoint(tmp, family.model_class_for(model.config), model.config)
    return kind


def _convert_checkpoint(src: Path, base: str | None, dtype: str | None, registry):
    from transformers import AutoConfig

    from dare.modeling.checkpoint import resolve_family

    cfg_src = _config_source(src, base)
    config = AutoConfig.from_pretrained(cfg_src)
    resolve_family(getattr(config, "model_type", None), registry)  # a clear error for unknown model types
    model = _model_from_state(config, clean_state_dict(read_state_dict(src)))
    return _cast(model, dtype), _tokenizer(src, cfg_src)


def _merge_adapter(src: Path, base: str | None, dtype: str | None, registry):
    from peft import PeftModel

    from dare.modeling.checkpoint import load_model
    from dare.modeling.lora import adapter_base

    base = base or adapter_base(src)
    if Path(base).is_absolute() and not Path(base).is_dir():
        raise CheckpointError(f"{src}: its base model {base!r} does not exist; pass --base with the base model directory")
    lm = load_model(base, dtype="float32", registry=registry)
    merged = PeftModel.from_pretrained(lm.model, str(src)).merge_and_unload()
    return _cast(merged, dtype), _tokenizer(src, base)
