"""Preference runs on real Sudoku pairs (every installed family) and the pairs data checks.

Pairs come from the packaged training puzzles (``dare://sudoku/train.parquet``): the prompt is the
16-digit puzzle, ``chosen`` its solution, ``rejected`` the solution with four originally-empty cells
corrupted (one left unfilled as ``0``, three set to wrong digits). Held-out pairs use later puzzles.
"""

from __future__ import annotations

import json
import math
import random

import pytest
import torch

from dare.errors import DataError, SpecError
from dare.runspec import validate_spec

pytest.importorskip("dare_dpo")

from dare_dpo.data import load_pairs  # noqa: E402

FAMILIES = ("llada", "dream", "sdar", "llada2")


@pytest.fixture(autouse=True)
def one_thread():
    """Tiny models run fastest on one thread (the trainer sets it from train.num_threads); restore after."""
    before = torch.get_num_threads()
    yield
    torch.set_num_threads(before)


def _corrupt(solution: str, puzzle: str, rng: random.Random) -> str:
    cells = rng.sample([i for i, c in enumerate(puzzle) if c == "0"], 4)
    out = list(solution)
    out[cells[0]] = "0"
    for i in cells[1:]:
        out[i] = rng.choice([d for d in "1234" if d != solution[i]])
    return "".join(out)


def sudoku_pairs(path, start: int, n: int, seed: int) -> str:
    """Write ``n`` (puzzle, solution, corrupted solution) pairs from the packaged puzzles to JSONL."""
    from dare.data import load_rows

    rng = random.Random(seed)
    rows = load_rows("dare://sudoku/train.parquet", limit=start + n)[start:]
    with open(path, "w") as f:
        for r in rows:
            puzzle, solution = r["extra_info"]["puzzle"], r["reward_model"]["ground_truth"]
            f.write(json.dumps({"prompt": puzzle, "chosen": solution, "rejected": _corrupt(solution, puzzle, rng)}) + "\n")
    return str(path)


def preference_spec(tmp_path, family: str, train: str, held_out: str | None = None, algorithm: str = "vrpo", **model):
    data = {"train": {"path": train, "chat_template": False}}
    if held_out:
        data["eval"] = {"path": held_out, "chat_template": False}
    return {
        "model": {"new": {"family": family, "preset": "tiny"}, **model},
        "data": data,
        "algorithm": {"name": algorithm},
        "train": {"learning_rate": 1e-3, "max_steps": 8, "per_device_batch_size": 16, "logging_steps": 10,
                  "save_steps": 1000, "num_threads": 1, "seed": 0},
        "output": {"dir": str(tmp_path / f"run-{family}")},
    }


def _installed(family: str) -> None:
    from dare.plugins.manager import get_registry

    if get_registry().find("model_family", family) is None:
        pytest.skip(f"model family {family!r} is not installed")


@pytest.fixture(scope="module")
def pairs(tmp_path_factory):
    d = tmp_path_factory.mktemp("pairs")
    return sudoku_pairs(d / "train.jsonl", 0, 256, 0), sudoku_pairs(d / "heldout.jsonl", 10000, 32, 1)


@pytest.mark.parametrize("family", FAMILIES)
def test_vrpo_raises_heldout_reward_accuracy(tmp_path, pairs, family):
    from dare.run import Run

    _installed(family)
    run = Run(validate_spec(preference_spec(tmp_path, family, *pairs)))
    run.prepare()
    m = run.train()
    # at the start policy = reference and the corruptions are shared: every margin is exactly 0
    assert m["heldout/rewards/accuracies/before"] == 0.0 and m["heldout/loss/before"] == pytest.approx(math.log(2))
    assert m["heldout/rewards/accuracies/after"] >= 0.7
    assert m["heldout/loss/after"] < math.log(2)
    assert m["heldout/elbo/accuracy/after"] > m["heldout/elbo/accuracy/before"]  # the policy itself prefers y_w more often
    assert (run.model_dir / "config.json").is_file()
    logged = [json.loads(line) for line in (run.dir / "metrics.jsonl").read_text().splitlines()]
    assert any("rewards/accuracies" in r and "elbo/chosen" in r for r in logged)


