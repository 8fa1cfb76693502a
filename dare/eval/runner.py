"""The benchmark runner: rows -> prompts -> sampler -> reward -> metrics."""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from dare import distributed
from dare.data import Prompter, load_rows
from dare.errors import DataError
from dare.io import resolve_path
from dare.sampling.text import generate_texts

__all__ = ["BenchmarkResult", "benchmark_path", "evaluate_benchmark", "data_root"]


def data_root() -> Path | None:
    """``$DARE_DATA_DIR`` if set."""
    root = os.environ.get("DARE_DATA_DIR")
    return Path(root) if root else None


def benchmark_path(evaluator, bspec) -> Path:
    """The data file of a benchmark: ``bspec.path``, else the evaluator's default.

    :raises DataError: no path given and no default (or ``$DARE_DATA_DIR`` unset for it).
    """
    if bspec.path:
        return resolve_path(bspec.path)
    default = evaluator.default_path
    if default is None:
        raise DataError(f"benchmark {evaluator.name!r} has no default data file; set its path")
    if default.startswith("dare://"):
        return resolve_path(default)
    root = data_root()
    if root is None:
        raise DataError(
            f"benchmark {evaluator.name!r}: set its path, or set DARE_DATA_DIR to a folder holding {default}"
        )
    return root / default


@dataclass
class BenchmarkResult:
    """Metrics of one benchmark run. ``samples`` keeps per-row records (prompt, completion, reward)."""

    name: str
    n: int
    accuracy: float
    mean_reward: float
    nfe: float  # forward passes per prompt (its batch's NFE, averaged over prompts; independent of batch size)
    generated_tokens: int
    seconds: float
    tokens_per_second: float
    reward_errors: int = 0
    samples: list[dict[str, Any]] = field(default_factory=list)

    def metrics(self) -> dict[str, float]:
        return {"accuracy": self.accuracy, "mean_reward": self.mean_reward, "samples": self.n, "nfe": self.nfe,
                "tokens_per_second": self.tokens_per_second}

    def to_dict(self, with_samples: bool = True) -> dict[str, Any]:
        d = asdict(self)
        if not with_samples:
            d.pop("samples")
        return d


def evaluate_benchmark(
    model,
    family,
    tokens,
    tokenizer,
    sampler,
    evaluator,
    bspec,
    reward,
    batch_size: int = 32,
    seed: int = 0,
    limit: int | None = None,
) -> BenchmarkResult:
    """Generate an answer for every row and score it.

    :param evaluator: the benchmark component; :param bspec: its ``BenchmarkSpec``;
    :param reward: a ``WeightedReward`` (or anything with ``score_one``).
    :param limit: overrides ``bspec.limit`` (e.g. for in-training evaluation).
    :returns: accuracy (fraction of rewards counted correct by the evaluator), mean reward, NFE,
        generated tokens and tokens/s.
    :raises DataError: unreadable data or a prompt template referring to a missing field.

    With several processes (:mod:`dare.distributed`) each decodes and scores a contiguous slice of the rows;
    the per-row records are gathered, so every process returns the same result. Row ``i``'s sampling noise
    is keyed by ``(seed, i)``, so the completions do not depend on the process count or ``batch_size``.
    """
    path = benchmark_path(evaluator, bspec)
    rows = load_rows(str(path), limit=limit or bspec.limit, offset=bspec.offset)
    prompter = Prompter(tokenizer, bspec.prompt_template, None, bspec.chat_template, bspec.system_prompt)
    mine = distributed.shard(len(rows))
    prompts = [prompter.prompt(rows[i]) for i in mine]
    out = generate_texts(model, family, tokens, tokenizer, sampler, prompts, batch_size=batch_size, seed=seed,
                         indices=list(mine))
    errors_before = sum(getattr(reward, "errors", {}).values())
    samples = []
    for i, prompt, text in zip(mine, prompts, out.texts, strict=True):
        r, _ = reward.score_one(text, rows[i])
        samples.append({"index": i, "prompt": prompt, "completion": text, "reward": r, "correct": evaluator.is_correct(r)})
    nfe = sum(o.nfe * o.completions.shape[0] for o in out.outputs)  # forward passes x prompts of each batch
    errors = sum(getattr(reward, "errors", {}).values()) - errors_before
    parts = distributed.gather((samples, nfe, out.generated_tokens, out.seconds, errors))
    samples = [s for part in parts for s in part[0]]
    n = len(rows)
    tokens_total, seconds = sum(p[2] for p in parts), max(p[3] for p in parts)
    return BenchmarkResult(
        name=evaluator.name,
        n=n,
        accuracy=sum(s["correct"] for s in samples) / n,
        mean_reward=sum(s["reward"] for s in samples) / n,
        nfe=round(sum(p[1] for p in parts) / max(n, 1), 2),  # per prompt
        generated_tokens=tokens_total,
        seconds=seconds,
        tokens_per_second=tokens_total / seconds if seconds > 0 else 0.0,
        reward_errors=sum(p[4] for p in parts),
        samples=samples,
    )
