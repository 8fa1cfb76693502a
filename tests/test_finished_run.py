"""What a finished run gives a user, on one tiny `dare run`: progress with steps, reports that explain their
numbers, TensorBoard scores under eval/, files under the user's umask, `dare generate --run` answering like
the run's own samples, and `dare eval` with evaluation-only overrides."""

from __future__ import annotations

import json
import os
import stat

import pytest
import torch
import yaml

from dare.cli import main
from dare.data import load_rows

PROMPT = "{{ extra_info.puzzle }}"
REWARD = {"name": "sudoku", "params": {"require_answer_tags": False}}


def _spec(model_dir, out_dir):
    return {
        "model": {"path": str(model_dir)},
        "data": {"train": {"path": "dare://sudoku/train.parquet", "limit": 16, "prompt_template": PROMPT,
                           "response_template": "{{ reward_model.ground_truth }}", "system_prompt": "Solve it."}},
        "algorithm": {"name": "sft"},
        "sampler": {"name": "llada", "params": {"gen_length": 17, "block_length": 17, "steps": 17}},
        "train": {"learning_rate": 2e-3, "max_steps": 4, "per_device_batch_size": 4, "logging_steps": 2, "save_steps": 2,
                  "eval_steps": 2, "eval_limit": 4},
        # chat template on with a system prompt: `dare generate --run` must reproduce both
        "eval": {"batch_size": 4, "validation": {"name": "sudoku", "path": "dare://sudoku/train.parquet", "offset": 1000,
                                                 "limit": 4, "prompt_template": PROMPT, "reward": REWARD},
                 "benchmarks": [{"name": "sudoku", "limit": 8, "prompt_template": PROMPT, "system_prompt": "Solve it.",
                                 "reward": REWARD}]},
        "output": {"dir": str(out_dir)},
    }


def _cli(*args):
    """``dare ARGS`` in-process: ``(exit code, stdout, stderr)`` (capsys is per test; this fixture is per module)."""
    import contextlib
    import io

    out, err = io.StringIO(), io.StringIO()
    code = 0
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            main(list(args))
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else 1
    return code, out.getvalue(), err.getvalue()


@pytest.fixture(scope="module")
def finished(tmp_path_factory):
    """A finished 4-step SFT run made by `dare run` under umask 022, with progress lines printed at every update."""
    from dare.testing import tiny_model

    root = tmp_path_factory.mktemp("finished")
    tiny_model("llada", root / "model", seed=0)
    spec = root / "s.yaml"
    spec.write_text(yaml.safe_dump(_spec(root / "model", root / "run")))
    env = {"DARE_PROGRESS": "plain", "DARE_PROGRESS_INTERVAL": "0"}
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    umask = os.umask(0o022)
    try:
        code, out, err = _cli("run", str(spec))
    finally:
        os.umask(umask)
        for k, v in saved.items():
            os.environ.pop(k) if v is None else os.environ.__setitem__(k, v)
    assert code == 0, err[-3000:]
    return {"dir": root / "run", "spec": spec, "out": out, "err": err}


def test_progress_shows_stages_and_steps(finished):
    err = finished["err"]
    for banner in ("== evaluate: before training: sudoku ==", "== train: sft, 4 steps", "== validate: in-training evaluation "
                   "at step 2/4 ==", "== evaluate: after training: sudoku ==", "== report: "):
        assert banner in err, banner
    assert "before: sudoku: 4/8 rows (" in err and "left)" in err  # per batch, with rate and time left
    assert "step 2/4: loss " in err and "| " in err and "steps/s" in err
    assert "step 2/4: evaluation on 4 rows: validation/accuracy " in err
    assert "train: 4/4 steps (" in err
    assert "'epoch'" not in err and "{'loss'" not in err  # no raw Hugging Face log dicts
    assert err.index("== evaluate: before") < err.index("== train") < err.index("== evaluate: after") < err.index("== report")


