"""The pieces TraceRL's SDAR release needs, with hand-computed values: block rounds, the block mask anchored at the
prompt end, the population-std advantage, the group-accuracy filter, the overlong rule, the rollout conventions of
block families, the per-family official table and its resolution from a spec's model family."""

from __future__ import annotations

import math

import pytest
import torch

from dare.components.official import OfficialParams, OfficialSetting
from dare.diffusion.block import block_diffusion_mask
from dare.diffusion.estimators import ScoringBatch, TrajectoryEstimator
from dare.diffusion.estimators.trajectory import block_round_ids
from dare.rl.advantages import grpo_advantages, groups_in_range, overlong_as_incorrect
from dare.rl.conventions import align_blocks_at_prompt_end, attend_response_padding, mask_after_response


def test_block_round_ids_rank_the_steps_inside_each_block():
    steps = torch.tensor([[0, 1, 1, 2, 5, 4, -1, -1]])
    valid = torch.tensor([[1, 1, 1, 1, 1, 1, 0, 0]], dtype=torch.bool)
    zero = torch.tensor([0])
    assert block_round_ids(steps, valid, 4, zero).tolist() == [[0, 1, 1, 2, 1, 0, -1, -1]]
    # shrink 2: the release's collapse_k_unique inside each block (ranks 0,1 -> 0; 2 -> 1)
    assert block_round_ids(steps, valid, 4, zero, shrink=2).tolist() == [[0, 0, 0, 1, 0, 0, -1, -1]]
    # one completion position before the first boundary: blocks [0], [1..4], [5..7]
    assert block_round_ids(steps, valid, 4, torch.tensor([3])).tolist() == [[0, 0, 0, 1, 2, 0, -1, -1]]
    with pytest.raises(ValueError, match="block_size"):
        block_round_ids(steps, valid, 0, zero)


def test_block_round_passes_bundle_step_r_of_every_block():
    ids = torch.tensor([[9, 9, 5, 6, 7, 8, 10, 11, 12, 13]])
    attn = torch.tensor([[0, 1, 1, 1, 1, 1, 1, 1, 1, 1]])
    steps = torch.tensor([[0, 1, 1, 2, 5, 4, 4, 7]])
    batch = align_blocks_at_prompt_end(ScoringBatch(ids, attn, torch.ones(1, 8, dtype=torch.bool), 2, 99, steps))
    passes = TrajectoryEstimator(block_rounds=4).draw(batch, None)
    assert [p.key for p in passes] == [0, 1, 2]
    # round 0: step 0 of block 0 and step 4 of block 1 scored, each block masked from its round-0 step on
    assert passes[0].weight[0, 0].tolist() == [1, 0, 0, 0, 0, 1, 1, 0]
    assert passes[0].mask[0, 0, 2:].int().tolist() == [1, 1, 1, 1, 1, 1, 1, 1]
    assert passes[1].weight[0, 0].tolist() == [0, 1, 1, 0, 1, 0, 0, 0]
    assert passes[1].mask[0, 0, 2:].int().tolist() == [0, 1, 1, 1, 1, 0, 0, 1]
    assert passes[2].weight[0, 0].tolist() == [0, 0, 0, 1, 0, 0, 0, 1]
    # anchored at the first real token (column 1) instead, the completion's blocks are positions [0..2] | [3..6] | [7]
    first = TrajectoryEstimator(block_rounds=4).draw(ScoringBatch(ids, attn, torch.ones(1, 8, dtype=torch.bool), 2, 99,
                                                                 steps), None)
    assert first[0].weight[0, 0].tolist() == [1, 0, 0, 1, 0, 0, 0, 1] and len(first) == 3
    assert first[1].weight[0, 0].tolist() == [0, 1, 1, 0, 0, 1, 1, 0]
    assert first[2].weight[0, 0].tolist() == [0, 0, 0, 0, 1, 0, 0, 0]


