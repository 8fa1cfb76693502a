"""A DARE model and sampler behind a harness's text interface (no OpenCompass import here).

:class:`DareEngine` loads a DARE model directory or run directory (:func:`dare.modeling.load_model`), builds
a sampler component by name with params validated by the sampler's own ``Params`` model, and offers what an
evaluation harness asks of a language model:

* :meth:`DareEngine.generate`: completions for prompt strings, decoded exactly as ``dare eval`` decodes
  (:func:`dare.sampling.text.generate_texts`: left padding, one ``torch.Generator`` seeded once with ``seed``
  and continued across calls, completions cut at EOS/end-of-turn, mask tokens dropped), then cut at the first
  stop string. ``max_out_len`` follows :meth:`DareEngine.gen_length_for`.
* :meth:`DareEngine.nll_per_token`: a Monte-Carlo ELBO bound on the negative log-likelihood per token of each
  text (or of the part after its first ``mask_length`` tokens), the diffusion counterpart of the per-token loss
  an autoregressive harness model reports (:mod:`dare.diffusion.elbo`).
* :meth:`DareEngine.token_len`: the prompt's length in tokens, as :meth:`generate` tokenises it.
"""

from __future__ import annotations

import zlib
from collections.abc import Mapping, Sequence
from typing import Any

import torch

from dare.errors import DareError

__all__ = ["DareEngine", "DareHarnessError"]


class DareHarnessError(DareError, ValueError):
    """A harness setting DARE cannot honour (unknown sampler parameter, impossible length, ...); the message
    names the setting and the fix."""


def _sampler_spec(sampler: str | Mapping[str, Any] | None, sampler_params: Mapping[str, Any] | None):
    """``(name or None, params dict)`` from ``sampler="llada"`` / ``sampler=dict(name=..., params=...)``."""
    params = dict(sampler_params or {})
    if sampler is None or isinstance(sampler, str):
        return sampler, params
    if not isinstance(sampler, Mapping) or set(sampler) - {"name", "params"}:
        raise DareHarnessError(
            f"sampler must be a sampler name or dict(name=..., params={{...}}), got {sampler!r}"
        )
    return sampler.get("name"), {**dict(sampler.get("params") or {}), **params}


