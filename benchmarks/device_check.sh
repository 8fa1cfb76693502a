#!/usr/bin/env bash
# GPU check for one lent CUDA machine: under 10 minutes, one line per check (`<check>: passed|FAILED|skipped: <reason>`).
#
#   bash benchmarks/device_check.sh              # repository root, DARE installed in .venv
#   DRY_RUN=1 bash benchmarks/device_check.sh    # dry mode (automatic without CUDA): runs end to end on the CPU
#   PYTHON=/path/to/python bash benchmarks/device_check.sh
#
# Checks (details in benchmarks/device_check.py):
#   bf16-logits  per family (llada, dream, sdar, llada2) the bf16 model's logits against fp32;
#   fastdllm     Fast-dLLM decoding on the GPU (dual cache + threshold 0.9) vs vanilla, with the speed ratio;
#   varlen       flash-attn varlen packing vs per-segment attention (packed loss difference);
#   ddp          2-process nccl DDP (torchrun) equals 1 process: 4 SFT steps, same losses and final weights (needs 2 GPUs);
#   fsdp2        FSDP2 on 1 GPU (accelerate, examples/accelerate/fsdp2.yaml) runs 2 SFT steps equal to the plain run.
# In dry mode each GPU check prints "skipped: <reason>"; the checks whose code can run on the CPU run there at a tiny size
# and say what they measured. The per-family GPU tests stay in `pytest -m gpu tests/test_gpu.py`.
# The time limits of a GPU run add up to 600 s. Exit status: 0 when no check FAILED.
set -uo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
PY="${PYTHON:-}"
if [ -z "$PY" ]; then
  if [ -x .venv/bin/python ]; then PY=.venv/bin/python; else PY=python3; fi
fi
BIN="$(cd "$(dirname "$(command -v "$PY")")" && pwd)"
START=$SECONDS
WORK="$(mktemp -d "${TMPDIR:-/tmp}/dare-device-check.XXXXXX")"
trap 'rm -rf "$WORK"' EXIT
export HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false
FAILED=()

DRY="${DRY_RUN:-0}"
if [ "$DRY" != "1" ] && ! "$PY" -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)" 2>/dev/null; then
  echo "device_check: no usable CUDA device with $PY: dry mode (every GPU check is skipped)"
  DRY=1
fi
DRYFLAG=()
[ "$DRY" = "1" ] && DRYFLAG=(--dry)
"$PY" -c "import torch, dare; print(f'device_check: torch {torch.__version__}, CUDA {torch.version.cuda}, ' + (torch.cuda.get_device_name(0) if torch.cuda.is_available() else 'no GPU'))" \
  || { echo "device_check: cannot import torch and dare with $PY; install DARE first (make install) or set PYTHON" >&2; exit 2; }

check() {  # $1 = check name, $2 = time limit on a GPU (s; tripled in dry mode, where the CPU runs the code)
  local rc=0 limit="$2"
  [ "$DRY" = "1" ] && limit=$((3 * $2))
  timeout "$limit" "$PY" benchmarks/device_check.py "$1" "${DRYFLAG[@]}" 2> "$WORK/$1.log" || rc=$?
  if [ "$rc" -ne 0 ] && [ "$rc" -ne 3 ]; then
    FAILED+=("$1")
    echo "$1: FAILED (exit $rc)"; tail -15 "$WORK/$1.log"
  fi
  return "$rc"
}

check bf16-logits 90
check fastdllm 120
check varlen 60

