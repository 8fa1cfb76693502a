"""dare.rl: advantages, clipped surrogate, KL estimators, aggregation, entropy (values by hand)."""

import math

import pytest
import torch

from dare.rl import aggregate, clipped_policy_loss, group_advantages, kl_estimate, ratio_from_log, token_entropy
from dare.rl.advantages import grpo_advantages, zero_std_groups


# ----------------------------------------------------------------------------- advantages
def test_grpo_advantage_by_hand():
    r = torch.tensor([1.0, 0.0, 0.0, 1.0, 0.5, 0.5, 0.5, 0.5])
    a = group_advantages(r, 4, "grpo")
    std = math.sqrt((4 * 0.25) / 3)  # unbiased std of [1, 0, 0, 1]
    want = 0.5 / (std + 1e-6)
    assert torch.allclose(a[:4], torch.tensor([want, -want, -want, want]), atol=1e-6)
    assert torch.equal(a[4:], torch.zeros(4))  # zero-variance group


def test_drgrpo_and_rloo_by_hand():
    r = torch.tensor([1.0, 0.0, 0.0, 0.5])
    assert torch.allclose(group_advantages(r, 4, "drgrpo"), torch.tensor([0.625, -0.375, -0.375, 0.125]))
    # RLOO: r_i - mean of the other three
    want = torch.tensor([1 - 0.5 / 3, 0 - 1.5 / 3, 0 - 1.5 / 3, 0.5 - 1 / 3])
    assert torch.allclose(group_advantages(r, 4, "rloo"), want, atol=1e-6)


def test_advantage_edge_cases():
    assert torch.equal(group_advantages(torch.tensor([0.3, 0.7]), 1, "grpo"), torch.tensor([0.3, 0.7]))
    with pytest.raises(ValueError, match="groups of 3"):
        group_advantages(torch.zeros(4), 3)
    with pytest.raises(ValueError, match="RLOO needs group_size >= 2"):
        group_advantages(torch.zeros(4), 1, "rloo")
    with pytest.raises(ValueError, match="unknown advantage"):
        group_advantages(torch.zeros(4), 2, "ppo")


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("kind", ["grpo", "drgrpo", "rloo"])
@pytest.mark.parametrize("value", [2 / 3, 0.1, 1 / 3, 0.7, 0.3, 1.1, 1e-7, 123.456])
def test_equal_reward_groups_get_exactly_zero_advantage(value, kind, dtype):
    """mean(8 x 2/3) != 2/3 in floating point; dividing that residue by a ~1e-17 std would give every
    completion 0.0560. A group of equal rewards must contribute exactly 0."""
    r = torch.tensor([value] * 8 + [1.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 0.0], dtype=dtype)
    a = group_advantages(r, 8, kind)
    assert a.dtype == torch.float32
    assert torch.equal(a[:8], torch.zeros(8))
    # the other group keeps its value: mean 0.25, unbiased std sqrt(sum (g - 0.25)^2 / 7)
    g = torch.tensor([1.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 0.0], dtype=torch.float64)
    centred = g - 0.25
    want = {"grpo": centred / (math.sqrt(float(((g - 0.25) ** 2).sum()) / 7) + 1e-6), "drgrpo": centred,
            "rloo": 8 / 7 * centred}[kind]
    assert torch.allclose(a[8:], want.float(), atol=1e-6)
    assert zero_std_groups(r, 8).tolist() == [True, False]


def test_the_reported_grpo_case():
    assert torch.equal(grpo_advantages(torch.tensor([2 / 3] * 8, dtype=torch.float64), 8), torch.zeros(8))


def test_zero_std_groups_is_what_frac_zero_std_groups_counts():
    r = torch.tensor([0.1, 0.1, 0.1, 0.1, 0.1, 0.2, 0.0, 0.0, 1 / 3, 1 / 3])
    assert zero_std_groups(r, 2).tolist() == [True, True, False, True, True]
    assert zero_std_groups(r, 2).float().mean().item() == pytest.approx(0.8)
    with pytest.raises(ValueError, match="groups of 3"):
        zero_std_groups(r, 3)


