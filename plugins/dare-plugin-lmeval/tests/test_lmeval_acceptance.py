"""`lm_eval run --model dare` as a user runs it (a subprocess, no DARE import): the same completions, accuracy and
multiple-choice scores as `dare eval` of the same model, sampler and prompts; bad model arguments are named."""

from __future__ import annotations

import glob
import json
import math
import os
import sys

import pytest
import yaml

#: The compact Sudoku setting of examples/quickstart.yaml (prompt = the 16 puzzle digits, answer = 16 digits + EOS).
SAMPLER = {"gen_length": 17, "block_length": 17, "steps": 17}


def _lm_eval_outputs(out_dir):
    (results,) = glob.glob(str(out_dir / "*" / "results_*.json"))
    samples = {}
    for task in ("dare_sudoku_gen", "dare_sudoku_mc"):
        files = glob.glob(str(out_dir / "*" / f"samples_{task}_*.jsonl"))
        if files:
            rows = [json.loads(line) for line in open(files[0])]
            samples[task] = sorted(rows, key=lambda r: r["doc_id"])
    return json.loads(open(results).read()), samples


def _dare_eval(tmp_path, model_dir, mc_samples, batch_size):
    from dare.run import Run
    from dare.runspec import load_spec

    compact = {"limit": 50, "prompt_template": "{{ extra_info.puzzle }}", "chat_template": False}
    spec = {
        "model": {"path": str(model_dir)},
        "sampler": {"name": "llada", "params": SAMPLER},
        "eval": {"batch_size": batch_size, "seed": 0, "benchmarks": [
            {"name": "sudoku", **compact, "reward": {"name": "sudoku", "params": {"require_answer_tags": False}}},
            {"name": "sudoku-mc", **compact, "params": {"mc_samples": mc_samples}},
        ]},
        "output": {"dir": str(tmp_path / "dare-eval")},
    }
    f = tmp_path / "eval.yaml"
    f.write_text(yaml.safe_dump(spec))
    out = Run(load_spec(f, check=False), source=str(f)).execute(train=False)
    gen, mc = out["stages"]["eval"]
    samples = {n: json.loads((tmp_path / "dare-eval" / "samples" / f"eval-{n}.json").read_text()) for n in ("sudoku", "sudoku-mc")}
    return gen, mc, samples


def test_lm_eval_matches_dare_eval_on_real_sudoku(tmp_path, trained_sudoku_model, sudoku_tasks, run_lm_eval):
    batch, mc_samples = 25, 8
    # gen_length is not given: it follows the task's max_gen_toks (17), a multiple of block_length 17
    model_args = (f"model={trained_sudoku_model},sampler=llada,block_length=17,steps=17,seed=0,"
                  f"mc_samples={mc_samples}")
    proc, seconds = run_lm_eval(["run", "--model", "dare", "--model_args", model_args, "--tasks", "dare_sudoku_gen",
                                 "dare_sudoku_mc", "--include_path", str(sudoku_tasks), "--batch_size", str(batch),
                                 "--output_path", str(tmp_path / "lm-eval"), "--log_samples"], cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    print(f"lm_eval run (2 tasks x 50 puzzles): {seconds:.1f} s")
    results, lsamples = _lm_eval_outputs(tmp_path / "lm-eval")
    gen, mc, dsamples = _dare_eval(tmp_path, trained_sudoku_model, mc_samples, batch)

    # generate_until: per-puzzle prompts and completions identical, so identical accuracy and mean reward
    lg = lsamples["dare_sudoku_gen"]
    assert len(lg) == 50 == len(dsamples["sudoku"])
    assert [r["arguments"]["gen_args_0"]["arg_0"] for r in lg] == [s["prompt"] for s in dsamples["sudoku"]]
    assert [r["resps"][0][0] for r in lg] == [s["completion"] for s in dsamples["sudoku"]]
    assert [r["mean_reward"] for r in lg] == [s["reward"] for s in dsamples["sudoku"]]
    rg = results["results"]["dare_sudoku_gen"]
    assert rg["acc,none"] == gen["accuracy"] and math.isclose(rg["mean_reward,none"], gen["mean_reward"], abs_tol=1e-12)
    assert gen["mean_reward"] > 0.1  # the model learned something: a non-trivial comparison

    # multiple choice: the four MC-ELBOs of every puzzle, hence acc and acc_norm
    lm_ = lsamples["dare_sudoku_mc"]
    for r, s in zip(lm_, dsamples["sudoku-mc"], strict=True):
        assert [a["arg_1"] for a in r["arguments"].values()] == s["choices"] and int(r["target"]) == s["gold"]
        lls = [float(x[0]) for x in r["filtered_resps"]]
        assert all(math.isclose(a, b, rel_tol=1e-6) for a, b in zip(lls, s["elbo"])), (lls, s["elbo"])
        assert r["acc"] == float(s["correct"])
    rm = results["results"]["dare_sudoku_mc"]
    assert rm["acc,none"] == mc["accuracy"] and rm["acc_norm,none"] == mc["extra"]["acc_norm"]

    # what makes the numbers reproducible is in lm-eval's results JSON
    dare = results["config"]["dare"]
    assert dare["sampler"]["name"] == "llada" and dare["sampler"]["params"]["steps"] == 17
    assert dare["likelihood"]["mc_samples"] == mc_samples and dare["likelihood"]["estimator"] == "mc-elbo"
    assert dare["seed"] == 0 and dare["batch_size"] == batch and dare["family"] == "llada"


@pytest.mark.slow
@pytest.mark.skipif(os.environ.get("DARE_SLOW") != "1", reason="slow (2 processes): set DARE_SLOW=1")
def test_two_processes_equal_one(tmp_path, trained_sudoku_model, sudoku_tasks, run_lm_eval):
    """Data parallel through accelerate (torchrun, CPU, gloo): each rank scores lm-eval's slice of the documents;
    the gathered per-document results equal a single process's."""
    args = ["run", "--model", "dare", "--model_args",
            f"model={trained_sudoku_model},sampler=llada,block_length=17,steps=17,mc_samples=4",
            "--tasks", "dare_sudoku_gen", "dare_sudoku_mc", "--include_path", str(sudoku_tasks), "--limit", "10",
            "--batch_size", "5", "--log_samples"]
    one, _ = run_lm_eval([*args, "--output_path", str(tmp_path / "one")], cwd=tmp_path)
    assert one.returncode == 0, one.stderr[-3000:]
    os.environ["ACCELERATE_USE_CPU"] = "1"
    try:
        two, _ = run_lm_eval([*args, "--output_path", str(tmp_path / "two")], cwd=tmp_path,
                             launcher=[sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2"])
    finally:
        os.environ.pop("ACCELERATE_USE_CPU")
    assert two.returncode == 0, two.stderr[-3000:]
    r1, s1 = _lm_eval_outputs(tmp_path / "one")
    r2, s2 = _lm_eval_outputs(tmp_path / "two")
    assert r2["config"]["dare"]["world_size"] == 2 and r1["config"]["dare"]["world_size"] == 1
    for task in ("dare_sudoku_gen", "dare_sudoku_mc"):
        assert [r["doc_id"] for r in s2[task]] == list(range(10))
        assert [r["filtered_resps"] for r in s2[task]] == [r["filtered_resps"] for r in s1[task]]
        # the metrics too (aggregated over the gathered documents, in another order: equal up to rounding)
        for k, v in r1["results"][task].items():
            assert (math.isclose(r2["results"][task][k], v, rel_tol=1e-12) if isinstance(v, float)
                    else r2["results"][task][k] == v), k
