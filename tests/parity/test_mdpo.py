"""MDPO's step loss against the official trainer (autonomousvision/mdpo@e6ae439, ``src/open_r1/mdpo/mdpo_trainer.py``).

The fixture (``tests/fixtures/parity/mdpo/``, built by ``tools/parity/build_mdpo.py``) holds step rows (states,
one-shot predictions, confidences, step advantages) and the official loss (learner at the rollout temperature
0.1, ``lambda = G / #masked``, k2 KL) and gradients. DARE's :meth:`MDPO.step_loss` on the same rows with
``preset: official`` must match to 1e-5 (relative), and changing one official setting must break the match.
The recording rollout and the step advantages are not compared. DARE runs the functions ``MDPOTrainer`` runs: the
step rows of a trajectory (:func:`dare_grpo.objectives.mdpo.trainer.step_rows`, the rollout batch convention of
:func:`dare.rl.step.rollout_batch`) and the update (:func:`dare_grpo.objectives.mdpo.trainer.mdpo_update`).
"""

from __future__ import annotations

import pytest
import torch

from dare.rl import step
from dare_grpo.objectives.mdpo import MDPO, MDPOParams
from dare_grpo.objectives.mdpo.rollout import MDPOTrajectory
from dare_grpo.objectives.mdpo.trainer import MDPORollout, mdpo_update, step_rows
from tools.parity.common import model_from_state, plain_logits, read_fixture, rel_diff

TOL = 1e-5
ROLLOUT_TEMPERATURE = 0.1  # the recipe's sampler temperature, what likelihood_temperature: sampler resolves to


def run_dare(**overrides):
    t, meta = read_fixture("mdpo")
    params = MDPOParams.model_validate({"preset": "official", **overrides})
    objective = MDPO(params)
    T = ROLLOUT_TEMPERATURE if params.likelihood_temperature == "sampler" else float(params.likelihood_temperature)
    models = {m: model_from_state(t, f"{m}.") for m in ("current", "ref")}
    prompts, states, preds = t["prompt_ids"], t["states"], t["predictions"]
    # each fixture row is one selected step of its own trajectory: x^(s), y^(s) and the confidences of step 0
    traj = MDPOTrajectory(sequences=torch.cat([prompts, preds], 1), inputs=states[:, None], predictions=preds[:, None],
                          confidence=t["confidence"][:, None], nfe=0)
    batch, pas, mask, conf = step_rows(traj, prompts, (prompts != meta["pad_id"]).long(), torch.tensor([0]),
                                       torch.ones_like(states, dtype=torch.bool), meta["mask_id"])
    batch = step.rollout_batch(batch, params)
    rollout = MDPORollout(batch=batch, texts=[], rewards=torch.zeros(len(states)), reward_parts={},
                          advantages=t["advantages"], steps=torch.tensor([0]), step_batch=batch, step_pass=pas,
                          step_mask=mask, step_advantages=t["advantages"], confidence=conf)
    if params.uses_reference_policy():
        rollout.step_ref = step.score_passes(plain_logits(models["ref"]), batch, [pas], T)[0].token
    loss, _ = mdpo_update(step.StepSettings(objective, T), plain_logits(models["current"]), rollout)
    grads = {k: p.grad for k, p in models["current"].named_parameters() if k in meta["grad_params"]}
    return t, torch.tensor(loss), grads


def _worst(t, loss, grads) -> float:
    return max([rel_diff(loss.reshape(1), t["expected.loss"])]
               + [rel_diff(g, t[f"expected.grad.{n}"]) for n, g in grads.items()])


def test_official_preset_reproduces_the_official_trainer():
    # the fixture's KL coefficient is the paper's 0.02 (the recipe trains without KL), so the KL term is compared too
    assert _worst(*run_dare(beta=0.02)) <= TOL


@pytest.mark.parametrize("change", [
    {"likelihood_temperature": 1.0},
    {"kl_estimator": "k3"},
    {"beta": 0.0},
    {"prompt_padding": "attend"},
])
def test_changing_one_official_setting_breaks_parity(change):
    assert _worst(*run_dare(**{"beta": 0.02, **change})) > 1e-4, change
