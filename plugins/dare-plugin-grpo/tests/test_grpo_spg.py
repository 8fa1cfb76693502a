"""SPG: the ELBO/EUBO surrogates and the length-weighted REINFORCE loss by hand, the random-block corruption,
the coupled-copies replay against direct autograd, and one optimiser step on a tiny LLaDA."""

from __future__ import annotations

import math

import pytest
import torch

from dare.trainers import DareConfig

from dare.diffusion.estimators import RandomBlockEstimator, ScoringBatch, score_pass
from dare_grpo.objectives import SPG
from dare_grpo.objectives.spg.loss import JointLossInput, spg_surrogates


pytestmark = pytest.mark.usefixtures("one_thread")


E, LOG = math.exp, math.log

# M = 2 copies, 1 row, G = 3, |y| = 3; copy 0 masks tokens {0, 1}, copy 1 masks {0, 2}
TOKEN = torch.tensor([[[-1.0, -2.0, 0.0]], [[-0.5, 0.0, -3.0]]])
SCORED = torch.tensor([[[True, True, False]], [[True, False, True]]])
ELBO = ((-1 - 2) / 2 + (-0.5 - 3) / 2) / 2
# q_k = mean_m exp(beta l) / t_m with t_m = 2/3, beta = 2
Q = [0.5 * (E(-2) + E(-1)) * 1.5, 0.5 * E(-4) * 1.5, 0.5 * E(-6) * 1.5]
EUBO = sum(LOG(q) for q in Q) / 3 / 2


def test_surrogates_by_hand():
    elbo, eubo = spg_surrogates(TOKEN, SCORED, torch.tensor([3]), eubo_beta=2.0)
    assert elbo.item() == pytest.approx(ELBO, rel=1e-6) and eubo.item() == pytest.approx(EUBO, rel=1e-6)
    # no underflow: DARE's p^beta would be 0.0 in float32 at l = -60 and drop the token; log space keeps it
    _, deep = spg_surrogates(torch.tensor([[[-60.0]]]), torch.tensor([[[True]]]), torch.tensor([1]), eubo_beta=2.0)
    assert deep.item() == pytest.approx(-60.0, rel=1e-6)


@pytest.mark.parametrize("estimation,negative", [("mix", 0.5 * EUBO + 0.5 * ELBO), ("eubo", EUBO), ("elbo", ELBO),
                                                 ("zero", 0.0)])
def test_loss_takes_elbo_for_positive_and_the_choice_for_negative_advantages(tmp_path, estimation, negative):
    obj = SPG({"logp_estimation": estimation, "eubo_beta": 2.0})
    token = TOKEN.repeat(1, 2, 1).clone().requires_grad_(True)  # rows: A = +1 (|y| = 3), A = -1 (|y| = 3)
    inp = JointLossInput(token=token, scored=SCORED.repeat(1, 2, 1), advantages=torch.tensor([1.0, -1.0]),
                         response_lengths=torch.tensor([3, 3]), total_response_tokens=6.0, num_sequences=2)
    terms = obj.joint_loss(inp)
    assert terms.loss.item() == pytest.approx((-1 * ELBO * 3 + 1 * negative * 3) / 6, rel=1e-6)
    terms.loss.backward()
    # row 0 (ELBO-like): d/dl of -A * mean_m mean_k l * |y| / 6 = -(1/2)(1/2)(3/6) per masked token
    assert token.grad[0, 0, 0].item() == pytest.approx(-0.125, rel=1e-6)
    if estimation == "zero":
        assert token.grad[:, 1].abs().max().item() == 0.0


def test_loss_is_length_weighted(tmp_path):
    token = torch.tensor([[[-1.0, -1.0, 0.0], [-2.0, 0.0, 0.0]]])
    scored = torch.tensor([[[True, True, False], [True, False, False]]])
    inp = JointLossInput(token=token, scored=scored, advantages=torch.tensor([2.0, 1.0]),
                         response_lengths=torch.tensor([3, 1]), total_response_tokens=4.0, num_sequences=2)
    loss = SPG().joint_loss(inp).loss
    assert loss.item() == pytest.approx((-2 * -1.0 * 3 + -1 * -2.0 * 1) / 4)


def _batch(completion_mask):
    ids = torch.tensor([[0, 5, 6, 7, 1, 2, 3, 4, 1, 2, 3, 4]])  # P = 4 (first is padding), G = 8
    attn = torch.ones_like(ids)
    attn[0, 0] = 0
    attn[0, 4:] = completion_mask.long()
    return ScoringBatch(ids, attn, completion_mask[None], prompt_length=4, mask_id=99)


def test_random_block_corruption_structure():
    resp = torch.ones(8, dtype=torch.bool)
    g = torch.Generator().manual_seed(0)
    seen = set()
    for _ in range(20):
        (pas,) = RandomBlockEstimator(block_length=4, p_mask_prompt=0.0).draw(_batch(resp), g)
        comp = pas.mask[0, 0, 4:]
        assert not bool(pas.mask[0, 0, :4].any())
        assert torch.equal(pas.weight[0, 0], comp.float())
        if comp[4:].all() and comp[:4].any():
            seen.add(0)      # j = 0: later block fully masked, block 0 partly (>= 1)
        else:
            assert not comp[:4].any() and comp[4:].any()
            seen.add(1)      # j = 1: earlier block untouched at p = 0
    assert seen == {0, 1}
    (pas,) = RandomBlockEstimator(block_length=4, p_mask_prompt=1.0).draw(_batch(resp), g)
    assert pas.mask[0, 0, :4].tolist() == [False, True, True, True]  # real prompt tokens only
    for _ in range(5):  # Monte-Carlo copies take distinct blocks: j = 1 iff block 0 is clean (p = 0)
        two = RandomBlockEstimator(block_length=4, mc_num=2, p_mask_prompt=0.0).draw(_batch(resp), g)
        assert sorted(int(not p.mask[0, 0, 4:8].any()) for p in two) == [0, 1]
    short = torch.tensor([True] * 5 + [False] * 3)  # truncated response: positions 5.. never masked
    for _ in range(10):
        (pas,) = RandomBlockEstimator(block_length=4, p_mask_prompt=1.0).draw(_batch(short), g)
        assert not pas.mask[0, 0, 9:].any() and pas.mask[0, 0, 4:9].any()


