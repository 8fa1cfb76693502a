"""The benchmark runner: rows -> prompts -> sampler -> reward -> metrics."""

from __future__ import annotations

import contextlib
import math
from dataclasses import asdict, dataclass, field
from typing import Any

from dare.scaling import distributed, sharding
from dare.data import Prompter, load_rows
from dare.errors import DareError
from dare.eval.paths import benchmark_path, data_root
from dare.sampling.bundle import DecodingBundle
from dare.sampling.text import generate_texts

__all__ = ["BenchmarkResult", "benchmark_path", "evaluate_benchmark", "data_root"]


@dataclass
class BenchmarkResult:
    """Metrics of one benchmark run. ``samples`` keeps per-row records (prompt, completion, reward)."""

    name: str
    n: int
    accuracy: float
    mean_reward: float
    nfe: float  # forward passes per prompt (its batch's NFE, averaged over prompts; independent of batch size)
    generated_tokens: int
    seconds: float  # sampler wall time, every batch (the slowest process's)
    tokens_per_second: float  # decoded positions / sampler seconds, without the warm-up batch (see timing())
    reward_errors: int = 0
    samples: list[dict[str, Any]] = field(default_factory=list)
    #: Settings and metrics beyond the generation ones: a likelihood benchmark records ``style``,
    #: ``acc_norm``, the estimator, ``mc_samples``, scheme and seed here (:mod:`dare.eval.multiple_choice`).
    extra: dict[str, Any] = field(default_factory=dict)
    batches: int = 0  # sampler calls (per process)
    warmup_seconds: float = 0.0  # the first batch's seconds, left out of tokens_per_second (0: not left out)

    def timing(self) -> str:
        """How ``tokens_per_second`` was measured, in words (for reports)."""
        if self.warmup_seconds > 0:
            timed = "batch 2 of 2" if self.batches == 2 else f"batches 2-{self.batches} of {self.batches}"
            return f"{timed}; the first batch ({self.warmup_seconds:.1f} s, start-up included) is left out"
        if self.batches == 1:
            return "a single batch, start-up included (use more rows than eval.batch_size to leave it out)"
        return "every batch"

    def metrics(self) -> dict[str, float]:
        out = {"accuracy": self.accuracy, "mean_reward": self.mean_reward, "samples": self.n, "nfe": self.nfe,
               "tokens_per_second": self.tokens_per_second}
        if "acc_norm" in self.extra:
            out["acc_norm"] = self.extra["acc_norm"]
        return out

    def to_dict(self, with_samples: bool = True) -> dict[str, Any]:
        d = asdict(self)
        if not with_samples:
            d.pop("samples")
        return d


