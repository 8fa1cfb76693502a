"""MC-ELBO likelihood scoring (dare.eval.likelihood): exact enumeration, variance control, batch invariance."""

from __future__ import annotations

import itertools
import math

import pytest
import torch

from dare.diffusion.likelihood import token_logprobs
from dare.eval.likelihood import draw_corruptions, elbo_loglikelihood, encode_pair, greedy_matches, request_seed
from dare.testing import LogitsStub, tiny_model


def exact_elbo(model, family, mask_id, ctx, cont):
    """The ELBO by enumeration: every non-empty mask subset of every block's continuation tokens, weighted
    ``(L_b / k) / (L_b * C(L_b, k))`` (the mask-count form with k ~ U{1..L_b}, masks uniform among C(L_b, k))."""
    ids = torch.tensor(list(ctx) + list(cont))
    P = len(ctx)
    size = family.block_size(model.config) if family.attention == "block" else None
    blocks = torch.arange(len(ids)) // size if size else torch.zeros(len(ids), dtype=torch.long)
    total = 0.0
    for b in sorted(set(blocks[P:].tolist())):
        pos = [i for i in range(P, len(ids)) if blocks[i] == b]
        L = len(pos)
        for k in range(1, L + 1):
            for sub in itertools.combinations(pos, k):
                mask = torch.zeros(len(ids), dtype=torch.bool)
                mask[list(sub)] = True
                with torch.no_grad():
                    logits = family.denoiser_logits(model, torch.where(mask, mask_id, ids)[None], ids[None], None)
                total += token_logprobs(logits, ids[None], mask[None]).sum().item() * (L / k) / (L * math.comb(L, k))
    return total


@pytest.fixture(scope="module")
def llada(tmp_path_factory):
    lm = tiny_model("llada", tmp_path_factory.mktemp("lik") / "llada", seed=0)
    lm.model.eval()
    return lm


@pytest.fixture(scope="module")
def sdar(tmp_path_factory):
    lm = tiny_model("sdar", tmp_path_factory.mktemp("lik") / "sdar", seed=0)
    lm.model.eval()
    return lm


def _pair(lm, ctx="ab12", cont="xyz9q"):
    tok = lm.tokenizer
    return tok(ctx, add_special_tokens=False)["input_ids"], tok(cont, add_special_tokens=False)["input_ids"]


@pytest.mark.parametrize("which", ["llada", "sdar"])
def test_estimate_converges_to_the_enumerated_elbo(which, request):
    """Full attention (LLaDA) and block diffusion (SDAR, block 4: the continuation spans 2 blocks)."""
    lm = request.getfixturevalue(which)
    ctx, cont = _pair(lm, "ab123", "xyz9q12") if which == "sdar" else _pair(lm)
    exact = exact_elbo(lm.model, lm.family, lm.tokens.mask_id, ctx, cont)
    # 24 independent estimates (seeds) of 16 stratified terms each: their mean is within 3 standard errors
    ests = torch.tensor([elbo_loglikelihood(lm.model, lm.family, lm.tokens.mask_id, [(ctx, cont)], mc_samples=16,
                                            seed=s, batch_size=16)[0].logprob for s in range(24)], dtype=torch.float64)
    se = float(ests.std() / math.sqrt(len(ests)))
    assert abs(float(ests.mean()) - exact) < 3 * se, (float(ests.mean()), exact, se)
    # one large estimate: within 3 of its own (conservative) standard errors, and closer than the small ones
    big = elbo_loglikelihood(lm.model, lm.family, lm.tokens.mask_id, [(ctx, cont)], mc_samples=256, seed=99,
                             batch_size=256)[0]
    assert big.num_samples == 256 and big.num_tokens == len(cont)
    assert abs(big.logprob - exact) < 3 * big.stderr, (big.logprob, exact, big.stderr)
    assert big.stderr < float(ests.std())


def test_stratified_counts_reduce_variance(llada):
    ctx, cont = _pair(llada, "ab12", "xyz9q3")
    def spread(scheme):
        e = [elbo_loglikelihood(llada.model, llada.family, llada.tokens.mask_id, [(ctx, cont)], mc_samples=6, seed=s,
                                scheme=scheme, batch_size=64)[0].logprob for s in range(40)]
        return float(torch.tensor(e).std())
    assert spread("stratified") < spread("uniform") < spread("bernoulli")


def test_draws_mask_only_the_continuation_with_block_weights():
    eligible = torch.tensor([False] * 3 + [True] * 6)  # context 3, continuation 6; blocks of 4: {3} and {4..7}, {8}
    gen = torch.Generator().manual_seed(0)
    mask, weight = draw_corruptions(eligible, 8, "stratified", gen, block_size=4)
    assert mask.shape == (8, 9) and not mask[:, :3].any()
    blocks = [[3], [4, 5, 6, 7], [8]]
    for j in range(8):
        for pos in blocks:  # each block: k_b >= 1 masked, weight L_b / k_b on them, 0 elsewhere
            k = int(mask[j, pos].sum())
            assert k >= 1
            assert torch.allclose(weight[j, pos], mask[j, pos].float() * len(pos) / k)
    # stratified: the 8 counts of the 4-token block cover 1..4 evenly (each twice)
    assert sorted(mask[:, 4:8].sum(1).tolist()) == [1, 1, 2, 2, 3, 3, 4, 4]


