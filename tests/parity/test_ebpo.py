"""EBPO against the seed paper's release (yjyddq/DARE@83ae8a3, ``verl/workers/actor/ebpo_actor_mixin.py`` with the
SDAR actor ``sdar_dp_actor_ebpo.py``, ``_forward_process_ebpo``, ``compute_ebpo_composite_elbo`` and
``compute_policy_loss_ebpo`` of ``verl/trainer/ppo/dllm_core_algos.py``).

The fixture (``tests/fixtures/parity/ebpo/``, built by ``tools/parity/build_ebpo.py``) holds the official
all-block corruptions (global block origin, stratified noise levels from one offset per sequence), the rollout
policy's token ELBOs and composites, the current composites, the loss and the gradients of the release's
scalar-proxy replay. The block-diffusion model call is replaced on both sides by the same forward
(:func:`tools.parity.build_bgpo.compact_forward` on left-aligned rows), so the comparison covers the
corruption, the composite ELBO, the log-domain clip, the advantages and the gradients, not SDAR's block
attention. DARE's blockwise estimator is fed the official draws (the offset, the masked positions of each
cell) and DARE's side is the public RL step (:mod:`dare.rl.step`, the functions ``GRPOTrainer`` runs: rollout
batch, passes, advantages, old scores and the scalar-proxy replay ``update_pass_mean``); with ``preset: official``
its composites, loss and gradients must match to 1e-5 (relative), and changing any one official setting must break
the match.
"""

from __future__ import annotations

import types
from unittest import mock

import pytest
import torch

from dare.diffusion.estimators import ScoringBatch
from dare.diffusion.estimators import blockwise as bw
from dare.rl import step
from dare_grpo.objectives.ebpo import EBPO, EBPOParams
from tools.parity.build_bgpo import compact_forward
from tools.parity.common import model_from_state, public_step, read_fixture, rel_diff

TOL = 1e-5


def _left_aligned(model):
    """DARE's logits function over the harness forward: each row's attended tokens moved to the left (as block
    families do before their block-diffusion forward), scored, and put back at their padded positions."""

    def fn(noisy, clean, attn):
        N, S = noisy.shape
        valid = torch.ones_like(noisy, dtype=torch.bool) if attn is None else attn.bool()
        compact = torch.zeros_like(noisy)
        compact_valid = torch.zeros_like(valid)
        for b in range(N):
            n = int(valid[b].sum())
            compact[b, :n], compact_valid[b, :n] = noisy[b, valid[b]], True
        logits = compact_forward(model, compact, compact_valid)
        out = torch.zeros(N, S, logits.shape[-1], dtype=logits.dtype)
        for b in range(N):
            out[b, valid[b]] = logits[b, : int(valid[b].sum())]
        return out

    return fn


def _official_draws(t, meta, batch: ScoringBatch, block_length: int, mc_num: int) -> list[torch.Tensor]:
    """What :func:`blockwise_passes` draws (per row: the offset, then each cell's position keys) for the official
    corruptions: the recorded offset and keys low at the positions the official cell masked."""
    P = meta["prompt_length"]
    blocks = bw.response_blocks(batch, block_length)
    masked = t["mask_indices"][:, :, P:]                             # [N, M, G]
    draws = []
    for n in range(batch.num_rows):
        ids = torch.unique(blocks[n][blocks[n] >= 0]).tolist()
        draws.append(t["offsets"][n].reshape(()))
        for c in range(mc_num * len(ids)):
            r, b = divmod(c, len(ids))
            where = torch.nonzero(blocks[n] == ids[b]).flatten()
            hit = masked[n, r, where]
            draws.append(torch.where(hit, 0.1, 0.9) + 0.001 * torch.arange(where.numel()))
    return draws


def run_dare(**overrides):
    """DARE's EBPO on the fixture with ``preset: official`` (+ ``overrides``), run by the public RL step
    (:mod:`dare.rl.step`: rollout batch, passes, advantages, old scores and :func:`dare.rl.step.update_pass_mean`,
    the scalar-proxy replay of the sequence-level loss): passes, composites, loss, grads."""
    t, meta = read_fixture("ebpo")
    s = meta["settings"]
    params = EBPOParams.model_validate({"preset": "official", "group_size": meta["group_size"],
                                        "mc_num": s["mc_num"], "block_length": s["block_length"], **overrides})
    objective = EBPO(params)
    models = {m: model_from_state(t, f"{m}.") for m in ("current", "old")}
    P, ids, attn = meta["prompt_length"], t["input_ids"], t["attention_mask"]
    sampled = ScoringBatch(ids, attn, attn[:, P:].bool(), P, meta["mask_id"])
    settings = step.StepSettings(objective, temperature=1.0, stop_ids=(meta["eos_id"],))
    batch = step.rollout_batch(sampled, params)
    draws = iter(_official_draws(t, meta, batch, params.block_length, params.mc_num))
    with mock.patch.object(bw, "uniform", lambda shape, g, device: next(draws).reshape(shape)):
        # the fixture's family as EBPO.make_estimator reads it: block attention (SDAR), its training block size
        family = types.SimpleNamespace(attention="block", block_size=lambda config: s["block_length"])
        estimator = objective.make_estimator(family, None, None)
        passes = step.draw_passes(estimator, batch, None, params, settings.stop_ids)

    def composite(model):
        return torch.stack([x.sequence for x in step.score_passes(_left_aligned(model), batch, passes)]).mean(0)

    old, current = composite(models["old"]), composite(models["current"])
    adv = step.rollout_advantages(t["rewards"], params)
    assert objective.score_reduction == "pass_mean"  # the release's scalar-proxy replay
    loss, _ = public_step(objective, batch, passes, adv, models["current"], models["old"], logits=_left_aligned)
    grads = {n: p.grad for n, p in models["current"].named_parameters() if n in meta["grad_params"]}
    return t, meta, passes, old, current, adv, torch.tensor(loss), grads


def _worst(t, meta, passes, old, current, adv, loss, grads) -> float:
    return max([rel_diff(old, t["expected.old"]), rel_diff(current, t["expected.current"]),
                rel_diff(adv, t["expected.advantages"]), rel_diff(loss.reshape(1), t["expected.loss"])]
               + [rel_diff(g, t[f"expected.grad.{n}"]) for n, g in grads.items()])


def test_official_preset_reproduces_the_official_trainer():
    t, meta, passes, old, current, adv, loss, grads = run_dare()
    P = meta["prompt_length"]
    for r, pas in enumerate(passes):  # the same corruptions, weighted by the official 1 / p_mask
        assert torch.equal(pas.mask[0], t["mask_indices"][:, r]), r
        want = torch.where(t["mask_indices"][:, r, P:], 1 / t["p_mask"][:, r, P:].clamp(min=1e-9), 0.0)
        assert torch.allclose(pas.weight[0], want), r
    assert rel_diff(old, t["expected.old"]) <= TOL
    assert rel_diff(current, t["expected.current"]) <= TOL
    assert rel_diff(adv, t["expected.advantages"]) <= TOL
    assert rel_diff(loss.reshape(1), t["expected.loss"]) <= TOL
    for n, g in grads.items():
        assert rel_diff(g, t[f"expected.grad.{n}"]) <= TOL, n


@pytest.mark.parametrize("change", [
    {"advantage": "drgrpo"},
    {"clip_eps_low": 0.5, "clip_eps_high": 0.5},
    {"advantage": "rloo"},
])
def test_changing_one_official_setting_breaks_parity(change):
    assert _worst(*run_dare(**change)) > 1e-3, change
