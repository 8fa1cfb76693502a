"""Padding-free (packed) training equals padded training, example by example, for every family.

Packed rows (dare.diffusion.packing) hold several examples with block-diagonal attention and per-example
positions; the SFT loss and its gradients, a DPO step's loss and gradients and an RL likelihood pass must equal
the padded path (same keyed noise) within 1e-5, and an example must never see another one.
"""

from __future__ import annotations

import pytest
import torch

from dare.data.supervised import SupervisedCollator, SupervisedExample
from dare.diffusion.packing import first_fit_rows, pack_layout, packed_denoiser_logits
from dare.randomness import RowGenerators
from dare.trainers import DareConfig

FAMILIES = ["llada", "dream", "sdar", "llada2"]


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    from dare.plugins.manager import get_registry
    from dare.testing import tiny_model

    out = {}
    for fam in FAMILIES:
        if get_registry().find("model_family", fam) is None:
            continue
        lm = tiny_model(fam, tmp_path_factory.mktemp(f"tiny-{fam}") / "model", seed=0)
        lm.model.eval()  # no dropout: packed and padded forwards must be comparable
        out[fam] = lm
    return out


def _lm(models, fam):
    if fam not in models:
        pytest.skip(f"family {fam} is not installed")
    return models[fam]


def _examples(eos: int, n: int = 5, seed: int = 0) -> list[SupervisedExample]:
    g = torch.Generator().manual_seed(seed)
    out = []
    for i in range(n):
        lp, lr = int(torch.randint(2, 9, (1,), generator=g)), int(torch.randint(2, 20, (1,), generator=g))
        ids = torch.randint(10, 200, (lp + lr,), generator=g).tolist()
        out.append(SupervisedExample(ids[:lp], ids[lp:] + [eos], index=10 + i))
    return out


# ---------------------------------------------------------------------------------------------- the layout
def test_first_fit_rows_by_hand():
    rows = first_fit_rows([5, 3, 4, 2, 0, 6], capacity=8)
    # longest first: 6 -> row0; 5 -> row1; 4 -> row2; 3 -> row1 (5+3); 2 -> row0 (6+2); the empty one is dropped
    assert rows == [[5, 3], [0, 1], [2]]
    assert first_fit_rows([9, 1], capacity=4) == [[0], [1]]  # too long for the capacity: a row of its own


def test_pack_layout_values():
    valid = torch.tensor([[1, 1, 1, 0], [0, 1, 1, 0], [1, 0, 0, 0]], dtype=torch.bool)
    lay = pack_layout(valid)  # capacity 3 (the longest): rows [ex0], [ex1, ex2]
    assert lay.segment.tolist() == [[0, 0, 0], [1, 1, 2]]
    assert lay.position.tolist() == [[0, 1, 2], [0, 1, 0]]
    ids = torch.arange(12).view(3, 4)
    assert lay.pack(ids, fill=-1).tolist() == [[0, 1, 2], [5, 6, 8]]
    assert lay.segment_start.tolist() == [[True, False, False], [True, False, True]]
    m = lay.attention_mask()[:, 0]
    assert m[1].tolist() == [[True, True, False], [True, True, False], [False, False, True]]
    back = lay.unpack(lay.pack(ids)[..., None].float())[..., 0]
    assert back.tolist() == [[0, 1, 2, 0], [0, 5, 6, 0], [8, 0, 0, 0]]


def test_pair_layout_mask_is_the_block_diffusion_mask():
    from dare.diffusion.block import block_diffusion_mask

    valid = torch.tensor([[1, 1, 1, 1, 1, 0], [1, 1, 1, 0, 0, 0]], dtype=torch.bool)
    lay = pack_layout(valid, capacity=16, block_size=2)  # both pairs in one row: 10 + 6 slots
    assert lay.segment.tolist() == [[0] * 10 + [1] * 6]
    assert lay.stream.tolist() == [[0] * 5 + [1] * 5 + [0] * 3 + [1] * 3]
    m = lay.attention_mask()[0, 0]
    for b, n, at in ((0, 5, 0), (1, 3, 10)):
        ref = block_diffusion_mask(n, 2)[0, 0]
        assert torch.equal(m[at : at + 2 * n, at : at + 2 * n], ref)
        outside = torch.ones(16, dtype=torch.bool)
        outside[at : at + 2 * n] = False
        assert not m[at : at + 2 * n][:, outside].any()


