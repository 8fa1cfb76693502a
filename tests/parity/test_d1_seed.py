"""The seed paper's d1 (yjyddq/DARE@83ae8a3, ``verl/workers/actor/llada_dp_actor_d1.py``) against DARE's d1.

d1 is released by its authors (dllm-reasoning/d1: ``preset: official``, ``tests/parity/test_d1.py``) and
re-implemented in the seed paper's verl fork. The fixture (``tests/fixtures/parity/d1_seed/``, built by
``tools/parity/build_d1_seed.py``) holds the fork's prompt draws, per-token log-probs, loss and gradients of one
``update_policy``; DARE's side is the public RL step (:mod:`dare.rl.step`, the functions ``GRPOTrainer`` runs:
rollout batch, passes, advantages, old scores, update). The estimator is the same in both releases; the settings
are not: the fork's are DARE's defaults (``preset: dare``), which match it to 1e-5 (relative), while the authors'
settings (``preset: official``) and any one changed default do not (docs/algorithms.md §10.1).
"""

from __future__ import annotations

from unittest import mock

import pytest
import torch

from dare.diffusion.estimators import ScoringBatch
from dare.diffusion.estimators import onestep as onestep_module
from dare.rl import step
from dare.rl.advantages import group_advantages
from dare_grpo.objectives.d1 import D1, D1Params
from tools.parity.common import model_from_state, plain_logits, public_step, read_fixture, rel_diff

TOL = 1e-5


def run_dare(**settings):
    """DARE's d1 on the fixture with ``settings`` (default: DARE's defaults), run by the public RL step
    (:mod:`dare.rl.step`: rollout batch, passes, advantages, old scores, update): per-token log-probs, loss, grads."""
    t, meta = read_fixture("d1_seed")
    params = D1Params.model_validate({"group_size": meta["group_size"], **settings})
    objective = D1(params)
    models = {m: model_from_state(t, f"{m}.") for m in ("current", "old")}
    P, ids = meta["prompt_length"], t["input_ids"]
    sampled = ScoringBatch(ids, t["attention_mask"], torch.ones_like(ids[:, P:], dtype=torch.bool), P, meta["mask_id"])
    settings = step.StepSettings(objective, temperature=1.0, stop_ids=(meta["eos_id"],))
    batch = step.rollout_batch(sampled, params)
    with mock.patch.object(onestep_module, "uniform", lambda shape, g, device: t["prompt_draws"]):
        estimator = objective.make_estimator(None, None, None)
        passes = step.draw_passes(estimator, batch, None, params, settings.stop_ids)
    (pas,) = passes

    adv = step.rollout_advantages(t["rewards"], params)
    loss, _ = public_step(objective, batch, passes, adv, models["current"], models["old"])
    (current,) = step.token_scores(plain_logits(models["current"]), batch, passes)
    grads = {n: p.grad for n, p in models["current"].named_parameters() if n in meta["grad_params"]}
    return t, meta, pas, current, torch.tensor(loss), grads


def _worst(t, meta, pas, token, loss, grads) -> float:
    return max([rel_diff(token, t["expected.logp"]), rel_diff(loss.reshape(1), t["expected.loss"])]
               + [rel_diff(g, t[f"expected.grad.{n}"]) for n, g in grads.items()])


def test_dare_defaults_reproduce_the_seed_papers_d1():
    t, meta, pas, token, loss, grads = run_dare()
    assert torch.equal(pas.mask[0], t["mask_indices"])  # real prompt tokens at 15 %, the whole response
    assert rel_diff(group_advantages(t["rewards"], 3, "grpo"), t["expected.advantages"]) <= TOL
    assert rel_diff(token, t["expected.logp"]) <= TOL
    assert rel_diff(loss.reshape(1), t["expected.loss"]) <= TOL
    for n, g in grads.items():
        assert rel_diff(g, t[f"expected.grad.{n}"]) <= TOL, n


@pytest.mark.parametrize("change", [
    {"preset": "official"},                       # the authors' release (dllm-reasoning/d1)
    {"advantage": "drgrpo"},
    {"clip_eps_low": 0.5, "clip_eps_high": 0.5},
    {"response_tokens": "through_first_eos"},
    {"prompt_padding": "attend"},
])
def test_the_authors_settings_or_one_changed_default_break_it(change):
    assert _worst(*run_dare(**change)) > 1e-3, change
