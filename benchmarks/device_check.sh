#!/usr/bin/env bash
# GPU check (issue 10), for one CUDA GPU; under 8 minutes on an H100/H200-class machine.
#
#   bash benchmarks/device_check.sh                   # repository root, DARE installed in .venv
#   PYTHON=/path/to/python bash benchmarks/device_check.sh
#
# 1. the tests marked `gpu` (tests/test_gpu.py): per family (llada, dream, sdar, sdar-moe, llada2; tiny models)
#    a bf16 SFT step on CUDA, one online-RL step on CUDA, greedy decoding on CUDA == on the CPU; `dare profile`
#    on CUDA;
# 2. throughput: `dare profile` (dare.profiling) of a bf16 SFT spec and a bf16 RL (d1) spec per family:
#    parameters, peak CUDA memory, s/step and tokens/s (forwards with gradients; first step not timed);
# 3. FSDP2 on 1 GPU through accelerate with examples/accelerate/fsdp2.yaml: 4 fp32 SFT steps of a tiny LLaDA,
#    checked against the same spec trained without FSDP (losses and final weights), FSDP checkpoint files
#    present, model/ in the official format with finite weights.
#
# Without a usable CUDA device it stops at once (exit 2) and says why. Exit status: 0 when every part passed.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
PY="${PYTHON:-}"
if [ -z "$PY" ]; then
  if [ -x .venv/bin/python ]; then PY=.venv/bin/python; else PY=python3; fi
fi
BIN="$(cd "$(dirname "$(command -v "$PY")")" && pwd)"
DARE="$BIN/dare"
START=$SECONDS
say() { printf '\n== [%3ds] %s\n' "$((SECONDS - START))" "$*"; }

# ---------------------------------------------------------------- 0. fail fast without a GPU
"$PY" - <<'EOF' || exit 2
import sys
try:
    import torch
    import dare  # noqa: F401
except ImportError as exc:
    sys.exit(f"device_check: cannot import {exc.name!r} with this Python; install DARE first (make install) or set PYTHON")
if not torch.cuda.is_available():
    if torch.version.cuda is None:
        why = (f"this torch ({torch.__version__}) is a CPU-only build; install a CUDA build into the environment, e.g. "
               "`.venv/bin/pip install torch==2.13.0 --index-url https://download.pytorch.org/whl/cu128`")
    else:
        why = (f"torch {torch.__version__} (CUDA {torch.version.cuda}) sees no CUDA device; check `nvidia-smi` and "
               "CUDA_VISIBLE_DEVICES")
    sys.exit(f"device_check: no usable GPU: {why}. This check needs one CUDA GPU.")
print(f"device_check: {torch.cuda.get_device_name(0)}, torch {torch.__version__}, CUDA {torch.version.cuda}, "
      f"bf16 supported: {torch.cuda.is_bf16_supported()}")
EOF
[ -x "$DARE" ] || { echo "device_check: no dare command next to $PY ($DARE)" >&2; exit 2; }

WORK="$(mktemp -d "${TMPDIR:-/tmp}/dare-device-check.XXXXXX")"
trap 'rm -rf "$WORK"' EXIT
export HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false
FAILED=()

# ---------------------------------------------------------------- 1. tests marked gpu
say "1. pytest -m gpu"
if ! timeout 300 "$PY" -m pytest -m gpu -q -p no:cacheprovider tests/test_gpu.py; then FAILED+=("pytest -m gpu"); fi

# ---------------------------------------------------------------- 2. throughput per family
say "2. dare profile: bf16 SFT and RL (d1) steps per family, tiny models"
if ! timeout 240 "$PY" - "$WORK" 2> "$WORK/profile.log" <<'EOF'; then FAILED+=("profile"); tail -40 "$WORK/profile.log"; fi
import contextlib
import sys
from pathlib import Path

import yaml

from dare.plugins import get_registry
from dare.profiling import profile_spec

work = Path(sys.argv[1])
sudoku = {"path": "dare://sudoku/train.parquet", "prompt_template": "{{ extra_info.puzzle }}", "chat_template": False}
rows = []
for family, preset in [("llada", "tiny"), ("llada", "quickstart"), ("dream", "tiny"), ("sdar", "tiny"),
                       ("sdar", "tiny-moe"), ("llada2", "tiny")]:
    fam = get_registry().get("model_family", family).cls()
    sampler = get_registry().get("sampler", fam.default_sampler)
    fields = sampler.cls.Params.model_fields
    wanted = {"gen_length": 16, "steps": 16, "denoising_steps": 4, "temperature": 1.0,
              "block_length": 16 if fam.attention == "full" else None}
    common = {"model": {"new": {"family": family, "preset": preset}}, "output": {"dir": str(work / "unused")}}
    specs = {
        "sft": common | {"data": {"train": {**sudoku, "limit": 512, "response_template": "{{ reward_model.ground_truth }}"}},
                         "algorithm": {"name": "sft"},
                         "train": {"learning_rate": 1e-4, "max_steps": 100, "per_device_batch_size": 64, "bf16": True}},
        "rl": common | {"data": {"train": {**sudoku, "limit": 256}},
                        "algorithm": {"name": "d1", "params": {"group_size": 4}},
                        "sampler": {"name": sampler.name, "params": {k: v for k, v in wanted.items() if k in fields and v is not None}},
                        "rewards": [{"name": "sudoku", "params": {"require_answer_tags": False}}],
                        "train": {"learning_rate": 1e-6, "max_steps": 100, "per_device_batch_size": 8, "bf16": True}},
    }
    for kind, spec in specs.items():
        path = work / f"{family}-{preset}-{kind}.yaml"
        path.write_text(yaml.safe_dump(spec))
        with contextlib.redirect_stdout(sys.stderr):  # the trainer's progress lines go to profile.log
            r = profile_spec(str(path), steps=5 if kind == "sft" else 3)
        rows.append((f"{family}/{preset}", kind, r))
