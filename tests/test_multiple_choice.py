"""Multiple-choice benchmarks scored by MC-ELBO in `dare eval` (dare.eval.multiple_choice, dare.builtins.multiple_choice)."""

from __future__ import annotations

import json

import pytest
import yaml

from dare.builtins.multiple_choice import ChoiceReward, MultipleChoice, sudoku_choices
from dare.errors import DataError, SpecError
from dare.eval.multiple_choice import argmax
from dare.run import Run
from dare.runspec import load_spec


def test_sudoku_choices_are_the_solution_and_three_rule_breaking_grids():
    puzzle, solution = "3102200002100320", "3142243142131324"
    choices, gold = sudoku_choices(solution, puzzle, 0)
    assert choices[gold] == solution and len(set(choices)) == 4
    for i, c in enumerate(choices):
        if i == gold:
            continue
        diff = [p for p in range(16) if c[p] != solution[p]]
        assert len(diff) == 2 and all(puzzle[p] == "0" for p in diff)  # two empty cells swapped
        assert sorted(c) == sorted(solution)
    assert sudoku_choices(solution, puzzle, 0) == (choices, gold)  # deterministic in the key
    golds = {sudoku_choices(solution, puzzle, k)[1] for k in range(40)}
    assert golds == {0, 1, 2, 3}  # the gold position varies


def test_argmax_keeps_the_first_maximum():
    assert argmax([1.0, 3.0, 3.0, 2.0]) == 1 and argmax([-5.0]) == 0


def test_choice_reward_and_gold_forms():
    r = ChoiceReward()
    assert r.score(" Paris ", {"choices": ["Rome", "Paris"], "answer": 1}) == 1.0
    assert r.score("Rome", {"choices": ["Rome", "Paris"], "answer": "Paris"}) == 0.0
    assert r.score("Rome", {"reward_model": {"ground_truth": "Rome"}}) == 1.0
    mc = MultipleChoice()
    assert mc.choices({"choices": ["a", "b"], "answer": "b"}, 0) == (["a", "b"], 1)
    with pytest.raises(DataError, match="neither a choice index nor"):
        mc.choices({"choices": ["a", "b"], "answer": "c"}, 3)


def _spec(model_dir, out, batch_size=64, **bench):
    b = {"name": "sudoku-mc", "limit": 12, "prompt_template": "{{ extra_info.puzzle }}", "chat_template": False,
         "params": {"mc_samples": 8}, **bench}
    return {"model": {"path": str(model_dir)}, "eval": {"batch_size": batch_size, "seed": 3, "benchmarks": [b]},
            "output": {"dir": str(out)}}


def _eval(tmp_path, spec, name):
    f = tmp_path / f"{name}.yaml"
    f.write_text(yaml.safe_dump(spec))
    return Run(load_spec(f, check=False), source=str(f)).execute(train=False)


