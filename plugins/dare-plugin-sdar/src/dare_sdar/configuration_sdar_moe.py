"""SDAR-MoE configuration (``model_type: sdar_moe``), keys as in the released ``config.json``.

Source: the SDAR-30B-A3B-Chat release (arXiv 2510.06303; shared/model-cards/SDAR-30B-A3B-Chat), whose
architecture is Qwen3-MoE: the attention of :class:`~dare_sdar.configuration_sdar.SDARConfig` and, in every
sparse layer, a softmax top-k router over ``num_experts`` SwiGLU experts of width ``moe_intermediate_size``.

The release has **no** ``block_size`` and **no** ``mask_token_id``: the family adapter falls back to a
block size of 4 and to the tokenizer's ``<|MASK|>`` (configs DARE creates write both keys). ``head_dim``
defaults to ``hidden_size // num_attention_heads`` when absent (the release sets 128, so nh·hd = 4096 != H).
"""

from __future__ import annotations

from transformers import PretrainedConfig

from dare_sdar.configuration_sdar import check_attention_config, pop_rope_scaling
from dare_sdar.errors import SDARConfigError

__all__ = ["SDARMoeConfig"]


class SDARMoeConfig(PretrainedConfig):
    """Configuration of an SDAR mixture-of-experts block-diffusion LM.

    Attention keys as :class:`~dare_sdar.configuration_sdar.SDARConfig`. MoE keys: ``num_experts`` E,
    ``num_experts_per_tok`` k (top-k), ``moe_intermediate_size`` (expert SwiGLU width), ``norm_topk_prob``
    (renormalise the k routing weights to sum to 1), ``decoder_sparse_step`` and ``mlp_only_layers`` (layer
    ``i`` is sparse iff ``i not in mlp_only_layers`` and ``(i + 1) % decoder_sparse_step == 0``; dense
    layers use ``intermediate_size``), ``router_aux_loss_coef``/``output_router_logits`` (training keys of the
    release, kept).

    :raises SDARConfigError: inconsistent MoE keys (e.g. ``num_experts_per_tok > num_experts``).
    """

    model_type = "sdar_moe"
    keys_to_ignore_at_inference = ["past_key_values"]

    def __init__(
        self,
        vocab_size: int = 151936,
        hidden_size: int = 2048,
        intermediate_size: int = 6144,
        num_hidden_layers: int = 24,
        num_attention_heads: int = 32,
        num_key_value_heads: int | None = 4,
        head_dim: int | None = None,
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
        decoder_sparse_step: int = 1,
        moe_intermediate_size: int = 768,
        num_experts_per_tok: int = 8,
        num_experts: int = 128,
        norm_topk_prob: bool = False,
        output_router_logits: bool = False,
        router_aux_loss_coef: float = 0.001,
        mlp_only_layers: list[int] | None = None,
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
        self.head_dim = hidden_size // num_attention_heads if head_dim is None else head_dim
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
        self.decoder_sparse_step = decoder_sparse_step
        self.moe_intermediate_size = moe_intermediate_size
        self.num_experts_per_tok = num_experts_per_tok
        self.num_experts = num_experts
        self.norm_topk_prob = norm_topk_prob
        self.output_router_logits = output_router_logits
        self.router_aux_loss_coef = router_aux_loss_coef
        self.mlp_only_layers = [] if mlp_only_layers is None else list(mlp_only_layers)
        kwargs.setdefault("architectures", ["SDARMoeForCausalLM"])
        check_attention_config(self)
        self._check_moe()
        super().__init__(**kwargs)

    def _check_moe(self) -> None:
        if not isinstance(self.num_experts, int) or self.num_experts < 0:
            raise SDARConfigError(f"config.json num_experts must be a non-negative integer, got {self.num_experts!r}")
        if self.num_experts > 0 and not 0 < self.num_experts_per_tok <= self.num_experts:
            raise SDARConfigError(
                f"config.json num_experts_per_tok ({self.num_experts_per_tok}) must be between 1 and num_experts "
                f"({self.num_experts}): each token is routed to that many distinct experts"
            )
        if not isinstance(self.decoder_sparse_step, int) or self.decoder_sparse_step < 1:
            raise SDARConfigError(
                f"config.json decoder_sparse_step must be an integer >= 1 (1 = every layer sparse), got {self.decoder_sparse_step!r}"
            )
        if self.num_experts > 0 and self.moe_intermediate_size <= 0:
            raise SDARConfigError(f"config.json moe_intermediate_size must be positive, got {self.moe_intermediate_size!r}")
        bad = [i for i in self.mlp_only_layers if not 0 <= i < self.num_hidden_layers]
        if bad:
            raise SDARConfigError(
                f"config.json mlp_only_layers {bad} are not layer indices (0..{self.num_hidden_layers - 1})"
            )

    def is_sparse_layer(self, layer_idx: int) -> bool:
        """Whether decoder layer ``layer_idx`` uses the MoE block (official Qwen3-MoE rule, module docstring)."""
        return (
            self.num_experts > 0
            and layer_idx not in self.mlp_only_layers
            and (layer_idx + 1) % self.decoder_sparse_step == 0
        )