def evaluate_benchmark(
    decoding: DecodingBundle,
    evaluator,
    bspec,
    reward,
    batch_size: int = 32,
    seed: int = 0,
    limit: int | None = None,
    progress: str | None = None,
) -> BenchmarkResult:
    """Generate an answer for every row and score it.

    :param decoding: the model, its family, special ids and tokenizer, and the sampler
        (:class:`~dare.sampling.DecodingBundle`; the sampler may be None for an evaluator that scores itself).
    :param evaluator: the benchmark component; :param bspec: its ``BenchmarkSpec``;
    :param reward: a ``WeightedReward`` (or anything with ``score_one``).
    :param limit: overrides ``bspec.limit`` (e.g. for in-training evaluation).
    :param progress: description of a progress display advanced per batch (:mod:`dare.progress`; None: none).
    :returns: accuracy (fraction of rewards counted correct by the evaluator), mean reward, NFE,
        generated tokens and tokens/s. An evaluator with a ``score_benchmark`` method scores itself with it
        (``score_benchmark(decoding, bspec, reward, batch_size=, seed=, limit=)``; a
        :class:`~dare.eval.multiple_choice.MultipleChoiceEvaluator`: choices by MC-ELBO, no sampler).
        tokens/s leaves out each process's first batch when it decoded more
        than one (start-up: first-call allocations and kernel selection), so it measures the steady state.
    :raises DataError: unreadable data or a prompt template referring to a missing field.

    With several processes (:mod:`dare.scaling.distributed`) each decodes and scores a contiguous slice of the rows;
    the per-row records are gathered, so every process returns the same result. A sharded model (FSDP2, ZeRO-3)
    runs the same forwards on every process: the slices are padded to the same length (the padding rows are
    decoded, then dropped from the scores, NFE and token counts) and the decoders run in lock-step
    (:func:`dare.scaling.sharding.lockstep`). Row ``i``'s sampling noise
    is keyed by ``(seed, i)``, so the completions do not depend on the process count or ``batch_size``.
    """
    own = getattr(evaluator, "score_benchmark", None)
    if own is not None:  # an evaluator that scores itself (likelihood benchmarks: dare.eval.multiple_choice)
        return own(decoding, bspec, reward, batch_size=batch_size, seed=seed, limit=limit)
    path = benchmark_path(evaluator, bspec)
    rows = load_rows(str(path), limit=limit or bspec.limit, offset=bspec.offset)
    model = decoding.model
    prompter = Prompter(decoding.tokenizer, bspec.prompt_template, None, bspec.chat_template, bspec.system_prompt,
                        loc=f"eval.benchmarks[{bspec.name}]")
    if sharding.is_sharded(model):  # every process decodes as many rows (padding dropped below): lock-step forwards
        mine, real = sharding.padded_shard(len(rows))
    else:
        mine = list(distributed.shard(len(rows)))
        real = len(mine)
    prompts = [prompter.prompt(rows[i]) for i in mine]
    world = distributed.world_size()
    title = progress if world == 1 or progress is None else f"{progress} (process 0's {real} of {len(rows)})"
    from dare.progress import task

    with task(title or "", len(mine), "rows") if progress else contextlib.nullcontext() as bar:
        out = generate_texts(decoding, prompts, batch_size=batch_size, seed=seed, indices=list(mine),
                             on_batch=bar.advance if bar is not None else None)
    warm = 1 if len(out.batch_seconds) > 1 else 0  # leave out the first batch (start-up) when there are more
    timed = (sum(out.batch_tokens[warm:]), sum(out.batch_seconds[warm:]), out.batch_seconds[0] if warm else 0.0)
    errors_before = sum(getattr(reward, "errors", {}).values())
    samples = []
    kept = [min(max(real - b * batch_size, 0), o.completions.shape[0]) for b, o in enumerate(out.outputs)]  # real rows
    for i, prompt, text in zip(mine[:real], prompts[:real], out.texts[:real], strict=True):
        r, _ = reward.score_one(text, rows[i])
        samples.append({"index": i, "prompt": prompt, "completion": text, "reward": r,
                        "correct": evaluator.is_correct(r)})
    nfe = sum(o.nfe * k for o, k in zip(out.outputs, kept))  # forward passes x (real) prompts of each batch
    generated = sum(o.completions[:k].numel() for o, k in zip(out.outputs, kept))
    errors = sum(getattr(reward, "errors", {}).values()) - errors_before
    parts = distributed.gather((samples, nfe, generated, out.seconds, errors, timed, len(out.batch_seconds)))
    samples = [s for part in parts for s in part[0]]
    bad = [s for s in samples if not math.isfinite(float(s["reward"]))]
    if bad:  # every process holds every sample here: all raise together
        shown = ", ".join(f"row {s['index']}: {s['reward']}" for s in bad[:5])
        names = ", ".join(r.name for r, _ in getattr(reward, "rewards", [])) or getattr(reward, "name", "?")
        raise DareError(f"benchmark {evaluator.name!r}: its reward ({names}) "
                        f"returned a non-finite score for {len(bad)} of {len(samples)} rows ({shown}), so no accuracy "
                        "or mean reward can be reported; fix the reward so that it returns a finite number for every "
                        "completion (e.g. 0 for one it cannot score)")
    n = len(rows)
    tokens_total, seconds = sum(p[2] for p in parts), max(p[3] for p in parts)
    timed_tokens, timed_seconds = sum(p[5][0] for p in parts), max(p[5][1] for p in parts)
    return BenchmarkResult(
        name=evaluator.name,
        n=n,
        accuracy=sum(s["correct"] for s in samples) / n,
        mean_reward=sum(s["reward"] for s in samples) / n,
        nfe=round(sum(p[1] for p in parts) / max(n, 1), 2),  # per prompt
        generated_tokens=tokens_total,
        seconds=seconds,
        tokens_per_second=timed_tokens / timed_seconds if timed_seconds > 0 else 0.0,
        reward_errors=sum(p[4] for p in parts),
        samples=samples,
        batches=max(p[6] for p in parts),
        warmup_seconds=max(p[5][2] for p in parts),
    )
