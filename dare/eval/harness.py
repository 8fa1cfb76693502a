"""A DARE model as evaluation harnesses see one: text in, text or log-likelihoods out.

:class:`HarnessModel` is harness-neutral: the lm-eval model (DARE's lm-evaluation-harness plugin) and other
harness integrations wrap it and only translate requests. It loads a model directory, run directory,
LoRA adapter directory or hub id (:func:`dare.modeling.load_model`) with a sampler whose params are
validated by the sampler's own ``Params`` model and its ``check`` against the model *before* any weights
are loaded (the same checks as ``dare generate``), and exposes

* :meth:`HarnessModel.generate`: completions decoded with the sampler, honouring ``until`` (stop strings)
  and ``max_gen_toks`` (mapped onto the sampler's ``gen_length`` rules, :meth:`HarnessModel.sampler_for`);
* :meth:`HarnessModel.loglikelihood`: the Monte-Carlo ELBO of a continuation given a context
  (:func:`dare.eval.likelihood.elbo_loglikelihood`: stratified mask counts, per-request seeds,
  block-diffusion ELBO for block families).

Generation batches prompts in the given order, ``batch_size`` at a time, each prompt's sampling noise
keyed by ``(seed, index)``: exactly what ``dare eval`` does with row ``index``, so the same prompts and
sampler give the same completions in ``dare eval`` and in a harness.
"""

from __future__ import annotations

import math
from typing import Any, Sequence

import torch

from dare.errors import DareError

__all__ = ["HarnessModel", "ADAPTER_ARGS"]

#: Arguments of the adapter itself; every other model argument is a sampler parameter.
ADAPTER_ARGS: dict[str, str] = {
    "model": "model directory, run directory, LoRA adapter directory or hub id",
    "sampler": "sampler name (default: the family's official decoder)",
    "batch_size": "prompts per generation batch and corrupted rows per likelihood forward pass",
    "seed": "base seed of every per-prompt sampling stream and per-request ELBO draw",
    "mc_samples": "Monte-Carlo terms (forward passes) per log-likelihood",
    "mc_scheme": "mask-count scheme of the ELBO: stratified, uniform or bernoulli",
    "greedy_check": "compute is_greedy for log-likelihoods (one forward pass per continuation token)",
    "dtype": "weights dtype: float32, bfloat16 or float16",
    "device": "torch device, e.g. cpu or cuda:0",
}


def _problem(loc: str, msg: str) -> str:
    """A spec problem of :func:`dare.runspec.resolve_generate`, in model-argument words."""
    msg = msg.replace("model.path", "model")
    if loc == "model.path":
        return f"model: {msg}"
    if loc in ("sampler", "sampler.name"):
        return f"sampler: {msg}"
    if loc.startswith("sampler.params."):
        return f"sampler parameter {loc[len('sampler.params.'):]}: {msg}"
    return f"{loc}: {msg}"


def _resolve_sampler(model_path: str, name: str | None, params: dict[str, Any]):
    """``(sampler component, family)`` after ``dare generate``'s checks (model directory, sampler params, sampler
    vs model). :raises DareError: naming each problem by its model argument."""
    from dare.runspec import resolve_generate

    ctx = resolve_generate(model_path, name, params)
    if ctx.problems:
        raise DareError("; ".join(_problem(loc, msg) for loc, msg in ctx.problems))
    return ctx.sampler, ctx.family