sft_spec() {  # $1 = run directory, $2 = steps, $3 = per-device batch
  cat <<SPEC
model: {new: {family: llada, preset: tiny}}
data:
  train: {path: "dare://sudoku/train.parquet", limit: 64, prompt_template: "{{ extra_info.puzzle }}", chat_template: false,
          response_template: "{{ reward_model.ground_truth }}"}
algorithm: {name: sft}
train: {learning_rate: 1.0e-3, max_steps: $2, per_device_batch_size: $3, logging_steps: 1, save_steps: $2, seed: 0}
output: {dir: $1}
SPEC
}
compare() {  # $1 = check name, $2 = reference run, $3 = other run, $4 = steps: one line, exit 1 on a difference
  "$PY" - "$@" <<'PYEOF'
import json, sys
from pathlib import Path
from safetensors.torch import load_file
import torch
name, a, b, steps = sys.argv[1], Path(sys.argv[2]), Path(sys.argv[3]), int(sys.argv[4])
loss = lambda d: [(r["step"], r["loss"]) for r in map(json.loads, (d / "metrics.jsonl").read_text().splitlines()) if "loss" in r]
la, lb = loss(a), loss(b)
wa, wb = load_file(a / "model" / "model.safetensors"), load_file(b / "model" / "model.safetensors")
worst = max(float((wa[k] - wb[k]).abs().max()) for k in wa) if wa.keys() == wb.keys() else float("inf")
dl = max((abs(x - y) for (_, x), (_, y) in zip(la, lb)), default=float("inf"))
ok = (len(lb) == steps and [s for s, _ in la] == [s for s, _ in lb] and dl <= 1e-4 * max(1.0, abs(la[0][1]))
      and worst <= 1e-4 and all(bool(torch.isfinite(t).all()) for t in wb.values()))
print(f"{name}: {'passed' if ok else 'FAILED'} ({steps} steps, largest loss difference {dl:.2e}, largest weight difference {worst:.2e})")
sys.exit(0 if ok else 1)
PYEOF
}

# ddp: 2 processes with nccl (torchrun, no ACCELERATE_USE_CPU) vs 1 process with the same global batch
if "$PY" benchmarks/device_check.py ddp "${DRYFLAG[@]}"; then
  sft_spec "$WORK/ddp1" 4 16 > "$WORK/ddp1.yaml"
  sft_spec "$WORK/ddp2" 4 8 > "$WORK/ddp2.yaml"
  if timeout 60 "$BIN/dare" train "$WORK/ddp1.yaml" > "$WORK/ddp1.log" 2>&1 \
     && timeout 120 "$BIN/torchrun" --nproc_per_node 2 --standalone --no-python "$BIN/dare" train "$WORK/ddp2.yaml" \
          > "$WORK/ddp2.log" 2>&1; then
    compare ddp "$WORK/ddp1" "$WORK/ddp2" 4 || FAILED+=("ddp")
  else
    FAILED+=("ddp"); echo "ddp: FAILED (a run failed)"; tail -20 "$WORK/ddp1.log" "$WORK/ddp2.log"
  fi
fi

# fsdp2: accelerate launch --config_file examples/accelerate/fsdp2.yaml --num_processes 1, 2 steps vs the plain run
if "$PY" benchmarks/device_check.py fsdp2 "${DRYFLAG[@]}"; then
  sft_spec "$WORK/plain" 2 16 > "$WORK/plain.yaml"
  sft_spec "$WORK/fsdp" 2 16 > "$WORK/fsdp.yaml"
  if timeout 60 "$BIN/dare" train "$WORK/plain.yaml" > "$WORK/plain.log" 2>&1 \
     && timeout 90 "$PY" -m accelerate.commands.launch --config_file examples/accelerate/fsdp2.yaml --num_processes 1 \
          --num_machines 1 "$BIN/dare" train "$WORK/fsdp.yaml" > "$WORK/fsdp.log" 2>&1; then
    compare fsdp2 "$WORK/plain" "$WORK/fsdp" 2 || FAILED+=("fsdp2")
  else
    FAILED+=("fsdp2"); echo "fsdp2: FAILED (a run failed)"; tail -20 "$WORK/plain.log" "$WORK/fsdp.log"
  fi
fi

echo "device_check: done in $((SECONDS - START)) s$([ "$DRY" = "1" ] && echo ' (dry mode)')"
if [ ${#FAILED[@]} -gt 0 ]; then
  echo "device_check: FAILED: ${FAILED[*]}" >&2
  exit 1
fi