def test_dare_eval_scores_choices_by_elbo(tmp_path, tiny_llada_dir):
    out = _eval(tmp_path, _spec(tiny_llada_dir, tmp_path / "a"), "a")  # no sampler needed
    (res,) = out["stages"]["eval"]
    assert res["n"] == 12 and res["nfe"] == 4 * 8  # forward passes per row: 4 choices x 8 terms
    assert res["extra"] == {"style": "loglikelihood", "acc_norm": res["extra"]["acc_norm"], "estimator": "mc-elbo",
                            "mc_samples": 8, "mc_scheme": "stratified", "target_delimiter": "", "seed": 3,
                            "seeds": "request_seed(seed, row, choice)"}
    samples = json.loads((tmp_path / "a" / "samples" / "eval-sudoku-mc.json").read_text())
    # acc / acc_norm / mean reward recomputed from the recorded ELBOs (lm-eval's definitions)
    assert res["accuracy"] == sum(argmax(s["elbo"]) == s["gold"] for s in samples) / 12
    norm = [argmax([e / len(c) for e, c in zip(s["elbo"], s["choices"])]) == s["gold"] for s in samples]
    assert res["extra"]["acc_norm"] == sum(norm) / 12
    assert all(s["completion"] == s["choices"][s["pred"]] for s in samples)
    assert all(s["reward"] == 1.0 for s in samples if s["correct"])
    assert all(s["reward"] < 1.0 for s in samples if not s["correct"])  # a corrupted grid is never a full solve
    report = json.loads((tmp_path / "a" / "report.json").read_text())
    assert report["results"]["eval"][0]["extra"]["mc_samples"] == 8
    md = (tmp_path / "a" / "report.md").read_text()
    assert "| acc | acc_norm |" in md and "| mc-elbo | 8 | stratified | 32.0 |" in md

    # another eval.batch_size: the same draws, hence the same ELBOs (up to GEMM rounding) and answers
    out2 = _eval(tmp_path, _spec(tiny_llada_dir, tmp_path / "b", batch_size=5), "b")
    samples2 = json.loads((tmp_path / "b" / "samples" / "eval-sudoku-mc.json").read_text())
    assert [s["pred"] for s in samples2] == [s["pred"] for s in samples]
    for s, t in zip(samples, samples2):
        assert all(abs(x - y) <= 1e-5 * abs(x) for x, y in zip(s["elbo"], t["elbo"]))
    assert out2["stages"]["eval"][0]["accuracy"] == res["accuracy"]


def test_generic_multiple_choice_file(tmp_path, tiny_llada_dir):
    data = tmp_path / "mc.jsonl"
    rows = [{"prompt": "2+2=", "choices": ["4", "5", "22"], "answer": 0},
            {"prompt": "capital of France:", "choices": ["Rome", "Paris"], "answer": "Paris"}]
    data.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    spec = {"model": {"path": str(tiny_llada_dir)},
            "eval": {"benchmarks": [{"name": "multiple-choice", "path": str(data), "chat_template": False,
                                     "params": {"mc_samples": 4, "mc_scheme": "uniform"}}]},
            "output": {"dir": str(tmp_path / "out")}}
    (res,) = _eval(tmp_path, spec, "g")["stages"]["eval"]
    samples = json.loads((tmp_path / "out" / "samples" / "eval-multiple-choice.json").read_text())
    assert [s["gold"] for s in samples] == [0, 1] and samples[0]["prompt"] == "2+2="
    assert res["mean_reward"] == res["accuracy"]  # the choice reward: 1 for the gold text, else 0
    assert res["extra"]["mc_scheme"] == "uniform" and res["nfe"] == (3 + 2) * 4 / 2


def test_spec_checks_benchmark_params_and_columns(tmp_path, tiny_llada_dir):
    bad = _spec(tiny_llada_dir, tmp_path / "c")
    bad["eval"]["benchmarks"][0]["params"] = {"mc_sample": 8}
    f = tmp_path / "bad.yaml"
    f.write_text(yaml.safe_dump(bad))
    with pytest.raises(SpecError) as exc:
        load_spec(f)
    assert "eval.benchmarks[0].params.mc_sample: unknown key; allowed keys here: mc_samples" in str(exc.value)

    nochoices = tmp_path / "rows.jsonl"
    nochoices.write_text(json.dumps({"prompt": "x", "answer": 0}) + "\n")
    spec = {"model": {"path": str(tiny_llada_dir)}, "output": {"dir": str(tmp_path / "d")},
            "eval": {"benchmarks": [{"name": "multiple-choice", "path": str(nochoices)}, "sudoku"]}}
    f.write_text(yaml.safe_dump(spec))
    with pytest.raises(SpecError) as exc:
        load_spec(f)
    msg = str(exc.value)
    assert "eval.benchmarks[0].path" in msg and "no 'choices' column" in msg
    assert "sampler: eval needs a sampler" in msg  # the generation benchmark still needs one
