"""The Dream model family adapter (Dream-v0-Base/Instruct-7B, arXiv 2508.15487; DiffuCoder, arXiv 2506.20639).

Dream is a masked diffusion LM initialised from Qwen2.5 that keeps the AR alignment of its
initialisation: the raw output at position ``j`` is the distribution of token ``j+1``. This adapter
is the single place where that is undone (docs/model-families.md §2.3; DARE
``verl/trainer/dream_fsdp_sft_trainer.py`` ``shift_logits``, HKUNLP Dream ``generation_utils._sample``):
:meth:`DreamFamily.logits` returns ``concat(raw[:, :1], raw[:, :-1])`` so position ``i`` scores token
``i`` for every objective and sampler. Left padding follows the official generator: positions
``cumsum(mask) - 1`` (pads set to 1) and the bool mask ``m_q & m_k`` (docs/model-families.md §2.4).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, ClassVar

from dare.components import ModelFamily, SpecialTokens

if TYPE_CHECKING:  # pragma: no cover - torch is imported by the functions that run the model, not by validation
    import torch

__all__ = ["DreamFamily", "DREAM_CHAT_TEMPLATE", "shift_logits", "left_padding_inputs"]

#: Qwen2.5 ChatML as in Dream-v0-Instruct-7B's tokenizer_config.json, without the tool-call branches:
#: a default system turn when none is given, ``<|im_start|>{role}\n{content}<|im_end|>\n`` per turn,
#: and ``<|im_start|>assistant\n`` when ``add_generation_prompt``.
DREAM_CHAT_TEMPLATE = (
    "{%- if not messages or messages[0]['role'] != 'system' -%}"
    "{{ '<|im_start|>system\\nYou are a helpful assistant.<|im_end|>\\n' }}"
    "{%- endif -%}"
    "{%- for message in messages -%}"
    "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{ '<|im_start|>assistant\\n' }}{%- endif -%}"
)

_ARCH_7B = {
    "hidden_size": 3584,
    "intermediate_size": 18944,
    "num_hidden_layers": 28,
    "num_attention_heads": 28,
    "num_key_value_heads": 4,
    "max_position_embeddings": 131072,
    "max_window_layers": 28,
}

_COMMON = {
    "attention_dropout": 0.0,
    "hidden_act": "silu",
    "initializer_range": 0.02,
    "rms_norm_eps": 1e-06,
    "rope_scaling": None,
    "rope_theta": 1000000.0,
    "sliding_window": None,
    "tie_word_embeddings": False,
    "use_cache": False,
    "use_mrope": False,
    "use_sliding_window": False,
}

PRESETS: dict[str, dict[str, Any]] = {
    # docs/model-families.md §2.5: the CPU test size (GQA 4/2, head_dim 16)
    "tiny": {**_COMMON, "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4,
             "num_key_value_heads": 2, "max_position_embeddings": 128, "max_window_layers": 2},
    # Dream-v0-Instruct-7B's config.json (for shape checks; never instantiated with weights in tests)
    "7b": {**_COMMON, **_ARCH_7B, "use_cache": True, "vocab_size": 152064, "mask_token_id": 151666,
           "bos_token_id": 151643, "eos_token_id": 151643, "pad_token_id": 151643},
}


def shift_logits(logits: torch.Tensor) -> torch.Tensor:
    """Align Dream's raw logits: ``out[:, 0] = raw[:, 0]``, ``out[:, i] = raw[:, i - 1]`` for ``i >= 1``.

    Position 0 keeps its own output (it is always a prompt token, never a target).

    :param logits: ``[B, L, V]`` raw model logits (position ``j`` predicts token ``j + 1``).
    :returns: ``[B, L, V]`` aligned logits, same dtype (a new tensor).
    """
    import torch

    return torch.cat([logits[:, :1], logits[:, :-1]], dim=1)


def left_padding_inputs(attention_mask: torch.Tensor | None) -> tuple[torch.Tensor | None, torch.Tensor | None]:
    """Model inputs for a left-padded batch, as Dream's official generator builds them.

    :param attention_mask: ``[B, L]`` (1 real token, 0 left padding) or None.
    :returns: ``(mask, position_ids)``: ``(None, None)`` when there is no padding (full attention,
        positions ``0..L-1``); else the bool ``[B, 1, L, L]`` mask ``m_q & m_k`` and int64
        ``[B, L]`` positions ``cumsum(mask) - 1`` with padding positions set to 1.
    """
    if attention_mask is None or not bool((attention_mask == 0).any()):
        return None, None
    import torch

    keep = attention_mask.to(torch.bool)
    position_ids = attention_mask.long().cumsum(-1) - 1
    position_ids = position_ids.masked_fill(~keep, 1)
    return keep[:, None, None, :] & keep[:, None, :, None], position_ids


class DreamFamily(ModelFamily):
    """Dream / DiffuCoder: bidirectional Qwen2.5 masked diffusion LM; raw position j predicts token j+1."""

    name = "dream"
    model_types = ("Dream",)
    attention = "full"
    pad_in_response = True
    lora_target_modules = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
    lm_head_module = "lm_head"
    default_sampler = "dream"
    decoder_layer_class = "DreamDecoderLayer"
    chat_template = DREAM_CHAT_TEMPLATE
    special_token_strings: ClassVar[dict[str, str]] = {
        "bos": "<|beginoftext|>",
        "eos": "<|endoftext|>",
        "pad": "<|endoftext|>",
        "mask": "<|mask|>",
        "eot": "<|im_end|>",
    }
    extra_special_tokens = ("<|im_start|>",)

    def config_class(self):
        from dare_dream.configuration_dream import DreamConfig

        return DreamConfig

    def model_class(self):
        from dare_dream.modeling_dream import DreamModel

        return DreamModel

    def presets(self) -> dict[str, dict[str, Any]]:
        return {k: dict(v) for k, v in PRESETS.items()}

    def new_config(self, preset: str, overrides: dict[str, Any], vocab_size: int, tokens: SpecialTokens):
        """A ``DreamConfig`` from a preset with the tokenizer's size and ids.

        As in the release, ``bos_token_id`` is the EOS id (``<|endoftext|>``), not the tokenizer's
        ``<|beginoftext|>``.

        :raises KeyError: unknown preset.
        """
        cfg = self.presets()[preset]
        cfg.update(
            vocab_size=vocab_size,
            mask_token_id=tokens.mask_id,
            bos_token_id=tokens.eos_id,
            eos_token_id=tokens.eos_id,
            pad_token_id=tokens.pad_id,
        )
        cfg.update(overrides)
        return self.config_class()(**cfg)

    def logits(self, model, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None) -> torch.Tensor:
        """Aligned logits ``[B, L, V]`` (model dtype): the raw output shifted right by one.

        :param input_ids: ``[B, L]`` int64.
        :param attention_mask: ``[B, L]`` (1 real, 0 left padding) or None; with padding the model
            gets the official generator's 4-D bool mask and ``cumsum`` positions
            (:func:`left_padding_inputs`).
        """
        mask, position_ids = left_padding_inputs(attention_mask)
        if mask is None:
            raw = model(input_ids=input_ids).logits
        else:
            raw = model(input_ids=input_ids, attention_mask=mask, position_ids=position_ids).logits
        return shift_logits(raw)

    def packed_logits(self, model, input_ids, position_ids, attention_mask, segment_start) -> torch.Tensor:
        """Aligned logits ``[R, T, V]`` of packed rows (``ModelFamily.packed_logits``): the model with the packed
        positions and block-diagonal bool mask, then the shift of :func:`shift_logits` applied per segment (the
        first token of each example keeps its own output instead of the previous example's last one; Dream SFT
        shifts per sample, docs/algorithms.md §0 "Dream logit shift")."""
        import torch

        raw = model(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids).logits
        return torch.where(segment_start[..., None], raw, shift_logits(raw))

    def kv_logits(self, model, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None, past=None,
                  start: int = 0, end: int | None = None, use_cache: bool = False):
        """The cached forward of Fast-dLLM's block-wise KV cache (contract: :mod:`dare.sampling.kv_cache`).

        ``past=None``: the forward of :meth:`logits` over the whole ``[B, L]`` sequence (same inputs, so
        the same logits), returning the cache when ``use_cache``. Otherwise the model runs on positions
        ``[start - 1, end)``: the extra position ``start - 1`` supplies the raw output that scores token
        ``start`` (Dream's logits are shifted), so the aligned logits of the window are exact functions of
        the window and the cache. Fast-dLLM's Dream code runs ``[start, end)`` instead and shifts inside
        the window, which gives position ``start`` its own (next-token) output; it works around that by
        committing position ``start`` at the block's refresh step. Positions and the padding mask follow
        :func:`left_padding_inputs` computed on the whole sequence.

        :returns: ``(logits [B, end - start, V] aligned, per-layer (k, v) cache (keys after RoPE) or None)``.
        :raises ValueError: ``past=None`` with a window other than the whole sequence.
        """
        import torch

        B, L = input_ids.shape
        end = L if end is None else end
        mask, position_ids = left_padding_inputs(attention_mask)
        if past is None:
            if (start, end) != (0, L):
                raise ValueError("kv_logits without past runs the whole sequence (start=0, end=L)")
            out = model(input_ids=input_ids, attention_mask=mask, position_ids=position_ids, use_cache=use_cache)
            return shift_logits(out.logits), out.cache
        first = max(start - 1, 0)
        replace = torch.zeros((B, L), dtype=torch.bool, device=input_ids.device)
        replace[:, first:end] = True
        if mask is not None:
            mask = mask[:, :, first:end]
            position_ids = position_ids[:, first:end]
        out = model(input_ids=input_ids[:, first:end], attention_mask=mask, position_ids=position_ids,
                    past_key_values=past, replace_position=replace, use_cache=use_cache)
        raw = out.logits
        logits = shift_logits(raw) if start == 0 else raw[:, : end - start]
        return logits, out.cache