def _int_arg(name: str, value, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        raise DareError(f"model argument {name}={value!r} must be an integer >= {minimum}")
    try:
        out = int(value)
    except ValueError:
        raise DareError(f"model argument {name}={value!r} must be an integer >= {minimum}") from None
    if out < minimum:
        raise DareError(f"model argument {name}={value!r} must be an integer >= {minimum}")
    return out


class HarnessModel:
    """A DARE model with a sampler, for evaluation harnesses (module docstring).

    :param model: model directory, run directory (its trained ``model/``), LoRA adapter directory or hub id.
    :param sampler: sampler name; None = the family's ``default_sampler``.
    :param sampler_params: the sampler's params (validated by its ``Params`` and ``check``). Without
        ``gen_length`` the completion length follows each request's ``max_gen_toks``.
    :param batch_size: prompts per generation batch; corrupted rows per likelihood forward pass.
    :param seed: base seed of the per-prompt sampling noise (keyed by ``(seed, index)``) and of the
        per-request ELBO draws.
    :param mc_samples: Monte-Carlo terms per log-likelihood (LLaDA's evaluation uses 128, arXiv 2502.09992 App. B).
    :param mc_scheme: ``stratified`` (default), ``uniform`` or ``bernoulli`` mask counts.
    :param greedy_check: compute ``is_greedy`` (:func:`dare.eval.likelihood.greedy_matches`); off by default
        (then ``is_greedy`` is None), as the LLaDA wrapper recommends for speed.
    :param dtype: weights dtype; :param device: torch device (default: CUDA when available, else CPU).
    :raises DareError: a bad argument, an unknown sampler or sampler parameter (named), a sampler that
        does not fit the model, or an unloadable model; all before weights are loaded, except the last.
    """

    def __init__(
        self,
        model: str,
        sampler: str | None = None,
        sampler_params: dict[str, Any] | None = None,
        *,
        batch_size: int = 32,
        seed: int = 0,
        mc_samples: int = 128,
        mc_scheme: str = "stratified",
        greedy_check: bool = False,
        dtype: str = "float32",
        device: str | torch.device | None = None,
    ):
        from dare.eval.likelihood import SCHEMES
        from dare.modeling.checkpoint import DTYPES

        if not model:
            raise DareError("model argument 'model' is required: a model directory, run directory or hub id "
                            "(e.g. model=runs/quickstart)")
        self.model_path = str(model)
        self.batch_size = _int_arg("batch_size", batch_size, 1)
        self.seed = _int_arg("seed", seed, 0)
        self.mc_samples = _int_arg("mc_samples", mc_samples, 1)
        if mc_scheme not in SCHEMES:
            raise DareError(f"model argument mc_scheme={mc_scheme!r} is not one of {', '.join(SCHEMES)}")
        self.mc_scheme = mc_scheme
        if not isinstance(greedy_check, bool):
            raise DareError(f"model argument greedy_check={greedy_check!r} must be true or false")
        self.greedy_check = greedy_check
        if dtype not in DTYPES:
            raise DareError(f"model argument dtype={dtype!r} is not one of {', '.join(DTYPES)}")
        self.dtype = dtype
        self.sampler_params = dict(sampler_params or {})
        self.sampler, self._family = self._check_sampler(sampler, self.sampler_params)
        self.sampler_name = self.sampler.name
        self._samplers: dict[int, Any] = {}

        if device is None:
            device = "cuda" if torch.cuda.is_available() else "cpu"
        try:
            self.device = torch.device(device)
        except (RuntimeError, TypeError):
            raise DareError(f"model argument device={device!r} is not a torch device (e.g. cpu, cuda, "
                            "cuda:0)") from None
        if self.device.type == "cuda" and not torch.cuda.is_available():
            raise DareError(f"model argument device={device!r}: this torch has no CUDA device; use device=cpu")
        from dare.modeling import load_model

        self.lm = load_model(self.model_path, dtype=dtype)
        self.lm.model.to(self.device)
        self.lm.model.eval()

    # ------------------------------------------------------------------ construction
    @classmethod
    def from_args(cls, args: dict[str, Any], **defaults) -> HarnessModel:
        """Build from one flat mapping (e.g. lm-eval's ``--model_args``): the :data:`ADAPTER_ARGS` keys
        go to the adapter, every other key is a sampler parameter. ``defaults`` fill adapter keys that
        ``args`` does not give."""
        args = dict(args)
        own = {k: args.pop(k) for k in list(args) if k in ADAPTER_ARGS}
        return cls(**{**defaults, **own, "sampler_params": args})

    def _check_sampler(self, name: str | None, params: dict[str, Any]):
        """``(sampler component, family)``; unknown parameters named before any other check."""
        default, family = _resolve_sampler(self.model_path, name, {})
        allowed = list(type(default).Params.model_fields)
        unknown = [k for k in params if k not in allowed]
        if unknown:
            raise DareError(
                f"unknown model argument {unknown[0]!r}: it is neither a parameter of sampler {default.name!r} "
                f"(those are: {', '.join(allowed)}) nor a DARE model argument ({', '.join(ADAPTER_ARGS)}); fix "
                "the spelling or remove it (`dare schema` lists every sampler's parameters)"
            )
        probe = dict(params)
        fields = type(default).Params.model_fields
        if "gen_length" not in probe and "block_length" in fields:
            # gen_length follows each request's max_gen_toks: check the other params at one block
            block = probe.get("block_length", fields["block_length"].default)
            if isinstance(block, int) and not isinstance(block, bool) and block > 0:
                probe["gen_length"] = block
        if not probe:
            return default, family
        return _resolve_sampler(self.model_path, default.name, probe)

    # ------------------------------------------------------------------ properties
    @property
    def model(self):
        return self.lm.model

    @property
    def family(self):
        return self.lm.family

    @property
    def tokenizer(self):
        return self.lm.tokenizer

    @property
    def tokens(self):
        return self.lm.tokens

    @property
    def max_length(self) -> int | None:
        """The model's context length (``max_position_embeddings`` or ``max_sequence_length``), if declared."""
        from dare.eval.likelihood import max_context_length

        return max_context_length(self.model.config)

    @property
    def estimator(self) -> str:
        """``mc-elbo`` (masked diffusion) or ``block-mc-elbo`` (block diffusion)."""
        return "block-mc-elbo" if self.family.attention == "block" else "mc-elbo"

    # ------------------------------------------------------------------ generation
    def _gen_multiple(self) -> int:
        """What ``gen_length`` must be a multiple of: the sampler's ``block_length`` (the model's block size
        when it is unset), else 1."""
        if "block_length" not in type(self.sampler).Params.model_fields:
            return 1
        block = getattr(self.sampler.params, "block_length", None)
        if block is None:
            block = self.family.block_size(self.model.config) or 1
        return int(block)

    def sampler_for(self, max_gen_toks: int | None):
        """The sampler that decodes at most ``max_gen_toks`` tokens.

        With ``gen_length`` among the sampler parameters, that sampler (completions are cut to
        ``max_gen_toks`` tokens). Otherwise (``max_gen_toks`` None: the ``Params`` default ``gen_length``)
        ``gen_length`` = ``max_gen_toks`` rounded up to a multiple of the sampler's ``block_length``
        (semi-autoregressive and block samplers decode whole blocks), checked by the sampler's ``Params`` and ``check``
        like any spec.

        :raises DareError: that ``gen_length`` breaks a sampler rule (e.g. LLaDA's ``steps`` must be a
            multiple of ``gen_length / block_length``), naming the rule and the fix.
        """
        if "gen_length" in self.sampler_params:
            return self.sampler
        if max_gen_toks is None:  # the sampler's default completion length
            max_gen_toks = int(type(self.sampler).Params.model_fields["gen_length"].default)
        max_gen_toks = _int_arg("max_gen_toks", max_gen_toks, 1)
        multiple = self._gen_multiple()
        g = math.ceil(max_gen_toks / multiple) * multiple
        if g not in self._samplers:
            how = "max_gen_toks"
            if multiple > 1:
                how = f"max_gen_toks rounded up to a multiple of block_length {multiple}"
            try:
                self._samplers[g], _ = _resolve_sampler(self.model_path, self.sampler_name,
                                                        {**self.sampler_params, "gen_length": g})
            except DareError as exc:
                raise DareError(
                    f"max_gen_toks {max_gen_toks} cannot be decoded by sampler {self.sampler_name!r} with its "
                    f"parameters {self.sampler_params}: gen_length {g} ({how}) fails its checks: {exc}; give "
                    "gen_length (and the parameters that must agree with it, e.g. steps) in the model arguments"
                ) from None
        return self._samplers[g]

    def generate(self, prompts: Sequence[str], until: Sequence[str] | str | None = None,
                 max_gen_toks: int | None = None, indices: Sequence[int] | None = None) -> list[str]:
        """One completion per prompt, decoded like ``dare eval`` (module docstring).

        :param prompts: prompt strings, used as given (apply a chat template before, if wanted).
        :param until: stop strings: each completion is cut before the first occurrence of any of them.
        :param max_gen_toks: at most this many tokens per completion (:meth:`sampler_for`).
        :param indices: each prompt's global index (default: its position): its sampling noise is keyed by
            ``(seed, index)`` (:mod:`dare.randomness`), as ``dare eval`` keys row ``i``, so a completion depends on
            neither its batch nor the process that decodes it.
        :returns: completion strings (EOS/mask tokens dropped, as ``dare eval`` decodes).
        """
        from dare.sampling import DecodingBundle
        from dare.sampling.text import decode_completions, generate_texts

        if not prompts:
            return []
        sampler = self.sampler_for(max_gen_toks)
        out = generate_texts(DecodingBundle.of(self, sampler), list(prompts), batch_size=self.batch_size,
                             seed=self.seed, indices=list(range(len(prompts))) if indices is None else list(indices))
        texts = out.texts
        if max_gen_toks is not None and max_gen_toks < sampler.gen_length:
            texts = []
            for o in out.outputs:
                texts.extend(decode_completions(self.tokenizer, o.completions[:, :max_gen_toks], self.tokens))
        stops = [until] if isinstance(until, str) else [s for s in (until or []) if s]
        return [_cut(t, stops) for t in texts]

    # ------------------------------------------------------------------ likelihood
    def encode(self, context: str, continuation: str) -> tuple[list[int], list[int]]:
        """Token ids of a request (:func:`dare.eval.likelihood.encode_pair`), the context cut from the left
        to fit :attr:`max_length`.

        :raises DareError: the continuation alone is longer than the model's context.
        """
        from dare.eval.likelihood import encode_pair

        return encode_pair(self.tokenizer, context, continuation, self.max_length)

    def loglikelihood(self, requests: Sequence[tuple[str, str]], keys: Sequence | None = None):
        """MC-ELBO of each ``(context, continuation)`` (:func:`dare.eval.likelihood.elbo_loglikelihood`).

        :param keys: one key per request for its seed (default: its index); give stable ids (e.g. document
            and choice index) to make estimates independent of request order and of data-parallel slicing.
        :returns: :class:`~dare.eval.likelihood.ElboEstimate` per request.
        """
        return self.loglikelihood_tokens([self.encode(c, x) for c, x in requests], keys)

    def loglikelihood_tokens(self, requests: Sequence[tuple[Sequence[int], Sequence[int]]],
                             keys: Sequence | None = None):
        """:meth:`loglikelihood` on token ids ``(context_ids, continuation_ids)``."""
        from dare.eval.likelihood import elbo_loglikelihood

        return elbo_loglikelihood(self.model, self.family, self.tokens.mask_id, requests, keys,
                                  mc_samples=self.mc_samples, scheme=self.mc_scheme, seed=self.seed,
                                  batch_size=self.batch_size, greedy=self.greedy_check)

    # ------------------------------------------------------------------ provenance
    def settings(self) -> dict[str, Any]:
        """Everything that determines a number: model, family, sampler and params, seeds, estimator,
        batch size, dtype, device and package versions (record it next to every score)."""
        from dare.report.report import provenance

        prov = provenance(sampler=self.sampler, seed=self.seed)
        sampler = prov["sampler"]
        if "gen_length" not in self.sampler_params:
            sampler["params"]["gen_length"] = f"max_gen_toks rounded up to a multiple of {self._gen_multiple()}"
        return {
            "model": str(self.lm.path.resolve()) if self.lm.path is not None else self.model_path,
            "family": self.family.name,
            "sampler": sampler,
            "seed": self.seed,
            "batch_size": self.batch_size,
            "likelihood": {"estimator": self.estimator, "mc_samples": self.mc_samples, "mc_scheme": self.mc_scheme,
                           "seeds": "request_seed(seed, key) per request", "greedy_check": self.greedy_check},
            "dtype": self.dtype,
            "device": str(self.device),
            "versions": prov["versions"],
            "git_sha": prov["git_sha"],
        }


def _cut(text: str, stops: Sequence[str]) -> str:
    """``text`` before the first occurrence of any stop string."""
    for s in stops:
        text = text.split(s)[0]
    return text
