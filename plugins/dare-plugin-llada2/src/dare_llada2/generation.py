"""HF-native generation for LLaDA2: the release's ``model.generate(inputs, ...)``, decoded by DARE's ``llada2`` decoder.

The LLaDA2.0 and LLaDA2.1 releases give ``LLaDA2MoeModelLM`` a ``generate`` method with their own
signatures (docs/model-families.md §5.6): 2.0 ``generate(inputs, temperature, block_length, steps, gen_length,
top_p, top_k, eos_early_stop, minimal_topk, threshold, eos_id, mask_id)``; 2.1 adds ``editing_threshold``,
``max_post_steps`` and ``num_to_transfer``. Both take one prompt ``[1, Lp]`` and return the **generated tokens
only**, up to and including the first EOS. The two releases share ``model_type`` and ``config.json``, so
:class:`LLaDA2GenerationMixin` picks the decoder from the arguments: ``variant="2.1"``, or any 2.1-only
argument, selects 2.1 (:func:`dare_llada2.sampler.generate_v21`); otherwise 2.0
(:func:`dare_llada2.sampler.generate`). Both run :func:`dare_llada2.sampler.decode`, the loop of
:class:`~dare_llada2.sampler.LLaDA2Sampler`.

Because the release's return value is not transformers' (prompt + completion), a transformers-style call
(``input_ids=``, ``max_new_tokens=``, ``generation_config=``, ``do_sample=``, ...) raises
:class:`~dare.sampling.hf.GenerateArgumentError` explaining how to call it, so ``pipeline("text-generation")``
fails with that message rather than decoding a wrong text. The class name ends in ``GenerationMixin``, which
is how ``PreTrainedModel.can_generate()`` recognises a model that can generate.
"""

from __future__ import annotations

import torch

__all__ = ["LLaDA2GenerationMixin"]

#: The releases' default ids (``generate`` arguments): EOS ``<|endoftext|>`` and ``<|mask|>``.
RELEASE_EOS_ID, RELEASE_MASK_ID = 156892, 156895
_V21_ONLY = ("editing_threshold", "max_post_steps", "num_to_transfer", "official_soft_mask")
_TRANSFORMERS_STYLE = ("input_ids", "attention_mask", "max_new_tokens", "max_length", "generation_config", "do_sample",
                       "num_beams", "num_return_sequences", "pad_token_id", "bos_token_id", "eos_token_id")


