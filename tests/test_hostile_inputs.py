"""Crafted inputs that used to hang or crash: every case runs the real ``dare`` command in a subprocess with a
30-second limit and must end with a non-zero exit status, one ``error:`` paragraph naming the field or file (no
traceback), and nothing written where it should not be.

YAML: an alias bomb, a recursive alias, a 10 MB value and duplicate keys (:mod:`dare.spec.yamlload`).
"""

from __future__ import annotations

import os
import subprocess
import sys
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
    errors = [ln for ln in lines if ln.startswith("error: ")]
    assert len(errors) == 1 and lines[-1] == errors[0], err
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
    from dare.spec.overrides import read_spec_file

    assert read_spec_file(tmp_path / "spec.yaml")["train"]["learning_rate"] == 0.002


@pytest.mark.parametrize("cmd", ["validate", "train"])
def test_ten_megabyte_value_names_its_field(tmp_path, cmd):
    (tmp_path / "spec.yaml").write_text(_spec_text(prompt_template="x" * 10_000_000))
    code, err = dare(cmd, "spec.yaml", cwd=tmp_path)
    assert code == 2
    one_paragraph(err, "data.train.prompt_template", "10000000 characters", "65536")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["spec.yaml"]


def test_value_at_the_size_limit_is_accepted():
    from dare.spec.yamlload import MAX_STRING_CHARS, load_yaml

    assert load_yaml(f"a: {'x' * MAX_STRING_CHARS}\n") == {"a": "x" * MAX_STRING_CHARS}
    with pytest.raises(Exception, match=r"a: a value of 65537 characters \(line 1\)"):
        load_yaml(f"a: {'x' * (MAX_STRING_CHARS + 1)}\n")


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
    from dare.spec.yamlload import load_yaml

    with pytest.raises(SpecError, match=r"data\.train\.limit: the key 'limit' is given twice in one mapping \(lines 3 and 5\)"):
        load_yaml("data:\n  train:\n    limit: 1\n    path: x\n    limit: 2\n")
    # a merge key overrides, as YAML specifies: not a duplicate
    assert load_yaml("b: &b {x: 1, y: 2}\nc:\n  <<: *b\n  x: 3\n") == {"b": {"x": 1, "y": 2}, "c": {"x": 3, "y": 2}}
