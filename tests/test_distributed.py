"""One spec on 1 and on 2 processes (CPU, gloo): the same losses, weights, evaluations and files.

The 2-process runs are launched as a user would (``ACCELERATE_USE_CPU=1 torchrun --nproc_per_node 2
--no-python dare ...``); the 1-process references run in this process through ``dare.run.Run``. Every
per-example random draw is keyed by (seed, step, example index) (dare.randomness), so the two must agree
to float tolerance at every logged step (docs/architecture.md, "Randomness").
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
import yaml
from safetensors.torch import load_file

pytest.importorskip("dare_llada")

BIN = Path(sys.executable).parent
TORCHRUN = BIN / "torchrun"
SUDOKU = {"prompt_template": "{{ extra_info.puzzle }}", "chat_template": False}
SAMPLER = {"name": "llada", "params": {"gen_length": 17, "block_length": 17, "steps": 17}}
BENCH = {"name": "sudoku", "limit": 100, **SUDOKU, "reward": {"name": "sudoku", "params": {"require_answer_tags": False}}}


def _env(cpu_flag: bool = True) -> dict[str, str]:
    env = dict(os.environ, HF_HUB_OFFLINE="1", TOKENIZERS_PARALLELISM="false", OMP_NUM_THREADS="1")
    env.pop("ACCELERATE_USE_CPU", None)
    if cpu_flag:
        env["ACCELERATE_USE_CPU"] = "1"
    return env


def _write(tmp_path: Path, name: str, spec: dict) -> Path:
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(spec | {"output": {"dir": str(tmp_path / name)}}))
    return path


def _launch(spec_path: Path, command: str = "run", cpu_flag: bool = True) -> subprocess.Popen:
    cmd = [str(TORCHRUN), "--nproc_per_node", "2", "--standalone", "--no-python", str(BIN / "dare"), command, str(spec_path)]
    return subprocess.Popen(cmd, env=_env(cpu_flag), cwd=spec_path.parent, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, start_new_session=True)


def _two_processes(spec_path: Path, command: str = "run", cpu_flag: bool = True, timeout: float = 900,
                   dense: bool = True) -> Path:
    proc = _launch(spec_path, command, cpu_flag)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.terminate()  # torchrun stops its workers on SIGTERM (after a SIGKILL they live on, holding the pipes)
        try:
            err = proc.communicate(timeout=60)[1]
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            err = ""
        pytest.fail(f"the 2-process run did not finish within {timeout} s: {err[-3000:]}")
    assert proc.returncode == 0, (out[-2000:], "\n".join(line for line in err.splitlines() if "rank0" in line or "Error" in line)[-6000:])
    run_dir = spec_path.parent / spec_path.stem
    assert list((run_dir / "checkpoints").glob("checkpoint-*/rng_state_1.pth")), "the run did not use 2 processes"
    if dense:  # dense models: DDP does not search for unused parameters (MoE models may leave experts unused)
        assert "find_unused_parameters=True was specified" not in err
    return run_dir


def _processes_running(text: str) -> list[int]:
    """PIDs of the live processes whose command line contains ``text`` (zombies excluded)."""
    pids = []
    for d in Path("/proc").glob("[0-9]*"):
        try:
            if text in (d / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace") \
                    and ") Z " not in (d / "stat").read_text():
                pids.append(int(d.name))
        except OSError:
            continue
    return pids


def _one_process(spec_path: Path, train: bool = True, evaluate: bool = True) -> Path:
    from dare.run import Run

    before = torch.get_num_threads()
    try:
        Run.from_file(str(spec_path)).execute(train=train, evaluate=evaluate)
    finally:
        torch.set_num_threads(before)
    return spec_path.parent / spec_path.stem


def _metric(run_dir: Path, key: str) -> list[tuple[int, float]]:
    recs = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return [(r["step"], r[key]) for r in recs if key in r]


def _losses(run_dir: Path) -> list[tuple[int, float]]:
    return _metric(run_dir, "loss")


def _assert_same_losses(a: Path, b: Path, tol: float = 1e-5) -> None:
    la, lb = _losses(a), _losses(b)
    assert [s for s, _ in la] == [s for s, _ in lb] and la
    for (step, x), (_, y) in zip(la, lb):
        assert abs(x - y) <= tol * max(1.0, abs(x)), f"step {step}: loss {x} (1 process) vs {y} (2 processes)"


def _assert_same_weights(a: Path, b: Path, tol: float = 1e-5) -> None:
    wa, wb = load_file(a / "model" / "model.safetensors"), load_file(b / "model" / "model.safetensors")
    assert wa.keys() == wb.keys()
    worst = max(float((wa[k] - wb[k]).abs().max()) for k in wa)
    assert worst <= tol, f"final weights differ by up to {worst}"


def _assert_same_metrics(a: Path, b: Path, keys) -> None:
    """Each metric of ``keys`` logged at the same steps with the same values (rel 1e-3) in both runs."""
    for key in keys:
        ma, mb = _metric(a, key), _metric(b, key)
        assert [s for s, _ in ma] == [s for s, _ in mb] and ma, key
        assert [v for _, v in mb] == pytest.approx([v for _, v in ma], rel=1e-3, abs=1e-12), key


def _assert_moved(start_dir: Path, run: Path, at_least: float) -> None:
    """The run's final weights moved from ``start_dir``'s by more than ``at_least`` (else 1 = 2 is vacuous)."""
    start, end = load_file(start_dir / "model.safetensors"), load_file(run / "model" / "model.safetensors")
    moved = max(float((start[k] - end[k]).abs().max()) for k in start)
    assert moved > at_least, f"RL barely changed the weights ({moved}): the comparison would be vacuous"


def _layout(run_dir: Path) -> list[str]:
    """Every path under the run directory, per-process RNG files and TensorBoard event names normalised."""
    out = []
    for p in sorted(run_dir.rglob("*")):
        rel = p.relative_to(run_dir).as_posix()
        rel = re.sub(r"rng_state(_\d+)?\.pth$", "rng_state.pth", rel)
        rel = re.sub(r"events\.out\.tfevents\..*$", "events.out.tfevents", rel)
        out.append(rel)
    return sorted(set(out)) + [f"{len([p for p in run_dir.rglob('events.out.tfevents.*')])} event files"]


def _sft_spec(**train) -> dict:
    return {
        "model": {"new": {"family": "llada", "preset": "tiny"}},
        "data": {"train": {"path": "dare://sudoku/train.parquet", "limit": 128, **SUDOKU,
                           "response_template": "{{ reward_model.ground_truth }}"}},
        "algorithm": {"name": "sft"},
        "sampler": SAMPLER,
        "train": {"learning_rate": 1e-3, "max_steps": 4, "per_device_batch_size": 16, "logging_steps": 1,
                  "save_steps": 2, "num_threads": 1, "seed": 0, **train},
        "eval": {"before_train": True, "batch_size": 32, "benchmarks": [BENCH]},
    }


def test_sft_and_evaluation_on_two_processes_equal_one(tmp_path):
    """4 SFT steps + 100 Sudoku puzzles evaluated before and after: same losses, weights, completions, files."""
    one = _one_process(_write(tmp_path, "one", _sft_spec()))
    two = _two_processes(_write(tmp_path, "two", _sft_spec(per_device_batch_size=8)))
    _assert_same_losses(one, two)
    _assert_same_weights(one, two)
    for stage in ("before", "after"):
        a = json.loads((one / "eval" / f"{stage}.json").read_text())["results"][0]
        b = json.loads((two / "eval" / f"{stage}.json").read_text())["results"][0]
        assert b["n"] == 100 and [s["completion"] for s in a["samples"]] == [s["completion"] for s in b["samples"]]
        assert (a["accuracy"], a["mean_reward"]) == (b["accuracy"], b["mean_reward"])
    # only the main process wrote: the same paths (one RNG file per process), one TensorBoard event file
    assert _layout(one) == _layout(two)
    assert _layout(two)[-1] == "1 event files"


@pytest.mark.parametrize("family,algorithm,train", [
    ("llada", {"name": "sft", "params": {"block_length": 4}}, {}),
    ("sdar", {"name": "sft"}, {"packing": True}),
    ("llada2", {"name": "sft"}, {}),  # with gradient checkpointing (below)
])
def test_blockwise_sft_on_two_processes_equals_one(tmp_path, family, algorithm, train):
    """Blockwise SFT (one active block per example, keyed draws) of LLaDA, and the block-diffusion families' SFT
    (SDAR packed, LLaDA2), train the same on 2 processes as on 1. The block families' forwards read the block size
    from the unwrapped model's ``model.config``, which the DDP wrapper does not have."""
    spec = _sft_spec(**train)
    spec.pop("eval")
    spec.pop("sampler")
    spec["model"] = {"new": {"family": family, "preset": "tiny"}, "gradient_checkpointing": family == "llada2"}
    spec["algorithm"] = algorithm
    one = _one_process(_write(tmp_path, "one", spec), evaluate=False)
    spec["train"] |= {"per_device_batch_size": 8}
    two = _two_processes(_write(tmp_path, "two", spec), command="train", dense=family != "llada2")
    _assert_same_losses(one, two)
    _assert_same_weights(one, two)


