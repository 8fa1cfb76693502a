"""dare.sampling.sample_tokens: the official block rule by hand, Dream's rule against dare_dream's copy, and the
non-finite-logits check."""

from __future__ import annotations

import dataclasses
import itertools
import math

import pytest
import torch

from dare.errors import DareError
from dare.sampling import BLOCK_RULE, DREAM_RULE, NonFiniteLogitsError, require_finite_logits, sample_tokens


# --------------------------------------------------------------------------- the block decoders' rule
def test_greedy_confidence_is_the_untempered_unfiltered_probability():
    logits = torch.tensor([[[2.0, 1.0, 0.0]]])
    x0, conf = sample_tokens(logits, temperature=0.0, top_k=1, top_p=0.5)  # filters do not touch greedy
    assert x0.item() == 0 and conf.item() == pytest.approx(math.exp(2) / (math.exp(2) + math.e + 1), abs=1e-6)
    x0, conf = sample_tokens(logits, temperature=1.0, top_k=1)  # SDAR's official greedy emulation
    assert x0.item() == 0 and conf.item() == 1.0


def test_top_k_is_applied_before_top_p():
    # p = [.5, .3, .2]: top-k 2 first ([.625, .375]), then top-p .6 keeps token 0 alone -> confidence 1;
    # the reverse order (Dream's) keeps tokens 0 and 1 (confidence .625 for token 0)
    logits = torch.tensor([0.5, 0.3, 0.2]).log()[None]
    for seed in range(5):
        x0, conf = sample_tokens(logits, 1.0, top_k=2, top_p=0.6, generator=torch.Generator().manual_seed(seed))
        assert x0.tolist() == [0] and conf.item() == pytest.approx(1.0)
    conf = torch.stack([sample_tokens(logits, 1.0, 2, 0.6, rule=DREAM_RULE, generator=torch.Generator().manual_seed(s))[1]
                        for s in range(20)])
    assert set(torch.round(conf, decimals=3).flatten().tolist()) == {0.625, 0.375}


def test_tempered_draw_is_one_multinomial_and_its_probability_is_the_confidence():
    logits = torch.tensor([[2.0, 0.0, -1.0]] * 6)
    tok, p = sample_tokens(logits, temperature=2.0, generator=torch.Generator().manual_seed(0))
    probs = torch.softmax(logits / 2, -1)
    assert torch.equal(tok, torch.multinomial(probs, 1, generator=torch.Generator().manual_seed(0)).squeeze(-1))
    assert torch.equal(p, probs.gather(-1, tok[:, None]).squeeze(-1))
    assert len(set(tok.tolist())) > 1  # the draw is not greedy


def test_margin_and_neg_entropy_by_hand():
    logits = torch.tensor([[0.0, math.log(3.0), math.log(6.0)]])  # p = [.1, .3, .6]
    tok, margin = sample_tokens(logits, confidence="margin")
    assert tok.tolist() == [2] and margin.item() == pytest.approx(0.3, abs=1e-6)
    _, h = sample_tokens(logits, confidence="neg_entropy")
    assert h.item() == pytest.approx(sum(p * math.log(p + 1e-10) for p in (0.1, 0.3, 0.6)), abs=1e-6)
    with pytest.raises(ValueError, match="temperature"):
        sample_tokens(logits, temperature=-1.0)


# --------------------------------------------------------------------------- Dream's rule
def _fails_simplex_check(logits, temperature, top_p, top_k) -> bool:
    """Whether ``torch.distributions.Categorical`` would reject this call's probabilities (Dream's fallback)."""
    if temperature > 0:
        logits = logits / temperature
    from dare.sampling import filter_top_k_top_p

    probs = torch.softmax(filter_top_k_top_p(logits, top_k, top_p, fill=torch.finfo(logits.dtype).min), -1)
    p = probs / probs.sum(-1, keepdim=True)
    return not bool(((p >= 0).all(-1) & ((p.sum(-1) - 1).abs() < 1e-6)).all())


def test_dream_rule_matches_dare_dream_sample_tokens_for_every_setting():
    dream = pytest.importorskip("dare_dream.sampler")
    settings = itertools.product(
        [torch.float32, torch.bfloat16],
        [0.0, 0.5, 1.0, 1.7],
        [None, 0.9],
        [None, 5],
        ["probability", "margin", "neg_entropy"],
        [False, True],
    )
    fallbacks = 0
    for i, (dtype, temperature, top_p, top_k, confidence, quirks) in enumerate(settings):
        logits = (3 * torch.randn(24, 50, generator=torch.Generator().manual_seed(i))).to(dtype)
        rule = dataclasses.replace(DREAM_RULE, validate_simplex=quirks)
        g_ref, g_new = torch.Generator().manual_seed(i), torch.Generator().manual_seed(i)
        conf_ref, tok_ref = dream.sample_tokens(logits, temperature, top_p, top_k, confidence, g_ref, quirks)
        tok, conf = sample_tokens(logits, temperature, top_k, top_p, confidence=confidence, rule=rule, generator=g_new)
        where = f"setting {i}: {dtype}, T={temperature}, top_p={top_p}, top_k={top_k}, {confidence}, quirks={quirks}"
        assert torch.equal(tok, tok_ref), where
        assert conf.dtype == conf_ref.dtype and torch.equal(conf, conf_ref), where
        assert torch.equal(g_new.get_state(), g_ref.get_state()), where  # the RNG advanced alike
        fallbacks += quirks and temperature > 0 and _fails_simplex_check(logits, temperature, top_p, top_k)
    assert fallbacks > 0  # the release_quirks argmax fallback was exercised (bf16 rounding)

    # generator=None: both draw from the global RNG in the same order
    logits = torch.randn(8, 30, generator=torch.Generator().manual_seed(99))
    torch.manual_seed(7)
    ref = dream.sample_tokens(logits, 0.8, 0.95, None, "probability", None, False)[1]
    torch.manual_seed(7)
    assert torch.equal(sample_tokens(logits, 0.8, None, 0.95, rule=DREAM_RULE)[0], ref)


# --------------------------------------------------------------------------- non-finite logits
@pytest.mark.parametrize("bad", [float("nan"), float("inf"), float("-inf")])
def test_non_finite_logits_are_refused_with_where_and_why(bad):
    logits = torch.zeros(2, 3, 5)
    require_finite_logits(logits, "completion block 0, denoising step 0")
    banned = logits.clone()
    banned[..., 4] = -torch.inf  # a banned token (logits_eos_inf, top-k, a hook) is not an error
    require_finite_logits(banned, "completion block 0, denoising step 0")
    if bad == float("-inf"):
        logits[1, 2, :] = bad  # no token of position (1, 2) can be chosen
    else:
        logits[1, 2, 4] = bad
    with pytest.raises(NonFiniteLogitsError) as err:
        require_finite_logits(logits, "completion block 3, denoising step 1 (0-based)")
    msg = str(err.value)
    assert isinstance(err.value, DareError)
    assert "non-finite logits at completion block 3, denoising step 1 (0-based)" in msg
    want = {"nan": "1 NaN and 0 infinite", "inf": "0 NaN and 1 infinite", "-inf": "0 NaN and 5 infinite"}[str(bad)]
    assert want in msg and "among 30" in msg
    assert ("1 position(s) without any finite logit" if bad == float("-inf") else "0 position(s)") in msg
    assert "diverged" in msg and "corrupted" in msg
    assert BLOCK_RULE.filter_order == "top_k_first"  # the default rule is the block decoders'
