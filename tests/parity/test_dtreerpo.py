"""d-TreeRPO's edge loss against the official trainer (THU-BPM/d-TreeRPO@3eb6f21, ``dtreerpo/dtreerpo_trainer.py``).

The fixture (``tests/fixtures/parity/dtreerpo/``, built by ``tools/parity/build_dtreerpo.py``) holds tree edges
(parent and child states, sibling groups, local advantages) and the official loss (local transition PPO, k3 KL,
sibling self-distillation at progress 0.5) and gradients. DARE's :meth:`DTreeRPO.edge_loss` on the same edges
(log-probs of the tokens decoded on each edge under the parent state, up to the child's first EOS) must match
to 1e-5 (relative), and changing one official setting must break the match. The tree rollout is not compared.
DARE runs the functions ``DTreeRPOTrainer`` runs on the edges (:class:`~dare_grpo.objectives.dtreerpo.trainer.TreeRollout` with
the parents' attention as the trainer builds it, :func:`~dare_grpo.objectives.dtreerpo.trainer.score_edges` for the old and
reference policies, :func:`~dare_grpo.objectives.dtreerpo.trainer.tree_update`).
"""

from __future__ import annotations

import pytest
import torch

from dare.diffusion.estimators import ScoringBatch
from dare.rl import step
from dare_grpo.objectives.dtreerpo import DTreeRPO, DTreeRPOParams
from dare_grpo.objectives.dtreerpo.loss import sd_pair_count
from dare_grpo.objectives.dtreerpo.rollout import transition_mask
from dare_grpo.objectives.dtreerpo.trainer import TreeRollout, score_edges, tree_update
from tools.parity.common import model_from_state, plain_logits, read_fixture, rel_diff

TOL = 1e-5


def run_dare(**overrides):
    t, meta = read_fixture("dtreerpo")
    s = meta["settings"]
    params = DTreeRPOParams.model_validate({"preset": "official", **overrides})
    objective = DTreeRPO(params)
    models = {m: model_from_state(t, f"{m}.") for m in ("current", "old", "ref")}
    P, M = meta["prompt_length"], meta["mask_id"]
    parent, child, group = t["parent_ids"], t["child_ids"], t["group_ids"]
    # the distinct parent states (siblings share theirs), with the attention the trainer gives them
    first = torch.tensor([int(torch.nonzero(group == g)[0]) for g in group.unique()])
    parents = parent[first]
    attn = torch.cat([(parents[:, :P] != meta["pad_id"]).long(), torch.ones_like(parents[:, P:])], 1)
    if params.prompt_padding == "attend":
        attn[:, :P] = 1
    tokens = child[:, P:]
    active = transition_mask(parent[:, P:], tokens, M, (meta["eos_id"],))
    adv = t["advantages"]
    leaves = ScoringBatch(child, torch.ones_like(child), torch.ones_like(tokens, dtype=torch.bool), P, M)
    rollout = TreeRollout(batch=leaves, texts=[], rewards=torch.zeros(len(child)), reward_parts={}, advantages=adv,
                          parent_ids=parents, parent_attention=attn, edge_parent=group, edge_tokens=tokens,
                          active=active, edge_advantages=adv, sd_pairs=sd_pair_count(group, adv, active))
    rollout.edge_old = score_edges(plain_logits(models["old"]), rollout)
    if params.uses_reference_policy():
        rollout.edge_ref = score_edges(plain_logits(models["ref"]), rollout)
    loss, _ = tree_update(step.StepSettings(objective), plain_logits(models["current"]), rollout,
                          progress=s["global_step"] / s["max_steps"])
    grads = {k: p.grad for k, p in models["current"].named_parameters() if k in meta["grad_params"]}
    return t, torch.tensor(loss), grads


def _worst(t, loss, grads) -> float:
    return max([rel_diff(loss.reshape(1), t["expected.loss"])]
               + [rel_diff(g, t[f"expected.grad.{n}"]) for n, g in grads.items()])


def test_official_preset_reproduces_the_official_trainer():
    assert _worst(*run_dare()) <= TOL


@pytest.mark.parametrize("change", [
    {"clip_eps_low": 0.2, "clip_eps_high": 0.2},
    {"beta": 0.0},
    {"self_distillation": False},
    {"sd_lambda_max": 3e-2},
    {"prompt_padding": "exclude"},
])
def test_changing_one_official_setting_breaks_parity(change):
    assert _worst(*run_dare(**change)) > 1e-4, change
