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

  Nothing is unpickled with code execution: ``.bin`` files go through ``torch.load(weights_only=True)``;
  a sharded checkpoint's ``.metadata`` (a pickle, which torch's own ``FileSystemReader.read_metadata``
  reads with ``pickle.load``) is read by an unpickler that builds only the metadata classes of
  ``torch.distributed.checkpoint`` (:data:`DCP_METADATA_GLOBALS`) and refuses anything else, its file
  references must stay inside the folder, and only tensors are then read, through torch's
  ``FileSystemReader.read_data`` (``torch.load(weights_only=True)`` per tensor; non-tensor entries, which
  torch's planner would ``torch.load(weights_only=False)``, are never requested).

  Wrapper prefixes are stripped (``module.`` from DDP, ``_orig_mod.`` from ``torch.compile``,
  ``_fsdp_wrapped_module.``, ``base_model.model.`` and ``.base_layer`` from peft); a state dict that
  still holds ``lora_`` tensors is refused (export the adapter directory instead). ``config.json``
  and tokenizer files come from ``src``, else from ``--base``.

The output is written by the family's model class (``save_pretrained``: official tensor names,
sharding, ``config.json``) plus the tokenizer and a model card (``README.md``,
:func:`dare.report.modelcard.export_card`), verified against the config, into a temporary
directory renamed into place (:func:`dare.io.atomic_dir`). It loads with ``AutoModel.from_pretrained``.
"""

from __future__ import annotations

import io
import json
import pickle
import warnings
from pathlib import Path

import torch

from dare.errors import CheckpointError

__all__ = ["export_model", "read_state_dict", "clean_state_dict", "read_dcp_metadata", "WRAPPER_PREFIXES",
           "DCP_METADATA_GLOBALS"]

#: Prefixes that training wrappers add to parameter names.
WRAPPER_PREFIXES = ("module.", "_orig_mod.", "_fsdp_wrapped_module.", "base_model.model.")

_FSDP_SHARDED = "pytorch_model_fsdp_0"


#: The only globals a sharded checkpoint's ``.metadata`` pickle may name (what torch 2.x's
#: ``FileSystemWriter`` writes: the dataclasses of ``torch.distributed.checkpoint.metadata``, the storage
#: records of ``.filesystem``, ``torch.Size``, dtypes and layouts, and the ``checkpoint_id`` path).
DCP_METADATA_GLOBALS = (
    ("torch.distributed.checkpoint.metadata", ("Metadata", "TensorStorageMetadata", "BytesStorageMetadata",
                                               "ChunkStorageMetadata", "TensorProperties", "StorageMeta",
                                               "MetadataIndex", "_MEM_FORMAT_ENCODING")),
    ("torch.distributed.checkpoint.filesystem", ("_StorageInfo",)),
    ("torch", ("Size",)),
    ("torch.serialization", ("_get_layout",)),
    ("pathlib", ("PosixPath", "PurePosixPath", "Path")),
)

_CONVERT_HINT = ("if you trust the checkpoint, convert it where it was written (python -m "
                 "torch.distributed.checkpoint.format_utils dcp_to_torch <dir> model.pt, then save the state dict with "
                 "safetensors), or export the run's model/ or a checkpoint saved with FULL_STATE_DICT")


class _MetadataUnpickler(pickle.Unpickler):
    """Builds only :data:`DCP_METADATA_GLOBALS` (plus torch dtypes); any other global or persistent id is refused."""

    def find_class(self, module: str, name: str):
        import importlib

        if module == "torch" and isinstance(getattr(torch, name, None), torch.dtype):
            return getattr(torch, name)
        for mod, names in DCP_METADATA_GLOBALS:
            if module == mod and name in names:
                return getattr(importlib.import_module(mod), name)
        raise pickle.UnpicklingError(f"it names {module}.{name}, which is not checkpoint metadata")

    def persistent_load(self, pid):
        raise pickle.UnpicklingError("it holds a persistent id, which checkpoint metadata never does")


def read_dcp_metadata(folder: str | Path):
    """The ``torch.distributed.checkpoint`` ``Metadata`` of ``folder/.metadata``, read without running code.

    Also checks what the reader will trust: every storage record names a plain file inside ``folder``
    (no ``/`` or ``..``) with no load transforms, and tensor entries carry a ``torch.Size``.

    :raises CheckpointError: the file names any other class or callable (a crafted pickle), is damaged,
        or points outside the folder; the message says how to convert a trusted checkpoint.
    """
    from torch.distributed.checkpoint.filesystem import _StorageInfo
    from torch.distributed.checkpoint.metadata import Metadata, MetadataIndex, TensorStorageMetadata

    folder = Path(folder)
    path = folder / ".metadata"
    try:
        metadata = _MetadataUnpickler(io.BytesIO(path.read_bytes())).load()
        if not isinstance(metadata, Metadata) or not isinstance(metadata.state_dict_metadata, dict) \
                or not isinstance(metadata.storage_data, dict):
            raise pickle.UnpicklingError("it does not hold a Metadata record")
        for key, rec in metadata.storage_data.items():
            name = getattr(rec, "relative_path", None)
            if not (isinstance(key, MetadataIndex) and isinstance(rec, _StorageInfo) and isinstance(name, str)):
                raise pickle.UnpicklingError("its storage records are malformed")
            if name in ("", ".", "..") or "/" in name or "\\" in name or not (folder / name).is_file():
                raise pickle.UnpicklingError(f"it points at {name!r}, which is not a file inside the folder")
            if rec.transform_descriptors:
                raise pickle.UnpicklingError(f"it asks for load transforms {rec.transform_descriptors!r}")
        for key, md in metadata.state_dict_metadata.items():
            if isinstance(md, TensorStorageMetadata) and not isinstance(md.size, torch.Size):
                raise pickle.UnpicklingError(f"tensor {key!r} has no valid size")
    except CheckpointError:
        raise
    except Exception as exc:  # noqa: BLE001 - any failure of a file we do not trust is the same refusal
        raise CheckpointError(f"{path} is not torch.distributed.checkpoint metadata that DARE can read safely "
                              f"({exc}); DARE never unpickles anything else from a checkpoint, since a pickle can run "
                              f"code: {_CONVERT_HINT}") from None
    return metadata


def _load_file(path: Path) -> dict[str, torch.Tensor]:
    """Tensors of one ``.safetensors`` or ``.bin`` file (``torch.load(weights_only=True)``: no code runs).

    :raises CheckpointError: a damaged file, or a ``.bin`` pickle naming anything but tensors.
    """
    if path.suffix == ".safetensors":
        from safetensors.torch import load_file

        from dare.modeling.checkpoint import safetensors_header

        safetensors_header(path)  # a clear error for empty, truncated or non-safetensors files
        return load_file(str(path), device="cpu")
    if not path.is_file():
        raise CheckpointError(f"weight file {path} is missing; the checkpoint was copied incompletely")
    try:
        state = torch.load(str(path), map_location="cpu", weights_only=True)
    except Exception as exc:  # noqa: BLE001 - UnpicklingError, zip/EOF errors of damaged files
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise CheckpointError(f"{path} cannot be read as a weights-only PyTorch file ({first}); DARE loads .bin "
                              "files with torch.load(weights_only=True) and never unpickles other objects, since a "
                              "pickle can run code: if you trust the file, re-save its state dict with "
                              "safetensors") from None
    if not isinstance(state, dict) or not all(isinstance(v, torch.Tensor) for v in state.values()):
        raise CheckpointError(f"{path} does not hold a state dict (name -> tensor)")
    return state


def _load_sharded(src: Path) -> dict[str, torch.Tensor]:
    """The tensors of ``src/pytorch_model_fsdp_0`` through torch's ``FileSystemReader`` (module docstring)."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.metadata import TensorStorageMetadata

    folder = src / _FSDP_SHARDED
    metadata = read_dcp_metadata(folder)

    class _Reader(dcp.FileSystemReader):
        def read_metadata(self, *args, **kwargs):
            return metadata

    state = {k: torch.empty(md.size, dtype=md.properties.dtype)
             for k, md in metadata.state_dict_metadata.items() if isinstance(md, TensorStorageMetadata)}
    if not state:
        raise CheckpointError(f"{folder} holds no tensors")
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # "torch.distributed is disabled ... single process"
            dcp.load(state, storage_reader=_Reader(str(folder)),
                     planner=dcp.DefaultLoadPlanner(flatten_state_dict=False, flatten_sharded_tensors=False),
                     no_dist=True)
    except Exception as exc:  # noqa: BLE001 - damaged or missing .distcp files
        raise CheckpointError(f"{folder}: the tensors could not be read ({type(exc).__name__}: "
                              f"{str(exc).strip().splitlines()[0] if str(exc).strip() else ''}); the checkpoint is "
                              "damaged or copied incompletely") from None
    if all(k.startswith("model.") for k in state):  # accelerate saves {"model": state_dict}
        state = {k[len("model."):]: v for k, v in state.items()}
    return state


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
        f"{src} holds no weights DARE can export: expected model.safetensors(.index.json), "
        f"pytorch_model.bin(.index.json), pytorch_model_fsdp.bin, {_FSDP_SHARDED}/ or a LoRA adapter "
        f"(adapter_config.json)"
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
        raise CheckpointError(f"{src} has no config.json; pass --base with the model directory the checkpoint was "
                              f"trained from")
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
    from dare.plugins.manager import get_registry, register_auto_classes

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
    from dare.report.modelcard import CARD_NAME, export_card
    from dare.modeling.lora import adapter_base

    card = export_card(src, base or (adapter_base(src) if kind == "adapter" else None), family.name, kind)
    with atomic_dir(out, overwrite=True) as tmp:
        model.save_pretrained(str(tmp))
        tokenizer.save_pretrained(str(tmp))
        verify_checkpoint(tmp, family.model_class_for(model.config), model.config)
        (tmp / CARD_NAME).write_text(card)
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
        raise CheckpointError(f"{src}: its base model {base!r} does not exist; pass --base with the base model "
                              f"directory")
    lm = load_model(base, dtype="float32", registry=registry)
    merged = PeftModel.from_pretrained(lm.model, str(src)).merge_and_unload()
    return _cast(merged, dtype), _tokenizer(src, base)
