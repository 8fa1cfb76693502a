"""benchmarks/device_check.sh in dry mode: end to end on the CPU, one line per check, every GPU check skipped."""

from __future__ import annotations

import os
import subprocess
import sys

from dare.testing import repo_root


def test_device_check_dry_mode_runs_every_check_and_skips_each_with_its_reason():
    env = dict(os.environ, DRY_RUN="1", PYTHON=sys.executable, OMP_NUM_THREADS="1")
    done = subprocess.run(["bash", str(repo_root() / "benchmarks" / "device_check.sh")], env=env, capture_output=True,
                          text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    lines = done.stdout.splitlines()
    checks = {"bf16-logits llada", "bf16-logits dream", "bf16-logits sdar", "bf16-logits llada2", "fastdllm llada",
              "fastdllm dream", "varlen llada", "ddp", "fsdp2"}
    found = {line.split(":")[0]: line for line in lines if line.split(":")[0] in checks}
    assert set(found) == checks, lines
    for name, line in found.items():
        assert line.startswith(f"{name}: skipped: "), line
        reason = line[len(f"{name}: skipped: "):]
        assert reason.startswith(("no CUDA device", "dry run")), line
    # the checks' code ran on the CPU and reported its measurement
    assert "(ran on the CPU: dual + threshold 0.9 " in found["fastdllm dream"]
    assert "argmax agreement" in found["bf16-logits llada2"]
    assert "|difference| 0.00e+00" in found["varlen llada"]  # both paths are the per-segment loop on the CPU
    assert lines[-1].startswith("device_check: done in") and lines[-1].endswith("(dry mode)")