def test_fill_slots_attend_only_themselves():
    lay = pack_layout(torch.tensor([[1, 1, 1], [1, 0, 0], [1, 0, 0]], dtype=torch.bool), capacity=4)
    assert lay.segment.tolist() == [[0, 0, 0, 1], [2, -1, -1, -1]]
    m = lay.attention_mask()[1, 0]
    assert m[1].tolist() == [False, True, False, False] and m[0].tolist() == [True, False, False, False]


# ---------------------------------------------------------------------------------------------- forwards
@pytest.mark.parametrize("family", FAMILIES)
def test_packed_logits_equal_padded_with_left_and_right_padding(models, family):
    """RL-shaped rows: left-padded prompts, completions right-padded (block families) or EOS-filled."""
    lm = _lm(models, family)
    g = torch.Generator().manual_seed(1)
    B, P, G = 4, 6, 10
    ids = torch.randint(10, 200, (B, P + G), generator=g)
    attn = torch.ones(B, P + G, dtype=torch.long)
    for b, (lp, lc) in enumerate([(0, 10), (3, 4), (1, 7), (4, 1)]):
        attn[b, :lp] = 0
        attn[b, P + lc :] = 0
    noisy = torch.where(torch.rand(B, P + G, generator=g) < 0.5, lm.tokens.mask_id, ids)
    with torch.no_grad():
        padded = lm.family.denoiser_logits(lm.model, noisy, ids, attn)
        packed = packed_denoiser_logits(lm.family, lm.model, noisy, ids, attn)
    first = attn.cumsum(1) == 1  # Dream: the first token has no left neighbour (never a target)
    check = attn.bool() & ~(first & torch.tensor(family == "dream"))
    torch.testing.assert_close(packed[check], padded[check], atol=1e-5, rtol=0)
    assert torch.equal(packed[~attn.bool()], torch.zeros_like(packed[~attn.bool()]))


@pytest.mark.parametrize("family", FAMILIES)
def test_an_all_padding_batch_gives_zero_logits(models, family):
    """A batch without a valid token (every row padding) packs to one fill slot: zeros, no error (not
    'packing capacity must be positive, got 0')."""
    lm = _lm(models, family)
    ids = torch.full((2, 6), 11)
    with torch.no_grad():
        out = packed_denoiser_logits(lm.family, lm.model, ids, ids, torch.zeros(2, 6, dtype=torch.long))
    assert out.shape[:2] == (2, 6) and not out.any()


@pytest.mark.parametrize("family", FAMILIES)
def test_an_example_never_attends_across_the_boundary(models, family):
    lm = _lm(models, family)
    c = SupervisedCollator(lm.tokens, False)
    batch = c(_examples(lm.tokens.eos_id, n=4))
    ids, attn = batch["input_ids"], batch["attention_mask"]
    lay = pack_layout(attn.bool(), capacity=2 * int(attn.sum()) if family in ("sdar", "llada2") else int(attn.sum()))
    assert lay.source.shape[0] == 1  # all four examples share one row
    victim = 0
    perturbed = ids.clone()
    perturbed[victim, attn[victim].bool()] = torch.randint(10, 200, (int(attn[victim].sum()),))
    with torch.no_grad():
        a = packed_denoiser_logits(lm.family, lm.model, ids, ids, attn, max_tokens=lay.source.shape[1])
        b = packed_denoiser_logits(lm.family, lm.model, perturbed, perturbed, attn, max_tokens=lay.source.shape[1])
    others = attn.bool().clone()
    others[victim] = False
    torch.testing.assert_close(a[others], b[others], atol=1e-6, rtol=0)
    assert (a[victim] - b[victim]).abs().max() > 1e-3  # the perturbed example itself did change


# ---------------------------------------------------------------------------------------------- SFT
def _sft_loss_and_grads(lm, batch, tmp_path, packing: bool):
    from dare_sft.objective import SFT
    from dare_sft.trainer import SFTTrainer

    args = DareConfig(output_dir=str(tmp_path), report_to="none", seed=3, packing=packing, packing_max_tokens=64)
    trainer = SFTTrainer(model=lm.model, args=args, train_dataset=[], family=lm.family, tokens=lm.tokens,
                         objective=SFT(mask_eps=0.1))
    trainer.state.global_step = 2
    lm.model.zero_grad()
    loss = trainer.compute_loss(lm.model, batch)
    loss.backward()
    grads = {n: p.grad.detach().clone() for n, p in lm.model.named_parameters() if p.grad is not None}
    lm.model.zero_grad()
    return loss.detach(), grads


