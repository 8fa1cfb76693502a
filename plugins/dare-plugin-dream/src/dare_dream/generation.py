"""HF-native generation for Dream: the release's ``model.diffusion_generate(...)``, decoded by DARE's ``dream`` sampler.

The Dream release (``generation_utils.py``, ``DreamGenerationMixin``; docs/model-families.md §2.7) gives its model
class ``diffusion_generate(inputs, generation_config=None, **kwargs)``: settings come from the keyword
arguments over a ``generation_config`` over the release defaults (``DreamGenerationConfig``: steps 512,
eps 1e-3, alg ``origin``, temperature 0, ``max_length`` 20), and it returns the sequences ``[B, Lp + G]``,
or ``DreamModelOutput(sequences, history)`` with ``return_dict_in_generate=True``.
:class:`DreamGenerationMixin` gives DARE's ``DreamModel`` the same method, decoded by
:func:`dare_dream.sampler.decode` with ``release_quirks`` on (what :class:`~dare_dream.sampler.DreamSampler`
runs with ``release_quirks: true``), and ``generate()`` as the same call that also reads transformers-style
arguments (``input_ids=``, ``do_sample=``; :mod:`dare.sampling.hf`), so
``transformers.pipeline("text-generation")`` works. The class name ends in ``GenerationMixin``, which is how
``PreTrainedModel.can_generate()`` recognises a model that can generate (as for the release's class).

Differences from the release, each explicit:

* ``generation_tokens_hook_func`` is refused (:class:`~dare.sampling.hf.GenerateArgumentError`): DARE's loop
  does not let a hook rewrite the sequence between steps. ``generation_logits_hook_func(step, x, logits)`` is
  supported; like the whole loop it stops being called once no mask is left (the release keeps running
  forward passes that change nothing);
* ``output_history`` is exact: after the early stop the last sequence is repeated up to ``steps`` entries;
* unknown keyword arguments raise instead of being ignored; ``generator`` (keyword only) seeds the draws
  (None: torch's global RNG in the release's order, so results match the release for the same seed).
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass

import torch
from transformers.utils import ModelOutput

__all__ = ["DreamGenerationMixin", "DreamModelOutput", "RELEASE_DEFAULTS"]

#: ``DreamGenerationConfig()`` of the release (the settings ``diffusion_generate`` reads).
RELEASE_DEFAULTS = {
    "temperature": 0.0,
    "top_p": None,
    "top_k": None,
    "max_length": 20,
    "max_new_tokens": None,
    "eps": 1e-3,
    "steps": 512,
    "alg": "origin",
    "alg_temp": None,
    "num_return_sequences": 1,
    "return_dict_in_generate": False,
    "output_history": False,
    "mask_token_id": None,
}
_PASSED = frozenset({"pad_token_id", "bos_token_id", "eos_token_id", "use_cache", "tokenizer", "do_sample"})


@dataclass
class DreamModelOutput(ModelOutput):
    """``diffusion_generate(..., return_dict_in_generate=True)``: ``sequences`` ``[B, Lp + G]`` int64 and, with
    ``output_history=True``, ``history``: ``steps`` tensors ``[B, Lp + G]``, the sequence after each step."""

    sequences: torch.LongTensor | None = None
    history: tuple[torch.LongTensor, ...] | None = None


def _settings(model, generation_config, kwargs: dict) -> tuple[dict, set]:
    """The release's setting resolution: kwargs over ``generation_config`` over the defaults and the model
    config's mask id. Returns ``(settings, keys given as keyword arguments)``; ``kwargs`` keeps what is not a setting."""
    config = getattr(model, "config", None)
    settings = dict(RELEASE_DEFAULTS)
    if config is not None and getattr(config, "mask_token_id", None) is not None:
        settings["mask_token_id"] = int(config.mask_token_id)
    given: dict = {}
    if generation_config is not None:
        source = generation_config.to_diff_dict() if hasattr(generation_config, "to_diff_dict") else vars(generation_config)
        given.update({k: v for k, v in source.items() if k in RELEASE_DEFAULTS or k == "do_sample"})
    from_kwargs = {k: kwargs.pop(k) for k in list(kwargs) if k in RELEASE_DEFAULTS or k == "do_sample"}
    given.update(from_kwargs)
    # None means "not given" for a setting whose default is not None (and for the mask id, which the config supplies)
    settings.update({k: v for k, v in given.items() if k in RELEASE_DEFAULTS
                     and (v is not None or (RELEASE_DEFAULTS[k] is None and k != "mask_token_id"))})
    if given.get("do_sample") is False:  # transformers' greedy switch
        settings["temperature"] = 0.0
    elif given.get("do_sample") and "temperature" not in given:
        settings["temperature"] = 1.0
    return settings, set(from_kwargs)