# ----------------------------------------------------------------------------- clipped surrogate
def test_clipped_loss_branches_by_hand():
    ratio = torch.tensor([1.5, 0.5, 0.5, 1.5, 5.0, 1.1], requires_grad=True)
    adv = torch.tensor([1.0, 1.0, -1.0, -1.0, -1.0, 2.0])
    out = clipped_policy_loss(ratio, adv, 0.2, 0.2, 3.0)
    # A>0 clipped at 1.2; A>0 unclipped; A<0 clipped at 0.8; A<0 unclipped; A<0 dual-clipped at 3; A>0 inside
    assert torch.allclose(out.loss, torch.tensor([-1.2, -0.5, 0.8, 1.5, 3.0, -2.2]))
    out.loss.sum().backward()
    assert torch.allclose(ratio.grad, torch.tensor([0.0, -1.0, 0.0, 1.0, 0.0, -2.0]))
    assert out.clipped_high.tolist() == [True, False, False, False, False, False]
    assert out.clipped_low.tolist() == [False, False, True, False, False, False]
    assert out.dual_clipped.tolist() == [False, False, False, False, True, False]


def test_clipped_loss_without_dual_clip_and_asymmetric_eps():
    out = clipped_policy_loss(torch.tensor([5.0, 1.25, 0.75]), torch.tensor([-1.0, 1.0, -1.0]), 0.2, 0.28, None)
    assert torch.allclose(out.loss, torch.tensor([5.0, -1.25, 0.8]))


def test_clipped_loss_is_finite_for_huge_log_ratio():
    log_ratio = torch.tensor([1e4, 1e4, -1e4], requires_grad=True)
    out = clipped_policy_loss(ratio_from_log(log_ratio), torch.tensor([0.0, -1.0, 1.0]), 0.2, 0.2, 3.0)
    out.loss.sum().backward()
    assert torch.isfinite(out.loss).all() and torch.isfinite(log_ratio.grad).all()


def test_clip_parameter_errors():
    with pytest.raises(ValueError, match="clip_eps_low"):
        clipped_policy_loss(torch.ones(1), torch.ones(1), 1.0, 0.2)
    with pytest.raises(ValueError, match="dual_clip_c"):
        clipped_policy_loss(torch.ones(1), torch.ones(1), 0.2, 0.2, 1.0)


# ----------------------------------------------------------------------------- KL
def test_kl_estimators_by_hand():
    logp, ref = torch.tensor([-1.0, -2.0]), torch.tensor([-1.5, -1.0])
    d = torch.tensor([0.5, -1.0])
    assert torch.allclose(kl_estimate(logp, ref, "k1"), d)
    assert torch.allclose(kl_estimate(logp, ref, "k2"), 0.5 * d**2)
    assert torch.allclose(kl_estimate(logp, ref, "k3"), torch.exp(-d) + d - 1)
    assert torch.equal(kl_estimate(ref, ref, "k3"), torch.zeros(2))


def test_kl_never_nan():
    # DARE's advantage-dependent log(1 + d) would be NaN at d <= -1; ours stays finite with finite grads
    logp = torch.tensor([-1e4, 50.0, -3.0], requires_grad=True)
    ref = torch.zeros(3)
    for est in ("k1", "k2", "k3"):
        kl = kl_estimate(logp, ref, est)
        (g,) = torch.autograd.grad(kl.sum(), logp)
        assert torch.isfinite(kl).all() and torch.isfinite(g).all(), est
    with pytest.raises(ValueError, match="unknown KL"):
        kl_estimate(ref, ref, "k4")