class LLaDA2GenerationMixin:
    """The releases' ``generate()`` for LLaDA2 model classes (module docstring)."""

    @torch.no_grad()
    def generate(
        self,
        inputs: torch.Tensor | None = None,
        temperature: float = 0.0,
        block_length: int | None = None,
        steps: int = 32,
        gen_length: int = 2048,
        top_p: float | None = None,
        top_k: int | None = None,
        eos_early_stop: bool = False,
        minimal_topk: int = 1,
        threshold: float = 0.95,
        eos_id: int | None = None,
        mask_id: int | None = None,
        *,
        editing_threshold: float | None = None,
        max_post_steps: int | None = None,
        num_to_transfer: int | None = None,
        variant: str | None = None,
        use_cache: bool = True,
        official_t0_sampling: bool = False,
        official_soft_mask: bool | None = None,
        **kwargs,
    ) -> torch.Tensor:
        """Decode one prompt with LLaDA2's block decoder (2.0 threshold decoding or 2.1 token editing).

        Arguments and defaults are the releases' (2.1-only ones keyword-only; 2.1's defaults
        ``editing_threshold=0.9, max_post_steps=16, num_to_transfer=1`` apply when 2.1 is selected), except
        ``block_length`` (default: the model's training block size, ``config.block_size``, 32 in the releases),
        ``eos_id`` / ``mask_id`` (default: ``config.eos_token_id`` / ``config.mask_token_id``, else the
        releases' 156892 / 156895) and temperature 0, which is greedy in both variants (2.0's release samples at
        T = 1 there; ``official_t0_sampling=True`` reproduces it). ``use_cache`` only changes the speed.
        Sampling draws from torch's global RNG, as the releases.

        :param inputs: ``[1, Lp]`` int64 prompt.
        :param variant: ``"2.0"`` or ``"2.1"``; default 2.1 when a 2.1-only argument is given, else 2.0.
        :returns: ``[1, n]`` int64, the generated tokens up to and including the first EOS (all ``gen_length``
            without EOS); after a 2.0 early stop the release's ``x[:, :eos + 1]`` with the prompt.
        :raises dare.sampling.hf.GenerateArgumentError: a transformers-style call or unknown argument (the message
            shows the release's call), or 2.1-only arguments with ``variant="2.0"``.
        :raises dare.errors.DareError: a batch of more than one prompt, or invalid settings.
        """
        from dare.sampling.hf import GenerateArgumentError, config_id
        from dare_llada2.family import LLaDA2Family
        from dare_llada2.sampler import generate, generate_v21

        owner = f"{type(self).__name__}.generate"
        if kwargs:
            hf = sorted(k for k in kwargs if k in _TRANSFORMERS_STYLE)
            what = (f"transformers-style arguments ({', '.join(hf)}): LLaDA2's generate() is the release's, which takes "
                    "one prompt and returns the generated tokens only (up to and including the first EOS), not prompt + "
                    "completion, so transformers' generate() conventions and pipeline('text-generation') do not apply"
                    if hf else f"unknown arguments {', '.join(sorted(kwargs))}")
            raise GenerateArgumentError(
                f"{owner} got {what}. Call model.generate(prompt_ids [1, Lp], gen_length=256, block_length=32, "
                "threshold=0.95) and decode its output, or decode batches with DARE's llada2 sampler "
                "(dare generate --model DIR --sampler llada2, or dare_llada2.sampler.LLaDA2Sampler)"
            )
        if not isinstance(inputs, torch.Tensor) or inputs.dtype != torch.long:
            raise GenerateArgumentError(f"{owner}: inputs must be the prompt's token ids [1, Lp] (int64)")
        extras = {k: v for k, v in (("editing_threshold", editing_threshold), ("max_post_steps", max_post_steps),
                                    ("num_to_transfer", num_to_transfer), ("official_soft_mask", official_soft_mask))
                  if v is not None}
        variant = variant if variant is None else str(variant)
        if variant is None:
            variant = "2.1" if extras else "2.0"
        if variant not in ("2.0", "2.1"):
            raise GenerateArgumentError(f"{owner}: variant must be '2.0' or '2.1' (got {variant!r})")
        if variant == "2.0" and extras:
            raise GenerateArgumentError(
                f"{owner}: {', '.join(extras)} only apply to LLaDA2.1's decoder; pass variant='2.1' or remove them"
            )
        if variant == "2.1" and official_t0_sampling:
            raise GenerateArgumentError(f"{owner}: official_t0_sampling only applies to LLaDA2.0's decoder (variant='2.0')")
        config = self.config
        common = dict(
            temperature=temperature,
            block_length=block_length or LLaDA2Family().block_size(config),
            steps=steps,
            gen_length=gen_length,
            top_p=top_p,
            top_k=top_k,
            eos_early_stop=eos_early_stop,
            minimal_topk=minimal_topk,
            threshold=threshold,
            eos_id=int(eos_id) if eos_id is not None else config_id(config, "eos_token_id", RELEASE_EOS_ID),
            mask_id=int(mask_id) if mask_id is not None else config_id(config, "mask_token_id", RELEASE_MASK_ID),
            use_cache=use_cache,
        )
        if variant == "2.0":
            return generate(self, inputs, official_t0_sampling=official_t0_sampling, **common)
        return generate_v21(self, inputs, **{**dict(editing_threshold=0.9, max_post_steps=16, num_to_transfer=1,
                                                   official_soft_mask=False), **extras}, **common)
