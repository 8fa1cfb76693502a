"""d-TreeRPO: branch points, value propagation and local advantages, transition masks, the edge loss
(PPO eps 0.4, k3 KL, self-distillation with its schedules) by hand, the partial-denoising entry point, and one
optimiser step on a tiny LLaDA."""

from __future__ import annotations

import math

import pytest
import torch

from dare.trainers import DareConfig

from dare_grpo.objectives import DTreeRPO
from dare_grpo.objectives.dtreerpo.loss import EdgeLossInput, sd_pair_count, sd_schedule, self_distillation
from dare_grpo.objectives.dtreerpo.rollout import branch_points, local_advantages, node_indices, propagate_values, transition_mask


pytestmark = pytest.mark.usefixtures("one_thread")


E, LOG = math.exp, math.log


def test_branch_points_values_and_local_advantages():
    assert branch_points(128, 2) == [128, 64, 0]
    assert branch_points(8, 3) == [8, 6, 3, 0]
    values = propagate_values(torch.tensor([1.0, 0.0, 1.0, 1.0]), fans=[2, 2])
    assert [v.tolist() for v in values] == [[0.75], [0.5, 1.0], [1.0, 0.0, 1.0, 1.0]]
    assert local_advantages(values[1], 2).tolist() == [-0.5, 0.5]
    assert local_advantages(values[2], 2).tolist() == [1.0, -1.0, 0.0, 0.0]
    assert local_advantages(torch.tensor([1.0, 0.0, 0.5]), 3).tolist() == [0.75, -0.75, 0.0]  # V_i - mean(others)
    with pytest.raises(ValueError):
        local_advantages(torch.tensor([1.0, 0.0]), 1)


def test_node_indices_are_distinct_per_prompt_and_level():
    fans = [2, 3]  # 2 children of the root, 3 grandchildren each: 8 nodes below a root
    assert node_indices([5], fans, 1) == [40, 41]
    assert node_indices([5], fans, 2) == [42 + j for j in range(6)]
    every = [i for p in (0, 1, 5) for level in (1, 2) for i in node_indices([p], fans, level)]
    assert len(set(every)) == len(every) == 24
    assert node_indices([5, 0], fans, 1) == [40, 41, 0, 1]  # rows follow the prompts' order
    with pytest.raises(ValueError, match="level must be in 1..2"):
        node_indices([0], fans, 3)


def test_transition_mask_is_decoded_positions_up_to_the_first_stop():
    M, EOS = 9, 2
    parent = torch.tensor([[M, M, 5, M], [M, M, 5, M]])
    child = torch.tensor([[6, M, 5, EOS], [EOS, 7, 5, 8]])
    assert transition_mask(parent, child, M, (EOS,)).tolist() == [[True, False, False, True],
                                                                  [True, False, False, False]]


def test_schedules():
    lam, tau = sd_schedule(0.5, 3e-3, 2.0, 2.0, 0.7)
    assert lam == pytest.approx(3e-3 * (E(1) - 1) / (E(2) - 1)) and tau == pytest.approx(2 * 0.5**0.7)
    assert sd_schedule(0.0, 3e-3, 2.0, 2.0, 0.7) == (0.0, 2.0)
    assert sd_schedule(1.0, 3e-3, 2.0, 2.0, 0.7) == (pytest.approx(3e-3), 1e-6)


def test_self_distillation_by_hand():
    # one group (same parent) of 3 children: A = [1, 0.5, -1]; the two positive ones agree at j=0, differ at j=1
    logp = torch.tensor([[-1.0, -2.0], [-1.0, -3.0], [-4.0, -4.0]], requires_grad=True)
    tokens = torch.tensor([[5, 7], [5, 8], [9, 9]])
    active = torch.ones(3, 2, dtype=torch.bool)
    group, adv = torch.zeros(3, dtype=torch.long), torch.tensor([1.0, 0.5, -1.0])
    w1 = E(1) / (E(1) + E(0.5))
    w2 = 1 - w1
    want = (0 + 1.0) + w1 * (LOG(w1) + 2.0) + w2 * (LOG(w2) + 3.0)  # sum_j sum_v q (log q - log p)
    got = self_distillation(logp, tokens, active, group, adv, tau=1.0)
    assert got.item() == pytest.approx(want, rel=1e-6)
    assert sd_pair_count(group, adv, active) == 2
    got.backward()
    assert torch.allclose(logp.grad, torch.tensor([[-w1, -w1], [-w2, -w2], [0.0, 0.0]]))


