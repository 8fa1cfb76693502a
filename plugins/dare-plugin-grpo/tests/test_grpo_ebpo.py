"""EBPO: the sequence loss with log-domain clipping and KL on composites by hand, how blocks are defined per
attention kind, and one optimiser step on a tiny LLaDA."""

from __future__ import annotations

import math

import pytest
import torch

from dare.trainers import DareConfig

from dare.diffusion.estimators import BlockwiseELBOEstimator, ScoringBatch, score_pass
from dare_grpo.objectives import EBPO, SequenceLossInput
from dare_grpo.objectives.ebpo import ResponseBlockwiseELBOEstimator, log_clipped_ratio


pytestmark = pytest.mark.usefixtures("one_thread")


E = math.exp


def test_log_domain_clip_both_branches_and_k3_on_composites():
    cur = torch.tensor([-3.0, -6.0, -1.0], requires_grad=True)
    inp = SequenceLossInput(current=cur, old=torch.tensor([-4.0, -5.0, -1.0]), ref=torch.tensor([-3.5, -6.0, -9.0]),
                            advantages=torch.tensor([1.0, -1.0, 0.5]), response_lengths=torch.tensor([2, 3, 0]))
    terms = EBPO(beta=0.1, kl_estimator="k3", dual_clip_c=None).sequence_loss(inp)
    # row 0: log rho = 1 > log 1.2 -> -1.2; row 1: log rho = -1 < log 0.8 -> +0.8; row 2 has no response: excluded
    kl = (E(-0.5) + 0.5 - 1) / 2
    assert terms.loss.item() == pytest.approx((-1.2 + 0.8) / 2 + 0.1 * kl, rel=1e-6)
    assert terms.metrics["clip_fraction"].item() == pytest.approx(1.0)
    terms.loss.backward()
    assert cur.grad.tolist() == pytest.approx([0.1 * (1 - E(-0.5)) / 2, 0.0, 0.0], abs=1e-7)  # only KL of row 0


def test_unclipped_ratio_gives_the_plain_sequence_gradient():
    cur = torch.tensor([-3.0, -6.0], requires_grad=True)
    inp = SequenceLossInput(current=cur, old=cur.detach(), ref=None, advantages=torch.tensor([2.0, -1.0]),
                            response_lengths=torch.tensor([2, 3]))
    EBPO(dual_clip_c=None).sequence_loss(inp).loss.backward()
    assert cur.grad.tolist() == pytest.approx([-1.0, 0.5])  # -A exp(log rho) / 2 at rho = 1
    # a huge negative-advantage log-ratio stays finite (DARE would overflow to inf)
    huge = log_clipped_ratio(torch.tensor([500.0]), torch.tensor([-1.0]), 0.2, 0.2)
    assert huge.item() == 500.0
    loss = EBPO(dual_clip_c=None).sequence_loss(SequenceLossInput(torch.tensor([500.0]), torch.tensor([0.0]), None,
                                                                 torch.tensor([-1.0]), torch.tensor([1]))).loss
    assert math.isfinite(loss.item())


def _batch():
    ids = torch.tensor([[0, 7, 8, 9] + [1] * 8])  # P = 4 with 3 real prompt tokens, G = 8
    attn = torch.ones_like(ids)
    attn[0, 0] = 0
    return ScoringBatch(ids, attn, torch.ones(1, 8, dtype=torch.bool), prompt_length=4, mask_id=99)


def _blocks_of(pas, G=8):
    """Per pass: the weight pattern must be L_b / n_b on the n_b masked tokens of each block."""
    return pas.weight[0, 0], pas.mask[0, 0, -G:]


def test_blocks_per_attention_kind():
    g = torch.Generator().manual_seed(0)
    for _ in range(5):
        # full attention: blocks from the response start, [0..3] and [4..7]
        for pas in ResponseBlockwiseELBOEstimator(block_length=4, mc_num=2).draw(_batch(), g):
            w, m = _blocks_of(pas)
            for blk in (slice(0, 4), slice(4, 8)):
                n = int(m[blk].sum())
                assert n >= 1 and torch.allclose(w[blk][m[blk]], torch.full((n,), 4 / n))
        # block attention: global compact origin, 3 prompt tokens -> blocks [0], [1..4], [5..7]
        for pas in BlockwiseELBOEstimator(block_length=4, mc_num=2).draw(_batch(), g):
            w, m = _blocks_of(pas)
            assert bool(m[0]) and w[0].item() == 1.0
            for blk, size in ((slice(1, 5), 4), (slice(5, 8), 3)):
                n = int(m[blk].sum())
                assert n >= 1 and torch.allclose(w[blk][m[blk]], torch.full((n,), size / n))


