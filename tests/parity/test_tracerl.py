"""TraceRL against the official trainer (Gen-Verse/dLLM-RL@10b4fd1, ``train/rl_llada.py``).

The fixture (``tests/fixtures/parity/tracerl/``, built by ``tools/parity/build_tracerl.py``) holds a decoding
trajectory with repeated and skipped steps, the advantages, and the official loss (per-row shrinkage,
transition-mean normaliser, k3 KL against the rollout policy summed per transition) and gradients. DARE's
trajectory replay and TraceRL loss with ``preset: official`` must match to 1e-5 (relative), and changing one
official setting must break the match. The advantages are given (the official z-scores are computed by a
separate reward script). DARE runs its public RL step (:mod:`dare.rl.step`, the functions ``GRPOTrainer`` runs:
rollout batch, passes, old scores, update).
"""

from __future__ import annotations

import pytest
import torch

from dare.diffusion.estimators import ScoringBatch
from dare.rl import step
from dare_grpo.objectives.tracerl import TraceRL, TraceRLParams
from tools.parity.common import model_from_state, public_step, read_fixture, rel_diff, trainer_update, update_worst

TOL = 1e-5


def run_dare(**overrides):
    t, meta = read_fixture("tracerl")
    s = meta["settings"]
    params = TraceRLParams.model_validate({"preset": "official", "group_size": 2, "num_iterations": 2,
                                           "shrink": s["shrink"], **overrides})
    objective = TraceRL(params)
    models = {m: model_from_state(t, f"{m}.") for m in ("current", "old")}
    P, ids = meta["prompt_length"], t["input_ids"]
    attn = torch.cat([(ids[:, :P] != meta["pad_id"]).long(), torch.ones_like(ids[:, P:])], 1)
    sampled = ScoringBatch(ids, attn, torch.ones_like(ids[:, P:], dtype=torch.bool), P, meta["mask_id"], t["unmask_step"])
    batch = step.rollout_batch(sampled, params)
    estimator = objective.make_estimator(None, None, _Stride())  # as training builds it (no block stride here)
    passes = step.draw_passes(estimator, batch, None, params, ())
    pairs = sum(float(p.scored.any(dim=-1).sum()) for p in passes)
    # kl_target: reference (the release has none) scores a reference policy: the rollout policy stands in
    loss, _ = public_step(objective, batch, passes, t["advantages"], models["current"], models["old"], models["old"])
    grads = {k: p.grad for k, p in models["current"].named_parameters() if k in meta["grad_params"]}
    return t, pairs, loss, grads


class _Stride:
    """A sampler that declares no block stride (``Sampler.steps_per_block`` None)."""

    def steps_per_block(self):
        return None


def _worst(t, pairs, loss, grads) -> float:
    return max([rel_diff(torch.tensor([loss]), t["expected.loss"])]
               + [rel_diff(g, t[f"expected.grad.{n}"]) for n, g in grads.items()])


def test_official_preset_reproduces_the_official_trainer():
    t, pairs, loss, grads = run_dare()
    assert pairs == float(t["expected.num_rows"])  # as many (completion, transition) pairs as official rows
    assert _worst(t, pairs, loss, grads) <= TOL


@pytest.mark.parametrize("change", [
    {"transition_grouping": "global"},
    {"normaliser": "completions"},
    {"kl_target": "reference"},
    {"beta": 0.0},
    {"clip_eps_low": 0.1, "clip_eps_high": 0.1},
    {"prompt_padding": "exclude"},
])
def test_changing_one_official_setting_breaks_parity(change):
    assert _worst(*run_dare(**change)) > 1e-4, change


def trainer_step(tmp_path, optimizer=None, **overrides):
    """One real ``GRPOTrainer`` optimizer step from the fixture's trajectory (``tools.parity.common.trainer_update``,
    the fixture's advantages in place of the group advantages): ``(fixture, loss, clipped gradients, weights)``."""
    from dare.components import SpecialTokens
    from dare_llada.family import LLaDAFamily

    t, meta = read_fixture("tracerl")
    params = TraceRLParams.model_validate({"preset": "official", "group_size": 2, "num_iterations": 2,
                                           "shrink": meta["settings"]["shrink"], **overrides})
    objective = TraceRL(params)
    models = {m: model_from_state(t, f"{m}.") for m in ("current", "old")}
    P, ids = meta["prompt_length"], t["input_ids"]
    attn = torch.cat([(ids[:, :P] != meta["pad_id"]).long(), torch.ones_like(ids[:, P:])], 1)
    sampled = ScoringBatch(ids, attn, torch.ones_like(ids[:, P:], dtype=torch.bool), P, meta["mask_id"], t["unmask_step"])
    tokens = SpecialTokens(mask_id=meta["mask_id"], eos_id=meta["eos_id"], pad_id=meta["pad_id"])
    out = trainer_update(objective, objective.make_estimator(None, None, _Stride()), LLaDAFamily(), tokens, models,
                         sampled, torch.zeros(ids.shape[0]), {**meta["optimizer"], **(optimizer or {})}, tmp_path,
                         advantages=t["advantages"])
    return t, *out


def test_one_grpo_trainer_step_reproduces_the_official_update(tmp_path):
    t, loss, clipped, updated = trainer_step(tmp_path)
    assert set(clipped) == {k[len("current."):] for k in t if k.startswith("current.")}  # every parameter stepped
    assert update_worst(t, loss, clipped, updated) <= TOL


@pytest.mark.parametrize("change", [
    {"optimizer": {"learning_rate": 3e-6}},
    {"optimizer": {"weight_decay": 0.1}},
    {"optimizer": {"max_grad_norm": 0.2}},
    {"normaliser": "completions"},
    {"kl_target": "reference"},
])
def test_changing_one_official_setting_breaks_the_update(tmp_path, change):
    change = dict(change)
    assert update_worst(*trainer_step(tmp_path, change.pop("optimizer", None), **change)) > 1e-3, change
