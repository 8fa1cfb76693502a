"""d-TreeRPO's edge loss against the official trainer (THU-BPM/d-TreeRPO@3eb6f21, ``dtreerpo/dtreerpo_trainer.py``).

The fixture (``tests/fixtures/parity/dtreerpo/``, built by ``tools/parity/build_dtreerpo.py``) holds tree edges
(parent and child states, sibling groups, local advantages) and the official loss (local transition PPO, k3 KL,
sibling self-distillation at progress 0.5) and gradients. DARE's :meth:`DTreeRPO.edge_loss` on the same edges
(log-probs of the tokens decoded on each edge under the parent state, up to the child's first EOS) must match
to 1e-5 (relative), and changing one official setting must break the match. The tree rollout is not compared.
"""

from __future__ import annotations

import pytest
import torch

from dare.rl.conventions import keep_through_first_stop
from dare_grpo.objectives.dtreerpo import DTreeRPO, DTreeRPOParams, EdgeLossInput, sd_pair_count
from tools.parity.common import model_from_state, read_fixture, rel_diff

TOL = 1e-5


def run_dare(**overrides):
    t, meta = read_fixture("dtreerpo")
    s = meta["settings"]
    params = DTreeRPOParams.model_validate({"preset": "official", **overrides})
    models = {m: model_from_state(t, f"{m}.") for m in ("current", "old", "ref")}
    P, M = meta["prompt_length"], meta["mask_id"]
    parent, child = t["parent_ids"], t["child_ids"]
    tokens = child[:, P:]
    active = (parent[:, P:] == M) & (tokens != M) & keep_through_first_stop(tokens, (meta["eos_id"],))

    def edge_logp(model):  # the official trainer calls the model without an attention mask
        logp = torch.log_softmax(model(parent).logits[:, P:].float(), dim=-1)
        return logp.gather(-1, tokens[..., None]).squeeze(-1) * active

    with torch.no_grad():
        old, ref = edge_logp(models["old"]), edge_logp(models["ref"])
    current = edge_logp(models["current"])
    adv, group = t["advantages"], t["group_ids"]
    inp = EdgeLossInput(current=current, old=old, ref=ref, tokens=tokens, active=active, advantages=adv, group=group,
                        num_edges=parent.shape[0], sd_pairs=sd_pair_count(group, adv, active),
                        progress=s["global_step"] / s["max_steps"])
    loss = DTreeRPO(params).edge_loss(inp).loss
    loss.backward()
    grads = {k: p.grad for k, p in models["current"].named_parameters() if k in meta["grad_params"]}
    return t, loss.detach(), grads


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
])
def test_changing_one_official_setting_breaks_parity(change):
    assert _worst(*run_dare(**change)) > 1e-4, change