@pytest.mark.parametrize("family", FAMILIES)
def test_sft_loss_and_gradients_packed_equal_padded(models, family, tmp_path):
    pytest.importorskip("dare_sft")
    lm = _lm(models, family)
    c = SupervisedCollator(lm.tokens, False, pad_to_multiple_of=lm.family.block_size(lm.model.config))
    batch = c(_examples(lm.tokens.eos_id, n=5))
    assert not bool(batch["attention_mask"].all())  # there is padding to drop
    pairs = lm.family.block_size(lm.model.config) is not None
    lay = pack_layout(batch["attention_mask"].bool(), 64, lm.family.block_size(lm.model.config) if pairs else None)
    assert lay.source.shape[0] < 5  # examples share rows
    loss_pad, g_pad = _sft_loss_and_grads(lm, batch, tmp_path, packing=False)
    loss_pack, g_pack = _sft_loss_and_grads(lm, batch, tmp_path, packing=True)
    assert loss_pad.item() > 0
    assert abs(loss_pack.item() - loss_pad.item()) < 1e-5
    assert g_pad.keys() == g_pack.keys() and g_pad
    for n in g_pad:
        torch.testing.assert_close(g_pack[n], g_pad[n], atol=1e-5, rtol=1e-4, msg=n)


# ---------------------------------------------------------------------------------------------- DPO
@pytest.mark.parametrize("family", ["llada", "sdar"])
def test_dpo_step_packed_equals_padded(models, family, tmp_path):
    pytest.importorskip("dare_dpo")
    from dare_dpo import DPOTrainer
    from dare_dpo.data import PairCollator, PairExample
    from dare_dpo.objective import DPO

    lm = _lm(models, family)
    ex = _examples(lm.tokens.eos_id, n=6, seed=4)
    pairs = [PairExample(ex[2 * i], SupervisedExample(ex[2 * i].prompt_ids, ex[2 * i + 1].response_ids, ex[2 * i].index))
             for i in range(3)]
    coll = PairCollator(SupervisedCollator(lm.tokens, False, pad_to_multiple_of=lm.family.block_size(lm.model.config)))
    batch = coll(pairs)
    out = []
    for packing in (False, True):
        objective = DPO(beta=0.1)
        args = DareConfig(output_dir=str(tmp_path), report_to="none", seed=1, packing=packing, packing_max_tokens=80)
        trainer = DPOTrainer(model=lm.model, args=args, train_dataset=[], family=lm.family, tokens=lm.tokens,
                             objective=objective, estimator=objective.make_estimator(lm.family, lm.model.config))
        lm.model.zero_grad()
        loss, policy = trainer.pair_loss(lm.model, batch, step=0)
        loss.loss.backward()
        grads = {n: p.grad.detach().clone() for n, p in lm.model.named_parameters() if p.grad is not None}
        out.append((loss.loss.detach(), policy.detach(), grads))
        lm.model.zero_grad()
    (l0, p0, g0), (l1, p1, g1) = out
    assert abs(l1.item() - l0.item()) < 1e-5
    torch.testing.assert_close(p1, p0, atol=1e-4, rtol=1e-5)
    for n in g0:
        torch.testing.assert_close(g1[n], g0[n], atol=1e-5, rtol=1e-4, msg=n)


# ---------------------------------------------------------------------------------------------- RL passes
@pytest.mark.parametrize("family", FAMILIES)
def test_rl_estimator_pass_packed_equals_padded(models, family):
    """A token-level estimator pass (coupled-GRPO's) scored padded vs packed: same scores and gradients."""
    from dare.diffusion.estimators import ScoringBatch, score_pass
    from dare.diffusion.estimators.coupled import CoupledEstimator

    lm = _lm(models, family)
    g = torch.Generator().manual_seed(7)
    B, P, G = 4, 5, 12
    ids = torch.randint(10, 200, (B, P + G), generator=g)
    attn = torch.ones(B, P + G, dtype=torch.long)
    cmask = torch.ones(B, G, dtype=torch.bool)
    for b, (lp, lc) in enumerate([(0, 12), (2, 5), (4, 9), (1, 3)]):
        attn[b, :lp] = 0
        if not lm.family.pad_in_response:  # block families: the response ends at EOS, the rest is padding
            attn[b, P + lc :] = 0
            cmask[b, lc:] = False
    batch = ScoringBatch(ids, attn, cmask, P, lm.tokens.mask_id)
    passes = CoupledEstimator(full_mask_term=False).draw(batch, RowGenerators.keyed(0, "sft", 1, list(range(B))))
    res = []
    assert pack_layout(attn.bool(), 40, 4 if family in ("sdar", "llada2") else None).source.shape[0] < B
    packed = lambda model, n, c, a: packed_denoiser_logits(lm.family, model, n, c, a, max_tokens=40)  # noqa: E731
    for fn in (lm.family.denoiser_logits, packed):
        lm.model.zero_grad()
        scores = [score_pass(lambda n, c, a: fn(lm.model, n, c, a), batch, pas) for pas in passes]
        total = sum(s.sequence.sum() for s in scores)
        total.backward()
        grads = {n: p.grad.detach().clone() for n, p in lm.model.named_parameters() if p.grad is not None}
        res.append((torch.stack([s.token.detach() for s in scores]), grads))
    (t0, g0), (t1, g1) = res
    assert t0.abs().sum() > 0
    torch.testing.assert_close(t1, t0, atol=1e-5, rtol=1e-5)
    for n in g0:
        torch.testing.assert_close(g1[n], g0[n], atol=1e-5, rtol=1e-4, msg=n)
    lm.model.zero_grad()


