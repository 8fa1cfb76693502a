"""transformers-style ``generate()`` calls mapped onto DARE samplers (HF-native generation).

Every family's model class exposes the generation entry point of its release (LLaDA's ``generate.py``
``generate``, Dream's ``diffusion_generate``, SDAR's ``block_diffusion_generate``, LLaDA2's ``generate``)
and a ``generate()`` that either decodes the same way or raises :class:`GenerateArgumentError` naming
the right entry point (see each plugin's ``generation`` module). This module holds what those methods
share: reading a transformers-style call.

A diffusion LM denoises a fixed canvas of ``gen_length`` mask tokens, so a transformers call maps as:

* ``input_ids`` (or the first positional ``inputs``) ``[B, Lp]`` int64, left-padded when
  ``attention_mask`` ``[B, Lp]`` has zeros;
* ``max_new_tokens`` (or ``max_length - Lp``) is the sampler's ``gen_length``;
* ``do_sample=False`` is temperature 0 (greedy); ``do_sample=True`` samples at ``temperature``
  (1.0 when unset, as transformers does); ``top_k`` / ``top_p`` go to samplers that have them;
* a ``generation_config`` (``transformers.GenerationConfig``) contributes the values it sets
  (``to_diff_dict()``, so transformers' own defaults such as ``top_k=50`` never leak in); keyword
  arguments override it;
* ``pad_token_id`` / ``bos_token_id`` / ``eos_token_id`` / ``use_cache`` / ``tokenizer`` are accepted and
  ignored (the model's special ids come from its config);
* anything else (beam search, ``stop_strings``, logits processors, ...) has no diffusion counterpart here
  and raises :class:`GenerateArgumentError` naming it, instead of being silently dropped.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from dare.errors import DareError

__all__ = ["GenerateArgumentError", "GenerateCall", "parse_generate_call", "config_id", "build_sampler"]

#: transformers ``generate()`` keywords that carry nothing a DARE sampler needs.
IGNORED = frozenset({"pad_token_id", "bos_token_id", "eos_token_id", "use_cache", "tokenizer"})
#: Keys read from a ``generation_config`` (others it sets are ignored only if transformers' defaults).
_CONFIG_KEYS = ("max_new_tokens", "max_length", "do_sample", "temperature", "top_p", "top_k", "num_beams",
                "num_return_sequences")


class GenerateArgumentError(DareError, ValueError):
    """A ``generate()`` call a DARE model cannot honour; the message names the argument and the fix."""


@dataclass
class GenerateCall:
    """A transformers-style call, read.

    * ``input_ids``: ``[B, Lp]`` int64; ``attention_mask``: ``[B, Lp]`` (1 real, 0 left padding) or None;
    * ``max_new_tokens``: completion length asked for (None: not given);
    * ``temperature``: 0.0 for greedy, > 0 to sample; None when neither ``temperature`` nor ``do_sample``
      was given (the entry point's own default applies);
    * ``top_k`` / ``top_p``: None when not given.
    """

    input_ids: torch.Tensor
    attention_mask: torch.Tensor | None
    max_new_tokens: int | None
    temperature: float | None
    top_k: int | None
    top_p: float | None


def config_id(config, name: str, default: int | None = None) -> int | None:
    """``config.<name>`` as an int (the first element of a list), else ``default``."""
    value = getattr(config, name, None)
    if isinstance(value, (list, tuple)):
        value = value[0] if value else None
    return default if value is None else int(value)


def parse_generate_call(
    inputs: torch.Tensor | None,
    kwargs: dict[str, Any],
    *,
    owner: str,
    sampling: tuple[str, ...] = ("temperature",),
    hint: str = "",
) -> GenerateCall:
    """Read a transformers-style ``generate(inputs, **kwargs)`` call (module docstring); ``kwargs`` is consumed.

    :param owner: the method, for messages (e.g. ``"LLaDAModelLM.generate"``).
    :param sampling: sampling knobs the sampler has, among ``temperature``, ``top_k``, ``top_p``.
    :param hint: appended to errors (the release entry point or DARE sampler to use instead).
    :raises GenerateArgumentError: no prompt, both ``inputs`` and ``input_ids``, a prompt that is not
        ``[B, Lp]`` int64, a length that leaves no room for a completion, or an unsupported argument.
    """
    tail = f" {hint}" if hint else ""
    input_ids = kwargs.pop("input_ids", None)
    if inputs is not None and input_ids is not None:
        raise GenerateArgumentError(f"{owner}: pass the prompt once, as inputs or as input_ids, not both")
    prompt = inputs if inputs is not None else input_ids
    if isinstance(prompt, dict) or (hasattr(prompt, "keys") and "input_ids" in prompt):  # a tokenizer's BatchEncoding
        kwargs.setdefault("attention_mask", prompt.get("attention_mask"))
        prompt = prompt["input_ids"]
    if not isinstance(prompt, torch.Tensor) or prompt.dim() != 2 or prompt.dtype != torch.long:
        got = type(prompt).__name__
        if isinstance(prompt, torch.Tensor):
            got = f"a {prompt.dtype} tensor of shape {list(prompt.shape)}"
        raise GenerateArgumentError(
            f"{owner}: the prompt must be token ids [batch, prompt_length] (int64), got {got}; "
            f"tokenize first, e.g. tokenizer(texts, return_tensors='pt', padding=True, padding_side='left').{tail}"
        )
    attention_mask = kwargs.pop("attention_mask", None)
    settings: dict[str, Any] = {}
    config = kwargs.pop("generation_config", None)
    if config is not None:
        given = config.to_diff_dict() if hasattr(config, "to_diff_dict") else vars(config)
        settings.update({k: given[k] for k in _CONFIG_KEYS if given.get(k) is not None})
    settings.update({k: kwargs.pop(k) for k in _CONFIG_KEYS if k in kwargs and kwargs[k] is not None})
    for key in _CONFIG_KEYS:
        kwargs.pop(key, None)  # explicit None = not given
    for key in IGNORED:
        kwargs.pop(key, None)
    problems = [f"{k}={v!r}" for k, v in (("num_beams", settings.get("num_beams", 1)),
                                            ("num_return_sequences", settings.get("num_return_sequences", 1)))
                if v != 1]
    problems += [f"{k}" for k in ("temperature", "top_k", "top_p") if k in settings and k not in sampling]
    problems += sorted(kwargs)
    if problems:
        raise GenerateArgumentError(
            f"{owner} does not support {', '.join(problems)}: a diffusion sampler denoises a fixed canvas and has no "
            f"counterpart for them (supported: input_ids, attention_mask, max_new_tokens/max_length, do_sample"
            f"{''.join(', ' + k for k in sampling)}, generation_config).{tail}"
        )
    max_new = settings.get("max_new_tokens")
    if max_new is None and "max_length" in settings:
        max_new = int(settings["max_length"]) - prompt.shape[1]
        if max_new <= 0:
            raise GenerateArgumentError(
                f"{owner}: max_length {settings['max_length']} leaves no room after the {prompt.shape[1]}-token "
                f"prompt; set max_new_tokens instead"
            )
    if max_new is not None and int(max_new) <= 0:
        raise GenerateArgumentError(f"{owner}: max_new_tokens must be positive (got {max_new})")
    do_sample = settings.get("do_sample")
    temperature = settings.get("temperature")
    if do_sample is False:
        temperature = 0.0
    elif do_sample and temperature is None:
        temperature = 1.0
    elif do_sample and float(temperature) == 0.0:
        raise GenerateArgumentError(f"{owner}: do_sample=True with temperature 0; set temperature > 0 or "
                                    f"do_sample=False")
    return GenerateCall(
        input_ids=prompt,
        attention_mask=attention_mask,
        max_new_tokens=None if max_new is None else int(max_new),
        temperature=None if temperature is None else float(temperature),
        top_k=settings.get("top_k") if do_sample is not False else None,
        top_p=settings.get("top_p") if do_sample is not False else None,
    )


def build_sampler(cls, params: dict[str, Any], owner: str):
    """``cls(params)`` (a :class:`dare.components.Sampler` subclass), its ``Params`` validation errors turned
    into one :class:`GenerateArgumentError` paragraph that names the settings.

    :raises GenerateArgumentError: the sampler's ``Params`` model rejects ``params``.
    """
    from pydantic import ValidationError

    try:
        return cls(params)
    except ValidationError as exc:
        why = "; ".join(f"{'.'.join(map(str, e['loc'])) or 'params'}: {e['msg'].removeprefix('Value error, ')}"
                        for e in exc.errors())
        shown = ", ".join(f"{k}={v!r}" for k, v in params.items())
        raise GenerateArgumentError(f"{owner}: invalid {cls.name} sampler settings ({shown}): {why}") from None
