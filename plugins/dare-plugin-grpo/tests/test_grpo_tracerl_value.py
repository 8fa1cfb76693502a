"""TraceRL's value model (``algorithm.params.value_model``): step-level GAE by hand, the value head, a run
from the spec that trains both models and saves the value model, and kill-and-resume equal to an uninterrupted run."""

from __future__ import annotations

import shutil

import pytest
import torch
import yaml

from dare.errors import DareError
from dare.rl.value import clipped_value_loss, step_gae, value_model_from

pytest.importorskip("dare_llada")


def test_step_gae_by_hand():
    """One row, three transitions [0, 0, 1, 2] (ranks), reward 2, values [0.5, 1.5, 1.0, 0.4], gamma 0.5, lam 0.5.

    r* = [0, 0, 2], V* = [1.0, 1.0, 0.4]; R* = [0.5, 1, 2]; delta* = [0 - 1 + 0.5, 0 - 1 + 0.2, 2 - 0.4] =
    [-0.5, -0.8, 1.6]; A* = [-0.5 + 0.25 (-0.8 + 0.4), -0.8 + 0.4, 1.6] = [-0.6, -0.4, 1.6].
    Tokens: R_j = r_j + 0.5 R*_{t+1} = [0.5, 0.5, 1, 2]; A_j = r_j - V_j + 0.5 V*_{t+1} + 0.25 A*_{t+1}
    = [-0.5 + 0.5 - 0.1, -1.5 + 0.5 - 0.1, -1 + 0.2 + 0.4, 2 - 0.4] = [-0.1, -1.1, -0.4, 1.6]. Untrained tokens: 0.
    """
    ranks = torch.tensor([[0, 0, 1, 2, -1]])
    values = torch.tensor([[0.5, 1.5, 1.0, 0.4, 9.0]])
    returns, adv = step_gae(ranks, torch.tensor([2.0]), values, gamma=0.5, lam=0.5)
    assert torch.allclose(returns, torch.tensor([[0.5, 0.5, 1.0, 2.0, 0.0]]))
    assert torch.allclose(adv, torch.tensor([[-0.1, -1.1, -0.4, 1.6, 0.0]]))


def test_clipped_value_loss_by_hand():
    v, old, ret = torch.tensor([1.0, 0.0]), torch.tensor([0.5, 0.5]), torch.tensor([0.0, 1.0])
    # token 0: max((1-0)^2, (0.7-0)^2) / 2 = 0.5; token 1: max((0-1)^2, (0.3-1)^2) / 2 = 0.5
    assert torch.allclose(clipped_value_loss(v, old, ret, 0.2), torch.tensor([0.5, 0.5]))
    # token 0 with the return above: max((1-2)^2, (0.7-2)^2) / 2 = 0.845, the clipped term
    assert torch.allclose(clipped_value_loss(v[:1], old[:1], torch.tensor([2.0]), 0.2), torch.tensor([0.845]))


def test_value_model_is_the_policy_with_a_zero_scalar_head(tiny_llada_dir):
    from dare.modeling import load_model

    lm = load_model(tiny_llada_dir)
    vm = value_model_from(lm.model)
    ids = torch.tensor([[1, 2, 3, lm.tokens.mask_id]])
    out = lm.family.denoiser_logits(vm, ids, ids)
    assert out.shape == (1, 4, 1) and bool((out == 0).all())
    assert lm.model.get_output_embeddings().weight.shape[0] > 1  # the policy keeps its own head
    with pytest.raises(DareError, match="value_model"):
        value_model_from(torch.nn.Linear(2, 2))
    from peft import LoraConfig, get_peft_model

    with pytest.raises(DareError, match="LoRA"):
        value_model_from(get_peft_model(lm.model, LoraConfig(r=2, target_modules=["q_proj"])))


def _spec(model_dir, out, steps=3):
    return {
        "model": {"path": str(model_dir)},
        "data": {"train": {"path": "dare://sudoku/train.parquet", "limit": 16, "chat_template": False,
                           "prompt_template": "{{ extra_info.puzzle }}"}},
        "algorithm": {"name": "tracerl", "params": {"group_size": 2, "shrink": 2,
                                                     "value_model": {"learning_rate": 1e-2, "gamma": 0.9, "lam": 0.95},
                                                     "rollout_sampler": {"temperature": 1.0}}},
        "sampler": {"name": "llada", "params": {"gen_length": 8, "block_length": 4, "steps": 8}},
        "rewards": [{"name": "sudoku", "params": {"require_answer_tags": False}}],
        "train": {"learning_rate": 1e-2, "max_steps": steps, "per_device_batch_size": 2, "logging_steps": 1,
                  "save_steps": 1},
        "output": {"dir": str(out)},
    }


