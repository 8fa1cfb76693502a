"""LightningRL's rollout hook (``LightningRLTrainer.after_passes``) on a hand-built rollout, against values computed by
hand: tokens per forward from the trajectory, shaped rewards, the dynamic-sampling filter, batch advantages and the
per-row loss weights handed to the objective; and the objective's pass loss reads them."""

from __future__ import annotations

import types

import pytest
import torch

from dare.diffusion.estimators import OneStepEstimator, PassScore, ScoringBatch
from dare.rl.losses import PassLossInput
from dare.rl.rollout import Rollout
from dare_grpo.objectives.lightningrl import LightningRL, LightningRLParams
from dare_grpo.objectives.lightningrl.trainer import LightningRLTrainer

STOP = 2
# 3 groups of 2. tokens through the first stop / distinct steps: row 0: 3 / {0, 1} = 1.5; row 1: 4 / {0, 1} = 2;
# row 2: 2 / {0} = 2; row 3: 4 / {0, 1, 2, 3} = 1; rows 4, 5 (group 2, no correct completion): dropped
COMPLETIONS = [[5, 6, 2, 2], [5, 6, 7, 2], [5, 2, 2, 2], [5, 6, 7, 8], [5, 2, 2, 2], [5, 6, 2, 2]]
STEPS = [[0, 1, 1, 2], [0, 0, 0, 1], [0, 0, 1, 1], [0, 1, 2, 3], [0, 1, 1, 1], [0, 0, 1, 1]]
REWARDS = [1.0, 0.0, 1.0, 1.0, 0.0, 0.0]


def rollout() -> Rollout:
    comp = torch.tensor(COMPLETIONS)
    ids = torch.cat([torch.full((6, 1), 9), comp], 1)
    batch = ScoringBatch(ids, torch.ones_like(ids), torch.ones_like(comp, dtype=torch.bool), 1, 15,
                         unmask_step=torch.tensor(STEPS))
    passes = [OneStepEstimator(p_mask_prompt=0.0).draw(batch, None)]
    return Rollout(batch=batch, texts=[""] * 6, rewards=torch.tensor(REWARDS), reward_parts={},
                   advantages=torch.zeros(6), passes=passes)


def after_passes(r: Rollout, **params) -> dict[str, float]:
    trainer = types.SimpleNamespace(params=LightningRLParams(group_size=2, **params),
                                    tokens=types.SimpleNamespace(stop_ids=(STOP,)),
                                    _first_row_index=lambda n: 0)
    return LightningRLTrainer.after_passes(trainer, r)


def test_shaping_filter_advantages_and_row_weights():
    r = rollout()
    stats = after_passes(r)
    # group 0: z(correct 1, 0) = (1, -1), z(tpf 1.5, 2) = (-1, 1) -> rewards (0, 0); group 1: z(1, 1) = (0, 0),
    # z(tpf 2, 1) = (1, -1) -> (1, -1). Kept rewards (0, 0, 1, -1): mean 0, unbiased std sqrt(2 / 3)
    s = (2 / 3) ** 0.5
    assert r.advantages.tolist() == pytest.approx([0.0, 0.0, 1 / s, -1 / s, 0.0, 0.0], rel=1e-6)
    assert r.row_values["policy_weight"].tolist() == pytest.approx([0.25] * 4 + [0.0, 0.0])
    # correct kept rows 0, 2, 3 score 4 tokens each: 1 / 12 on each
    assert r.row_values["nll_weight"].tolist() == pytest.approx([1 / 12, 0, 1 / 12, 1 / 12, 0, 0])
    assert r.passes[0][0].scored.any(-1).tolist() == [True] * 4 + [False, False]  # dropped groups are not scored
    assert stats["lightningrl/kept_fraction"] == pytest.approx(4 / 6)
    assert stats["lightningrl/tpf"] == pytest.approx((1.5 + 2 + 2 + 1 + 1 + 1.5) / 6)  # rows 4, 5: 2 / 2, 3 / 2


def test_keeping_every_group_changes_the_batch():
    r = rollout()
    after_passes(r, drop_all_wrong=False, tpf_range_threshold=0.0)
    assert r.row_values["policy_weight"].tolist() == pytest.approx([1 / 6] * 6)


def test_pass_loss_uses_the_row_weights():
    # one token per row, ratio 1: policy term -sum_b w_b A_b; NLL term -sum lp over correct rows / their tokens
    lp = torch.tensor([[-1.0], [-2.0], [-3.0]], requires_grad=True)
    p = LightningRLParams(group_size=3, beta=0.0, nll_weight=0.5)
    inp = PassLossInput(current=PassScore(token=lp, scored=torch.ones(3, 1, dtype=torch.bool)), old=lp.detach(), ref=None,
                        advantages=torch.tensor([1.0, -1.0, 2.0]), response_lengths=torch.ones(3, dtype=torch.long),
                        pass_index=0, num_passes=1, num_tokens=3.0, num_sequences=3, total_response_tokens=3.0,
                        row_values={"policy_weight": torch.tensor([0.5, 0.5, 0.0]),
                                    "nll_weight": torch.tensor([1.0, 0.0, 0.0])})
    terms = LightningRL(p).pass_loss(inp)
    assert terms.loss.item() == pytest.approx(-(0.5 * 1 - 0.5 * 1) + 0.5 * 1.0)
    assert terms.metrics["nll"].item() == pytest.approx(1.0)
