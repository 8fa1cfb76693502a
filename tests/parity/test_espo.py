"""ESPO against the official trainer (ML-GSAI/ESPO@b5f2dac, ``espo/espo_trainer.py``).

The fixture (``tests/fixtures/parity/espo/``, built by ``tools/parity/build_espo.py``) holds the masks the
official ``forward_process`` drew (two Monte-Carlo samples), the official old/reference sequence ELBOs, loss and
gradients. DARE's complementary-mask ELBO is fed the same masks; with ``preset: official`` the ELBOs, loss and
gradients must match to 1e-5 (relative), and changing one official setting must break the match. DARE runs its
public RL step (:mod:`dare.rl.step`, the functions ``GRPOTrainer`` runs: the pass-mean replay of the update).
"""

from __future__ import annotations

from unittest import mock

import pytest
import torch

from dare.diffusion.estimators import ScoringBatch
from dare.diffusion.estimators import elbo_complement as ec
from dare.rl import step
from dare_grpo.objectives.espo import ESPO, ESPOParams
from tools.parity.common import model_from_state, plain_logits, public_step, read_fixture, rel_diff

TOL = 1e-5


def _draws(masks: torch.Tensor, P: int) -> list[torch.Tensor]:
    """What ``complement_pass`` draws (per pass: the count, then the position keys) for the official masks."""
    out = []
    for m in masks:                                  # [N, S] per Monte-Carlo sample
        resp = m[:, P:]
        L = resp.shape[1]
        out.append(torch.tensor((int(resp[0].sum()) + 0.5) / (L + 1)))
        out.append(torch.where(resp, 0.1, 0.9) + 0.001 * torch.arange(L))
    return out


def run_dare(**overrides):
    t, meta = read_fixture("espo")
    s = meta["settings"]
    params = ESPOParams.model_validate({"preset": "official", "group_size": meta["group_size"],
                                        "num_iterations": s["num_iterations"], "mc_num": s["num_mc"], **overrides})
    objective = ESPO(params)
    models = {m: model_from_state(t, f"{m}.") for m in ("current", "old", "ref")}
    P, ids = meta["prompt_length"], t["input_ids"]
    attn = torch.cat([(ids[:, :P] != meta["pad_id"]).long(), torch.ones_like(ids[:, P:])], 1)
    batch = step.rollout_batch(ScoringBatch(ids, attn, torch.ones_like(ids[:, P:], dtype=torch.bool), P,
                                            meta["mask_id"]), params)
    draws = iter(_draws(t["masks"], P))
    with mock.patch.object(ec, "uniform", lambda shape, g, device: next(draws).reshape(shape)):
        passes = step.draw_passes(objective.make_estimator(None, None, None), batch, None, params, ())
    assert all(torch.equal(p.mask[0, :, P:], t["masks"][i][:, P:]) for i, p in enumerate(passes))

    def seq(model):  # the pass-mean sequence ELBO the update takes of the old and reference token scores
        return torch.stack([s.sum(-1) for s in step.token_scores(plain_logits(model), batch, passes)]).mean(0)

    old, ref = seq(models["old"]), seq(models["ref"])
    adv = step.rollout_advantages(t["rewards"], params)
    loss, _ = public_step(objective, batch, passes, adv, models["current"], models["old"], models["ref"])
    grads = {k: p.grad for k, p in models["current"].named_parameters() if k in meta["grad_params"]}
    return t, old, ref, adv, torch.tensor(loss), grads


def _worst(t, old, ref, adv, loss, grads) -> float:
    return max([rel_diff(old, t["expected.old"]), rel_diff(ref, t["expected.ref"]),
                rel_diff(adv, t["expected.advantages"]), rel_diff(loss.reshape(1), t["expected.loss"])]
               + [rel_diff(g, t[f"expected.grad.{n}"]) for n, g in grads.items()])


def test_official_preset_reproduces_the_official_trainer():
    assert _worst(*run_dare()) <= TOL


@pytest.mark.parametrize("change", [
    {"advantage": "drgrpo"},
    {"kl_estimator": "k3"},
    {"prompt_padding": "exclude"},
    {"clip_eps_low": 0.1, "clip_eps_high": 0.1},
])
def test_changing_one_official_setting_breaks_parity(change):
    assert _worst(*run_dare(**change)) > 1e-4, change
