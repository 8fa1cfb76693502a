"""DiPO against the official code (OpenMOSS/DiRL@ec4bfb3, ``models/sdar/modeling_sdar.py``, ``train/rollout_dapo_server.py``).

The fixture (``tests/fixtures/parity/dipo/``, built by ``tools/parity/build_dipo.py``) holds the official advantages
(group z-scores, population std, no epsilon), the loss of one update (the release's inline RL loss run once per
block-round training row, summed and divided by the ``N R`` rows) and its gradient with respect to the token
log-probabilities. DARE's side is the public RL step (:mod:`dare.rl.step`: the advantages and the per-pass update
``GRPOTrainer`` runs) over the fixture's block-round passes, scored by a policy whose token log-probabilities are
the fixture's (:func:`tools.parity.common.given_logprobs`); with ``preset: official`` it must give the same values
(relative 1e-5), and changing any one official setting the loss reads must break the match.
"""

from __future__ import annotations

import types

import pytest
import torch

from dare.diffusion.estimators import Pass
from dare.rl import step
from dare.rl.rollout import Rollout
from dare_grpo.objectives.dipo import DiPO, DiPOParams
from tools.parity.common import given_logprobs, logprob_batch, read_fixture, rel_diff

TOL = 1e-5


def run_dare(**overrides):
    """DARE's DiPO step on the fixture with ``preset: official`` (+ ``overrides``): the public RL step's advantages
    and :func:`dare.rl.step.update` over the fixture's block-round passes, scored by a policy whose token log-probs
    are the fixture's leaf tensors (:func:`tools.parity.common.given_logprobs`)."""
    t, meta = read_fixture("dipo")
    params = DiPOParams.model_validate({"preset": "official", "group_size": meta["group_size"], **overrides},
                                       context={"family": "sdar"})
    N, R = meta["num_completions"], meta["rounds"]
    objective = DiPO(params)
    objective.make_estimator(types.SimpleNamespace(block_size=lambda cfg: R), {}, None)
    adv = step.rollout_advantages(t["rewards"], params)
    scored = t["mask"].bool()                                         # [N, R, G]: the tokens of round r
    rounds = torch.stack([scored[:, r:].any(1) for r in range(R)], 1)  # [N, R, G]: masked before round r
    batch = logprob_batch(N, scored.shape[-1])
    no_prompt = torch.zeros(N, batch.prompt_length, dtype=torch.bool)
    # the fixture's rows: pass r masks the tokens of rounds >= r and scores those of round r (trajectory replay)
    passes = [Pass(mask=torch.cat([no_prompt, rounds[:, r]], 1)[None], weight=scored[:, r].float()[None], key=r)
              for r in range(R)]
    logp = t["logp"].clone().requires_grad_(True)
    rollout = Rollout(batch, [], t["rewards"], {}, adv, passes=[passes],
                      old=[[t["old"][:, r] * scored[:, r] for r in range(R)]],
                      ref=[[t["ref"][:, r] * scored[:, r] for r in range(R)]])
    assert objective.score_reduction == "per_pass"
    loss, _ = step.update(step.StepSettings(objective), given_logprobs(logp, rounds, 1, batch.mask_id), rollout, 0)
    return t, adv, torch.tensor(loss), logp.grad


def test_official_preset_reproduces_the_official_code():
    t, adv, loss, grad = run_dare()
    assert rel_diff(adv, t["expected.advantages"]) <= TOL
    assert rel_diff(loss, t["expected.loss"]) <= TOL
    assert rel_diff(grad, t["expected.grad"]) <= TOL


def test_the_official_settings_are_the_releases():
    p = DiPOParams.model_validate({"preset": "official"}, context={"family": "sdar"})
    assert (p.group_size, p.clip_eps_low, p.clip_eps_high, p.beta, p.kl_estimator) == (8, 0.2, 0.28, 0.1, "k3")
    assert (p.dual_clip_c, p.log_ratio_clamp, p.advantage_std, p.advantage_std_eps) == (None, 10.0, "population", 0.0)


@pytest.mark.parametrize("override", [
    {"clip_eps_high": 0.2}, {"clip_eps_low": 0.1}, {"beta": 0.0}, {"kl_estimator": "k1"}, {"dual_clip_c": 3.0},
    {"log_ratio_clamp": None}, {"advantage_std": "sample"}, {"advantage_std_eps": 1e-2},
])
def test_changing_one_official_setting_breaks_the_match(override):
    t, adv, loss, grad = run_dare(**override)
    diffs = [rel_diff(adv, t["expected.advantages"]), rel_diff(loss, t["expected.loss"]), rel_diff(grad, t["expected.grad"])]
    # element-wise on the tokens with a gradient: the log-ratio clamp changes only the clamped token's tiny gradient
    want = t["expected.grad"]
    some = want.abs() > 1e-9
    diffs.append(float(((grad - want).abs()[some] / want.abs()[some]).max()))
    assert max(diffs) > TOL


def test_given_logprobs_scores_the_given_values_with_unit_gradient():
    """The stand-in policy of the leaf-log-prob fixtures: each pass scores exactly the given log-probs (also at a stop
    token), and d(score)/d(logp) is 1 at the scored tokens and 0 elsewhere."""
    from dare.diffusion.estimators import score_pass

    logp = torch.tensor([[[-0.5, -2.0, -7.0], [-1.5, -0.01, -3.0]],
                         [[-4.0, -0.2, -1.0], [-0.7, -9.0, -2.5]]], requires_grad=True)   # [N=2, R=2, G=3]
    masks = torch.tensor([[[True, True, True], [False, True, False]],
                          [[True, True, False], [False, False, True]]])
    scored = torch.tensor([[[True, False, True], [False, True, False]],
                           [[True, True, False], [False, False, True]]])
    batch = logprob_batch(2, 3, torch.tensor([2, 3]))      # row 0 ends at a stop token (id 1) at position 1
    policy = given_logprobs(logp, masks, 1, batch.mask_id)
    no_prompt = torch.zeros(2, 1, dtype=torch.bool)
    total = 0.0
    for r in range(2):
        pas = Pass(mask=torch.cat([no_prompt, masks[:, r]], 1)[None], weight=scored[:, r].float()[None])
        token = score_pass(policy, batch, pas).token
        want = torch.where(scored[:, r], logp[:, r], torch.zeros(()))
        assert torch.allclose(token, want.detach(), rtol=1e-6, atol=1e-7), r
        total = total + token.sum()
    total.backward()
    assert torch.allclose(logp.grad, scored.float(), rtol=1e-5, atol=1e-6)
    with pytest.raises(ValueError, match="none of its passes"):
        other = torch.cat([no_prompt, torch.tensor([[False, False, True], [True, False, True]])], 1)[None]
        score_pass(policy, batch, Pass(mask=other, weight=torch.ones(1, 2, 3)))
