"""GPU checks (marker ``gpu``; skipped with a reason when ``torch.cuda.is_available()`` is False, see
tests/conftest.py). ``benchmarks/device_check.sh`` runs them on a GPU machine.

Per family, on tiny models: a bf16 SFT step on CUDA (autocast, finite weights), one online-RL step on CUDA
(rollout with temperature 1, keyed per-row generators on the device), and greedy decoding on CUDA equal to
greedy decoding on the CPU.
"""

from __future__ import annotations

import json

import pytest
import torch
import yaml
from safetensors.torch import load_file

pytestmark = pytest.mark.gpu

FAMILIES = [("llada", "tiny"), ("dream", "tiny"), ("sdar", "tiny"), ("sdar", "tiny-moe"), ("llada2", "tiny")]
SUDOKU = {"path": "dare://sudoku/train.parquet", "prompt_template": "{{ extra_info.puzzle }}", "chat_template": False}


def _sampler(family: str, **extra) -> dict:
    """The family's default sampler with an 8-token completion (block families keep their model's block length)."""
    from dare.plugins.manager import get_registry

    fam = get_registry().get("model_family", family).cls()
    entry = get_registry().get("sampler", fam.default_sampler)
    fields = entry.cls.Params.model_fields
    wanted = {"gen_length": 8, "steps": 8, "denoising_steps": 4, "block_length": 8 if fam.attention == "full" else None,
              **extra}
    return {"name": entry.name, "params": {k: v for k, v in wanted.items() if k in fields and v is not None}}


def _run(tmp_path, name: str, spec: dict):
    from dare.run import Run

    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(spec | {"output": {"dir": str(tmp_path / name)}}))
    run = Run.from_file(str(path))
    run.prepare()
    return run


def _finite_model(run) -> None:
    weights = load_file(run.model_dir / "model.safetensors")
    assert weights and all(bool(torch.isfinite(w).all()) for w in weights.values())


@pytest.mark.parametrize("family,preset", FAMILIES)
def test_bf16_sft_step_on_cuda(tmp_path, family, preset):
    pytest.importorskip(f"dare_{family}")
    run = _run(tmp_path, "sft", {
        "model": {"new": {"family": family, "preset": preset}},
        "data": {"train": {**SUDOKU, "limit": 16, "response_template": "{{ reward_model.ground_truth }}"}},
        "algorithm": {"name": "sft"},
        "train": {"learning_rate": 1e-3, "max_steps": 2, "per_device_batch_size": 4, "logging_steps": 1, "save_steps": 10,
                  "bf16": True},
    })
    assert next(run.model.parameters()).device.type == "cuda"
    seen = []
    linear = next(m for m in run.model.modules() if isinstance(m, torch.nn.Linear))
    linear.register_forward_hook(lambda m, i, o: seen.append((o.device.type, torch.is_autocast_enabled("cuda"), o.dtype)))
    run.execute(train=True, evaluate=False)
    assert seen and set(seen) == {("cuda", True, torch.bfloat16)}
    recs = [json.loads(x) for x in (run.dir / "metrics.jsonl").read_text().splitlines()]
    losses = [r["loss"] for r in recs if "loss" in r]
    assert len(losses) == 2 and all(torch.isfinite(torch.tensor(losses)))
    _finite_model(run)


@pytest.mark.parametrize("family,preset", FAMILIES)
def test_rl_step_on_cuda(tmp_path, family, preset):
    pytest.importorskip(f"dare_{family}")
    run = _run(tmp_path, "rl", {
        "model": {"new": {"family": family, "preset": preset}},
        "data": {"train": {**SUDOKU, "limit": 8}},
        "algorithm": {"name": "d1", "params": {"group_size": 2}},
        "sampler": _sampler(family, temperature=1.0),
        "rewards": [{"name": "sudoku", "params": {"require_answer_tags": False}}],
        "train": {"learning_rate": 1e-3, "max_steps": 1, "per_device_batch_size": 2, "logging_steps": 1, "save_steps": 10,
                  "bf16": True},
    })
    run.execute(train=True, evaluate=False)
    recs = [json.loads(x) for x in (run.dir / "metrics.jsonl").read_text().splitlines()]
    (step,) = [r for r in recs if "loss" in r]
    assert step["nfe/rollout"] > 0 and step["nonfinite_steps"] == 0
    _finite_model(run)


@pytest.mark.parametrize("family,preset", FAMILIES)
def test_greedy_decoding_on_cuda_equals_cpu(tmp_path, family, preset):
    pytest.importorskip(f"dare_{family}")
    from dare.data import load_rows
    from dare.plugins.manager import get_registry
    from dare.sampling import DecodingBundle
    from dare.sampling.text import generate_texts
    from dare.testing import tiny_model

    lm = tiny_model(family, tmp_path / "m", preset=preset)
    spec = _sampler(family)
    sampler = get_registry().get("sampler", spec["name"]).create(spec["params"])
    prompts = [r["extra_info"]["puzzle"] for r in load_rows("dare://sudoku/test.parquet", limit=8)]
    texts = {}
    for device in ("cpu", "cuda"):
        model = lm.model.float().to(device).eval()
        out = generate_texts(DecodingBundle.of(lm, sampler, model=model), prompts, batch_size=4, seed=0,
                             indices=list(range(len(prompts))))
        texts[device] = out.texts
    assert texts["cuda"] == texts["cpu"]


def test_profile_on_cuda_reports_cuda_memory(tmp_path, run_cli):
    pytest.importorskip("dare_llada")
    spec = tmp_path / "p.yaml"
    spec.write_text(yaml.safe_dump({
        "model": {"new": {"family": "llada", "preset": "tiny"}},
        "data": {"train": {**SUDOKU, "limit": 32, "response_template": "{{ reward_model.ground_truth }}"}},
        "algorithm": {"name": "sft"},
        "train": {"learning_rate": 1e-3, "max_steps": 10, "per_device_batch_size": 4, "bf16": True},
        "output": {"dir": str(tmp_path / "unused")},
    }))
    code, out, err = run_cli("profile", str(spec), "--steps", "3", "--json")
    assert code == 0, err[-2000:]
    res = json.loads(out)
    assert res["device"].startswith("cuda") and res["peak_memory_kind"] == "cuda max allocated"
    assert res["peak_memory_bytes"] > 0 and res["tokens_per_second"] > 0