def test_gradient_accumulation_equals_one_big_batch(tmp_path):
    spec = _sft_spec()
    spec.pop("eval")
    spec.pop("sampler")
    big = _one_process(_write(tmp_path, "big", spec), evaluate=False)
    spec["train"] |= {"per_device_batch_size": 8, "gradient_accumulation_steps": 2}
    acc = _one_process(_write(tmp_path, "acc", spec), evaluate=False)
    _assert_same_losses(big, acc)
    _assert_same_weights(big, acc)


def _pairs(path: Path) -> str:
    import random

    from dare.data import load_rows

    rng = random.Random(0)
    with open(path, "w") as f:
        for r in load_rows("dare://sudoku/train.parquet", limit=64):
            puzzle, solution = r["extra_info"]["puzzle"], r["reward_model"]["ground_truth"]
            cells = [i for i, c in enumerate(puzzle) if c == "0"]
            bad = list(solution)
            for i in rng.sample(cells, 2):
                bad[i] = rng.choice([d for d in "1234" if d != solution[i]])
            f.write(json.dumps({"prompt": puzzle, "chosen": solution, "rejected": "".join(bad)}) + "\n")
    return str(path)


def test_dpo_on_two_processes_equals_one_without_the_cpu_variable(tmp_path):
    """3 VRPO steps; the 2-process launch omits ACCELERATE_USE_CPU: DARE still forms a 2-process CPU group."""
    spec = {
        "model": {"new": {"family": "llada", "preset": "tiny"}},
        "data": {"train": {"path": _pairs(tmp_path / "pairs.jsonl"), "chat_template": False}},
        "algorithm": {"name": "vrpo", "params": {"estimator": {"name": "mc-elbo", "params": {"mc_num": 2}}}},
        "train": {"learning_rate": 1e-3, "max_steps": 3, "per_device_batch_size": 8, "logging_steps": 1, "save_steps": 3,
                  "num_threads": 1, "seed": 0},
    }
    one = _one_process(_write(tmp_path, "one", spec), evaluate=False)
    spec["train"]["per_device_batch_size"] = 4
    two = _two_processes(_write(tmp_path, "two", spec), "train", cpu_flag=False)
    _assert_same_losses(one, two)
    _assert_same_weights(one, two)


