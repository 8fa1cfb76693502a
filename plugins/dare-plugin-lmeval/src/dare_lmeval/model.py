"""The ``dare`` model of lm-evaluation-harness: any DARE model, decoded by any DARE sampler.

Usage (no import needed: the model is registered through the ``lm_eval.models`` entry point)::

    lm_eval run --model dare --model_args model=runs/quickstart,sampler=llada,steps=32,block_length=32 \\
        --tasks gsm8k --batch_size 16

Model arguments (``--model_args k=v,...``): ``model`` (or lm-eval's usual ``pretrained``): a model
directory, run directory, LoRA adapter directory or hub id; ``sampler`` (default: the family's); every key
that is not one of :data:`dare.eval.harness.ADAPTER_ARGS` is a parameter of that sampler, validated by its
``Params`` model (an unknown key is an error naming it); ``batch_size`` (``--batch_size``, or the model
argument, which wins), ``seed``, ``mc_samples``, ``mc_scheme``, ``greedy_check``, ``dtype``, ``device``.

Request types (lm-eval's ``LM`` interface):

* ``generate_until``: :meth:`dare.eval.harness.HarnessModel.generate` with the request's ``until`` and
  ``max_gen_toks`` (``gen_length`` = ``max_gen_toks`` rounded up to a multiple of the sampler's
  ``block_length``, unless ``gen_length`` is a model argument; completions cut to ``max_gen_toks`` tokens).
  Consecutive requests with the same ``until``/``max_gen_toks`` are decoded together, in request order,
  ``batch_size`` prompts at a time; a request's sampling noise is keyed by ``(seed, doc_id)`` as ``dare eval``
  keys row ``i`` by ``(seed, i)``: the same completions as ``dare eval``. Other
  generation kwargs (``temperature``, ``do_sample``, ...) are ignored with one warning: decoding is the
  sampler's, set by the model arguments.
* ``loglikelihood``: the Monte-Carlo ELBO of the continuation (:mod:`dare.eval.likelihood`; block-diffusion
  ELBO for block families), ``mc_samples`` terms drawn with seed ``request_seed(seed, doc_id, idx)``, so a
  score depends neither on the batch size nor on data-parallel slicing; ``is_greedy`` is computed only with
  ``greedy_check=true`` (False otherwise, as the official LLaDA wrapper recommends for speed).
* ``loglikelihood_rolling``: the sum of MC-ELBOs of lm-eval's disjoint rolling windows (each window given
  the preceding tokens, prefix BOS, or EOS), a lower bound of the log-likelihood in expectation; the
  resulting perplexities are upper bounds.

Data parallel: launched with ``accelerate launch -m lm_eval run ...`` (or ``torchrun``) over N processes,
each process evaluates lm-eval's slice of the documents (rank and world size from ``accelerate``) and
lm-eval gathers the metrics, as for its HF model.

The settings that determine a number (:meth:`dare.eval.harness.HarnessModel.settings`) go into lm-eval's
results JSON under ``config.dare``.
"""

from __future__ import annotations

import logging
import os
from typing import Any

import torch
from lm_eval.api.model import LM
from lm_eval.api.registry import register_model

from dare.errors import DareError
from dare.eval.harness import HarnessModel

__all__ = ["DareLM"]

log = logging.getLogger("dare_lmeval")

#: Generation kwargs the sampler's own params replace (ignored without a warning when they ask for greedy decoding).
_GREEDY_KWARGS = {"do_sample": (False,), "temperature": (0, 0.0)}


def _batch_size(value) -> int | None:
    if value is None:
        return None
    if isinstance(value, str) and value.startswith("auto"):
        raise DareError(f"batch_size {value!r} is not supported by the dare model: give an integer (prompts per "
                        "generation batch, corrupted rows per likelihood forward pass)")
    try:
        return int(value)
    except (TypeError, ValueError):
        raise DareError(f"batch_size {value!r} must be an integer") from None


