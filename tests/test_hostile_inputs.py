"""Crafted inputs that used to hang or crash: every case runs the real ``dare`` command in a subprocess with a
30-second limit and must end with a non-zero exit status, one ``error:`` paragraph naming the field or file (no
traceback), and nothing written where it should not be.

YAML: an alias bomb, a recursive alias, a 10 MB value and duplicate keys (:mod:`dare.runspec.yamlload`).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

DARE = str(Path(sys.executable).parent / "dare")
LIMIT_S = 30


def dare(*args: str, cwd: Path, timeout: float = LIMIT_S, env: dict | None = None) -> tuple[int, str]:
    """``dare ARGS`` in ``cwd``; ``(exit status, stderr)``. A run past ``timeout`` fails the test (a hang)."""
    full_env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", **(env or {})}
    proc = subprocess.run([DARE, *args], cwd=cwd, env=full_env, capture_output=True, text=True, timeout=timeout)
    return proc.returncode, proc.stderr


def one_paragraph(err: str, *needles: str) -> str:
    """The single ``error:`` line, which must be the last thing printed, name every needle, and follow no traceback."""
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert not any(ln.startswith(("Traceback", "  File")) for ln in lines), err
    errors = [i for i, ln in enumerate(lines) if ln.startswith("error: ")]
    assert len(errors) == 1, err  # the error is the last thing printed: its line, then its problems indented
    assert all(ln.startswith("  ") for ln in lines[errors[0] + 1:]), err
    assert "\n\n" not in err[err.index("error: "):].strip(), err  # one paragraph: no blank line
    errors = ["\n".join(lines[errors[0]:])]
    for n in needles:
        assert n in errors[0], (n, errors[0])
    return errors[0]


def tiny_spec(out: str = "out", **train) -> dict:
    return {
        "model": {"new": {"family": "llada", "preset": "tiny", "tokenizer": "byte", "seed": 0}},
        "data": {"train": {"path": "dare://sudoku/train.parquet", "limit": 4, "prompt_template": "{{ extra_info.puzzle }}",
                           "response_template": "{{ reward_model.ground_truth }}", "chat_template": False}},
        "algorithm": {"name": "sft"},
        "train": {"learning_rate": 1e-3, "max_steps": 1, "per_device_batch_size": 2, "logging_steps": 1,
                  "num_threads": 1, "seed": 0, **train},
        "output": {"dir": out},
    }


# =========================================================================== YAML
def _alias_bomb(levels: int = 9) -> str:
    """The "billion laughs": ``levels`` lists of ten aliases to the previous one (10**levels strings)."""
    lines = ['lol0: &lol0 ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
    for i in range(1, levels):
        lines.append(f"lol{i}: &lol{i} [" + ", ".join([f"*lol{i - 1}"] * 10) + "]")
    return "\n".join(lines) + "\n"


def _spec_text(**edits) -> str:
    spec = tiny_spec()
    spec["data"]["train"].update(edits)
    return yaml.safe_dump(spec, sort_keys=False)


@pytest.mark.parametrize("cmd", ["validate", "train"])
def test_alias_bomb_is_refused_at_once(tmp_path, cmd):
    text = _alias_bomb() + _spec_text().replace("prompt_template: '{{ extra_info.puzzle }}'", "prompt_template: *lol8")
    assert "*lol8" in text
    (tmp_path / "spec.yaml").write_text(text)
    code, err = dare(cmd, "spec.yaml", cwd=tmp_path)
    assert code == 2
    one_paragraph(err, "spec.yaml", "aliases", "100000 values", "line 5")  # lol4: 10**5 strings
    assert sorted(p.name for p in tmp_path.iterdir()) == ["spec.yaml"]


def test_alias_bomb_in_a_set_value_is_refused(tmp_path):
    (tmp_path / "spec.yaml").write_text(_spec_text())
    bomb = "{" + _alias_bomb(7).strip().replace("\n", ", ") + "}"
    code, err = dare("validate", "spec.yaml", "--set", f"train.extra={bomb}", cwd=tmp_path)
    assert code == 2
    one_paragraph(err, "--set train.extra", "aliases")


def test_recursive_alias_is_refused(tmp_path):
    (tmp_path / "spec.yaml").write_text("loop: &loop [1, *loop]\n" + _spec_text())
    code, err = dare("validate", "spec.yaml", cwd=tmp_path)
    assert code == 2
    one_paragraph(err, "recursive YAML alias", "line 1")


def test_small_aliases_still_work(tmp_path):
    text = "base: &lr 0.002\n" + _spec_text().replace("learning_rate: 0.001", "learning_rate: *lr")
    (tmp_path / "spec.yaml").write_text(text.replace("base: &lr", "x-lr: &lr"))
    from dare.runspec.overrides import read_spec_file

    assert read_spec_file(tmp_path / "spec.yaml")["train"]["learning_rate"] == 0.002


@pytest.mark.parametrize("cmd", ["validate", "train"])
def test_ten_megabyte_value_names_its_field(tmp_path, cmd):
    (tmp_path / "spec.yaml").write_text(_spec_text(prompt_template="x" * 10_000_000))
    code, err = dare(cmd, "spec.yaml", cwd=tmp_path)
    assert code == 2
    one_paragraph(err, "data.train.prompt_template", "10000000 characters", "65536")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["spec.yaml"]


def test_value_at_the_size_limit_is_accepted():
    from dare.runspec.yamlload import MAX_STRING_CHARS, load_yaml

    assert load_yaml(f"a: {'x' * MAX_STRING_CHARS}\n") == {"a": "x" * MAX_STRING_CHARS}
    with pytest.raises(Exception, match=r"a: a value of 65537 characters \(line 1\)"):
        load_yaml(f"a: {'x' * (MAX_STRING_CHARS + 1)}\n")


def test_deep_nesting_is_refused():
    from dare.errors import SpecError
    from dare.runspec.yamlload import MAX_DEPTH, load_yaml

    assert load_yaml("a: " + "[" * (MAX_DEPTH - 1) + "]" * (MAX_DEPTH - 1))["a"] is not None
    for depth in (MAX_DEPTH + 1, 999, 5000):  # 5000: libyaml's own limit (1000) answers first
        with pytest.raises(SpecError, match="nested more than|maximum nesting depth"):
            load_yaml("a: " + "[" * depth + "]" * depth)


def test_duplicate_top_level_key_names_both_lines(tmp_path):
    text = _spec_text() + "train:\n  max_steps: 5\n"
    first = 1 + text.splitlines().index("train:")
    second = len(text.splitlines()) - 1
    (tmp_path / "spec.yaml").write_text(text)
    code, err = dare("validate", "spec.yaml", cwd=tmp_path)
    assert code == 2
    one_paragraph(err, "spec.yaml", "'train' is given twice", f"lines {first} and {second}")


def test_duplicate_nested_key_and_merge_keys(tmp_path):
    from dare.errors import SpecError
    from dare.runspec.yamlload import load_yaml

    with pytest.raises(SpecError, match=r"data\.train\.limit: the key 'limit' is given twice in one mapping \(lines 3 and 5\)"):
        load_yaml("data:\n  train:\n    limit: 1\n    path: x\n    limit: 2\n")
    # a merge key overrides, as YAML specifies: not a duplicate
    assert load_yaml("b: &b {x: 1, y: 2}\nc:\n  <<: *b\n  x: 3\n") == {"b": {"x": 1, "y": 2}, "c": {"x": 3, "y": 2}}


# =========================================================================== one run per run directory
def _hold_lock_in_child(run_dir: Path, then: str = "sleep") -> subprocess.Popen:
    """A Python process that takes ``run_dir``'s lock, prints ``locked``, then sleeps (or dies by SIGKILL)."""
    code = ("import os, signal, sys, time\nfrom dare.run.lock import acquire\nfrom dare.run.rundir import RunDir\n"
            f"h = acquire(RunDir({str(run_dir)!r}))\nprint('locked', flush=True)\n"
            + ("os.kill(os.getpid(), signal.SIGKILL)\n" if then == "die" else "time.sleep(600)\n"))
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "locked"
    return proc


