"""LLaDA configuration (``model_type: llada``), keys as in the released ``config.json``.

Source: the LLaDA release (GSAI-ML/LLaDA-8B-Instruct, arXiv 2502.09992), whose config mirrors an
OLMo-style ``ModelConfig`` dataclass. Every key of the released file is accepted and written back
unchanged; defaults equal the released ``ModelConfig`` defaults so a sparse ``config.json`` means
the same thing here as in the official code.
"""

from __future__ import annotations

from transformers import PretrainedConfig

__all__ = ["LLaDAConfig"]

_DEFAULTS = {
    "d_model": 768,
    "n_heads": 12,
    "n_kv_heads": None,
    "n_layers": 12,
    "mlp_ratio": 4,
    "mlp_hidden_size": None,
    "activation_type": "swiglu",
    "block_type": "sequential",
    "block_group_size": 1,
    "alibi": False,
    "alibi_bias_max": 8.0,
    "rope": False,
    "rope_full_precision": True,
    "flash_attention": False,
    "attention_dropout": 0.1,
    "multi_query_attention": None,
    "attention_layer_norm": False,
    "residual_dropout": 0.1,
    "embedding_dropout": 0.1,
    "input_emb_norm": False,
    "layer_norm_type": "default",
    "layer_norm_with_affine": True,
    "rms_norm_eps": 1e-05,
    "attention_layer_norm_with_affine": True,
    "max_sequence_length": 1024,
    "rope_theta": 10000.0,
    "include_qkv_bias": False,
    "include_bias": False,
    "bias_for_layer_norm": None,
    "scale_logits": False,
    "vocab_size": 50257,
    "embedding_size": 50304,
    "weight_tying": True,
    "eos_token_id": 50256,
    "pad_token_id": 50256,
    "mask_token_id": 50256,
    "init_device": None,
    "init_fn": "normal",
    "init_std": 0.02,
    "init_cutoff_factor": None,
    "precision": None,
}


class LLaDAConfig(PretrainedConfig):
    """Configuration of a LLaDA masked-diffusion LM.

    Keys (all optional, defaults as the official ``ModelConfig``): ``d_model``, ``n_heads``,
    ``n_kv_heads``, ``n_layers``, ``mlp_hidden_size``/``mlp_ratio``, ``activation_type``,
    ``block_type`` (``llama`` for released checkpoints), ``layer_norm_type``, ``rms_norm_eps``,
    ``rope``/``rope_theta``/``rope_full_precision``, ``vocab_size``/``embedding_size``,
    ``weight_tying``, ``mask_token_id``/``eos_token_id``/``pad_token_id``, dropouts and init keys.
    """

    model_type = "llada"
    keys_to_ignore_at_inference = ["past_key_values"]

    def __init__(self, use_cache: bool = False, **kwargs):
        for key, default in _DEFAULTS.items():
            setattr(self, key, kwargs.pop(key, default))
        kwargs.setdefault("architectures", ["LLaDAModelLM"])
        eos = self.eos_token_id
        pad = self.pad_token_id
        self.use_cache = use_cache
        super().__init__(eos_token_id=eos, pad_token_id=pad, **kwargs)

    # HF-style aliases used by generic tooling (peft, accelerate, trainers)
    @property
    def hidden_size(self) -> int:
        return self.d_model

    @property
    def num_attention_heads(self) -> int:
        return self.n_heads

    @property
    def num_hidden_layers(self) -> int:
        return self.n_layers

    @property
    def head_dim(self) -> int:
        return self.d_model // self.n_heads

    @property
    def effective_n_kv_heads(self) -> int:
        """KV heads: 1 with multi-query attention, else ``n_kv_heads`` (default ``n_heads``)."""
        if self.multi_query_attention:
            return 1
        return self.n_heads if self.n_kv_heads is None else self.n_kv_heads

    @property
    def ffn_hidden_size(self) -> int:
        return self.mlp_hidden_size if self.mlp_hidden_size is not None else self.mlp_ratio * self.d_model

    @property
    def output_size(self) -> int:
        return self.embedding_size or self.vocab_size
