"""`dare new-plugin` renders packages that install, appear in `dare plugins`, pass their tests and run in a spec."""

from __future__ import annotations

import json
import math
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from dare.errors import DareError
from dare.ops.scaffold import names_for, render_plugin

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
    kinds = ["reward", "objective", "rl-objective", "sampler", "evaluator", "model"]
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
    assert ("objective", "scaf-rl-objective", "dare-plugin-scaf-rl-objective") in listed
    assert ("sampler", "scaf-sampler", "dare-plugin-scaf-sampler") in listed
    assert ("evaluator", "scaf-evaluator", "dare-plugin-scaf-evaluator") in listed
    assert ("model_family", "scaf-model", "dare-plugin-scaf-model") in listed

    # the RL objective's README holds a whole run spec, which validates once the plugin is installed
    readme = (pkgs[2] / "README.md").read_text()
    (tmp_path / "readme-rl.yaml").write_text(re.search(r"```yaml\n(.*?)```", readme, flags=re.S).group(1))
    out = subprocess.run([str(BIN / "dare"), "validate", str(tmp_path / "readme-rl.yaml")], env=env, capture_output=True,
                         text=True, cwd=tmp_path)
    assert out.returncode == 0 and "valid" in out.stdout, out.stderr

    tests = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *[str(p / "tests") for p in pkgs]],
        env=env, capture_output=True, text=True, cwd=tmp_path,
    )
    assert tests.returncode == 0, tests.stdout + tests.stderr
    # 2 generic + 1 kind-specific test per plugin, and the RL objective's 2 RL steps from a spec (docs/plugins.md)
    assert "19 passed" in tests.stdout and "skipped" not in tests.stdout
    rl_test = pkgs[2] / "tests" / "test_dare_plugin_scaf_rl_objective.py"
    assert "def test_dare_plugin_scaf_rl_objective_trains_two_rl_steps_from_a_spec(" in rl_test.read_text()

    # the new objective trains on the core skeleton (keep_best included) and the new reward scores, from a spec
    spec = {
        "model": {"path": str(tiny_llada_dir)},
        "data": {"train": {"path": "dare://sudoku/train.parquet", "limit": 8, "chat_template": False,
                           "prompt_template": "{{ extra_info.puzzle }}", "response_template": "{{ reward_model.ground_truth }}"}},
        "algorithm": {"name": "scaf-objective", "params": {"weight": 0.5}},
        "sampler": {"name": "scaf-sampler", "params": {"gen_length": 4}},
        "train": {"learning_rate": 1e-3, "max_steps": 2, "per_device_batch_size": 4, "save_steps": 2, "eval_steps": 1,
                  "keep_best": True},
        "eval": {"before_train": False, "benchmarks": [
            {"name": "sudoku", "limit": 4, "chat_template": False, "prompt_template": "{{ extra_info.puzzle }}",
             "reward": {"name": "scaf-reward", "params": {"case_sensitive": True}}}],
            "validation": {"name": "sudoku", "path": "dare://sudoku/train.parquet", "offset": 100, "limit": 4,
                           "chat_template": False, "prompt_template": "{{ extra_info.puzzle }}"}},
        "output": {"dir": str(tmp_path / "run")},
    }
    (tmp_path / "spec.yaml").write_text(yaml.safe_dump(spec))
    run = subprocess.run([str(BIN / "dare"), "run", str(tmp_path / "spec.yaml")], env=env, capture_output=True, text=True, cwd=tmp_path)
    assert run.returncode == 0, run.stderr[-2000:]
    report = json.loads((tmp_path / "run" / "report.json").read_text())
    assert report["results"]["after"][0]["n"] == 4
    assert report["train_metrics"]["train_loss"] > 0
    assert report["train_metrics"]["best_step"] in (0, 1, 2)  # keep_best selected on the validation rows
    assert json.loads((tmp_path / "run" / "checkpoints" / "best" / "best.json").read_text())["metric"] == "validation/accuracy"
    assert (tmp_path / "run" / "model" / "model.safetensors").is_file()

    # the new RL objective runs 2 online-RL steps from a spec
    rl = {
        "model": {"path": str(tiny_llada_dir)},
        "data": {"train": {"path": "dare://sudoku/train.parquet", "limit": 8, "chat_template": False,
                           "prompt_template": "{{ extra_info.puzzle }}"}},
        "algorithm": {"name": "scaf-rl-objective", "params": {"group_size": 2, "scale": 0.5}},
        "sampler": {"name": "llada", "params": {"gen_length": 4, "block_length": 4, "steps": 4, "temperature": 1.0}},
        "rewards": [{"name": "sudoku", "params": {"require_answer_tags": False}}],
        "train": {"learning_rate": 1e-3, "max_steps": 2, "per_device_batch_size": 2, "save_steps": 2, "logging_steps": 1},
        "output": {"dir": str(tmp_path / "rl")},
    }
    (tmp_path / "rl.yaml").write_text(yaml.safe_dump(rl))
    run = subprocess.run([str(BIN / "dare"), "train", str(tmp_path / "rl.yaml")], env=env, capture_output=True, text=True, cwd=tmp_path)
    assert run.returncode == 0, run.stderr[-2000:]
    logged = [json.loads(x) for x in (tmp_path / "rl" / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in logged if "reward" in r] == [1, 2]
    assert (tmp_path / "rl" / "model" / "model.safetensors").is_file()


GSPO = Path(__file__).parent / "data" / "gspo_objective.py"


def test_gspo_loss_by_hand():
    """The GSPO test objective: clipped sequence ratio exp(mean token log-ratio), rows of the whole batch."""
    import importlib.util

    import torch

    from dare.diffusion.estimators import PassScore
    from dare.rl import PassLossInput

    spec = importlib.util.spec_from_file_location("gspo_objective", GSPO)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    cur = torch.tensor([[-1.0, -2.0], [-0.5, -1.0]], requires_grad=True)
    old = torch.tensor([[-1.0, -2.1], [-0.5, -0.9]])
    inp = PassLossInput(current=PassScore(cur, torch.ones(2, 2, dtype=torch.bool)), old=old, ref=None,
                        advantages=torch.tensor([1.0, -1.0]), response_lengths=torch.tensor([2, 2]), pass_index=0,
                        num_passes=1, num_tokens=4.0, num_sequences=2, total_response_tokens=4.0)
    terms = mod.Gspo().pass_loss(inp)
    # s = [e^0.05, e^-0.05]: row 0 (A=+1) clipped at 1 + 4e-4, row 1 (A=-1) clipped at 1 - 3e-4
    assert terms.loss.item() == pytest.approx((-(1 + 4e-4) + (1 - 3e-4)) / 2, abs=1e-7)  # float32 ratios
    assert terms.metrics["clip_fraction"].item() == 1.0
    loose = mod.Gspo(clip_eps_low=0.2, clip_eps_high=0.2).pass_loss(inp)
    loose.loss.backward()  # unclipped: d(-A s / 2)/dl_t = -A s / (2 |y|)
    want = torch.tensor([[-1.0, -1.0], [1.0, 1.0]]) * torch.tensor([[math.exp(0.05)], [math.exp(-0.05)]]) / 4
    assert torch.allclose(cur.grad, want, atol=1e-6)


def test_gspo_from_the_scaffold_is_one_small_file_and_trains(tmp_path, tiny_llada_dir):
    """A new GRPO-style objective: render the rl-objective scaffold, replace its objective module with one file
    under 100 lines, install, and train 2 steps from a spec."""
    assert len(GSPO.read_text().splitlines()) < 100
    pkg = render_plugin("gspo", "rl-objective", tmp_path)
    (pkg / "src" / "dare_plugin_gspo" / "objective.py").write_text(GSPO.read_text())
    site = tmp_path / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation", "--target", str(site),
                    str(pkg)], check=True, capture_output=True)
    env = dict(os.environ, PYTHONPATH=str(site))
    rl = {
        "model": {"path": str(tiny_llada_dir)},
        "data": {"train": {"path": "dare://sudoku/train.parquet", "limit": 8, "chat_template": False,
                           "prompt_template": "{{ extra_info.puzzle }}"}},
        "algorithm": {"name": "gspo", "params": {"group_size": 2, "num_iterations": 2}},
        "sampler": {"name": "llada", "params": {"gen_length": 4, "block_length": 4, "steps": 4, "temperature": 1.0}},
        "rewards": [{"name": "sudoku", "params": {"require_answer_tags": False}}],
        "train": {"learning_rate": 1e-3, "max_steps": 2, "per_device_batch_size": 2, "save_steps": 2, "logging_steps": 1},
        "output": {"dir": str(tmp_path / "rl")},
    }
    (tmp_path / "rl.yaml").write_text(yaml.safe_dump(rl))
    run = subprocess.run([str(BIN / "dare"), "train", str(tmp_path / "rl.yaml")], env=env, capture_output=True, text=True,
                         cwd=tmp_path)
    assert run.returncode == 0, run.stderr[-2000:]
    logged = [json.loads(x) for x in (tmp_path / "rl" / "metrics.jsonl").read_text().splitlines() if '"loss"' in x]
    assert len(logged) == 2 and all("sequence_ratio" in r for r in logged)
    assert logged[0]["sequence_ratio"] == pytest.approx(1.0)  # first inner iteration: old = current


def test_names_of_installed_plugins_are_refused(tmp_path):
    with pytest.raises(DareError, match=r"distribution dare-plugin-sft \(.*\) is already installed.*e\.g\. my-sft"):
        render_plugin("sft", "objective", tmp_path)  # pip install -e would replace the real dare-plugin-sft
    with pytest.raises(DareError, match=r"an installed reward is already called 'sudoku' \(from dare-dllm\)"):
        render_plugin("sudoku", "reward", tmp_path)
    assert list(tmp_path.iterdir()) == []
    assert render_plugin("sudoku", "sampler", tmp_path).name == "dare-plugin-sudoku"  # no sampler is called sudoku
