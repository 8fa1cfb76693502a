"""Model-file integrity before any weights load: damaged safetensors, NaN/inf weights, tokenizers that do not
fit the model, checked on tiny models and on the real model cards."""

from __future__ import annotations

import json
import shutil

import pytest
from safetensors.torch import load_file, save_file

from dare.errors import CheckpointError
from dare.modeling.checkpoint import (
    MIN_TOKENIZER_COVERAGE,
    check_tokenizer_fits,
    checkpoint_shapes,
    first_nonfinite_tensor,
    load_model,
    tokenizer_fit_problem,
)
from dare.testing import shared_path


@pytest.fixture
def model_copy(tiny_llada_dir, tmp_path):
    d = tmp_path / "model"
    shutil.copytree(tiny_llada_dir, d)
    return d


# ----------------------------------------------------------------------------- non-finite weights (item 1)
@pytest.mark.parametrize("bad", [float("inf"), float("-inf"), float("nan")])
def test_a_starting_model_with_one_non_finite_weight_is_refused_at_load(model_copy, bad):
    f = model_copy / "model.safetensors"
    state = load_file(str(f))
    name = sorted(state)[3]
    state[name].view(-1)[7] = bad
    save_file(state, str(f), metadata={"format": "pt"})
    assert first_nonfinite_tensor(model_copy) == (f, name, 1)
    with pytest.raises(CheckpointError) as err:
        load_model(model_copy)
    msg = str(err.value)
    assert msg.startswith(f"{f}: tensor {name!r} holds 1 NaN or infinite value, so this model produces NaN logits")
    assert "\n" not in msg


@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "float16", "float64"])
def test_nonfinite_count_is_exact_and_huge_finite_values_are_not_flagged(dtype):
    import torch

    from dare.modeling.integrity import _nonfinite_count

    t = torch.randn(1000, generator=torch.Generator().manual_seed(0)).to(getattr(torch, dtype))
    assert _nonfinite_count(t) == 0
    for bad in (float("nan"), float("inf"), float("-inf")):
        u = t.clone()
        u[[5, 7, 900]] = bad
        assert _nonfinite_count(u) == 3
    mixed = t.clone()
    mixed[1], mixed[2] = float("inf"), float("-inf")  # their sum is NaN: still 2 non-finite values
    assert _nonfinite_count(mixed) == 2
    huge = torch.full((100,), torch.finfo(getattr(torch, dtype)).max / 2, dtype=getattr(torch, dtype))
    assert _nonfinite_count(huge) == 0  # the sum overflows; the exact count says finite


def test_finite_models_pass_and_the_check_streams_every_tensor(tiny_llada_dir):
    assert first_nonfinite_tensor(tiny_llada_dir) is None
    assert load_model(tiny_llada_dir).model is not None


