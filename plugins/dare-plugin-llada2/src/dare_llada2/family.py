"""The LLaDA2.x model family adapter (LLaDA2.0-mini/flash, LLaDA2.1-mini/flash; ``model_type: llada2_moe``).

LLaDA2 is a block-diffusion LM (BD3-LM style, arXiv 2503.09573): the sequence is cut into blocks of
``block_size`` tokens counted from its first real token; attention is bidirectional inside a block and
causal across blocks; position ``i`` scores token ``i``. Training runs ``[x_t ; x_0]`` under the
block-diffusion mask of :mod:`dare.diffusion.block`; inference decodes block by block
(:mod:`dare_llada2.sampler`).

The inference and training forwards (left padding rolled out of the way, so blocks start at each
row's first real token as in the release's single-sequence decoder) and the block-size lookup come from
:class:`dare.modeling.BlockDiffusionFamily`; this module adds the checkpoint facts and the KV-cache
interface over ``LLaDA2MoeModelLM``'s ``cache=``/``use_cache=`` arguments.
"""

from __future__ import annotations

from typing import Any, ClassVar

from dare.components import SpecialTokens
from dare.errors import DareError
from dare.modeling.block_family import BlockDiffusionFamily

__all__ = ["LLaDA2Family", "LLADA2_CHAT_TEMPLATE", "DEFAULT_BLOCK_SIZE", "PRESETS"]

#: Block size LLaDA2.0/2.1 were trained and are decoded with (model cards: block_length 32). A
#: ``block_size`` key in ``config.json`` (DARE-created models) overrides it.
DEFAULT_BLOCK_SIZE = 32

#: The release's role format (tokenizer_config.json of LLaDA2.0/2.1-mini), compact: no tool calls or
#: think extraction. System turn (with "detailed thinking off"), HUMAN/ASSISTANT turns closed by
#: <|role_end|>, generation prompt "<role>ASSISTANT</role>".
LLADA2_CHAT_TEMPLATE = (
    "{{- '<role>SYSTEM</role>' -}}"
    "{%- if messages and messages[0]['role'] == 'system' -%}{{- messages[0]['content'] + '\\n' -}}{%- endif -%}"
    "{{- 'detailed thinking off<|role_end|>' -}}"
    "{%- for message in messages -%}"
    "{%- if message['role'] == 'user' -%}{{- '<role>HUMAN</role>' + message['content'] + '<|role_end|>' -}}"
    "{%- elif message['role'] == 'assistant' -%}{{- '<role>ASSISTANT</role>' + message['content'] + '<|role_end|>' -}}"
    "{%- elif message['role'] == 'system' and not loop.first -%}"
    "{{- '<role>SYSTEM</role>' + message['content'] + '<|role_end|>' -}}"
    "{%- endif -%}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{- '<role>ASSISTANT</role>' -}}{%- endif -%}"
)

#: Keys every preset shares: the release's config.json values that are not sizes.
_RELEASE = {
    "architectures": ["LLaDA2MoeModelLM"],
    "attention_dropout": 0.0,
    "embedding_dropout": 0.0,
    "output_dropout": 0.0,
    "hidden_act": "silu",
    "initializer_range": 0.02,
    "max_window_layers": 28,
    "moe_router_enable_expert_bias": True,
    "norm_head": False,
    "norm_softmax": False,
    "norm_topk_prob": True,
    "output_router_logits": False,
    "partial_rotary_factor": 0.5,
    "rms_norm_eps": 1e-06,
    "rope_scaling": None,
    "rope_theta": 600000,
    "routed_scaling_factor": 2.5,
    "router_dtype": "fp32",
    "score_function": "sigmoid",
    "sliding_window": 4096,
    "tie_word_embeddings": False,
    "use_bias": False,
    "use_cache": False,
    "use_qk_norm": True,
    "use_qkv_bias": False,
    "use_rmsnorm": True,
    "use_sliding_window": False,
    "using_split_qkv_in_self_attention": False,
}

