"""FSDP2 on 2 CPU processes (gloo) equals 1 process: training, evaluation in lock-step, resume, the reference policy.

The 2-process runs are launched as a user would launch a sharded recipe, with the FSDP2 accelerate config
(``ACCELERATE_USE_CPU=1 DARE_CPU_SHARDING=1 accelerate launch --config_file examples/accelerate/fsdp2.yaml
--num_processes 2 $(which dare) ...``, docs/scaling.md); the 1-process references run in this process. A sharded
model gathers its parameters at every forward, so these runs crash (gloo "Connection reset by peer") unless every
process runs the same forwards: 9 evaluation rows on 2 processes and threshold decoding (row-dependent step
counts) are the cases that used to crash.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import time
from pathlib import Path

import pytest
import torch
import yaml
from safetensors.torch import load_file

from test_distributed import (  # the 2-process helpers and the digit-writing model of the DDP tests
    BIN,
    SUDOKU,
    _assert_moved,
    _assert_same_losses,
    _assert_same_metrics,
    _assert_same_weights,
    _env,
    _metric,
    _one_process,
    _pairs,
    _processes_running,
    _sft_spec,
    _write,
    digit_model,  # noqa: F401 - a fixture
)

pytest.importorskip("dare_llada")

ROOT = Path(__file__).resolve().parents[1]
FSDP2 = ROOT / "examples" / "accelerate" / "fsdp2.yaml"
ZERO2 = ROOT / "examples" / "accelerate" / "zero2.yaml"
ZERO3 = ROOT / "examples" / "accelerate" / "zero3.yaml"
SHARDED = "sharding: FSDP2 over 2 CPU processes"
THRESHOLD = {"name": "llada", "params": {"gen_length": 16, "block_length": 4, "steps": 16, "threshold": 0.3}}
NINE = {"name": "sudoku", "limit": 9, **SUDOKU, "reward": {"name": "sudoku", "params": {"require_answer_tags": False}}}


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _zero3_released(tmp_path: Path) -> Path:
    """examples/accelerate/zero3.yaml with every parameter partitioned and released after use, as an 8B model's are:
    by default DeepSpeed keeps parameters under 1e5 elements whole on every process (all of a tiny model's) and keeps
    gathered ones while they are reused within 1e9 elements, so a tiny model's forwards would gather nothing."""
    ds = tmp_path / "zero3-released.json"
    ds.write_text(json.dumps({
        "zero_optimization": {"stage": 3, "stage3_param_persistence_threshold": 0, "stage3_max_reuse_distance": 0,
                              "stage3_max_live_parameters": 0, "stage3_prefetch_bucket_size": 0,
                              "stage3_gather_16bit_weights_on_model_save": True},
        "train_micro_batch_size_per_gpu": "auto", "train_batch_size": "auto", "gradient_accumulation_steps": "auto",
        "gradient_clipping": "auto", "bf16": {"enabled": "auto"},
    }))
    config = yaml.safe_load((ZERO3).read_text())
    config.pop("mixed_precision")  # the JSON's bf16 "auto" (the spec's train.bf16) decides, as accelerate requires
    config["deepspeed_config"] = {"deepspeed_config_file": str(ds), "zero3_init_flag": False,
                                  "deepspeed_multinode_launcher": "standard"}
    out = tmp_path / "zero3-released.yaml"
    out.write_text(yaml.safe_dump(config))
    return out


def _launch(spec_path: Path, command: str, config: Path = FSDP2) -> subprocess.Popen:
    cmd = [str(BIN / "accelerate"), "launch", "--config_file", str(config), "--num_processes", "2",
           "--main_process_port", str(_port()), str(BIN / "dare"), command, str(spec_path)]
    env = _env() | {"DARE_CPU_SHARDING": "1"}
    return subprocess.Popen(cmd, env=env, cwd=spec_path.parent, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, start_new_session=True)


def _fsdp2(spec_path: Path, command: str = "run", timeout: float = 600, config: Path = FSDP2,
           sharded: str = SHARDED) -> tuple[Path, str]:
    """Run ``dare COMMAND SPEC`` on 2 FSDP2 (or ``config``'s) processes; the run directory and the launch's stderr."""
    proc = _launch(spec_path, command, config)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)  # the workers die with their launcher (dare.scaling.distributed)
        pytest.fail(f"the sharded run did not finish within {timeout} s")
    assert proc.returncode == 0, "\n".join(x for x in err.splitlines() if "rank0" in x or "Error" in x)[-6000:]
    assert sharded in err, err[-3000:]  # the launch's sharding really applied (not DDP)
    run_dir = spec_path.parent / spec_path.stem
    assert list((run_dir / "checkpoints").glob("checkpoint-*/rng_state_1.pth")), "the run did not use 2 processes"
    return run_dir, err