def test_a_held_lock_names_its_process_and_a_dead_ones_is_taken_over(tmp_path, capsys):
    from dare.run.lock import RunDirLocked, acquire, release
    from dare.run.rundir import RunDir

    run_dir = tmp_path / "runs" / "x"
    holder = _hold_lock_in_child(run_dir)
    try:
        with pytest.raises(RunDirLocked, match=rf"output.dir '{run_dir}' is in use by process {holder.pid} on host "):
            acquire(RunDir(run_dir))
    finally:
        holder.kill()
        holder.wait()
    # the holder died without removing its lock file (SIGKILL): the lock is free, and whose it was is said
    assert RunDir(run_dir).lock.is_file()
    handle = acquire(RunDir(run_dir))
    assert f"taking over the stale lock of process {holder.pid} on host" in capsys.readouterr().err
    assert f'"pid": {os.getpid()}' in RunDir(run_dir).lock.read_text()
    release(handle)
    assert not RunDir(run_dir).lock.exists()
    release(acquire(RunDir(tmp_path / "new" / "x")))
    assert not (tmp_path / "new").exists()  # the parent made for the lock file is removed with it


def test_the_lock_comes_before_the_slow_checks(tmp_path):
    """A command on a run directory in use stops at the lock, before it checks (or loads) anything: here the spec's
    model does not exist, and the error is the lock's, not the model's."""
    spec = tiny_spec("out")
    spec["model"] = {"path": str(tmp_path / "no-such-model")}
    (tmp_path / "s.yaml").write_text(yaml.safe_dump(spec, sort_keys=False))
    holder = _hold_lock_in_child(tmp_path / "out")
    try:
        for command in ("run", "train"):
            out = subprocess.run([DARE, command, "s.yaml"], cwd=tmp_path, capture_output=True, text=True, timeout=300)
            assert out.returncode == 2, out.stderr
            assert f"is in use by process {holder.pid}" in out.stderr and "no-such-model" not in out.stderr, out.stderr
    finally:
        holder.kill()
        holder.wait()
    out = subprocess.run([DARE, "run", "s.yaml"], cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert out.returncode == 2 and "model.path" in out.stderr and "Traceback" not in out.stderr, out.stderr
    assert not (tmp_path / "out").exists()


def _spec_file(d: Path, name: str, **train) -> str:
    (d / f"{name}.yaml").write_text(yaml.safe_dump(tiny_spec("out", **train), sort_keys=False))
    return f"{name}.yaml"


def test_two_runs_into_one_directory(tmp_path):
    """A second `dare train` (another spec) into a directory in use stops at once naming the first; the first's
    files are its own."""
    first = subprocess.Popen([DARE, "train", _spec_file(tmp_path, "a", max_steps=100000, save_steps=1000)],
                             cwd=tmp_path, env={**os.environ, "OMP_NUM_THREADS": "1"}, stdout=subprocess.DEVNULL,
                             stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 300
        while not (tmp_path / "out" / "metrics.jsonl").is_file():
            assert first.poll() is None, first.stderr.read()[-2000:]
            assert time.monotonic() < deadline
            time.sleep(0.2)
        code, err = dare("train", _spec_file(tmp_path, "b", seed=1), cwd=tmp_path, timeout=120)
        assert code == 2
        one_paragraph(err, "output.dir 'out' is in use by process", str(first.pid), "`dare train a.yaml`")
        assert first.poll() is None  # the first run goes on
    finally:
        first.terminate()
        first.wait(timeout=120)
    assert json.loads((tmp_path / "out" / "run.json").read_text())["source"] == "a.yaml"
    assert not (tmp_path / ".out.lock").exists()


# =========================================================================== write errors during a save
def _checkpoint_intact(ckpt: Path) -> None:
    from safetensors.torch import load_file

    from dare.trainers.checkpoints import check_trainer_files as _check_trainer_files

    assert load_file(str(ckpt / "model.safetensors"))
    _check_trainer_files(ckpt)


def test_safetensors_error_during_a_checkpoint_is_one_paragraph(tmp_path, monkeypatch, run_cli):
    """The second checkpoint's safetensors write fails as a full disk makes it fail: one paragraph, the first
    checkpoint intact, nothing half-written."""
    import safetensors.torch
    import transformers.modeling_utils as mu

    real, calls = mu.safe_save_file, []

    def failing(tensors, filename, *args, **kwargs):
        calls.append(filename)
        if "checkpoint-4" in str(filename) or len(calls) > 2:
            raise safetensors.SafetensorError("Error while serializing: I/O error: No space left on device (os error 28)")
        return real(tensors, filename, *args, **kwargs)

    monkeypatch.setattr(mu, "safe_save_file", failing)
    monkeypatch.chdir(tmp_path)
    code, _, err = run_cli("train", _spec_file(tmp_path, "s", max_steps=4, save_steps=2))
    assert code == 2
    one_paragraph(err, "saving checkpoint-4 failed: no space left on the device holding",
                  "the last checkpoint checkpoint-2 is intact", "re-run the same command to resume")
    ckpts = tmp_path / "out" / "checkpoints"
    assert sorted(p.name for p in ckpts.iterdir()) == ["checkpoint-2"]
    _checkpoint_intact(ckpts / "checkpoint-2")
    assert not (tmp_path / ".out.lock").exists()


@pytest.fixture
def tmpfs(tmp_path):
    """A mount function for small tmpfs file systems under ``tmp_path`` (root, mounts allowed), unmounted after."""
    mounted = []

    def mount(name: str, size_kib: int) -> Path:
        d = tmp_path / name
        d.mkdir()
        proc = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size_kib}k", "tmpfs", str(d)], capture_output=True,
                              text=True)
        if proc.returncode != 0:
            pytest.skip(f"cannot mount a tmpfs here (needs root and mount permission): {proc.stderr.strip()}")
        mounted.append(d)
        return d

    if os.geteuid() != 0:
        pytest.skip("mounting a small tmpfs needs root")
    yield mount
    for d in mounted:
        subprocess.run(["umount", "-l", str(d)], check=False)


