"""TraceRL against the official trainer (Gen-Verse/dLLM-RL@10b4fd1, ``train/rl_llada.py``).

The fixture (``tests/fixtures/parity/tracerl/``, built by ``tools/parity/build_tracerl.py``) holds a decoding
trajectory with repeated and skipped steps, the advantages, and the official loss (per-row shrinkage,
transition-mean normaliser, k3 KL against the rollout policy summed per transition) and gradients. DARE's
trajectory replay and TraceRL loss with ``preset: official`` must match to 1e-5 (relative), and changing one
official setting must break the match. The advantages are given (the official z-scores are computed by a
separate reward script).
"""

from __future__ import annotations

import pytest
import torch

from dare.diffusion.estimators import ScoringBatch, TrajectoryEstimator, score_pass
from dare.rl.conventions import attend_prompt_padding
from dare.rl.losses import PassLossInput
from dare_grpo.objectives.tracerl import TraceRL, TraceRLParams
from tools.parity.common import model_from_state, read_fixture, rel_diff

TOL = 1e-5


def run_dare(**overrides):
    t, meta = read_fixture("tracerl")
    s = meta["settings"]
    params = TraceRLParams.model_validate({"preset": "official", "group_size": 2, "num_iterations": 2,
                                           "shrink": s["shrink"], **overrides})
    models = {m: model_from_state(t, f"{m}.") for m in ("current", "old")}
    P, ids = meta["prompt_length"], t["input_ids"]
    attn = torch.cat([(ids[:, :P] != meta["pad_id"]).long(), torch.ones_like(ids[:, P:])], 1)
    batch = ScoringBatch(ids, attn, torch.ones_like(ids[:, P:], dtype=torch.bool), P, meta["mask_id"], t["unmask_step"])
    if params.prompt_padding == "attend":
        batch = attend_prompt_padding(batch)
    passes = TrajectoryEstimator(shrink=params.shrink, per_row=params.transition_grouping == "per_row").draw(batch, None)
    pairs = sum(float(p.scored.any(dim=-1).sum()) for p in passes)

    def fn(model):
        return lambda noisy, clean, a: model(noisy, attention_mask=a).logits

    objective, total = TraceRL(params), 0.0
    for i, pas in enumerate(passes):
        with torch.no_grad():
            old = score_pass(fn(models["old"]), batch, pas).token
        cur = score_pass(fn(models["current"]), batch, pas)
        inp = PassLossInput(current=cur, old=old, ref=None, advantages=t["advantages"],
                            response_lengths=batch.response_lengths, pass_index=i, num_passes=len(passes),
                            num_tokens=float(pas.scored.sum()), num_sequences=ids.shape[0],
                            total_response_tokens=float(batch.response_lengths.sum()), num_row_passes=pairs)
        loss = objective.pass_loss(inp).loss
        loss.backward()
        total += float(loss.detach())
    grads = {k: p.grad for k, p in models["current"].named_parameters() if k in meta["grad_params"]}
    return t, pairs, total, grads


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
