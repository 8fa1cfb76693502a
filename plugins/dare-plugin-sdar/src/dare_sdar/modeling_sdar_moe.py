"""Native PyTorch SDAR-MoE (``model_type: sdar_moe``) that loads SDAR-30B-A3B-Chat unchanged.

Architecture (SDAR, arXiv 2510.06303; Qwen3-MoE, arXiv 2505.09388): the SDAR decoder of
:mod:`dare_sdar.modeling_sdar` with a sparse MoE feed-forward in every layer that
:meth:`~dare_sdar.configuration_sdar_moe.SDARMoeConfig.is_sparse_layer` selects. Tensor names follow the
release (docs/model-families.md §4.2): router ``model.layers.{i}.mlp.gate.weight`` ``[E, H]`` (no bias) and
experts ``model.layers.{i}.mlp.experts.{e}.{gate_proj, up_proj, down_proj}.weight``.

Routing (official ``SDARMoeSparseMoeBlock``, docs/model-families.md §4.3), per token ``h``:
``router_logits = gate(h)`` (model dtype); ``p = softmax(router_logits)`` in **fp32**; the top-k ``(w, idx)``
of ``p`` (descending); with ``norm_topk_prob`` ``w /= sum(w)``; ``w`` cast to the model dtype. Output
``y = sum_k expert_{idx_k}(h) * w_k``, accumulated **in expert-id order** into a zero buffer of the model
dtype (one ``index_add_`` per expert, a rounding after each), as the release does, for bit-exact bf16.
The release's router auxiliary (load-balancing) loss is a training option it leaves off
(``output_router_logits: false``); it is not implemented.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from dare_sdar.configuration_sdar_moe import SDARMoeConfig
from dare_sdar.modeling_sdar import SDARForCausalLM, SDARMLP, SDARModel

__all__ = ["SDARMoeSparseMoeBlock", "SDARMoeModel", "SDARMoeForCausalLM"]


class SDARMoeSparseMoeBlock(nn.Module):
    """Softmax top-k mixture of SwiGLU experts (module docstring); ``[B, L, H]`` -> ``[B, L, H]``."""

    def __init__(self, config: SDARMoeConfig):
        super().__init__()
        self.num_experts = config.num_experts
        self.top_k = config.num_experts_per_tok
        self.norm_topk_prob = config.norm_topk_prob
        self.gate = nn.Linear(config.hidden_size, config.num_experts, bias=False)
        self.experts = nn.ModuleList(
            [SDARMLP(config.hidden_size, config.moe_intermediate_size, config.hidden_act) for _ in range(config.num_experts)]
        )

    def route(self, tokens: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Routing of ``tokens`` ``[N, H]``.

        :returns: ``(weights [N, k] in the tokens' dtype, experts [N, k] int64 in descending probability,
            router_logits [N, E] in the tokens' dtype)``.
        """
        router_logits = self.gate(tokens)
        probs = F.softmax(router_logits, dim=-1, dtype=torch.float32)
        weights, experts = torch.topk(probs, self.top_k, dim=-1)
        if self.norm_topk_prob:
            weights = weights / weights.sum(dim=-1, keepdim=True)
        return weights.to(tokens.dtype), experts, router_logits

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        tokens = hidden_states.reshape(-1, hidden_states.shape[-1])
        weights, experts, _ = self.route(tokens)
        out = torch.zeros_like(tokens)
        for e, expert in enumerate(self.experts):
            # every expert runs (on zero rows if unused) so each parameter takes part in autograd, as in the release
            token_idx, rank = (experts == e).nonzero(as_tuple=True)
            out.index_add_(0, token_idx, expert(tokens[token_idx]) * weights[token_idx, rank, None])
        return out.view_as(hidden_states)


class SDARMoeModel(SDARModel):
    """The SDAR-MoE decoder stack without the LM head (``model.*`` tensors)."""

    config_class = SDARMoeConfig

    def build_mlp(self, config: SDARMoeConfig, layer_idx: int) -> nn.Module:
        """The MoE block for sparse layers, a dense SwiGLU of ``intermediate_size`` otherwise."""
        if config.is_sparse_layer(layer_idx):
            return SDARMoeSparseMoeBlock(config)
        return SDARMLP(config.hidden_size, config.intermediate_size, config.hidden_act)


class SDARMoeForCausalLM(SDARForCausalLM):
    """SDAR-MoE with its LM head: the class ``AutoModel``/``AutoModelForCausalLM`` load for ``sdar_moe``.

    ``forward`` is :meth:`dare_sdar.modeling_sdar.SDARForCausalLM.forward`.
    """

    config_class = SDARMoeConfig
    backbone_class = SDARMoeModel
