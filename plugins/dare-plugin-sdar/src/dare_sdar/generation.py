"""HF-native generation for SDAR: the release's ``block_diffusion_generate`` as a method, and ``generate()``.

SDAR's release decodes with the function ``block_diffusion_generate(model, prompt, mask_id, gen_length,
block_length, denoising_steps, temperature, top_k, top_p, remasking_strategy, confidence_threshold,
stopping_criteria_idx)`` of JetAstra/SDAR ``generate.py`` (docs/model-families.md §3.5); its model class only
inherits transformers' autoregressive ``generate()``, which does not decode a block-diffusion model.
:class:`SDARGenerationMixin` gives DARE's SDAR classes

* ``block_diffusion_generate(prompt, ...)``: that function as a method (same arguments, defaults and return
  value; :func:`dare_sdar.sampler.block_diffusion_generate`), with ``mask_id`` defaulting to
  ``config.mask_token_id``;
* ``generate(input_ids, attention_mask, max_new_tokens=..., ...)``: a transformers-style call
  (:mod:`dare.sampling.hf`) decoded by :class:`dare_sdar.sampler.SDARSampler` (left-padded batches, greedy at
  temperature 0), returning ``[B, Lp + max_new_tokens]`` like transformers, so
  ``transformers.pipeline("text-generation")`` works.

The class name ends in ``GenerationMixin``, which is how ``PreTrainedModel.can_generate()`` recognises a
model that can generate.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

__all__ = ["SDARGenerationMixin"]


def _mask_id(model, mask_id: int | None, owner: str) -> int:
    from dare.sampling.hf import GenerateArgumentError, config_id

    value = mask_id if mask_id is not None else config_id(model.config, "mask_token_id")
    if value is None:
        raise GenerateArgumentError(
            f"{owner}: no mask token id: config.json has no mask_token_id (the SDAR-MoE releases have none); pass "
            "mask_id=tokenizer.mask_token_id"
        )
    return int(value)


class SDARGenerationMixin:
    """``block_diffusion_generate()`` and ``generate()`` for SDAR model classes (module docstring)."""

    @torch.no_grad()
    def block_diffusion_generate(
        self,
        prompt,
        mask_id: int | None = None,
        gen_length: int = 128,
        block_length: int = 8,
        denoising_steps: int = 8,
        temperature: float = 1.0,
        top_k: int = 0,
        top_p: float = 1.0,
        remasking_strategy: str = "low_confidence_dynamic",
        confidence_threshold: float = 0.85,
        stopping_criteria_idx: list[int] | int | None = None,
        *,
        use_cache: bool = True,
        generator: torch.Generator | None = None,
    ) -> torch.Tensor:
        """The release's ``block_diffusion_generate(model, prompt, ...)`` as a method (JetAstra/SDAR ``generate.py``;
        SDAR, arXiv 2510.06303 §3); see :func:`dare_sdar.sampler.block_diffusion_generate` for the decoder and its
        documented deviations (temperature 0 is greedy; the release's ``top_k=1`` emulation is ``temperature=1,
        top_k=1``).

        :param prompt: ``[B, Lp]`` int64 prompts without padding, or the release's tokenizer output mapping.
        :param mask_id: default ``config.mask_token_id``.
        :returns: ``[B, ceil((Lp + gen_length) / block_length) * block_length]`` int64: prompt, generated blocks,
            mask tokens after a stop.
        :raises dare.sampling.hf.GenerateArgumentError: no mask token id.
        :raises dare_sdar.errors.SDARInputError: bad arguments (before any forward pass).
        """
        from dare_sdar.sampler import block_diffusion_generate

        return block_diffusion_generate(
            self, prompt, _mask_id(self, mask_id, f"{type(self).__name__}.block_diffusion_generate"),
            gen_length=gen_length, block_length=block_length, denoising_steps=denoising_steps, temperature=temperature,
            top_k=top_k, top_p=top_p, remasking_strategy=remasking_strategy, confidence_threshold=confidence_threshold,
            stopping_criteria_idx=stopping_criteria_idx, use_cache=use_cache, generator=generator,
        )

    @torch.no_grad()
    def generate(
        self,
        inputs: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        *,
        block_length: int | None = None,
        denoising_steps: int | None = None,
        remasking_strategy: str = "low_confidence_dynamic",
        confidence_threshold: float = 0.9,
        stop_ids: Sequence[int] | None = None,
        mask_id: int | None = None,
        use_cache: bool = True,
        generator: torch.Generator | None = None,
        **kwargs,
    ) -> torch.Tensor:
        """Decode ``max_new_tokens`` tokens after each (left-padded) prompt with DARE's ``sdar`` sampler.

        ``max_new_tokens`` (default 256, the sampler's ``gen_length``) must be a multiple of ``block_length``
        (default: the model's training block size, ``config.block_size``, 4 for SDAR); ``denoising_steps``
        defaults to ``block_length``. ``do_sample=False`` (or no sampling argument) is greedy; ``do_sample=True``
        samples at ``temperature`` with ``top_k``/``top_p``. A row stops after the block that produced a stop id
        (``stop_ids``, default ``config.eos_token_id``); its later positions stay mask tokens, as the sampler
        leaves them.

        :param inputs: ``[B, Lp]`` int64 (``input_ids=`` also works); ``attention_mask`` ``[B, Lp]``, 0 for left padding.
        :returns: ``[B, Lp + max_new_tokens]`` int64 = ``SDARSampler(...).generate(...).sequences``.
        :raises dare.sampling.hf.GenerateArgumentError: an unsupported argument or sampler settings its rules reject
            (the message names them).
        """
        from dare.components import SpecialTokens
        from dare.sampling.hf import GenerateArgumentError, build_sampler, config_id, parse_generate_call
        from dare_sdar.family import SDARFamily
        from dare_sdar.sampler import SDARSampler

        owner = f"{type(self).__name__}.generate"
        call = parse_generate_call(inputs, {"attention_mask": attention_mask, **kwargs}, owner=owner,
                                   sampling=("temperature", "top_k", "top_p"),
                                   hint="The release's decoder is model.block_diffusion_generate(prompt, ...).")
        family = SDARFamily()
        block = block_length or family.block_size(self.config)
        params = dict(
            gen_length=call.max_new_tokens or 256,
            block_length=block,
            denoising_steps=denoising_steps or block,
            temperature=call.temperature or 0.0,
            top_k=call.top_k or 0,
            top_p=call.top_p or 1.0,
            remasking=remasking_strategy,
            confidence_threshold=confidence_threshold,
            use_cache=use_cache,
        )
        sampler = build_sampler(SDARSampler, params, owner)
        eos = config_id(self.config, "eos_token_id")
        stops = [int(t) for t in stop_ids] if stop_ids is not None else ([] if eos is None else [eos])
        if not 1 <= len(stops) <= 2:
            raise GenerateArgumentError(
                f"{owner}: stop_ids must hold one or two ids (EOS, end-of-turn), got {stops or 'none'} (config.json has "
                "no eos_token_id); pass stop_ids=[tokenizer.eos_token_id]"
            )
        tokens = SpecialTokens(mask_id=_mask_id(self, mask_id, owner), eos_id=stops[0],
                               pad_id=config_id(self.config, "pad_token_id", stops[0]),
                               eot_id=stops[1] if len(stops) > 1 else None)
        out = sampler.generate(self, family, tokens, call.input_ids, call.attention_mask, generator=generator)
        return out.sequences
