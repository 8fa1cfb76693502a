"""coupled-GRPO against the official DiffuCoder trainer (apple/ml-diffucoder@f735e01,
``src/open_r1/coupled_grpo.py``).

The fixture (``tests/fixtures/parity/coupled_grpo/``, built by ``tools/parity/build_coupled_grpo.py``)
holds the official draws (the mask ratio ``t`` and the random matrix), per-token log-probs, loss and
gradients of a Dream-style model (logits shifted by one: ``dare_dream.family.shift_logits``). DARE's public RL
step (:mod:`dare.rl.step`, the functions ``GRPOTrainer`` runs) runs with the coupled estimator fed the same draws; with ``preset: official`` the loss and gradients must match to 1e-5
(relative), and changing any one official setting must break the match.
"""

from __future__ import annotations

from unittest import mock

import pytest
import torch

from dare.diffusion.estimators import ScoringBatch
from dare.diffusion.estimators import coupled as coupled_module
from dare.rl import step
from dare.rl.advantages import group_advantages
from dare_dream.family import shift_logits
from dare_grpo.objectives.coupled_grpo import CoupledGRPO, CoupledGRPOParams
from tools.parity.common import model_from_state, public_step, read_fixture, rel_diff, trainer_update, update_worst

TOL = 1e-5


def logits_fn(model):
    """The Dream-style model's aligned logits (position i scores token i)."""
    return lambda noisy, clean, attn: shift_logits(model(noisy, attention_mask=attn).logits)


def run_dare(**overrides):
    """DARE's coupled-GRPO step on the fixture with ``preset: official`` (+ ``overrides``)."""
    t, meta = read_fixture("coupled_grpo")
    s = meta["settings"]
    params = CoupledGRPOParams.model_validate({"preset": "official", "group_size": meta["group_size"],
                                              "num_iterations": s["num_iterations"], **overrides})
    objective = CoupledGRPO(params)
    models = {m: model_from_state(t, f"{m}.") for m in ("current", "old", "ref")}
    P = meta["prompt_length"]
    ids = t["input_ids"]
    N = ids.shape[0]
    sampled = ScoringBatch(ids, torch.cat([t["prompt_mask"], torch.ones_like(ids[:, P:])], 1),
                           torch.ones_like(ids[:, P:], dtype=torch.bool), P, meta["mask_id"])
    settings = step.StepSettings(objective, temperature=1.0, stop_ids=(meta["eos_id"],))
    batch = step.rollout_batch(sampled, params)
    # the official draws: one t for the batch (as U for t_min + (t_max - t_min) U), the random matrix
    u_t = ((t["mask_ratio"] - params.t_min) / (params.t_max - params.t_min)).float().expand(N, 1)
    draws = iter([u_t, t["random_matrix"][:, P:]])
    with mock.patch.object(coupled_module, "uniform", lambda shape, g, device: next(draws)):
        estimator = coupled_module.CoupledEstimator(t_min=params.t_min, t_max=params.t_max,
                                                    full_mask_term=params.full_mask_term)
        passes = step.draw_passes(estimator, batch, None, params, settings.stop_ids)
    advantages = step.rollout_advantages(t["rewards"], params)
    loss, _ = public_step(objective, batch, passes, advantages, models["current"], models["old"], models["ref"],
                          logits=logits_fn)
    (current,) = step.score_passes(logits_fn(models["current"]), batch, passes)
    grads = {n: p.grad for n, p in models["current"].named_parameters() if n in meta["grad_params"]}
    return t, current.token, passes[0].scored, torch.tensor(loss), grads


def _worst(t, token, scored, loss, grads) -> float:
    keep = t["expected.completion_mask"].bool()
    if not torch.equal(scored, keep):
        return float("inf")
    diffs = [rel_diff(loss.reshape(1), t["expected.loss"]), rel_diff(token[keep], t["expected.logp"][keep])]
    return max(diffs + [rel_diff(g, t[f"expected.grad.{n}"]) for n, g in grads.items()])


