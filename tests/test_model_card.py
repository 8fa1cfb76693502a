"""model/README.md: a Hugging Face model card that huggingface_hub.ModelCard.load parses, written with every trained
model (dare.report.modelcard, dare.trainers.saving)."""

from __future__ import annotations

import json

import yaml
from huggingface_hub import ModelCard

from dare.report.modelcard import model_card, write_model_card
from dare.runspec.models import RunSpec


def _spec(**extra):
    return RunSpec.model_validate({
        "model": {"path": "GSAI-ML/LLaDA-8B-Instruct"},
        "data": {"train": {"path": "openai/gsm8k", "limit": 100}},
        "algorithm": {"name": "d1", "params": {"group_size": 4}},
        "sampler": {"name": "llada", "params": {"gen_length": 64, "steps": 32}},
        "train": {"learning_rate": 1e-6, "max_steps": 10, "seed": 3},
        "eval": {"benchmarks": [{"name": "gsm8k", "path": "openai/gsm8k"}, "sudoku"]},
        "output": {"dir": "runs/gsm8k-d1"}, **extra})


def test_card_front_matter_parses_with_base_model_datasets_and_model_index(tmp_path):
    results = [{"name": "gsm8k", "n": 1319, "accuracy": 0.5, "mean_reward": 0.625},
               {"name": "sudoku", "n": 500, "accuracy": 0.25, "mean_reward": 0.75}]
    path = write_model_card(tmp_path, _spec(), results=results, family="llada")
    assert path == tmp_path / "README.md" and not list(tmp_path.glob("*.tmp*"))
    card = ModelCard.load(path)
    d = card.data
    assert (d.library_name, d.base_model, d.pipeline_tag) == ("transformers", "GSAI-ML/LLaDA-8B-Instruct", "text-generation")
    assert d.datasets == ["openai/gsm8k"]  # training data and benchmark, once
    assert d.tags == ["dare", "diffusion-llm", "masked-diffusion", "llada", "d1"]
    got = [(r.dataset_name, r.metric_type, r.metric_value) for r in d.eval_results]
    assert got == [("gsm8k", "accuracy", 0.5), ("gsm8k", "mean_reward", 0.625), ("sudoku", "accuracy", 0.25),
                   ("sudoku", "mean_reward", 0.75)]
    assert d.eval_results[0].metric_args == {"sampler": {"name": "llada", "params": {"gen_length": 64, "steps": 32}},
                                             "rows": 1319}
    front = yaml.safe_load(path.read_text().split("---")[1])
    index = front["model-index"][0]
    assert index["name"] == "gsm8k-d1" and [len(r["metrics"]) for r in index["results"]] == [2, 2]  # per benchmark
    assert index["results"][1]["metrics"][0] == {"type": "accuracy", "value": 0.25, "name": "accuracy", "args": {
        "sampler": {"name": "llada", "params": {"gen_length": 64, "steps": 32}}, "rows": 500}}
    assert "| gsm8k | 1319 | 0.5000 | 0.6250 |" in card.text and "hf upload YOUR_NAME/gsm8k-d1 runs/gsm8k-d1/model" in card.text


def test_a_local_start_has_no_base_model_and_no_model_index_before_evaluation(tmp_path):
    spec = _spec(model={"new": {"family": "llada", "preset": "tiny"}}, data={"train": {"path": "dare://sudoku/train.parquet"}})
    card = ModelCard.load(write_model_card(tmp_path, spec))
    assert card.data.base_model is None and card.data.datasets == ["openai/gsm8k"] and card.data.eval_results is None
    assert "model-index" not in card.content and "a new llada model (tiny preset, seed 0)" in card.text
    assert "Not evaluated after training" in card.text
    assert str(model_card(spec)) == (tmp_path / "README.md").read_text()
    assert json.dumps(card.data.to_dict())  # the front matter is plain data