def test_multi_pass_preference_training_of_a_moe_model_on_two_processes_is_refused(tmp_path):
    """VRPO's Monte-Carlo ELBO runs several forwards before one backward, which DDP's unused-parameter search (on for
    mixture-of-experts models, LLaDA2) cannot handle: instead of a crash inside DDP ("marked ready twice"),
    a clear error before the first forward."""
    spec = {
        "model": {"new": {"family": "llada2", "preset": "tiny"}},
        "data": {"train": {"path": _pairs(tmp_path / "pairs.jsonl"), "chat_template": False}},
        "algorithm": {"name": "vrpo", "params": {"estimator": {"name": "mc-elbo", "params": {"mc_num": 2}}}},
        "train": {"learning_rate": 1e-3, "max_steps": 1, "per_device_batch_size": 2, "num_threads": 1, "seed": 0},
    }
    res = subprocess.run([str(TORCHRUN), "--nproc_per_node", "2", "--standalone", "--no-python", str(BIN / "dare"),
                          "train", str(_write(tmp_path, "two", spec))], env=_env(), cwd=tmp_path, text=True,
                         capture_output=True, timeout=300)
    assert res.returncode != 0 and "runs 2 forwards of the model before one backward" in res.stderr, res.stderr[-2000:]
    assert "mc_num: 1" in res.stderr and "marked ready" not in res.stderr


