"""SPG against the official trainer (facebookresearch/SPG@a1c7120, ``spg/spg_trainer.py``).

The fixture (``tests/fixtures/parity/spg/``, built by ``tools/parity/build_spg.py``) holds the official
corrupted copies (noisy batch, block mask), the official ``torch.rand`` matrix, the loss and gradients.
DARE's random-block estimator is fed the same draws (the block, the count and the positions of each copy
are read off the official masks; the prompt/earlier-block draw is the official matrix), then DARE's SPG
loss with ``preset: official`` must match to 1e-5 (relative), and changing any one official setting must
break the match. DARE runs the functions ``SPGTrainer`` runs: the rollout batch and advantages of
:mod:`dare.rl.step`, :func:`dare_grpo.objectives.spg.trainer.spg_passes` and :func:`dare_grpo.objectives.spg.trainer.spg_update`.
"""

from __future__ import annotations

from unittest import mock

import pytest
import torch

from dare.diffusion.estimators import ScoringBatch
from dare.diffusion.estimators import random_block as rb
from dare.rl import step
from dare.rl.advantages import group_advantages
from dare.rl.rollout import Rollout
from dare_grpo.objectives.spg import SPG, SPGParams
from dare_grpo.objectives.spg.trainer import response_batch, spg_passes, spg_update
from tools.parity.common import model_from_state, plain_logits, read_fixture, rel_diff

TOL = 1e-5


def _official_draws(t, meta, batch: ScoringBatch, mc_num: int) -> list[torch.Tensor]:
    """The values DARE's ``random_block_passes`` draws (in its call order) that reproduce the official copies."""
    P, bl = meta["prompt_length"], meta["settings"]["block_length"]
    masked = t["noisy"] == meta["mask_id"]                       # [N, M, S]
    N, G = batch.completion_mask.shape
    blocks = torch.arange(G) // bl
    draws = []
    for n in range(N):
        resp = batch.completion_mask[n]
        valid = torch.unique(blocks[resp]).tolist()
        chosen = [int(t["block_mask"][n, m, P::bl].sum()) - 1 for m in range(mc_num)]  # j of each copy
        rank = {j: i for i, j in enumerate(dict.fromkeys(chosen))}
        draws.append(torch.tensor([0.1 * (1 + rank[v]) if v in rank else 0.9 for v in valid]))
        for m in range(mc_num):
            where = torch.nonzero((blocks == chosen[m]) & resp).flatten()
            hit = masked[n, m, P + where]
            lo, hi = rb.mask_count_range(where.numel(), meta["settings"]["min_t"], meta["settings"]["max_t"])
            draws.append(torch.tensor((int(hit.sum()) - lo + 0.5) / (hi - lo + 1)))
            draws.append(torch.where(hit, 0.1, 0.9) + 0.001 * torch.arange(where.numel()))
    for m in range(mc_num):
        draws += [t["random_matrix"][:, m, :P], t["random_matrix"][:, m, P:]]
    return draws


def run_dare(**overrides):
    """DARE's SPG step on the fixture with ``preset: official`` (+ ``overrides``): passes, loss, grads."""
    t, meta = read_fixture("spg")
    s = meta["settings"]
    params = SPGParams.model_validate({"preset": "official", "group_size": meta["group_size"],
                                       "block_length": s["block_length"], **overrides})
    objective = SPG(params)
    model = model_from_state(t, "current.")
    P, stop = meta["prompt_length"], (meta["eos_id"],)
    ids = t["input_ids"]
    sampled = ScoringBatch(ids, torch.cat([t["prompt_mask"], torch.ones_like(ids[:, P:])], 1),
                           torch.ones_like(ids[:, P:], dtype=torch.bool), P, meta["mask_id"])
    full = step.rollout_batch(sampled, params)
    estimator = objective.make_estimator(None, None, None)  # block_length given: no sampler needed
    draws = iter(_official_draws(t, meta, response_batch(full, params, stop), params.mc_num))
    with mock.patch.object(rb, "uniform", lambda shape, g, device: next(draws).reshape(shape)):
        passes = spg_passes(lambda cut: step.draw_passes(estimator, cut, None, params, stop), full, params, stop)
    adv = step.rollout_advantages(t["rewards"], params)
    rollout = Rollout(full, [], t["rewards"], {}, adv, passes=[passes])
    loss, _ = spg_update(step.StepSettings(objective, 1.0, stop), plain_logits(model), rollout, 0)
    grads = {n: p.grad for n, p in model.named_parameters() if n in meta["grad_params"]}
    return t, meta, passes, torch.tensor(loss), grads


def _worst(t, meta, passes, loss, grads) -> float:
    return max([rel_diff(loss.reshape(1), t["expected.loss"])]
               + [rel_diff(g, t[f"expected.grad.{n}"]) for n, g in grads.items()])


def test_official_preset_reproduces_the_official_trainer():
    t, meta, passes, loss, grads = run_dare()
    P = meta["prompt_length"]
    official = t["noisy"] == meta["mask_id"]                     # [N, M, S]
    real_prompt = torch.cat([t["prompt_mask"].bool(), torch.ones_like(official[:, 0, P:])], 1)
    for m, pas in enumerate(passes):  # the same corrupted copies (prompt padding is not attended to)
        assert torch.equal(pas.mask[0] & real_prompt, official[:, m] & real_prompt), m
    assert torch.allclose(group_advantages(t["rewards"], 3, "drgrpo"), t["expected.advantages"], atol=1e-6)
    assert rel_diff(loss.reshape(1), t["expected.loss"]) <= TOL
    for n, g in grads.items():
        assert rel_diff(g, t[f"expected.grad.{n}"]) <= TOL, n


@pytest.mark.parametrize("change", [
    {"advantage": "grpo"},
    {"response_tokens": "all"},
    {"logp_estimation": "elbo"},
    {"eubo_beta": 1.0},
    {"mix_weight": 0.25},
])
def test_changing_one_official_setting_breaks_parity(change):
    assert _worst(*run_dare(**change)) > 1e-3, change
