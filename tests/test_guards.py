"""Training fails loudly and loses nothing: NaN/Inf steps are skipped and counted, K in a row stop the run,
non-finite weights are never written, and a failed checkpoint write is one clear error with the previous
checkpoint intact (docs/architecture.md, "Errors")."""

from __future__ import annotations

import errno
import json
import sys
from pathlib import Path

import pytest
import torch
import yaml
from safetensors.torch import load_file

pytest.importorskip("dare_llada")

BIN = Path(sys.executable).parent


def _spec(tmp_path, **train) -> dict:
    return {
        "model": {"new": {"family": "llada", "preset": "tiny"}},
        "data": {"train": {"path": "dare://sudoku/train.parquet", "limit": 64, "prompt_template": "{{ extra_info.puzzle }}",
                           "response_template": "{{ reward_model.ground_truth }}", "chat_template": False}},
        "algorithm": {"name": "sft"},
        "train": {"learning_rate": 1e-3, "max_steps": 4, "per_device_batch_size": 8, "logging_steps": 1, "save_steps": 2,
                  "num_threads": 1, "seed": 0, **train},
        "output": {"dir": str(tmp_path / "run")},
    }


@pytest.fixture(autouse=True)
def restore_threads():
    before = torch.get_num_threads()
    yield
    torch.set_num_threads(before)


def _records(run_dir: Path) -> list[dict]:
    return [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]


def test_three_nan_steps_in_a_row_stop_the_run_with_a_clear_error(tmp_path, monkeypatch, capsys):
    """From step 3 on every forward is NaN (a diverged model): steps 3-5 are skipped, the third skip stops
    `dare train` with exit status 2 and one paragraph; only finite checkpoints exist and no model/ is written."""
    from dare.cli import main
    from dare_llada.family import LLaDAFamily

    original = LLaDAFamily.denoiser_logits
    state = {"calls": 0}

    def diverged(self, model, noisy, clean, attn=None):
        state["calls"] += 1
        out = original(self, model, noisy, clean, attn)
        return out * float("nan") if state["calls"] > 2 else out

    monkeypatch.setattr(LLaDAFamily, "denoiser_logits", diverged)
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(_spec(tmp_path, max_steps=12, save_steps=1)))
    with pytest.raises(SystemExit) as exit_:
        main(["train", str(path)])
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    msg = err.split("error: ", 1)[1]
    assert msg.startswith("step 5: the loss or the gradients were NaN/Inf for 3 optimizer steps in a row (learning rate")
    assert "Traceback" not in err and len(msg.strip().splitlines()) == 1
    assert not (tmp_path / "run" / "model").exists()
    ckpts = sorted((tmp_path / "run" / "checkpoints").glob("checkpoint-*"))
    assert ckpts and all(all(bool(torch.isfinite(t).all()) for t in load_file(c / "model.safetensors").values()) for c in ckpts)
    assert [r.get("nonfinite_steps") for r in _records(tmp_path / "run") if "loss" in r][:4] == [0, 0, 1, 1]


def test_one_nan_forward_skips_one_step_and_training_goes_on(tmp_path, monkeypatch):
    from dare.run import Run
    from dare.runspec import validate_spec
    from dare_llada.family import LLaDAFamily

    calls = {"n": 0}
    original = LLaDAFamily.denoiser_logits

    def sometimes_nan(self, model, noisy, clean, attn=None):
        calls["n"] += 1
        out = original(self, model, noisy, clean, attn)
        return out * float("nan") if calls["n"] == 2 else out  # the second step's forward

    monkeypatch.setattr(LLaDAFamily, "denoiser_logits", sometimes_nan)
    run = Run(validate_spec(_spec(tmp_path)))
    run.execute(evaluate=False)
    recs = [r for r in _records(run.dir) if "loss" in r]
    assert [r["nonfinite_steps"] for r in recs] == [0, 1, 0, 0]
    weights = load_file(run.model_dir / "model.safetensors")
    assert all(bool(torch.isfinite(t).all()) for t in weights.values())


def test_non_finite_weights_are_never_saved(tmp_path):
    from dare.errors import DareError
    from dare.run import Run
    from dare.runspec import validate_spec
    from dare.trainers.guards import NonFiniteError

    run = Run(validate_spec(_spec(tmp_path, max_steps=2)))
    run.execute(evaluate=False)
    trainer_cls = run.objective.trainer_class()
    datasets = run.objective.build_datasets(run)
    from dare.trainers.config import config_from_spec

    trainer = trainer_cls(model=run.model, args=config_from_spec(run.spec.train, str(run.checkpoint_dir)),
                          train_dataset=datasets["train"], data_collator=run.objective.data_collator(run, datasets),
                          family=run.family, tokens=run.tokens, objective=run.objective)
    before = (run.model_dir / "model.safetensors").read_bytes()
    with torch.no_grad():
        next(run.model.parameters())[0] = float("inf")
    with pytest.raises(NonFiniteError, match=r"not saving the final model: weight .* holds NaN/Inf") as err:
        trainer.save_final(run.model_dir)
    assert isinstance(err.value, DareError)
    assert (run.model_dir / "model.safetensors").read_bytes() == before  # the previous model is intact
    assert not (run.checkpoint_dir / ".staging").exists() or not any((run.checkpoint_dir / ".staging").iterdir())


