"""d1 against the official trainer (dllm-reasoning/d1@837888f, ``diffu-grpo/diffu_grpo_trainer.py``).

The fixture (``tests/fixtures/parity/d1/``, built by ``tools/parity/build_d1.py`` from the official code)
holds the official random draws, per-token log-probs, loss and gradients. DARE's public RL step
(:mod:`dare.rl.step`, the functions ``GRPOTrainer`` runs: rollout batch, passes, old/reference scores, update) runs
on the fixture with the one-step estimator fed the same draws; with ``preset: official`` DARE's loss and gradients
must match to 1e-5 (relative), and changing any one official setting must break the match.
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
from tools.parity.common import model_from_state, plain_logits, public_step, read_fixture, rel_diff, trainer_update, update_worst

TOL = 1e-5
ADAM_CONDITIONED = 1e-5  # update_worst: weight changes compared where the official |gradient| is at least this


def run_dare(**overrides):
    """DARE's d1 step on the fixture with ``preset: official`` (+ ``overrides``): per-token log-probs, loss, grads."""
    t, meta = read_fixture("d1")
    s = meta["settings"]
    params = D1Params.model_validate({"preset": "official", "group_size": meta["group_size"],
                                      "num_iterations": s["num_iterations"], **overrides})
    objective = D1(params)
    models = {m: model_from_state(t, f"{m}.") for m in ("current", "old", "ref")}
    P = meta["prompt_length"]
    ids = t["input_ids"]
    sampled = ScoringBatch(ids, torch.cat([t["prompt_mask"], torch.ones_like(ids[:, P:])], 1),
                           torch.ones_like(ids[:, P:], dtype=torch.bool), P, meta["mask_id"])
    settings = step.StepSettings(objective, temperature=1.0, stop_ids=(meta["eos_id"],))
    batch = step.rollout_batch(sampled, params)
    draws = t["random_matrix"][:, :P]  # the official forward_process's draw, prompt part
    with mock.patch.object(onestep_module, "uniform", lambda shape, g, device: draws):
        estimator = onestep_module.OneStepEstimator(p_mask_prompt=params.p_mask_prompt)
        passes = step.draw_passes(estimator, batch, None, params, settings.stop_ids)

    advantages = step.rollout_advantages(t["rewards"], params)
    loss, _ = public_step(objective, batch, passes, advantages, models["current"], models["old"], models["ref"])
    (current,) = step.score_passes(plain_logits(models["current"]), batch, passes)
    grads = {n: p.grad for n, p in models["current"].named_parameters() if n in meta["grad_params"]}
    return t, current.token, passes[0].scored, torch.tensor(loss), grads


def _worst(t, token, scored, loss, grads) -> float:
    keep = t["expected.completion_mask"].bool()
    diffs = [rel_diff(loss.reshape(1), t["expected.loss"])]
    diffs += [rel_diff(g, t[f"expected.grad.{n}"]) for n, g in grads.items()]
    if torch.equal(scored, keep):
        diffs.append(rel_diff(token[keep], t["expected.logp"][keep]))
    else:
        diffs.append(float("inf"))
    return max(diffs)


def test_official_preset_reproduces_the_official_trainer():
    t, token, scored, loss, grads = run_dare()
    keep = t["expected.completion_mask"].bool()
    assert torch.equal(scored, keep)  # tokens through the first EOS
    assert torch.allclose(group_advantages(t["rewards"], 3, "drgrpo"), t["expected.advantages"], atol=1e-7)
    assert rel_diff(token[keep], t["expected.logp"][keep]) <= TOL
    assert rel_diff(loss.reshape(1), t["expected.loss"]) <= TOL
    for n, g in grads.items():
        assert rel_diff(g, t[f"expected.grad.{n}"]) <= TOL, n


@pytest.mark.parametrize("change", [
    {"advantage": "grpo"},
    {"clip_eps_low": 0.2, "clip_eps_high": 0.2},
    {"dual_clip_c": 1.5},
    {"beta": 0.0},
    {"response_tokens": "all"},
    {"prompt_padding": "exclude"},
])
def test_changing_one_official_setting_breaks_parity(change):
    assert _worst(*run_dare(**change)) > 1e-3, change


def trainer_step(tmp_path, optimizer=None, **overrides):
    """One real ``GRPOTrainer`` optimizer step from the fixture's rollout (``tools.parity.common.trainer_update``):
    ``(loss, clipped gradients, updated weights)`` and the fixture."""
    from dare.components import SpecialTokens
    from dare_llada.family import LLaDAFamily

    t, meta = read_fixture("d1")
    params = D1Params.model_validate({"preset": "official", "group_size": meta["group_size"],
                                      "num_iterations": meta["settings"]["num_iterations"], **overrides})
    objective = D1(params)
    models = {m: model_from_state(t, f"{m}.") for m in ("current", "old", "ref")}
    P, ids = meta["prompt_length"], t["input_ids"]
    sampled = ScoringBatch(ids, torch.cat([t["prompt_mask"], torch.ones_like(ids[:, P:])], 1),
                           torch.ones_like(ids[:, P:], dtype=torch.bool), P, meta["mask_id"])
    draws = t["random_matrix"][:, :P]
    tokens = SpecialTokens(mask_id=meta["mask_id"], eos_id=meta["eos_id"], pad_id=meta["pad_id"])
    with mock.patch.object(onestep_module, "uniform", lambda shape, g, device: draws):
        out = trainer_update(objective, objective.make_estimator(None, None, None), LLaDAFamily(), tokens, models,
                             sampled, t["rewards"], {**meta["optimizer"], **(optimizer or {})}, tmp_path)
    return t, *out


def _update_worst(t, loss, clipped, updated) -> float:
    """Worst relative difference of the loss, the clipped gradients and the weight change from the official step
    (:func:`tools.parity.common.update_worst`)."""
    return update_worst(t, loss, clipped, updated, ADAM_CONDITIONED)


def test_one_grpo_trainer_step_reproduces_the_official_update(tmp_path):
    t, loss, clipped, updated = trainer_step(tmp_path)
    assert set(clipped) == {k[len("current."):] for k in t if k.startswith("current.")}  # every parameter stepped
    assert _update_worst(t, loss, clipped, updated) <= TOL


@pytest.mark.parametrize("change", [
    {"optimizer": {"learning_rate": 1e-6}},
    {"optimizer": {"weight_decay": 0.0}},
    {"optimizer": {"max_grad_norm": 1.0}},
    {"beta": 0.0},
    {"response_tokens": "all"},
])
def test_changing_one_official_setting_breaks_the_update(tmp_path, change):
    change = dict(change)
    assert _update_worst(*trainer_step(tmp_path, change.pop("optimizer", None), **change)) > 1e-3, change