PRESETS: dict[str, dict[str, Any]] = {
    # docs/model-families.md §5.7: the CPU test size
    "tiny": {**_RELEASE, "hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
             "head_dim": 16, "rotary_dim": 8, "intermediate_size": 128, "first_k_dense_replace": 1, "num_experts": 8,
             "num_experts_per_tok": 2, "n_group": 4, "topk_group": 2, "moe_intermediate_size": 16,
             "num_shared_experts": 1, "vocab_size": 256, "pad_token_id": 1, "max_position_embeddings": 128},
    # LLaDA2.0-mini / LLaDA2.1-mini (16.3B total, ~1.4B active; for shape checks, never built with weights in tests)
    "mini": {**_RELEASE, "hidden_size": 2048, "num_hidden_layers": 20, "num_attention_heads": 16,
             "num_key_value_heads": 4, "head_dim": 128, "rotary_dim": 64, "intermediate_size": 5120,
             "first_k_dense_replace": 1, "num_experts": 256, "num_experts_per_tok": 8, "n_group": 8, "topk_group": 4,
             "moe_intermediate_size": 512, "num_shared_experts": 1, "vocab_size": 157184, "pad_token_id": 156892,
             "max_position_embeddings": 32768},
}


class LLaDA2Family(BlockDiffusionFamily):
    """LLaDA2.x: block-diffusion MoE LM (block-causal attention, block size 32); position i scores token i."""

    name = "llada2"
    model_types = ("llada2_moe",)
    default_block_size = DEFAULT_BLOCK_SIZE
    lora_target_modules = ("query_key_value", "dense", "gate_proj", "up_proj", "down_proj")
    lm_head_module = "lm_head"
    default_sampler = "llada2"
    decoder_layer_class = "LLaDA2MoeDecoderLayer"
    chat_template = LLADA2_CHAT_TEMPLATE
    special_token_strings: ClassVar[dict[str, str]] = {
        "bos": "<|startoftext|>",
        "eos": "<|endoftext|>",
        "pad": "<|endoftext|>",
        "mask": "<|mask|>",
        "eot": "<|role_end|>",
    }
    extra_special_tokens = ("<role>", "</role>")

    def config_class(self):
        from dare_llada2.configuration_llada2_moe import LLaDA2MoeConfig

        return LLaDA2MoeConfig

    def model_class(self):
        from dare_llada2.modeling_llada2_moe import LLaDA2MoeModelLM

        return LLaDA2MoeModelLM

    def presets(self) -> dict[str, dict[str, Any]]:
        return {k: dict(v) for k, v in PRESETS.items()}

    def new_config(self, preset: str, overrides: dict[str, Any], vocab_size: int, tokens: SpecialTokens):
        """Preset + the tokenizer's size and ids (``pad``/``eos``/``mask_token_id``) + ``overrides``.

        :raises KeyError: unknown preset. :raises LLaDA2ConfigError: inconsistent values.
        """
        cfg = self.presets()[preset]
        cfg.update(vocab_size=vocab_size, pad_token_id=tokens.pad_id, eos_token_id=tokens.eos_id,
                   mask_token_id=tokens.mask_id)
        cfg.update(overrides)
        return self.config_class()(**cfg)

    # ------------------------------------------------------------------ the KV-cache interface
    def new_cache(self, model):
        """An empty :class:`~dare_llada2.modeling_llada2_moe.LLaDA2KVCache` (per-layer keys/values
        ``[B, nkv, Lc, head_dim]``, model dtype)."""
        from dare_llada2.modeling_llada2_moe import LLaDA2KVCache

        return LLaDA2KVCache()

    def block_logits(self, model, input_ids, position_ids, attention_mask, cache=None, store_kv=False, logits_to_keep=0):
        """One block forward with ``LLaDA2MoeModelLM``'s cache arguments (``cache=``, ``use_cache=store_kv``);
        see :meth:`dare.modeling.BlockDiffusionFamily.block_logits`. fp32 logits. A key mask ``[B, 1, 1, Lk]``
        is expanded to the ``[B, 1, L, Lk]`` the model takes; additive float masks pass through.

        :raises DareError: ``store_kv`` and the model did not return the cache it was given (a model without
            LLaDA2's cache arguments).
        """
        L = input_ids.shape[1]
        if attention_mask is not None and attention_mask.dim() == 4 and attention_mask.shape[2] == 1:
            attention_mask = attention_mask.expand(-1, -1, L, -1)
        out = model(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids, cache=cache,
                    use_cache=store_kv)
        if store_kv and cache is not None and getattr(out, "cache", None) is not cache:
            raise DareError("sampler.params.use_cache: the model did not fill the KV cache it was given (output.cache); "
                            "set use_cache: false")
        return out.logits[:, -logits_to_keep:] if logits_to_keep > 0 else out.logits
