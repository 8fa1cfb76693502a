"""DPO and VRPO losses on a hand-built batch equal hand-computed values."""

from __future__ import annotations

import math

import pytest
import torch

from dare.components import ModelFamily, SpecialTokens
from dare.data.supervised import SupervisedCollator, SupervisedExample
from dare.diffusion.elbo import Corruptions
from dare.modeling.lora import ReferencePolicy
from dare.testing import LogitsStub

pytest.importorskip("dare_dpo")

from dare.diffusion.estimators import Pass  # noqa: E402
from dare.trainers import DareConfig  # noqa: E402
from dare_dpo import DPOTrainer, dpo_loss  # noqa: E402
from dare_dpo.objective import DPO  # noqa: E402
from dare_dpo.data import PairCollator, PairExample  # noqa: E402

MASK = 3
TOK = SpecialTokens(mask_id=MASK, eos_id=2, pad_id=2)
LOG = math.log


class StubFamily(ModelFamily):
    """Full attention; position i of the stub's logits scores token i."""

    name = "stub"

    def logits(self, model, input_ids, attention_mask=None):
        return model(input_ids).logits


def _probs_logits(probs: list[list[float]]) -> torch.Tensor:
    return torch.log(torch.tensor(probs))


# vocabulary {0, 1, 2, MASK=3}; position 1 prefers token 1, position 2 prefers token 2
TABLE = _probs_logits([[0.25] * 4, [0.125, 0.5, 0.25, 0.125], [0.125, 0.25, 0.5, 0.125]])


def policy_fn(ids: torch.Tensor) -> torch.Tensor:
    """Position-only logits (independent of the corruption)."""
    return TABLE[None].expand(ids.shape[0], -1, -1).clone()


def reference_fn(ids: torch.Tensor) -> torch.Tensor:
    """Uniform when the row has exactly one mask, else the policy's table."""
    one = ((ids == MASK).sum(1) == 1)[:, None, None]
    return torch.where(one, torch.zeros(1, 3, 4), policy_fn(ids))


# one pair: prompt [0]; chosen [1, 2], rejected [2, 1]; both responses have L = 2 (no EOS: hand-built)
PAIR = PairExample(SupervisedExample([0], [1, 2]), SupervisedExample([0], [2, 1]))
# c1: sample 0 masks one token (k = 1, p = 1/2), sample 1 masks both (k = 2, p = 1)
C1 = Corruptions(
    mask=torch.tensor([[[False, True, False], [False, True, True]], [[False, False, True], [False, True, True]]]),
    p_mask=torch.tensor([[0.5, 1.0], [0.5, 1.0]]),
    lengths=torch.tensor([2, 2]),
)
# c2: both samples mask the whole response
C2 = Corruptions(mask=torch.tensor([[[False, True, True]] * 2] * 2), p_mask=torch.ones(2, 2), lengths=torch.tensor([2, 2]))


def _passes(corr: Corruptions) -> list[Pass]:
    """The estimator passes of hand-built corruptions: one copy per sample, weight 1 / p_mask on masked tokens."""
    return [Pass(mask=corr.mask[None, :, j], weight=(corr.mask[:, j].float() / corr.p_mask[:, j : j + 1])[None])
            for j in range(corr.num_samples)]


def _trainer(tmp_path, **params):
    args = DareConfig(output_dir=str(tmp_path), report_to="none")
    objective = DPO(**params)
    trainer = DPOTrainer(model=LogitsStub(policy_fn), args=args, train_dataset=[PAIR], data_collator=PairCollator(SupervisedCollator(TOK, True)),
                         family=StubFamily(), tokens=TOK, objective=objective, estimator=objective.make_estimator(None, None))
    trainer.reference = ReferencePolicy(LogitsStub(reference_fn))
    draws = iter([_passes(C1), _passes(C2)])
    trainer.draw_passes = lambda batch, generator=None: next(draws)
    return trainer


