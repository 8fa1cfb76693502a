"""MDPO: step scores, step advantages, top-K steps, the weighted loss by hand, the recording decoder, and
one optimiser step on a tiny LLaDA."""

from __future__ import annotations

import math

import pytest
import torch

from dare.components import SpecialTokens
from dare.sampling.options import DecodeOptions
from dare.trainers import DareConfig

from dare_grpo.objectives import MDPO
from dare_grpo.objectives.mdpo.loss import StepLossInput, select_steps, step_advantages, step_scores
from dare_grpo.objectives.mdpo.rollout import MDPORolloutParams, MDPOTrajectory, mdpo_decode


pytestmark = pytest.mark.usefixtures("one_thread")


E = math.exp


def test_step_scores_advantages_and_top_k():
    r = torch.tensor([[0.0, 1.0, 1.0], [1.0, 0.0, 0.5]])
    # (r_s - r_{s-1} + 1) + mean_{s'>s} r_s'  (last step: + r_T)
    scores = step_scores(r)
    assert torch.allclose(scores, torch.tensor([[1 + 1.0, 2 + 1.0, 1 + 1.0], [2 + 0.25, 0 + 0.5, 1.5 + 0.5]]))
    adv = step_advantages(scores, group_size=2, kind="drgrpo")
    assert torch.allclose(adv, torch.tensor([[-0.125, 1.25, 0.0], [0.125, -1.25, 0.0]]))
    grpo = step_advantages(scores, group_size=2, kind="grpo")  # unbiased std of a pair: |a - b| / sqrt(2)
    assert torch.allclose(grpo[:, :2].abs(), torch.full((2, 2), 1 / math.sqrt(2)), atol=1e-5)
    assert grpo[:, 2].abs().max() == 0
    assert select_steps(adv, 1).tolist() == [1] and select_steps(adv, 2).tolist() == [0, 1]
    assert select_steps(adv, 16).tolist() == [0, 1, 2]


def test_step_loss_inverse_mask_ratio_confidence_clip_and_k2():
    cur = torch.tensor([[-1.0, -2.0, -0.5], [-0.5, -1.5, -1.0]], requires_grad=True)
    old = torch.tensor([[-1.2, -2.0, -0.5], [-1.7, -0.3, -1.0]])
    ref = torch.tensor([[-1.0, -2.5, 0.0], [-0.5, -1.0, -1.0]])
    mask = torch.tensor([[True, True, False], [True, True, True]])
    conf = torch.tensor([[0.5, 1.0, 0.9], [0.2, 0.4, 1.0]])
    inp = StepLossInput(current=cur, old=old, ref=ref, mask=mask, confidence=conf, advantages=torch.tensor([1.0, -1.0]),
                        completion_length=3, num_tokens=5.0)
    terms = MDPO(beta=0.1, kl_estimator="k2").step_loss(inp)
    # lambda = 3/2 and 3/3. Row 0 (A=+1): rho e^0.2 clipped to 1.2 -> -1.8 * c 0.5; rho 1 -> -1.5 * c 1.
    # Row 1 (A=-1, no dual clip): rho e^1.2 -> +e^1.2 * c 0.2; rho e^-1.2 < 0.8 -> 0.8 * c 0.4; rho 1 -> 1 * c 1.
    pg = -1.8 * 0.5 - 1.5 + E(1.2) * 0.2 + 0.8 * 0.4 + 1.0
    kl = 0.1 * (0.5 * 0.5**2 * 1.0 + 0.5 * 0.5**2 * 0.4)  # k2 on the two tokens with l != l_ref, confidence-weighted
    assert terms.loss.item() == pytest.approx((pg + kl) / 5, rel=1e-5)
    assert terms.metrics["clip_fraction"].item() == pytest.approx(2 / 5)
    terms.loss.backward()
    assert cur.grad[0, 1].item() == pytest.approx((-1.5 + 0.1 * 0.5 * 1.0) / 5, rel=1e-5)
    assert cur.grad[1, 0].item() == pytest.approx(E(1.2) * 0.2 / 5, rel=1e-5)
    assert cur.grad[0, 0].item() == 0.0 and cur.grad[0, 2].item() == 0.0  # clipped; not masked


