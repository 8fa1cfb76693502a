"""The trainer applies ``response_tokens`` and ``prompt_padding`` (dare.rl.conventions) on a tiny LLaDA."""

from __future__ import annotations

import pytest
import torch

from dare.diffusion.estimators import ScoringBatch
from dare.modeling import load_model
from dare.rewards import WeightedReward
from dare.rl.prompts import PromptDataset
from dare.rl.trainer import GRPOTrainer
from dare.trainers import DareConfig
from dare_grpo.objectives import D1

pytest.importorskip("dare_llada")
from dare_llada.sampler import LLaDASampler  # noqa: E402


class One:
    name = "one"

    def score(self, completion, sample):
        return 1.0


def _trainer(lm, out, **params):
    objective = D1({"group_size": 2, **params})
    sampler = LLaDASampler({"gen_length": 4, "block_length": 4, "steps": 4, "temperature": 1.0})
    args = DareConfig(output_dir=str(out), per_device_train_batch_size=2, max_steps=1, report_to="none", seed=0)
    return GRPOTrainer(
        model=lm.model, args=args, train_dataset=PromptDataset(["12", "3 4 5 6 7 8"], [{}] * 2),
        processing_class=lm.tokenizer, family=lm.family, tokens=lm.tokens, objective=objective,
        estimator=objective.make_estimator(lm.family, lm.model.config, sampler), sampler=sampler,
        reward=WeightedReward([(One(), 1.0)]),
    )


def _batch(lm):
    eos = lm.tokens.eos_id
    ids = torch.tensor([[5, 6, 7, 8, eos, eos], [5, 6, 7, 8, 9, 10]])
    return ScoringBatch(ids, torch.ones_like(ids), torch.ones(2, 4, dtype=torch.bool), 2, lm.tokens.mask_id)


@pytest.mark.parametrize("rule, want", [("all", [[1, 1, 1, 1], [1, 1, 1, 1]]),
                                        ("through_first_eos", [[1, 1, 1, 0], [1, 1, 1, 1]])])
def test_response_tokens_sets_the_scored_tokens(tmp_path, tiny_llada_dir, rule, want):
    lm = load_model(tiny_llada_dir)
    trainer = _trainer(lm, tmp_path, response_tokens=rule)
    (pas,) = trainer.draw_passes(_batch(lm))
    assert pas.scored.int().tolist() == want
    assert bool(pas.mask[0, :, 2:].all())  # every completion position stays masked (d1's one-step estimator)


@pytest.mark.parametrize("rule", ["exclude", "attend"])
def test_prompt_padding_sets_the_rollout_attention(tmp_path, tiny_llada_dir, rule):
    lm = load_model(tiny_llada_dir)
    trainer = _trainer(lm, tmp_path, prompt_padding=rule)
    trainer.set_rollout_keys([0, 1])
    rollout = trainer.generate_rollout(lm.model, {"prompt": ["12", "3 4 5 6 7 8"], "row": [{}, {}], "index": [0, 1]})
    prompt_attention = rollout.batch.attention_mask[:, : rollout.batch.prompt_length]
    assert bool(prompt_attention.all()) == (rule == "attend")


def test_spg_response_ends_at_the_first_eos_and_later_positions_are_masked(tmp_path, tiny_llada_dir):
    from dare_grpo.objectives import SPG
    from dare_grpo.objectives.spg.trainer import SPGTrainer, response_batch

    lm = load_model(tiny_llada_dir)
    objective = SPG({"group_size": 2, "response_tokens": "through_first_eos", "mc_num": 2, "block_length": 2})
    sampler = LLaDASampler({"gen_length": 4, "block_length": 4, "steps": 4, "temperature": 1.0})
    args = DareConfig(output_dir=str(tmp_path), per_device_train_batch_size=2, max_steps=1, report_to="none", seed=0)
    trainer = SPGTrainer(
        model=lm.model, args=args, train_dataset=PromptDataset(["12", "34"], [{}] * 2),
        processing_class=lm.tokenizer, family=lm.family, tokens=lm.tokens, objective=objective,
        estimator=objective.make_estimator(lm.family, lm.model.config, sampler), sampler=sampler,
        reward=WeightedReward([(One(), 1.0)]),
    )
    batch = _batch(lm)  # row 0 ends at its first EOS (completion position 2)
    assert response_batch(batch, trainer.params, trainer.step_settings.stop_ids).response_lengths.tolist() == [3, 4]
    for pas in trainer.draw_passes(batch):
        assert bool(pas.mask[0, 0, 2 + 3:].all())            # after the response: always masked
        assert not bool(pas.weight[0, 0, 3:].any())           # ... and never scored
        assert bool(pas.weight[0, 0, :2].any() | pas.weight[0, 0, 2:3].any())  # the response is scored