def test_lora_dpo_uses_adapters_disabled_reference(tmp_path, pairs):
    """With LoRA the reference is the same model with adapters off: no second copy, same start."""
    from dare.run import Run

    spec = preference_spec(tmp_path, "llada", pairs[0], pairs[1], algorithm="dpo", lora={"r": 4, "alpha": 8})
    spec["algorithm"]["params"] = {"estimator": {"name": "mc-elbo", "params": {"mc_num": 2, "scheme": "bernoulli"}},
                                   "share_corruptions": True}
    spec["train"].update(max_steps=4, eval_steps=2)
    run = Run(validate_spec(spec))
    run.prepare()
    m = run.train()
    assert m["heldout/rewards/accuracies/before"] == 0.0  # policy == reference exactly (B = 0 at init)
    assert m["heldout/rewards/margins/after"] != 0.0
    assert (run.model_dir / "adapter" / "adapter_config.json").is_file()
    logged = [json.loads(line) for line in (run.dir / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in logged if "eval/rewards/accuracies" in r] == [2, 4]  # held-out pairs every eval_steps


def test_vrpo_resumes_to_the_same_weights(tmp_path, pairs):
    """Killed after checkpoint-2 (simulated: later files removed), the run redoes steps 3-4 identically."""
    import shutil

    from safetensors.torch import load_file

    from dare.run import Run

    spec = preference_spec(tmp_path, "llada", pairs[0])
    spec["algorithm"]["params"] = {"estimator": {"name": "mc-elbo", "params": {"mc_num": 2, "scheme": "stratified"}}}
    spec["train"].update(max_steps=4, save_steps=2)
    run = Run(validate_spec(spec))
    run.prepare()
    run.train()
    final = load_file(run.model_dir / "model.safetensors")
    shutil.rmtree(run.checkpoint_dir / "checkpoint-4")
    shutil.rmtree(run.model_dir)
    again = Run(validate_spec(spec))
    again.prepare()
    assert again.train()["global_step"] == 4
    resumed = load_file(again.model_dir / "model.safetensors")
    assert all(torch.equal(resumed[k], final[k]) for k in final)  # the frozen reference is the initial model again


# ----------------------------------------------------------------------------- bad input
def _write(path, rows) -> str:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


def test_pairs_without_rejected_fail_validation(tmp_path):
    f = _write(tmp_path / "p.jsonl", [{"prompt": "1+1=", "chosen": "2"}])
    spec = preference_spec(tmp_path, "llada", f)
    with pytest.raises(SpecError) as err:
        validate_spec(spec)
    loc, msg = next(p for p in err.value.problems if "rejected" in p[1])
    assert loc == "data.train.path" and "prompt, chosen and rejected" in msg


def test_identical_pair_fails_before_the_model_loads(tmp_path):
    from dare.run import Run

    f = _write(tmp_path / "p.jsonl", [{"prompt": "1+1=", "chosen": "2", "rejected": "3"},
                                      {"prompt": "2+2=", "chosen": "4", "rejected": "4"}])
    run = Run(validate_spec(preference_spec(tmp_path, "llada", f)))
    with pytest.raises(DataError, match=r"row 1: 'chosen' and 'rejected' are identical"):
        run.train()
    assert "lm" not in run.__dict__  # no weights were loaded


def test_chat_format_pairs(tmp_path):
    f = _write(tmp_path / "p.jsonl", [{
        "prompt": [{"role": "user", "content": "Say hi"}],
        "chosen": [{"role": "user", "content": "Say hi"}, {"role": "assistant", "content": "hi"}],
        "rejected": [{"role": "assistant", "content": "no"}],
    }])
    (pair,) = load_pairs(f)
    assert (pair.chosen, pair.rejected) == ("hi", "no")
    bad = _write(tmp_path / "q.jsonl", [{"prompt": "x", "chosen": "a", "rejected": [{"role": "user", "content": "b"}]}])
    with pytest.raises(DataError, match="'rejected' has role 'user'"):
        load_pairs(bad)
    missing = _write(tmp_path / "r.jsonl", [{"prompt": "x", "chosen": "a"}])
    with pytest.raises(DataError, match="data.train.path.*no column 'rejected'"):
        load_pairs(missing)
