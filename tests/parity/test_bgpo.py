"""BGPO against the seed paper's release (yjyddq/DARE@83ae8a3, ``verl/workers/actor/{llada,sdar}_dp_actor_bgpo.py``,
``compute_policy_loss_bgpo`` and ``_forward_process_bgpo`` of ``verl/trainer/ppo/dllm_core_algos.py``).

The fixtures (``tests/fixtures/parity/bgpo/`` for the LLaDA actor, ``bgpo_sdar/`` for the SDAR actor, built by
``tools/parity/build_bgpo.py [--family sdar]``) hold the official stratified corruptions (masks and mask ratios),
the rollout and current policies' per-term ELBOs (divided by the response length: ``R`` for LLaDA, whose rollouts
attend to the whole response, the valid length through the first EOS for SDAR), the GRPO advantages, the loss and
the gradients of one ``update_policy`` (one backward per Monte-Carlo term). The SDAR actor's block-diffusion model
call is replaced on both sides by the same forward over left-aligned rows
(:func:`tools.parity.build_bgpo.compact_forward`). DARE's stratified estimator is fed the same draws (the first
count ``k`` of each row and the masked positions) and DARE's side is the public RL step (:mod:`dare.rl.step`, the
functions ``GRPOTrainer`` runs: rollout batch, passes, advantages, old scores and the per-pass update with one
backward per term); with ``preset: official`` DARE's per-term ELBOs, loss and gradients must match to 1e-5
(relative), and changing any one official setting must break the match.
"""

from __future__ import annotations

from unittest import mock

import pytest
import torch

from dare.diffusion import elbo as elbo_module
from dare.diffusion.estimators import ScoringBatch
from dare.rl import step
from dare.rl.advantages import group_advantages
from dare_grpo.objectives.bgpo import BGPO, BGPOParams
from tools.parity.build_bgpo import compact_forward
from tools.parity.common import model_from_state, plain_logits, public_step, read_fixture, rel_diff

TOL = 1e-5


def _left_aligned(model):
    """The SDAR harness's forward as DARE's logits function: attended tokens moved left, scored, put back."""

    def fn(noisy, clean, attn):
        valid = attn.bool()
        compact, compact_valid = torch.zeros_like(noisy), torch.zeros_like(valid)
        for b in range(noisy.shape[0]):
            n = int(valid[b].sum())
            compact[b, :n], compact_valid[b, :n] = noisy[b, valid[b]], True
        logits = compact_forward(model, compact, compact_valid)
        out = torch.zeros(*noisy.shape, logits.shape[-1], dtype=logits.dtype)
        for b in range(noisy.shape[0]):
            out[b, valid[b]] = logits[b, : int(valid[b].sum())]
        return out

    return fn


def _logits(meta):
    """``model -> LogitsFn`` of the fixture's family: the SDAR harness's forward over left-aligned rows, or the
    plain bidirectional forward (LLaDA)."""
    return _left_aligned if meta["family"] == "sdar" else plain_logits


def run_dare(fixture: str = "bgpo", **overrides):
    """DARE's BGPO on ``fixture`` with ``preset: official`` (+ ``overrides``), run by the public RL step
    (:mod:`dare.rl.step`: rollout batch, passes, advantages, old scores, :func:`dare.rl.step.update_per_pass`):
    per-term ELBOs, loss, grads."""
    t, meta = read_fixture(fixture)
    params = BGPOParams.model_validate({"preset": "official", "group_size": meta["group_size"],
                                        "mc_num": meta["settings"]["mc_num"], **overrides})
    objective = BGPO(params)
    models = {m: model_from_state(t, f"{m}.") for m in ("current", "old")}
    P = meta["prompt_length"]
    ids = t["input_ids"]
    sampled = ScoringBatch(ids, t["attention_mask"], t["attention_mask"][:, P:].bool(), P, meta["mask_id"])
    settings = step.StepSettings(objective, temperature=1.0, stop_ids=(meta["eos_id"],))
    batch = step.rollout_batch(sampled, params)
    official = t["mask_indices"][:, :, P:]                         # [N, M, R]
    R = official.shape[-1]
    first_k = official[:, 0].sum(dim=-1, keepdim=True)            # count of term 0 = the official k
    draws = torch.where(official, 0.1, 0.9) + 0.001 * torch.arange(R)
    with mock.patch.object(elbo_module, "_uniform_count", lambda lengths, shape, g: first_k), \
         mock.patch.object(elbo_module, "_eligible_uniform", lambda eligible, n, g: draws):
        estimator = objective.make_estimator(None, None, None)
        passes = step.draw_passes(estimator, batch, None, params, settings.stop_ids)

    logits = _logits(meta)
    adv = step.rollout_advantages(t["rewards"], params)
    assert objective.score_reduction == "per_pass"  # one backward per Monte-Carlo term, as the release
    loss, _ = public_step(objective, batch, passes, adv, models["current"], models["old"], logits=logits)
    lengths = batch.response_lengths.clamp(min=1)
    scores = step.score_passes(logits(models["current"]), batch, passes)
    terms = torch.stack([s.sequence / lengths for s in scores], 1)
    grads = {n: p.grad for n, p in models["current"].named_parameters() if n in meta["grad_params"]}
    return t, meta, passes, terms, torch.tensor(loss), grads