def _scripted(V: int, mask_id: int):
    """Logits that prefer token 10 + g at completion position g with margin 1 + g (later = surer)."""

    def fn(x, am):
        B, L = x.shape
        logits = torch.zeros(B, L, V)
        for g in range(4):
            logits[:, L - 4 + g, 10 + g] = 1.0 + g
        logits[..., mask_id] = -1e4
        return logits

    return fn


def _options(mask_id, generator=None, **settings):
    return DecodeOptions(MDPORolloutParams(**settings), SpecialTokens(mask_id=mask_id, eos_id=0, pad_id=0), generator)


@pytest.mark.parametrize("conf_alg", ["llada", "entropy", "topk_margin"])
def test_decoder_records_states_predictions_and_confidence(conf_alg):
    M = 19
    prompt = torch.tensor([[1, 2]])
    traj = mdpo_decode(_scripted(20, M), prompt, None,
                       _options(mask_id=M, gen_length=4, steps=4, block_length=4, temperature=0.0, conf_alg=conf_alg))
    assert traj.nfe == 4 and traj.sequences[0, 2:].tolist() == [10, 11, 12, 13]
    # the surest position (the last) is committed first
    assert [row.tolist() for row in traj.inputs[0]] == [[M] * 4, [M, M, M, 13], [M, M, 12, 13], [M, 11, 12, 13]]
    assert torch.equal(traj.predictions[0], torch.tensor([[10, 11, 12, 13]] * 4))
    p = [E(1 + g) / (E(1 + g) + 18) for g in range(4)]  # softmax over 19 finite logits (mask at -1e4)
    assert traj.confidence[0, 0].tolist() == pytest.approx(p, rel=1e-5)
    assert traj.confidence[0, 3].tolist() == pytest.approx([p[0], 0, 0, 0], rel=1e-5)  # only masked positions


def test_decoder_samples_with_the_generator_and_commits_the_quota():
    M = 19
    prompt = torch.tensor([[1, 2], [3, 4]])
    run = lambda seed: mdpo_decode(_scripted(20, M), prompt, torch.ones_like(prompt),  # noqa: E731
                                   _options(mask_id=M, gen_length=4, steps=2, block_length=2, temperature=1.0,
                                            top_k=3, conf_alg="random", generator=torch.Generator().manual_seed(seed)))
    a, b = run(0), run(0)
    assert torch.equal(a.sequences, b.sequences) and torch.equal(a.inputs, b.inputs)
    masks = (a.inputs == M).sum(-1)  # [B, T]: block 0 then block 1, one step each commits the whole block
    assert masks.tolist() == [[4, 2], [4, 2]]
    assert bool((a.sequences[:, 2:] != M).all())
    assert set(a.sequences[:, 2:].flatten().tolist()) <= set(range(20)) - {M}


@pytest.mark.parametrize("conf_alg", ["llada", "random"])
def test_decoder_with_row_generators_gives_each_row_the_same_trajectory_in_any_batch(conf_alg):
    """Row generators (what the MDPO trainer passes): row b's samples and random scores come from its own
    generator, so decoding 3 rows together or one at a time gives the same trajectories (the batch split and the
    process count do not change a row's rollout)."""
    from dare.randomness import RowGenerators

    M = 19
    prompt = torch.tensor([[1, 2], [3, 4], [5, 6]])
    keys = [7, 11, 13]
    decode = lambda rows: mdpo_decode(_scripted(20, M), prompt[rows], None,  # noqa: E731
                                      _options(mask_id=M, gen_length=4, steps=4, block_length=2, temperature=1.0,
                                               conf_alg=conf_alg,
                                               generator=RowGenerators.keyed(0, "rollout", 0, [keys[r] for r in rows])))
    together = decode([0, 1, 2])
    for r in range(3):
        alone = decode([r])
        for field in ("sequences", "inputs", "predictions", "confidence"):
            assert torch.equal(getattr(alone, field)[0], getattr(together, field)[r]), (r, field)
    assert len({tuple(row) for row in together.sequences[:, 2:].tolist()}) > 1  # the rows really differ
    with pytest.raises(ValueError, match="2 row generators for 3 rows"):
        mdpo_decode(_scripted(20, M), prompt, None,
                    _options(mask_id=M, gen_length=4, steps=4, temperature=1.0,
                             generator=RowGenerators.keyed(0, "rollout", 0, [1, 2])))