class DreamGenerationMixin:
    """``diffusion_generate()`` and ``generate()`` for Dream model classes (module docstring)."""

    @torch.no_grad()
    def diffusion_generate(self, inputs: torch.Tensor | None = None, generation_config=None, **kwargs):
        """Decode ``max_new_tokens`` masks after each prompt, as the Dream release's ``diffusion_generate``.

        Settings (keyword arguments, else ``generation_config`` attributes, else the release defaults):
        ``max_new_tokens`` (else ``max_length`` total; default ``max_length`` 20 + prompt length, capped at
        ``max_position_embeddings``, with a warning), ``steps``, ``eps``, ``alg`` (``origin``, ``maskgit_plus``,
        ``topk_margin``, ``entropy``), ``alg_temp``, ``temperature``, ``top_p``, ``top_k``, ``mask_token_id``
        (default ``config.mask_token_id``), ``num_return_sequences``, ``return_dict_in_generate``,
        ``output_history``, ``attention_mask`` ``[B, Lp]``, ``generation_logits_hook_func``; DARE adds
        ``generator`` (a ``torch.Generator``).

        Algorithm: :mod:`dare_dream.sampler` (Dream 7B, arXiv 2508.15487; HKUNLP Dream ``generation_utils.py``).

        :param inputs: ``[B, Lp]`` int64 prompts (left-padded where ``attention_mask`` has zeros).
        :returns: ``[B * num_return_sequences, Lp + G]`` int64, or :class:`DreamModelOutput` with
            ``return_dict_in_generate=True``.
        :raises dare.sampling.hf.GenerateArgumentError: no prompt, no mask token id, a length leaving no room
            for a completion, ``generation_tokens_hook_func``, or an unknown argument.
        :raises dare_dream.sampler.DreamSamplerError: a setting out of range (all problems in one message).
        """
        from dare.sampling.hf import IGNORED, GenerateArgumentError
        from dare_dream.family import DreamFamily
        from dare_dream.decoding import decode, decode_options

        owner = f"{type(self).__name__}.diffusion_generate"
        if inputs is None:
            inputs = kwargs.pop("input_ids", None)
        elif "input_ids" in kwargs:
            raise GenerateArgumentError(f"{owner}: pass the prompt once, as inputs or as input_ids, not both")
        if not isinstance(inputs, torch.Tensor) or inputs.dim() != 2 or inputs.dtype != torch.long:
            raise GenerateArgumentError(f"{owner}: inputs must be token ids [batch, prompt_length] (int64)")
        attention_mask = kwargs.pop("attention_mask", None)
        logits_hook = kwargs.pop("generation_logits_hook_func", None)
        generator = kwargs.pop("generator", None)
        if kwargs.pop("generation_tokens_hook_func", None) is not None:
            raise GenerateArgumentError(
                f"{owner}: generation_tokens_hook_func is not supported (DARE's decoding loop does not let a hook rewrite "
                "the sequence between steps); use generation_logits_hook_func, or dare_dream.sampler.decode with your own "
                "logits function"
            )
        s, from_kwargs = _settings(self, generation_config, kwargs)
        unknown = sorted(k for k in kwargs if k not in IGNORED and k not in _PASSED)
        if unknown:
            raise GenerateArgumentError(
                f"{owner} does not take {', '.join(unknown)}; its settings are {', '.join(RELEASE_DEFAULTS)}, "
                "attention_mask, generation_logits_hook_func and generator"
            )
        if s["mask_token_id"] is None:
            raise GenerateArgumentError(f"{owner}: no mask token id: model.config has no mask_token_id; pass mask_token_id=")
        prompt_length = inputs.shape[1]
        if s["max_new_tokens"] is not None:
            gen_length = int(s["max_new_tokens"])
        elif "max_length" in from_kwargs or s["max_length"] != RELEASE_DEFAULTS["max_length"]:
            gen_length = int(s["max_length"]) - prompt_length
        else:  # the release's model-agnostic default: 20 more tokens, within the position table
            warnings.warn(
                "Using the model-agnostic default `max_length` (=20) to control the generation length; set "
                "`max_new_tokens`", UserWarning, stacklevel=2,
            )
            limit = getattr(self.config, "max_position_embeddings", None)
            total = prompt_length + RELEASE_DEFAULTS["max_length"]
            gen_length = (min(total, limit) if limit is not None else total) - prompt_length
        if gen_length <= 0:
            raise GenerateArgumentError(
                f"{owner}: the {prompt_length}-token prompt leaves no room for a completion (max_length "
                f"{prompt_length + gen_length}); set max_new_tokens"
            )
        n = int(s["num_return_sequences"])
        if n > 1:
            inputs = inputs.repeat_interleave(n, dim=0)
            attention_mask = None if attention_mask is None else attention_mask.repeat_interleave(n, dim=0)
        history = [] if s["return_dict_in_generate"] and s["output_history"] else None
        family, calls = DreamFamily(), [0]

        def logits_fn(ids: torch.Tensor, am: torch.Tensor | None) -> torch.Tensor:
            step = calls[0]
            if history is not None and step > 0:
                history.append(ids.clone())  # the sequence after step - 1
            logits = family.logits(self, ids, am)
            if logits_hook is not None:
                logits = logits_hook(step, ids, logits)
            calls[0] += 1
            return logits

        options = decode_options(int(s["mask_token_id"]), generator, gen_length=gen_length, steps=int(s["steps"]),
                                 eps=float(s["eps"]), alg=s["alg"], alg_temp=s["alg_temp"],
                                 temperature=float(s["temperature"]), top_p=s["top_p"], top_k=s["top_k"],
                                 release_quirks=True)
        x, _, _ = decode(logits_fn, inputs, attention_mask, options)
        if not s["return_dict_in_generate"]:
            return x
        if history is not None:
            history.extend(x.clone() for _ in range(int(s["steps"]) - len(history)))
        return DreamModelOutput(sequences=x, history=None if history is None else tuple(history))

    def generate(self, inputs: torch.Tensor | None = None, generation_config=None, **kwargs):
        """The same as :meth:`diffusion_generate` (Dream has no other decoder), reachable by the name transformers
        uses, e.g. from ``pipeline("text-generation")``; ``do_sample=False`` forces temperature 0 and
        ``do_sample=True`` samples at ``temperature`` (1.0 when unset)."""
        return self.diffusion_generate(inputs, generation_config, **kwargs)
