"""dare.diffusion.estimators: masks, weights, statistics, complementarity, (L+1), replay states."""

import math

import pytest
import torch

from dare.diffusion.estimators import (
    AutoregressiveEstimator,
    BlockwiseELBOEstimator,
    ComplementaryELBOEstimator,
    CoupledEstimator,
    OneStepEstimator,
    Pass,
    ScoringBatch,
    StratifiedELBOEstimator,
    TrajectoryEstimator,
    score_pass,
)
from dare.diffusion.estimators.elbo_complement import stratified_counts

MASK = 9


def make_batch(N=2, P=3, G=4, prompt_pad=(1, 0), completion_mask=None, unmask_step=None, seed=0):
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, 8, (N, P + G), generator=g)
    attn = torch.ones(N, P + G, dtype=torch.long)
    for b, pad in enumerate(prompt_pad):
        attn[b, :pad] = 0
    cmask = torch.ones(N, G, dtype=torch.bool) if completion_mask is None else completion_mask
    attn[:, P:] = cmask.long()
    return ScoringBatch(ids, attn, cmask, P, MASK, unmask_step)


def gen(seed=0):
    return torch.Generator().manual_seed(seed)


# ----------------------------------------------------------------------------- score_pass
def test_score_pass_by_hand_with_temperature_and_skipped_copies():
    batch = make_batch(N=1, P=2, G=2, prompt_pad=(0,))
    table = torch.randn(1, 4, 10)
    calls = []

    def logits_fn(noisy, clean, attn):
        calls.append(noisy.clone())
        return table
    weight = torch.tensor([[[2.0, 0.0]], [[0.0, 0.0]], [[0.0, 0.5]]])
    mask = torch.zeros(3, 1, 4, dtype=torch.bool)
    mask[0, 0, 2] = mask[2, 0, 3] = True
    out = score_pass(logits_fn, batch, Pass(mask, weight), temperature=0.5, with_entropy=True)
    lp = torch.log_softmax(table[0, 2:] / 0.5, dim=-1)
    y = batch.input_ids[0, 2:]
    assert torch.allclose(out.token[0], torch.stack([2.0 * lp[0, y[0]], 0.5 * lp[1, y[1]]]))
    assert len(calls) == 2  # the copy without weights is skipped
    assert calls[0][0, 2] == MASK and calls[0][0, 3] == y[1]
    assert out.scored.tolist() == [[True, True]]
    assert torch.allclose(out.entropy[0], -(lp.exp() * lp).sum(-1))


# ----------------------------------------------------------------------------- one-step (d1)
def test_onestep_masks_completion_and_a_fraction_of_real_prompt_tokens():
    N, P = 4000, 20
    batch = make_batch(N=N, P=P, G=3, prompt_pad=[5] * N)
    (pas,) = OneStepEstimator(p_mask_prompt=0.15).draw(batch, gen())
    mask = pas.mask[0]
    assert mask[:, P:].all() and not mask[:, :5].any()  # completion all masked, left padding never
    assert mask[:, 5:P].float().mean().item() == pytest.approx(0.15, abs=0.005)
    assert torch.equal(pas.weight[0], torch.ones(N, 3))
    (none,) = OneStepEstimator(p_mask_prompt=0.0).draw(batch, gen())
    assert not none.mask[0, :, :P].any()