def test_value_model_trains_saves_and_resumes_bit_exact(tmp_path, tiny_llada_dir, monkeypatch):
    """A 3-step run trains the policy and the value model, logs the value loss, writes ``value_model/`` and the
    value state into every checkpoint; losing the last checkpoint and rerunning gives bit-identical policy and
    value weights."""
    from safetensors.torch import load_file

    from dare.run import Run
    from dare.runspec import load_spec

    # an untrained model never writes 16 digits: score the distinct characters instead, so groups have advantages
    monkeypatch.setattr("dare.builtins.rewards.sudoku_score", lambda completion, *a: len(set(completion)) / 8)
    out = tmp_path / "run"
    (tmp_path / "s.yaml").write_text(yaml.safe_dump(_spec(tiny_llada_dir, out)))
    run = Run(load_spec(tmp_path / "s.yaml"))
    run.execute(evaluate=False)
    value = load_file(str(out / "value_model" / "model.safetensors"))
    head = [v for k, v in value.items() if k.endswith("ff_out.weight") and v.shape[0] == 1]
    assert len(head) == 1 and bool(head[0].abs().sum() > 0)  # the zero-initialised head was trained
    for ck in sorted((out / "checkpoints").glob("checkpoint-*")):  # the kept ones (save_total_limit)
        assert (ck / "value_model.safetensors").exists() and (ck / "value_optimizer.safetensors").exists()
    assert (out / "checkpoints" / "checkpoint-2" / "value_model.safetensors").exists()
    metrics = (out / "metrics.jsonl").read_text()
    assert '"value/loss"' in metrics and '"value/advantage_abs"' in metrics
    policy = {k: v.clone() for k, v in run.model.state_dict().items()}

    shutil.rmtree(out / "checkpoints" / "checkpoint-3")
    shutil.rmtree(out / "model")
    shutil.rmtree(out / "value_model")
    run2 = Run(load_spec(tmp_path / "s.yaml", check=False))
    run2.execute(evaluate=False)
    for k, v in run2.model.state_dict().items():
        assert torch.equal(v, policy[k]), k
    value2 = load_file(str(out / "value_model" / "model.safetensors"))
    for k, v in value2.items():
        assert torch.equal(v, value[k]), k

    # killed after the last checkpoint, before the final save: the re-run finds a finished run and must publish the
    # trained value model from the checkpoint, not the fresh copy it builds at start
    shutil.rmtree(out / "model")
    shutil.rmtree(out / "value_model")
    Run(load_spec(tmp_path / "s.yaml", check=False)).execute(evaluate=False)
    value3 = load_file(str(out / "value_model" / "model.safetensors"))
    assert all(torch.equal(v, value[k]) for k, v in value3.items())
    Run(load_spec(tmp_path / "s.yaml", check=False)).execute(evaluate=False)  # and again, nothing to train
    value4 = load_file(str(out / "value_model" / "model.safetensors"))
    assert all(torch.equal(v, value[k]) for k, v in value4.items())


def test_rows_scored_under_the_rollout_policy_follow_the_token_advantages(tmp_path, tiny_llada_dir, monkeypatch):
    """With 2 inner iterations (old-policy scores needed) and skip_zero_advantage, the rows to score are chosen from
    the token advantages: a tied group (group advantage 0) still trains once its values are non-zero."""
    from dare.run import Run
    from dare.runspec import load_spec
    from dare_grpo.objectives.tracerl.trainer import TraceRLValueTrainer

    seen = []
    trained_rows = TraceRLValueTrainer.trained_rows

    def spy(self, rollout):
        seen.append(rollout.advantages.dim())
        return trained_rows(self, rollout)

    monkeypatch.setattr(TraceRLValueTrainer, "trained_rows", spy)
    monkeypatch.setattr("dare.builtins.rewards.sudoku_score", lambda completion, *a: len(set(completion)) / 8)
    spec = _spec(tiny_llada_dir, tmp_path / "run", steps=2)
    spec["algorithm"]["params"]["num_iterations"] = 2
    (tmp_path / "s.yaml").write_text(yaml.safe_dump(spec))
    Run(load_spec(tmp_path / "s.yaml")).execute(evaluate=False)
    assert seen and set(seen) == {2}


def test_bf16_weights_train_policy_and_value_model_in_fp32_master_weights_and_resume_bit_exact(tmp_path,
                                                                                                tiny_llada_dir,
                                                                                                monkeypatch):
    """``model.dtype: bfloat16`` with ``train.bf16``: the policy and the value model train fp32 master weights
    (dare/trainers/precision.py), saved as such, and a rerun from the first checkpoint ends bit-identical."""
    from safetensors.torch import load_file

    from dare.run import Run
    from dare.runspec import load_spec

    monkeypatch.setattr("dare.builtins.rewards.sudoku_score", lambda completion, *a: len(set(completion)) / 8)
    out = tmp_path / "run"
    spec = _spec(tiny_llada_dir, out, steps=2)
    spec["model"]["dtype"] = "bfloat16"
    spec["train"].update(bf16=True, learning_rate=1e-5)
    (tmp_path / "s.yaml").write_text(yaml.safe_dump(spec))
    Run(load_spec(tmp_path / "s.yaml")).execute(evaluate=False)
    policy = load_file(str(out / "model" / "model.safetensors"))
    value = load_file(str(out / "value_model" / "model.safetensors"))
    assert {v.dtype for v in policy.values()} == {v.dtype for v in value.values()} == {torch.float32}
    start = load_file(str(tiny_llada_dir / "model.safetensors"))
    moved = sum(int((start[k].to(torch.bfloat16).float() != v).sum()) for k, v in policy.items())
    assert moved > 0.5 * sum(v.numel() for v in policy.values())  # lr 1e-5: steps that bf16 weights would round away

    shutil.rmtree(out / "checkpoints" / "checkpoint-2")
    shutil.rmtree(out / "model")
    shutil.rmtree(out / "value_model")
    Run(load_spec(tmp_path / "s.yaml", check=False)).execute(evaluate=False)
    for name, before in (("model", policy), ("value_model", value)):
        after = load_file(str(out / name / "model.safetensors"))
        assert all(torch.equal(after[k], v) for k, v in before.items()), name