@pytest.mark.parametrize("family,sampler", [
    ("llada", {"name": "llada", "params": {"gen_length": 16, "block_length": 16, "steps": 16, "temperature": 1.0}}),
    ("llada2", {"name": "llada2", "params": {"gen_length": 32, "steps": 4, "temperature": 1.0}}),
])
def test_online_rl_on_two_processes_equals_one(tmp_path, family, sampler, digit_model):
    """3 d1 steps, 4 prompts x 4 completions per step: each process rolls out its 2 prompts' groups.
    (TraceRL and CJ-GRPO on 2 processes: the threshold-rollout replay test below.) LLaDA2, a block family: its forwards
    and its sampler must read ``model.config`` of the unwrapped model, not through the DDP wrapper. LLaDA starts from
    the digit-writing model with 16-token completions (a 4x4 grid): rewards with a spread, so the comparison is not
    vacuous (a fresh model's 8-token completions score 0: no gradient, no weight change)."""
    start = {"path": str(digit_model)} if family == "llada" else {"new": {"family": family, "preset": "tiny"}}
    spec = {
        "model": start,
        "data": {"train": {"path": "dare://sudoku/train.parquet", "limit": 64, **SUDOKU}},
        # a fresh model's rewards all tie: run every row so the update is really exercised (the skip on two
        # processes is covered by the threshold-rollout test below, whose trained model has reward spread)
        "algorithm": {"name": "d1", "params": {"group_size": 4, "skip_zero_advantage": False}},
        "sampler": sampler,
        "rewards": [{"name": "sudoku", "params": {"require_answer_tags": False}}],
        "train": {"learning_rate": 1e-3, "max_steps": 3, "per_device_batch_size": 4, "logging_steps": 1, "save_steps": 3,
                  "num_threads": 1, "seed": 0},
    }
    one = _one_process(_write(tmp_path, "one", spec), evaluate=False)
    # the comparison checks something: rewards, gradients and (from a saved start) the weights moved
    assert max(v for _, v in _metric(one, "reward")) > 0, _metric(one, "reward")
    assert max(v for _, v in _metric(one, "grad_norm")) > 0, _metric(one, "grad_norm")
    if family == "llada":
        _assert_moved(digit_model, one, 1e-5)
    spec["train"]["per_device_batch_size"] = 2
    two = _two_processes(_write(tmp_path, "two", spec), "train", dense=family != "llada2")
    _assert_same_losses(one, two)
    _assert_same_weights(one, two)
    rewards = [[json.loads(x).get("reward") for x in (d / "metrics.jsonl").read_text().splitlines()] for d in (one, two)]
    assert rewards[0] == pytest.approx(rewards[1], abs=1e-6)  # the same completions were rolled out