def test_edge_loss_ppo_kl_and_self_distillation_by_hand(tmp_path):
    cur = torch.tensor([[-1.0, -2.0], [-0.5, -1.5], [-1.0, 0.0]], requires_grad=True)
    inp = EdgeLossInput(
        current=cur, old=torch.tensor([[-1.5, -2.0], [-1.5, -0.5], [-1.0, 0.0]]),
        ref=torch.tensor([[-1.0, -2.5], [-0.5, -1.5], [-2.0, 0.0]]), tokens=torch.tensor([[3, 4], [5, 6], [7, 8]]),
        active=torch.tensor([[True, True], [True, True], [True, False]]), advantages=torch.tensor([1.0, -1.0, 0.5]),
        group=torch.tensor([0, 0, 1]), num_edges=3, sd_pairs=2, progress=0.5,
    )
    terms = DTreeRPO(clip_eps_low=0.4, clip_eps_high=0.4, beta=0.01, kl_estimator="k3", dual_clip_c=None).edge_loss(inp)
    # edge 0 (A=1): rho e^0.5 > 1.4 -> -1.4, rho 1 -> -1; edge 1 (A=-1): rho e -> +e, rho e^-1 < 0.6 -> 0.6;
    # edge 2 (A=0.5, one active token): -0.5
    ppo = ((-1.4 - 1) / 2 + (E(1) + 0.6) / 2 - 0.5) / 3
    k3 = lambda d: E(-d) + d - 1  # noqa: E731
    kl = (k3(0.5) / 2 + 0 + k3(1.0)) / 3
    lam, _ = sd_schedule(0.5, 3e-3, 2.0, 2.0, 0.7)
    sd = (1.0 + 2.0) / 2  # group 0: only edge 0 is positive, q = its own tokens: -l at both positions; group 1 alone
    assert terms.loss.item() == pytest.approx(ppo + 0.01 * kl + lam * sd, abs=2e-7)
    assert terms.metrics["clip_fraction_high"].item() == pytest.approx(0.5 / 3)
    terms.loss.backward()
    # edge 0 token 1 (unclipped, A=1): -1/2/3, minus KL and SD terms; edge 1 token 0 (A<0, no dual clip): e/2/3
    assert cur.grad[0, 1].item() == pytest.approx(-1 / 6 + 0.01 * (1 - E(-0.5)) / 2 / 3 - lam / 2, rel=1e-5)
    assert cur.grad[1, 0].item() == pytest.approx(E(1) / 6, rel=1e-5)
    assert cur.grad[2, 1].item() == 0.0


def test_partial_denoising_continues_generate_exactly(tiny_llada_dir):
    """The entry point the tree uses: generate == partial(0 -> k) then partial(k -> end), same generator."""
    from dare.modeling import load_model
    from dare_llada.sampler import LLaDASampler

    lm = load_model(tiny_llada_dir)
    s = LLaDASampler({"gen_length": 4, "block_length": 2, "steps": 4, "temperature": 1.0})
    prompt = torch.tensor([[50, 51, 52], [0, 53, 54]])
    attn = torch.tensor([[1, 1, 1], [0, 1, 1]])
    full = s.generate(lm.model, lm.family, lm.tokens, prompt, attn, generator=torch.Generator().manual_seed(1))
    g = torch.Generator().manual_seed(1)
    root = torch.cat([prompt, torch.full((2, 4), lm.tokens.mask_id)], 1)
    mid = s.partial_denoise(lm.model, lm.family, lm.tokens, root, 3, attn, (0, 3), generator=g)
    end = s.partial_denoise(lm.model, lm.family, lm.tokens, mid.sequences, 3, attn, (3, None), generator=g)
    assert torch.equal(end.sequences, full.sequences)
    assert int((mid.sequences[:, 3:] == lm.tokens.mask_id).sum()) == 2  # 3 of 4 steps done: one mask per row left
    assert torch.equal(torch.where(mid.unmask_step >= 0, mid.unmask_step, end.unmask_step), full.unmask_step)
    assert mid.nfe + end.nfe == full.nfe == 4


