"""Token-for-token parity with the official Fast-dLLM decoders (NVlabs/Fast-dLLM at a pinned commit).

The fixture (``tests/fixtures/parity/fastdllm_llada.json``, built by hand with
``tools/parity/build_fastdllm_llada.py``) stores the official ``llada/generate.py`` tokens of a tiny,
confident LLaDA rebuilt here from its seed recipe (:func:`dare.testing.seeded_weights`): no cache, prefix
and dual cache, each with the fixed schedule and with ``threshold=0.9``. Its decodes compare float64
confidences as close as 2e-16 (``min_gap``), so they pin the confidence dtype: with float32 scoring
DARE's tokens differ. Decodes where the official code met an *exact* float64 tie across the commit
boundary (``boundary_tie``: confidences equal to the last bit, e.g. both 1.0) are compared too: the official
order there is ``torch.topk``'s over the columns the release ranks (the whole sequence at a cached block's
refresh step, block plus suffix or the block later), and DARE ranks over the same columns
(``dare_llada.decoding.release_window``). The ties fixture (``fastdllm_llada_ties.json``, ``--ties``) holds 36
prefix- and 36 dual-cache fixed-schedule decodes of a model so confident that every decode meets such ties.

The Dream fixture (``fastdllm_dream.json``, ``tools/parity/build_fastdllm_dream.py``) stores the tokens of
``dream/model/generation_utils_block.py``: prefix and dual cache, threshold 0.9 and the fixed (entropy) schedule;
DARE's ``dream`` sampler gives them with ``refresh_commit: first``.
"""

from __future__ import annotations

import json

import pytest
import torch

import dare.sampling.remasking as remasking
from dare.components import SpecialTokens
from dare.testing import repo_root, seeded_weights

@pytest.fixture(autouse=True, scope="module")
def _one_thread():
    """The fixtures were built on one CPU thread; near-ties at 1e-12 must see the same float sums."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


FIXTURE = json.loads((repo_root() / "tests" / "fixtures" / "parity" / "fastdllm_llada.json").read_text())
COMBOS = sorted(FIXTURE["expected"])


@pytest.fixture(scope="module")
def llada():
    from dare_llada.family import LLaDAFamily

    r = FIXTURE["recipe"]
    family = LLaDAFamily()
    config = family.new_config(r["preset"], r["overrides"], r["vocab_size"], SpecialTokens(**r["tokens"]))
    model = seeded_weights(family.model_class()(config), r["seed"], r["out_name"], r["out_scale"],
                           (r["tokens"]["mask_id"],))
    return family, model


def _decode(llada, combo: str, prompt: list[int]) -> tuple[list[int], int]:
    """DARE's ``llada`` sampler (the decoder evaluation and rollouts run) on one prompt: (tokens, NFE)."""
    from dare_llada.sampler import LLaDASampler

    family, model = llada
    cache, rule = combo.split("/")
    d = FIXTURE["decode"]
    params = {"gen_length": d["gen_length"], "block_length": d["block_length"], "steps": d["steps"], "cache": cache}
    if rule == "threshold":
        params["threshold"] = d["threshold"]
    tokens = SpecialTokens(**FIXTURE["recipe"]["tokens"])
    out = LLaDASampler(params).generate(model, family, tokens, torch.tensor([prompt]))
    return out.sequences[0, len(prompt):].tolist(), out.nfe


def _compared(combo: str) -> list[int]:
    """Indices of the prompts compared: every decode (exact ties across the commit boundary included)."""
    return list(range(len(FIXTURE["expected"][combo])))


def _mismatches(llada, combos) -> list[tuple[str, int]]:
    return [(c, i) for c in combos for i in _compared(c)
            if _decode(llada, c, FIXTURE["prompts"][i])[0] != FIXTURE["expected"][c][i]["tokens"]]


