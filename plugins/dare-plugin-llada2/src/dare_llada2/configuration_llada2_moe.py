"""LLaDA2.x configuration (``model_type: llada2_moe``), keys as in the released ``config.json``.

Source: the LLaDA2.0-mini / LLaDA2.1-mini releases (inclusionAI; Ling/Bailing-MoE-V2 lineage), whose
``configuration_llada2_moe.py`` is byte-identical for 2.0 and 2.1. Every key of the released file is
accepted and written back unchanged; defaults equal the release's constructor defaults (except
``num_key_value_heads``, whose release default 0 cannot build a model: here ``None`` means "as many as
query heads"), so a sparse ``config.json`` means the same thing here as in the official code.

The release accepts some keys that its model code never reads (``score_function``,
``norm_topk_prob``, ``router_dtype``, ``moe_router_enable_expert_bias``, ``rotary_dim``, ...). DARE
keeps them, and refuses values that the architecture cannot honour (e.g. ``score_function:
softmax``) instead of ignoring them silently.
"""

from __future__ import annotations

from transformers import PretrainedConfig

from dare.errors import CheckpointError

__all__ = ["LLaDA2MoeConfig", "LLaDA2ConfigError"]


class LLaDA2ConfigError(CheckpointError, ValueError):
    """A ``llada2_moe`` config value the architecture cannot build; the message names the key and the fix."""


