"""Fixtures of the lm-eval integration tests: skipped (with the reason) when lm-eval is not installed."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("lm_eval", reason="lm-eval is not installed: `pip install -e plugins/dare-plugin-lmeval` (make install does)")
pytest.importorskip("dare_lmeval", reason="dare-plugin-lmeval is not installed: `pip install -e plugins/dare-plugin-lmeval`")


def _env() -> dict[str, str]:
    env = dict(os.environ, HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1", TOKENIZERS_PARALLELISM="false",
               OMP_NUM_THREADS=os.environ.get("OMP_NUM_THREADS", "1"))
    env.pop("PYTHONPATH", None)
    return env


def _run_lm_eval(args: list[str], cwd: Path, timeout: float = 900, launcher: list[str] | None = None):
    """``lm_eval ARGS`` as a user runs it (the venv's console script), no DARE import beforehand.

    :returns: ``(CompletedProcess, seconds)``.
    """
    exe = shutil.which("lm_eval", path=str(Path(sys.executable).parent))
    assert exe is not None, "the lm_eval command is not installed next to this Python"
    cmd = [exe, *args] if launcher is None else [*launcher, "-m", "lm_eval", *args]
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, cwd=cwd, env=_env(), capture_output=True, text=True, timeout=timeout)
    return proc, time.perf_counter() - t0


@pytest.fixture
def lm_eval_env():
    """Environment of a user's lm-eval run: offline, no PYTHONPATH."""
    return _env()


@pytest.fixture
def run_lm_eval():
    """``run_lm_eval(args, cwd, timeout=900, launcher=None) -> (CompletedProcess, seconds)``."""
    return _run_lm_eval


@pytest.fixture(scope="session")
def tiny_llada_dir(tmp_path_factory):
    """A tiny random LLaDA checkpoint (official format) with DARE's byte tokenizer."""
    from dare.testing import tiny_model

    d = tmp_path_factory.mktemp("tiny-llada-lmeval") / "model"
    tiny_model("llada", d, seed=0)
    return d


@pytest.fixture(scope="session")
def trained_sudoku_model(tmp_path_factory):
    """A tiny LLaDA trained 40 SFT steps on real Sudoku puzzles (compact prompt): a run directory."""
    import yaml

    from dare.run import Run
    from dare.runspec import load_spec

    root = tmp_path_factory.mktemp("lmeval-model")
    spec = {
        "model": {"new": {"family": "llada", "preset": "tiny", "seed": 0}},
        "data": {"train": {"path": "dare://sudoku/train.parquet", "limit": 1280, "chat_template": False,
                           "prompt_template": "{{ extra_info.puzzle }}",
                           "response_template": "{{ reward_model.ground_truth }}"}},
        "algorithm": {"name": "sft"},
        "train": {"learning_rate": 3e-3, "max_steps": 40, "per_device_batch_size": 32, "logging_steps": 20,
                  "save_steps": 1000, "seed": 0},
        "output": {"dir": str(root / "run")},
    }
    f = root / "train.yaml"
    f.write_text(yaml.safe_dump(spec))
    Run(load_spec(f, check=False), source=str(f)).execute(train=True, evaluate=False)
    return root / "run"


@pytest.fixture(scope="session")
def sudoku_tasks(tmp_path_factory):
    from dare_lmeval.sudoku_tasks import write_sudoku_tasks

    return write_sudoku_tasks(tmp_path_factory.mktemp("lmeval-tasks"), limit=50, max_gen_toks=17)