def test_block_mask_anchored_at_an_offset():
    # 3 positions, block 2, a block starting at position 1: blocks -1 | 0 0
    m = block_diffusion_mask(3, 2, offset=torch.tensor([1]))[0, 0].int()
    noisy_q2 = m[2].tolist()  # noisy query 2: noisy keys 1, 2 (its block), clean key 0 (earlier block)
    assert noisy_q2 == [0, 1, 1, 1, 0, 0]
    assert m[5].tolist() == [0, 0, 0, 1, 1, 1]  # clean query 2: clean keys of blocks <= its own
    assert m[0].tolist() == [1, 0, 0, 0, 0, 0] and m[3].tolist() == [0, 0, 0, 1, 0, 0]
    assert torch.equal(block_diffusion_mask(4, 2, offset=torch.tensor([0])), block_diffusion_mask(4, 2))


def test_population_std_advantage_and_a_zero_epsilon():
    r = torch.tensor([1.0, 0.0, 0.0, 0.0, 1.0, 1.0, 1.0, 1.0])
    pop = grpo_advantages(r, 4, std_eps=0.0, unbiased=False)
    s = math.sqrt(0.25 * 0.75)
    assert pop.tolist() == pytest.approx([0.75 / s, -0.25 / s, -0.25 / s, -0.25 / s, 0, 0, 0, 0], rel=1e-6)
    assert grpo_advantages(r, 4, std_eps=0.0).tolist()[:2] == pytest.approx([1.5, -0.5], rel=1e-6)  # unbiased: 0.5
    with pytest.raises(ValueError, match="std_eps"):
        grpo_advantages(r, 4, std_eps=-1.0)


def test_group_filter_and_overlong_rule():
    r = torch.tensor([1.0, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 1, 1, 0, 1])
    assert groups_in_range(r, 4, 0.2, 0.8).tolist() == [False] * 4 + [True] * 4 + [False] * 4 + [True] * 4
    got = overlong_as_incorrect(torch.tensor([1.0, 1.0, 0.5]), torch.tensor([10, 7, 8]), 10, 2)
    assert got.tolist() == [0.0, 1.0, 0.0]  # lengths >= 10 - 2 are incorrect
    # the lengths the trainer gives it: through the first stop id, EOS padding not counted (LLaDA's too)
    from dare.rl.rollout import content_lengths

    assert content_lengths(torch.tensor([[5, 2, 2, 2], [5, 6, 7, 8], [3, 9, 4, 2]]), (2, 9)).tolist() == [2, 4, 2]


def test_response_padding_is_attended_as_masks():
    ids = torch.tensor([[0, 5, 6, 7, 2, 0]])
    batch = ScoringBatch(ids, torch.tensor([[0, 1, 1, 1, 1, 0]]), torch.tensor([[1, 1, 1, 0]], dtype=torch.bool), 2, 99)
    out = attend_response_padding(batch)
    assert out.attention_mask.tolist() == [[0, 1, 1, 1, 1, 1]] and batch.attention_mask[0, 5] == 0
    (pas,) = TrajectoryEstimator().draw(ScoringBatch(ids, out.attention_mask, out.completion_mask, 2, 99,
                                                     torch.tensor([[0, 0, 0, -1]])), None)
    (masked,) = mask_after_response([pas], out)
    assert masked.mask[0, 0].int().tolist() == [0, 0, 1, 1, 1, 1] and masked.weight[0, 0].tolist() == [1, 1, 1, 0]


class _Table(OfficialParams):
    official = (OfficialSetting("a", 1, "o/r@abcdef1:x.py:1", family="llada"),
                OfficialSetting("a", 2, "o/r@abcdef1:y.py:1", family="sdar"),
                OfficialSetting("b", 3, "o/r@abcdef1:z.py:1"))
    a: int = 0
    b: int = 0