def test_the_fixture_exercises_near_ties_and_parallel_commits():
    assert FIXTURE["source"]["commit"] == "24cc59e75f20a6384bae8c905965bb090b96388e"
    gaps = [d["min_gap"] for c in COMBOS for d in FIXTURE["expected"][c]]
    assert min(gaps) < 1e-15 and sum(g < 1e-6 for g in gaps) >= 0.9 * len(gaps)
    gen = FIXTURE["decode"]["gen_length"]
    for d in FIXTURE["expected"]["dual/threshold"]:
        assert d["nfe"] <= gen // 2  # several tokens per step (official NFE: one extra forward per block)
    assert sum(len(_compared(c)) for c in COMBOS) >= 40  # of 48 decodes


@pytest.mark.parametrize("combo", [c for c in COMBOS if c != "none/fixed"])
def test_fastdllm_rules_give_the_official_tokens(llada, combo):
    for i in _compared(combo):
        tokens, nfe = _decode(llada, combo, FIXTURE["prompts"][i])
        assert tokens == FIXTURE["expected"][combo][i]["tokens"], (combo, i)
        if combo.endswith("fixed"):
            assert nfe == FIXTURE["expected"][combo][i]["nfe"]


def test_the_cache_free_fixed_schedule_is_fastdllm_with_float64_scores_and_the_release_by_default(llada, monkeypatch):
    """Fast-dLLM's ``generate`` is the LLaDA release scoring in float64; DARE's cache-free fixed schedule keeps
    the release's logits-dtype rule, which on this confident model breaks some near-ties the other way."""
    from dare_llada import decoding

    release = _mismatches(llada, ["none/fixed"])
    assert release  # near-ties: float32 scores break some the other way
    monkeypatch.setattr(decoding, "_fastdllm", lambda params: True)
    assert _mismatches(llada, ["none/fixed"]) == []


def test_float32_confidences_break_parity(llada, monkeypatch):
    monkeypatch.setattr(remasking, "FASTDLLM_CONFIDENCE_DTYPE", torch.float32)
    bad = _mismatches(llada, [c for c in COMBOS if c != "none/fixed"])
    assert len(bad) >= 2, bad


TIES = json.loads((repo_root() / "tests" / "fixtures" / "parity" / "fastdllm_llada_ties.json").read_text())


@pytest.fixture(scope="module")
def llada_ties():
    from dare_llada.family import LLaDAFamily

    r = TIES["recipe"]
    family = LLaDAFamily()
    config = family.new_config(r["preset"], r["overrides"], r["vocab_size"], SpecialTokens(**r["tokens"]))
    model = seeded_weights(family.model_class()(config), r["seed"], r["out_name"], r["out_scale"],
                           (r["tokens"]["mask_id"],))
    return family, model


def _tie_mismatches(llada_ties, combo: str, indices) -> list[int]:
    from dare_llada.sampler import LLaDASampler

    family, model = llada_ties
    d, tokens = TIES["decode"], SpecialTokens(**TIES["recipe"]["tokens"])
    params = {"gen_length": d["gen_length"], "block_length": d["block_length"], "steps": d["steps"],
              "cache": combo.split("/")[0]}
    bad = []
    for i in indices:
        prompt = TIES["prompts"][i]
        out = LLaDASampler(params).generate(model, family, tokens, torch.tensor([prompt]))
        if out.sequences[0, len(prompt):].tolist() != TIES["expected"][combo][i]["tokens"]:
            bad.append(i)
    return bad


@pytest.mark.parametrize("combo", ["prefix/fixed", "dual/fixed"])
def test_exact_ties_break_as_the_release_breaks_them(llada_ties, combo):
    """Every decode meets exact float64 ties across the commit boundary (confidences of 1.0); ranked over the
    release's columns, DARE commits the same member of each tie as Fast-dLLM's ``torch.topk`` (every other decode
    is run to bound the test's time; all 36 match, docs/results.md)."""
    assert TIES["source"]["commit"] == FIXTURE["source"]["commit"]
    assert all(d["boundary_tie"] for d in TIES["expected"][combo])
    assert _tie_mismatches(llada_ties, combo, range(0, len(TIES["prompts"]), 2)) == []  # 18 of the 36 (time)