# ----------------------------------------------------------------------------- coupled
def test_coupled_pair_is_complementary_with_importance_weights():
    cmask = torch.tensor([[True] * 6, [True] * 4 + [False] * 2])
    batch = make_batch(N=2, P=3, G=6, prompt_pad=(1, 0), completion_mask=cmask)
    (pas,) = CoupledEstimator(t_min=0.2, t_max=0.8, full_mask_term=True).draw(batch, gen())
    full, a, b = pas.mask[:, :, 3:]
    assert not pas.mask[:, :, :3].any()  # the prompt is never masked
    assert torch.equal(full, cmask) and torch.equal(a | b, cmask) and not (a & b).any()
    wf, wa, wb = pas.weight
    assert torch.equal(wf, 0.5 * cmask.float())
    t = 0.5 / wa[a]  # weight 1/(2t) on A, 1/(2(1-t)) on B, same t per row
    for row in range(2):
        ta = 0.5 / wa[row][a[row]]
        tb = 1 - 0.5 / wb[row][b[row]]
        assert torch.allclose(ta, ta[0].expand_as(ta)) and torch.allclose(tb, ta[0].expand_as(tb))
        assert 0.2 <= ta[0] <= 0.8
    assert t.numel() == int(a.sum())
    (pair,) = CoupledEstimator(full_mask_term=False).draw(batch, gen())
    assert pair.mask.shape[0] == 2 and torch.allclose(pair.weight[0][pair.mask[0, :, 3:]] * 0.5, wa[a])


# ----------------------------------------------------------------------------- ESPO complement
def test_stratified_counts_cover_all_residues():
    L = 7
    k = stratified_counts(torch.full((L + 1,), L), gen(3))
    assert sorted(k.tolist()) == list(range(L + 1))
    uneven = stratified_counts(torch.tensor([3, 5, 0]), gen(1))
    assert (uneven <= torch.tensor([3, 5, 0])).all() and (uneven >= 0).all()


def test_complement_weights_use_L_plus_1_denominator():
    L, N = 5, 6
    batch = make_batch(N=N, P=2, G=L, prompt_pad=[0] * N)
    (pas,) = ComplementaryELBOEstimator(mc_num=1, reduce_var=True).draw(batch, gen(2))
    masked, comp = pas.mask[0, :, 2:], pas.mask[1, :, 2:]
    assert torch.equal(masked | comp, torch.ones(N, L, dtype=torch.bool)) and not (masked & comp).any()
    for row in range(N):
        k = int(masked[row].sum())
        if k:
            assert torch.allclose(pas.weight[0, row][masked[row]], torch.tensor((L + 1) / (2 * k)))
        if k < L:
            assert torch.allclose(pas.weight[1, row][comp[row]], torch.tensor((L + 1) / (2 * (L - k))))
    assert sorted(masked.sum(1).tolist()) == list(range(L + 1))  # N = L + 1 rows: every count once


def test_complement_estimate_is_exact_on_context_free_logits():
    # lp_i = c for every token: l_mask(k) = (L+1) c for k >= 1, 0 for k = 0; averaged over the L+1
    # stratified counts that is L c, the true log-likelihood (unbiasedness of the (L+1) form).
    L = 4
    batch = make_batch(N=L + 1, P=1, G=L, prompt_pad=[0] * (L + 1))
    logits = torch.zeros(L + 1, L + 1, 10)  # uniform: lp = -log 10 for every token
    (one,) = ComplementaryELBOEstimator(mc_num=1, reduce_var=False).draw(batch, gen(5))
    s = score_pass(lambda n, c, a: logits, batch, one).sequence
    assert s.mean().item() == pytest.approx(-L * math.log(10), rel=1e-6)
    # with the complement: (L+1) c for 0 < k < L, (L+1) c / 2 for k in {0, L}; mean again L c
    (two,) = ComplementaryELBOEstimator(mc_num=1, reduce_var=True).draw(batch, gen(5))
    s2 = score_pass(lambda n, c, a: logits, batch, two).sequence
    k = two.mask[0, :, 1:].sum(1)
    want = torch.where((k == 0) | (k == L), (L + 1) / 2, L + 1.0) * -math.log(10)
    assert torch.allclose(s2, want, rtol=1e-6)
    assert s2.mean().item() == pytest.approx(-L * math.log(10), rel=1e-6)


