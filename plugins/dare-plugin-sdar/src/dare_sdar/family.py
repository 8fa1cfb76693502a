"""The SDAR model family adapter: dense ``sdar`` and MoE ``sdar_moe`` (arXiv 2510.06303).

SDAR is a block-diffusion LM: at inference blocks of tokens are denoised left to right, bidirectional
inside a block and causal across blocks, with a KV cache of committed blocks (:mod:`dare_sdar.sampler`).
Training runs ``[x_t ; x_0]`` under the block-diffusion mask (:mod:`dare.diffusion.block`), so every noisy
block is denoised given the clean earlier blocks, exactly the state the decoder sees.

Family facts:

* attention ``"block"``; training block size ``config.block_size`` (4 in every dense release). The MoE
  release has no ``block_size`` key: :data:`DEFAULT_BLOCK_SIZE` (4, what SDAR-30B-A3B was trained and is
  decoded with) is used;
* responses end at EOS and padding is excluded (``pad_in_response = False``);
* mask id from ``config.mask_token_id``, else the tokenizer's ``<|MASK|>`` (the MoE release has none);
  EOS ``<|endoftext|>``, end of turn ``<|im_end|>`` (both stop a completion);
* logits are aligned: position ``i`` scores token ``i``.

Left-padded batches (``attention_mask`` with leading zeros) are left-aligned before the forward (row
``b`` rolled left by its padding, then rolled back), so blocks and RoPE positions count from each row's
first real token, as in the release's training (blocks from the start of the prompt) and decoding.
"""

from __future__ import annotations

from typing import Any, ClassVar

import torch

from dare.components import ModelFamily, SpecialTokens
from dare.diffusion.block import block_causal_mask, block_diffusion_inputs, leading_padding, roll_rows

__all__ = ["SDARFamily", "SDAR_CHAT_TEMPLATE", "DEFAULT_BLOCK_SIZE", "PRESETS", "block_logits"]

#: Block size when a config has no ``block_size`` key (the SDAR-30B-A3B release).
DEFAULT_BLOCK_SIZE = 4

#: Qwen3 ChatML for tokenizers DARE creates: no default system turn; ``<|im_start|>{role}\n{content}<|im_end|>\n``
#: per turn; generation prompt ``<|im_start|>assistant\n`` plus an empty think block when
#: ``enable_thinking=False``. It renders plain conversations like the release's template (which also
#: re-formats ``<think>`` content of assistant turns and tool calls; not needed for DARE's data).
SDAR_CHAT_TEMPLATE = (
    "{%- for message in messages -%}"
    "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}"
    "{{ '<|im_start|>assistant\\n' }}"
    "{%- if enable_thinking is defined and enable_thinking is false -%}{{ '<think>\\n\\n</think>\\n\\n' }}{%- endif -%}"
    "{%- endif -%}"
)

_COMMON: dict[str, Any] = {
    "hidden_act": "silu",
    "rms_norm_eps": 1e-6,
    "rope_theta": 1000000.0,
    "attention_bias": False,
    "attention_dropout": 0.0,
    "tie_word_embeddings": False,
    "use_sliding_window": False,
    "sliding_window": None,
    "initializer_range": 0.02,
    "use_cache": False,
    "vocab_size": 151936,
    "block_size": 4,
}
# the dense release's training toggles, kept so the official remote code can load a DARE checkpoint
_DENSE = {**_COMMON, "model_type": "sdar", "fuse_cross_entropy": True, "micro_forward": False, "skip_checkpoint": False,
          "ep_size": 1, "use_deepep": False, "debug": False}
_MOE = {
    **_COMMON,
    "model_type": "sdar_moe",
    "decoder_sparse_step": 1,
    "mlp_only_layers": [],
    "norm_topk_prob": True,
    "output_router_logits": False,
    "router_aux_loss_coef": 0.001,
}

