"""LightningRL against the official code (SJTU-DENG-Lab/LightningRL@e4d7d29: ``reward/rl_reward.py``,
``train/train_policy_no_value.py``, ``models/sdar/modeling_sdar.py``).

The fixture (``tests/fixtures/parity/lightningrl/``, built by ``tools/parity/build_lightningrl.py``) holds the
release's shaped rewards (group z-scores of correctness and tokens per forward), the groups its dynamic sampling
keeps, the batch-level advantages, and the loss (sequence-mean clipped surrogate + token-mean k3 KL + token-mean NLL
on the correct rows) with its gradient. DARE's side is the trainer's ``after_passes`` hook and the public RL step
(:mod:`dare.rl.step`: the estimator's pass and the per-pass update ``GRPOTrainer`` runs), scored by a policy whose
token log-probabilities are the fixture's (:func:`tools.parity.common.given_logprobs`); with ``preset: official`` it
must give the same values (relative 1e-5), and changing any one official setting must break the match.
"""

from __future__ import annotations

import types
from dataclasses import replace
from unittest import mock

import pytest
import torch

from dare.rl import step
from dare.rl.rollout import Rollout
from dare_grpo.objectives.lightningrl import trainer as lightningrl_trainer
from dare_grpo.objectives.lightningrl import LightningRL, LightningRLParams
from dare_grpo.objectives.lightningrl.trainer import LightningRLTrainer, kept_groups, shaped_rewards, tokens_per_forward
from tools.parity.common import LOGPROB_EOS, given_logprobs, logprob_batch, read_fixture, rel_diff

TOL = 1e-5


def run_dare(**overrides):
    """DARE's LightningRL step on the fixture with ``preset: official`` (+ ``overrides``): the estimator's pass
    (:func:`dare.rl.step.draw_passes`), the trainer's ``after_passes`` hook (shaped rewards, kept groups, batch-level
    advantages, per-row loss weights; the fixture's tokens per forward in place of the rollout's unmask steps) and
    :func:`dare.rl.step.update`, scored by a policy whose token log-probs are the fixture's leaf tensors
    (:func:`tools.parity.common.given_logprobs`)."""
    t, meta = read_fixture("lightningrl")
    p = LightningRLParams.model_validate({"preset": "official", "group_size": meta["group_size"], **overrides},
                                         context={"family": "sdar"})
    objective = LightningRL(p)
    correct, tpf = t["correct"].bool(), t["tpf"]
    rewards = shaped_rewards(correct, tpf, p.group_size, p.tpf_norm, p.acc_norm, p.tpf_coefficient)
    keep = kept_groups(correct, tpf, p.group_size, p.drop_all_wrong, p.tpf_range_threshold)
    N, L = t["mask"].shape
    # the response masks' lengths as completions ending at a stop token (the release scores through the first EOS)
    batch = replace(logprob_batch(N, L, t["mask"].sum(-1)), unmask_step=torch.zeros(N, L, dtype=torch.int64))
    passes = step.draw_passes(objective.make_estimator(None, None, None), batch, None, p, (LOGPROB_EOS,))
    assert torch.equal(passes[0].scored, t["mask"].bool())
    reward = correct.float() * p.correct_threshold  # correct: reward >= correct_threshold
    rollout = Rollout(batch, [], reward, {}, torch.zeros(N), passes=[passes])
    trainer = types.SimpleNamespace(params=p, tokens=types.SimpleNamespace(stop_ids=(LOGPROB_EOS,)),
                                    _first_row_index=lambda num_rows: 0)  # one process: its rows start the batch
    with mock.patch.object(lightningrl_trainer, "tokens_per_forward", lambda steps, completions, stop_ids: tpf):
        LightningRLTrainer.after_passes(trainer, rollout)
    masks = rollout.passes[0][0].mask[0, :, batch.prompt_length:, None].transpose(1, 2)  # [N, 1, L]
    logp = t["logp"].clone().requires_grad_(True)
    rollout.old, rollout.ref = [[t["old"]]], [[t["ref"]]]
    policy = given_logprobs(logp[:, None], masks, 1, batch.mask_id)
    loss, _ = step.update(step.StepSettings(objective, stop_ids=(LOGPROB_EOS,)), policy, rollout, 0)
    return t, rewards, keep, rollout.advantages, torch.tensor(loss), logp.grad


def test_official_preset_reproduces_the_official_code():
    t, rewards, keep, adv, loss, grad = run_dare()
    assert rel_diff(rewards, t["expected.rewards"]) <= TOL
    assert keep.tolist() == t["expected.keep"].bool().tolist()
    assert rel_diff(adv[keep], t["expected.advantages"]) <= TOL
    assert rel_diff(loss, t["expected.loss"]) <= TOL
    assert rel_diff(grad, t["expected.grad"]) <= TOL


def test_the_official_settings_are_the_releases():
    p = LightningRLParams.model_validate({"preset": "official"}, context={"family": "sdar"})
    assert (p.group_size, p.clip_eps_low, p.clip_eps_high, p.beta, p.kl_estimator, p.nll_weight) == (32, 0.2, 0.2, 0.01, "k3", 0.1)
    assert (p.tpf_norm, p.acc_norm, p.tpf_range_threshold, p.drop_all_wrong, p.log_ratio_clamp) == ("z_score", True, 0.01, True, 10.0)


@pytest.mark.parametrize("override", [
    {"tpf_norm": "minmax"}, {"acc_norm": False}, {"tpf_range_threshold": 0.001}, {"drop_all_wrong": False},
    {"nll_weight": 0.0}, {"beta": 0.0}, {"kl_estimator": "k2"}, {"clip_eps_low": 0.1}, {"clip_eps_high": 0.1},
    {"dual_clip_c": 1.5},
])
def test_changing_one_official_setting_breaks_the_match(override):
    t, rewards, keep, adv, loss, grad = run_dare(**override)
    same = (rel_diff(rewards, t["expected.rewards"]) <= TOL and keep.tolist() == t["expected.keep"].bool().tolist()
            and rel_diff(adv[keep], t["expected.advantages"]) <= TOL and rel_diff(loss, t["expected.loss"]) <= TOL
            and rel_diff(grad, t["expected.grad"]) <= TOL)
    assert not same


def test_tokens_per_forward_counts_distinct_steps_through_the_first_stop():
    # row 0: 6 tokens through EOS (id 2) committed at steps 0,0,1,1,1,2 -> 6 / 3 = 2; row 1: no stop, all 8 tokens,
    # steps 0..3 -> 8 / 4 = 2; row 2: EOS first -> 1 token at step 5 -> 1
    completions = torch.tensor([[5, 6, 7, 8, 9, 2, 2, 2], [5, 6, 7, 8, 9, 9, 9, 9], [2, 2, 2, 2, 2, 2, 2, 2]])
    steps = torch.tensor([[0, 0, 1, 1, 1, 2, 3, 3], [0, 1, 2, 3, 3, 3, 3, 3], [5, 5, 6, 6, 7, 7, 7, 7]])
    got = tokens_per_forward(steps, completions, (2,))
    assert got.tolist() == [2.0, 2.0, 1.0]
