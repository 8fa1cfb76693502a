"""``preset: official`` and the response conventions (dare.components.official, dare.rl.conventions)."""

import json
import logging

import pytest
import torch

from dare.diffusion.estimators import Pass, ScoringBatch
from dare.paramdocs import official_values
from dare.rl.conventions import attend_prompt_padding, keep_through_first_stop, score_through_first_stop
from dare_grpo.objectives.coupled_grpo import CoupledGRPOParams
from dare_grpo.objectives.d1 import D1Params
from dare_grpo.objectives.spg import SPGParams


def test_dare_preset_keeps_the_defaults():
    assert D1Params() == D1Params(preset="dare").model_copy(update={"preset": "dare"})
    p = D1Params()
    assert (p.advantage, p.clip_eps_low, p.dual_clip_c, p.response_tokens, p.prompt_padding) == (
        "grpo", 0.2, 3.0, "all", "exclude")


def test_official_preset_sets_the_official_values():
    p = D1Params(preset="official")
    assert (p.advantage, p.clip_eps_low, p.clip_eps_high, p.dual_clip_c, p.group_size, p.num_iterations, p.beta) == (
        "drgrpo", 0.5, 0.5, None, 6, 12, 0.04)
    assert (p.response_tokens, p.prompt_padding, p.p_mask_prompt) == ("through_first_eos", "attend", 0.15)
    c = CoupledGRPOParams(preset="official")
    assert (c.advantage, c.group_size, c.num_iterations, c.beta, c.full_mask_term, c.dual_clip_c) == (
        "rloo", 10, 2, 0.01, True, None)
    s = SPGParams(preset="official")
    assert (s.advantage, s.group_size, s.mc_num) == ("drgrpo", 6, 2)


def test_an_explicit_value_wins_and_is_reported(caplog):
    with caplog.at_level(logging.WARNING, logger="dare.official"):
        p = D1Params.model_validate({"preset": "official", "clip_eps_low": 0.2, "beta": 0.04})
    assert p.clip_eps_low == 0.2 and p.clip_eps_high == 0.5
    assert p.preset_kept() == ("clip_eps_low",)  # beta equals the official value: nothing to report
    assert "clip_eps_low=0.2" in caplog.text and "official: clip_eps_low=0.5" in caplog.text


def test_plugins_table_shows_the_official_column():
    table = official_values(D1Params)
    assert table["advantage"] == '"drgrpo"' and table["dual_clip_c"] == "null" and table["group_size"] == "6"
    assert "preset" not in table
    for cls in (D1Params, CoupledGRPOParams, SPGParams):  # every official param is a real field
        assert set(cls.official_values()) <= set(cls.model_fields), cls


def test_keep_through_first_stop():
    comp = torch.tensor([[5, 2, 9, 2], [5, 6, 7, 8], [3, 7, 4, 4]])
    want = torch.tensor([[1, 1, 0, 0], [1, 1, 1, 1], [1, 1, 1, 0]], dtype=torch.bool)
    assert torch.equal(keep_through_first_stop(comp, (2, 7)), torch.tensor(
        [[1, 1, 0, 0], [1, 1, 1, 0], [1, 1, 0, 0]], dtype=torch.bool))
    assert torch.equal(keep_through_first_stop(comp, (2, 4)), want)
    with pytest.raises(ValueError, match="stop_ids"):
        keep_through_first_stop(comp, ())


def _batch():
    ids = torch.tensor([[0, 11, 12, 5, 2, 2], [13, 14, 15, 6, 7, 2]])
    attn = torch.tensor([[0, 1, 1, 1, 1, 1], [1, 1, 1, 1, 1, 1]])
    return ScoringBatch(ids, attn, torch.ones(2, 3, dtype=torch.bool), prompt_length=3, mask_id=99)


def test_score_through_first_stop_zeroes_weights_only():
    b = _batch()
    pas = Pass(mask=torch.ones(1, 2, 6, dtype=torch.bool), weight=torch.full((1, 2, 3), 0.5))
    (out,) = score_through_first_stop([pas], b, (2,))
    assert torch.equal(out.mask, pas.mask)
    assert out.weight.tolist() == [[[0.5, 0.5, 0.0], [0.5, 0.5, 0.5]]]


def test_attend_prompt_padding():
    b = attend_prompt_padding(_batch())
    assert b.attention_mask.tolist() == [[1, 1, 1, 1, 1, 1], [1, 1, 1, 1, 1, 1]]
    assert bool(b.prompt_valid.all())
    assert _batch().attention_mask[0, 0] == 0  # the input is not modified


def test_dare_plugins_prints_the_official_value_beside_each_default():
    from click.testing import CliRunner

    from dare.cli import cli

    out = CliRunner().invoke(cli, ["plugins", "d1", "--json"]).output
    (entry,) = json.loads(out)
    assert entry["official"]["advantage"] == '"drgrpo"' and entry["official"]["group_size"] == "6"
    table = CliRunner(env={"COLUMNS": "250"}).invoke(cli, ["plugins", "d1"]).output
    assert "official" in table and '"drgrpo"' in table