def test_dpo_loss_formula():
    out = dpo_loss(torch.tensor([-1.0, -2.0]), torch.tensor([-3.0, -1.0]), torch.tensor([-2.0, -2.0]),
                   torch.tensor([-2.0, -2.0]), beta=0.5)
    m = [0.5 * ((-1 + 2) - (-3 + 2)), 0.5 * ((-2 + 2) - (-1 + 2))]  # 1.0, -0.5
    assert out.losses.tolist() == pytest.approx([math.log1p(math.exp(-x)) for x in m], rel=1e-6)
    assert out.loss.item() == pytest.approx(sum(math.log1p(math.exp(-x)) for x in m) / 2, rel=1e-6)
    assert out.chosen_rewards.tolist() == pytest.approx([0.5, 0.0])
    assert out.accuracy.item() == 0.5
    with pytest.raises(ValueError, match="beta"):
        dpo_loss(torch.zeros(1), torch.zeros(1), torch.zeros(1), torch.zeros(1), beta=0.0)


def test_vrpo_loss_by_hand(tmp_path):
    """Shared corruptions (c1) for policy and reference; ELBO / L."""
    trainer = _trainer(tmp_path, beta=0.2, share_corruptions=True)
    batch = trainer.data_collator([PAIR])
    out, policy = trainer.pair_loss(trainer.model, batch)
    # policy: chosen terms 2 log .5 (k=1, /.5) and 2 log .5 (k=2) -> mean / L = log .5; rejected: log .25
    assert policy.tolist() == pytest.approx([LOG(0.5), LOG(0.25)], rel=1e-6)
    # reference with c1: chosen (2 log .25 + 2 log .5) / 2 / 2; rejected (2 log .25 + 2 log .25) / 2 / 2
    ref_chosen, ref_rejected = (LOG(0.25) + LOG(0.5)) / 2, LOG(0.25)
    margin = 0.2 * ((LOG(0.5) - LOG(0.25)) - (ref_chosen - ref_rejected))  # = 0.2 * log(2) / 2
    assert out.loss.item() == pytest.approx(math.log1p(math.exp(-margin)), rel=1e-6)
    assert out.chosen_rewards.item() == pytest.approx(0.2 * (LOG(0.5) - ref_chosen), rel=1e-6)


def test_dpo_independent_reference_corruptions_by_hand(tmp_path):
    """Without sharing, the reference is scored on the second draw (c2): ref ELBOs log .5 and log .25."""
    trainer = _trainer(tmp_path, beta=0.2, share_corruptions=False)
    out, _ = trainer.pair_loss(trainer.model, trainer.data_collator([PAIR]))
    assert out.loss.item() == pytest.approx(math.log(2), rel=1e-6)  # margin (log 2) - (log 2) = 0


def test_nats_normaliser_scales_scores_by_length(tmp_path):
    trainer = _trainer(tmp_path, beta=0.2, share_corruptions=True, elbo_normalizer="none")
    out, policy = trainer.pair_loss(trainer.model, trainer.data_collator([PAIR]))
    assert policy.tolist() == pytest.approx([2 * LOG(0.5), 2 * LOG(0.25)], rel=1e-6)
    margin = 0.2 * 2 * (LOG(2) / 2)
    assert out.loss.item() == pytest.approx(math.log1p(math.exp(-margin)), rel=1e-6)


def test_compute_loss_logs_reward_metrics(tmp_path):
    trainer = _trainer(tmp_path, beta=0.2, share_corruptions=True)
    loss = trainer.compute_loss(trainer.model, trainer.data_collator([PAIR]))
    assert loss.item() == pytest.approx(math.log1p(math.exp(-0.2 * LOG(2) / 2)), rel=1e-6)
    assert trainer._metrics["rewards/accuracies"] == [1.0]
    assert trainer._metrics["elbo/chosen"] == pytest.approx([LOG(0.5)])
    assert trainer._metrics["rewards/margins"][0] == pytest.approx(0.2 * LOG(2) / 2, rel=1e-5)
