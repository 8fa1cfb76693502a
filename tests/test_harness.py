"""The harness-neutral DARE model (dare.eval.harness): argument checks, gen_length rules, generation and
likelihoods equal to DARE's own paths."""

from __future__ import annotations

import pytest
import torch

from dare.errors import DareError
from dare.eval.harness import HarnessModel

SAMPLER = {"sampler": "llada", "block_length": 8, "steps": 8}


def _no_weights(monkeypatch):
    """Fail the test if weights get loaded (argument errors must come first)."""
    import dare.modeling

    def boom(*a, **k):
        raise AssertionError("weights were loaded before the arguments were checked")

    monkeypatch.setattr(dare.modeling, "load_model", boom)


@pytest.mark.parametrize("args, needle", [
    ({"temprature": 0.0}, "unknown model argument 'temprature'"),
    ({"sampler": "lada"}, "unknown sampler 'lada'"),
    ({"steps": 7, "gen_length": 16}, "sampler parameter steps: steps (7) must be a multiple"),
    ({"mc_samples": 0}, "mc_samples=0"),
    ({"mc_scheme": "antithetic"}, "mc_scheme='antithetic'"),
    ({"batch_size": "auto"}, "batch_size='auto'"),
    ({"dtype": "fp8"}, "dtype='fp8'"),
    ({"device": "cuda:0"} if not torch.cuda.is_available() else {"device": "nonsense"}, "device="),
])
def test_bad_arguments_are_named_before_loading_weights(tiny_llada_dir, monkeypatch, args, needle):
    _no_weights(monkeypatch)
    with pytest.raises(DareError) as exc:
        HarnessModel.from_args({"model": str(tiny_llada_dir), **SAMPLER, **args})
    assert needle in str(exc.value)


def test_unknown_key_message_lists_both_vocabularies(tiny_llada_dir, monkeypatch):
    _no_weights(monkeypatch)
    with pytest.raises(DareError) as exc:
        HarnessModel.from_args({"model": str(tiny_llada_dir), "sampler": "llada", "blok_length": 4})
    msg = str(exc.value)
    assert "'blok_length'" in msg and "block_length" in msg and "mc_samples" in msg


def test_missing_model_directory(tmp_path, monkeypatch):
    _no_weights(monkeypatch)
    with pytest.raises(DareError, match="model: no such directory"):
        HarnessModel.from_args({"model": str(tmp_path / "nope")})


@pytest.fixture(scope="module")
def hm(tiny_llada_dir):
    return HarnessModel.from_args({"model": str(tiny_llada_dir), **SAMPLER, "batch_size": 3, "mc_samples": 8,
                                   "device": "cpu"})


def test_gen_length_follows_max_gen_toks(hm):
    assert hm.sampler_for(13).gen_length == 16  # rounded up to a multiple of block_length 8
    assert hm.sampler_for(8).gen_length == 8
    with pytest.raises(DareError) as exc:  # 24 = 3 blocks, but steps 8 is not a multiple of 3
        hm.sampler_for(20)
    msg = str(exc.value)
    assert "max_gen_toks 20" in msg and "gen_length 24" in msg and "steps" in msg and "give gen_length" in msg
    assert hm.settings()["sampler"]["params"]["gen_length"] == "max_gen_toks rounded up to a multiple of 8"


def test_generate_matches_dare_generation_then_cuts(hm):
    from dare.sampling import DecodingBundle
    from dare.sampling.text import decode_completions, generate_texts

    prompts = ["3102200002100320", "0000123400000000", "12", "4321"]
    out = generate_texts(DecodingBundle.of(hm, hm.sampler_for(16)), prompts, batch_size=3, seed=0,
                         indices=[0, 1, 2, 3])  # what `dare eval` runs for rows 0..3
    assert hm.generate(prompts, max_gen_toks=16) == out.texts
    # max_gen_toks below the canvas: the first tokens only; until: cut before the first stop string
    comps = torch.cat([o.completions for o in out.outputs])
    assert hm.generate(prompts, max_gen_toks=13) == decode_completions(hm.tokenizer, comps[:, :13], hm.tokens)
    stop = out.texts[0][2:4] or "x"
    cut = hm.generate(prompts, until=[stop, ""], max_gen_toks=16)
    assert cut == [t.split(stop)[0] for t in out.texts]
    assert hm.generate([]) == []


def test_loglikelihood_is_the_core_estimate(hm):
    from dare.eval.likelihood import elbo_loglikelihood, encode_pair

    reqs = [("3102200002100320", "3142243142131324"), ("ab ", "cd")]
    keys = [(0, 0), (7, 2)]
    got = hm.loglikelihood(reqs, keys)
    want = elbo_loglikelihood(hm.model, hm.family, hm.tokens.mask_id, [encode_pair(hm.tokenizer, c, x) for c, x in reqs],
                              keys, mc_samples=8, seed=0, batch_size=3)
    assert got == want and got[0].num_samples == 8 and got[0].is_greedy is None
    s = hm.settings()["likelihood"]
    assert s == {"estimator": "mc-elbo", "mc_samples": 8, "mc_scheme": "stratified",
                 "seeds": "request_seed(seed, key) per request", "greedy_check": False}


def test_sampled_generation_is_keyed_by_index_not_batch(tiny_llada_dir):
    """temperature > 0: a prompt's completion depends on (seed, its index), not on its batch or position (prompts
    of one length: a batch's left padding changes the sampler's canvas, hence its draws, as in `dare eval`)."""
    hot = HarnessModel.from_args({"model": str(tiny_llada_dir), **SAMPLER, "temperature": 1.0, "batch_size": 4,
                                  "device": "cpu"})
    prompts = ["3102200002100320", "0000123400000000", "1234123412341234", "4321432143214321", "1111222233334444"]
    full = hot.generate(prompts, max_gen_toks=8, indices=[10, 11, 12, 13, 14])
    assert hot.generate(prompts[2:4], max_gen_toks=8, indices=[12, 13]) == full[2:4]
    assert hot.generate(prompts[::-1], max_gen_toks=8, indices=[14, 13, 12, 11, 10]) == full[::-1]
    assert hot.generate(prompts, max_gen_toks=8, indices=[20, 21, 22, 23, 24]) != full  # other keys, other noise
