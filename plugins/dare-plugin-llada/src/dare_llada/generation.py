"""HF-native generation for LLaDA: ``model.generate(...)`` decodes with DARE's ``llada`` sampler.

LLaDA's release has no generation method on its model class: its entry point is the function
``generate(model, prompt, attention_mask, steps, gen_length, block_length, temperature, cfg_scale,
remasking, mask_id, ...)`` of ML-GSAI/LLaDA ``generate.py`` (docs/model-families.md §1.7), which
:func:`dare_llada.sampler.generate` reproduces. :class:`LLaDAGenerationMixin` makes that function a
method with the same arguments (``model.generate(prompt, attention_mask, steps=..., gen_length=...)``)
which also reads a transformers-style call (``input_ids=``, ``max_new_tokens=``, ``do_sample=``,
``generation_config=``; :mod:`dare.sampling.hf`), so ``transformers.pipeline("text-generation")`` works.
It runs :class:`dare_llada.sampler.LLaDASampler`, so it returns exactly what the DARE sampler returns
for the same settings. The class name ends in ``GenerationMixin``, which is how transformers'
``PreTrainedModel.can_generate()`` recognises a model that can generate.
"""

from __future__ import annotations

import torch

__all__ = ["LLaDAGenerationMixin"]

#: The release's hard-coded ids (generate.py defaults): mask, EOS, end-of-turn.
RELEASE_MASK_ID, RELEASE_EOS_ID, RELEASE_EOT_ID = 126336, 126081, 126348


class LLaDAGenerationMixin:
    """``generate()`` for LLaDA model classes (module docstring)."""

    @torch.no_grad()
    def generate(
        self,
        inputs: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        steps: int | None = None,
        gen_length: int | None = None,
        block_length: int | None = None,
        temperature: float | None = None,
        cfg_scale: float = 0.0,
        remasking: str = "low_confidence",
        mask_id: int | None = None,
        logits_eos_inf: bool = False,
        confidence_eos_eot_inf: bool = False,
        *,
        generator: torch.Generator | None = None,
        **kwargs,
    ) -> torch.Tensor:
        """Decode ``gen_length`` tokens after each prompt with LLaDA's semi-autoregressive low-confidence remasking.

        Arguments are the release's ``generate(model, prompt, ...)`` ones (ML-GSAI/LLaDA ``generate.py``;
        arXiv 2502.09992 §2.4, Appendix B.3), except that the lengths default from each other: ``gen_length``
        = ``max_new_tokens`` if given, else 128; ``block_length`` = ``gen_length`` (one block); ``steps`` =
        ``gen_length`` (the release's 128/128/128 when nothing is given). ``temperature`` defaults to 0
        (greedy) unless ``do_sample=True``. ``mask_id`` defaults to ``config.mask_token_id`` (126336 in the
        release); EOS/EOT ids (for ``logits_eos_inf`` / ``confidence_eos_eot_inf``) come from the config, else
        the release's 126081/126348. ``generator`` seeds the Gumbel noise and random remasking (None: the
        global RNG, as the release).

        :param inputs: ``[B, Lp]`` int64 prompts, left-padded when ``attention_mask`` ``[B, Lp]`` has zeros
            (``input_ids=`` also works).
        :returns: ``[B, Lp + gen_length]`` int64: the prompts followed by the completions (EOS-padded after the
            answer, as LLaDA is trained), i.e. ``LLaDASampler(...).generate(...).sequences``.
        :raises dare.sampling.hf.GenerateArgumentError: an argument the sampler has no counterpart for, or
            ``gen_length`` and ``max_new_tokens`` that disagree.
        :raises dare.errors.DareError: lengths that break the sampler's rules (``gen_length`` a multiple of
            ``block_length``, ``steps`` a multiple of the number of blocks).
        """
        from dare.components import SpecialTokens
        from dare.sampling.hf import GenerateArgumentError, build_sampler, config_id, parse_generate_call
        from dare_llada.family import LLaDAFamily
        from dare_llada.sampler import LLaDASampler

        owner = f"{type(self).__name__}.generate"
        if temperature is not None:
            kwargs["temperature"] = temperature
        call = parse_generate_call(inputs, {"attention_mask": attention_mask, **kwargs}, owner=owner)
        if gen_length is not None and call.max_new_tokens is not None and gen_length != call.max_new_tokens:
            raise GenerateArgumentError(
                f"{owner}: gen_length={gen_length} and max_new_tokens={call.max_new_tokens} disagree; pass one of them"
            )
        gen_length = gen_length or call.max_new_tokens or 128
        params = dict(
            gen_length=gen_length,
            block_length=block_length or gen_length,
            steps=steps or gen_length,
            temperature=call.temperature or 0.0,
            cfg_scale=cfg_scale,
            remasking=remasking,
            logits_eos_inf=logits_eos_inf,
            confidence_eos_eot_inf=confidence_eos_eot_inf,
        )
        sampler = build_sampler(LLaDASampler, params, owner)
        config = self.config
        eos = config_id(config, "eos_token_id", RELEASE_EOS_ID)
        vocab = int(getattr(config, "embedding_size", None) or getattr(config, "vocab_size", 0) or 0)
        tokens = SpecialTokens(
            mask_id=int(mask_id) if mask_id is not None else config_id(config, "mask_token_id", RELEASE_MASK_ID),
            eos_id=eos,
            pad_id=config_id(config, "pad_token_id", eos),
            eot_id=config_id(config, "eot_token_id", RELEASE_EOT_ID if vocab > RELEASE_EOT_ID else None),
        )
        out = sampler.generate(self, LLaDAFamily(), tokens, call.input_ids, call.attention_mask, generator=generator)
        return out.sequences

