"""CJ-GRPO against the official trainer (yjyddq/EOSER-ASS-RL@5affb4e, ``cj-grpo/cj_grpo_trainer_semiar.py``).

The fixture (``tests/fixtures/parity/cj_grpo/``, built by ``tools/parity/build_cj_grpo.py``) holds a decoding
trajectory (the step that committed each token), the official loss and gradients (current, old and
reference policies). DARE's trajectory replay and CJ-GRPO loss with ``preset: official`` must match to 1e-5
(relative), and changing one official setting must break the match.
"""

from __future__ import annotations

import pytest
import torch

from dare.diffusion.estimators import ScoringBatch, TrajectoryEstimator, score_pass
from dare.rl.advantages import group_advantages
from dare.rl.conventions import attend_prompt_padding
from dare.rl.losses import PassLossInput
from dare_grpo.objectives.cj_grpo import CJGRPO, CJGRPOParams
from tools.parity.common import model_from_state, read_fixture, rel_diff

TOL = 1e-5


def run_dare(**overrides):
    t, meta = read_fixture("cj_grpo")
    params = CJGRPOParams.model_validate({"preset": "official", "group_size": meta["group_size"],
                                         "num_iterations": meta["settings"]["num_iterations"], **overrides})
    models = {m: model_from_state(t, f"{m}.") for m in ("current", "old", "ref")}
    P, ids = meta["prompt_length"], t["input_ids"]
    attn = torch.cat([(ids[:, :P] != meta["pad_id"]).long(), torch.ones_like(ids[:, P:])], 1)
    batch = ScoringBatch(ids, attn, torch.ones_like(ids[:, P:], dtype=torch.bool), P, meta["mask_id"], t["unmask_step"])
    if params.prompt_padding == "attend":
        batch = attend_prompt_padding(batch)
    adv = group_advantages(t["rewards"], meta["group_size"], params.advantage, params.advantage_std_eps)
    passes = TrajectoryEstimator(shrink=1).draw(batch, None)

    def fn(model):
        return lambda noisy, clean, a: model(noisy, attention_mask=a).logits

    objective, total = CJGRPO(params), 0.0
    for i, pas in enumerate(passes):
        with torch.no_grad():
            old = score_pass(fn(models["old"]), batch, pas).token
            ref = score_pass(fn(models["ref"]), batch, pas).token
        cur = score_pass(fn(models["current"]), batch, pas)
        inp = PassLossInput(current=cur, old=old, ref=ref, advantages=adv, response_lengths=batch.response_lengths,
                            pass_index=i, num_passes=len(passes), num_tokens=float(pas.scored.sum()),
                            num_sequences=ids.shape[0], total_response_tokens=float(batch.response_lengths.sum()))
        loss = objective.pass_loss(inp).loss
        loss.backward()
        total += float(loss.detach())
    grads = {k: p.grad for k, p in models["current"].named_parameters() if k in meta["grad_params"]}
    return t, adv, total, grads


def _worst(t, adv, loss, grads) -> float:
    return max([rel_diff(adv, t["expected.advantages"]), rel_diff(torch.tensor([loss]), t["expected.loss"])]
               + [rel_diff(g, t[f"expected.grad.{n}"]) for n, g in grads.items()])


def test_official_preset_reproduces_the_official_trainer():
    assert _worst(*run_dare()) <= TOL


@pytest.mark.parametrize("change", [
    {"advantage": "grpo"},
    {"clip_eps_low": 0.2, "clip_eps_high": 0.2},
    {"beta": 0.0},
    {"prompt_padding": "exclude"},
])
def test_changing_one_official_setting_breaks_parity(change):
    assert _worst(*run_dare(**change)) > 1e-3, change