@pytest.mark.slow
@pytest.mark.skipif(os.environ.get("DARE_SLOW") != "1", reason="slow (2 processes, ~30 s): set DARE_SLOW=1")
def test_lightningrl_on_two_processes_equals_one(tmp_path):
    """LightningRL's rollout hook (dare_grpo.objectives.lightningrl.trainer) z-scores the kept rewards over the whole batch and
    normalises its policy and NLL terms by the whole batch's kept rows and correct tokens: 2 processes (2 prompts each)
    equal 1 (4 prompts). Every completion counts as correct and every group is kept (a fresh model's rewards tie),
    so the NLL term and the row weights are exercised; 2 steps of 4 prompts x 4 completions on a tiny LLaDA2."""
    spec = {
        "model": {"new": {"family": "llada2", "preset": "tiny"}},
        "data": {"train": {"path": "dare://sudoku/train.parquet", "limit": 64, **SUDOKU}},
        "algorithm": {"name": "lightningrl", "params": {"group_size": 4, "beta": 0.0, "correct_threshold": 0.0,
                                                       "drop_all_wrong": False, "tpf_range_threshold": 0.0}},
        "sampler": {"name": "llada2", "params": {"gen_length": 32, "steps": 4, "temperature": 1.0}},
        "rewards": [{"name": "sudoku", "params": {"require_answer_tags": False}}],
        "train": {"learning_rate": 1e-3, "max_steps": 2, "per_device_batch_size": 4, "logging_steps": 1, "save_steps": 2,
                  "num_threads": 1, "seed": 0},
    }
    one = _one_process(_write(tmp_path, "one", spec), evaluate=False)
    spec["train"]["per_device_batch_size"] = 2
    two = _two_processes(_write(tmp_path, "two", spec), "train", dense=False)
    _assert_same_losses(one, two)
    _assert_same_weights(one, two)
    _assert_same_metrics(one, two, ("reward", "nll", "lightningrl/kept_fraction", "lightningrl/tpf"))


@pytest.fixture(scope="module")
def digit_model(tmp_path_factory) -> Path:
    """A tiny LLaDA after 40 SFT steps on Sudoku: it writes digits (rewards ~0.26 with a spread, so RL has
    gradients) with uneven confidence (threshold decoding takes row-dependent step counts)."""
    tmp = tmp_path_factory.mktemp("digits")
    spec = _sft_spec(learning_rate=3e-3, max_steps=40, per_device_batch_size=64, logging_steps=10, save_steps=40)
    spec["data"]["train"]["limit"] = 2000
    spec.pop("eval")
    return _one_process(_write(tmp, "sft", spec), evaluate=False) / "model"


@pytest.mark.parametrize("objective,iterations,micro_batch_size,gen_length,block_length",
                         [("tracerl", 1, None, 17, 17), ("tracerl", 2, None, 17, 17), ("cj-grpo", 1, 3, 16, 4)])