def test_report_explains_its_numbers(finished):
    d = finished["dir"]
    md = (d / "report.md").read_text()
    for needle in ("What the columns mean:", "- **accuracy**: fraction of rows the benchmark counts as solved",
                   "- **tokens/s**: decoded positions", "- benchmark **sudoku**: 4x4 Sudoku (500 test puzzles); accuracy = "
                   "exact solves, mean reward = empty-cell accuracy",
                   "- tokens/s timed over: before sudoku: batch 2 of 2; the first batch",
                   '| objective | sft `{"block_length": null, "encoder_loss_weight": 1.0, "mask_eps": 0.001, "padding_block_weight": 1.0, "self_conditioning_p": 0.5}` |', "| steps | 4 of 4 |",
                   "| training data | dare://sudoku/train.parquet (16 rows, 16 training examples) |",
                   "| sampler | llada `{", "| in-training evaluation | every 2 steps on validation (sudoku): 4 rows "
                   "(1000-1003) of dare://sudoku/train.parquet |",
                   "| after rows | sudoku: 8 rows (0-7) of dare://sudoku/test.parquet |",
                   "torch CPU capability", "what depends on the machine"):
        assert needle in md, needle
    report = json.loads((d / "report.json").read_text())
    machine = report["provenance"]["machine"]
    assert machine["torch_cpu_capability"] == torch.backends.cpu.get_cpu_capability()
    assert machine["device"] == "cpu" and machine["processes"] == 1 and machine["torch_threads"] >= 1
    assert machine["cpu_model"]
    assert report["run"]["train_seconds"] > 0 and set(report["run"]["stage_seconds"]) == {"before", "after"}
    # tokens/s leaves out the first (warm-up) batch: 4 prompts x 17 positions in the second batch
    r = report["results"]["before"][0]
    assert r["batches"] == 2 and 0 < r["warmup_seconds"] < r["seconds"]
    assert r["tokens_per_second"] == pytest.approx((r["generated_tokens"] - 4 * 17) / (r["seconds"] - r["warmup_seconds"]))


def test_plot_is_written(finished):
    assert (finished["dir"] / "plot.png").stat().st_size > 10_000


def test_tensorboard_scores_are_under_eval(finished):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(finished["dir"] / "tensorboard"))
    acc.Reload()
    tags = acc.Tags()["scalars"]
    assert {"eval/validation/accuracy", "eval/validation/mean_reward", "train/loss"} <= set(tags)
    assert not [t for t in tags if t.startswith("train/eval")]
    assert [e.step for e in acc.Scalars("eval/validation/accuracy")] == [2, 4]


def test_run_files_follow_the_umask(finished):
    d = finished["dir"]
    for f in ("model/model.safetensors", "model/config.json", "report.md", "report.json", "run.json", "eval/before.json",
              "samples/after-sudoku.json", "checkpoints/checkpoint-4/model.safetensors", "plot.png", "metrics.jsonl"):
        assert stat.S_IMODE((d / f).stat().st_mode) == 0o644, f
    for sub in ("model", "checkpoints/checkpoint-4", "samples"):
        assert stat.S_IMODE((d / sub).stat().st_mode) == 0o755, sub


def test_generate_run_answers_like_the_runs_own_samples(finished):
    d = finished["dir"]
    samples = json.loads((d / "samples" / "after-sudoku.json").read_text())
    puzzles = [r["extra_info"]["puzzle"] for r in load_rows("dare://sudoku/test.parquet", limit=3)]
    code, out, err = _cli("generate", "--run", str(d), *[a for p in puzzles for a in ("--prompt", p)], "--json")
    assert code == 0, err
    assert json.loads(out)["completions"] == [s["completion"] for s in samples[:3]]
    assert f"{d}: its trained model {d / 'model'}" in err and "chat template on, system prompt" in err
    # the run's prompt format is what made the difference: without its system prompt the prompts differ
    from dare.ops.generate import render_prompts
    from dare.modeling import load_model

    tok = load_model(d / "model").tokenizer
    assert render_prompts(tok, puzzles[:1], True, "Solve it.", strict=True) == [samples[0]["prompt"]]
    assert render_prompts(tok, puzzles[:1], True, None, strict=True) != [samples[0]["prompt"]]


