"""`dare new-plugin` renders packages that install, appear in `dare plugins`, pass their tests and run in a spec."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from dare.errors import DareError
from dare.scaffold import names_for, render_plugin

BIN = Path(sys.executable).parent


def test_names_derive_from_one_answer():
    assert names_for("My_Reward") == {
        "dist": "dare-plugin-my-reward",
        "module": "dare_plugin_my_reward",
        "component": "my-reward",
        "entry_name": "my-reward",
        "class_name": "MyReward",
    }
    assert names_for("dare-plugin-foo")["component"] == "foo"
    with pytest.raises(DareError, match="lowercase"):
        names_for("9 bad name")


def test_existing_target_is_refused(tmp_path):
    render_plugin("dup", "reward", tmp_path)
    with pytest.raises(DareError, match="already exists"):
        render_plugin("dup", "reward", tmp_path)


def test_scaffolded_plugins_install_list_test_and_run(tmp_path, tiny_llada_dir):
    kinds = ["reward", "objective", "sampler", "evaluator", "model"]
    pkgs = [render_plugin(f"scaf-{k}", k, tmp_path) for k in kinds]
    site = tmp_path / "site"
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation", "--target", str(site), *map(str, pkgs)],
        check=True,
        capture_output=True,
    )
    env = dict(os.environ, PYTHONPATH=str(site))
    out = subprocess.run([str(BIN / "dare"), "plugins", "--json"], env=env, capture_output=True, text=True, check=True)
    listed = {(c["kind"], c["name"], c["distribution"]) for c in json.loads(out.stdout)["components"]}
    assert ("reward", "scaf-reward", "dare-plugin-scaf-reward") in listed
    assert ("objective", "scaf-objective", "dare-plugin-scaf-objective") in listed
    assert ("sampler", "scaf-sampler", "dare-plugin-scaf-sampler") in listed
    assert ("evaluator", "scaf-evaluator", "dare-plugin-scaf-evaluator") in listed
    assert ("model_family", "scaf-model", "dare-plugin-scaf-model") in listed

    tests = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *[str(p / "tests") for p in pkgs]],
        env=env, capture_output=True, text=True, cwd=tmp_path,
    )
    assert tests.returncode == 0, tests.stdout + tests.stderr
    assert "15 passed" in tests.stdout  # 2 generic + 1 kind-specific test per plugin

    # the new objective trains and the new reward scores, from a spec
    spec = {
        "model": {"path": str(tiny_llada_dir)},
        "data": {"train": {"path": "dare://sudoku/train.parquet", "limit": 8, "chat_template": False,
                           "prompt_template": "{{ extra_info.puzzle }}", "response_template": "{{ reward_model.ground_truth }}"}},
        "algorithm": {"name": "scaf-objective", "params": {"weight": 0.5}},
        "sampler": {"name": "scaf-sampler", "params": {"gen_length": 4}},
        "train": {"learning_rate": 1e-3, "max_steps": 2, "per_device_batch_size": 4, "save_steps": 2},
        "eval": {"before_train": False, "benchmarks": [
            {"name": "sudoku", "limit": 4, "chat_template": False, "prompt_template": "{{ extra_info.puzzle }}",
             "reward": {"name": "scaf-reward", "params": {"case_sensitive": True}}}]},
        "output": {"dir": str(tmp_path / "run")},
    }
    (tmp_path / "spec.yaml").write_text(yaml.safe_dump(spec))
    run = subprocess.run([str(BIN / "dare"), "run", str(tmp_path / "spec.yaml")], env=env, capture_output=True, text=True, cwd=tmp_path)
    assert run.returncode == 0, run.stderr[-2000:]
    report = json.loads((tmp_path / "run" / "report.json").read_text())
    assert report["results"]["after"][0]["n"] == 4
    assert report["train_metrics"]["train_loss"] > 0
    assert (tmp_path / "run" / "model" / "model.safetensors").is_file()


def test_names_of_installed_plugins_are_refused(tmp_path):
    with pytest.raises(DareError, match=r"distribution dare-plugin-sft \(.*\) is already installed.*e\.g\. my-sft"):
        render_plugin("sft", "objective", tmp_path)  # pip install -e would replace the real dare-plugin-sft
    with pytest.raises(DareError, match=r"an installed reward is already called 'sudoku' \(from dare-dllm\)"):
        render_plugin("sudoku", "reward", tmp_path)
    assert list(tmp_path.iterdir()) == []
    assert render_plugin("sudoku", "sampler", tmp_path).name == "dare-plugin-sudoku"  # no sampler is called sudoku