def test_official_preset_reproduces_the_official_trainer():
    t, token, scored, loss, grads = run_dare()
    keep = t["expected.completion_mask"].bool()
    assert torch.equal(scored, keep)  # tokens through the first EOS
    assert torch.allclose(group_advantages(t["rewards"], 3, "rloo"), t["expected.advantages"], atol=1e-6)
    assert rel_diff(token[keep], t["expected.logp"][keep]) <= TOL
    assert rel_diff(loss.reshape(1), t["expected.loss"]) <= TOL
    for n, g in grads.items():
        assert rel_diff(g, t[f"expected.grad.{n}"]) <= TOL, n


@pytest.mark.parametrize("change", [
    {"advantage": "grpo"},
    {"advantage": "drgrpo"},
    {"clip_eps_low": 0.2, "clip_eps_high": 0.2},
    {"dual_clip_c": 1.5},
    {"beta": 0.0},
    {"full_mask_term": False},
    {"response_tokens": "all"},
    {"prompt_padding": "exclude"},
])
def test_changing_one_official_setting_breaks_parity(change):
    assert _worst(*run_dare(**change)) > 1e-3, change


def trainer_step(tmp_path, optimizer=None, **overrides):
    """One real ``GRPOTrainer`` optimizer step from the fixture's rollout (``tools.parity.common.trainer_update``,
    through the Dream family's aligned logits): ``(fixture, loss, clipped gradients, updated weights)``."""
    from dare.components import SpecialTokens
    from dare_dream.family import DreamFamily

    t, meta = read_fixture("coupled_grpo")
    params = CoupledGRPOParams.model_validate({"preset": "official", "group_size": meta["group_size"],
                                              "num_iterations": meta["settings"]["num_iterations"], **overrides})
    objective = CoupledGRPO(params)
    models = {m: model_from_state(t, f"{m}.") for m in ("current", "old", "ref")}
    P, ids = meta["prompt_length"], t["input_ids"]
    N = ids.shape[0]
    sampled = ScoringBatch(ids, torch.cat([t["prompt_mask"], torch.ones_like(ids[:, P:])], 1),
                           torch.ones_like(ids[:, P:], dtype=torch.bool), P, meta["mask_id"])
    u_t = ((t["mask_ratio"] - params.t_min) / (params.t_max - params.t_min)).float().expand(N, 1)
    draws = [u_t, t["random_matrix"][:, P:]]
    calls = iter(range(1000))  # each inner iteration's passes draw t, then the matrix
    tokens = SpecialTokens(mask_id=meta["mask_id"], eos_id=meta["eos_id"], pad_id=meta["pad_id"])
    with mock.patch.object(coupled_module, "uniform", lambda shape, g, device: draws[next(calls) % 2]):
        out = trainer_update(objective, objective.make_estimator(None, None, None), DreamFamily(), tokens, models,
                             sampled, t["rewards"], {**meta["optimizer"], **(optimizer or {})}, tmp_path)
    return t, *out


def test_one_grpo_trainer_step_reproduces_the_official_update(tmp_path):
    t, loss, clipped, updated = trainer_step(tmp_path)
    assert set(clipped) == {k[len("current."):] for k in t if k.startswith("current.")}  # every parameter stepped
    assert update_worst(t, loss, clipped, updated) <= TOL


@pytest.mark.parametrize("change", [
    {"optimizer": {"learning_rate": 3e-6}},
    {"optimizer": {"weight_decay": 0.0}},
    {"optimizer": {"max_grad_norm": 1.0}},
    {"advantage": "grpo"},
    {"full_mask_term": False},
])
def test_changing_one_official_setting_breaks_the_update(tmp_path, change):
    change = dict(change)
    assert update_worst(*trainer_step(tmp_path, change.pop("optimizer", None), **change)) > 1e-3, change