def _deepspeed_problem() -> str | None:
    """Why DeepSpeed cannot run here (None when it can): not installed, or a build without its CPU accelerator.
    Looked up without importing DeepSpeed (a slow import that logs), so collecting this file stays cheap."""
    import importlib.util

    spec = importlib.util.find_spec("deepspeed")
    if spec is None or spec.origin is None:
        return "DeepSpeed is not installed (`make install` installs it: the test extra of pyproject.toml)"
    if not (Path(spec.origin).parent / "accelerator" / "cpu_accelerator.py").is_file():
        return f"this DeepSpeed ({spec.origin}) has no CPU accelerator, so ZeRO cannot run on a CPU machine"
    return None


needs_deepspeed = pytest.mark.skipif(_deepspeed_problem() is not None, reason=str(_deepspeed_problem()))


def _results(run_dir: Path, stage: str) -> dict:
    return json.loads((run_dir / "eval" / f"{stage}.json").read_text())["results"][0]


def _d1_spec(digit_model: Path) -> dict:
    """3 d1 steps with beta 0.04 and threshold rollouts (16 tokens) of the digit-writing model, 4 prompts x 4."""
    return {
        "model": {"path": str(digit_model)},
        "data": {"train": {"path": "dare://sudoku/train.parquet", "limit": 64, **SUDOKU}},
        "algorithm": {"name": "d1", "params": {"group_size": 4, "beta": 0.04, "num_iterations": 1}},
        "sampler": {"name": "llada", "params": {"gen_length": 16, "block_length": 16, "steps": 16, "temperature": 1.0,
                                                "threshold": 0.3}},
        "rewards": [{"name": "sudoku", "params": {"require_answer_tags": False}}],
        "train": {"learning_rate": 1e-4, "max_steps": 3, "per_device_batch_size": 4, "logging_steps": 1,
                  "save_steps": 3, "num_threads": 1, "seed": 0},
    }


def _vrpo_spec(tmp_path: Path) -> dict:
    """3 VRPO steps (Monte-Carlo ELBO with 2 forwards before one backward) of a fresh tiny LLaDA."""
    return {
        "model": {"new": {"family": "llada", "preset": "tiny"}},
        "data": {"train": {"path": _pairs(tmp_path / "pairs.jsonl"), "chat_template": False}},
        "algorithm": {"name": "vrpo", "params": {"estimator": {"name": "mc-elbo", "params": {"mc_num": 2}}}},
        "train": {"learning_rate": 1e-3, "max_steps": 3, "per_device_batch_size": 8, "logging_steps": 1, "save_steps": 3,
                  "num_threads": 1, "seed": 0},
    }


#: the rest of the sharded matrix (RL with a reference, VRPO, ZeRO-3 resume): the suite keeps FSDP2 and ZeRO-3
#: training + 9-row threshold evaluation and FSDP2 kill -9 + resume within its time budget; DARE_SLOW=1 runs these too
slow = [pytest.mark.slow, pytest.mark.skipif(os.environ.get("DARE_SLOW") != "1", reason="slow: set DARE_SLOW=1")]


def _slow(fn):
    for mark in reversed(slow):
        fn = mark(fn)
    return fn