@pytest.mark.parametrize("combo", ["prefix/fixed", "dual/fixed"])
def test_ranking_the_block_alone_breaks_exact_ties_another_way(llada_ties, combo, monkeypatch):
    from dare_llada import decoding

    monkeypatch.setattr(decoding, "release_window", lambda cache, refresh, start, end, length: (start, end))
    assert len(_tie_mismatches(llada_ties, combo, range(12))) >= 3


def test_windowed_topk_is_topk_over_the_release_row():
    """The block's scores placed in the release's row (``-inf`` elsewhere, a padded row starting at its first
    real token): the same selection as ``torch.topk`` on that row, mapped back to the block."""
    from dare_llada.decoding import release_window, windowed_topk_transfer

    conf = torch.tensor([[1.0, 0.5, 1.0, 1.0, -torch.inf, 1.0], [0.2, 1.0, 1.0, 0.9, 1.0, 1.0]], dtype=torch.float64)
    k, first_real = torch.tensor([2, 3]), torch.tensor([0, 3])
    start, end, length = 10, 16, 24
    assert release_window("prefix", True, start, end, length) == (0, 24)
    assert release_window("dual", True, start, end, length) == (0, 24)
    assert release_window("prefix", False, start, end, length) == (10, 24)
    assert release_window("dual", False, start, end, length) == (10, 16)
    for window in [(0, 24), (10, 24), (10, 16)]:
        got = windowed_topk_transfer(conf, k, (start, end), window, first_real)
        for j in range(2):
            lo = max(int(first_real[j]), window[0])
            row = torch.full((window[1] - lo,), -torch.inf, dtype=torch.float64)
            row[start - lo : end - lo] = conf[j]
            want = torch.zeros(window[1] - lo, dtype=torch.bool)
            want[torch.topk(row, int(k[j])).indices] = True
            assert torch.equal(got[j], want[start - lo : end - lo]), (window, j)
    with pytest.raises(ValueError, match="prefix or dual"):
        release_window("none", True, start, end, length)


# --------------------------------------------------------------------------- Dream
DREAM = json.loads((repo_root() / "tests" / "fixtures" / "parity" / "fastdllm_dream.json").read_text())


@pytest.fixture(scope="module")
def dream():
    from dare_dream.family import DreamFamily

    r = DREAM["recipe"]
    family = DreamFamily()
    config = family.new_config(r["preset"], r["overrides"], r["vocab_size"], SpecialTokens(**r["tokens"]))
    model = seeded_weights(family.model_class()(config), r["seed"], r["out_name"], r["out_scale"],
                           (r["tokens"]["mask_id"],))
    return family, model


def _dream_tokens(dream, combo: str, prompt: list[int], refresh_commit: str) -> list[int]:
    """DARE's ``dream`` sampler on one prompt (greedy, ``alg`` maskgit_plus with threshold, else entropy)."""
    from dare_dream.sampler import DreamSampler

    family, model = dream
    cache, rule = combo.split("/")
    d = DREAM["decode"]
    params = {"gen_length": d["gen_length"], "steps": d["steps"], "block_length": d["block_length"], "cache": cache,
              "alg": "maskgit_plus" if rule == "threshold" else "entropy", "refresh_commit": refresh_commit}
    if rule == "threshold":
        params["threshold"] = d["threshold"]
    tokens = SpecialTokens(**DREAM["recipe"]["tokens"])
    out = DreamSampler(params).generate(model, family, tokens, torch.tensor([prompt]))
    return out.sequences[0, len(prompt):].tolist()