def test_interrupted_message_names_what_was_saved(finished):
    from dare.run import Run

    run = Run.from_file(str(finished["spec"]))
    msg = run.interrupted_message("dare run s.yaml")
    d = finished["dir"]
    assert msg == (f"interrupted: saved the checkpoint of step 4 of 4 ({d / 'checkpoints' / 'checkpoint-4'}); the evaluation "
                   f"before training ({d / 'eval' / 'before.json'}). Re-running the same command resumes training from "
                   "step 4, reusing the saved evaluation before training: dare run s.yaml")
    run.stage = "eval"  # `dare eval` interrupted: no checkpoint talk
    assert run.interrupted_message("dare eval s.yaml") == ("interrupted during the evaluation: nothing was saved. "
                                                            "Re-running the same command evaluates again: dare eval s.yaml")
    run.stage = "after"  # training finished, model/ saved: no checkpoint or resume talk
    assert run.interrupted_message("dare run s.yaml") == (
        f"interrupted during the evaluation after training: training finished and the trained model is in {d / 'model'}; "
        f"the evaluation before training is saved ({d / 'eval' / 'before.json'}). Re-running the same command evaluates "
        "the trained model again (no retraining): dare run s.yaml")


def test_running_a_finished_run_again_changes_nothing(finished):
    """The same `dare run` of a finished run: nothing trained or evaluated again, the report's facts stay."""
    d, spec = finished["dir"], str(finished["spec"])
    before = json.loads((d / "report.json").read_text())
    after_json = (d / "eval" / "after.json").read_bytes()
    weights = (d / "model" / "model.safetensors").read_bytes()
    code, out, err = _cli("run", spec)
    assert code == 0, err[-3000:]
    assert "== train: sft, 4 steps already trained: nothing to train" in err and "resuming from step" not in err
    assert "== evaluate: after: kept from " in err and "after: sudoku:" not in err
    now = json.loads((d / "report.json").read_text())
    assert now["run"] == before["run"] and now["provenance"] == before["provenance"]
    assert now["train_metrics"] == before["train_metrics"] and now["results"] == before["results"]
    assert (d / "eval" / "after.json").read_bytes() == after_json
    assert (d / "model" / "model.safetensors").read_bytes() == weights

def test_eval_takes_evaluation_only_overrides(finished):
    d, spec = finished["dir"], str(finished["spec"])
    run_json = (d / "run.json").read_text()
    run_prov = json.loads((d / "report.json").read_text())["provenance"]
    code, out, err = _cli("eval", spec, "--set", "eval.benchmarks.0.limit=4", "--set", "eval.batch_size=2")
    assert code == 0, err
    assert "other evaluation settings: eval.benchmarks[0].limit (8 -> 4), eval.batch_size (4 -> 2)" in err
    md = (d / "report.md").read_text()
    assert "| eval | sudoku |" in md and "| before | sudoku |" in md and "| after | sudoku |" in md
    assert "The `eval` row was measured with other evaluation settings than the run's: eval.benchmarks[0].limit (8 -> 4)" in md
    report = json.loads((d / "report.json").read_text())
    assert report["results"]["eval"][0]["n"] == 4 and report["train_metrics"]["global_step"] == 4
    # the training run's machine and time stay; the evaluation's are recorded apart
    assert report["provenance"]["machine"] == run_prov["machine"] and report["provenance"]["created"] == run_prov["created"]
    later = report["provenance"]["evaluated_later"]
    assert set(later) == {"created", "machine", "sampler", "seed", "git_sha", "versions"} and "load_average" in later["machine"]
    assert md.count("when the run started") == 1 and f"- evaluated later (the `eval` row, `dare eval`): {later['created']}, on " in md
    assert (d / "run.json").read_text() == run_json  # the directory still belongs to the run
    # training keys are not evaluation settings: refused, naming the key
    code, _, err = _cli("eval", spec, "--set", "train.max_steps=5")
    assert code == 2 and "its spec differs in train.max_steps (4 -> 5)" in err
    # `dare run` with an evaluation-only change is refused (it would retrain), pointing at `dare eval`
    code, _, err = _cli("run", spec, "--set", "eval.batch_size=2")
    assert code == 2 and "eval.batch_size (4 -> 2)" in err and "use `dare eval`" in err


