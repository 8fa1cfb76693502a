"""``preset: official`` and the response conventions (dare.components.official, dare.rl.conventions)."""

import json
import logging

import pytest
import torch

from dare.diffusion.estimators import Pass, ScoringBatch
from dare.plugins.paramdocs import official_values
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


# --------------------------------------------------------------------------- per (algorithm, model family)
def test_official_rows_resolve_per_family():
    from dare.components.official import OfficialParams, OfficialSetting
    from dare.rl import RLParams

    class Two(RLParams):  # a release with one trainer per family: rows without a family apply to both
        official_families = ("llada", "sdar")
        official = (
            OfficialSetting("group_size", 8, "o/r@c:train/rl_llada.py:10", family="llada"),
            OfficialSetting("group_size", 16, "o/r@c:train/rl_sdar.py:20", family="sdar"),
            OfficialSetting("beta", 0.01, "o/r@c:configs/common.yaml:3"),
        )

    assert Two.official_values("llada") == {"group_size": 8, "beta": 0.01}
    assert Two.official_values("sdar") == {"group_size": 16, "beta": 0.01}
    assert Two.official_values() == Two.official_values("llada")  # no family known: the first, the main one
    assert Two.model_validate({"preset": "official"}, context={"family": "sdar"}).group_size == 16
    p = Two.model_validate({"preset": "official"}, context={"family": "llada"})
    assert (p.group_size, p.beta, p.preset_family()) == (8, 0.01, "llada")
    with pytest.raises(ValueError, match=r"model family 'dream'.*for llada, sdar only"):
        Two.model_validate({"preset": "official"}, context={"family": "dream"})
    assert Two.model_validate({"preset": "dare"}, context={"family": "dream"}).group_size == 8  # DARE's default
    assert issubclass(Two, OfficialParams) and OfficialParams.official_values("dream") == {}  # no table: nothing
    with pytest.raises(ValueError, match="no official table"):  # so preset: official would change nothing: refused
        RLParams.model_validate({"preset": "official"})


def test_the_right_file_for_each_family_and_a_refused_family_named():
    from dare.plugins.paramdocs import official_by_family, official_note

    from dare_grpo.objectives.tracerl import TraceRLParams

    assert D1Params.official_families == ("llada",) and CoupledGRPOParams.official_families == ("dream",)
    (fam, entry), = official_by_family(CoupledGRPOParams).items()
    assert fam == "dream" and entry["values"]["group_size"] == "10"
    assert entry["files"][0] == "apple/ml-diffucoder@f735e01376b752b70356efe45192f31499bf30dc:src/open_r1/coupled_grpo.py"
    assert "official (llada): from dllm-reasoning/d1@" in official_note(D1Params)
    assert "the official table holds llada only" in official_note(D1Params)
    assert any(f.endswith("train/rl_llada.py") for f in official_by_family(TraceRLParams)["llada"]["files"])
    with pytest.raises(ValueError, match=r"no settings for the model family 'dream'.*dllm-reasoning/d1.*for llada only"):
        D1Params.model_validate({"preset": "official"}, context={"family": "dream"})
    with pytest.raises(ValueError, match=r"model family 'llada'.*apple/ml-diffucoder.*for dream only"):
        CoupledGRPOParams.model_validate({"preset": "official"}, context={"family": "llada"})


def test_a_spec_on_a_family_the_release_did_not_train_is_refused_at_validation(tmp_path):
    from dare.errors import SpecError
    from dare.runspec import load_spec

    spec = {"model": {"new": {"family": "dream", "preset": "tiny"}}, "data": {"train": {"path": str(tmp_path / "gsm8k.jsonl")}},
            "train": {"learning_rate": 1e-5, "max_steps": 1},
            "algorithm": {"name": "d1", "params": {"preset": "official"}}, "rewards": [{"name": "gsm8k"}],
            "sampler": {"name": "dream", "params": {"gen_length": 8, "steps": 8}}, "output": {"dir": str(tmp_path / "r")}}
    (tmp_path / "gsm8k.jsonl").write_text('{"prompt": "1+1?", "answer": "2"}\n')
    (tmp_path / "s.yaml").write_text(json.dumps(spec))
    with pytest.raises(SpecError, match=r"algorithm.params(.|\n)*model family 'dream'(.|\n)*for llada only"):
        load_spec(tmp_path / "s.yaml")
    spec["model"]["new"]["family"] = "llada"
    spec["sampler"] = {"name": "llada", "params": {"gen_length": 8, "block_length": 8, "steps": 8}}
    (tmp_path / "s.yaml").write_text(json.dumps(spec))
    assert load_spec(tmp_path / "s.yaml").algorithm.name == "d1"  # the family the release trains: accepted


def test_dare_plugins_names_the_file_of_each_familys_rows():
    from click.testing import CliRunner

    from dare.cli import cli

    (entry,) = json.loads(CliRunner().invoke(cli, ["plugins", "coupled-grpo", "--json"]).output)
    assert list(entry["official_by_family"]) == ["dream"]
    assert entry["official_by_family"]["dream"]["values"]["ref_model_sync_steps"] == "64"
    table = CliRunner(env={"COLUMNS": "400"}).invoke(cli, ["plugins", "d1"]).output
    assert "official llada" in table and "from dllm-reasoning/d1@" in table and "holds llada only" in table


def test_a_mapping_keeps_the_official_keys_the_spec_does_not_set(caplog):
    c = CoupledGRPOParams.model_validate({"preset": "official", "rollout_sampler": {"steps": 64}})
    assert c.rollout_sampler == {"temperature": 1.0, "top_p": 0.95, "steps": 64} and c.preset_kept() == ()
    with caplog.at_level(logging.WARNING, logger="dare.official"):
        c = CoupledGRPOParams.model_validate({"preset": "official", "rollout_sampler": {"top_p": 1.0}})
    assert c.rollout_sampler == {"temperature": 1.0, "top_p": 1.0} and c.preset_kept() == ("rollout_sampler",)