# ----------------------------------------------------------------------------- EBPO blockwise
def test_blockwise_masks_every_block_with_count_weights():
    cmask = torch.tensor([[True] * 8, [True] * 5 + [False] * 3])
    batch = make_batch(N=2, P=3, G=8, prompt_pad=(1, 0), completion_mask=cmask)
    passes = BlockwiseELBOEstimator(block_length=4, mc_num=3).draw(batch, gen(4))
    assert len(passes) == 3
    # compact positions: row 0 has 2 real prompt tokens -> response blocks [0,0,1,1,1,1,2,2]; row 1: 3 -> [0,1,1,1,1]
    blocks = [torch.tensor([0, 0, 1, 1, 1, 1, 2, 2]), torch.tensor([0, 1, 1, 1, 1])]
    levels = []
    for pas in passes:
        m, w = pas.mask[0, :, 3:], pas.weight[0]
        assert not pas.mask[0, :, :3].any() and not m[1, 5:].any()
        for row in range(2):
            for blk in blocks[row].unique():
                where = (blocks[row] == blk).nonzero().flatten()
                n = int(m[row, where].sum())
                assert 1 <= n <= where.numel()
                assert torch.allclose(w[row, where][m[row, where]], torch.tensor(where.numel() / n))
                levels.append(n / where.numel())
    assert any(x < 1 for x in levels)


# ----------------------------------------------------------------------------- trajectory replay
def test_trajectory_passes_by_hand_with_merging():
    step = torch.tensor([[0, 2, 1, 3, -1], [1, 0, 3, 2, 2]])
    cmask = torch.tensor([[True] * 5, [True, True, True, True, False]])
    batch = make_batch(N=2, P=1, G=5, prompt_pad=(0, 0), completion_mask=cmask, unmask_step=step)
    passes = TrajectoryEstimator(shrink=1).draw(batch)
    assert len(passes) == 4
    masks = [p.mask[0, :, 1:].int().tolist() for p in passes]
    weights = [p.weight[0].int().tolist() for p in passes]
    assert masks[0] == [[1, 1, 1, 1, 1], [1, 1, 1, 1, 0]]
    assert weights[0] == [[1, 0, 0, 0, 0], [0, 1, 0, 0, 0]]
    assert masks[2] == [[0, 1, 0, 1, 1], [0, 0, 1, 1, 0]]  # before step 2; never-committed stays masked
    assert weights[2] == [[0, 1, 0, 0, 0], [0, 0, 0, 1, 0]]  # the EOS-padding token of row 1 is excluded
    total = sum(p.weight[0] for p in passes)
    assert torch.equal(total, torch.tensor([[1.0, 1, 1, 1, 0], [1, 1, 1, 1, 0]]))  # each token scored once
    merged = TrajectoryEstimator(shrink=2).draw(batch)
    assert len(merged) == 2
    assert [p.key for p in passes] == [0, 1, 2, 3] and [p.key for p in merged] == [0, 1]  # matched across processes
    assert passes[2].rows(slice(0, 1)).key == 2
    # rows whose steps skip a transition: the keys name the transitions present, not list positions
    sparse = TrajectoryEstimator(shrink=1).draw(make_batch(N=1, P=1, G=3, prompt_pad=(0,),
                                                           unmask_step=torch.tensor([[0, 4, 2]])))
    assert [p.key for p in sparse] == [0, 2, 4]
    assert merged[1].mask[0, :, 1:].int().tolist() == [[0, 1, 0, 1, 1], [0, 0, 1, 1, 0]]
    assert merged[0].weight[0].int().tolist() == [[1, 0, 1, 0, 0], [1, 1, 0, 0, 0]]
    with pytest.raises(ValueError, match="unmask_step"):
        TrajectoryEstimator().draw(make_batch())