def test_trajectory_replay_of_threshold_rollouts_on_two_processes_equals_one(tmp_path, digit_model, objective,
                                                                             iterations, micro_batch_size, gen_length,
                                                                             block_length):
    """Threshold rollouts take a different number of denoising steps on each process, so trajectory replay
    has a different number of passes (backwards) per process: the 2-process run used to wait forever in the
    first update (DDP all-reduces at every backward). 4 rollouts of 4 prompts x 4 completions, threshold 0.3.
    With ``micro_batch_size`` 3 a row chunk can have no token committed at a step: its loss has no graph,
    which used to raise in ``backward`` (now a zero-gradient pad job keeps the backward count).
    CJ-GRPO normalises each step by the tokens committed at that step over the whole batch and averages over the
    batch's steps: the processes hold different sets of steps, so the trainer matches passes by step
    (``Pass.key``; with per-process normalisers 2 processes would only approximate 1). With
    blocks of 4 (16 tokens) a row's step numbers must not depend on the rows it is decoded with: numbered by the
    batch's forward passes, later blocks would shift with the batch."""
    spec = {
        "model": {"path": str(digit_model)},
        "data": {"train": {"path": "dare://sudoku/train.parquet", "limit": 64, **SUDOKU}},
        "algorithm": {"name": objective, "params": {"group_size": 4, "num_iterations": iterations,
                                                   "micro_batch_size": micro_batch_size}},
        "sampler": {"name": "llada", "params": {"gen_length": gen_length, "block_length": block_length,
                                                "steps": gen_length, "temperature": 1.0, "threshold": 0.3}},
        "rewards": [{"name": "sudoku", "params": {"require_answer_tags": False}}],
        "train": {"learning_rate": 1e-4, "max_steps": 4 * iterations, "per_device_batch_size": 4, "logging_steps": 1,
                  "save_steps": 4 * iterations, "num_threads": 1, "seed": 0},
    }
    one = _one_process(_write(tmp_path, "one", spec), evaluate=False)
    spec["train"]["per_device_batch_size"] = 2
    two = _two_processes(_write(tmp_path, "two", spec), "train", timeout=300)
    _assert_same_losses(one, two)
    _assert_same_weights(one, two)
    _assert_moved(digit_model, one, 1e-4)
    nfe = [json.loads(x)["nfe/rollout"] for x in (two / "metrics.jsonl").read_text().splitlines() if "nfe/rollout" in x]
    # the mean over the processes' own step counts: a fraction when they differed (the case under test)
    assert any(n != int(n) for n in nfe), f"the processes took the same number of denoising steps every time: {nfe}"
    # the loss's metrics, the entropy and the rollout's standard deviations are the whole batch's on 2 processes
    # (per-process values would read 1/2 for the loss metrics and the mean of each process's std)
    _assert_same_metrics(one, two, ("entropy", "approx_kl", "reward_std", "advantage_std", "frac_zero_std_groups"))
    if iterations > 1:  # the second inner iteration's ratios differ from 1
        assert max(v for _, v in _metric(one, "approx_kl")) > 1e-9


@pytest.mark.parametrize("objective,params", [
    ("spg", {"group_size": 4, "mc_num": 2}),
    ("mdpo", {"group_size": 4, "sample_train_steps": 3}),
    ("d-treerpo", {"num_tree_samples": 2, "tree_branch_factor": 2, "self_distillation": True, "num_iterations": 1}),
    ("espo", {"group_size": 4, "num_iterations": 1, "mc_num": 1, "reduce_var": False}),
    ("tracerl", {"group_size": 4, "shrink": 2,
                 "value_model": {"learning_rate": 1e-3, "gamma": 0.9, "lam": 0.95}}),
])
def test_objectives_with_their_own_rollout_or_update_on_two_processes_equal_one(tmp_path, digit_model, objective,
                                                                                 params):
    """SPG (coupled Monte-Carlo copies), MDPO (its own decoder, top-K steps of the batch) and d-TreeRPO (tree
    rollout, edge loss) have their own trainers. They normalise by whole-batch counts (SPG's response tokens,
    MDPO's scored step tokens, d-TreeRPO's edges and self-distillation pairs), MDPO chooses its steps from every
    process's rows, and MDPO's and d-TreeRPO's decoders draw per row, so 2 processes sample the completions
    of 1. ESPO (the pass-mean update) logs the whole batch's entropy. TraceRL's value model (dare_grpo.objectives.tracerl.trainer)
    is all-reduced by hand and normalised by the whole batch's (completion, transition) pairs. 3 steps of 4 prompts
    at temperature 1 on the digit-writing model."""
    spec = {
        "model": {"path": str(digit_model)},
        "data": {"train": {"path": "dare://sudoku/train.parquet", "limit": 64, **SUDOKU}},
        "algorithm": {"name": objective, "params": params},
        "sampler": {"name": "llada", "params": {"gen_length": 8, "block_length": 8, "steps": 8, "temperature": 1.0}},
        "rewards": [{"name": "sudoku", "params": {"require_answer_tags": False}}],
        "train": {"learning_rate": 1e-4, "max_steps": 3, "per_device_batch_size": 4, "logging_steps": 1,
                  "save_steps": 3, "num_threads": 1, "seed": 0},
    }
    one = _one_process(_write(tmp_path, "one", spec), evaluate=False)
    spec["train"]["per_device_batch_size"] = 2
    two = _two_processes(_write(tmp_path, "two", spec), "train", timeout=300)
    _assert_same_losses(one, two)
    _assert_same_weights(one, two)
    _assert_moved(digit_model, one, 1e-5)
    extra = {"d-treerpo": ("dtreerpo/num_edges", "dtreerpo/mean_root_value"), "mdpo": ("mdpo/num_train_steps",),
             "tracerl": ("value/loss", "value/advantage_abs")}
    if objective == "tracerl":
        va, vb = (load_file(d / "value_model" / "model.safetensors") for d in (one, two))
        assert max(float((va[k] - vb[k]).abs().max()) for k in va) <= 1e-5
    _assert_same_metrics(one, two, ("reward", "reward_std", "advantage_std", "entropy", *extra.get(objective, ())))