# the tiny model's first checkpoint and init-model/ take about 1.95 MiB: the second checkpoint fails in its
# model.safetensors (2200 KiB: safetensors' SafetensorError) or in optimizer.pt (2800 KiB: torch's RuntimeError)
@pytest.mark.parametrize("size_kib,writer", [(2200, "safetensors"), (2800, "torch.save")])
def test_disk_full_during_a_checkpoint(tmp_path, tmpfs, size_kib, writer):
    disk = tmpfs("disk", size_kib)
    spec = _spec_file(tmp_path, "s", max_steps=4, save_steps=2)
    code, err = dare("train", spec, "--set", f"output.dir={disk / 'out'}", cwd=tmp_path, timeout=300)
    assert code == 2, err
    one_paragraph(err, "saving checkpoint-4 failed:", str(disk), "the last checkpoint checkpoint-2 is intact",
                  "Free space")
    assert "no space left" in err or "is full" in err
    ckpts = disk / "out" / "checkpoints"
    assert sorted(p.name for p in ckpts.iterdir()) == ["checkpoint-2"]
    _checkpoint_intact(ckpts / "checkpoint-2")
    assert not (disk / ".out.lock").exists()


# =========================================================================== SIGTERM
def _wait_for(path: Path, proc: subprocess.Popen, limit: float = 300) -> None:
    deadline = time.monotonic() + limit
    while not path.exists():
        assert proc.poll() is None, f"ended before {path} appeared: {proc.stderr.read()[-3000:]}"
        assert time.monotonic() < deadline, f"no {path} within {limit} s"
        time.sleep(0.05)