def test_a_full_disk_during_a_checkpoint_is_one_clear_error(tmp_path, monkeypatch):
    """The second checkpoint's write fails with ENOSPC: a DareError naming it, the staged copy removed, the
    first checkpoint intact, and re-running resumes from it."""
    import transformers

    from dare.errors import DareError
    from dare.run import Run
    from dare.runspec import validate_spec

    original = transformers.Trainer._save_optimizer_and_scheduler

    def full(self, output_dir):
        if self.state.global_step == 4:
            raise RuntimeError("[enforce fail at inline_container.cc:626] . unexpected pos 64 vs 0") from OSError(
                errno.ENOSPC, "No space left on device")
        return original(self, output_dir)

    monkeypatch.setattr(transformers.Trainer, "_save_optimizer_and_scheduler", full)
    run = Run(validate_spec(_spec(tmp_path)))
    with pytest.raises(DareError, match=r"saving checkpoint-4 failed: no space left on the device holding .*"
                                        r"the last checkpoint checkpoint-2 is intact"):
        run.execute(evaluate=False)
    assert sorted(p.name for p in run.checkpoint_dir.glob("checkpoint-*")) == ["checkpoint-2"]
    staging = run.checkpoint_dir / ".staging"
    assert not staging.exists() or not any(staging.iterdir())
    monkeypatch.setattr(transformers.Trainer, "_save_optimizer_and_scheduler", original)
    again = Run(validate_spec(_spec(tmp_path)))
    assert again.execute(evaluate=False)["train"]["global_step"] == 4


def _rl_spec(tmp_path, reward: dict, max_steps: int = 4) -> dict:
    pytest.importorskip("dare_grpo")
    return {
        "model": {"new": {"family": "llada", "preset": "tiny"}},
        "data": {"train": {"path": "dare://sudoku/train.parquet", "limit": 8, "chat_template": False,
                           "prompt_template": "{{ extra_info.puzzle }}"}},
        "algorithm": {"name": "d1", "params": {"group_size": 2, "rollout_sampler": {"temperature": 1.0}}},
        "sampler": {"name": "llada", "params": {"gen_length": 4, "block_length": 4, "steps": 4}},
        "rewards": [{"name": "sudoku", "params": {"require_answer_tags": False}, **reward}],
        "train": {"learning_rate": 1e-3, "max_steps": max_steps, "per_device_batch_size": 2, "logging_steps": 1,
                  "save_steps": 100, "num_threads": 1, "seed": 0},
        "output": {"dir": str(tmp_path / "run")},
    }


def _one_paragraph(capsys) -> str:
    err = capsys.readouterr().err
    assert "Traceback" not in err
    msg = err.split("error: ", 1)[1]
    assert len(msg.strip().splitlines()) == 1
    return msg


@pytest.mark.parametrize("max_steps,stops_at", [(6, 3), (2, 2)])
def test_a_reward_that_returns_nan_stops_the_run_naming_it(tmp_path, monkeypatch, capsys, max_steps, stops_at):
    """Every completion's reward is NaN: each rollout's warning and the final error name the reward and its
    values; the run stops with exit status 2 after max_nonfinite_steps (3) rollouts, or after every step of a
    shorter run, instead of exiting 0 with every optimizer step skipped."""
    from dare.cli import main

    monkeypatch.setattr("dare.builtins.rewards.sudoku_score", lambda completion, *a: float("nan"))
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(_rl_spec(tmp_path, {}, max_steps=max_steps)))
    with pytest.raises(SystemExit) as exit_:
        main(["train", str(path)])
    assert exit_.value.code == 2
    msg = _one_paragraph(capsys)
    assert msg.startswith(f"step {stops_at}: the rewards were NaN/Inf for {stops_at} rollout(s) in a row")
    assert "reward 'sudoku' returned nan, nan, nan, nan (4 completion(s); sample index" in msg
    assert not (tmp_path / "run" / "model").exists()


def test_a_reward_that_never_returns_stops_the_run_naming_it_and_the_sample(tmp_path, monkeypatch, capsys):
    """A reward call past its ``timeout_s`` (here 1 s; a sleep that would last an hour) ends the run with exit
    status 2 and one paragraph naming the reward, the limit and the sample, within seconds."""
    import time

    from dare.cli import main

    monkeypatch.setattr("dare.builtins.rewards.sudoku_score", lambda completion, *a: time.sleep(3600))
    # the watchdog's last resort ends the process (os._exit) when the interrupted call has not returned within
    # GRACE_S: on a loaded machine that would end the whole pytest process, so this test gives it longer
    monkeypatch.setattr("dare.rewards.deadline.GRACE_S", 120.0)
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(_rl_spec(tmp_path, {"timeout_s": 1.0})))
    started = time.monotonic()
    with pytest.raises(SystemExit) as exit_:
        main(["train", str(path)])
    assert exit_.value.code == 2 and time.monotonic() - started < 60
    msg = _one_paragraph(capsys)
    assert msg.startswith("reward 'sudoku' did not return within its timeout_s of 1 s on the sample with index=")
    assert "data_source=sudoku" in msg and "rewards[].timeout_s" in msg