#: ``config.json`` presets. ``tiny``/``tiny-moe``: the CPU test sizes of docs/model-families.md §3.6/§4.4
#: (head_dim 32 != hidden/heads on purpose); the others: the released architectures (shape checks).
PRESETS: dict[str, dict[str, Any]] = {
    "tiny": {**_DENSE, "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4,
             "num_key_value_heads": 2, "head_dim": 32, "max_position_embeddings": 128, "max_window_layers": 2},
    "tiny-moe": {**_MOE, "hidden_size": 64, "intermediate_size": 128, "moe_intermediate_size": 32, "num_experts": 8,
                 "num_experts_per_tok": 2, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
                 "head_dim": 32, "max_position_embeddings": 128, "max_window_layers": 2},
    "1.7b": {**_DENSE, "hidden_size": 2048, "intermediate_size": 6144, "num_hidden_layers": 28, "num_attention_heads": 16,
             "num_key_value_heads": 8, "head_dim": 128, "max_position_embeddings": 32768, "max_window_layers": 28},
    "4b": {**_DENSE, "hidden_size": 2560, "intermediate_size": 9728, "num_hidden_layers": 36, "num_attention_heads": 32,
           "num_key_value_heads": 8, "head_dim": 128, "max_position_embeddings": 32768, "max_window_layers": 36},
    "8b": {**_DENSE, "hidden_size": 4096, "intermediate_size": 12288, "num_hidden_layers": 36, "num_attention_heads": 32,
           "num_key_value_heads": 8, "head_dim": 128, "max_position_embeddings": 32768, "max_window_layers": 36},
    "30b-a3b": {**_MOE, "hidden_size": 2048, "intermediate_size": 6144, "moe_intermediate_size": 768, "num_experts": 128,
                "num_experts_per_tok": 8, "num_hidden_layers": 48, "num_attention_heads": 32, "num_key_value_heads": 4,
                "head_dim": 128, "max_position_embeddings": 32768, "max_window_layers": 48},
}


def _config_value(config, key: str):
    """``config[key]`` for a ``config.json`` dict, ``getattr(config, key)`` for a config object (None if absent)."""
    return config.get(key) if isinstance(config, dict) else getattr(config, key, None)




def block_logits(
    model,
    input_ids: torch.Tensor,
    position_ids: torch.Tensor,
    attention_mask: torch.Tensor | None,
    cache=None,
    store_kv: bool = False,
    logits_to_keep: int = 0,
) -> torch.Tensor:
    """One block-decoder forward with the release's calling convention (JetAstra/SDAR ``generate.py``).

    :param input_ids: ``[B, L]`` int64 (the active block, or the whole prefix without a cache).
    :param position_ids: ``[B, L]`` RoPE positions. :param attention_mask: bool/0-1 ``[B|1, (1,) L, Lk]``.
    :param cache: an :class:`~dare_sdar.cache.SDARCache` or None; ``store_kv`` appends this call's keys.
    :returns: logits ``[B, L', V]`` (``L'`` per ``logits_to_keep``; a model may ignore it and return all).
    """
    return model(
        input_ids,
        attention_mask=attention_mask,
        position_ids=position_ids,
        past_key_values=cache,
        use_cache=cache is not None,
        store_kv=store_kv,
        logits_to_keep=logits_to_keep,
    ).logits


