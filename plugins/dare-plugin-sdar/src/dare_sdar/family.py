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

The inference and training forwards, left-padding handling and the block-size lookup come from
:class:`dare.modeling.BlockDiffusionFamily`; this module adds the checkpoint facts and the KV cache
(:class:`~dare_sdar.cache.SDARCache`, the release's ``store_kv`` protocol).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, ClassVar

from dare.components import SpecialTokens
from dare.modeling.block_family import BlockDiffusionFamily, config_value

if TYPE_CHECKING:  # pragma: no cover - torch is imported by the forwards, not by validation
    import torch

    from dare_sdar.cache import SDARCache

__all__ = ["SDARFamily", "SDAR_CHAT_TEMPLATE", "DEFAULT_BLOCK_SIZE", "PRESETS"]

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


class SDARFamily(BlockDiffusionFamily):
    """SDAR (dense + MoE): Qwen3-architecture block-diffusion LM; block-causal attention, position i scores i."""

    name = "sdar"
    model_types = ("sdar", "sdar_moe")
    default_block_size = DEFAULT_BLOCK_SIZE
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
        if config_value(config, "model_type") == "sdar_moe":
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

    # ------------------------------------------------------------------ forward passes
    def forward_logits(self, model, input_ids, attention_mask, position_ids=None, first=None) -> torch.Tensor:
        """As the base, with the LM head run on the first ``first`` positions only (``logits_to_keep``)."""
        if first is None:
            return super().forward_logits(model, input_ids, attention_mask, position_ids)
        import torch

        keep = torch.arange(first, device=input_ids.device)
        return model(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids,
                     logits_to_keep=keep).logits

    def new_cache(self, model) -> SDARCache:
        """An empty :class:`~dare_sdar.cache.SDARCache` (per-layer keys/values ``[B, nkv, T, hd]``, model dtype)."""
        from dare_sdar.cache import SDARCache

        return SDARCache()

    def block_logits(self, model, input_ids, position_ids, attention_mask, cache=None, store_kv=False, logits_to_keep=0):
        """The release's cached block forward (JetAstra/SDAR ``generate.py``): ``past_key_values=cache`` with
        ``store_kv`` (:mod:`dare_sdar.cache`); see :meth:`dare.modeling.BlockDiffusionFamily.block_logits`.
        Logits in the model dtype; the attention mask must be bool or 0/1 (no additive float mask)."""
        return model(
            input_ids,
            attention_mask=attention_mask,
            position_ids=position_ids,
            past_key_values=cache,
            use_cache=cache is not None,
            store_kv=store_kv,
            logits_to_keep=logits_to_keep,
        ).logits
