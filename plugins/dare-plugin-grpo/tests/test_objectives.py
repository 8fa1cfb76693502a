"""Each objective's loss on a hand-built batch, against values computed by hand."""

import math

import pytest
import torch

from dare.diffusion.estimators import PassScore
from dare_grpo.objectives import BGPO, CJGRPO, D1, ESPO, CoupledGRPO, PassLossInput, SequenceLossInput, TraceRL
from dare_grpo.objectives.bgpo import piecewise_ratio

E = math.exp


def token_input(current, old, adv, scored=None, ref=None, pass_index=0, num_passes=1):
    current = current.clone().requires_grad_(True)
    scored = torch.ones_like(current, dtype=torch.bool) if scored is None else scored
    lengths = torch.full((current.shape[0],), current.shape[1])
    return PassLossInput(
        current=PassScore(token=current, scored=scored), old=old, ref=ref, advantages=adv,
        response_lengths=lengths, pass_index=pass_index, num_passes=num_passes,
        num_tokens=float(scored.sum()), num_sequences=current.shape[0], total_response_tokens=float(lengths.sum()),
    )


# rows: A = +1 (token 0 clipped high: ratio e^0.2 > 1.2; token 1 ratio 1), A = -1 (token 0 dual-clipped:
# ratio e^1.2 = 3.32 > c = 3; token 1 clipped low: ratio e^-1.2 < 0.8) -> per-token losses [-1.2, -1, 3, 0.8]
CUR = torch.tensor([[-1.0, -2.0], [-0.5, -1.5]])
OLD = torch.tensor([[-1.2, -2.0], [-1.7, -0.3]])
ADV = torch.tensor([1.0, -1.0])
REF = torch.tensor([[-1.0, -2.5], [-0.5, -1.0]])
K3 = [0.0, E(-0.5) + 0.5 - 1, 0.0, E(0.5) - 0.5 - 1]


@pytest.mark.parametrize("objective", [D1(), CoupledGRPO()])
def test_token_level_loss_clip_dual_clip_and_kl(objective):
    inp = token_input(CUR, OLD, ADV, ref=REF)
    terms = type(objective)(beta=0.1, kl_estimator="k3").pass_loss(inp)
    assert terms.loss.item() == pytest.approx((-1.2 - 1 + 3 + 0.8) / 4 + 0.1 * sum(K3) / 4, rel=1e-6)
    assert terms.metrics["clip_fraction"].item() == pytest.approx(0.5)
    assert terms.metrics["clip_fraction_high"].item() == pytest.approx(0.25)
    assert terms.metrics["dual_clip_fraction"].item() == pytest.approx(0.25)
    assert terms.metrics["kl"].item() == pytest.approx(sum(K3) / 4, rel=1e-6)
    terms.loss.backward()
    # only the unclipped token (row 0, token 1: -A rho / 4) and the KL term carry gradient
    k3_grad = [0.0, 1 - E(-0.5), 0.0, 1 - E(0.5)]
    want = torch.tensor([[0.0, -0.25], [0.0, 0.0]]) + 0.1 * torch.tensor(k3_grad).view(2, 2) / 4
    assert torch.allclose(inp.current.token.grad, want, atol=1e-6)


def test_token_mean_versus_sequence_mean():
    scored = torch.tensor([[True, False], [True, True]])
    tm = D1().pass_loss(token_input(CUR, OLD, ADV, scored))
    assert tm.loss.item() == pytest.approx((-1.2 + 3 + 0.8) / 3, rel=1e-6)
    sm = D1(loss_aggregation="sequence-mean").pass_loss(token_input(CUR, OLD, ADV, scored))
    assert sm.loss.item() == pytest.approx((-1.2 + (3 + 0.8) / 2) / 2, rel=1e-6)


def test_ratio_one_gives_plain_policy_gradient():
    inp = token_input(CUR, CUR, ADV)  # num_iterations = 1: old = current
    terms = D1().pass_loss(inp)
    assert terms.loss.item() == pytest.approx(0.0, abs=1e-7) and terms.metrics["clip_fraction"].item() == 0.0
    terms.loss.backward()
    assert torch.allclose(inp.current.token.grad, torch.tensor([[-0.25, -0.25], [0.25, 0.25]]))


def test_cj_grpo_averages_steps():
    # step 0 scores token 0 of each row, step 1 token 1; loss = (1/2) [tokenmean_step0 + tokenmean_step1]
    s0 = torch.tensor([[True, False], [True, False]])
    s1 = ~s0
    l0 = CJGRPO().pass_loss(token_input(CUR, OLD, ADV, s0, pass_index=0, num_passes=2)).loss
    l1 = CJGRPO().pass_loss(token_input(CUR, OLD, ADV, s1, pass_index=1, num_passes=2)).loss
    assert (l0 + l1).item() == pytest.approx(0.5 * ((-1.2 + 3) / 2 + (-1 + 0.8) / 2), rel=1e-6)


