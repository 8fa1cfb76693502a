"""DiPO against the official code (OpenMOSS/DiRL@ec4bfb3, ``models/sdar/modeling_sdar.py``, ``train/rollout_dapo_server.py``).

The fixture (``tests/fixtures/parity/dipo/``, built by ``tools/parity/build_dipo.py``) holds the official advantages
(group z-scores, population std, no epsilon), the loss of one update (the release's inline RL loss run once per
block-round training row, summed and divided by the ``N R`` rows) and its gradient with respect to the token
log-probabilities. DARE's DiPO loss with ``preset: official`` must give the same values (relative 1e-5), and
changing any one official setting the loss reads must break the match.
"""

from __future__ import annotations

import types

import pytest
import torch

from dare.diffusion.estimators import PassScore
from dare.rl.advantages import group_advantages
from dare.rl.losses import PassLossInput
from dare_grpo.objectives.dipo import DiPO, DiPOParams
from tools.parity.common import read_fixture, rel_diff

TOL = 1e-5


def run_dare(**overrides):
    t, meta = read_fixture("dipo")
    params = DiPOParams.model_validate({"preset": "official", "group_size": meta["group_size"], **overrides},
                                       context={"family": "sdar"})
    N, R = meta["num_completions"], meta["rounds"]
    adv = group_advantages(t["rewards"], meta["group_size"], params.advantage, params.advantage_std_eps,
                           params.advantage_std == "sample")
    obj = DiPO(params)
    obj.make_estimator(types.SimpleNamespace(block_size=lambda cfg: R), {}, None)
    logp = t["logp"].clone().requires_grad_(True)
    mask = t["mask"].bool()
    total = torch.zeros(())
    for r in range(R):
        scored = mask[:, r]
        cur = PassScore(token=torch.where(scored, logp[:, r], torch.zeros_like(logp[:, r])), scored=scored)
        inp = PassLossInput(current=cur, old=t["old"][:, r] * scored, ref=t["ref"][:, r] * scored, advantages=adv,
                            response_lengths=mask.any(1).sum(-1), pass_index=r, num_passes=R,
                            num_tokens=float(scored.sum()), num_sequences=N,
                            total_response_tokens=float(mask.sum()))
        total = total + obj.pass_loss(inp).loss
    total.backward()
    return t, adv, total.detach(), logp.grad


def test_official_preset_reproduces_the_official_code():
    t, adv, loss, grad = run_dare()
    assert rel_diff(adv, t["expected.advantages"]) <= TOL
    assert rel_diff(loss, t["expected.loss"]) <= TOL
    assert rel_diff(grad, t["expected.grad"]) <= TOL


def test_the_official_settings_are_the_releases():
    p = DiPOParams.model_validate({"preset": "official"}, context={"family": "sdar"})
    assert (p.group_size, p.clip_eps_low, p.clip_eps_high, p.beta, p.kl_estimator) == (8, 0.2, 0.28, 0.1, "k3")
    assert (p.dual_clip_c, p.log_ratio_clamp, p.advantage_std, p.advantage_std_eps) == (None, 10.0, "population", 0.0)


@pytest.mark.parametrize("override", [
    {"clip_eps_high": 0.2}, {"clip_eps_low": 0.1}, {"beta": 0.0}, {"kl_estimator": "k1"}, {"dual_clip_c": 3.0},
    {"log_ratio_clamp": None}, {"advantage_std": "sample"}, {"advantage_std_eps": 1e-2},
])
def test_changing_one_official_setting_breaks_the_match(override):
    t, adv, loss, grad = run_dare(**override)
    diffs = [rel_diff(adv, t["expected.advantages"]), rel_diff(loss, t["expected.loss"]), rel_diff(grad, t["expected.grad"])]
    # element-wise on the tokens with a gradient: the log-ratio clamp changes only the clamped token's tiny gradient
    want = t["expected.grad"]
    some = want.abs() > 1e-9
    diffs.append(float(((grad - want).abs()[some] / want.abs()[some]).max()))
    assert max(diffs) > TOL
