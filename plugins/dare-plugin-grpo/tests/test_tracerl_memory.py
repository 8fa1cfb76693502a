"""TraceRL's update under an activation budget: chunk sizes from the budget, and the same loss and gradients as the
update of every row at once."""

import pytest
import torch

from dare.diffusion.estimators import ScoringBatch
from dare.rl import step
from dare.rl.rollout import Rollout
from dare.testing import tiny_model
from dare_grpo.objectives.tracerl import TraceRL, TraceRLParams


class _NoStride:
    """A sampler that declares no block stride (``Sampler.steps_per_block`` None)."""

    def steps_per_block(self):
        return None


def _settings(row_bytes=None, budget=None, **params):
    return step.StepSettings(TraceRL(params), row_bytes=row_bytes, activation_budget=budget)


def _batch(rows: int, prompt: int, gen: int) -> ScoringBatch:
    ids = torch.zeros(rows, prompt + gen, dtype=torch.long)
    return ScoringBatch(ids, torch.ones_like(ids), torch.ones(rows, gen, dtype=torch.bool), prompt, 0)


def test_rows_per_chunk_follow_the_budget():
    batch = _batch(rows=10, prompt=4, gen=6)  # S = 10 tokens
    per_token = lambda s: 100.0 * s  # noqa: E731  1,000 bytes a row here
    assert _settings(per_token, 3_500.0).micro_batch_size(batch) == 3  # floor(3500 / 1000)
    assert _settings(per_token, 999.0).micro_batch_size(batch) == 1  # at least one row
    assert _settings(per_token, 1e9).micro_batch_size(batch) == 10  # never more than the batch
    assert _settings(per_token, 3_500.0, micro_batch_size=4).micro_batch_size(batch) == 4  # explicit wins
    assert _settings().micro_batch_size(batch) is None  # no bound: every row


def test_default_budget_is_auto_for_tracerl_only_and_validated():
    from dare_grpo.objectives import D1

    assert TraceRLParams().activation_budget_mib == "auto"
    assert D1().params.activation_budget_mib is None
    assert TraceRLParams(activation_budget_mib=512).activation_budget_mib == 512.0
    for bad in (0, -3):
        with pytest.raises(ValueError, match="activation_budget_mib must be a positive number of MiB"):
            TraceRLParams(activation_budget_mib=bad)


def test_row_activation_bytes_and_training_state_by_hand(tmp_path):
    lm = tiny_model("llada", tmp_path, seed=0)
    cfg = lm.model.config
    h, L, i, V = cfg.d_model, cfg.n_layers, cfg.mlp_hidden_size, cfg.vocab_size
    assert (h, L, i) == (64, 2, 128)
    fn = step.row_activation_bytes(lm.model, lm.family)
    # fp32: L * S * (10 h + 4 i) * 4 in the layers + S * V * (4 + 4) for the logits and their log-softmax
    assert fn(30) == L * 30 * (10 * 64 + 4 * 128) * 4 + 30 * V * 8
    bf16 = step.row_activation_bytes(lm.model, lm.family, bf16=True)
    assert bf16(30) == L * 30 * (10 * 64 + 4 * 128) * 2 + 30 * V * 6
    params = sum(p.numel() for p in lm.model.parameters())
    assert step.training_state_bytes(lm.model) == params * 4 * 4  # weights, gradients, two AdamW moments
    half = lm.model.to(torch.bfloat16)
    assert step.training_state_bytes(half) == params * 2 * 4  # bf16 weights trained as they are
    assert step.training_state_bytes(half, fp32_master=True) == params * 4 * 4  # float32 master weights


def _tracerl_update(model, batch, passes, advantages, settings):
    model.zero_grad(set_to_none=True)
    rows_seen = []

    def fn(noisy, clean, attn):
        rows_seen.append(noisy.shape[0])
        return model(noisy, attention_mask=attn).logits

    rollout = Rollout(batch, [], torch.zeros(batch.num_rows), {}, advantages, passes=[passes])
    loss, metrics = step.update(settings, fn, rollout, 0)
    grads = {k: p.grad.clone() for k, p in model.named_parameters()}
    return loss, metrics, grads, rows_seen


def test_bounded_update_equals_the_update_of_every_row(tmp_path):
    lm = tiny_model("llada", tmp_path, seed=0)
    model = lm.model.train()
    g = torch.Generator().manual_seed(0)
    N, P, G = 6, 5, 8
    ids = torch.randint(3, 200, (N, P + G), generator=g)
    attn = torch.ones_like(ids)
    attn[0, :2] = 0  # left padding
    # every row commits its completion over 4 denoising steps, in its own order
    unmask = torch.stack([torch.randperm(G, generator=g) % 4 for _ in range(N)])
    batch = ScoringBatch(ids, attn, torch.ones(N, G, dtype=torch.bool), P, lm.tokens.mask_id, unmask)
    params = {"group_size": 2, "shrink": 2}
    objective = TraceRL(params)
    passes = step.draw_passes(objective.make_estimator(None, None, _NoStride()), batch, None, objective.params, ())
    advantages = torch.tensor([1.0, -1.0, 0.5, -0.5, 2.0, -2.0])

    full = _tracerl_update(model, batch, passes, advantages, _settings(**params))
    per_row = step.row_activation_bytes(model, lm.family)(P + G)
    bounded = _tracerl_update(model, batch, passes, advantages, _settings(
        step.row_activation_bytes(model, lm.family), 2.5 * per_row, **params))
    assert len(passes) == 2 and full[3] == [N, N]  # two transitions, every row at once
    assert bounded[3] == [2, 2, 2, 2, 2, 2]  # two rows per forward/backward: floor(2.5)
    assert bounded[0] == pytest.approx(full[0], rel=1e-6, abs=1e-7)
    assert bounded[1]["clip_fraction"] == pytest.approx(full[1]["clip_fraction"], abs=1e-7)
    for name, grad in full[2].items():
        torch.testing.assert_close(bounded[2][name], grad, rtol=1e-5, atol=1e-7)
    assert any(float(g.abs().max()) > 0 for g in full[2].values())  # the gradients compared are not all zero
