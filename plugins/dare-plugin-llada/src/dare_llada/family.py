"""The LLaDA model family adapter (LLaDA-8B-Base/Instruct, LLaDA-1.5; arXiv 2502.09992, 2505.19223)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, ClassVar

from dare.components import ModelFamily, SpecialTokens

if TYPE_CHECKING:  # pragma: no cover - torch is imported by the methods that run the model, not by validation
    import torch

__all__ = ["LLaDAFamily", "LLADA_CHAT_TEMPLATE"]

#: LLaDA-8B-Instruct's template, made to honour ``add_generation_prompt`` (the release always appends
#: the assistant header).
LLADA_CHAT_TEMPLATE = (
    "{%- for message in messages -%}"
    "{%- if loop.first -%}{{ bos_token }}{%- endif -%}"
    "{{ '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n' + (message['content'] | trim) + '<|eot_id|>' }}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{ '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}{%- endif -%}"
)

_BASE = {
    "activation_type": "silu",
    "alibi": False,
    "alibi_bias_max": 8.0,
    "attention_dropout": 0.0,
    "attention_layer_norm": False,
    "attention_layer_norm_with_affine": True,
    "bias_for_layer_norm": False,
    "block_group_size": 1,
    "block_type": "llama",
    "embedding_dropout": 0.0,
    "flash_attention": False,
    "flash_attn_varlen": False,
    "include_bias": False,
    "include_qkv_bias": False,
    "init_cutoff_factor": None,
    "init_device": "cpu",
    "init_fn": "mitchell",
    "init_std": 0.02,
    "input_emb_norm": False,
    "layer_norm_type": "rms",
    "layer_norm_with_affine": True,
    "multi_query_attention": None,
    "precision": "amp_bf16",
    "residual_dropout": 0.0,
    "rms_norm_eps": 1e-05,
    "rope": True,
    "rope_full_precision": True,
    "rope_theta": 500000.0,
    "scale_logits": False,
    "use_cache": False,
    "weight_tying": False,
}

PRESETS: dict[str, dict[str, Any]] = {
    # docs/model-families.md §1.5: the CPU test size
    "tiny": {**_BASE, "d_model": 64, "n_heads": 4, "n_kv_heads": 4, "n_layers": 2, "mlp_hidden_size": 128,
             "mlp_ratio": 4, "max_sequence_length": 64},
    # the quickstart model: d_model 128, 4 layers, 4 heads (~0.86M parameters with the byte tokenizer)
    "quickstart": {**_BASE, "d_model": 128, "n_heads": 4, "n_kv_heads": 4, "n_layers": 4, "mlp_hidden_size": 344,
                   "mlp_ratio": 4, "max_sequence_length": 128},
    # LLaDA-8B architecture (for shape checks; never instantiated with weights in tests)
    "8b": {**_BASE, "d_model": 4096, "n_heads": 32, "n_kv_heads": 32, "n_layers": 32, "mlp_hidden_size": 12288,
           "mlp_ratio": 4, "max_sequence_length": 4096, "init_device": "meta"},
}


class LLaDAFamily(ModelFamily):
    """LLaDA: bidirectional Llama-style masked diffusion LM; position i scores token i."""

    name = "llada"
    model_types = ("llada",)
    attention = "full"
    pad_in_response = True
    lora_target_modules = ("q_proj", "k_proj", "v_proj", "attn_out", "ff_proj", "up_proj", "ff_out")
    lm_head_module = "model.transformer.ff_out"
    default_sampler = "llada"
    decoder_layer_class = "LLaDALlamaBlock"
    chat_template = LLADA_CHAT_TEMPLATE
    special_token_strings: ClassVar[dict[str, str]] = {
        "bos": "<|startoftext|>",
        "eos": "<|endoftext|>",
        "pad": "<|endoftext|>",
        "mask": "<|mdm_mask|>",
        "eot": "<|eot_id|>",
    }
    extra_special_tokens = ("<|start_header_id|>", "<|end_header_id|>")

    def config_class(self):
        from dare_llada.configuration_llada import LLaDAConfig

        return LLaDAConfig

    def model_class(self):
        from dare_llada.modeling_llada import LLaDAModelLM

        return LLaDAModelLM

    def presets(self) -> dict[str, dict[str, Any]]:
        return {k: dict(v) for k, v in PRESETS.items()}

    def new_config(self, preset: str, overrides: dict[str, Any], vocab_size: int, tokens: SpecialTokens):
        cfg = self.presets()[preset]
        cfg.update(
            vocab_size=vocab_size,
            embedding_size=vocab_size,
            mask_token_id=tokens.mask_id,
            eos_token_id=tokens.eos_id,
            pad_token_id=tokens.pad_id,
        )
        if tokens.bos_id is not None:
            cfg["bos_token_id"] = tokens.bos_id
        cfg.update(overrides)
        return self.config_class()(**cfg)

    def logits(self, model, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None) -> torch.Tensor:
        """``model(input_ids, attention_mask).logits``: LLaDA's logits are already aligned (i scores i).

        Left padding is handled by the additive key mask; positions are array indices, as in the
        official generator.
        """
        return model(input_ids=input_ids, attention_mask=attention_mask).logits

    def packed_logits(self, model, input_ids, position_ids, attention_mask, segment_start) -> torch.Tensor:
        """Logits ``[R, T, V]`` of packed rows (``ModelFamily.packed_logits``): the bool block-diagonal mask goes in
        as ``attention_bias`` and the per-example positions as ``position_ids`` (i scores i: no shift)."""
        return model(input_ids=input_ids, attention_bias=attention_mask, position_ids=position_ids).logits

    def kv_logits(self, model, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None, past=None,
                  start: int = 0, end: int | None = None, use_cache: bool = False):
        """The cached forward of Fast-dLLM's block-wise KV cache (contract: :mod:`dare.sampling.kv_cache`).

        ``past=None``: ``model(input_ids, attention_mask, use_cache)`` over the whole ``[B, L]`` sequence.
        Otherwise the model runs on ``input_ids[:, start:end]`` with ``replace_position`` marking those
        positions in ``past`` (keys of every other position come from ``past``; RoPE positions are array
        indices, as in :meth:`logits`).

        :returns: ``(logits [B, end - start, V] aligned, per-block (k, v) cache or None)``.
        :raises ValueError: ``past=None`` with a window other than the whole sequence.
        """
        import torch

        B, L = input_ids.shape
        end = L if end is None else end
        if past is None:
            if (start, end) != (0, L):
                raise ValueError("kv_logits without past runs the whole sequence (start=0, end=L)")
            out = model(input_ids=input_ids, attention_mask=attention_mask, use_cache=use_cache)
            return out.logits, out.cache
        replace = torch.zeros((B, L), dtype=torch.bool, device=input_ids.device)
        replace[:, start:end] = True
        out = model(input_ids=input_ids[:, start:end], attention_mask=attention_mask, past_key_values=past,
                    replace_position=replace, use_cache=use_cache)
        return out.logits, out.cache
