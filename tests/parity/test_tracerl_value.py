"""TraceRL's value model against the official trainer (Gen-Verse/dLLM-RL@10b4fd1: ``train/init_sdar_value_model.py``,
``train/train_sdar_value.py``, ``train/train_sdar_policy.py``).

The fixture (``tests/fixtures/parity/tracerl_value/``, built by ``tools/parity/build_tracerl_value.py``) holds a
decoding trajectory with repeated and skipped steps, group-normalised rewards, the policy, rollout-policy, value and
rollout-time value weights, and the official rollout-time values, step-level GAE returns and advantages (at the
released ``gam = lam = 1`` and at ``gam 0.9, lam 0.8``), clipped value loss and policy loss with their gradients.
DARE's value model (:func:`dare.rl.value.value_model_from`), :func:`~dare.rl.value.step_gae`,
:func:`~dare.rl.value.clipped_value_loss` and TraceRL's ``normaliser: response_length`` must match to 1e-5
(relative), and changing one official setting must break the match. DARE runs the functions the trainer runs: the
rollout batch and passes of :mod:`dare.rl.step`, :func:`~dare_grpo.objectives.tracerl.trainer.rollout_values`,
:func:`~dare_grpo.objectives.tracerl.trainer.value_gae`, :func:`~dare_grpo.objectives.tracerl.trainer.value_loss_backward` and the policy
update :func:`dare.rl.step.update`.
"""

from __future__ import annotations

import pytest
import torch

from dare.diffusion.estimators import ScoringBatch
from dare.rl import step
from dare.rl.value import value_model_from
from dare_grpo.objectives.tracerl import TraceRL, TraceRLParams
from dare_grpo.objectives.tracerl.trainer import rollout_values, value_gae, value_loss_backward
from tools.parity.common import model_from_state, plain_logits, public_step, read_fixture, rel_diff

TOL = 1e-5
OFFICIAL = {"preset": "official", "group_size": 2, "num_iterations": 2, "shrink": 2, "value_model": {},
            "normaliser": "response_length"}


class _Sampler:
    def steps_per_block(self):  # the recording trajectory declares no block stride
        return None


def setup(**overrides):
    t, meta = read_fixture("tracerl_value")
    params = TraceRLParams.model_validate({**OFFICIAL, **overrides})
    P, ids = meta["prompt_length"], t["input_ids"]
    attn = torch.cat([(ids[:, :P] != meta["pad_id"]).long(), torch.ones_like(ids[:, P:])], 1)
    sampled = ScoringBatch(ids, attn, torch.ones_like(ids[:, P:], dtype=torch.bool), P, meta["mask_id"],
                           t["unmask_step"])
    batch = step.rollout_batch(sampled, params)
    passes = step.draw_passes(TraceRL(params).make_estimator(None, None, _Sampler()), batch, None, params, ())
    values = {}
    for m in ("current", "old"):
        vm = value_model_from(model_from_state(t, f"value_{m}."))
        with torch.no_grad():
            vm.head.weight.copy_(t[f"value_head.{m}"])
        values[m] = vm
    return t, meta, params, batch, passes, values


def gae(t, params, batch, passes, values):
    old = rollout_values(plain_logits(values["old"]), batch, passes)
    _, returns, advantages = value_gae(passes, batch.num_rows, t["rewards"], old, params)
    return old, returns, advantages


def value_loss(t, params, batch, passes, values, old, returns):
    loss = value_loss_backward(plain_logits(values["current"]), batch, passes, old, returns, params)
    vm = values["current"]
    grads = {"value_head.weight": vm.head.weight.grad, "model.embed.weight": vm.embed.weight.grad}
    return float(loss), grads


def policy_loss(t, params, batch, passes, advantages):
    models = {m: model_from_state(t, f"{m}.") for m in ("current", "old")}
    total, _ = public_step(TraceRL(params), batch, passes, advantages, models["current"], models["old"])
    return total, {k: p.grad for k, p in models["current"].named_parameters()}


def run_all(**overrides) -> float:
    """The worst relative difference over every official quantity."""
    t, meta, params, batch, passes, values = setup(**overrides)
    old, returns, adv = gae(t, params, batch, passes, values)
    vloss, vgrads = value_loss(t, params, batch, passes, values, old, returns)
    ploss, pgrads = policy_loss(t, params, batch, passes, adv)
    diffs = [rel_diff(old, t["expected.old_values"]), rel_diff(returns, t["expected.returns"]),
             rel_diff(adv, t["expected.advantages"]), rel_diff(torch.tensor([vloss]), t["expected.value_loss"]),
             rel_diff(torch.tensor([ploss]), t["expected.policy_loss"])]
    diffs += [rel_diff(vgrads[n], t[f"expected.value_grad.{n}"]) for n in meta["value_grads"]]
    diffs += [rel_diff(pgrads[n], t[f"expected.grad.{n}"]) for n in meta["policy_grads"]]
    return max(diffs)


def test_transitions_match_the_official_rows():
    t, meta, params, batch, passes, values = setup()
    assert sum(float(p.scored.any(dim=-1).sum()) for p in passes) == float(t["expected.num_rows"])


def test_values_gae_value_loss_and_policy_loss_reproduce_the_official_trainer():
    assert run_all() <= TOL


def test_step_gae_reproduces_the_official_recursion_at_other_gamma_and_lambda():
    other = read_fixture("tracerl_value")[1]["other_gae"]
    t, meta, params, batch, passes, values = setup(value_model={"gamma": other["gam"], "lam": other["lam"]})
    _, returns, adv = gae(t, params, batch, passes, values)
    assert rel_diff(returns, t["expected.other.returns"]) <= TOL
    assert rel_diff(adv, t["expected.other.advantages"]) <= TOL
    # and they differ from the released gam = lam = 1 values, so the recursion is exercised
    assert rel_diff(adv, t["expected.advantages"]) > 1e-2


def test_gamma_lambda_one_telescopes_to_reward_minus_value():
    """The official assertion at gam = lam = 1: R_j is the sequence reward and A_j = R_j - V_j on trained tokens."""
    t, meta, params, batch, passes, values = setup()
    old, returns, adv = gae(t, params, batch, passes, values)
    r = t["rewards"][:, None].expand_as(returns)
    assert torch.allclose(returns, r, atol=1e-6)
    assert torch.allclose(adv, r - old, atol=1e-6)


@pytest.mark.parametrize("change", [
    {"value_model": {"gamma": 0.9}},
    {"value_model": {"lam": 0.5}},
    {"value_model": {"clip_eps": 0.05}},
    {"normaliser": "transitions"},
    {"beta": 0.0},
])
def test_changing_one_official_setting_breaks_parity(change):
    assert run_all(**change) > 1e-4, change
