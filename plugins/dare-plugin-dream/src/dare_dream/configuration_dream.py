"""Dream configuration (``model_type: Dream``, capital D as in the release), keys as in ``config.json``.

Source: the Dream release (Dream-org/Dream-v0-Instruct-7B, arXiv 2508.15487; DiffuCoder, arXiv
2506.20639, ships the same architecture), whose ``configuration_dream.py`` is Qwen2's config plus
``mask_token_id``. Every key of the released ``config.json`` is accepted and written back: the
architecture keys below, the special ids, ``use_mrope`` (unused), ``auto_map``, ``architectures``,
``torch_dtype`` (written beside transformers 5's ``dtype`` when the source had it) and ``attn_implementation`` (recorded
and written back; DARE's Dream always attends with SDPA, as the official SDPA class does).
Defaults equal the release's ``DreamConfig`` defaults, so a sparse ``config.json`` means the same
thing here as in the official code.
"""

from __future__ import annotations

from typing import Any

from transformers import PretrainedConfig

__all__ = ["DreamConfig"]

_DEFAULTS: dict[str, Any] = {
    "vocab_size": 151936,
    "hidden_size": 4096,
    "intermediate_size": 22016,
    "num_hidden_layers": 32,
    "num_attention_heads": 32,
    "num_key_value_heads": 32,
    "hidden_act": "silu",
    "max_position_embeddings": 32768,
    "initializer_range": 0.02,
    "rms_norm_eps": 1e-6,
    "tie_word_embeddings": False,
    "rope_theta": 10000.0,
    "rope_scaling": None,
    "use_sliding_window": False,
    "sliding_window": 4096,
    "max_window_layers": 28,
    "attention_dropout": 0.0,
    "use_mrope": False,
    "mask_token_id": 151666,
    "pad_token_id": 151643,
}


class DreamConfig(PretrainedConfig):
    """Configuration of a Dream masked-diffusion LM (Qwen2.5 architecture, bidirectional attention).

    Keys (defaults as the official ``DreamConfig``): ``vocab_size``, ``hidden_size``,
    ``intermediate_size`` (SwiGLU width), ``num_hidden_layers``, ``num_attention_heads``,
    ``num_key_value_heads`` (GQA; ``None`` means ``num_attention_heads``), ``hidden_act``,
    ``max_position_embeddings``, ``rms_norm_eps``, ``rope_theta``, ``rope_scaling`` (only ``None``
    or ``{"rope_type": "default"}`` is supported by :mod:`dare_dream.modeling_dream`),
    ``tie_word_embeddings``, ``attention_dropout``, ``mask_token_id``, ``pad_token_id``,
    ``bos_token_id``, ``eos_token_id``; unused by the architecture but kept: ``use_sliding_window``,
    ``sliding_window`` (``None`` unless ``use_sliding_window``), ``max_window_layers``, ``use_mrope``,
    ``initializer_range`` (init std), ``use_cache`` (diffusion never caches).
    """

    model_type = "Dream"
    keys_to_ignore_at_inference = ["past_key_values"]
    # A plain class attribute shadows transformers 5's deprecated ``rope_scaling`` property, so the
    # released key is stored and written back as is instead of being converted to ``rope_parameters``.
    rope_scaling = None

    def __init__(self, use_cache: bool = False, attn_implementation: str | None = None, **kwargs):
        for key, default in _DEFAULTS.items():
            setattr(self, key, kwargs.pop(key, default))
        if self.num_key_value_heads is None:
            self.num_key_value_heads = self.num_attention_heads
        if not self.use_sliding_window:
            self.sliding_window = None
        self.use_cache = use_cache
        # the release's "attn_implementation": "flash_attention_2" is a record only (see module docstring)
        self.attn_implementation = attn_implementation
        self._write_torch_dtype = "torch_dtype" in kwargs
        kwargs.setdefault("architectures", ["DreamModel"])
        super().__init__(pad_token_id=self.pad_token_id, tie_word_embeddings=self.tie_word_embeddings, **kwargs)

    @property
    def head_dim(self) -> int:
        """Per-head width ``hidden_size // num_attention_heads`` (128 for Dream-7B)."""
        return self.hidden_size // self.num_attention_heads

    def to_dict(self) -> dict[str, Any]:
        """transformers' dict, plus the release's ``torch_dtype`` spelling of ``dtype`` when the
        config was read with it; no ``attn_implementation`` key when it was never set."""
        out = super().to_dict()
        if out.pop("_write_torch_dtype", False) and out.get("dtype") is not None:
            out["torch_dtype"] = out["dtype"]
        if out.get("attn_implementation") is None:
            out.pop("attn_implementation", None)
        return out