def test_tracerl_sums_per_sequence_step_means():
    # step 0: row 0 scores both tokens, row 1 token 0; step 1: row 1 token 1
    s0 = torch.tensor([[True, True], [True, False]])
    s1 = torch.tensor([[False, False], [False, True]])
    l0 = TraceRL().pass_loss(token_input(CUR, OLD, ADV, s0, pass_index=0, num_passes=2)).loss
    l1 = TraceRL().pass_loss(token_input(CUR, OLD, ADV, s1, pass_index=1, num_passes=2)).loss
    # (1/N) sum_i sum_t mean_{k in tau_i(t)}: row 0: (-1.2 - 1)/2; row 1: 3 + 0.8; N = 2
    assert (l0 + l1).item() == pytest.approx(((-1.2 - 1) / 2 + 3 + 0.8) / 2, rel=1e-6)


def test_bgpo_piecewise_ratio_and_broadcast_token_mean():
    # ELBO terms l = sum(token) / |y|: current [-1, -2], old [-1.5, -1.5]; Delta [0.5, -0.5]
    cur = torch.tensor([[-1.0, -1.0], [-2.0, -2.0]])
    old = torch.tensor([[-1.5, -1.5], [-1.5, -1.5]])
    inp = token_input(cur, old, ADV, num_passes=2)
    terms = BGPO().pass_loss(inp)
    # A>0: rho = 1 + 0.5 = 1.5 -> clipped 1.2 -> -1.2; A<0: rho = e^-0.5 < 0.8 -> 0.8; /2 passes
    assert terms.loss.item() == pytest.approx((-1.2 * 2 + 0.8 * 2) / 4 / 2, rel=1e-6)
    adv = torch.tensor([1.0, -1.0])
    ratio = piecewise_ratio(torch.tensor([-1.5, -1.5]), adv)  # DARE's log(1 + Delta) would be NaN here
    assert torch.allclose(ratio, torch.tensor([-0.5, E(-1.5)]))
    # KL on the ELBO terms, broadcast token-mean: l = [-1, -2], l_ref = [-1.25, -1]: k2 = [1/32, 1/2]
    ref = torch.tensor([[-1.25, -1.25], [-1.0, -1.0]])
    with_kl = BGPO(beta=0.5, kl_estimator="k2").pass_loss(token_input(cur, old, ADV, ref=ref, num_passes=2))
    assert with_kl.metrics["kl"].item() == pytest.approx((1 / 32 + 1 / 2) / 2 / 2, rel=1e-6)
    assert with_kl.loss.item() == pytest.approx(terms.loss.item() + 0.5 * (1 / 32 + 1 / 2) / 2 / 2, rel=1e-6)
    inp2 = token_input(torch.tensor([[-1.2, -1.2], [-2.0, -2.0]]), old, ADV)
    loss = BGPO().pass_loss(inp2).loss
    loss.backward()  # Delta_0 = 0.3 -> rho = 1.3 clipped (no grad); row 1 clipped low (no grad)
    assert torch.equal(inp2.current.token.grad, torch.zeros(2, 2))
    inp3 = token_input(torch.tensor([[-1.6, -1.6], [-2.0, -2.0]]), old, ADV)
    BGPO().pass_loss(inp3).loss.backward()  # Delta_0 = -0.1 -> linear: d(-A(1+Delta))/dl_k = -1/|y| * |y|/4
    assert torch.allclose(inp3.current.token.grad[0], torch.tensor([-0.25, -0.25]))


def test_espo_sequence_loss_with_k2_on_raw_elbo():
    cur = torch.tensor([-3.0, -6.0], requires_grad=True)
    inp = SequenceLossInput(current=cur, old=torch.tensor([-4.0, -5.0]), ref=torch.tensor([-2.0, -6.0]),
                            advantages=torch.tensor([1.0, -1.0]), response_lengths=torch.tensor([2, 3]))
    terms = ESPO(beta=0.01, kl_estimator="k2", dual_clip_c=None).sequence_loss(inp)
    # log rho = [0.5, -1/3]: row 0 clipped at 1.2 -> -1.2; row 1 rho 0.717 < 0.8 -> 0.8; KL = mean(0.5 * d^2 / |y|)
    assert terms.loss.item() == pytest.approx((-1.2 + 0.8) / 2 + 0.01 * (0.5 * 1 / 2 + 0) / 2, rel=1e-6)
    terms.loss.backward()
    assert torch.allclose(cur.grad, torch.tensor([0.01 * (-1.0) / 2 / 2, 0.0]))  # only the KL term of row 0


def test_objective_defaults_follow_the_recipes():
    assert D1().params.p_mask_prompt == 0.15 and D1().params.group_size == 8 and D1().params.beta == 0.0
    e = ESPO().params
    assert (e.advantage, e.num_iterations, e.mc_num, e.kl_estimator, e.dual_clip_c) == ("rloo", 8, 2, "k2", None)
    assert BGPO().params.mc_num == 16
    c = CoupledGRPO().params
    assert (c.t_min, c.t_max, c.full_mask_term) == (0.2, 0.8, True)
