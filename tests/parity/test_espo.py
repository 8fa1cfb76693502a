"""ESPO against the official trainer (ML-GSAI/ESPO@b5f2dac, ``espo/espo_trainer.py``).

The fixture (``tests/fixtures/parity/espo/``, built by ``tools/parity/build_espo.py``) holds the masks the
official ``forward_process`` drew (two Monte-Carlo samples), the official old/reference sequence ELBOs, loss and
gradients. DARE's complementary-mask ELBO is fed the same masks; with ``preset: official`` the ELBOs, loss and
gradients must match to 1e-5 (relative), and changing one official setting must break the match.
"""

from __future__ import annotations

from unittest import mock

import pytest
import torch

from dare.diffusion.estimators import ScoringBatch, score_pass
from dare.diffusion.estimators import elbo_complement as ec
from dare.rl.advantages import group_advantages
from dare.rl.conventions import attend_prompt_padding
from dare.rl.losses import SequenceLossInput
from dare_grpo.objectives.espo import ESPO, ESPOParams
from tools.parity.common import model_from_state, read_fixture, rel_diff

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
    models = {m: model_from_state(t, f"{m}.") for m in ("current", "old", "ref")}
    P, ids = meta["prompt_length"], t["input_ids"]
    attn = torch.cat([(ids[:, :P] != meta["pad_id"]).long(), torch.ones_like(ids[:, P:])], 1)
    batch = ScoringBatch(ids, attn, torch.ones_like(ids[:, P:], dtype=torch.bool), P, meta["mask_id"])
    if params.prompt_padding == "attend":
        batch = attend_prompt_padding(batch)
    draws = iter(_draws(t["masks"], P))
    with mock.patch.object(ec, "uniform", lambda shape, g, device: next(draws).reshape(shape)):
        passes = ec.ComplementaryELBOEstimator(mc_num=params.mc_num, reduce_var=params.reduce_var).draw(batch, None)
    assert all(torch.equal(p.mask[0, :, P:], t["masks"][i][:, P:]) for i, p in enumerate(passes))

    def seq(model):
        fn = lambda noisy, clean, a: model(noisy, attention_mask=a).logits  # noqa: E731
        return torch.stack([score_pass(fn, batch, p).sequence for p in passes]).mean(0)

    with torch.no_grad():
        old, ref = seq(models["old"]), seq(models["ref"])
    current = seq(models["current"])
    adv = group_advantages(t["rewards"], meta["group_size"], params.advantage, params.advantage_std_eps)
    loss = ESPO(params).sequence_loss(SequenceLossInput(current=current, old=old, ref=ref, advantages=adv,
                                                        response_lengths=batch.response_lengths)).loss
    loss.backward()
    grads = {k: p.grad for k, p in models["current"].named_parameters() if k in meta["grad_params"]}
    return t, old, ref, adv, loss.detach(), grads


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
