"""CJ-GRPO against the official trainer (yjyddq/EOSER-ASS-RL@5affb4e, ``cj-grpo/cj_grpo_trainer_semiar.py``).

The fixture (``tests/fixtures/parity/cj_grpo/``, built by ``tools/parity/build_cj_grpo.py``) holds a decoding
trajectory (the step that committed each token), the official loss and gradients (current, old and
reference policies). DARE's trajectory replay and CJ-GRPO loss with ``preset: official`` must match to 1e-5
(relative), and changing one official setting must break the match. DARE runs its public RL step
(:mod:`dare.rl.step`, the functions ``GRPOTrainer`` runs).
"""

from __future__ import annotations

import pytest
import torch

from dare.diffusion.estimators import ScoringBatch
from dare.rl import step
from dare_grpo.objectives.cj_grpo import CJGRPO, CJGRPOParams
from tools.parity.common import model_from_state, public_step, read_fixture, rel_diff

TOL = 1e-5


class _Sampler:
    """The recording rollout's sampler: one denoising step per token, no block stride (``steps_per_block`` None)."""

    def steps_per_block(self):
        return None


def run_dare(**overrides):
    t, meta = read_fixture("cj_grpo")
    params = CJGRPOParams.model_validate({"preset": "official", "group_size": meta["group_size"],
                                         "num_iterations": meta["settings"]["num_iterations"], **overrides})
    objective = CJGRPO(params)
    models = {m: model_from_state(t, f"{m}.") for m in ("current", "old", "ref")}
    P, ids = meta["prompt_length"], t["input_ids"]
    attn = torch.cat([(ids[:, :P] != meta["pad_id"]).long(), torch.ones_like(ids[:, P:])], 1)
    sampled = ScoringBatch(ids, attn, torch.ones_like(ids[:, P:], dtype=torch.bool), P, meta["mask_id"],
                           t["unmask_step"])
    batch = step.rollout_batch(sampled, params)
    adv = step.rollout_advantages(t["rewards"], params)
    passes = step.draw_passes(objective.make_estimator(None, None, _Sampler()), batch, None, params, ())
    loss, _ = public_step(objective, batch, passes, adv, models["current"], models["old"], models["ref"])
    grads = {k: p.grad for k, p in models["current"].named_parameters() if k in meta["grad_params"]}
    return t, adv, loss, grads


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