def test_one_step_raises_the_transition_likelihood_of_a_positive_edge(tmp_path, tiny_llada_dir):
    from dare.diffusion.estimators import ScoringBatch
    from dare.modeling import load_model
    from dare.rl.prompts import PromptDataset
    from dare_grpo.objectives.dtreerpo.trainer import TreeRollout, edge_scores
    from dare_llada.sampler import LLaDASampler

    lm = load_model(tiny_llada_dir)
    objective = DTreeRPO({"num_iterations": 1, "beta": 0.0, "clip_eps_low": 0.4, "clip_eps_high": 0.4, "dual_clip_c": None})
    sampler = LLaDASampler({"gen_length": 4, "block_length": 4, "steps": 4, "temperature": 1.0})
    args = DareConfig(output_dir=str(tmp_path), per_device_train_batch_size=1, max_steps=4, learning_rate=1e-2,
                      report_to="none")
    trainer = objective.trainer_class()(
        model=lm.model, args=args, train_dataset=PromptDataset(["12"], [{}]), processing_class=lm.tokenizer,
        family=lm.family, tokens=lm.tokens, objective=objective, estimator=None, sampler=sampler, reward=None,
    )
    trainer.current_gradient_accumulation_steps = 1
    trainer.state.global_step, trainer.state.max_steps = 2, 4  # progress 0.5: self-distillation is on
    tok, M = lm.tokenizer, lm.tokens.mask_id
    prompt = tok("12", add_special_tokens=False)["input_ids"]
    root = torch.tensor([prompt + [M] * 4])
    good = tok("ab", add_special_tokens=False)["input_ids"] + [M, M]
    bad = tok("xy", add_special_tokens=False)["input_ids"] + [M, M]
    tokens = torch.tensor([good, bad])
    active = tokens != M
    leaves = ScoringBatch(torch.cat([root[:, :2].repeat(2, 1), tokens], 1), torch.ones(2, 6, dtype=torch.long),
                          torch.ones(2, 4, dtype=torch.bool), 2, M)
    rollout = TreeRollout(batch=leaves, texts=[], rewards=torch.tensor([1.0, 0.0]), reward_parts={},
                          advantages=torch.tensor([1.0, -1.0]), parent_ids=root, parent_attention=torch.ones_like(root),
                          edge_parent=torch.tensor([0, 0]), edge_tokens=tokens, active=active,
                          edge_advantages=torch.tensor([1.0, -1.0]), sd_pairs=sd_pair_count(torch.tensor([0, 0]),
                                                                                             torch.tensor([1.0, -1.0]),
                                                                                             active))
    with torch.no_grad():
        before = edge_scores(trainer.logits_fn(lm.model), rollout, slice(0, 1))[0].sum(-1)
    lm.model.zero_grad()
    _, metrics = trainer.update(lm.model, rollout, 0)
    assert metrics["sd_loss"] > 0
    with torch.no_grad():
        for p in lm.model.parameters():
            if p.grad is not None:
                p -= 0.05 * p.grad
        after = edge_scores(trainer.logits_fn(lm.model), rollout, slice(0, 1))[0].sum(-1)
    assert after[0] > before[0] and after[1] < before[1], (before, after)


def test_defaults_follow_the_recipe():
    p = DTreeRPO().params
    assert (p.num_tree_samples, p.tree_branch_factor, p.contraction, p.num_iterations, p.clip_eps_low,
            p.clip_eps_high, p.beta, p.kl_estimator, p.self_distillation, p.sd_lambda_max, p.sd_gamma, p.sd_tau_max,
            p.sd_beta) == (4, 4, 2, 12, 0.4, 0.4, 0.01, "k3", True, 3e-3, 2.0, 2.0, 0.7)
    assert DTreeRPO().fans() == [4, 4]


def _validate(tmp_path, objective: str, params: dict, sampler: dict, family: str = "llada") -> dict:
    """Spec-validation problems ``{yaml path: message}`` of a small spec (no model is loaded)."""
    import yaml

    from dare.errors import SpecError
    from dare.runspec import load_spec

    spec = {"model": {"new": {"family": family, "preset": "tiny"}},
            "data": {"train": {"path": "dare://sudoku/train.parquet", "limit": 2}},
            "algorithm": {"name": objective, "params": params}, "sampler": sampler,
            "rewards": [{"name": "format"}], "train": {"learning_rate": 1e-3, "max_steps": 1},
            "output": {"dir": str(tmp_path / "run")}}
    (tmp_path / "s.yaml").write_text(yaml.safe_dump(spec))
    try:
        load_spec(tmp_path / "s.yaml")
    except SpecError as exc:
        return dict(exc.problems)
    return {}


def test_sampler_without_partial_denoising_and_group_size_are_rejected(tmp_path):
    llada = {"name": "llada", "params": {"gen_length": 4, "block_length": 2, "steps": 4, "temperature": 1.0}}
    assert _validate(tmp_path, "d-treerpo", {}, llada, family="dream") == {}  # LLaDA's decoder over Dream
    dream = {"name": "dream", "params": {"gen_length": 4, "steps": 4, "temperature": 1.0}}
    bad = _validate(tmp_path, "d-treerpo", {"group_size": 4}, dream, family="dream")
    assert set(bad) == {"sampler.name", "algorithm.params.group_size"} and "partial_denoise" in bad["sampler.name"]