def test_fsdp2_sft_and_threshold_evaluation_of_9_rows_equal_one_process(tmp_path, digit_model):  # noqa: F811
    """4 SFT steps of the digit-writing model, then 9 Sudoku rows decoded with a threshold sampler (batches of 4: 5
    rows on process 0, 4 and a padding row on process 1; data-dependent step counts) by the FSDP2-sharded model: the
    same losses, weights, completions and scores as 1 process, and so does ``dare eval`` of ``model/`` under the same
    launch; ``model/`` is in the official format (transformers loads it)."""
    spec = _sft_spec(max_steps=4, save_steps=4, learning_rate=1e-4) | {"sampler": THRESHOLD}
    spec["model"] = {"path": str(digit_model)}
    spec["eval"] = {"before_train": False, "batch_size": 4, "benchmarks": [NINE]}
    one = _one_process(_write(tmp_path, "one", spec))
    spec["train"]["per_device_batch_size"] = 8
    two, err = _fsdp2(_write(tmp_path, "two", spec))
    _assert_same_losses(one, two)
    _assert_same_weights(one, two)
    a, b = _results(one, "after"), _results(two, "after")
    assert b["n"] == 9 and len(b["samples"]) == 9 and [s["index"] for s in b["samples"]] == list(range(9))
    assert [s["completion"] for s in a["samples"]] == [s["completion"] for s in b["samples"]]
    assert (a["accuracy"], a["mean_reward"], a["generated_tokens"]) == (b["accuracy"], b["mean_reward"], b["generated_tokens"])
    # threshold decoding took data-dependent step counts (the lock-step case), not the fixed 16 steps; a batch takes
    # as many steps as its slowest row, so the NFE per row depends on how the rows are batched (10.89 on 1 process, 10.44 on 2)
    assert 0 < a["nfe"] < 16 and 0 < b["nfe"] < 16
    # `dare eval` of the trained model under the same launch: sharded as training shards it, the same scores
    _, err = _fsdp2(two.with_suffix(".yaml"), "eval")
    assert "evaluated model: sharded like the policy (FSDP2)" in err, err[-3000:]
    c = _results(two, "eval")
    assert [s["completion"] for s in a["samples"]] == [s["completion"] for s in c["samples"]]
    assert (a["accuracy"], a["mean_reward"]) == (c["accuracy"], c["mean_reward"])
    from transformers import AutoModel

    import dare_llada  # noqa: F401 - registers LLaDA with AutoModel

    model = AutoModel.from_pretrained(two / "model")
    saved = load_file(two / "model" / "model.safetensors")
    state = model.state_dict()
    assert all(torch.equal(state[k], v) for k, v in saved.items())


@_slow
def test_fsdp2_d1_with_a_reference_policy_equals_one_process(tmp_path, digit_model):  # noqa: F811
    """3 d1 steps with beta > 0 (KL to the reference policy, sharded like the policy) and threshold rollouts
    (lock-step decoding) of the digit-writing model: non-zero rewards, gradients and KL; the same losses, KL, rewards
    and weights as 1 process."""
    spec = _d1_spec(digit_model)
    one = _one_process(_write(tmp_path, "one", spec), evaluate=False)
    spec["train"]["per_device_batch_size"] = 2
    two, err = _fsdp2(_write(tmp_path, "two", spec), "train")
    assert "reference policy: sharded like the policy (FSDP2)" in err, err[-3000:]
    assert max(v for _, v in _metric(one, "reward")) > 0
    assert min(v for _, v in _metric(one, "grad_norm")) > 0
    assert max(v for _, v in _metric(one, "kl")) > 0  # the reference policy really entered the loss
    _assert_moved(digit_model, one, 1e-5)
    _assert_same_losses(one, two)
    _assert_same_weights(one, two)
    _assert_same_metrics(one, two, ("reward", "reward_std", "kl"))


@_slow
def test_fsdp2_vrpo_equals_one_process(tmp_path):
    """3 VRPO steps (Monte-Carlo ELBO, 2 forwards before one backward, reference policy sharded like the policy)."""
    spec = _vrpo_spec(tmp_path)
    one = _one_process(_write(tmp_path, "one", spec), evaluate=False)
    spec["train"]["per_device_batch_size"] = 4
    two, err = _fsdp2(_write(tmp_path, "two", spec), "train")
    assert "reference policy: sharded like the policy (FSDP2)" in err, err[-3000:]
    _assert_same_losses(one, two)
    _assert_same_weights(one, two)