def test_the_trained_model_ships_no_pickle(finished):
    """model/ (what a user receives) holds no ``training_args.bin`` nor any other pickle-based file."""
    model = finished["dir"] / "model"
    assert (model / "model.safetensors").is_file()
    assert sorted(p.name for p in model.rglob("*") if p.suffix in (".bin", ".pt", ".pth", ".pkl", ".pickle")) == []


def test_generate_model_of_a_run_uses_the_runs_prompt_format_and_says_so(finished, tiny_llada_dir):
    d = finished["dir"]
    samples = json.loads((d / "samples" / "after-sudoku.json").read_text())
    puzzles = [r["extra_info"]["puzzle"] for r in load_rows("dare://sudoku/test.parquet", limit=2)]
    prompts = [a for p in puzzles for a in ("--prompt", p)]
    params = [a for kv in ("gen_length=17", "block_length=17", "steps=17") for a in ("--param", kv)]  # the run's sampler
    code, out, err = _cli("generate", "--model", str(d / "model"), *prompts, *params, "--json")
    assert code == 0, err
    assert json.loads(out)["completions"] == [s["completion"] for s in samples[:2]]  # the run's format: same answers
    assert (f"prompt format: the tokenizer's chat template, with the system prompt (the eval.benchmarks[0] of the run "
            f"in {d}; --chat/--no-chat choose)") in err
    # a checkpoint of the run too; --no-chat overrides and is named
    code, _, err = _cli("generate", "--model", str(d / "checkpoints" / "checkpoint-4"), *prompts, *params, "--no-chat")
    assert code == 0, err
    assert "prompt format: plain text, no chat template, with the system prompt (--no-chat;" in err
    # a model that no DARE run wrote: the tokenizer's chat template, said to be the default
    code, _, err = _cli("generate", "--model", str(tiny_llada_dir), *prompts, "--param", "gen_length=4",
                        "--param", "block_length=4", "--param", "steps=4")
    assert code == 0, err
    assert "prompt format: the tokenizer's chat template (the default for a model that did not come from a DARE run" in err


def test_generate_model_settings_of_a_run_trained_without_chat_template(tmp_path):
    from dare.ops.generate import model_settings

    run = tmp_path / "run"
    (run / "model").mkdir(parents=True)
    spec = {"data": {"train": {"path": "x.parquet", "chat_template": False}}}
    (run / "run.json").write_text(json.dumps({"spec_hash": "0" * 16, "source": None, "spec": spec}))
    s = model_settings(str(run / "model"))
    assert (s.chat_template, s.system_prompt, s.format_from) == (False, None, f"the data.train of the run in {run}")
    (tmp_path / "elsewhere").mkdir()
    assert model_settings(str(tmp_path / "elsewhere")).chat_template is True


def test_generate_run_of_an_unfinished_run_uses_its_last_checkpoint(tmp_path):
    """A run stopped before model/ was written: --run loads its newest complete checkpoint and says so (not the
    untrained init-model/); a checkpoint cut short (no trainer_state.json) is not used; with none, the start model."""
    from dare.ops.generate import run_settings

    run = tmp_path / "run"
    for d in ("init-model", "checkpoints/checkpoint-2", "checkpoints/checkpoint-4", "checkpoints/checkpoint-6"):
        (run / d).mkdir(parents=True)
        (run / d / "config.json").write_text("{}")
    for d in ("checkpoint-2", "checkpoint-4"):  # checkpoint-6 was cut short by a kill
        (run / "checkpoints" / d / "trainer_state.json").write_text("{}")
    spec = {"model": {"new": {"family": "llada", "preset": "tiny"}}, "sampler": {"name": "llada"}}
    (run / "run.json").write_text(json.dumps({"spec_hash": "0" * 16, "source": None, "spec": spec}))
    s = run_settings(run)
    assert s.model == str(run / "checkpoints" / "checkpoint-4")
    assert "its last checkpoint (step 4; the run has not finished" in s.origin
    for d in ("checkpoint-2", "checkpoint-4"):
        (run / "checkpoints" / d / "trainer_state.json").unlink()
    s = run_settings(run)
    assert s.model == str(run / "init-model") and "its starting model" in s.origin
    (run / "model").mkdir()
    (run / "model" / "config.json").write_text("{}")
    assert run_settings(run).model == str(run / "model")