# ----------------------------------------------------------------------------- aggregation
def test_token_and_sequence_mean_by_hand():
    values = torch.tensor([[1.0, 2.0, 3.0], [4.0, 0.0, 0.0]])
    w = torch.tensor([[1.0, 1.0, 1.0], [1.0, 0.0, 0.0]])
    assert aggregate(values, w, "token-mean").item() == pytest.approx(10 / 4)
    assert aggregate(values, w, "sequence-mean").item() == pytest.approx((2 + 4) / 2)


def test_chunked_aggregation_adds_up():
    values, w = torch.rand(6, 5), (torch.rand(6, 5) > 0.3).float()
    for mode in ("token-mean", "sequence-mean"):
        full = aggregate(values, w, mode)
        n_tok, n_seq = w.sum(), (w.sum(1) > 0).sum()
        parts = sum(aggregate(values[r], w[r], mode, num_tokens=n_tok, num_sequences=n_seq) for r in (slice(0, 2), slice(2, 6)))
        assert torch.allclose(parts, full), mode


def test_entropy_of_uniform_and_peaked():
    logits = torch.zeros(2, 3, 7)
    assert torch.allclose(token_entropy(logits), torch.full((2, 3), math.log(7)))
    peaked = torch.full((1, 4), -1e4)
    peaked[0, 1] = 0.0
    assert token_entropy(peaked).item() == pytest.approx(0.0, abs=1e-6)


# --------------------------------------------------------------------------- the public step's pieces (dare.rl.step)
def test_row_chunks_cut_rows_by_micro_batch_size():
    from dare.rl.step import row_chunks

    assert row_chunks(5, 2) == [slice(0, 2), slice(2, 4), slice(4, 5)]
    assert row_chunks(3, None) == [slice(0, 3)]
    assert row_chunks(0, None) == []


def test_one_process_adds_no_pad_except_one_when_it_has_no_job():
    from dare.rl.step import Backprop

    assert Backprop().pads(4) == 0
    assert Backprop().run_pads(3) == 0
    assert Backprop().run_pads(0) == 1  # every parameter still gets a (zero) gradient


def test_a_pad_job_adds_exactly_zero_gradient_and_a_graphless_loss_is_padded():
    from dare.rl.step import Backprop

    w = torch.nn.Parameter(torch.tensor([2.0, -1.0]))
    backwards = []
    bp = Backprop(backward=lambda loss: (backwards.append(float(loss.detach())), loss.backward()))
    bp.pad(2, lambda: (w * w).sum())
    assert w.grad.tolist() == [0.0, 0.0] and backwards == [0.0, 0.0]
    bp.backward_or_pad(torch.tensor(3.0), lambda: (w * w).sum())  # no graph: one pad job instead of a raise
    assert backwards == [0.0, 0.0, 0.0] and w.grad.tolist() == [0.0, 0.0]
    bp.backward_or_pad((3 * w).sum(), lambda: (w * w).sum())
    assert w.grad.tolist() == [3.0, 3.0]


def test_trained_rows_skip_zero_advantage_rows_only_where_exact():
    from types import SimpleNamespace

    from dare.rl.step import trained_rows

    class Vanishing:
        zero_advantage_rows_vanish = True

        def __init__(self, **params):
            self.params = SimpleNamespace(**{"skip_zero_advantage": True, "beta": 0.0, **params})

    class Kept(Vanishing):  # declares nothing: the attribute is not inherited (vanishes_at_zero_advantage)
        pass

    adv = torch.tensor([0.0, 1.5, 0.0, -0.5])
    assert trained_rows(Vanishing(), adv).tolist() == [1, 3]
    assert trained_rows(Vanishing(), torch.tensor([[0.0, 0.0], [0.0, 2.0]])).tolist() == [1]  # token advantages
    assert trained_rows(Vanishing(beta=0.04), adv) is None  # a KL term has a gradient at advantage 0
    assert trained_rows(Vanishing(skip_zero_advantage=False), adv) is None
    assert trained_rows(Kept(), adv) is None
