"""``dare profile SPEC``: parameters, peak memory and training throughput of a spec, measured on a few steps.

The spec's model and objective are built exactly as ``dare train`` builds them and trained for ``steps``
optimizer steps in a temporary run directory (deleted afterwards; no evaluation, no checkpoint before the
last step). Reported:

* ``parameters`` / ``trainable_parameters``: ``numel`` of every parameter / of those with
  ``requires_grad`` (LoRA: the adapters only), counted before the trainer wraps the model;
* ``peak_memory_bytes``: on CUDA, ``torch.cuda.max_memory_allocated`` of this process's device over the
  training steps (tensors only, not the caching allocator's reserve); on CPU, the peak resident set size of
  the whole process (``resource.getrusage(RUSAGE_SELF).ru_maxrss``), which includes the Python runtime,
  imports, the dataset and model loading: an upper bound of what training needs, not the training alone;
* ``seconds_per_step``: mean wall time of an optimizer step (all its gradient-accumulation micro-batches,
  the optimizer update and, for online RL, the rollout), **excluding the first step** (warm-up: allocator,
  kernel selection, lazy initialisation); on CUDA the clock is read after ``torch.cuda.synchronize``;
* ``tokens_per_step`` / ``tokens_per_second``: tokens the model processed in forward passes *with
  gradients* (the training forwards; sampling and no-grad scoring are not counted) per step, and their
  rate over the timed steps. Block-diffusion families run ``[x_t ; x_0]``, so a sequence counts twice.

With several processes (``torchrun``/``accelerate launch``) every process trains its share; tokens are
summed over processes, step time and peak memory are the largest over processes.
"""

from __future__ import annotations

import resource
import shutil
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
from transformers import TrainerCallback

from dare.scaling import distributed
from dare.errors import DareError
from dare.modeling.lora import is_peft_model

__all__ = ["ProfileResult", "profile_spec", "count_parameters"]


@dataclass
class ProfileResult:
    """What :func:`profile_spec` measured (module docstring for each field)."""

    spec: str
    steps: int
    processes: int
    device: str
    dtype: str
    bf16: bool
    gradient_checkpointing: bool
    parameters: int
    trainable_parameters: int
    peak_memory_bytes: int
    peak_memory_kind: str  # "cuda max allocated" or "process peak RSS"
    seconds_per_step: float
    tokens_per_step: float
    tokens_per_second: float
    first_step_seconds: float

    def to_dict(self) -> dict:
        return asdict(self)

    def rows(self) -> list[tuple[str, str]]:
        """``(measure, value)`` pairs for a table (``dare profile`` without ``--json``)."""
        return [
            ("processes / device", f"{self.processes} / {self.device}"),
            ("weights dtype / bf16 autocast / grad. checkpointing",
             f"{self.dtype} / {self.bf16} / {self.gradient_checkpointing}"),
            ("parameters (total)", f"{self.parameters:,}"),
            ("parameters (trainable)", f"{self.trainable_parameters:,}"),
            (f"peak memory ({self.peak_memory_kind})", f"{self.peak_memory_bytes / 2**30:.3f} GiB"),
            ("seconds / step", f"{self.seconds_per_step:.4f}"),
            ("first step (s)", f"{self.first_step_seconds:.4f}"),
            ("tokens / step (forwards with gradients)", f"{self.tokens_per_step:,.0f}"),
            ("tokens / s", f"{self.tokens_per_second:,.1f}"),
        ]


def count_parameters(model: torch.nn.Module) -> tuple[int, int]:
    """``(total, trainable)`` parameter counts (shared tensors counted once)."""
    seen: set[int] = set()
    total = trainable = 0
    for p in model.parameters():
        if id(p) in seen:
            continue
        seen.add(id(p))
        total += p.numel()
        trainable += p.numel() if p.requires_grad else 0
    return total, trainable