@pytest.mark.parametrize("sharding", ["fsdp2", pytest.param("zero3", marks=[needs_deepspeed, *slow])])
def test_sigkill_of_a_sharded_run_then_resume_is_bit_exact(tmp_path, sharding):
    """kill -9 of the FSDP2 (ZeRO-3, parameters released) launch after its first checkpoint, then the same command:
    the weights of an uninterrupted run of the same launch, bit for bit."""
    config, mark = (FSDP2, SHARDED) if sharding == "fsdp2" else (_zero3_released(tmp_path), "ZeRO-3 over 2")
    spec = _sft_spec(max_steps=4, save_steps=2, per_device_batch_size=8)
    spec.pop("eval")
    spec.pop("sampler")
    straight, _ = _fsdp2(_write(tmp_path, "straight", spec), "train", config=config, sharded=mark)
    killed_spec = _write(tmp_path, "killed", spec)
    proc = _launch(killed_spec, "train", config)
    marker = tmp_path / "killed" / "checkpoints" / "checkpoint-2" / "trainer_state.json"
    deadline = time.monotonic() + 600
    while not marker.is_file():
        assert proc.poll() is None, f"training ended before it could be killed: {proc.stderr.read()[-2000:]}"
        assert time.monotonic() < deadline, "no checkpoint within 600 s"
        time.sleep(0.02)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    deadline = time.monotonic() + 30
    while _processes_running(str(killed_spec)):
        assert time.monotonic() < deadline, "the workers outlived the launcher by 30 s"
        time.sleep(0.1)
    assert not (tmp_path / "killed" / "model").exists()
    resumed, err = _fsdp2(killed_spec, "train", config=config, sharded=mark)
    assert "resuming from step 2" in err, err[-2000:]
    a, b = load_file(straight / "model" / "model.safetensors"), load_file(resumed / "model" / "model.safetensors")
    assert all(torch.equal(a[k], b[k]) for k in a), f"resumed weights differ from the uninterrupted {sharding} run"


# ------------------------------------------------------------------ DeepSpeed ZeRO (its CPU accelerator)


@needs_deepspeed
def test_zero3_with_released_parameters_sft_and_threshold_evaluation_equal_one_process(tmp_path, digit_model):  # noqa: F811
    """The FSDP2 test's SFT + 9-row threshold evaluation under ZeRO-3 with every parameter released after use (each
    forward gathers every layer): the same losses, weights, completions and scores as 1 process."""
    spec = _sft_spec(max_steps=4, save_steps=4, learning_rate=1e-4) | {"sampler": THRESHOLD}
    spec["model"] = {"path": str(digit_model)}
    spec["eval"] = {"before_train": False, "batch_size": 4, "benchmarks": [NINE]}
    one = _one_process(_write(tmp_path, "one", spec))
    spec["train"]["per_device_batch_size"] = 8
    two, _ = _fsdp2(_write(tmp_path, "two", spec), config=_zero3_released(tmp_path),
                    sharded="sharding: DeepSpeed ZeRO-3 over 2 CPU processes")
    _assert_same_losses(one, two)
    _assert_same_weights(one, two)
    a, b = _results(one, "after"), _results(two, "after")
    assert b["n"] == 9 and [s["completion"] for s in a["samples"]] == [s["completion"] for s in b["samples"]]
    assert (a["accuracy"], a["mean_reward"]) == (b["accuracy"], b["mean_reward"])


@_slow
@needs_deepspeed
def test_zero3_d1_with_a_reference_policy_equals_one_process(tmp_path, digit_model):  # noqa: F811
    """d1 with beta > 0 under ZeRO-3 (released parameters): the reference policy is a ZeRO-3 engine like the
    policy; threshold rollouts in lock-step; the same losses, KL and weights as 1 process."""
    spec = _d1_spec(digit_model)
    one = _one_process(_write(tmp_path, "one", spec), evaluate=False)
    spec["train"]["per_device_batch_size"] = 2
    two, err = _fsdp2(_write(tmp_path, "two", spec), "train", config=_zero3_released(tmp_path),
                      sharded="sharding: DeepSpeed ZeRO-3 over 2 CPU processes")
    assert "reference policy: sharded like the policy (ZeRO-3)" in err, err[-3000:]
    assert max(v for _, v in _metric(one, "kl")) > 0
    _assert_same_losses(one, two)
    _assert_same_weights(one, two)
    _assert_same_metrics(one, two, ("reward", "kl"))


@_slow
@needs_deepspeed
def test_zero2_vrpo_equals_one_process(tmp_path):
    """3 VRPO steps under ZeRO-2 (sharded optimizer state and gradients; the reference policy on the device)."""
    spec = _vrpo_spec(tmp_path)
    one = _one_process(_write(tmp_path, "one", spec), evaluate=False)
    spec["train"]["per_device_batch_size"] = 4
    two, _ = _fsdp2(_write(tmp_path, "two", spec), "train", config=ZERO2,
                    sharded="sharding: DeepSpeed ZeRO-2 over 2 CPU processes")
    _assert_same_losses(one, two)
    _assert_same_weights(one, two)
