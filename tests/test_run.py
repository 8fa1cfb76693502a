"""`dare run` end to end on a tiny model: report, plot, metrics, checkpoints, resume."""

from __future__ import annotations

import json

import torch
import yaml
from transformers import AutoModel

from dare.run import Run
from dare.runspec import load_spec


def _spec(model_dir, out_dir, steps=6):
    return {
        "model": {"path": str(model_dir)},
        "data": {"train": {"path": "dare://sudoku/train.parquet", "limit": 64, "chat_template": False,
                           "prompt_template": "{{ extra_info.puzzle }}", "response_template": "{{ reward_model.ground_truth }}"}},
        "algorithm": {"name": "sft"},
        "sampler": {"name": "llada", "params": {"gen_length": 17, "block_length": 17, "steps": 17}},
        "train": {"learning_rate": 2e-3, "max_steps": steps, "per_device_batch_size": 8, "logging_steps": 2,
                  "save_steps": 3, "eval_steps": 3, "eval_limit": 4},
        "eval": {"batch_size": 8, "benchmarks": [{"name": "sudoku", "limit": 8, "chat_template": False,
                                                   "prompt_template": "{{ extra_info.puzzle }}",
                                                   "reward": {"name": "sudoku", "params": {"require_answer_tags": False}}}]},
        "output": {"dir": str(out_dir)},
    }


def test_run_end_to_end_and_resume(tmp_path, tiny_llada_dir):
    out = tmp_path / "run"
    (tmp_path / "s.yaml").write_text(yaml.safe_dump(_spec(tiny_llada_dir, out)))
    run = Run(load_spec(tmp_path / "s.yaml", check=False), source=str(tmp_path / "s.yaml"))
    result = run.execute()
    assert set(result["stages"]) == {"before", "after"}
    assert result["stages"]["after"][0]["n"] == 8
    assert result["train"]["global_step"] == 6

    # the trained model is saved in the official format and reloads bit-exact through AutoModel
    reloaded = AutoModel.from_pretrained(out / "model")
    for k, v in run.model.state_dict().items():
        assert torch.equal(v, reloaded.state_dict()[k]), k
    assert json.loads((out / "model" / "config.json").read_text())["model_type"] == "llada"

    # checkpoints are complete (trainer_state.json written last), rotation keeps 2
    ckpts = sorted(p.name for p in (out / "checkpoints").glob("checkpoint-*"))
    assert ckpts == ["checkpoint-3", "checkpoint-6"]
    assert all((out / "checkpoints" / c / "trainer_state.json").is_file() for c in ckpts)
    assert not any((out / "checkpoints" / ".staging").glob("checkpoint-*"))

    # metrics: JSONL with loss and in-training eval, TensorBoard events, report with provenance, plot
    recs = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in recs if "loss" in r] == [1, 2, 4, 6]
    assert [r["step"] for r in recs if "eval/sudoku/accuracy" in r] == [3, 6]
    assert any(p.name.startswith("events.out.tfevents") for p in (out / "tensorboard").rglob("*"))
    report = json.loads((out / "report.json").read_text())
    prov = report["provenance"]
    assert prov["spec"]["train"]["max_steps"] == 6
    assert prov["sampler"] == {"name": "llada", "params": {"gen_length": 17, "block_length": 17, "steps": 17, "temperature": 0.0,
                                                          "remasking": "low_confidence", "cfg_scale": 0.0,
                                                          "logits_eos_inf": False, "confidence_eos_eot_inf": False,
                                                          "cache": "none", "threshold": None, "factor": None}}
    assert prov["seed"] == 0 and prov["versions"]["torch"] and "git_sha" in prov
    md = (out / "report.md").read_text()
    assert "| before | sudoku |" in md and "| after | sudoku |" in md
    assert (out / "plot.png").stat().st_size > 10_000
    samples = json.loads((out / "samples" / "after-sudoku.json").read_text())
    assert len(samples) == 8 and {"prompt", "completion", "reward", "correct"} <= set(samples[0])

    # the model card: written with the model, then with the scores after training and the sampler in its model-index
    from huggingface_hub import ModelCard

    card = ModelCard.load(out / "model" / "README.md")
    after = result["stages"]["after"][0]
    assert card.data.library_name == "transformers" and {"dare", "llada", "sft"} <= set(card.data.tags)
    (acc, reward) = card.data.eval_results
    assert (acc.dataset_name, acc.metric_type, acc.metric_value) == ("sudoku", "accuracy", after["accuracy"])
    assert (reward.metric_type, reward.metric_value) == ("mean_reward", after["mean_reward"])
    assert acc.metric_args["rows"] == 8 and acc.metric_args["sampler"] == {  # the YAML leaves out unset parameters
        "name": "llada", "params": {k: v for k, v in prov["sampler"]["params"].items() if v is not None}}
    assert card.data.to_dict()["model-index"][0]["results"][0]["metrics"][0]["value"] == after["accuracy"]

    # running the same spec again resumes: nothing is retrained, the model is unchanged
    before = {k: v.clone() for k, v in run.model.state_dict().items()}
    run2 = Run(load_spec(tmp_path / "s.yaml", check=False))
    result2 = run2.execute()
    assert result2["train"]["global_step"] == 6
    assert all(torch.equal(before[k], v) for k, v in AutoModel.from_pretrained(out / "model").state_dict().items())


def test_reported_nfe_is_per_prompt_whatever_the_batch_size(tmp_path):
    """NFE in reports = forward passes spent on each prompt (6 denoising steps), not summed over batches."""
    from dare.builtins.rewards import SudokuReward
    from dare.eval.runner import evaluate_benchmark
    from dare.plugins.manager import get_registry
    from dare.rewards import WeightedReward
    from dare.sampling import DecodingBundle
    from dare.runspec import BenchmarkSpec
    from dare.testing import tiny_model
    from dare_llada.sampler import LLaDASampler

    lm = tiny_model("llada", tmp_path / "m", seed=0)
    sampler = LLaDASampler({"gen_length": 6, "block_length": 6, "steps": 6})
    evaluator = get_registry().get("evaluator", "sudoku").cls()
    bspec = BenchmarkSpec(name="sudoku", limit=5, prompt_template="{{ extra_info.puzzle }}", chat_template=False)
    reward = WeightedReward([(SudokuReward({"require_answer_tags": False}), 1.0)])
    nfes = [evaluate_benchmark(DecodingBundle.of(lm, sampler), evaluator, bspec, reward, batch_size=b).nfe
            for b in (1, 2, 5)]
    assert nfes == [6, 6, 6]


def test_the_last_step_is_logged_when_max_steps_is_not_a_multiple_of_logging_steps(tmp_path, tiny_llada_dir):
    spec = _spec(tiny_llada_dir, tmp_path / "run", steps=5)
    spec["train"] |= {"logging_steps": 2, "eval_steps": None, "save_steps": 5}
    spec.pop("eval")
    (tmp_path / "s.yaml").write_text(yaml.safe_dump(spec))
    Run(load_spec(tmp_path / "s.yaml", check=False), source=str(tmp_path / "s.yaml")).execute(train=True, evaluate=False)
    recs = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in recs if "loss" in r] == [1, 2, 4, 5]