def test_rl_trainer_likelihood_routes_through_packing(monkeypatch):
    """GRPOTrainer's logits function (every RL likelihood pass) is DareTrainer.denoiser_logits."""
    import dare.trainers.base as base
    from dare.rl.trainer import GRPOTrainer

    calls = []

    def probe_packed(family, model, noisy, clean, attn, max_tokens):
        calls.append((family, max_tokens))
        return "packed"

    monkeypatch.setattr(base, "packed_denoiser_logits", probe_packed)

    class Probe:
        args = DareConfig(output_dir="/nonexistent", report_to="none", packing=True, packing_max_tokens=7)
        family = "the family"
        denoiser_logits = base.DareTrainer.denoiser_logits

    fn = GRPOTrainer.logits_fn(Probe(), model=None)
    assert fn(None, None, None) == "packed" and calls == [("the family", 7)]


# ---------------------------------------------------------------------------------------------- spec
def test_packing_spec_switch_and_checks(tmp_path):
    from dare.runspec import RunSpec
    from dare.trainers.config import config_from_spec

    base = {"learning_rate": 1e-4, "max_steps": 1}
    head = {"model": {"new": {"family": "llada"}}, "output": {"dir": str(tmp_path / "run")}}
    assert RunSpec.model_validate({**head, "train": base}).train.packing is False
    spec = RunSpec.model_validate({**head, "train": {**base, "packing": True, "packing_max_tokens": 512}})
    cfg = config_from_spec(spec.train, str(tmp_path))
    assert cfg.packing is True and cfg.packing_max_tokens == 512


# ---------------------------------------------------------------------------------------------- attention
@pytest.mark.parametrize("block_size", [None, 2])
def test_segmented_attention_equals_dense_masked_attention(block_size):
    """Inside packed_segments, attention one segment at a time = SDPA under the dense block-diagonal mask."""
    from dare.diffusion.packing import Segments, packed_segments, scaled_dot_product_attention

    valid = torch.tensor([[1, 1, 1, 1, 1, 0], [0, 1, 1, 0, 0, 0], [1, 1, 1, 1, 0, 0]], dtype=torch.bool)
    lay = pack_layout(valid, capacity=20 if block_size else 9, block_size=block_size)
    assert lay.source.shape[0] < 3 and (lay.segment < 0).any()  # shared rows and a fill tail
    R, T = lay.segment.shape
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(R, 2, T, 8, generator=g, requires_grad=True) for _ in range(3))
    dense = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=lay.attention_mask())
    with packed_segments(Segments.of(lay)):
        seg = scaled_dot_product_attention(q, k, v, attn_mask=None)
        other = scaled_dot_product_attention(q[:, :, :3], k[:, :, :3], v[:, :, :3])  # other shapes: plain SDPA
    torch.testing.assert_close(seg, dense, atol=1e-6, rtol=1e-6)
    torch.testing.assert_close(other, torch.nn.functional.scaled_dot_product_attention(q[:, :, :3], k[:, :, :3],
                                                                                        v[:, :, :3]))
    gd = torch.autograd.grad(dense.sum(), (q, k, v))
    gs = torch.autograd.grad(seg.sum(), (q, k, v))
    for a, b in zip(gs, gd):
        torch.testing.assert_close(a, b, atol=1e-6, rtol=1e-6)


