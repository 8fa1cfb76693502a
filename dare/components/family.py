"""The model-family component: checkpoint facts, special ids, attention kind and aligned logits."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, Literal

from dare.components.base import Component
from dare.errors import CheckpointError

if TYPE_CHECKING:  # pragma: no cover
    import torch


__all__ = ["SpecialTokens", "ModelFamily"]


@dataclass(frozen=True)
class SpecialTokens:
    """Token ids a diffusion LM needs. ``eot_id`` is the end-of-turn id (may equal ``eos_id``); ``mask_id`` is
    None for a family whose forward process has no mask token (``ModelFamily.forward_process == "uniform"``)."""

    mask_id: int | None
    eos_id: int
    pad_id: int
    eot_id: int | None = None
    bos_id: int | None = None

    @property
    def stop_ids(self) -> tuple[int, ...]:
        """Ids that end a completion (EOS and, where distinct, end-of-turn)."""
        ids = [self.eos_id]
        if self.eot_id is not None and self.eot_id != self.eos_id:
            ids.append(self.eot_id)
        return tuple(ids)


class ModelFamily(Component):
    """A dLLM architecture: checkpoint format, special ids, attention kind and logit alignment.

    Everything outside the family plugin asks the family for these facts; no objective or sampler
    branches on a family name. The contract an estimator relies on is :meth:`denoiser_logits`:
    logits ``[B, L, V]`` where position ``i`` scores token ``i`` of the *clean* sequence given the
    noisy input.
    """

    kind = "model_family"
    #: ``config.json`` ``model_type`` values this family loads.
    model_types: ClassVar[tuple[str, ...]] = ()
    #: ``"full"`` (bidirectional, LLaDA/Dream) or ``"block"`` (block-causal, SDAR/LLaDA2).
    attention: ClassVar[Literal["full", "block"]] = "full"
    #: The forward (corruption) process: ``"mask"`` replaces corrupted tokens by the mask token (absorbing
    #: diffusion, MDLM/LLaDA arXiv 2502.09992 eq. (1)); ``"uniform"`` by tokens drawn uniformly from the vocabulary
    #: (D3PM-uniform, arXiv 2107.03006 §3.1; :func:`dare.diffusion.forward.uniform_noise`), with no mask token.
    forward_process: ClassVar[Literal["mask", "uniform"]] = "mask"
    #: True when the decoder writes the completion in blocks that start at the padded prompt's end in every row
    #: (DiffusionGemma's canvases): RL rollouts then score with ``ScoringBatch.block_anchor = P``.
    blocks_from_prompt_end: ClassVar[bool] = False
    #: True when EOS padding after the answer is part of the response (LLaDA/Dream convention);
    #: False when responses are truncated at EOS and padding is excluded (block families).
    pad_in_response: ClassVar[bool] = True
    #: Linear-module names LoRA targets for ``target_modules: all-linear`` (LM head excluded).
    lora_target_modules: ClassVar[tuple[str, ...]] = ()
    #: Name of the LM-head module (excluded from ``all-linear`` unless asked).
    lm_head_module: ClassVar[str] = "lm_head"
    #: Name of the sampler that reproduces the family's official decoder.
    default_sampler: ClassVar[str] = ""
    #: Class name of one decoder layer (FSDP auto-wrap unit).
    decoder_layer_class: ClassVar[str] = ""
    #: Chat template (jinja) written into tokenizers that DARE creates for this family.
    chat_template: ClassVar[str] = ""
    #: Special-token strings for tokenizers DARE creates: keys mask, eos, pad, bos, eot.
    special_token_strings: ClassVar[dict[str, str]] = {}

    # ------------------------------------------------------------------ checkpoint facts
    def config_class(self) -> type:
        """The ``PretrainedConfig`` subclass (registered with ``AutoConfig``)."""
        raise NotImplementedError

    def model_class(self) -> type:
        """The ``PreTrainedModel`` subclass (registered with ``AutoModel``)."""
        raise NotImplementedError

    def model_class_for(self, config) -> type:
        """The model class for one checkpoint's ``config`` (a family with several ``model_types``, e.g. a dense
        and an MoE variant, overrides this); defaults to :meth:`model_class`."""
        return self.model_class()

    def presets(self) -> dict[str, dict[str, Any]]:
        """Named config presets (``tiny`` at least) as ``config.json`` key/value dicts.

        Special-token ids and ``vocab_size`` are filled in by :meth:`new_config` from the tokenizer.
        """
        return {}

    def new_config(self, preset: str, overrides: dict[str, Any], vocab_size: int, tokens: SpecialTokens):
        """Build a config for a fresh model from a preset, the tokenizer's size and special ids.

        :raises KeyError: unknown preset (callers turn it into a :class:`~dare.errors.SpecError`).
        """
        raise NotImplementedError

    #: More special tokens for tokenizers DARE creates (e.g. chat header tokens).
    extra_special_tokens: ClassVar[tuple[str, ...]] = ()

    def tokens_from_tokenizer(self, tokenizer) -> SpecialTokens:
        """Special ids from a tokenizer: its declared ``*_token`` or the family's token strings.

        :raises dare.errors.CheckpointError: the tokenizer has no mask token (nor EOS).
        """
        vocab = tokenizer.get_vocab()

        def lookup(role: str) -> int | None:
            declared = getattr(tokenizer, f"{role}_token", None) if role in ("bos", "eos", "pad", "mask") else None
            for tok in (declared, self.special_token_strings.get(role)):
                if isinstance(tok, str) and tok in vocab:
                    return int(vocab[tok])
            return None

        mask, eos = lookup("mask"), lookup("eos")
        if mask is None:
            want = self.special_token_strings.get("mask", "a mask token")
            raise CheckpointError(
                f"the tokenizer has no mask token ({want}); a {self.name} model needs one: add it as a special token "
                "and set mask_token in tokenizer_config.json"
            )
        if eos is None:
            raise CheckpointError(f"the tokenizer has no EOS token "
                                  f"({self.special_token_strings.get('eos', 'eos_token')})")
        pad = lookup("pad")
        return SpecialTokens(mask_id=mask, eos_id=eos, pad_id=eos if pad is None else pad, eot_id=lookup("eot"),
                             bos_id=lookup("bos"))

    def special_tokens(self, config, tokenizer) -> SpecialTokens:
        """Special ids of a checkpoint: ``config.json`` ids where present, else the tokenizer's.

        :raises dare.errors.CheckpointError: no mask token, or config and tokenizer disagree on it.
        """
        tok = self.tokens_from_tokenizer(tokenizer)
        mask = getattr(config, "mask_token_id", None)
        if mask is not None and int(mask) != tok.mask_id:
            raise CheckpointError(
                f"config.json mask_token_id {mask} differs from the tokenizer's mask token id {tok.mask_id}"
            )
        eos = getattr(config, "eos_token_id", None)
        if isinstance(eos, (list, tuple)):
            eos = eos[0] if eos else None
        pad = getattr(config, "pad_token_id", None)
        return SpecialTokens(
            mask_id=tok.mask_id,
            eos_id=tok.eos_id if eos is None else int(eos),
            pad_id=(tok.pad_id if pad is None else int(pad)),
            eot_id=tok.eot_id,
            bos_id=tok.bos_id,
        )


    def block_size(self, config) -> int | None:
        """Training block size of a block-diffusion family (``None`` for full attention)."""
        return None

    def validate_checkpoint(self, model_dir: str) -> None:
        """Check tensor names and shapes of a checkpoint against its config before loading.

        :raises dare.errors.CheckpointError: naming the first offending tensor.
        """

    # ------------------------------------------------------------------ forward passes
    def logits(self, model, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None) -> torch.Tensor:
        """Aligned logits ``[B, L, V]`` (float, model dtype) for ``input_ids`` ``[B, L]`` (int64).

        ``attention_mask`` ``[B, L]`` (1 = real token, 0 = left padding) follows the family's
        padding convention. Position ``i`` of the result scores token ``i``.
        """
        raise NotImplementedError

    def denoiser_logits(
        self,
        model,
        noisy_ids: torch.Tensor,
        clean_ids: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Aligned logits ``[B, L, V]`` for a corrupted sequence, as training objectives need them.

        Full-attention families run the noisy sequence alone. Block families run
        ``[noisy ; clean]`` with the block-diffusion mask (``dare.diffusion.block``) and return the
        noisy half. ``noisy_ids``/``clean_ids`` are ``[B, L]`` int64; ``attention_mask`` ``[B, L]``
        marks valid tokens.
        """
        return self.logits(model, noisy_ids, attention_mask)

    # ------------------------------------------------------------------ packed (padding-free) forwards
    def packed_logits(
        self,
        model,
        input_ids: torch.Tensor,
        position_ids: torch.Tensor,
        attention_mask: torch.Tensor | None,
        segment_start: torch.Tensor,
    ) -> torch.Tensor:
        """Aligned logits ``[R, T, V]`` of packed rows (:mod:`dare.diffusion.packing`): several examples per row.

        :param input_ids: ``[R, T]`` int64. :param position_ids: ``[R, T]`` int64, restarting at 0 in each segment.
        :param attention_mask: ``[R, 1, T, T]`` bool, True = query may attend key (block-diagonal over segments), or
            None when the model does not recompute layers: the forward then runs inside
            :func:`dare.diffusion.packing.packed_segments`, where the family's attention
            (:func:`dare.diffusion.packing.scaled_dot_product_attention`) applies each segment's own mask.
        :param segment_start: ``[R, T]`` bool, the first slot of each segment (a family whose logits are shifted,
            like Dream, must not shift across a segment boundary).

        :func:`dare.diffusion.packing.packed_denoiser_logits` builds these rows from a padded batch.
        :raises NotImplementedError: the family does not support packed training (``train.packing``).
        """
        raise NotImplementedError(f"model family {self.name!r} does not support packed training (train.packing)")

    @property
    def supports_packing(self) -> bool:
        """True when the family implements :meth:`packed_logits` (``train.packing: true`` is allowed)."""
        return type(self).packed_logits is not ModelFamily.packed_logits