class LLaDA2MoeConfig(PretrainedConfig):
    """Configuration of a LLaDA2.x block-diffusion MoE LM.

    Shapes: hidden ``hidden_size`` (H), ``num_attention_heads`` query heads and
    ``num_key_value_heads`` KV heads of ``head_dim`` (default ``H / heads``); RoPE on the first
    ``int(head_dim * partial_rotary_factor)`` dims of each head (base ``rope_theta``). Layers
    ``< first_k_dense_replace`` use a dense SwiGLU of width ``intermediate_size``; later layers a MoE
    of ``num_experts`` SwiGLU experts (width ``moe_intermediate_size``), ``num_experts_per_tok`` of them
    per token chosen by group-limited top-k over ``n_group`` groups keeping ``topk_group`` groups, with
    weights scaled by ``routed_scaling_factor``, plus ``num_shared_experts`` always-on experts (one
    SwiGLU of width ``moe_intermediate_size * num_shared_experts``). ``num_experts: null`` makes every
    layer dense.

    :raises LLaDA2ConfigError: inconsistent values (heads vs KV heads, odd rotary dimension, MoE
        groups that cannot route, tied embeddings, an unsupported ``rope_scaling`` or
        ``score_function``), naming the key.
    """

    model_type = "llada2_moe"
    keys_to_ignore_at_inference = ["cache"]
    # A plain class attribute shadows transformers 5's deprecated ``rope_scaling`` property, so the
    # released key is stored and written back as is (not converted to ``rope_parameters``).
    rope_scaling = None

    def __init__(
        self,
        vocab_size: int = 30592,
        hidden_size: int = 1024,
        intermediate_size: int | None = None,
        num_hidden_layers: int = 24,
        num_attention_heads: int = 16,
        num_key_value_heads: int | None = None,
        hidden_act: str = "silu",
        use_qkv_bias: bool = False,
        use_qk_norm: bool = True,
        use_bias: bool = True,
        rms_norm_eps: float = 1e-05,
        norm_head: bool = False,
        tie_word_embeddings: bool = False,
        embedding_dropout: float = 0.1,
        attention_dropout: float = 0.1,
        output_dropout: float = 0.1,
        initializer_range: float = 0.02,
        max_position_embeddings: int = 16384,
        rope_theta: float = 10000.0,
        use_cache: bool = True,
        use_sliding_window: bool = False,
        sliding_window: int = 4096,
        max_window_layers: int = 28,
        rope_scaling: dict | None = None,
        pad_token_id: int | None = 126081,
        num_experts: int | None = 16,
        num_shared_experts: int | None = 0,
        num_experts_per_tok: int = 2,
        n_group: int = 8,
        topk_group: int = 4,
        routed_scaling_factor: float = 2.5,
        moe_intermediate_size: int | None = None,
        first_k_dense_replace: int = 0,
        head_dim: int | None = None,
        output_router_logits: bool = False,
        partial_rotary_factor: float = 0.5,
        **kwargs,
    ):
        self.vocab_size = vocab_size
        self.hidden_size = hidden_size
        self.intermediate_size = intermediate_size
        self.num_hidden_layers = num_hidden_layers
        self.num_attention_heads = num_attention_heads
        self.num_key_value_heads = num_attention_heads if num_key_value_heads is None else num_key_value_heads
        self.hidden_act = hidden_act
        self.use_qkv_bias = use_qkv_bias
        self.use_qk_norm = use_qk_norm
        self.use_bias = use_bias
        self.rms_norm_eps = rms_norm_eps
        self.norm_head = norm_head
        self.embedding_dropout = embedding_dropout
        self.attention_dropout = attention_dropout
        self.output_dropout = output_dropout
        self.initializer_range = initializer_range
        self.max_position_embeddings = max_position_embeddings
        self.rope_theta = rope_theta
        self.use_cache = use_cache
        self.use_sliding_window = use_sliding_window
        self.sliding_window = sliding_window
        self.max_window_layers = max_window_layers
        self.head_dim = head_dim or hidden_size // num_attention_heads
        self.rope_scaling = rope_scaling
        self.num_experts = num_experts
        self.num_shared_experts = num_shared_experts or 0
        self.num_experts_per_tok = num_experts_per_tok
        self.n_group = n_group
        self.topk_group = topk_group
        self.moe_intermediate_size = moe_intermediate_size
        self.first_k_dense_replace = first_k_dense_replace
        self.output_router_logits = output_router_logits
        self.routed_scaling_factor = routed_scaling_factor
        self.partial_rotary_factor = partial_rotary_factor
        super().__init__(pad_token_id=pad_token_id, tie_word_embeddings=tie_word_embeddings, **kwargs)
        self._check()

    # ------------------------------------------------------------------ derived sizes
    @property
    def rotary_dim_used(self) -> int:
        """Dims of each head that RoPE rotates: ``int(head_dim * partial_rotary_factor)`` (64 for the minis)."""
        return int(self.head_dim * self.partial_rotary_factor)

    def is_moe_layer(self, layer_idx: int) -> bool:
        """Whether decoder layer ``layer_idx`` has the MoE block (else the dense SwiGLU)."""
        return self.num_experts is not None and layer_idx >= self.first_k_dense_replace

    @property
    def has_moe_layers(self) -> bool:
        return any(self.is_moe_layer(i) for i in range(self.num_hidden_layers))

    @property
    def has_dense_layers(self) -> bool:
        return not all(self.is_moe_layer(i) for i in range(self.num_hidden_layers))

    # ------------------------------------------------------------------ validation
    def _check(self) -> None:
        """Refuse values the architecture cannot build (the constructor calls this)."""
        sizes = ("hidden_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads", "head_dim", "vocab_size")
        for key in sizes:
            if not isinstance(getattr(self, key), int) or getattr(self, key) <= 0:
                raise LLaDA2ConfigError(f"config.json {key} must be a positive integer, got {getattr(self, key)!r}")
        if self.num_attention_heads % self.num_key_value_heads != 0:
            raise LLaDA2ConfigError(
                f"config.json num_attention_heads ({self.num_attention_heads}) must be a multiple of num_key_value_heads "
                f"({self.num_key_value_heads}) (grouped-query attention)"
            )
        rot = self.rotary_dim_used
        if not 0.0 < self.partial_rotary_factor <= 1.0 or rot <= 0 or rot % 2 != 0:
            raise LLaDA2ConfigError(
                f"config.json partial_rotary_factor {self.partial_rotary_factor} with head_dim {self.head_dim} gives a "
                f"rotary dimension of {rot}; it must be a positive even number (rotate-half), e.g. factor 0.5 with "
                "head_dim 128"
            )
        declared = getattr(self, "rotary_dim", None)
        if declared is not None and declared != rot:
            raise LLaDA2ConfigError(
                f"config.json rotary_dim ({declared}) disagrees with head_dim * partial_rotary_factor ({rot}); the model "
                "rotates head_dim * partial_rotary_factor dims, so fix one of them"
            )
        scaling = self.rope_scaling
        if scaling is not None and scaling.get("rope_type", scaling.get("type")) != "default":
            raise LLaDA2ConfigError(
                f"config.json rope_scaling {scaling!r} is not supported; LLaDA2 uses plain RoPE (rope_scaling: null)"
            )
        if self.tie_word_embeddings:
            raise LLaDA2ConfigError("config.json tie_word_embeddings must be false: LLaDA2 ships a separate lm_head")
        score = getattr(self, "score_function", "sigmoid")
        if score not in (None, "sigmoid"):
            raise LLaDA2ConfigError(f"config.json score_function {score!r} is not supported; the LLaDA2 router is sigmoid")
        if self.has_moe_layers:
            self._check_moe()

    def _check_moe(self) -> None:
        E, G, kg, k = self.num_experts, self.n_group, self.topk_group, self.num_experts_per_tok
        if not isinstance(E, int) or E <= 0:
            raise LLaDA2ConfigError(
                f"config.json num_experts must be a positive integer or null (all layers dense), got {E!r}"
            )
        if not isinstance(G, int) or G <= 0 or E % G != 0:
            raise LLaDA2ConfigError(
                f"config.json num_experts ({E}) must be divisible by n_group ({G}): experts are routed in equal groups"
            )
        if E // G < 2:
            raise LLaDA2ConfigError(
                f"config.json num_experts / n_group = {E // G}; each group needs at least 2 experts (a group's score is the "
                "sum of its top-2 expert scores); lower n_group"
            )
        if not 1 <= kg <= G:
            raise LLaDA2ConfigError(f"config.json topk_group ({kg}) must be between 1 and n_group ({G})")
        if not 1 <= k <= kg * (E // G):
            raise LLaDA2ConfigError(
                f"config.json num_experts_per_tok ({k}) must be between 1 and topk_group * num_experts / n_group "
                f"({kg * (E // G)} experts remain after the group limit)"
            )
        if self.num_shared_experts < 0:
            raise LLaDA2ConfigError(f"config.json num_shared_experts must be >= 0, got {self.num_shared_experts}")
        if getattr(self, "norm_topk_prob", True) is False and k > 1:
            raise LLaDA2ConfigError(
                "config.json norm_topk_prob false is not supported; LLaDA2 always renormalises the top-k weights"
            )

    def check_sizes(self) -> None:
        """Check the MLP widths a model needs (called before building one; the release's defaults leave them unset).

        :raises LLaDA2ConfigError: ``intermediate_size`` missing with dense layers,
            ``moe_intermediate_size`` missing with MoE layers, or ``pad_token_id`` outside the vocabulary.
        """
        if self.has_dense_layers and not (isinstance(self.intermediate_size, int) and self.intermediate_size > 0):
            raise LLaDA2ConfigError(
                f"config.json intermediate_size must be a positive integer: layers below first_k_dense_replace "
                f"({self.first_k_dense_replace}) use a dense MLP of that width"
            )
        if self.has_moe_layers and not (isinstance(self.moe_intermediate_size, int) and self.moe_intermediate_size > 0):
            raise LLaDA2ConfigError("config.json moe_intermediate_size must be a positive integer (width of each expert)")
        pad = self.pad_token_id
        if pad is not None and not 0 <= pad < self.vocab_size:
            raise LLaDA2ConfigError(
                f"config.json pad_token_id ({pad}) must be a token id below vocab_size ({self.vocab_size}) or null"
            )
