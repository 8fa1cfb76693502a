"""Integrity checks of model files, before any weights are loaded: nothing damaged, non-finite or mismatched.

* :func:`weight_files`, :func:`safetensors_header`: the safetensors files of a checkpoint and their headers
  (``safetensors`` validates that the declared tensors cover each file exactly: an empty, truncated or
  non-safetensors file is caught without reading tensor data);
* :func:`check_finite`: every floating-point tensor streamed once (a finite sum, else an exact ``isfinite``
  count);
* :func:`check_tokenizer_fits`: the tokenizer against the model's embedding rows and special ids
  (a model card copied without its vocabulary files loads as a tiny tokenizer of its added tokens).

Every problem is a :class:`~dare.errors.CheckpointError` naming the file or tensor and the fix.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

import torch
from safetensors import safe_open

from dare.errors import CheckpointError

if TYPE_CHECKING:  # pragma: no cover
    from dare.components import ModelFamily, SpecialTokens

__all__ = ["ADAPTER_WEIGHTS", "MIN_TOKENIZER_COVERAGE", "weight_files", "safetensors_header", "first_nonfinite_tensor",
           "check_finite", "embedding_rows", "tokenizer_fit_problem", "check_tokenizer_fits"]

ADAPTER_WEIGHTS = "adapter_model.safetensors"

#: A tokenizer with fewer tokens than this fraction of the model's embedding rows is refused. Releases pad
#: ``vocab_size`` past their tokenizer by a few hundred rows at most (model cards in shared/model-cards:
#: LLaDA-8B 126349 tokens / 126464 rows = 0.9991, Dream-7B 151667 / 152064 = 0.9974, SDAR-1.7B 151670 /
#: 151936 = 0.9982, LLaDA2.0-mini >= 156893 / 157184 = 0.998); a model card copied without its vocabulary
#: files loads as a tokenizer of its added tokens only (SDAR-30B: 27 / 151936 = 0.0002).
MIN_TOKENIZER_COVERAGE = 0.5


def weight_files(model_dir: str | Path) -> list[Path]:
    """The safetensors files of a checkpoint directory: the shards its ``model.safetensors.index.json`` names,
    else every ``*.safetensors`` (adapter weights excluded). No weights are read.

    :raises CheckpointError: an unreadable index, a shard it names is missing, or no safetensors files.
    """
    model_dir = Path(model_dir)
    index = model_dir / "model.safetensors.index.json"
    if index.is_file():
        try:
            names = sorted(set(json.loads(index.read_text())["weight_map"].values()))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError, KeyError, TypeError, AttributeError) as exc:
            raise CheckpointError(f"{index} is not a readable safetensors index (JSON with a weight_map): "
                                  f"{type(exc).__name__}: {exc}; copy the checkpoint again from its source") from None
        missing = [n for n in names if not (model_dir / n).is_file()]
        if missing:
            raise CheckpointError(f"{model_dir}: weight shard {missing[0]!r} named by model.safetensors.index.json is "
                                  f"missing ({len(missing)} of {len(names)} shards missing); the checkpoint was copied "
                                  "incompletely: copy the missing shards from its source")
        return [model_dir / n for n in names]
    files = sorted(p for p in model_dir.glob("*.safetensors") if p.name != ADAPTER_WEIGHTS)
    if not files:
        raise CheckpointError(f"{model_dir} has no *.safetensors weights; a model directory needs config.json, "
                              "model.safetensors (or shards with model.safetensors.index.json) and tokenizer files")
    return files


def safetensors_header(path: str | Path) -> dict[str, tuple[int, ...]]:
    """Tensor name -> shape of one safetensors file, from its header (no tensor data is read).

    ``safetensors`` checks the header and that the declared tensors cover the file exactly, so an empty,
    truncated, padded or non-safetensors file is caught here.

    :raises CheckpointError: naming the file, its size and what is wrong with it.
    """
    from safetensors import SafetensorError

    path = Path(path)
    try:
        size = path.stat().st_size
        with safe_open(str(path), framework="pt") as f:
            return {key: tuple(f.get_slice(key).get_shape()) for key in f.keys()}
    except (SafetensorError, OSError) as exc:
        reason = str(exc).removeprefix("Error while deserializing header: ")
        if isinstance(exc, OSError):
            what = f"cannot be read ({exc.strerror or exc})"
        elif size == 0:
            what = "is empty (0 bytes)"
        elif "incomplete metadata" in reason or "invalid header length" in reason:
            what = f"is truncated or damaged ({size} bytes; safetensors: {reason})"
        else:
            what = f"is not a safetensors file ({size} bytes; safetensors: {reason})"
        raise CheckpointError(f"{path} {what}: an interrupted copy, save or download leaves such files; copy it "
                              "again from its source or use an earlier checkpoint") from None


def _nonfinite_count(t: torch.Tensor) -> int:
    """Number of NaN/inf values in a floating-point tensor.

    Fast path: the sum (float32 accumulation; float64 for float64 tensors) is finite only if every value
    is (a NaN or an inf anywhere makes it NaN or inf). Only when the sum is not finite, which a sum of
    huge finite values can also be, are the values counted exactly with ``isfinite``. The sum reads the
    tensor once without a boolean copy: ~25x less time than ``isfinite().all()`` on float32 on one core.
    """
    try:
        total = t.sum(dtype=torch.float64 if t.dtype == torch.float64 else torch.float32)
    except (RuntimeError, TypeError):  # dtypes without a sum kernel here (e.g. float8)
        t = t.float()
        total = t.sum()
    if bool(torch.isfinite(total)):
        return 0
    try:
        return int((~torch.isfinite(t)).sum())
    except (RuntimeError, TypeError):
        return int((~torch.isfinite(t.float())).sum())


def first_nonfinite_tensor(files: list[Path] | str | Path) -> tuple[Path, str, int] | None:
    """The first floating-point tensor holding NaN or +-inf: ``(file, tensor name, count of non-finite values)``.

    Streams one tensor at a time (peak memory = the largest tensor; see :func:`_nonfinite_count`).

    :param files: safetensors files, or a checkpoint directory (:func:`weight_files`).
    :returns: None when every tensor is finite.
    """
    if not isinstance(files, list):
        files = weight_files(files)
    for path in files:
        with safe_open(str(path), framework="pt") as f:
            for key in f.keys():
                t = f.get_tensor(key)
                if t.is_floating_point() and (n := _nonfinite_count(t)):
                    return path, key, n
    return None


def check_finite(files: list[Path] | str | Path, what: str = "model") -> None:
    """Refuse weights holding NaN or inf (see :func:`first_nonfinite_tensor`).

    :raises CheckpointError: naming the file and the first non-finite tensor.
    """
    bad = first_nonfinite_tensor(files)
    if bad is not None:
        path, key, n = bad
        raise CheckpointError(
            f"{path}: tensor {key!r} holds {n} NaN or infinite value{'s' if n != 1 else ''}, so this {what} produces "
            f"NaN logits and can be neither trained nor evaluated; it was most likely saved from a run whose loss "
            f"diverged: use an earlier checkpoint of that run (checkpoints/checkpoint-N) or the run's starting model")


def embedding_rows(config) -> int | None:
    """Rows of the input embedding that ``config`` implies: ``embedding_size`` (LLaDA pads ``vocab_size`` up
    to it) when set, else ``vocab_size`` (of the text config for a composite config); None when neither is a positive
    integer."""
    sources = [config]
    text = config.get_text_config() if hasattr(config, "get_text_config") else None
    if text is not None and text is not config:  # a composite config (DiffusionGemma): its text model's rows
        sources.append(text)
    for source in sources:
        for key in ("embedding_size", "vocab_size"):
            value = getattr(source, key, None)
            if isinstance(value, int) and not isinstance(value, bool) and value > 0:
                return value
    return None


def tokenizer_fit_problem(config, tokenizer, tokens: SpecialTokens | None = None, where: str | Path = "") -> str | None:
    """Why ``tokenizer`` does not fit the model of ``config``, or None.

    Refused: token ids at or past the embedding rows (:func:`embedding_rows`), special ids (``tokens``)
    outside them, and a tokenizer with fewer than :data:`MIN_TOKENIZER_COVERAGE` of the rows (vocabulary
    files missing). ``vocab_size`` larger than the tokenizer by padding is accepted.
    """
    rows = embedding_rows(config)
    if rows is None:
        return None
    src = f" in {where}" if where else ""
    vocab = tokenizer.get_vocab()
    n = len(tokenizer)
    top = max(n, max(vocab.values(), default=-1) + 1)
    if top > rows:
        return (f"the tokenizer{src} has token ids up to {top - 1} but the model has {rows} embedding rows "
                f"(config.json vocab_size): ids >= {rows} would index past the embedding; the tokenizer files belong "
                f"to another model")
    if n < MIN_TOKENIZER_COVERAGE * rows:
        return (f"the tokenizer{src} has only {n} tokens for a model with {rows} embedding rows (config.json "
                f"vocab_size); released models pad vocab_size past their tokenizer by a few hundred rows at most, so "
                f"the vocabulary files (tokenizer.json, or vocab.json and merges.txt) are most likely missing: copy "
                f"them from the model's release")
    if tokens is not None:
        for role in ("mask", "eos", "pad", "bos", "eot"):
            tid = getattr(tokens, f"{role}_id", None)
            if tid is not None and not 0 <= int(tid) < rows:
                return (f"the {role} token id {tid} (config.json {role}_token_id or the tokenizer{src}) is outside the "
                        f"model's {rows} embedding rows (config.json vocab_size); fix {role}_token_id in config.json")
            if role == "mask" and tid is not None and int(tid) >= top:
                return (f"the mask token id {tid} is not a token of the tokenizer{src} ({n} tokens); the tokenizer "
                        "files belong to another model")
    return None


def check_tokenizer_fits(config, tokenizer, family: ModelFamily, where: str | Path = "") -> SpecialTokens:
    """The checkpoint's special ids (``family.special_tokens``) once the tokenizer is known to fit the model.

    :raises CheckpointError: see :func:`tokenizer_fit_problem`; no mask token; ``config.json``'s
        ``mask_token_id`` differs from the tokenizer's.
    """
    problem = tokenizer_fit_problem(config, tokenizer, None, where)
    if problem is None:
        tokens = family.special_tokens(config, tokenizer)
        problem = tokenizer_fit_problem(config, tokenizer, tokens, where)
    if problem is not None:
        raise CheckpointError(problem)
    return tokens