class DareEngine:
    """A loaded DARE model, its tokenizer, family, special ids and a sampler (module docstring).

    :param path: a model directory (official format), a LoRA adapter directory or a DARE run directory.
    :param sampler: a sampler name (default: the family's ``default_sampler``) or ``dict(name=, params=)``.
    :param sampler_params: the sampler's params (validated by its ``Params`` model; merged over ``sampler['params']``).
        ``gen_length`` is optional: without it the harness's maximum output length is used.
    :param dtype: ``float32``, ``bfloat16`` or ``float16``. :param device: default CUDA when available, else CPU.
    :param batch_size: prompts per sampler call (None: all prompts of a call at once, i.e. the harness's batch).
    :param seed: seeds the one generator all sampling draws from.
    :param chat_template: wrap each prompt as a user message through the tokenizer's chat template (with
        ``system_prompt`` first if given), as ``dare eval`` does with ``chat_template: true``.
    :param mc_samples: Monte-Carlo corruptions per text for :meth:`nll_per_token`.
    :raises dare.errors.CheckpointError: the model cannot be loaded.
    :raises DareHarnessError: unknown sampler, a parameter its ``Params`` rejects, or a sampler that cannot decode
        the family's attention kind.
    """

    def __init__(
        self,
        path: str,
        sampler: str | Mapping[str, Any] | None = None,
        sampler_params: Mapping[str, Any] | None = None,
        *,
        dtype: str = "float32",
        device: str | None = None,
        batch_size: int | None = None,
        seed: int = 0,
        chat_template: bool = False,
        system_prompt: str | None = None,
        mc_samples: int = 32,
    ):
        from dare.plugins.manager import get_registry

        if (batch_size is not None and batch_size < 1) or mc_samples < 1:
            raise DareHarnessError(f"batch_size and mc_samples must be >= 1 (got {batch_size}, {mc_samples})")
        name, params = _sampler_spec(sampler, sampler_params)
        registry = get_registry()
        self.sampler_params = params
        self._samplers: dict[int, Any] = {}
        self.gen_length_fixed = "gen_length" in params
        if name is not None:  # a named sampler's params are checked before the weights are loaded
            self._set_sampler(registry, name)
        self.lm = _load(path, dtype)
        self.device = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
        self.lm.model.to(self.device).eval()
        family = self.lm.family
        if name is None:
            self._set_sampler(registry, family.default_sampler)
        if family.attention not in self.sampler_cls.attention_kinds:
            raise DareHarnessError(
                f"sampler {self.sampler_name!r} decodes {'/'.join(self.sampler_cls.attention_kinds)}-attention families, "
                f"but model family {family.name!r} uses {family.attention} attention; use {family.default_sampler!r}"
            )
        self.batch_size = None if batch_size is None else int(batch_size)
        self.seed, self.mc_samples = int(seed), int(mc_samples)
        self.chat_template, self.system_prompt = bool(chat_template), system_prompt
        if self.chat_template and not getattr(self.lm.tokenizer, "chat_template", None):
            raise DareHarnessError("chat_template=True but the tokenizer has no chat template; set chat_template=False")
        self.generator = torch.Generator().manual_seed(self.seed)

    # ------------------------------------------------------------------ samplers and lengths
    def _set_sampler(self, registry, name: str) -> None:
        entry = registry.find("sampler", name)
        if entry is None:
            raise DareHarnessError(f"sampler: {registry.unknown_message('sampler', name)}")
        self.sampler_name, self.sampler_cls = entry.name, entry.cls
        # every parameter is validated now; without gen_length, rules tying it to others wait for max_out_len
        self.default_sampler = self._build(self.sampler_params, "sampler params",
                                           defer_cross_field=not self.gen_length_fixed)

    def _build(self, params: dict[str, Any], what: str, defer_cross_field: bool = False):
        """The sampler for ``params``; ``defer_cross_field``: None when only cross-field rules (``model_validator``
        errors, which have no field location) fail."""
        from pydantic import ValidationError

        try:
            return self.sampler_cls(params)
        except ValidationError as exc:
            if defer_cross_field and all(not e["loc"] for e in exc.errors()):
                return None
            why = "; ".join(f"{'.'.join(map(str, e['loc'])) or 'params'}: {e['msg'].removeprefix('Value error, ')}"
                            for e in exc.errors())
            fix = ("" if self.gen_length_fixed else "; set gen_length (at most the task's max_out_len) with params that "
                   "fit it in the sampler params")
            raise DareHarnessError(f"{what} of sampler {self.sampler_name!r} are invalid: {why}{fix}") from None

    def gen_length_for(self, max_out_len: int | None) -> int:
        """The sampler's ``gen_length`` (completion canvas, in tokens) for a harness's ``max_out_len``.

        * ``gen_length`` set in the sampler params: used as is, and it must be ``<= max_out_len`` (a diffusion
          sampler always fills its whole canvas, so a larger one could return more tokens than allowed);
        * otherwise ``gen_length = max_out_len``, validated by the sampler's ``Params`` (e.g. LLaDA's
          ``gen_length % block_length == 0``).

        :raises DareHarnessError: no length known, ``gen_length > max_out_len``, or ``max_out_len`` breaking a
            rule of the sampler (the message names the rule and the settings that would satisfy it).
        """
        fixed = self.default_sampler.params.gen_length if self.gen_length_fixed else None
        if max_out_len is None:
            if fixed is None and self.default_sampler is None:
                raise DareHarnessError(
                    f"no max_out_len given and the {self.sampler_name} sampler params set no gen_length; set either"
                )
            return int(fixed if fixed is not None else self.default_sampler.params.gen_length)
        max_out_len = int(max_out_len)
        if max_out_len < 1:
            raise DareHarnessError(f"max_out_len must be positive (got {max_out_len})")
        if fixed is not None:
            if fixed > max_out_len:
                raise DareHarnessError(
                    f"sampler gen_length {fixed} exceeds the task's max_out_len {max_out_len}: the {self.sampler_name} "
                    f"sampler always decodes gen_length tokens; lower gen_length to at most {max_out_len} (with a "
                    "block_length/steps that fit it), or raise max_out_len"
                )
            return int(fixed)
        return max_out_len

    def sampler_for(self, gen_length: int):
        """The sampler decoding ``gen_length`` tokens (built once per length).

        :raises DareHarnessError: ``gen_length`` breaks a rule of the sampler's ``Params``.
        """
        if self.default_sampler is not None and gen_length == self.default_sampler.params.gen_length:
            return self.default_sampler
        if gen_length not in self._samplers:
            self._samplers[gen_length] = self._build(
                {**self.sampler_params, "gen_length": gen_length},
                f"max_out_len {gen_length} (used as gen_length since the sampler params set none) and the sampler params",
            )
        return self._samplers[gen_length]

    # ------------------------------------------------------------------ the harness interface
    def prompt_text(self, text: str) -> str:
        """The text the model conditions on: ``text`` itself, or through the chat template (``dare.data.Prompter``)."""
        if not self.chat_template:
            return text
        from dare.data import Prompter

        return Prompter(self.lm.tokenizer, "{{ text }}", None, True, self.system_prompt).prompt({"text": text})

    @torch.no_grad()
    def generate(self, prompts: Sequence[str], max_out_len: int | None = None,
                 stop: Sequence[str] | None = None) -> list[str]:
        """One completion per prompt (module docstring). ``stop``: strings that end a completion (cut before them).

        :raises DareHarnessError: see :meth:`gen_length_for`.
        """
        from dare.sampling import DecodingBundle
        from dare.sampling.text import generate_texts

        if not prompts:
            return []
        sampler = self.sampler_for(self.gen_length_for(max_out_len))
        out = generate_texts(DecodingBundle.of(self.lm, sampler), [self.prompt_text(p) for p in prompts],
                             batch_size=self.batch_size or len(prompts), generator=self.generator)
        texts = out.texts
        for s in stop or ():
            if s:
                texts = [t.split(s, 1)[0] for t in texts]
        return texts

    def _ids(self, text: str) -> list[int]:
        return self.lm.tokenizer(text, add_special_tokens=False)["input_ids"]

    def token_len(self, text: str) -> int:
        """Tokens of ``text`` as :meth:`generate` and :meth:`nll_per_token` tokenise it (no added special tokens)."""
        return len(self._ids(self.prompt_text(text)))

    @torch.no_grad()
    def nll_per_token(self, texts: Sequence[str], mask_length: Sequence[int] | None = None) -> list[float]:
        """``-ELBO / L`` per text: an upper bound on its negative log-likelihood per scored token (nats).

        The scored tokens are all tokens of a text, or those after its first ``mask_length[i]`` tokens (the
        context, which stays visible). The ELBO is LLaDA's likelihood bound (arXiv 2502.09992 eq. (12); Appendix
        B.6 for conditional scoring) estimated with ``mc_samples`` stratified mask counts
        (:func:`dare.diffusion.elbo.sample_corruptions`, VRPO arXiv 2505.19223 §3), scored through the family's
        ``denoiser_logits`` (block families: the block-diffusion ELBO). Each text draws from its own generator
        seeded by ``(seed, crc32(text))``, so its score does not depend on the batch it is in.

        :returns: one float per text; ``0.0`` for a text with nothing to score.
        :raises DareHarnessError: ``mask_length`` of another length than ``texts``.
        """
        from dare.diffusion.elbo import Corruptions, elbo_estimate, elbo_terms, sample_corruptions

        if mask_length is not None and len(mask_length) != len(texts):
            raise DareHarnessError(f"mask_length has {len(mask_length)} entries for {len(texts)} texts")
        lm, scores, step = self.lm, [], self.batch_size or max(len(texts), 1)
        for start in range(0, len(texts), step):
            chunk = list(texts[start : start + step])
            ids = [self._ids(t) for t in chunk]
            width = max(1, max(len(x) for x in ids))
            # right padding: each text keeps positions 0..len-1, so its logits do not depend on the batch
            input_ids = torch.full((len(ids), width), lm.tokens.pad_id, dtype=torch.long)
            attn = torch.zeros((len(ids), width), dtype=torch.long)
            masks, p_masks, lengths = [], [], []
            for i, x in enumerate(ids):
                input_ids[i, : len(x)] = torch.tensor(x, dtype=torch.long)
                attn[i, : len(x)] = 1
                skip = min(int(mask_length[start + i]) if mask_length is not None else 0, len(x))
                eligible = torch.zeros((1, len(x)), dtype=torch.bool)
                eligible[:, skip:] = True
                g = torch.Generator().manual_seed(self.seed * 1_000_003 + zlib.crc32(chunk[i].encode("utf-8")))
                corr = sample_corruptions(eligible, self.mc_samples, "stratified", g)  # drawn on the text alone
                masks.append(torch.nn.functional.pad(corr.mask, (0, width - len(x))))
                p_masks.append(corr.p_mask)
                lengths.append(corr.lengths)
            corr = Corruptions(mask=torch.cat(masks).to(self.device), p_mask=torch.cat(p_masks).to(self.device),
                               lengths=torch.cat(lengths).to(self.device))
            input_ids, attn = input_ids.to(self.device), attn.to(self.device)
            denoise = lambda noisy: lm.family.denoiser_logits(lm.model, noisy, input_ids, attn)  # noqa: E731
            terms = elbo_terms(denoise, input_ids, corr, lm.tokens.mask_id)
            scores += [-float(v) or 0.0 for v in elbo_estimate(terms, corr.lengths, "length")]
        return scores


def _load(path: str, dtype: str):
    from dare.modeling import load_model

    return load_model(path, dtype=dtype)