print(f"\n{'model':<18} {'step':<5} {'params':>10} {'peak MiB':>9} {'s/step':>8} {'tokens/step':>12} {'tokens/s':>11}")
for name, kind, r in rows:
    print(f"{name:<18} {kind:<5} {r.parameters:>10,} {r.peak_memory_bytes / 2**20:>9.1f} {r.seconds_per_step:>8.4f} "
          f"{r.tokens_per_step:>12,.0f} {r.tokens_per_second:>11,.0f}")
EOF

# ---------------------------------------------------------------- 3. FSDP2 on 1 GPU
say "3. FSDP2 on 1 GPU (accelerate launch --config_file examples/accelerate/fsdp2.yaml --num_processes 1)"
fsdp_spec() {  # $1 = run directory
  cat <<EOF
model: {new: {family: llada, preset: tiny}}
data:
  train: {path: "dare://sudoku/train.parquet", limit: 64, prompt_template: "{{ extra_info.puzzle }}", chat_template: false,
          response_template: "{{ reward_model.ground_truth }}"}
algorithm: {name: sft}
train: {learning_rate: 1.0e-3, max_steps: 4, per_device_batch_size: 16, logging_steps: 1, save_steps: 2, seed: 0}
output: {dir: $1}
EOF
}
fsdp_spec "$WORK/plain" > "$WORK/plain.yaml"
fsdp_spec "$WORK/fsdp" > "$WORK/fsdp.yaml"
ACCELERATE=("$PY" -m accelerate.commands.launch)
if timeout 150 "$DARE" train "$WORK/plain.yaml" > "$WORK/plain.log" 2>&1 \
   && timeout 180 "${ACCELERATE[@]}" --config_file examples/accelerate/fsdp2.yaml --num_processes 1 --num_machines 1 \
        "$DARE" train "$WORK/fsdp.yaml" > "$WORK/fsdp.log" 2>&1; then
  if ! "$PY" - "$WORK" <<'EOF'; then FAILED+=("fsdp2 comparison"); fi
import json
import sys
from pathlib import Path

import torch
from safetensors.torch import load_file

work = Path(sys.argv[1])
losses = {k: [(r["step"], r["loss"]) for r in map(json.loads, (work / k / "metrics.jsonl").read_text().splitlines()) if "loss" in r]
          for k in ("plain", "fsdp")}
print("losses without FSDP:", [round(x, 6) for _, x in losses["plain"]])
print("losses with FSDP2:  ", [round(x, 6) for _, x in losses["fsdp"]])
ckpt = sorted((work / "fsdp" / "checkpoints").glob("checkpoint-*"))[-1]
files = sorted(p.name for p in ckpt.iterdir())
print(f"{ckpt.name}: {' '.join(files)}")
a, b = load_file(work / "plain" / "model" / "model.safetensors"), load_file(work / "fsdp" / "model" / "model.safetensors")
worst = max(float((a[k] - b[k]).abs().max()) for k in a) if a.keys() == b.keys() else float("inf")
print(f"final weights: same tensor names {a.keys() == b.keys()}, largest difference {worst:.3g}")
ok = (len(losses["fsdp"]) == 4 and [s for s, _ in losses["fsdp"]] == [s for s, _ in losses["plain"]]
      and all(abs(x - y) <= 1e-4 * max(1.0, abs(x)) for (_, x), (_, y) in zip(losses["plain"], losses["fsdp"]))
      and any(f.startswith(("pytorch_model_fsdp", "optimizer.bin")) for f in files)  # accelerate's FSDP checkpoint files
      and worst <= 1e-4 and all(bool(torch.isfinite(t).all()) for t in b.values()))
print("FSDP2 check:", "passed" if ok else "FAILED")
sys.exit(0 if ok else 1)
EOF
else
  FAILED+=("fsdp2 run")
  echo "--- plain.log (tail)"; tail -20 "$WORK/plain.log" || true
  echo "--- fsdp.log (tail)"; tail -40 "$WORK/fsdp.log" || true
fi

say "done in $((SECONDS - START)) s"
if [ ${#FAILED[@]} -gt 0 ]; then
  echo "device_check: FAILED: ${FAILED[*]}" >&2
  exit 1
fi
echo "device_check: all parts passed"
