"""One decoder call's settings (dare.sampling.options.DecodeOptions) and the samplers' shared KV-cache checks
(dare.sampling.checks)."""

from __future__ import annotations

import pytest

from dare.components import SpecialTokens
from dare.errors import DareError
from dare.sampling.checks import bound_kv_logits, cache_problems
from dare.sampling.options import DecodeOptions

TOKENS = SpecialTokens(mask_id=3, eos_id=1, pad_id=1)


class _NoCache:
    name = "plain"


class _Cached:
    name = "cached"

    def kv_logits(self, model, ids, am, past, start, end, use_cache):
        return (model, ids, am, past, start, end, use_cache)


def test_options_of_builds_unvalidated_params_with_defaults():
    pytest.importorskip("dare_llada")
    from dare_llada.params import LLaDASamplerParams

    opts = DecodeOptions.of(LLaDASamplerParams, TOKENS, "gen", None, steps=6, block_length=5)
    assert (opts.params.steps, opts.params.block_length, opts.params.gen_length) == (6, 5, 128)  # 128: the default
    assert (opts.tokens, opts.generator, opts.kv_logits) == (TOKENS, "gen", None)
    with pytest.raises(ValueError, match="multiple of block_length"):  # what validation would refuse
        LLaDASamplerParams(steps=6, block_length=5)
    with pytest.raises(AttributeError):
        opts.generator = None  # frozen


def test_llada_decode_options_give_the_official_ids():
    pytest.importorskip("dare_llada")
    from dare_llada.decoding import decode_options

    opts = decode_options(steps=4)
    assert (opts.tokens.mask_id, opts.tokens.eos_id, opts.tokens.pad_id, opts.tokens.eot_id) == (126336, 126081, 126081,
                                                                                                 126348)
    assert opts.params.steps == 4


def test_cache_problems_name_the_path_and_the_fix():
    assert cache_problems("none", _NoCache(), "sampler") == []
    assert cache_problems("dual", None, "sampler") == []  # no family known at validation
    assert cache_problems("dual", _Cached(), "sampler") == []
    assert cache_problems("prefix", _NoCache(), "sampler") == [(
        "sampler.params.cache", "cache 'prefix' needs the model family's cached forward (kv_logits), which family "
        "'plain' does not provide; use cache: none")]


def test_bound_kv_logits_binds_the_model_or_refuses():
    assert bound_kv_logits("llada", "none", "model", _NoCache()) is None
    fn = bound_kv_logits("dream", "dual", "model", _Cached())
    assert fn("ids", "am", "past", 2, 4, True) == ("model", "ids", "am", "past", 2, 4, True)
    with pytest.raises(DareError, match=r"^sampler dream: cache 'dual' needs the model family's cached forward "
                                        r"\(kv_logits\), which family 'plain' does not provide; use cache: none$"):
        bound_kv_logits("dream", "dual", "model", _NoCache())


def test_a_decoding_bundle_hands_its_parts_to_the_sampler():
    """``DecodingBundle`` (what generate_texts, sample_completions and evaluate_benchmark take): built from a loaded
    model, its ``generate`` is the sampler's call with the bundle's model, family and special ids."""
    from types import SimpleNamespace

    from dare.sampling import DecodingBundle

    calls = []

    class Recorder:
        def generate(self, model, family, tokens, input_ids, attention_mask, generator=None):
            calls.append((model, family, tokens, input_ids, attention_mask, generator))
            return "output"

    loaded = SimpleNamespace(model="model", family="family", tokens=TOKENS, tokenizer="tokenizer", path=None)
    sampler = Recorder()
    decoding = DecodingBundle.of(loaded, sampler)
    assert (decoding.model, decoding.family, decoding.tokens, decoding.tokenizer, decoding.sampler) == (
        "model", "family", TOKENS, "tokenizer", sampler)
    assert decoding.generate("ids", "mask", generator="gen") == "output"
    assert calls == [("model", "family", TOKENS, "ids", "mask", "gen")]
    assert DecodingBundle.of(loaded, sampler, model="unwrapped").model == "unwrapped"
    assert decoding.replace(sampler=None).sampler is None and decoding.sampler is sampler
    with pytest.raises(AttributeError):
        decoding.model = "other"  # frozen
    with pytest.raises(ValueError, match="no sampler"):
        DecodingBundle.of(loaded).generate("ids", "mask")
    assert len(calls) == 1
