"""MDPO's step loss against the official trainer (autonomousvision/mdpo@e6ae439, ``src/open_r1/mdpo/mdpo_trainer.py``).

The fixture (``tests/fixtures/parity/mdpo/``, built by ``tools/parity/build_mdpo.py``) holds step rows (states,
one-shot predictions, confidences, step advantages) and the official loss (learner at the rollout temperature
0.1, ``lambda = G / #masked``, k2 KL) and gradients. DARE's :meth:`MDPO.step_loss` on the same rows with
``preset: official`` must match to 1e-5 (relative), and changing one official setting must break the match.
The recording rollout and the step advantages are not compared.
"""

from __future__ import annotations

import pytest
import torch

from dare_grpo.objectives.mdpo import MDPO, MDPOParams, StepLossInput
from tools.parity.common import model_from_state, read_fixture, rel_diff

TOL = 1e-5
ROLLOUT_TEMPERATURE = 0.1  # the recipe's sampler temperature, what likelihood_temperature: sampler resolves to


def run_dare(**overrides):
    t, meta = read_fixture("mdpo")
    params = MDPOParams.model_validate({"preset": "official", **overrides})
    T = ROLLOUT_TEMPERATURE if params.likelihood_temperature == "sampler" else float(params.likelihood_temperature)
    models = {m: model_from_state(t, f"{m}.") for m in ("current", "ref")}
    prompts, states, preds = t["prompt_ids"], t["states"], t["predictions"]
    P, G = prompts.shape[1], states.shape[1]
    ids = torch.cat([prompts, states], 1)
    attn = torch.cat([(prompts != meta["pad_id"]).long(), torch.ones_like(states)], 1)
    if params.prompt_padding == "attend":
        attn = torch.ones_like(attn)
    mask = states == meta["mask_id"]

    def logp(model):
        logits = model(ids, attention_mask=attn).logits[:, P:] / T
        return torch.log_softmax(logits, -1).gather(-1, preds[..., None]).squeeze(-1) * mask

    with torch.no_grad():
        ref = logp(models["ref"])
    cur = logp(models["current"])
    inp = StepLossInput(current=cur, old=cur.detach(), ref=ref, mask=mask, confidence=t["confidence"],
                        advantages=t["advantages"], completion_length=G, num_tokens=float(mask.sum()))
    loss = MDPO(params).step_loss(inp).loss
    loss.backward()
    grads = {k: p.grad for k, p in models["current"].named_parameters() if k in meta["grad_params"]}
    return t, loss.detach(), grads


def _worst(t, loss, grads) -> float:
    return max([rel_diff(loss.reshape(1), t["expected.loss"])]
               + [rel_diff(g, t[f"expected.grad.{n}"]) for n, g in grads.items()])


def test_official_preset_reproduces_the_official_trainer():
    # the fixture's KL coefficient is the paper's 0.02 (the recipe trains without KL), so the KL term is compared too
    assert _worst(*run_dare(beta=0.02)) <= TOL


@pytest.mark.parametrize("change", [
    {"likelihood_temperature": 1.0},
    {"kl_estimator": "k3"},
    {"beta": 0.0},
    {"prompt_padding": "attend"},
])
def test_changing_one_official_setting_breaks_parity(change):
    assert _worst(*run_dare(**{"beta": 0.02, **change})) > 1e-4, change