@register_model("dare")
class DareLM(LM):
    """lm-eval ``LM`` over :class:`~dare.eval.harness.HarnessModel` (module docstring).

    :raises DareError: bad model arguments (unknown keys named), before any weights are loaded.
    """

    def __init__(self, model: str | None = None, pretrained: str | None = None, batch_size=None,
                 max_batch_size=None, device: str | None = None, **kwargs: Any):
        super().__init__()
        if model is not None and pretrained is not None and model != pretrained:
            raise DareError(f"give the model once: model={model!r} and pretrained={pretrained!r} differ")
        model = model if model is not None else pretrained
        if not model:
            raise DareError("the dare model needs model=DIR (a model directory, run directory, adapter directory or "
                            "hub id) in --model_args")
        self.accelerator = None
        if int(os.environ.get("WORLD_SIZE", "1")) > 1:
            from accelerate import Accelerator

            acc = Accelerator()
            if acc.num_processes > 1:
                self.accelerator = acc
                self._rank = acc.process_index
                self._world_size = acc.num_processes
                device = str(acc.device)
        args = {**kwargs, "model": model}
        bs = _batch_size(batch_size)
        if bs is not None:
            args.setdefault("batch_size", bs)
        if device is not None and "device" not in args:
            if str(device).startswith("cuda") and not torch.cuda.is_available() and self.accelerator is None:
                log.warning("dare model: --device %s is not available here; using the CPU", device)
                device = "cpu"
            args["device"] = device
        self.harness = HarnessModel.from_args(args)
        self._device = self.harness.device
        self._warned: set[str] = set()

    @classmethod
    def create_from_arg_string(cls, arg_string: str, additional_config: dict | None = None) -> DareLM:
        """``--model_args`` plus the CLI's ``batch_size``/``device``; a model argument of the same name wins."""
        from lm_eval import utils

        args = utils.simple_parse_args_string(arg_string)
        return cls.create_from_arg_obj(args, additional_config)

    @classmethod
    def create_from_arg_obj(cls, arg_dict: dict, additional_config: dict | None = None) -> DareLM:
        extra = {k: v for k, v in (additional_config or {}).items() if v is not None and k not in arg_dict}
        return cls(**arg_dict, **extra)

    # ------------------------------------------------------------------ lm-eval plumbing
    @property
    def tokenizer(self):
        return self.harness.tokenizer

    @property
    def tokenizer_name(self) -> str:
        return str(getattr(self.tokenizer, "name_or_path", "dare")).replace("/", "__")

    @property
    def eot_token_id(self) -> int:
        return self.harness.tokens.eos_id

    @property
    def max_length(self) -> int | None:
        return self.harness.max_length

    @property
    def device(self):
        return self._device

    def chat_template(self, chat_template: bool | str = False) -> str | None:
        return getattr(self.tokenizer, "chat_template", None) or ""

    def apply_chat_template(self, chat_history: list[dict[str, str]], add_generation_prompt: bool = True) -> str:
        """The tokenizer's chat template (DARE writes the family's into every tokenizer it creates)."""
        if not getattr(self.tokenizer, "chat_template", None):
            raise DareError("this model's tokenizer has no chat template; run without --apply_chat_template")
        return self.tokenizer.apply_chat_template(chat_history, tokenize=False, add_generation_prompt=add_generation_prompt,
                                                  continue_final_message=not add_generation_prompt)

    def get_model_info(self) -> dict[str, Any]:
        """Recorded in lm-eval's results JSON (``config.dare``): what makes the numbers reproducible."""
        return {"dare": {**self.harness.settings(), "world_size": self.world_size}}

    def all_gather(self, tensor):
        return tensor if self.world_size <= 1 else self.accelerator.gather(tensor)

    def gather_object(self, obj, dst=0):
        if self.world_size <= 1:
            return [obj]
        result = [None] * self.world_size if self.rank == dst else None
        torch.distributed.gather_object(obj=obj, object_gather_list=result, dst=dst)
        return result

    def barrier(self) -> None:
        if self.world_size > 1:
            self.accelerator.wait_for_everyone()

    def _warn_once(self, key: str, message: str) -> None:
        if key not in self._warned:
            self._warned.add(key)
            log.warning(message)

    # ------------------------------------------------------------------ requests
    def generate_until(self, requests) -> list[str]:
        # a request's sampling noise is keyed by its document, as `dare eval` keys row i by (seed, i); the k-th
        # repeat of a document (lm-eval's `repeats`, data-parallel padding) by -(doc_id * 2**20 + k)
        keys, seen = [], {}
        for r in requests:
            doc = int(r.doc_id or 0)
            k = seen.get(doc, 0)
            seen[doc] = k + 1
            keys.append(doc if k == 0 else -(doc * 2**20 + k))
        out: list[str] = []
        group: list[int] = []
        group_key = None

        def flush():
            if group:
                until, max_gen_toks = group_key
                texts = self.harness.generate([requests[i].args[0] for i in group], list(until), max_gen_toks,
                                              indices=[keys[i] for i in group])
                for i, t in zip(group, texts, strict=True):
                    self.cache_hook.add_partial("generate_until", requests[i].args, t)
                out.extend(texts)

        for n, r in enumerate(requests):
            context, kwargs = r.args
            kwargs = dict(kwargs or {})
            until = kwargs.pop("until", None) or []
            until = (until,) if isinstance(until, str) else tuple(until)
            max_gen_toks = kwargs.pop("max_gen_toks", None)
            ignored = sorted(k for k, v in kwargs.items() if v not in _GREEDY_KWARGS.get(k, ()))
            if ignored:
                self._warn_once(",".join(ignored), f"dare model: generation kwargs {ignored} are ignored; the sampler "
                                f"{self.harness.sampler_name!r} decodes with its model-argument params "
                                f"{self.harness.sampler_params}")
            if max_gen_toks is None:
                max_gen_toks = 256  # lm-eval's default for its HF model
            key = (until, int(max_gen_toks))
            if key != group_key:
                flush()
                group, group_key = [], key
            group.append(n)
        flush()
        return out

    def loglikelihood(self, requests) -> list[tuple[float, bool]]:
        pairs = [r.args for r in requests]
        keys = [(r.doc_id, r.idx) for r in requests]
        est = self.harness.loglikelihood(pairs, keys)
        out = []
        for r, e in zip(requests, est, strict=True):
            res = (e.logprob, bool(e.is_greedy))
            self.cache_hook.add_partial("loglikelihood", r.args, res)
            out.append(res)
        return out

    def loglikelihood_rolling(self, requests) -> list[float]:
        from lm_eval.utils import get_rolling_token_windows, make_disjoint_window

        tokens = self.harness.tokens
        prefix = tokens.bos_id if tokens.bos_id is not None else tokens.eos_id
        limit = self.max_length
        pairs, keys, owner = [], [], []
        for n, r in enumerate(requests):
            (text,) = r.args
            ids = self.tokenizer(text, add_special_tokens=False)["input_ids"]
            max_seq = (limit - 1) if limit else len(ids) + 1
            for w, win in enumerate(get_rolling_token_windows(ids, prefix, max(max_seq, 1), 1)):
                ctx, cont = make_disjoint_window(win)
                pairs.append((list(ctx), list(cont)))
                keys.append((r.doc_id, -1 - w))  # negative: never a choice index
                owner.append(n)
        est = self.harness.loglikelihood_tokens(pairs, keys)
        totals = [0.0] * len(requests)
        for n, e in zip(owner, est, strict=True):
            totals[n] += e.logprob
        for r, t in zip(requests, totals, strict=True):
            self.cache_hook.add_partial("loglikelihood_rolling", r.args, t)
        return totals
