"""dare-plugin-opencompass: DareModel/DareEngine decode as `dare eval`, honour max_out_len, score with the ELBO.

OpenCompass needs its own environment (numpy<2, datasets<4), so these tests skip in DARE's main venv; they run
in the one benchmarks/opencompass_check.sh creates (OC_RUN_TESTS=1), or any venv installed as docs/evaluation.md says.
"""

from __future__ import annotations

import json
import os

import pytest

pytest.importorskip(
    "opencompass",
    reason="OpenCompass is not installed: it needs its own environment (numpy<2, datasets<4), see docs/evaluation.md "
    "'OpenCompass' and benchmarks/opencompass_check.sh",
)

import torch  # noqa: E402

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

SAMPLER = dict(name="llada", params=dict(gen_length=8, block_length=4, steps=4))
PROMPTS = ["0123", "4102", "31", "2200"]  # two lengths: left padding is exercised


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    from dare.testing import tiny_model

    d = tmp_path_factory.mktemp("oc") / "model"
    tiny_model("llada", d, seed=0)
    return str(d)


@pytest.fixture(scope="module")
def engine(model_dir):
    from dare_opencompass.engine import DareEngine

    return DareEngine(model_dir, SAMPLER, seed=0)


def test_generate_is_dare_evals_decoding(engine, model_dir):
    from dare.modeling import load_model
    from dare.plugins.manager import get_registry
    from dare.sampling import DecodingBundle
    from dare.sampling.text import generate_texts

    lm = load_model(model_dir)
    sampler = get_registry().get("sampler", "llada").create(SAMPLER["params"])
    want = generate_texts(DecodingBundle.of(lm, sampler), PROMPTS, batch_size=4,
                          generator=torch.Generator().manual_seed(0)).texts
    assert engine.generate(PROMPTS, max_out_len=8) == want
    assert len(set(want)) > 1
    stop = want[0][1] if len(want[0]) > 1 else "x"
    assert engine.generate(PROMPTS[:1], max_out_len=8, stop=[stop]) == [want[0].split(stop, 1)[0]]


def test_max_out_len_rules(model_dir, engine):
    from dare_opencompass.engine import DareEngine, DareHarnessError

    assert engine.gen_length_for(8) == 8 and engine.gen_length_for(100) == 8  # fixed gen_length, within the budget
    with pytest.raises(DareHarnessError, match="gen_length 8 exceeds the task's max_out_len 6"):
        engine.gen_length_for(6)
    free = DareEngine(model_dir, "llada", dict(block_length=4, steps=4))  # gen_length follows max_out_len
    assert free.gen_length_for(16) == 16
    assert len(free.lm.tokenizer(free.generate(["0123"], max_out_len=16)[0])["input_ids"]) <= 16
    with pytest.raises(DareHarnessError, match=r"max_out_len 6 .*gen_length \(6\) must be a multiple of block_length \(4\)"):
        free.generate(["0123"], max_out_len=6)


def test_bad_settings_are_named(model_dir):
    from dare.errors import DareError
    from dare_opencompass.engine import DareEngine

    with pytest.raises(DareError, match="llada.*block_lenght"):
        DareEngine(model_dir, dict(name="llada", params=dict(block_lenght=4)))
    with pytest.raises(DareError, match="unknown sampler 'lada'.*did you mean 'llada'"):
        DareEngine(model_dir, "lada")
    with pytest.raises(DareError, match="sampler 'sdar' decodes block-attention families"):
        DareEngine(model_dir, "sdar")


def test_ppl_is_the_elbo_bound_per_token(engine):
    """One scored token: the ELBO is exact, -log p(x_last | context, x_last masked); scores ignore batching."""
    lm = engine.lm
    text = "0123"
    ids = torch.tensor([engine._ids(text)])
    noisy = ids.clone()
    noisy[0, -1] = lm.tokens.mask_id
    with torch.no_grad():
        logits = lm.family.denoiser_logits(lm.model, noisy, ids, torch.ones_like(ids))
    exact = -torch.log_softmax(logits[0, -1].float(), -1)[ids[0, -1]].item()
    got = engine.nll_per_token([text, "31"], mask_length=[ids.shape[1] - 1, 0])
    assert got[0] == pytest.approx(exact, rel=1e-5)
    assert engine.nll_per_token(["31"]) == pytest.approx([got[1]], rel=1e-5)  # same corruptions whatever the batch
    assert got[1] > 0


def test_opencompass_classes(model_dir):
    from dare.data import Prompter, load_rows
    from dare_opencompass import DareBenchmarkDataset, DareModel, DareRewardEvaluator

    rows = DareBenchmarkDataset.load(benchmark="sudoku", limit=3, prompt_template="{{ extra_info.puzzle }}")
    raw = load_rows("dare://sudoku/test.parquet", limit=3)
    assert rows["prompt"] == [Prompter(None, "{{ extra_info.puzzle }}", None, False).prompt(r) for r in raw]
    assert [json.loads(r) for r in rows["row"]] == json.loads(json.dumps(raw, default=str))
    model = DareModel(path=model_dir, sampler=SAMPLER, run_cfg=dict(num_gpus=0), max_out_len=8, batch_size=4)
    assert model.generate(PROMPTS, max_out_len=8) == DareModel(path=model_dir, sampler=SAMPLER).generate(PROMPTS, 8)
    assert model.get_token_len("0123") == 4
    with pytest.raises(Exception, match="temperature"):
        model.generate(PROMPTS, 8, temperature=0.5)
    evaluator = DareRewardEvaluator(benchmark="sudoku", reward=dict(name="sudoku", params=dict(require_answer_tags=False)))
    solutions = [r["reward_model"]["ground_truth"] for r in raw]
    scored = evaluator.score(solutions[:2] + ["0000000000000000"], rows["row"])
    assert scored["accuracy"] == pytest.approx(200 / 3) and [d["correct"] for d in scored["details"]] == [True, True, False]