def _trainer(lm, objective, out, **cfg):
    from dare.rl.prompts import PromptDataset
    from dare_llada.sampler import LLaDASampler

    objective = type(objective)(objective.params, group_size=2, **cfg)
    args = DareConfig(output_dir=str(out), per_device_train_batch_size=1, max_steps=1, learning_rate=1e-2, report_to="none")
    sampler = LLaDASampler({"gen_length": 4, "block_length": 2, "steps": 4, "temperature": 1.0})
    t = objective.trainer_class()(
        model=lm.model, args=args, train_dataset=PromptDataset(["12"], [{}]), processing_class=lm.tokenizer,
        family=lm.family, tokens=lm.tokens, objective=objective,
        estimator=objective.make_estimator(lm.family, lm.model.config, sampler), sampler=sampler, reward=None,
    )
    t.current_gradient_accumulation_steps = 1
    return t


def _rollout(lm, trainer):
    from dare.rl.rollout import Rollout

    tok = lm.tokenizer
    prompt = tok("12", add_special_tokens=False)["input_ids"]
    comps = [tok("ab", add_special_tokens=False)["input_ids"] + [lm.tokens.eos_id] * 2,
             tok("xyzw", add_special_tokens=False)["input_ids"]]
    ids = torch.tensor([prompt + c for c in comps])
    batch = ScoringBatch(ids, torch.ones_like(ids), torch.ones(2, 4, dtype=torch.bool), len(prompt), lm.tokens.mask_id)
    return Rollout(batch=batch, texts=[], rewards=torch.tensor([1.0, 0.0]), reward_parts={},
                   advantages=torch.tensor([1.0, -1.0]), passes=[trainer.draw_passes(batch)])


def test_coupled_copies_replay_equals_direct_gradient(tmp_path, tiny_llada_dir):
    """mc_num > 1: the token-level proxy replay (one copy in memory) gives the gradient of L(l_1, ..., l_M)."""
    from dare.modeling import load_model

    lm = load_model(tiny_llada_dir)
    trainer = _trainer(lm, SPG({"mc_num": 3, "logp_estimation": "eubo"}), tmp_path, micro_batch_size=1)
    rollout = _rollout(lm, trainer)
    lm.model.zero_grad()
    trainer.update(lm.model, rollout, 0)
    replay = {n: p.grad.clone() for n, p in lm.model.named_parameters() if p.grad is not None}
    lm.model.zero_grad()
    fn = trainer.logits_fn(lm.model)
    scores = [score_pass(fn, rollout.batch, p) for p in rollout.passes[0]]
    inp = JointLossInput(torch.stack([s.token for s in scores]), torch.stack([s.scored for s in scores]),
                         rollout.advantages, rollout.batch.response_lengths, 8.0, 2)
    trainer.objective.joint_loss(inp).loss.backward()
    for n, p in lm.model.named_parameters():
        if p.grad is not None:
            assert torch.allclose(replay[n], p.grad, atol=1e-6, rtol=1e-4), n


def test_one_step_raises_the_elbo_of_the_rewarded_completion(tmp_path, tiny_llada_dir):
    from dare.modeling import load_model

    lm = load_model(tiny_llada_dir)
    trainer = _trainer(lm, SPG({"mc_num": 1}), tmp_path)
    rollout = _rollout(lm, trainer)
    fn = trainer.logits_fn(lm.model)

    def elbo():
        with torch.no_grad():
            s = score_pass(fn, rollout.batch, rollout.passes[0][0])
            return spg_surrogates(s.token[None], s.scored[None], rollout.batch.response_lengths, 1.5)[0]

    before = elbo()
    lm.model.zero_grad()
    trainer.update(lm.model, rollout, 0)
    with torch.no_grad():
        for p in lm.model.parameters():
            if p.grad is not None:
                p -= 0.05 * p.grad
    after = elbo()
    assert after[0] > before[0] and after[1] < before[1], (before, after)


def test_defaults_follow_the_recipe():
    p = SPG().params
    assert (p.logp_estimation, p.mix_weight, p.eubo_beta, p.mc_num, p.p_mask_prompt, p.beta, p.num_iterations) == (
        "mix", 0.5, 1.5, 1, 0.15, 0.0, 1)


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


def test_kl_reuse_and_clip_settings_are_rejected_at_validation(tmp_path):
    sampler = {"name": "llada", "params": {"gen_length": 4, "block_length": 2, "steps": 4, "temperature": 1.0}}
    assert _validate(tmp_path, "spg", {}, sampler) == {}
    bad = _validate(tmp_path, "spg", {"beta": 0.01, "num_iterations": 2, "clip_eps_high": 0.3}, sampler)
    assert set(bad) == {"algorithm.params.beta", "algorithm.params.num_iterations", "algorithm.params.clip_eps_high"}
    assert "no KL term" in bad["algorithm.params.beta"]