def test_one_step_raises_the_step_likelihood_of_a_positive_advantage(tmp_path, tiny_llada_dir):
    from dare.diffusion.estimators import score_pass
    from dare.modeling import load_model
    from dare.rl.prompts import PromptDataset
    from dare_grpo.objectives.mdpo.trainer import MDPORollout, step_rows
    from dare_llada.sampler import LLaDASampler

    lm = load_model(tiny_llada_dir)
    objective = MDPO({"group_size": 2})
    sampler = LLaDASampler({"gen_length": 4, "block_length": 4, "steps": 2, "temperature": 1.0})
    args = DareConfig(output_dir=str(tmp_path), per_device_train_batch_size=1, max_steps=1, learning_rate=1e-2,
                      report_to="none")
    trainer = objective.trainer_class()(
        model=lm.model, args=args, train_dataset=PromptDataset(["12"], [{}]), processing_class=lm.tokenizer,
        family=lm.family, tokens=lm.tokens, objective=objective, estimator=None, sampler=sampler,
        reward=None,
    )
    trainer.current_gradient_accumulation_steps = 1
    tok, M = lm.tokenizer, lm.tokens.mask_id
    prompt = torch.tensor([tok("12", add_special_tokens=False)["input_ids"]] * 2)
    good, bad = tok("ab", add_special_tokens=False)["input_ids"], tok("xy", add_special_tokens=False)["input_ids"]
    preds = torch.tensor([[good + good], [bad + bad]])          # [N=2, T=1, G=4]
    inputs = torch.tensor([[[M, M, M, M]], [[M, M, M, M]]])
    traj = MDPOTrajectory(sequences=torch.cat([prompt, preds[:, 0]], 1), inputs=inputs, predictions=preds,
                          confidence=torch.ones(2, 1, 4), nfe=1)
    batch, pas, mask, conf = step_rows(traj, prompt, torch.ones_like(prompt), torch.tensor([0]),
                                       torch.ones(2, 4, dtype=torch.bool), M)
    rollout = MDPORollout(batch=batch, texts=[], rewards=torch.tensor([1.0, 0.0]), reward_parts={},
                          advantages=torch.tensor([1.0, -1.0]), steps=torch.tensor([0]), step_batch=batch,
                          step_pass=pas, step_mask=mask, step_advantages=torch.tensor([1.0, -1.0]), confidence=conf)
    fn = trainer.logits_fn(lm.model)
    with torch.no_grad():
        before = score_pass(fn, batch, pas).sequence
    lm.model.zero_grad()
    trainer.update(lm.model, rollout, 0)
    with torch.no_grad():
        for p in lm.model.parameters():
            if p.grad is not None:
                p -= 0.05 * p.grad
        after = score_pass(fn, batch, pas).sequence
    assert after[0] > before[0] and after[1] < before[1], (before, after)


def test_defaults_follow_the_recipe():
    p = MDPO().params
    assert (p.sample_train_steps, p.clip_eps_low, p.clip_eps_high, p.beta, p.kl_estimator, p.conf_alg, p.dual_clip_c,
            p.group_size, p.num_iterations) == (16, 0.2, 0.2, 0.0, "k2", "llada", None, 8, 1)