class SDARFamily(ModelFamily):
    """SDAR (dense + MoE): Qwen3-architecture block-diffusion LM; block-causal attention, position i scores i."""

    name = "sdar"
    model_types = ("sdar", "sdar_moe")
    attention = "block"
    pad_in_response = False
    # q/k/v/o and SwiGLU projections; in the MoE model the expert projections carry the same names
    # (model.layers.{i}.mlp.experts.{e}.{gate,up,down}_proj), so they are targeted too; the router (mlp.gate)
    # and the LM head are not.
    lora_target_modules = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
    lm_head_module = "lm_head"
    default_sampler = "sdar"
    decoder_layer_class = "SDARDecoderLayer"
    chat_template = SDAR_CHAT_TEMPLATE
    special_token_strings: ClassVar[dict[str, str]] = {
        "eos": "<|endoftext|>",
        "pad": "<|endoftext|>",
        "mask": "<|MASK|>",
        "eot": "<|im_end|>",
    }
    extra_special_tokens = ("<|im_start|>", "<think>", "</think>")

    # ------------------------------------------------------------------ checkpoint facts
    def config_class(self):
        from dare_sdar.configuration_sdar import SDARConfig

        return SDARConfig

    def model_class(self):
        from dare_sdar.modeling_sdar import SDARForCausalLM

        return SDARForCausalLM

    def model_class_for(self, config):
        """``SDARMoeForCausalLM`` for an ``sdar_moe`` config, else ``SDARForCausalLM``."""
        if _config_value(config, "model_type") == "sdar_moe":
            from dare_sdar.modeling_sdar_moe import SDARMoeForCausalLM

            return SDARMoeForCausalLM
        return self.model_class()

    def presets(self) -> dict[str, dict[str, Any]]:
        return {name: dict(cfg) for name, cfg in PRESETS.items()}

    def new_config(self, preset: str, overrides: dict[str, Any], vocab_size: int, tokens: SpecialTokens):
        """Config of a fresh model: the preset, the tokenizer's size and ids, then ``overrides``.

        ``bos_token_id`` equals EOS when the tokenizer has no BOS (as in the releases: 151643 for both).

        :raises KeyError: unknown preset. :raises SDARConfigError: overrides the model cannot be built from.
        """
        from dare_sdar.configuration_sdar_moe import SDARMoeConfig

        cfg = self.presets()[preset]
        cfg.update(
            vocab_size=vocab_size,
            mask_token_id=tokens.mask_id,
            eos_token_id=tokens.eos_id,
            bos_token_id=tokens.eos_id if tokens.bos_id is None else tokens.bos_id,
        )
        cfg.update(overrides)
        config_cls = SDARMoeConfig if cfg.pop("model_type") == "sdar_moe" else self.config_class()
        return config_cls(**cfg)

    def block_size(self, config) -> int:
        """``block_size`` of ``config`` (a config object or ``config.json`` dict), else :data:`DEFAULT_BLOCK_SIZE`."""
        value = _config_value(config, "block_size")
        return DEFAULT_BLOCK_SIZE if value is None else int(value)

    # ------------------------------------------------------------------ forward passes
    def logits(self, model, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None) -> torch.Tensor:
        """Inference logits ``[B, L, V]`` (model dtype) under the block-causal mask of the training block size:
        bidirectional inside a block, causal across blocks, blocks from each row's first real token.

        :param input_ids: ``[B, L]`` int64. :param attention_mask: ``[B, L]`` 1 real / 0 left padding, or None.
        """
        B, L = input_ids.shape
        shift = leading_padding(attention_mask, B, input_ids.device)
        mask = block_causal_mask(L, self.block_size(model.config), device=input_ids.device)[None, None]
        if attention_mask is not None:
            valid = roll_rows(attention_mask, shift).to(torch.bool)
            eye = torch.eye(L, dtype=torch.bool, device=input_ids.device)
            mask = (mask & valid[:, None, None, :]) | (eye & ~valid[:, None, :, None])
        logits = model(input_ids=roll_rows(input_ids, shift), attention_mask=mask).logits
        return roll_rows(logits, -shift)

    def denoiser_logits(
        self,
        model,
        noisy_ids: torch.Tensor,
        clean_ids: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Block-diffusion training logits ``[B, L, V]`` of the noisy half (SDAR/BD3-LM, arXiv 2503.09573 §3).

        Runs ``[x_t ; x_0]`` (length ``2L``, positions duplicated) under the ``M_BD | M_OBC | M_BC`` mask of
        :func:`dare.diffusion.block.block_diffusion_inputs` with this model's block size, so noisy block ``b``
        sees itself and the clean blocks ``< b``. Only the noisy half goes through the LM head.

        :param noisy_ids: ``[B, L]`` int64 ``x_t``; :param clean_ids: ``[B, L]`` int64 ``x_0``;
        :param attention_mask: ``[B, L]`` valid tokens (1) vs padding (0), or None.
        """
        B, L = noisy_ids.shape
        shift = leading_padding(attention_mask, B, noisy_ids.device)
        valid = None if attention_mask is None else roll_rows(attention_mask, shift).to(torch.bool)
        ids, pos, mask = block_diffusion_inputs(
            roll_rows(noisy_ids, shift), roll_rows(clean_ids, shift), self.block_size(model.config), valid
        )
        keep = torch.arange(L, device=ids.device)
        logits = model(input_ids=ids, attention_mask=mask, position_ids=pos, logits_to_keep=keep).logits
        return roll_rows(logits, -shift)

    def block_logits(self, model, input_ids, position_ids, attention_mask, cache=None, store_kv=False, logits_to_keep=0):
        """The KV-cached block-decoder forward the ``sdar`` sampler needs (see :func:`block_logits`)."""
        return block_logits(model, input_ids, position_ids, attention_mask, cache, store_kv, logits_to_keep)

    def new_cache(self):
        """An empty :class:`~dare_sdar.cache.SDARCache` for one decoding run."""
        from dare_sdar.cache import SDARCache

        return SDARCache()
