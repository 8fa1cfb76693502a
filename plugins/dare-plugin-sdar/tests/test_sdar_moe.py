"""SDAR-MoE routing and accumulation, against hand-computed numbers."""

from __future__ import annotations

import math

import torch

from dare_sdar import SDARMoeConfig
from dare_sdar.modeling_sdar import SDARMLP
from dare_sdar.modeling_sdar_moe import SDARMoeForCausalLM, SDARMoeSparseMoeBlock


def moe_config(**overrides) -> SDARMoeConfig:
    cfg = dict(hidden_size=4, intermediate_size=8, moe_intermediate_size=3, num_experts=4, num_experts_per_tok=2,
               norm_topk_prob=True, num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=1, head_dim=4,
               vocab_size=16)
    cfg.update(overrides)
    return SDARMoeConfig(**cfg)


def block_with_router(router_logits_of_unit_tokens: list[list[float]], **overrides) -> SDARMoeSparseMoeBlock:
    """An MoE block whose router gives token ``e_i`` (unit vector i) the logits row ``i`` of the argument."""
    torch.manual_seed(0)
    block = SDARMoeSparseMoeBlock(moe_config(**overrides))
    with torch.no_grad():
        block.gate.weight.copy_(torch.tensor(router_logits_of_unit_tokens).T)
    return block


def test_router_picks_top_k_and_renormalises():
    # token 0: logits [0, 1, 2, 3] -> experts 3, 2 with softmax weights e^3, e^2 renormalised: 1/(1+e^-1), 1/(1+e)
    # token 1: logits [5, 0, 5, -1] -> a tie 0/2 at the top (both picked), equal weights 0.5
    block = block_with_router([[0, 1, 2, 3], [5, 0, 5, -1], [0, 0, 0, 0], [0, 0, 0, 0]])
    weights, experts, logits = block.route(torch.eye(4)[:2])
    assert experts[0].tolist() == [3, 2]
    assert torch.allclose(weights[0], torch.tensor([1 / (1 + math.exp(-1)), 1 / (1 + math.e)]), atol=1e-6)
    assert sorted(experts[1].tolist()) == [0, 2] and torch.allclose(weights[1], torch.tensor([0.5, 0.5]))
    assert torch.equal(logits, torch.tensor([[0.0, 1, 2, 3], [5, 0, 5, -1]]))


def test_without_norm_topk_prob_the_weights_are_the_softmax_probabilities():
    block = block_with_router([[0, 1, 2, 3]] + [[0, 0, 0, 0]] * 3, norm_topk_prob=False)
    weights, experts, _ = block.route(torch.eye(4)[:1])
    z = sum(math.exp(v) for v in (0, 1, 2, 3))
    assert experts[0].tolist() == [3, 2]
    assert torch.allclose(weights[0], torch.tensor([math.exp(3) / z, math.exp(2) / z]), atol=1e-6)


def test_output_is_the_weighted_sum_of_the_chosen_experts():
    block = block_with_router([[0, 1, 2, 3], [5, 0, 5, -1], [3, 2, 1, 0], [0, 4, 0, 0]])
    h = torch.eye(4)[None]  # [1, 4 tokens, H=4]
    weights, experts, _ = block.route(h[0])
    with torch.no_grad():
        got = block(h)[0]
        want = torch.stack([sum(w * block.experts[int(e)](h[0, t]) for w, e in zip(weights[t], experts[t])) for t in range(4)])
    assert torch.allclose(got, want, atol=1e-6)


def test_bf16_accumulation_runs_in_expert_id_order():
    """Release numerics: a zero bf16 buffer, one bf16 add per expert in order 0..E-1 (rank order would differ)."""
    torch.manual_seed(3)
    block = SDARMoeSparseMoeBlock(moe_config(hidden_size=64, moe_intermediate_size=32, num_experts=8, num_experts_per_tok=4))
    block = block.to(torch.bfloat16)
    h = torch.randn(1, 64, 64).to(torch.bfloat16)
    tokens = h[0]
    weights, experts, _ = block.route(tokens)
    with torch.no_grad():
        got = block(h)[0]
        out = torch.stack([expert(tokens) for expert in block.experts])  # [E, N, H]: every expert on every token
        by_expert = torch.zeros_like(tokens)
        by_rank = torch.zeros_like(tokens)
        for t in range(64):
            term = {int(e): out[int(e), t] * weights[t, k] for k, e in enumerate(experts[t])}
            for e in sorted(term):
                by_expert[t] = by_expert[t] + term[e]
            for e in experts[t].tolist():
                by_rank[t] = by_rank[t] + term[e]
    assert torch.equal(got, by_expert)
    assert not torch.equal(by_expert, by_rank)  # the order is observable in bf16


def test_sparse_layers_follow_decoder_sparse_step_and_mlp_only_layers():
    config = moe_config(num_hidden_layers=4, decoder_sparse_step=2, mlp_only_layers=[3])
    with torch.device("meta"):
        model = SDARMoeForCausalLM(config)
    kinds = [type(layer.mlp) for layer in model.model.layers]
    assert kinds == [SDARMLP, SDARMoeSparseMoeBlock, SDARMLP, SDARMLP]
    names = set(model.state_dict())
    assert "model.layers.1.mlp.experts.3.down_proj.weight" in names and "model.layers.1.mlp.gate.weight" in names
    assert "model.layers.0.mlp.gate_proj.weight" in names and "model.layers.3.mlp.gate.weight" not in names
    assert model.model.layers[0].mlp.gate_proj.weight.shape == (8, 4)  # dense layers use intermediate_size
