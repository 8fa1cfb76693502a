"""DreamConfig: the released config.json reads and writes back unchanged; defaults as the release."""

from __future__ import annotations

import json

import pytest
import torch

from dare.errors import CheckpointError
from dare.testing import shared_path
from dare_dream import DreamConfig, DreamModel

RELEASE = ("model-cards", "Dream-v0-Instruct-7B")


def test_release_config_round_trips_every_key(tmp_path):
    from transformers import AutoConfig

    src = shared_path(*RELEASE, "config.json")
    raw = json.loads(src.read_text())
    cfg = AutoConfig.from_pretrained(src.parent)  # the file carries the release's auto_map; no remote code runs
    assert type(cfg) is DreamConfig
    cfg.save_pretrained(tmp_path)
    out = json.loads((tmp_path / "config.json").read_text())
    # transformers drops `_name_or_path` (where the file was read from) and stamps its own version
    for key in sorted(set(raw) - {"_name_or_path", "transformers_version"}):
        assert out.get(key, "<missing>") == raw[key], key
    assert out["model_type"] == "Dream"


def test_release_values_are_read_with_their_meaning():
    raw = json.loads(shared_path(*RELEASE, "config.json").read_text())
    cfg = DreamConfig(**{k: v for k, v in raw.items() if k != "model_type"})
    assert (cfg.hidden_size, cfg.num_attention_heads, cfg.num_key_value_heads, cfg.head_dim) == (3584, 28, 4, 128)
    assert (cfg.mask_token_id, cfg.pad_token_id, cfg.eos_token_id, cfg.bos_token_id) == (151666, 151643, 151643, 151643)
    assert cfg.rope_theta == 1e6 and cfg.rope_scaling is None and cfg.sliding_window is None
    assert cfg.dtype == torch.bfloat16
    assert cfg.attn_implementation == "flash_attention_2"  # recorded only: the model attends with SDPA
    assert cfg._attn_implementation != "flash_attention_2"


def test_defaults_equal_the_release_dreamconfig():
    cfg = DreamConfig()
    assert (cfg.vocab_size, cfg.hidden_size, cfg.intermediate_size, cfg.num_hidden_layers) == (151936, 4096, 22016, 32)
    assert (cfg.num_attention_heads, cfg.num_key_value_heads, cfg.max_position_embeddings) == (32, 32, 32768)
    assert (cfg.rope_theta, cfg.rms_norm_eps, cfg.mask_token_id, cfg.pad_token_id) == (10000.0, 1e-6, 151666, 151643)
    assert cfg.use_cache is False and cfg.tie_word_embeddings is False and cfg.sliding_window is None
    assert DreamConfig(use_sliding_window=True).sliding_window == 4096
    assert DreamConfig(num_attention_heads=8, num_key_value_heads=None).num_key_value_heads == 8


def test_fresh_config_writes_no_release_only_keys(tmp_path):
    DreamConfig(hidden_size=64, num_attention_heads=4).save_pretrained(tmp_path)
    out = json.loads((tmp_path / "config.json").read_text())
    assert "torch_dtype" not in out and "attn_implementation" not in out and "_write_torch_dtype" not in out


def test_unsupported_rope_scaling_is_a_clear_error():
    cfg = DreamConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=1, num_attention_heads=4,
                      num_key_value_heads=2, vocab_size=32, pad_token_id=1, mask_token_id=2,
                      rope_scaling={"rope_type": "yarn", "factor": 4.0})
    with pytest.raises(CheckpointError, match="rope_scaling"):
        DreamModel(cfg)