class _StepTimer(TrainerCallback):
    """Wall time of each optimizer step, and the tokens of the forwards with gradients during it."""

    def __init__(self, cuda: bool):
        self.cuda = cuda
        self.seconds: list[float] = []
        self.tokens: list[int] = []
        self._start = 0.0
        self._tokens = 0

    def count(self, module, args, kwargs) -> None:
        ids = kwargs.get("input_ids", args[0] if args else None)
        if module.training and torch.is_grad_enabled() and isinstance(ids, torch.Tensor):
            self._tokens += ids.numel()

    def _now(self) -> float:
        if self.cuda:
            torch.cuda.synchronize()
        return time.perf_counter()

    def on_step_begin(self, args, state, control, **kwargs):
        self._tokens = 0
        self._start = self._now()

    def on_step_end(self, args, state, control, **kwargs):
        self.seconds.append(self._now() - self._start)
        self.tokens.append(self._tokens)


def _peak_rss_bytes() -> int:
    return int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) * 1024  # Linux reports KiB


def profile_spec(path: str, steps: int = 5, overrides: list[str] | None = None,
                 unset: list[str] | None = None) -> ProfileResult:
    """Train ``path``'s spec for ``steps`` optimizer steps in a temporary directory and measure it.

    :param steps: optimizer steps (>= 2: the first is excluded from the timings).
    :param overrides: ``--set`` overrides (``key=value``), applied before the profiler's own
        (``output.dir``, ``train.max_steps``, no in-training evaluation or checkpoints).
    :param unset: ``--unset`` keys, removed after every override.
    :raises DareError: ``steps < 2``, a spec without ``algorithm``, or any spec problem.
    """
    from dare.run import Run

    if steps < 2:
        raise DareError(f"--steps {steps}: give at least 2 steps (the first step is warm-up and is not timed)")
    distributed.setup()
    tmp = tempfile.mkdtemp(prefix="dare-profile-") if distributed.is_main() else None
    tmp = distributed.gather(tmp)[0]
    try:
        forced = [f"output.dir={Path(tmp) / 'run'}", f"train.max_steps={steps}", f"train.save_steps={steps + 1}",
                  "train.logging_steps=1", "train.eval_steps=null", "train.keep_best=false", "train.resume=false"]
        run = Run.from_file(path, list(overrides or []) + forced, unset)
        if run.objective is None:
            raise DareError(f"{path} has no algorithm: section, so there is no training step to profile")
        run.prepare(train=True)
        device = distributed.device()
        cuda = device.type == "cuda"
        total, trainable = count_parameters(run.model)
        timer = _StepTimer(cuda)
        base = run.model.get_base_model() if is_peft_model(run.model) else run.model
        hook = base.register_forward_pre_hook(timer.count, with_kwargs=True)
        run.callbacks.append(timer)
        if cuda:
            torch.cuda.reset_peak_memory_stats(device)
        try:
            run.train()
        finally:
            hook.remove()
        peak = torch.cuda.max_memory_allocated(device) if cuda else _peak_rss_bytes()
        if len(timer.seconds) < steps:
            raise DareError(f"only {len(timer.seconds)} of {steps} steps ran (the training data ran out?); lower "
                            f"--steps")
        parts = distributed.gather((sum(timer.seconds[1:]), sum(timer.tokens[1:]), timer.seconds[0], peak))
        timed = steps - 1
        seconds = max(p[0] for p in parts)
        tokens = sum(p[1] for p in parts)
        spec = run.spec
        return ProfileResult(
            spec=str(path), steps=steps, processes=distributed.world_size(), device=str(device), dtype=spec.model.dtype,
            bf16=spec.train.bf16, gradient_checkpointing=spec.model.gradient_checkpointing, parameters=total,
            trainable_parameters=trainable, peak_memory_bytes=int(max(p[3] for p in parts)),
            peak_memory_kind="cuda max allocated" if cuda else "process peak RSS", seconds_per_step=seconds / timed,
            tokens_per_step=tokens / timed, tokens_per_second=tokens / seconds if seconds > 0 else float("nan"),
            first_step_seconds=max(p[2] for p in parts),
        )
    finally:
        distributed.barrier()
        if distributed.is_main():
            shutil.rmtree(tmp, ignore_errors=True)