def test_coupled_grpo_official_rollouts_sample_with_top_p_095():
    """The release samples its rollouts with top-p 0.95 (ml-diffucoder coupled_grpo.py:427). Hand-checked: one
    masked position whose distribution is p = (0.6, 0.36, 0.04) over tokens 0, 1, 2; the nucleus of mass 0.95 is
    {0, 1} (cumulative 0.6, 0.96 >= 0.95), so token 2 never appears under the official rollout sampler, while the
    same draws without top-p give it to ~4% of the rows."""
    from dare_dream.decoding import decode
    from dare_dream.sampler import DreamSampler
    from dare_grpo.objectives.coupled_grpo import CoupledGRPO

    from dare.components import SpecialTokens
    from dare.sampling.options import DecodeOptions

    probs = torch.tensor([0.6, 0.36, 0.04])
    logits = torch.cat([probs.log(), torch.tensor([-1e9, -1e9])])  # token 3 = mask, token 4 unused

    def logits_fn(x, am):
        return logits.expand(x.shape[0], x.shape[1], 5).clone()

    sampler = DreamSampler({"gen_length": 1, "steps": 1, "alg": "origin"})
    rollout, problems = CoupledGRPO({"preset": "official"}).resolve_rollout_sampler(sampler, "algorithm")
    assert problems == [] and (rollout.sampler.params.top_p, rollout.sampler.params.temperature) == (0.95, 1.0)
    tokens = SpecialTokens(mask_id=3, eos_id=4, pad_id=4)
    prompts = torch.zeros(400, 2, dtype=torch.long)

    def draw(params):
        g = torch.Generator().manual_seed(0)
        x, _, _ = decode(logits_fn, prompts, None, DecodeOptions(params, tokens, g, None))
        return x[:, -1]

    with_top_p = draw(rollout.sampler.params)
    without = draw(rollout.sampler.params.model_copy(update={"top_p": None}))
    assert int((with_top_p == 2).sum()) == 0 and set(with_top_p.tolist()) == {0, 1}
    assert 5 <= int((without == 2).sum()) <= 30  # 400 x 0.04 = 16 expected
    assert 0.55 <= float((with_top_p == 0).float().mean()) <= 0.70  # 0.6 / 0.96 = 0.625 after renormalising


def test_source_file_drops_the_line_numbers_only():
    from dare.components.official import source_file

    assert source_file("o/r@c:train/rl_sdar.py:748-755") == "o/r@c:train/rl_sdar.py"
    assert source_file("o/r@c:src/open_r1/coupled_grpo.py:409,427") == "o/r@c:src/open_r1/coupled_grpo.py"
    assert source_file("o/r@c:LAUNCH") == "o/r@c:LAUNCH"
    assert source_file("arXiv 2504.12216 §4") == "arXiv 2504.12216 §4"


def test_a_hub_models_family_decides_the_official_rows(tmp_path, monkeypatch, caplog):
    """model.path a hub id: its config.json (the hub or its cache) gives the family before preset: official resolves;
    when it cannot be read, the release's main family applies and the log says so."""
    import dare.runspec.resolve as resolve
    from dare.errors import CheckpointError, SpecError
    from dare.runspec import load_spec
    from dare_dream.family import DreamFamily

    (tmp_path / "rows.jsonl").write_text('{"prompt": "1+1?", "answer": "2"}\n')
    spec = {"model": {"path": "some-org/some-dream-model"}, "data": {"train": {"path": str(tmp_path / "rows.jsonl")}},
            "train": {"learning_rate": 1e-5, "max_steps": 1}, "rewards": [{"name": "gsm8k"}],
            "algorithm": {"name": "d1", "params": {"preset": "official"}}, "output": {"dir": str(tmp_path / "r")}}
    (tmp_path / "s.yaml").write_text(json.dumps(spec))
    monkeypatch.setattr(resolve, "family_of", lambda path, registry=None: DreamFamily())
    with pytest.raises(SpecError, match=r"model family 'dream'(.|\n)*for llada only"):
        load_spec(tmp_path / "s.yaml")

    def offline(path, registry=None):
        raise CheckpointError("offline")

    monkeypatch.setattr(resolve, "family_of", offline)
    with caplog.at_level(logging.WARNING, logger="dare.runspec"):
        ctx = resolve.resolve_spec(load_spec(tmp_path / "s.yaml", check=False))
    assert ctx.objective.params.group_size == 6 and ctx.objective.params.preset_family() == "llada"
    assert "family of some-org/some-dream-model is unknown" in caplog.text


def test_every_objectives_table_is_well_formed():
    """Every official row names a real field and, where it names families, families its table holds; every family's
    values validate (the preset builds a valid Params for each family the release trained)."""
    from dare.plugins.manager import get_registry

    reg = get_registry()
    tables = 0
    for entry in reg.entries["objective"].values():
        cls = reg.get("objective", entry.name).cls.Params
        if not getattr(cls, "official", ()):
            continue
        tables += 1
        assert {s.param for s in cls.official} <= set(cls.model_fields), entry.name
        for s in cls.official:
            assert set(s.families) <= set(cls.official_table_families()), (entry.name, s.param)
        for fam in cls.official_table_families():
            p = cls.model_validate({"preset": "official"}, context={"family": fam} if fam else None)
            assert p.preset_kept() == () and p.preset_family() == (fam or None), entry.name
    assert tables >= 9  # d1, coupled-GRPO, SPG, MDPO, CJ-GRPO, d-TreeRPO, JustGRPO, ESPO, TraceRL