def _no_dare_traceback(err: str) -> None:
    assert not any(ln.startswith("  File") and "/dare/" in ln for ln in err.splitlines()), err[-4000:]


def test_sigterm_says_what_was_saved(tmp_path):
    spec = _spec_file(tmp_path, "s", max_steps=100000, save_steps=3)
    proc = subprocess.Popen([DARE, "train", spec], cwd=tmp_path, env={**os.environ, "OMP_NUM_THREADS": "1"},
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    _wait_for(tmp_path / "out" / "checkpoints" / "checkpoint-3", proc)
    proc.send_signal(signal.SIGTERM)
    err = proc.communicate(timeout=LIMIT_S)[1]
    assert proc.returncode == 143
    last = [ln for ln in err.splitlines() if ln.strip()][-1]
    assert last.startswith("received SIGTERM; interrupted during training: saved the checkpoint of step "), err[-3000:]
    assert last.endswith(": dare train s.yaml"), last
    _no_dare_traceback(err)
    saved = sorted((tmp_path / "out" / "checkpoints").glob("checkpoint-*"), key=lambda p: int(p.name.split("-")[1]))
    assert saved and f"(out/checkpoints/{saved[-1].name})" in last, (last, saved)
    for ckpt in saved:
        _checkpoint_intact(ckpt)
    assert not (tmp_path / ".out.lock").exists()


def test_sigterm_to_a_two_process_launch(tmp_path):
    """SIGTERM to torchrun (what a scheduler sends): torchrun passes it to the workers, the main one says what
    was saved and the launch that resumes. (torchrun then prints its own SignalException traceback.)"""
    spec = _spec_file(tmp_path, "s", max_steps=100000, save_steps=3)
    bin_dir = Path(sys.executable).parent
    env = {**os.environ, "OMP_NUM_THREADS": "1", "ACCELERATE_USE_CPU": "1", "TOKENIZERS_PARALLELISM": "false"}
    proc = subprocess.Popen([str(bin_dir / "torchrun"), "--nproc_per_node", "2", "--standalone", "--no-python",
                             DARE, "train", spec], cwd=tmp_path, env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        _wait_for(tmp_path / "out" / "checkpoints" / "checkpoint-3" / "rng_state_1.pth", proc, limit=400)
        proc.send_signal(signal.SIGTERM)
        err = proc.communicate(timeout=60)[1]
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode != 0
    said = [ln for ln in err.splitlines() if ln.startswith("received SIGTERM; interrupted during training: saved the "
                                                           "checkpoint of step ")]
    assert len(said) == 1, err[-4000:]  # the main process only
    assert said[0].endswith("the same launch of 2 processes, e.g. ACCELERATE_USE_CPU=1 torchrun --nproc_per_node 2 "
                            "--no-python dare train s.yaml"), said[0]
    _no_dare_traceback(err)
    for ckpt in (tmp_path / "out" / "checkpoints").glob("checkpoint-*"):
        _checkpoint_intact(ckpt)
    assert not (tmp_path / ".out.lock").exists()


def test_a_two_process_launch_into_a_locked_directory_stops_at_once(tmp_path):
    holder = _hold_lock_in_child(tmp_path / "out")
    try:
        spec = _spec_file(tmp_path, "s")
        bin_dir = Path(sys.executable).parent
        env = {**os.environ, "OMP_NUM_THREADS": "1", "ACCELERATE_USE_CPU": "1", "TOKENIZERS_PARALLELISM": "false"}
        proc = subprocess.run([str(bin_dir / "torchrun"), "--nproc_per_node", "2", "--standalone", "--no-python",
                               DARE, "train", spec], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    finally:
        holder.kill()
        holder.wait()
    assert proc.returncode != 0
    refusals = [ln for ln in proc.stderr.splitlines() if ln.startswith("error: output.dir 'out' is in use by process "
                                                                       f"{holder.pid}")]
    assert refusals, proc.stderr[-4000:]
    _no_dare_traceback(proc.stderr)
    assert not (tmp_path / "out").exists()


# =========================================================================== example length and column types
def _parquet(path: Path, **columns) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.table(columns), path)


def _data_spec(tmp_path: Path, name: str = "data.parquet", templates: bool = False, **train) -> str:
    spec = tiny_spec("out", **train)
    spec["data"]["train"] = {"path": name, "chat_template": False}
    if templates:
        spec["data"]["train"].update(prompt_template="{{ prompt }}", response_template="{{ response }}")
    (tmp_path / "spec.yaml").write_text(yaml.safe_dump(spec, sort_keys=False))
    return "spec.yaml"


@pytest.mark.parametrize("columns,needles", [
    ({"prompt": [1, 2, 3, 4], "response": ["a", "b", "c", "d"]},
     ("data.train.path", "column 'prompt' has type int64, expected a string or a list of chat messages")),
    ({"prompt": [[1, 2], [3], [4], [5]], "response": ["a", "b", "c", "d"]},
     ("data.train.path", "column 'prompt' has type list<element: int64>, expected a string or a list of chat messages")),
    ({"prompt": ["a", "b", "c", "d"], "response": [0.5, 1.5, 2.5, 3.5]},
     ("data.train.path", "column 'response' has type double, expected a string")),
], ids=["int-prompt", "list-of-ints-prompt", "float-response"])
@pytest.mark.parametrize("cmd", ["validate", "train"])
def test_wrong_column_types_are_named(tmp_path, columns, needles, cmd):
    _parquet(tmp_path / "data.parquet", **columns)
    code, err = dare(cmd, _data_spec(tmp_path), cwd=tmp_path)
    assert code == 2
    one_paragraph(err, "data.parquet", *needles)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["data.parquet", "spec.yaml"]


def test_chat_message_prompts_are_accepted(tmp_path):
    from dare.data.columns import column_type_problems

    _parquet(tmp_path / "d.parquet", prompt=[[{"role": "user", "content": "hi"}]], response=["yo"])
    assert column_type_problems(str(tmp_path / "d.parquet"), ["prompt", "response"]) == []
    rows = [{"prompt": [{"role": "user", "content": 3}]}]  # JSONL: checked on sampled rows
    (tmp_path / "d.jsonl").write_text(json.dumps(rows[0]) + "\n")
    assert column_type_problems(str(tmp_path / "d.jsonl"), ["prompt"], rows) == [
        ("prompt", f"{tmp_path / 'd.jsonl'} (sampled row 0): column 'prompt' holds a list of mapping, expected a string or "
                   "a list of chat messages ({role, content} with string values)")]


@pytest.mark.parametrize("cmd", ["validate", "train"])
def test_ten_megabyte_example_is_refused_before_tokenising(tmp_path, cmd):
    """Row 2 holds 10 MB: far beyond 16 x the tiny model's context of 64 tokens in any tokenisation."""
    _parquet(tmp_path / "data.parquet", prompt=["a", "b", "x" * 10_000_000, "d"], response=["1", "2", "3", "4"])
    code, err = dare(cmd, _data_spec(tmp_path, templates=True), cwd=tmp_path)
    assert code == 2
    one_paragraph(err, "row 2 of data.parquet is 10000001 characters long", "the model's context of 64 tokens",
                  "it was not tokenised", "train.max_length")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["data.parquet", "spec.yaml"]


def test_examples_longer_than_the_context(tmp_path):
    """Over the context (64 tokens) but not far beyond: kept with a warning naming the longest row; with
    train.max_length they are dropped and counted; a 10 MB row is then dropped without tokenising."""
    from dare.data.checks import LengthCheck

    check = LengthCheck(64, None, token_chars=1, where="f.parquet")
    assert check.tokens_fit(3, 64) and check.tokens_fit(4, 100) and check.tokens_fit(5, 90)
    assert check.report() == ("data.train: warning: 2 example(s) of f.parquet are longer than the model's context of 64 "
                              "tokens (the longest, row 4, has 100): the model trains at positions its config does not "
                              "declare; set train.max_length: 64 to drop them")
    drop = LengthCheck(64, 32, token_chars=2, where="f.parquet")
    assert drop.char_bound == 16 * 32 * 2
    assert drop.text_fits(0, "x" * 1000, "y" * 24) and not drop.text_fits(1, "x" * 10_000_000, "")
    assert not drop.tokens_fit(2, 33) and drop.tokens_fit(3, 32)
    assert drop.report() == ("data.train: dropped 2 example(s) of f.parquet longer than 32 tokens (train.max_length=32, "
                             "model context 64)")
    _parquet(tmp_path / "data.parquet", prompt=["a" * 40, "b" * 10, "x" * 10_000_000, "d" * 10],
             response=["1" * 40, "2" * 10, "3", "4" * 10])
    code, err = dare("train", _data_spec(tmp_path, templates=True, max_length=32), cwd=tmp_path, timeout=300)
    assert code == 0, err
    assert "data.train: dropped 2 example(s) of data.parquet longer than 32 tokens" in err


def test_ten_megabyte_rl_prompt_is_refused_before_tokenising():
    from dare.data import Prompter
    from dare.errors import DataError
    from dare.rl.prompts import PromptDataset

    class NeverTokenise:
        def get_vocab(self):
            return {"a": 0, "abcd": 1}

        def __call__(self, *a, **k):
            raise AssertionError("tokenised")

    rows = [{"p": "short"}, {"p": "x" * 10_000_000}]
    prompter = Prompter(None, "{{ p }}", chat_template=False)
    with pytest.raises(DataError, match=r"row 11 of f.parquet is 10000000 characters long, at least 2500000 tokens"):
        PromptDataset.from_rows(rows, prompter, NeverTokenise(), None, 8, context=64, where="f.parquet", offset=10)
    kept = PromptDataset.from_rows(rows, prompter, lambda text, **k: {"input_ids": [0] * len(text)}, 40, 8, context=64,
                                   where="f.parquet")
    assert kept.prompts == ["short"]  # with train.max_length the long one is dropped, the short one kept


def test_ten_megabyte_preference_response_is_refused_before_tokenising():
    pytest.importorskip("dare_dpo")
    from dare_dpo.data import PreferencePair, tokenize_pairs

    from dare.data import Prompter
    from dare.data.checks import LengthCheck
    from dare.errors import DataError

    def never(*a, **k):
        raise AssertionError("tokenised")

    pairs = [PreferencePair({"p": "q"}, "x" * 10_000_000, "no")]
    check = LengthCheck(64, None, 4, "prefs.jsonl", "data.eval")
    with pytest.raises(DataError, match=r"data\.eval: row 7 of prefs.jsonl is 10000001 characters long"):
        tokenize_pairs(pairs, Prompter(None, "{{ p }}", chat_template=False), never, None, None, check, offset=7)


def test_ten_megabyte_rl_prompt_fails_validation(tmp_path):
    _parquet(tmp_path / "data.parquet", puzzle=["1234", "x" * 10_000_000])
    spec = tiny_spec("out")
    spec["data"]["train"] = {"path": "data.parquet", "prompt_template": "{{ puzzle }}", "chat_template": False}
    spec["algorithm"] = {"name": "tracerl", "params": {"group_size": 2, "rollout_sampler": {"temperature": 1.0}}}
    spec["sampler"] = {"name": "llada", "params": {"gen_length": 8, "block_length": 8, "steps": 8}}
    spec["rewards"] = [{"name": "sudoku", "params": {"require_answer_tags": False}}]
    (tmp_path / "spec.yaml").write_text(yaml.safe_dump(spec, sort_keys=False))
    code, err = dare("validate", "spec.yaml", cwd=tmp_path)
    assert code == 2
    one_paragraph(err, "data.train: row 1 of data.parquet is 10000000 characters long", "found in a sample of 2 rows")


def test_rows_of_the_wrong_type_at_load_time():
    """Rows not covered by the validate-time check (a hub dataset, a JSONL row past the sample) fail as they load."""
    from dare.data import Prompter
    from dare.errors import DataError

    p = Prompter(None, None, None, chat_template=False, loc="data.train")
    with pytest.raises(DataError, match=r"^data\.train: column 'prompt' holds an integer, expected a string or a list of "
                                        r"chat messages \(\{role, content\} with string values\); or set a prompt_template$"):
        p.prompt({"prompt": 3})
    with pytest.raises(DataError, match=r"column 'response' holds a float, expected a string; or set a response_template"):
        p.response({"response": 0.5})
    assert p.prompt({"prompt": [{"role": "user", "content": "hi"}]}) == "hi" and p.response({"answer": "4"}) == "4"


def test_a_null_in_a_string_column_fails_validation(tmp_path):
    """A parquet column whose schema is string but whose sampled row holds a null is refused by `dare validate`
    (the schema alone allows it), naming the column and the row."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from dare.errors import SpecError
    from dare.runspec import validate_spec

    pq.write_table(pa.table({"prompt": ["1+1=", "2+2="], "response": [None, "4"]}), tmp_path / "d.parquet")
    raw = {"model": {"new": {"family": "llada", "preset": "tiny"}},
           "data": {"train": {"path": str(tmp_path / "d.parquet"), "chat_template": False}},
           "algorithm": {"name": "sft"}, "train": {"learning_rate": 1e-3, "max_steps": 1},
           "output": {"dir": str(tmp_path / "run")}}
    with pytest.raises(SpecError, match=r"\(sampled row 0\): column 'response' holds a null, expected a string"):
        validate_spec(raw)