def test_official_rows_per_family():
    assert _Table.official_table_families() == ("llada", "sdar")
    assert _Table.official_values("sdar") == {"a": 2, "b": 3}
    assert _Table.official_values("llada") == _Table.official_values() == {"a": 1, "b": 3}
    assert _Table.official_sources("sdar")["a"].endswith("y.py:1")
    p = _Table.model_validate({"preset": "official"}, context={"family": "sdar"})
    assert (p.a, p.b) == (2, 3)
    assert _Table.model_validate({"preset": "official", "a": 5}, context={"family": "sdar"}).preset_kept() == ("a",)


def _resolve(tmp_path, family: str, sampler: str, params: str):
    from dare.runspec import load_spec, resolve_spec

    spec_path = tmp_path / "spec.yaml"
    spec_path.write_text(
        f"model: {{new: {{family: {family}, preset: tiny}}}}\n"
        f"data: {{train: {{path: {tmp_path / 'rows.jsonl'}}}}}\n"
        f"algorithm: {{name: tracerl, params: {params}}}\n"
        f"sampler: {sampler}\n"
        "rewards: [{name: math}]\n"
        "train: {max_steps: 1, learning_rate: 1.0e-6}\n"
        f"output: {{dir: {tmp_path / 'run'}}}\n")
    (tmp_path / "rows.jsonl").write_text('{"prompt": "1+1=", "answer": "2"}\n')
    return resolve_spec(load_spec(spec_path, check=False), str(spec_path))


SDAR_SAMPLER = "{name: sdar, params: {gen_length: 8, block_length: 4, denoising_steps: 4, temperature: 1.0}}"
LLADA_SAMPLER = "{name: llada, params: {gen_length: 8, steps: 8, block_length: 8, temperature: 1.0}}"


def test_the_spec_resolution_resolves_the_official_preset_of_the_models_family(tmp_path):
    ctx = _resolve(tmp_path, "sdar", SDAR_SAMPLER, "{preset: official}")
    assert not ctx.problems, ctx.problems
    p = ctx.objective.params
    assert (p.row_layout, p.block_alignment, p.normaliser, p.shrink, p.group_size) == (
        "block_round", "prompt_end", "response_length", 1, 16)
    ctx = _resolve(tmp_path, "llada", LLADA_SAMPLER, "{preset: official}")
    assert not ctx.problems, ctx.problems
    assert (ctx.objective.params.row_layout, ctx.objective.params.shrink) == ("transition", 8)


def test_block_family_conventions_are_refused_on_a_full_attention_family(tmp_path):
    ctx = _resolve(tmp_path, "llada", LLADA_SAMPLER,
                   "{row_layout: block_round, block_alignment: prompt_end, response_padding: masked}")
    where = sorted(loc for loc, _ in ctx.problems)
    assert where == ["algorithm.params.block_alignment", "algorithm.params.response_padding", "algorithm.params.row_layout"]
    assert all("'llada'" in msg for _, msg in ctx.problems)
    ctx = _resolve(tmp_path, "sdar", SDAR_SAMPLER, "{preset: official, value_model: {}}")
    assert [loc for loc, _ in ctx.problems] == ["algorithm.params.row_layout"]


def test_an_overlong_margin_past_the_budget_and_a_non_finite_group_filter_are_refused(tmp_path):
    ctx = _resolve(tmp_path, "llada", LLADA_SAMPLER, "{overlong_margin: 8}")
    assert [loc for loc, _ in ctx.problems] == ["algorithm.params.overlong_margin"]
    assert "gen_length is 8" in ctx.problems[0][1]
    assert not _resolve(tmp_path, "llada", LLADA_SAMPLER, "{overlong_margin: 7}").problems
    ctx = _resolve(tmp_path, "llada", LLADA_SAMPLER, "{group_filter: [.nan, 0.8]}")
    assert [loc.split("[")[0] for loc, _ in ctx.problems] == ["algorithm.params.group_filter"]
    assert "finite" in ctx.problems[0][1]
