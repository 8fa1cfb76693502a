"""JustGRPO: chunked aggregation equals the full one, the clipped loss by hand, sampler validation at spec
validation, and one optimiser step on a tiny LLaDA."""

from __future__ import annotations

import pytest
import torch

from dare.trainers import DareConfig
import yaml

from dare.diffusion.estimators import PassScore
from dare_grpo.objectives import JustGRPO, PassLossInput
from dare_grpo.objectives.justgrpo import chunk_aggregate


pytestmark = pytest.mark.usefixtures("one_thread")


CUR = torch.tensor([[-1.0, -2.0], [-0.5, -1.5]])
OLD = torch.tensor([[-1.2, -2.0], [-1.7, -0.3]])
ADV = torch.tensor([1.0, -1.0])


def test_chunks_add_up_to_the_full_aggregation():
    values = torch.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]])
    resp = torch.tensor([[True, True, True], [True, True, False]])
    lengths = resp.sum(1)
    chunks = [torch.tensor([True, True, False]), torch.tensor([False, False, True])]
    tm = sum(chunk_aggregate(values, resp & c, "token-mean", lengths, 5.0, 2) for c in chunks)
    sm = sum(chunk_aggregate(values, resp & c, "sequence-mean", lengths, 5.0, 2) for c in chunks)
    assert tm.item() == pytest.approx((1 + 2 + 3 + 4 + 5) / 5)
    assert sm.item() == pytest.approx(((1 + 2 + 3) / 3 + (4 + 5) / 2) / 2)


def _pass(t, num_passes=2, beta_ref=None):
    scored = torch.zeros(2, 2, dtype=torch.bool)
    scored[:, t] = True
    cur = torch.where(scored, CUR, torch.zeros_like(CUR)).requires_grad_(True)
    return PassLossInput(current=PassScore(cur, scored), old=torch.where(scored, OLD, torch.zeros_like(OLD)),
                         ref=beta_ref, advantages=ADV, response_lengths=torch.tensor([2, 2]), pass_index=t,
                         num_passes=num_passes, num_tokens=2.0, num_sequences=2, total_response_tokens=4.0)


def test_position_chunks_give_the_clipped_token_mean_over_all_tokens(tmp_path):
    # per-token losses: row 0 (A=+1): e^0.2 clipped -> -1.2, ratio 1 -> -1; row 1 (A=-1): e^1.2 > c=3 dual-clipped
    # -> 3, e^-1.2 < 0.8 -> 0.8; token-mean over the 4 response tokens, not per chunk
    passes = [_pass(0), _pass(1)]
    terms = [JustGRPO().pass_loss(p) for p in passes]
    assert sum(t.loss.item() for t in terms) == pytest.approx((-1.2 - 1 + 3 + 0.8) / 4, rel=1e-6)
    assert sum(t.metrics["dual_clip_fraction"].item() for t in terms) == pytest.approx(0.25)
    terms[1].loss.backward()
    assert passes[1].current.token.grad.tolist() == [[0.0, -0.25], [0.0, 0.0]]


def _validate(tmp_path, sampler: dict, params: dict | None = None, family: str = "llada"):
    from dare.errors import SpecError
    from dare.runspec import load_spec

    spec = {"model": {"new": {"family": family, "preset": "tiny"}},
            "data": {"train": {"path": "dare://sudoku/train.parquet", "limit": 2}},
            "algorithm": {"name": "justgrpo", "params": params or {}},
            "sampler": sampler, "rewards": [{"name": "format"}], "train": {"learning_rate": 1e-3, "max_steps": 1},
            "output": {"dir": str(tmp_path / "run")}}
    (tmp_path / "s.yaml").write_text(yaml.safe_dump(spec))
    try:
        load_spec(tmp_path / "s.yaml")
    except SpecError as exc:
        return dict(exc.problems)
    return {}


def test_sampler_must_decode_left_to_right_one_token_per_step(tmp_path):
    ok = {"name": "llada", "params": {"gen_length": 4, "block_length": 1, "steps": 4, "temperature": 0.6}}
    assert _validate(tmp_path, ok) == {}
    bad = _validate(tmp_path, {"name": "llada", "params": {"gen_length": 4, "block_length": 2, "steps": 2,
                                                           "temperature": 0.6, "cfg_scale": 1.0}})
    assert set(bad) == {"sampler.params.block_length", "sampler.params.steps", "sampler.params.cfg_scale"}
    assert "left-to-right" in bad["sampler.params.block_length"]
    via = _validate(tmp_path, {"name": "llada", "params": {"gen_length": 4, "block_length": 1, "steps": 4}},
                    {"rollout_sampler": {"temperature": 0.6, "steps": 8}})
    assert set(via) == {"algorithm.params.rollout_sampler.steps"}
    dream = _validate(tmp_path, {"name": "dream", "params": {"gen_length": 4, "steps": 4, "temperature": 0.6}},
                      family="dream")
    assert "not left to right" in dream["sampler.name"]


def test_likelihood_temperature_is_the_rollout_temperature():
    from dare_llada.sampler import LLaDASampler

    s = LLaDASampler({"gen_length": 4, "block_length": 1, "steps": 4, "temperature": 0.6})
    assert JustGRPO().resolved_likelihood_temperature(s) == 0.6


def test_one_step_raises_the_ar_likelihood_of_the_rewarded_completion(tmp_path, tiny_llada_dir):
    from dare.diffusion.estimators import ScoringBatch, score_pass
    from dare.modeling import load_model
    from dare.rl.prompts import PromptDataset
    from dare.rl.rollout import Rollout
    from dare_llada.sampler import LLaDASampler

    lm = load_model(tiny_llada_dir)
    objective = JustGRPO({"chunk_size": 2, "group_size": 2, "likelihood_temperature": 0.6})
    sampler = LLaDASampler({"gen_length": 4, "block_length": 1, "steps": 4, "temperature": 0.6})
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
    assert len(rollout.passes[0]) == 2  # 4 positions in chunks of 2
    fn = trainer.logits_fn(lm.model)

    def loglik():
        with torch.no_grad():
            return sum(score_pass(fn, batch, p, 0.6).sequence for p in rollout.passes[0])

    before = loglik()
    lm.model.zero_grad()
    trainer.update(lm.model, rollout, 0)
    with torch.no_grad():
        for p in lm.model.parameters():
            if p.grad is not None:
                p -= 0.05 * p.grad
    after = loglik()
    assert after[0] > before[0] and after[1] < before[1], (before, after)


def test_defaults_follow_the_recipe():
    p = JustGRPO().params
    got = (p.likelihood_temperature, p.chunk_size, p.clip_eps_low, p.dual_clip_c, p.beta)
    assert got == ("sampler", 1, 0.2, 3.0, 0.0)
