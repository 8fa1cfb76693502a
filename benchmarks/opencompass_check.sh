#!/usr/bin/env bash
# OpenCompass check (docs/evaluation.md, "OpenCompass"): install DARE + dare-plugin-opencompass + opencompass 0.5.4
# in a FRESH virtual environment exactly as the docs say, `pip check` it, then evaluate one small trained DARE
# model on real 4x4 Sudoku test puzzles twice -- with OpenCompass (examples/opencompass/eval_sudoku.py) and with
# `dare eval` (examples/opencompass/sudoku.yaml) -- and compare accuracy, mean reward and every completion.
#
#   benchmarks/opencompass_check.sh                 # fresh venv, train a model, run both, compare (exit 1 if they differ)
#   OC_SKIP_INSTALL=1 benchmarks/opencompass_check.sh   # reuse the venv
#   OC_RUN_TESTS=1 benchmarks/opencompass_check.sh      # also run plugins/dare-plugin-opencompass/tests there
#
# Environment: OC_VENV (default .venv-opencompass, git-ignored), OC_WORK (default runs/opencompass-check),
# DARE_OC_MODEL (a model/run directory to evaluate; default: train the quickstart SFT recipe for TRAIN_STEPS
# steps in the new venv), TRAIN_STEPS (default 150), DARE_OC_LIMIT (puzzles, default 50), TORCH (torch==2.13.0).
# Prints the wall time of each phase.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${OC_VENV:-.venv-opencompass}
WORK=${OC_WORK:-runs/opencompass-check}
TORCH=${TORCH:-torch==2.13.0}
STEPS=${TRAIN_STEPS:-150}
export DARE_OC_LIMIT=${DARE_OC_LIMIT:-50}
export HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TOKENIZERS_PARALLELISM=false
now() { date +%s.%N; }
took() { python3 -c "print(f'{$(now) - $1:.1f} s')"; }

mkdir -p "$WORK"
if [ -z "${OC_SKIP_INSTALL:-}" ]; then
  t=$(now)
  rm -rf "$VENV"
  python3 -m venv "$VENV"
  "$VENV/bin/pip" install --quiet --upgrade pip > "$WORK/install.log" 2>&1
  # the install command of docs/evaluation.md (the core, the first-party plugins, the OpenCompass plugin, OpenCompass)
  "$VENV/bin/pip" install "$TORCH" . plugins/dare-plugin-llada plugins/dare-plugin-dream \
    plugins/dare-plugin-sdar plugins/dare-plugin-llada2 plugins/dare-plugin-sft plugins/dare-plugin-dpo \
    plugins/dare-plugin-grpo plugins/dare-plugin-opencompass opencompass==0.5.4 >> "$WORK/install.log" 2>&1 \
    || { tail -30 "$WORK/install.log"; exit 1; }
  echo "== install: $(took "$t") (log: $WORK/install.log)"
  echo "== pip check: $("$VENV/bin/pip" check)"
  "$VENV/bin/pip" list 2>/dev/null | grep -iE '^(torch|transformers|datasets|numpy|pyarrow|pandas|opencompass|dare-[a-z0-9-]*|trl) ' || true
fi
if [ -n "${OC_RUN_TESTS:-}" ]; then  # the plugin's unit tests (they skip where OpenCompass is not installed)
  t=$(now)
  "$VENV/bin/pip" install --quiet pytest >> "$WORK/install.log" 2>&1
  "$VENV/bin/python" -m pytest -q -p no:cacheprovider plugins/dare-plugin-opencompass/tests
  echo "== plugin tests: $(took "$t")"
fi

MODEL=${DARE_OC_MODEL:-}
if [ -z "$MODEL" ]; then
  t=$(now)
  rm -rf "$WORK/sft"
  "$VENV/bin/dare" train examples/quickstart-sft-short.yaml --set "train.max_steps=$STEPS" --set "train.save_steps=$STEPS" \
    --set "output.dir=$WORK/sft" > "$WORK/train.log" 2>&1 || { tail -20 "$WORK/train.log"; exit 1; }
  MODEL="$WORK/sft"
  echo "== train ($STEPS SFT steps, quickstart model): $(took "$t")"
fi

t=$(now)
rm -rf "$WORK/dare-eval"
"$VENV/bin/dare" eval examples/opencompass/sudoku.yaml --set "model.path=$MODEL" --set "eval.benchmarks.0.limit=$DARE_OC_LIMIT" \
  --set "output.dir=$WORK/dare-eval" > "$WORK/dare-eval.log" 2>&1 || { tail -20 "$WORK/dare-eval.log"; exit 1; }
echo "== dare eval: $(took "$t")"

t=$(now)
rm -rf "$WORK/opencompass"
DARE_OC_MODEL="$MODEL" "$VENV/bin/opencompass" examples/opencompass/eval_sudoku.py -w "$WORK/opencompass" \
  > "$WORK/opencompass.log" 2>&1 || { tail -40 "$WORK/opencompass.log"; exit 1; }
echo "== opencompass run: $(took "$t")"

"$VENV/bin/python" benchmarks/opencompass_compare.py "$WORK/dare-eval" "$WORK/opencompass"