def test_sigkill_on_two_processes_then_resume_is_bit_exact(tmp_path):
    spec = _sft_spec(max_steps=6, save_steps=2, per_device_batch_size=8)
    spec.pop("eval")
    spec.pop("sampler")
    straight = _two_processes(_write(tmp_path, "straight", spec), "train")
    killed_spec = _write(tmp_path, "killed", spec)
    proc = _launch(killed_spec, "train")
    marker = tmp_path / "killed" / "checkpoints" / "checkpoint-2" / "trainer_state.json"
    deadline = time.monotonic() + 600
    while not marker.is_file():
        assert proc.poll() is None, f"training ended before it could be killed: {proc.stderr.read()[-2000:]}"
        assert time.monotonic() < deadline, "no checkpoint within 600 s"
        time.sleep(0.02)
    os.killpg(proc.pid, signal.SIGKILL)  # torchrun (its workers run in sessions of their own)
    proc.wait()
    # the workers die with their launcher (PR_SET_PDEATHSIG, dare.scaling.distributed): no orphan goes on writing the run
    deadline = time.monotonic() + 30
    while _processes_running(str(killed_spec)):
        assert time.monotonic() < deadline, "the workers outlived torchrun by 30 s"
        time.sleep(0.1)
    assert not (tmp_path / "killed" / "model").exists()
    # resuming with one process would change the global batch (2 x 8 -> 1 x 8): refused, naming the layouts
    alone = subprocess.run([str(BIN / "dare"), "train", str(killed_spec)], env=_env(), cwd=tmp_path, text=True,
                           capture_output=True, timeout=300)
    assert alone.returncode != 0 and "global batch of 2 processes x per_device_batch_size 8" in alone.stderr, \
        alone.stderr[-2000:]
    resumed = _two_processes(killed_spec, "train")
    a, b = load_file(straight / "model" / "model.safetensors"), load_file(resumed / "model" / "model.safetensors")
    assert all(torch.equal(a[k], b[k]) for k in a), "resumed weights differ from the uninterrupted 2-process run"


def test_accelerate_cpu_launch_of_two_processes_is_refused(tmp_path):
    """`accelerate launch --cpu --num_processes 2` starts ONE process: a clear error, not a silent run."""
    accelerate = shutil.which("accelerate", path=str(BIN))
    spec = _write(tmp_path, "run", _sft_spec())
    cmd = [accelerate, "launch", "--cpu", "--num_processes", "2", "--num_machines", "1", "--mixed_precision", "no",
           "--dynamo_backend", "no", str(BIN / "dare"), "train", str(spec)]
    res = subprocess.run(cmd, env=_env(cpu_flag=False), capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert res.returncode != 0
    assert "starts ONE process" in res.stderr and "torchrun" in res.stderr, res.stderr[-2000:]
    # DARE's process exits 2; the CalledProcessError traceback after the error is accelerate's (docs/scaling.md)
    assert "returned non-zero exit status 2." in res.stderr, res.stderr[-2000:]
    assert "Traceback" not in res.stderr.split("starts ONE process")[0][-500:]
    assert not (tmp_path / "run" / "checkpoints").exists()  # refused before training
