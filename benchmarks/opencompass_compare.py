"""Compare an OpenCompass run of a DARE model with ``dare eval`` of the same model, sampler and prompts.

    python benchmarks/opencompass_compare.py DARE_EVAL_RUN_DIR OPENCOMPASS_WORK_DIR

Reads ``DARE_EVAL_RUN_DIR/eval/eval.json`` (the ``dare eval`` results, with per-row prompt and completion) and the
newest ``OPENCOMPASS_WORK_DIR/<timestamp>/{predictions,results}/<model>/<dataset>.json``. Prints both accuracies
and mean rewards and the number of rows whose prompt or completion differ; exits 1 when anything differs
(used by benchmarks/opencompass_check.sh).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path


def _one(pattern_dir: Path, what: str) -> Path:
    files = sorted(pattern_dir.glob(f"*/{what}/*/*.json"))
    files = [f for f in files if not f.name.startswith("tmp_")]
    if len(files) != 1:
        sys.exit(f"expected one {what} file under {pattern_dir}/*/{what}/, found {len(files)}: {files}")
    return files[0]


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        sys.exit(__doc__)
    dare_dir, oc_dir = Path(argv[0]), Path(argv[1])
    stamps = sorted(p for p in oc_dir.iterdir() if p.is_dir())
    if not stamps:
        sys.exit(f"no OpenCompass run under {oc_dir}")
    run = stamps[-1]
    dare = json.loads((dare_dir / "eval" / "eval.json").read_text())["results"][0]
    preds = json.loads(_one(run.parent, "predictions").read_text())
    result = json.loads(_one(run.parent, "results").read_text())
    rows = [preds[str(i)] for i in range(len(preds))]
    samples = dare["samples"]
    prompt_diff = sum(r["origin_prompt"] != s["prompt"] for r, s in zip(rows, samples))
    completion_diff = [i for i, (r, s) in enumerate(zip(rows, samples)) if r["prediction"] != s["completion"]]
    print(f"rows: dare eval {len(samples)}, OpenCompass {len(rows)}")
    print(f"accuracy:    dare eval {100 * dare['accuracy']:.2f}   OpenCompass {result['accuracy']:.2f}")
    print(f"mean reward: dare eval {100 * dare['mean_reward']:.2f}   OpenCompass {result['mean_reward']:.2f}")
    print(f"rows with a different prompt: {prompt_diff}; with a different completion: {len(completion_diff)}"
          + (f" (first: {completion_diff[:5]})" if completion_diff else ""))
    same = (len(rows) == len(samples) and not prompt_diff and not completion_diff
            and abs(100 * dare["accuracy"] - result["accuracy"]) < 1e-9
            and abs(100 * dare["mean_reward"] - result["mean_reward"]) < 1e-9)
    print("IDENTICAL" if same else "DIFFERENT")
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