@pytest.mark.parametrize("combo", sorted(DREAM["expected"]))
def test_dream_with_fastdllm_refresh_rule_gives_the_official_tokens(dream, combo):
    """``refresh_commit="first"``: the refresh commits the block's first position, later steps run ``[start, stop)``
    (dream/model/generation_utils_block.py). Prefix and dual cache, threshold 0.9 and the fixed (entropy) schedule;
    many compared confidences are exactly 1.0 in float32 (``ones``)."""
    assert DREAM["source"]["commit"] == FIXTURE["source"]["commit"]
    assert sum(d["ones"] for d in DREAM["expected"][combo]) > 100
    for i, p in enumerate(DREAM["prompts"]):
        assert _dream_tokens(dream, combo, p, "first") == DREAM["expected"][combo][i]["tokens"], (combo, i)


def test_dream_default_refresh_rule_is_not_fastdllm_dream(dream):
    """DARE's default (the refresh step commits by the step's rule, the window starts one position early so every
    block position is scored) decodes differently from Fast-dLLM's Dream code on this model."""
    same = [_dream_tokens(dream, c, p, "rule") == DREAM["expected"][c][i]["tokens"]
            for c in ("dual/threshold", "prefix/fixed") for i, p in enumerate(DREAM["prompts"])]
    assert sum(same) <= len(same) // 4


DREAM_TIES = json.loads((repo_root() / "tests" / "fixtures" / "parity" / "fastdllm_dream_ties.json").read_text())


@pytest.fixture(scope="module")
def dream_ties():
    from dare_dream.family import DreamFamily

    r = DREAM_TIES["recipe"]
    family = DreamFamily()
    config = family.new_config(r["preset"], r["overrides"], r["vocab_size"], SpecialTokens(**r["tokens"]))
    model = seeded_weights(family.model_class()(config), r["seed"], r["out_name"], r["out_scale"],
                           (r["tokens"]["mask_id"],))
    return family, model


def _dream_tie_mismatches(dream_ties, combo: str, indices) -> list[int]:
    from dare_dream.sampler import DreamSampler

    family, model = dream_ties
    d, tokens = DREAM_TIES["decode"], SpecialTokens(**DREAM_TIES["recipe"]["tokens"])
    params = {"gen_length": d["gen_length"], "steps": d["steps"], "block_length": d["block_length"],
              "cache": combo.split("/")[0], "alg": "entropy", "refresh_commit": "first"}
    bad = []
    for i in indices:
        prompt = DREAM_TIES["prompts"][i]
        out = DreamSampler(params).generate(model, family, tokens, torch.tensor([prompt]))
        if out.sequences[0, len(prompt):].tolist() != DREAM_TIES["expected"][combo][i]["tokens"]:
            bad.append(i)
    return bad


@pytest.mark.parametrize("combo", ["prefix/fixed", "dual/fixed"])
def test_dream_exact_ties_break_as_the_release_breaks_them_in_its_dtype(dream_ties, combo, monkeypatch):
    """A Dream so confident that most proposals' entropies are exactly 0 in float32, the dtype Fast-dLLM's Dream code
    ranks in: scored in that dtype and ranked over that code's columns (``fastdllm_window``), all 36 decodes give its
    tokens; ranking the whole sequence breaks some ties another way (prompt 19 prefix, 31 and 33 dual). DARE's float64
    scores separate many of those ties, so with the default dtype the tokens differ (docs/architecture.md)."""
    from dare_dream import decoding

    assert DREAM_TIES["source"]["commit"] == FIXTURE["source"]["commit"]
    want = (10, 40) if combo.startswith("prefix") else (10, 18)
    assert decoding.fastdllm_window(combo.split("/")[0], 10, 18, 40) == want
    with pytest.raises(ValueError, match="prefix or dual"):
        decoding.fastdllm_window("none", 10, 18, 40)
    monkeypatch.setattr(remasking, "FASTDLLM_CONFIDENCE_DTYPE", torch.float32)
    half = range(18, len(DREAM_TIES["prompts"]))  # the second half of the 36 (time; all 36 match, docs/results.md)
    assert _dream_tie_mismatches(dream_ties, combo, half) == []
    monkeypatch.setattr(decoding, "fastdllm_window", lambda cache, start, end, length: (0, length))
    assert _dream_tie_mismatches(dream_ties, combo, half) != []
