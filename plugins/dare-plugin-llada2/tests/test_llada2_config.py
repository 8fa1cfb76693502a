"""LLaDA2 config: the release's config.json round-trips; values the architecture cannot build are refused by name."""

from __future__ import annotations

import json

import pytest
from transformers import AutoConfig

from dare.errors import CheckpointError
from dare.testing import shared_path
from dare_llada2.configuration_llada2_moe import LLaDA2ConfigError, LLaDA2MoeConfig
from dare_llada2.family import PRESETS
from dare_llada2.modeling_llada2_moe import LLaDA2MoeModelLM


@pytest.mark.parametrize("release", ["LLaDA2.0-mini", "LLaDA2.1-mini"])
def test_release_config_loads_through_autoconfig_and_round_trips(release, tmp_path):
    import dare_llada2.auto  # noqa: F401 - registers the Auto classes (DARE does it before loading a checkpoint)

    raw = json.loads((shared_path("model-cards", release) / "config.json").read_text())
    (tmp_path / "config.json").write_text(json.dumps(raw))  # carries the release's auto_map
    cfg = AutoConfig.from_pretrained(tmp_path)
    assert type(cfg) is LLaDA2MoeConfig
    assert (cfg.rotary_dim_used, cfg.head_dim, cfg.num_key_value_heads) == (64, 128, 4)
    assert [cfg.is_moe_layer(i) for i in (0, 1, 19)] == [False, True, True]
    saved = cfg.to_dict()
    for key, value in raw.items():
        if key not in ("transformers_version", "dtype"):
            assert saved[key] == value, key
    assert "rope_parameters" not in saved


def _tiny(**changes):
    cfg = dict(PRESETS["tiny"])
    cfg.update(changes)
    return cfg


@pytest.mark.parametrize(
    "changes, key",
    [
        ({"topk_group": 5}, "topk_group"),
        ({"num_experts": 10}, "n_group"),
        ({"n_group": 8}, "num_experts / n_group"),
        ({"num_experts_per_tok": 5}, "num_experts_per_tok"),
        ({"num_key_value_heads": 3}, "num_key_value_heads"),
        ({"partial_rotary_factor": 0.0625, "rotary_dim": None}, "partial_rotary_factor"),
        ({"rotary_dim": 16}, "rotary_dim"),
        ({"tie_word_embeddings": True}, "tie_word_embeddings"),
        ({"rope_scaling": {"rope_type": "yarn", "factor": 4.0}}, "rope_scaling"),
        ({"score_function": "softmax"}, "score_function"),
        ({"norm_topk_prob": False}, "norm_topk_prob"),
    ],
)
def test_inconsistent_values_are_refused_by_name(changes, key):
    with pytest.raises(LLaDA2ConfigError, match=key) as err:
        LLaDA2MoeConfig(**_tiny(**changes))
    assert isinstance(err.value, CheckpointError) and isinstance(err.value, ValueError)


@pytest.mark.parametrize(
    "changes, key",
    [
        ({"moe_intermediate_size": None}, "moe_intermediate_size"),
        ({"intermediate_size": None}, "intermediate_size"),
        ({"pad_token_id": 999}, "pad_token_id"),
    ],
)
def test_missing_sizes_are_refused_before_building(changes, key):
    cfg = LLaDA2MoeConfig(**_tiny(**changes))
    with pytest.raises(LLaDA2ConfigError, match=key):
        LLaDA2MoeModelLM(cfg)


def test_all_dense_config_needs_no_moe_sizes():
    cfg = LLaDA2MoeConfig(**_tiny(num_experts=None, moe_intermediate_size=None, n_group=99))
    assert not cfg.has_moe_layers
    model = LLaDA2MoeModelLM(cfg)
    assert not any("experts" in k for k in model.state_dict())