def test_request_seed_is_a_function_of_seed_and_key():
    assert request_seed(0, 3, 1) == request_seed(0, 3, 1)
    assert len({request_seed(0, 3, 1), request_seed(0, 1, 3), request_seed(1, 3, 1), request_seed(0, 3)}) == 4
    assert 0 <= request_seed(12345, 2**40, -7) < 2**63
    from dare.randomness import STREAMS, key_seed

    assert request_seed(4, 3, 1) == key_seed(4, STREAMS["likelihood"], 3, 1)  # DARE's keyed streams, own stream id
    with pytest.raises(ValueError):
        request_seed(0, "doc")


class _RowwiseFamily:
    """A full-attention family over a LogitsStub whose logits are computed row by row (gathers and
    elementwise ops only), so batching cannot change a row's numbers: any difference across batch sizes
    would come from the scorer itself."""

    attention = "full"

    def __init__(self, block: int | None = None):
        self.block = block
        if block:
            self.attention = "block"

    def block_size(self, config):
        return self.block

    def denoiser_logits(self, model, noisy, clean, attention_mask=None):
        return model(noisy).logits

    def logits(self, model, ids, attention_mask=None):
        return model(ids).logits


def _rowwise_stub(V=11, mask_id=10):
    table = torch.randn(V, V, generator=torch.Generator().manual_seed(1))

    def fn(ids):
        masked = (ids == mask_id).float().sum(dim=1, keepdim=True)  # [B, 1]: depends on the row only
        return table[ids] * (1.0 + 0.1 * masked[..., None]) + 0.01 * torch.arange(ids.shape[1])[None, :, None]

    stub = LogitsStub(fn)
    stub.config = None
    return stub


@pytest.mark.parametrize("block", [None, 3])
def test_estimates_identical_across_batch_sizes_and_request_order(block):
    stub, fam = _rowwise_stub(), _RowwiseFamily(block)
    g = torch.Generator().manual_seed(2)
    reqs = [(torch.randint(0, 10, (p,), generator=g).tolist(), torch.randint(0, 10, (c,), generator=g).tolist())
            for p, c in [(3, 5), (0, 4), (7, 2), (3, 5), (5, 1), (2, 8)] * 3]
    keys = [(100, i) for i in range(len(reqs))]
    runs = [elbo_loglikelihood(stub, fam, 10, reqs, keys, mc_samples=8, seed=5, batch_size=b) for b in (1, 4, 16)]
    assert runs[0] == runs[1] == runs[2]  # every field, the terms included
    # a request's estimate depends on its key, not on its position or neighbours
    order = list(reversed(range(len(reqs))))
    back = elbo_loglikelihood(stub, fam, 10, [reqs[i] for i in order], [keys[i] for i in order], mc_samples=8, seed=5)
    assert [back[order.index(i)] for i in range(len(reqs))] == runs[0]
    # identical requests under different keys get different draws
    assert runs[0][0].terms != runs[0][3].terms


def test_real_model_batch_sizes_agree(llada):
    """The tiny LLaDA on Sudoku-shaped rows (16-digit context, 16-digit continuation)."""
    tok = llada.tokenizer
    reqs = [encode_pair(tok, "3102200002100320", s) for s in ("3142243142131324", "3142241142133324", "1234")] * 2
    runs = [elbo_loglikelihood(llada.model, llada.family, llada.tokens.mask_id, reqs, mc_samples=8, seed=0,
                               batch_size=b) for b in (1, 4, 16)]
    for a, b, c in zip(*runs):
        # same draws; logits of a batched GEMM may differ in the last bits across batch shapes (none here on the
        # CPU we measured: estimates were bit-identical; MoE models route by batch and may differ ~1e-7)
        assert math.isclose(a.logprob, b.logprob, rel_tol=1e-6) and math.isclose(a.logprob, c.logprob, rel_tol=1e-6)


def test_empty_continuation_and_bad_arguments(llada):
    ctx, _ = _pair(llada)
    (e,) = elbo_loglikelihood(llada.model, llada.family, llada.tokens.mask_id, [(ctx, [])], mc_samples=4)
    assert e.logprob == 0.0 and e.num_tokens == 0
    for kw, msg in [({"mc_samples": 0}, "mc_samples"), ({"batch_size": 0}, "batch_size"), ({"scheme": "x"}, "scheme")]:
        with pytest.raises(ValueError, match=msg):
            elbo_loglikelihood(llada.model, llada.family, llada.tokens.mask_id, [(ctx, ctx)], **kw)


def test_greedy_matches_follows_the_model():
    V, mask_id, target = 6, 5, [3, 1, 4]

    def fn(ids):  # always predicts `target` at positions 2.. (confidence rising left to right)
        logits = torch.zeros(ids.shape[0], ids.shape[1], V)
        for i, t in enumerate(target):
            logits[:, 2 + i, t] = 5.0 + i
        return logits

    stub, fam = LogitsStub(fn), _RowwiseFamily()
    assert greedy_matches(stub, fam, mask_id, [0, 0], target)
    assert stub.calls == 3  # one forward per continuation token
    assert not greedy_matches(stub, fam, mask_id, [0, 0], [3, 1, 2])


def test_encode_pair_moves_trailing_space_and_cuts_the_context(llada):
    tok = llada.tokenizer
    ctx, cont = encode_pair(tok, "abc ", "de")
    assert tok.decode(ctx) == "abc" and tok.decode(cont) == " de"
    ctx, cont = encode_pair(tok, "abcdef", "xy", max_length=5)
    assert tok.decode(ctx) == "def" and tok.decode(cont) == "xy"
    from dare.errors import DareError

    with pytest.raises(DareError, match="does not fit"):
        encode_pair(tok, "a", "xyz", max_length=2)
