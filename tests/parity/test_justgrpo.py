"""JustGRPO against the official code (LeapLabTHU/JustGRPO@eebe50e, ``grpo.py``).

The fixture (``tests/fixtures/parity/justgrpo/``, built by ``tools/parity/build_justgrpo.py``) holds the
official advantages, loss and gradients of one update (ratio 1, one backward per position). DARE's
autoregressive estimator and JustGRPO loss with ``preset: official`` must give the same advantages and
gradients to 1e-5 (relative; the loss itself is 0 up to rounding, since a group's advantages sum to 0 and
the ratio is 1), and changing one official setting must break the match. DARE runs its public RL step
(:mod:`dare.rl.step`, the functions ``GRPOTrainer`` runs).
"""

from __future__ import annotations

import pytest
import torch

from dare.diffusion.estimators import ScoringBatch
from dare.rl import step
from dare_grpo.objectives.justgrpo import JustGRPO, JustGRPOParams
from tools.parity.common import model_from_state, public_step, read_fixture, rel_diff

TOL = 1e-5


def run_dare(**overrides):
    t, meta = read_fixture("justgrpo")
    params = JustGRPOParams.model_validate({"preset": "official", "group_size": meta["group_size"], **overrides})
    model = model_from_state(t, "current.")
    P, G, n = meta["prompt_length"], meta["group_size"], meta["num_prompts"]
    order = torch.tensor([j * n + p for p in range(n) for j in range(G)])  # official layout -> DARE's groups
    ids = t["input_ids"][order]
    attn = torch.cat([(ids[:, :P] != meta["pad_id"]).long(), torch.ones_like(ids[:, P:])], 1)
    batch = step.rollout_batch(ScoringBatch(ids, attn, torch.ones_like(ids[:, P:], dtype=torch.bool), P,
                                            meta["mask_id"]), params)
    adv = step.rollout_advantages(t["rewards"][order], params)
    # "sampler" stands for a rollout at DARE's recipe temperature 0.6 (the official rollout and learner use 1.0)
    T = params.likelihood_temperature if params.likelihood_temperature != "sampler" else 0.6
    objective = JustGRPO(params)
    passes = step.draw_passes(objective.make_estimator(None, None, None), batch, None, params, ())
    total, _ = public_step(objective, batch, passes, adv, model, temperature=T)  # one inner iteration: no old policy
    grads = {k: p.grad for k, p in model.named_parameters() if k in meta["grad_params"]}
    inverse = torch.argsort(order)
    return t, adv[inverse], total, grads


def test_official_preset_reproduces_the_official_code():
    t, adv, loss, grads = run_dare()
    assert rel_diff(adv, t["expected.advantages"]) <= TOL
    assert abs(loss - float(t["expected.loss"])) <= 1e-6
    for n, g in grads.items():
        assert rel_diff(g, t[f"expected.grad.{n}"]) <= TOL, n


@pytest.mark.parametrize("change", [
    {"advantage": "drgrpo"},
    {"advantage_std_eps": 1e-6},
    {"likelihood_temperature": "sampler"},
    {"prompt_padding": "exclude"},
])
def test_changing_one_official_setting_breaks_parity(change):
    t, adv, loss, grads = run_dare(**change)
    worst = max([rel_diff(adv, t["expected.advantages"])] + [rel_diff(g, t[f"expected.grad.{n}"]) for n, g in grads.items()])
    assert worst > 1e-5, change