def _reference_varlen(calls):
    """A CPU stand-in of flash-attn's ``flash_attn_varlen_func`` (its argument order and ``[total, H, D]`` layout,
    grouped K/V heads): SDPA over each ``cu_seqlens`` sequence. Records each call's ``cu_seqlens`` and max length."""
    def varlen(q, k, v, cu_q, cu_k, max_q, max_k, dropout_p=0.0, softmax_scale=None, causal=False):
        calls.append((cu_q.tolist(), max_q))
        assert torch.equal(cu_q, cu_k) and max_q == max_k and not causal and cu_q.dtype == torch.int32
        out = []
        for a, b in zip(cu_q.tolist(), cu_q.tolist()[1:]):
            x = [t[a:b].transpose(0, 1)[None] for t in (q, k, v)]  # [1, H, n, D]
            out.append(torch.nn.functional.scaled_dot_product_attention(*x, scale=softmax_scale,
                                                                        enable_gqa=True)[0].transpose(0, 1))
        return torch.cat(out)
    return varlen


def test_varlen_kernel_gets_the_segment_boundaries(monkeypatch):
    """On GPU with flash-attn, plain packed segments go to one flash_attn_varlen_func call: the rows flattened, every
    segment one sequence, every fill slot one (attending only itself). Checked on CPU with a stand-in kernel
    that must reproduce the per-segment SDPA exactly; pair layouts (block families) and CPU tensors never take it."""
    import dare.diffusion.packing as packing

    valid = torch.tensor([[1, 1, 1, 1, 1, 0], [0, 1, 1, 0, 0, 0], [1, 1, 1, 1, 0, 0]], dtype=torch.bool)
    lay = pack_layout(valid, capacity=9)
    assert lay.segment.tolist() == [[0, 0, 0, 0, 0, 2, 2, 2, 2], [1, 1, -1, -1, -1, -1, -1, -1, -1]]
    seg = packing.Segments.of(lay)
    assert seg.cu_seqlens == ((0, 5, 9, 11, 12, 13, 14, 15, 16, 17, 18), 5)
    assert packing.Segments.of(pack_layout(valid, capacity=20, block_size=2)).cu_seqlens is None
    g = torch.Generator().manual_seed(0)
    q = torch.randn(2, 4, 9, 8, generator=g)
    k, v = (torch.randn(2, 2, 9, 8, generator=g) for _ in range(2))  # grouped-query: 2 K/V heads for 4 queries
    assert packing.varlen_kernel(q, seg) is None  # CPU fp32: the per-segment SDPA loop
    with packing.packed_segments(seg):
        loop = packing.scaled_dot_product_attention(q, k, v, enable_gqa=True)
    calls = []
    monkeypatch.setattr(packing, "varlen_kernel", lambda query, segments: _reference_varlen(calls))
    with packing.packed_segments(seg):
        varlen = packing.scaled_dot_product_attention(q, k, v, enable_gqa=True)
    assert calls == [([0, 5, 9, 11, 12, 13, 14, 15, 16, 17, 18], 5)]
    torch.testing.assert_close(varlen, loop, atol=1e-6, rtol=1e-6)


@pytest.mark.parametrize("family", ["llada", "sdar"])
def test_packed_sft_with_gradient_checkpointing(family, tmp_path):
    """With gradient checkpointing the recompute runs outside the packed context: the dense mask keeps it exact."""
    pytest.importorskip("dare_sft")
    from dare.diffusion.packing import needs_dense_mask
    from dare.modeling import enable_gradient_checkpointing
    from dare.plugins.manager import get_registry
    from dare.testing import tiny_model

    if get_registry().find("model_family", family) is None:
        pytest.skip(f"family {family} is not installed")
    lm = tiny_model(family, tmp_path / "m", seed=1)
    c = SupervisedCollator(lm.tokens, False, pad_to_multiple_of=lm.family.block_size(lm.model.config))
    batch = c(_examples(lm.tokens.eos_id, n=4, seed=2))
    lm.model.eval()
    loss_pad, g_pad = _sft_loss_and_grads(lm, batch, tmp_path, packing=False)
    enable_gradient_checkpointing(lm.model)
    lm.model.train()  # checkpointing applies in training mode (the presets have no dropout)
    assert needs_dense_mask(lm.model)
    loss_pack, g_pack = _sft_loss_and_grads(lm, batch, tmp_path, packing=True)
    assert abs(loss_pack.item() - loss_pad.item()) < 1e-5
    for n in g_pad:
        torch.testing.assert_close(g_pack[n], g_pad[n], atol=1e-5, rtol=1e-4, msg=n)