def test_shrink_splits_at_block_boundaries():
    """Blocks of 4 steps (stride 4), shrink 3: block 0's steps {0,1,2} {3} and block 1's {4,5,6} {7} are four
    transitions, none spanning two blocks (step 3 and step 4 were merged before: block 1's first tokens scored
    under a state with block 0 unfinished). Where shrink divides the stride the ids are step // shrink."""
    from dare.diffusion.estimators.trajectory import transition_ids

    step = torch.tensor([[0, 1, 2, 3, 4, 5, 6, 7, -1]])
    valid = torch.ones_like(step, dtype=torch.bool)
    assert transition_ids(step, valid, 3).tolist() == [[0, 0, 0, 1, 1, 1, 2, 2, -1]]
    assert transition_ids(step, valid, 3, block_stride=4).tolist() == [[0, 0, 0, 1, 2, 2, 2, 3, -1]]
    assert transition_ids(step, valid, 2, block_stride=4).tolist() == transition_ids(step, valid, 2).tolist()
    assert transition_ids(step, valid, 5, block_stride=4).tolist() == [[0, 0, 0, 0, 1, 1, 1, 1, -1]]
    batch = make_batch(N=1, P=1, G=9, prompt_pad=(0,), unmask_step=step)
    passes = TrajectoryEstimator(shrink=3, block_stride=4).draw(batch)
    assert [p.key for p in passes] == [0, 1, 2, 3]
    assert passes[2].mask[0, 0, 1:].int().tolist() == [0, 0, 0, 0, 1, 1, 1, 1, 1]  # block 0 complete
    assert passes[2].weight[0, 0].int().tolist() == [0, 0, 0, 0, 1, 1, 1, 0, 0]
    with pytest.raises(ValueError, match="block_stride must be >= 1"):
        transition_ids(step, valid, 3, block_stride=0)


def test_trajectory_replay_reproduces_the_sampler_states():
    pytest.importorskip("dare_llada")
    from dare_llada.sampler import decode, decode_options

    torch.manual_seed(0)
    table = torch.randn(2, 9, 10)
    table[..., MASK] = -1e9
    seen = []

    def logits_fn(x, attn):
        seen.append(x.clone())
        return table
    prompt = torch.tensor([[1, 2, 3], [4, 5, 6]])
    x, unmask_step, nfe = decode(logits_fn, prompt, None,
                                 decode_options(steps=6, gen_length=6, block_length=3, mask_id=MASK))
    batch = ScoringBatch(x, torch.ones_like(x), torch.ones(2, 6, dtype=torch.bool), 3, MASK, unmask_step)
    passes = TrajectoryEstimator().draw(batch)
    assert len(passes) == nfe == 6
    for pas, state in zip(passes, seen):
        assert torch.equal(torch.where(pas.mask[0], MASK, x), state)


# ----------------------------------------------------------------------------- autoregressive
def test_autoregressive_passes_by_hand():
    cmask = torch.tensor([[True, True, True], [True, True, False]])
    batch = make_batch(N=2, P=2, G=3, prompt_pad=(0, 1), completion_mask=cmask)
    passes = AutoregressiveEstimator(chunk_size=2).draw(batch)
    assert [p.mask.shape[0] for p in passes] == [2, 1]
    assert passes[0].mask[1, :, 2:].int().tolist() == [[0, 1, 1], [0, 1, 0]]
    assert passes[1].weight[0].int().tolist() == [[0, 0, 1], [0, 0, 0]]
    assert not torch.cat([p.mask[:, :, :2] for p in passes]).any()
    assert [p.key for p in passes] == [0, 2]  # the first position: matched across processes
    # a process whose responses are shorter has fewer passes; the keys still name the same positions
    short = AutoregressiveEstimator(chunk_size=2).draw(make_batch(N=1, P=2, G=3, prompt_pad=(0,),
                                                                  completion_mask=torch.tensor([[True, True, False]])))
    assert [p.key for p in short] == [0]


# ----------------------------------------------------------------------------- stratified (BGPO)
def test_stratified_passes_weight_masked_tokens_by_inverse_ratio():
    batch = make_batch(N=3, P=2, G=8, prompt_pad=(0, 0, 1))
    passes = StratifiedELBOEstimator(mc_num=4).draw(batch, gen(7))
    counts = torch.stack([p.mask[0, :, 2:].sum(1) for p in passes], 1)
    assert (counts >= 1).all() and (counts <= 8).all()
    for p in passes:
        m = p.mask[0, :, 2:]
        k = m.sum(1, keepdim=True).float()
        assert torch.allclose(p.weight[0], m.float() * 8 / k)
    assert sorted(counts[0].tolist()) == sorted(set(counts[0].tolist()))  # stratified: distinct counts