def _worst(t, meta, passes, terms, loss, grads) -> float:
    return max([rel_diff(loss.reshape(1), t["expected.loss"]), rel_diff(terms, t["expected.terms"])]
               + [rel_diff(g, t[f"expected.grad.{n}"]) for n, g in grads.items()])


@pytest.mark.parametrize("fixture", ["bgpo", "bgpo_sdar"])
def test_official_preset_reproduces_the_official_trainer(fixture):
    t, meta, passes, terms, loss, grads = run_dare(fixture)
    P = meta["prompt_length"]
    for j, pas in enumerate(passes):  # the same corruptions, weighted by the official 1 / p_mask
        assert torch.equal(pas.mask[0], t["mask_indices"][:, j]), j
        assert torch.allclose(pas.weight[0].amax(dim=-1), 1 / t["p_mask"][:, j]), j
    assert not bool(t["mask_indices"][:, :, :P].any())
    assert torch.allclose(group_advantages(t["rewards"], 3, "grpo"), t["expected.advantages"], atol=1e-6)
    assert rel_diff(terms, t["expected.terms"]) <= TOL
    assert rel_diff(loss.reshape(1), t["expected.loss"]) <= TOL
    for n, g in grads.items():
        assert rel_diff(g, t[f"expected.grad.{n}"]) <= TOL, n


def test_old_policy_terms_match():
    t, meta = read_fixture("bgpo")  # LLaDA: every response has R tokens, the normaliser
    P = meta["prompt_length"]
    model = model_from_state(t, "old.")
    ids, attn = t["input_ids"], t["attention_mask"]
    with torch.no_grad():
        for j in range(meta["settings"]["mc_num"]):
            noisy = torch.where(t["mask_indices"][:, j], meta["mask_id"], ids)
            lp = torch.log_softmax(model(noisy, attention_mask=attn).logits[:, P:], -1)
            lp = lp.gather(-1, ids[:, P:, None])[..., 0] * t["mask_indices"][:, j, P:]
            ours = lp.sum(-1) / t["p_mask"][:, j] / (ids.shape[1] - P)
            assert rel_diff(ours, t["expected.old_terms"][:, j]) <= TOL, j


@pytest.mark.parametrize("change", [
    {"advantage": "drgrpo"},
    {"clip_eps_low": 0.5, "clip_eps_high": 0.5},
    {"response_tokens": "through_first_eos"},
    {"prompt_padding": "attend"},
])
def test_changing_one_official_setting_breaks_parity(change):
    assert _worst(*run_dare("bgpo", **change)) > 1e-3, change


@pytest.mark.parametrize("change", [
    {"advantage": "drgrpo"},
    {"clip_eps_low": 0.1, "clip_eps_high": 0.1},
    {"loss_aggregation": "sequence-mean"},   # responses of 2, 3 and 8 valid tokens: the weights differ
])
def test_changing_one_official_setting_breaks_sdar_parity(change):
    assert _worst(*run_dare("bgpo_sdar", **change)) > 1e-3, change
