"""SDAR configuration (``model_type: sdar``), keys as in the released ``config.json``.

Source: the SDAR release (JetLM/SDAR-{1.7B,4B,8B}-Chat, arXiv 2510.06303; shared/model-cards/SDAR-*-Chat),
whose architecture is Qwen3 (per-head q/k RMSNorm, explicit ``head_dim``, no biases, untied LM head) plus
two diffusion keys: ``block_size`` (training block length, 4 in every release) and ``mask_token_id``
(151669, ``<|MASK|>``). Defaults equal the official ``SDARConfig`` defaults, so a sparse ``config.json``
means the same thing here as in the official code.

Keys the release carries only for its training stack (``fuse_cross_entropy``, ``micro_forward``,
``skip_checkpoint``, ``ep_size``, ``use_deepep``, ``debug``) are kept as attributes and written back.
``attn_implementation`` (``flex_attention`` in the release, the official *training* kernel) is accepted and
ignored: this implementation always attends through ``torch.nn.functional.scaled_dot_product_attention``.
transformers 5 renames ``torch_dtype`` to ``dtype`` when it saves a config; ``rope_scaling`` must be null
(every release) and is not written back.
"""

from __future__ import annotations

from typing import Any

from transformers import PretrainedConfig
from transformers.activations import ACT2FN

from dare_sdar.errors import SDARConfigError

__all__ = ["SDARConfig", "check_attention_config", "pop_rope_scaling"]


def check_attention_config(cfg: Any) -> None:
    """Validate the attention/RoPE keys shared by ``sdar`` and ``sdar_moe`` configs.

    :raises SDARConfigError: naming the offending ``config.json`` key and the accepted values.
    """
    for key in ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads", "head_dim"):
        value = getattr(cfg, key)
        if not isinstance(value, int) or value <= 0:
            raise SDARConfigError(f"config.json {key} must be a positive integer, got {value!r}")
    if cfg.num_attention_heads % cfg.num_key_value_heads != 0:
        raise SDARConfigError(
            f"config.json num_attention_heads ({cfg.num_attention_heads}) must be a multiple of "
            f"num_key_value_heads ({cfg.num_key_value_heads}) for grouped-query attention"
        )
    if cfg.head_dim % 2 != 0:
        raise SDARConfigError(f"config.json head_dim ({cfg.head_dim}) must be even: RoPE rotates pairs of dimensions")
    if cfg.hidden_act not in ACT2FN:
        raise SDARConfigError(f"config.json hidden_act {cfg.hidden_act!r} is unknown; SDAR releases use 'silu'")
    if cfg.use_sliding_window:
        raise SDARConfigError("config.json use_sliding_window: true is not supported; SDAR releases use false")


def pop_rope_scaling(kwargs: dict[str, Any]) -> None:
    """Remove ``rope_scaling`` from config kwargs, accepting only the releases' null (plain RoPE).

    :raises SDARConfigError: ``rope_scaling`` is set to anything but null / ``{"rope_type": "default"}``.
    """
    scaling = kwargs.pop("rope_scaling", None)
    if scaling is not None and dict(scaling).get("rope_type", dict(scaling).get("type")) != "default":
        raise SDARConfigError(
            f"config.json rope_scaling {scaling!r} is not supported; SDAR releases use plain RoPE (rope_scaling: null)"
        )


class SDARConfig(PretrainedConfig):
    """Configuration of a dense SDAR block-diffusion LM.

    Architecture keys (Qwen3): ``vocab_size``, ``hidden_size`` H, ``intermediate_size`` I (SwiGLU width),
    ``num_hidden_layers``, ``num_attention_heads`` nh, ``num_key_value_heads`` nkv (GQA), ``head_dim`` hd
    (explicit; SDAR-4B has nh·hd = 4096 != H = 2560), ``hidden_act``, ``rms_norm_eps``, ``rope_theta``,
    ``max_position_embeddings``, ``attention_bias`` (q/k/v/o biases), ``attention_dropout``,
    ``tie_word_embeddings``, ``initializer_range``.
    Diffusion keys: ``block_size`` (training block length; default 4 as in every release) and
    ``mask_token_id`` (``<|MASK|>``; None = take it from the tokenizer).

    :raises SDARConfigError: a key outside what the model supports (see :func:`check_attention_config`).
    """

    model_type = "sdar"
    keys_to_ignore_at_inference = ["past_key_values"]

    def __init__(
        self,
        vocab_size: int = 151936,
        hidden_size: int = 4096,
        intermediate_size: int = 22016,
        num_hidden_layers: int = 32,
        num_attention_heads: int = 32,
        num_key_value_heads: int | None = 32,
        head_dim: int = 128,
        hidden_act: str = "silu",
        max_position_embeddings: int = 32768,
        initializer_range: float = 0.02,
        rms_norm_eps: float = 1e-6,
        use_cache: bool = True,
        tie_word_embeddings: bool = False,
        rope_theta: float = 10000.0,
        attention_bias: bool = False,
        use_sliding_window: bool = False,
        sliding_window: int | None = 4096,
        max_window_layers: int = 28,
        attention_dropout: float = 0.0,
        block_size: int = 4,
        mask_token_id: int | None = None,
        **kwargs,
    ):
        pop_rope_scaling(kwargs)
        kwargs.pop("attn_implementation", None)
        self.vocab_size = vocab_size
        self.hidden_size = hidden_size
        self.intermediate_size = intermediate_size
        self.num_hidden_layers = num_hidden_layers
        self.num_attention_heads = num_attention_heads
        self.num_key_value_heads = num_attention_heads if num_key_value_heads is None else num_key_value_heads
        self.head_dim = head_dim
        self.hidden_act = hidden_act
        self.max_position_embeddings = max_position_embeddings
        self.initializer_range = initializer_range
        self.rms_norm_eps = rms_norm_eps
        self.use_cache = use_cache
        self.tie_word_embeddings = tie_word_embeddings
        self.rope_theta = rope_theta
        self.attention_bias = attention_bias
        self.use_sliding_window = use_sliding_window
        self.sliding_window = sliding_window
        self.max_window_layers = max_window_layers
        self.attention_dropout = attention_dropout
        self.block_size = block_size
        self.mask_token_id = mask_token_id
        kwargs.setdefault("architectures", ["SDARForCausalLM"])
        check_attention_config(self)
        if not isinstance(block_size, int) or block_size <= 0:
            raise SDARConfigError(f"config.json block_size must be a positive integer (4 in SDAR releases), got {block_size!r}")
        super().__init__(**kwargs)
