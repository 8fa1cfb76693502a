"""JustGRPO against the official code (LeapLabTHU/JustGRPO@eebe50e, ``grpo.py``).

The fixture (``tests/fixtures/parity/justgrpo/``, built by ``tools/parity/build_justgrpo.py``) holds the
official advantages, loss and gradients of one update (ratio 1, one backward per position). DARE's
autoregressive estimator and JustGRPO loss with ``preset: official`` must give the same advantages and
gradients to 1e-5 (relative; the loss itself is 0 up to rounding, since a group's advantages sum to 0 and
the ratio is 1), and changing one official setting must break the match.
"""

from __future__ import annotations

import pytest
import torch

from dare.diffusion.estimators import AutoregressiveEstimator, ScoringBatch, score_pass
from dare.rl.advantages import group_advantages
from dare.rl.conventions import attend_prompt_padding
from dare.rl.losses import PassLossInput
from dare_grpo.objectives.justgrpo import JustGRPO, JustGRPOParams
from tools.parity.common import model_from_state, read_fixture, rel_diff

TOL = 1e-5


def run_dare(**overrides):
    t, meta = read_fixture("justgrpo")
    params = JustGRPOParams.model_validate({"preset": "official", "group_size": meta["group_size"], **overrides})
    model = model_from_state(t, "current.")
    P, G, n = meta["prompt_length"], meta["group_size"], meta["num_prompts"]
    order = torch.tensor([j * n + p for p in range(n) for j in range(G)])  # official layout -> DARE's groups
    ids = t["input_ids"][order]
    attn = torch.cat([(ids[:, :P] != meta["pad_id"]).long(), torch.ones_like(ids[:, P:])], 1)
    batch = ScoringBatch(ids, attn, torch.ones_like(ids[:, P:], dtype=torch.bool), P, meta["mask_id"])
    if params.prompt_padding == "attend":
        batch = attend_prompt_padding(batch)
    adv = group_advantages(t["rewards"][order], G, params.advantage, params.advantage_std_eps)
    # "sampler" stands for a rollout at DARE's recipe temperature 0.6 (the official rollout and learner use 1.0)
    T = params.likelihood_temperature if params.likelihood_temperature != "sampler" else 0.6
    fn = lambda noisy, clean, a: model(noisy, attention_mask=a).logits  # noqa: E731
    passes = AutoregressiveEstimator(chunk_size=params.chunk_size).draw(batch, None)
    total = 0.0
    for i, pas in enumerate(passes):
        cur = score_pass(fn, batch, pas, T)
        inp = PassLossInput(current=cur, old=cur.token.detach(), ref=None, advantages=adv,
                            response_lengths=batch.response_lengths, pass_index=i, num_passes=len(passes),
                            num_tokens=float(batch.completion_mask.sum()), num_sequences=ids.shape[0],
                            total_response_tokens=float(batch.response_lengths.sum()))
        loss = JustGRPO(params).pass_loss(inp).loss
        loss.backward()
        total += float(loss.detach())
    grads = {k: p.grad for k, p in model.named_parameters() if k in meta["grad_params"]}
    inverse = torch.argsort(order)
    return t, adv[inverse], total, grads


def test_official_preset_reproduces_the_official_code():
    t, adv, loss, grads = run_dare()
    assert rel_diff(adv, t["expected.advantages"]) <= TOL
    assert abs(loss - float(t["expected.loss"])) <= 1e-6
    for n, g in grads.items():
        assert rel_diff(g, t[f"expected.grad.{n}"]) <= TOL, n


@pytest.mark.parametrize("change", [
    {"advantage": "drgrpo"},
    {"advantage_std_eps": 1e-6},
    {"likelihood_temperature": "sampler"},
    {"prompt_padding": "exclude"},
])
def test_changing_one_official_setting_breaks_parity(change):
    t, adv, loss, grads = run_dare(**change)
    worst = max([rel_diff(adv, t["expected.advantages"])] + [rel_diff(g, t[f"expected.grad.{n}"]) for n, g in grads.items()])
    assert worst > 1e-5, change