# ----------------------------------------------------------------------------- damaged safetensors (item 9)
@pytest.mark.parametrize("damage,what", [
    ("empty", "is empty (0 bytes)"),
    ("truncated", "is truncated or damaged"),
    ("random", "is not a safetensors file"),
    ("padded", "is truncated or damaged"),
])
def test_damaged_safetensors_name_the_file_without_reading_tensors(model_copy, damage, what):
    import os

    f = model_copy / "model.safetensors"
    data = f.read_bytes()
    f.write_bytes({"empty": b"", "truncated": data[: len(data) // 2], "random": os.urandom(4096),
                   "padded": data + b"\0" * 8}[damage])
    for fn in (checkpoint_shapes, load_model):
        with pytest.raises(CheckpointError) as err:
            fn(model_copy)
        assert str(err.value).startswith(f"{f} {what}") and "\n" not in str(err.value)


def test_a_missing_shard_of_an_index_is_named(tiny_llada_dir, tmp_path):
    from transformers import AutoModel

    d = tmp_path / "sharded"
    AutoModel.from_pretrained(tiny_llada_dir).save_pretrained(d, max_shard_size="40KB")
    shards = sorted(json.loads((d / "model.safetensors.index.json").read_text())["weight_map"].values())
    (d / shards[-1]).unlink()
    with pytest.raises(CheckpointError, match=f"weight shard '{shards[-1]}' named by model.safetensors.index.json is missing"):
        checkpoint_shapes(d)


# ----------------------------------------------------------------------------- tokenizer vs model (item 6)
class _Tok:
    """A tokenizer stand-in of a given size (model cards without vocabulary files cannot build the real one)."""

    def __init__(self, n: int):
        self.n = n

    def __len__(self):
        return self.n

    def get_vocab(self):
        return {"<last>": self.n - 1}


def _card_config(name):
    from transformers import AutoConfig

    from dare.plugins.manager import register_auto_classes

    register_auto_classes()  # the families' config classes (get_registry() alone imports no family module)
    return AutoConfig.from_pretrained(str(shared_path("model-cards", name)))


@pytest.mark.parametrize("card", ["Dream-v0-Instruct-7B", "SDAR-1dot7B-Chat"])
def test_released_tokenizers_fit_their_models(card):
    """Cards with their vocabulary files: the real tokenizer is accepted (vocab_size is padded past it)."""
    from transformers import AutoTokenizer

    from dare.plugins.manager import get_registry

    d = shared_path("model-cards", card)
    config, tok = _card_config(card), AutoTokenizer.from_pretrained(str(d))
    fam = get_registry().family_for_model_type(config.model_type).create()
    assert len(tok) < config.vocab_size and len(tok) / config.vocab_size > 0.99
    tokens = check_tokenizer_fits(config, tok, fam, where=d)
    assert tokens.mask_id == config.mask_token_id == len(tok) - 1


@pytest.mark.parametrize("card,n_tokens", [
    ("LLaDA-8B-Instruct", 126349),  # tokenizer_config.json: added tokens up to id 126348; embedding 126464
    ("LLaDA2.0-mini", 156893),  # pad_token_id 156892 is the last id it must hold at least; embedding 157184
    ("LLaDA2.1-mini", 156893),
])
def test_padded_vocab_sizes_of_cards_without_vocabulary_files_are_accepted(card, n_tokens):
    """These cards ship no tokenizer.json: the rule is applied to the size their files declare."""
    config = _card_config(card)
    if card.startswith("LLaDA-8B"):
        ids = [int(k) for k in json.loads((shared_path("model-cards", card) / "tokenizer_config.json").read_text())
               ["added_tokens_decoder"]]
        assert max(ids) + 1 == n_tokens
    assert tokenizer_fit_problem(config, _Tok(n_tokens)) is None
    assert tokenizer_fit_problem(config, _Tok(27)) is not None  # the same card without its vocabulary


@pytest.mark.parametrize("card", ["SDAR-4B-Chat", "SDAR-8B-Chat", "SDAR-30B-A3B-Chat"])
def test_cards_missing_their_vocabulary_files_are_refused(card):
    """No vocab.json/merges.txt: transformers builds a 27-token tokenizer of the added tokens (mask id 26)."""
    from transformers import AutoTokenizer

    from dare.plugins.manager import get_registry

    d = shared_path("model-cards", card)
    config, tok = _card_config(card), AutoTokenizer.from_pretrained(str(d))
    assert len(tok) == 27 and config.vocab_size == 151936
    fam = get_registry().family_for_model_type(config.model_type).create()
    with pytest.raises(CheckpointError) as err:
        check_tokenizer_fits(config, tok, fam, where=d)
    assert str(err.value) == (
        f"the tokenizer in {d} has only 27 tokens for a model with 151936 embedding rows (config.json vocab_size); "
        "released models pad vocab_size past their tokenizer by a few hundred rows at most, so the vocabulary files "
        "(tokenizer.json, or vocab.json and merges.txt) are most likely missing: copy them from the model's release")


def test_the_rule_by_hand():
    from types import SimpleNamespace

    from dare.components import SpecialTokens

    cfg = SimpleNamespace(vocab_size=1000)
    assert tokenizer_fit_problem(cfg, _Tok(1000)) is None
    assert tokenizer_fit_problem(cfg, _Tok(int(1000 * MIN_TOKENIZER_COVERAGE))) is None
    assert "only 499 tokens" in tokenizer_fit_problem(cfg, _Tok(499))
    assert "token ids up to 1000 but the model has 1000 embedding rows" in tokenizer_fit_problem(cfg, _Tok(1001))
    # LLaDA pads vocab_size to embedding_size: the embedding rows decide
    assert tokenizer_fit_problem(SimpleNamespace(vocab_size=900, embedding_size=1000), _Tok(950)) is None
    bad = SpecialTokens(mask_id=5, eos_id=1000, pad_id=1)
    assert "the eos token id 1000" in tokenizer_fit_problem(cfg, _Tok(1000), bad)
    assert "mask token id 990 is not a token" in tokenizer_fit_problem(cfg, _Tok(900), SpecialTokens(990, 1, 1))