def test_estimator_follows_the_family(tiny_llada_dir):
    from dare.modeling import load_model
    from dare_llada.sampler import LLaDASampler

    lm = load_model(tiny_llada_dir)
    sampler = LLaDASampler({"gen_length": 8, "block_length": 2, "steps": 8})
    est = EBPO().make_estimator(lm.family, lm.model.config, sampler)
    assert isinstance(est, ResponseBlockwiseELBOEstimator) and est.params.block_length == 2 and est.params.mc_num == 16
    assert EBPO({"block_length": 4}).make_estimator(lm.family, lm.model.config, sampler).params.block_length == 4

    class BlockFamily:
        attention = "block"

        def block_size(self, config):
            return 4

    est = EBPO({"mc_num": 3}).make_estimator(BlockFamily(), {}, sampler)
    assert type(est) is BlockwiseELBOEstimator and est.params.block_length == 4


def test_one_step_raises_the_composite_elbo_of_the_rewarded_completion(tmp_path, tiny_llada_dir):
    from dare.modeling import load_model
    from dare.rl.prompts import PromptDataset
    from dare.rl.rollout import Rollout
    from dare_llada.sampler import LLaDASampler

    lm = load_model(tiny_llada_dir)
    objective = EBPO({"mc_num": 4, "group_size": 2})
    sampler = LLaDASampler({"gen_length": 4, "block_length": 2, "steps": 4, "temperature": 1.0})
    args = DareConfig(output_dir=str(tmp_path), per_device_train_batch_size=1, max_steps=1, learning_rate=1e-2,
                      report_to="none")
    trainer = objective.trainer_class()(
        model=lm.model, args=args, train_dataset=PromptDataset(["12"], [{}]), processing_class=lm.tokenizer,
        family=lm.family, tokens=lm.tokens, objective=objective,
        estimator=objective.make_estimator(lm.family, lm.model.config, sampler), sampler=sampler, reward=None,
    )
    trainer.current_gradient_accumulation_steps = 1
    tok = lm.tokenizer
    prompt = tok("12", add_special_tokens=False)["input_ids"]
    comps = [tok("ab", add_special_tokens=False)["input_ids"] * 2, tok("xyzw", add_special_tokens=False)["input_ids"]]
    ids = torch.tensor([prompt + c for c in comps])
    batch = ScoringBatch(ids, torch.ones_like(ids), torch.ones(2, 4, dtype=torch.bool), len(prompt), lm.tokens.mask_id)
    rollout = Rollout(batch=batch, texts=[], rewards=torch.tensor([1.0, 0.0]), reward_parts={},
                      advantages=torch.tensor([1.0, -1.0]), passes=[trainer.draw_passes(batch)])
    fn = trainer.logits_fn(lm.model)

    def composite():
        with torch.no_grad():
            return torch.stack([score_pass(fn, batch, p).sequence for p in rollout.passes[0]]).mean(0)

    before = composite()
    lm.model.zero_grad()
    trainer.update(lm.model, rollout, 0)
    with torch.no_grad():
        for p in lm.model.parameters():
            if p.grad is not None:
                p -= 0.05 * p.grad
    after = composite()
    # the step follows the advantage-weighted ELBO: the rewarded completion gains on the other one
    assert after[0] - after[1] > before[0] - before[1], (before, after)


def test_defaults_follow_the_recipe():
    p = EBPO().params
    assert (p.mc_num, p.clip_eps_low, p.clip_eps_high, p.dual_clip_c, p.beta, p.kl_estimator, p.num_iterations) == (
        16, 0.2, 0.2, None, 0.0, "k3", 1)
    assert EBPO.score_reduction == "pass_mean"


def _validate(tmp_path, objective: str, params: dict, sampler: dict, family: str = "llada") -> dict:
    """Spec-validation problems ``{yaml path: message}`` of a small spec (no model is loaded)."""
    import yaml

    from dare.errors import SpecError
    from dare.runspec import load_spec

    spec = {"model": {"new": {"family": family, "preset": "tiny"}},
            "data": {"train": {"path": "dare://sudoku/train.parquet", "limit": 2}},
            "algorithm": {"name": objective, "params": params}, "sampler": sampler,
            "rewards": [{"name": "format"}], "train": {"learning_rate": 1e-3, "max_steps": 1},
            "output": {"dir": str(tmp_path / "run")}}
    (tmp_path / "s.yaml").write_text(yaml.safe_dump(spec))
    try:
        load_spec(tmp_path / "s.yaml")
    except SpecError as exc:
        return dict(exc.problems)
    return {}


def test_block_length_must_match_a_block_family(tmp_path):
    sdar = {"name": "sdar", "params": {"gen_length": 8, "temperature": 1.0}}
    assert _validate(tmp_path, "ebpo", {}, sdar, family="sdar") == {}
    bad = _validate(tmp_path, "ebpo", {"block_length": 8, "dual_clip_c": 3.0}, sdar, family="sdar")
    assert set(bad) == {"algorithm.params.block_length", "algorithm.params.dual_clip_c"}
    assert "block size 4" in bad["algorithm.params.block_length"]
