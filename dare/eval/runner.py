"""The benchmark runner: rows -> prompts -> sampler -> reward -> metrics."""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch

from dare.errors import DataError

__all__ = ["BenchmarkResult", "benchmark_path", "evaluate_benchmark", "data_root"]


def data_root() -> Path | None:
    """``$DARE_DATA_DIR`` if set."""
    root = os.environ.get("DARE_DATA_DIR")
    return Path(root) if root else None


def benchmark_path(evaluator, bspec) -> Path:
    """The data file of a benchmark: ``bspec.path``, else the evaluator's default.

    :raises DataError: no path given and no default (or ``$DARE_DATA_DIR`` unset for it).
    """
    from dare.spec import resolve_path

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
    #: Settings and metrics beyond the generation ones: a likelihood benchmark records ``style``,
    #: ``acc_norm``, the estimator, ``mc_samples``, scheme and seed here (:mod:`dare.eval.multiple_choice`).
    extra: dict[str, Any] = field(default_factory=dict)

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
        generated tokens and tokens/s. A likelihood benchmark (``evaluator.style == "loglikelihood"``, e.g.
        a :class:`~dare.eval.multiple_choice.MultipleChoiceEvaluator`) is scored by MC-ELBO instead and
        ignores ``sampler`` (:func:`dare.eval.multiple_choice.evaluate_multiple_choice`).
    :raises DataError: unreadable data or a prompt template referring to a missing field.
    """
    if getattr(evaluator, "style", "generate") == "loglikelihood":
        from dare.eval.multiple_choice import evaluate_multiple_choice

        return evaluate_multiple_choice(model, family, tokens, tokenizer, evaluator, bspec, reward,
                                        batch_size=batch_size, seed=seed, limit=limit)
    from dare.data import Prompter, load_rows
    from dare.sampling.text import generate_texts

    path = benchmark_path(evaluator, bspec)
    rows = load_rows(str(path), limit=limit or bspec.limit, offset=bspec.offset)
    prompter = Prompter(tokenizer, bspec.prompt_template, None, bspec.chat_template, bspec.system_prompt)
    prompts = [prompter.prompt(r) for r in rows]
    gen = torch.Generator().manual_seed(seed)
    out = generate_texts(model, family, tokens, tokenizer, sampler, prompts, batch_size=batch_size, generator=gen)
    errors_before = sum(getattr(reward, "errors", {}).values())
    samples = []
    total = 0.0
    correct = 0
    for i, (row, prompt, text) in enumerate(zip(rows, prompts, out.texts, strict=True)):
        r, _ = reward.score_one(text, row)
        ok = evaluator.is_correct(r)
        total += r
        correct += int(ok)
        samples.append({"index": i, "prompt": prompt, "completion": text, "reward": r, "correct": ok})
    n = len(rows)
    return BenchmarkResult(
        name=evaluator.name,
        n=n,
        accuracy=correct / n,
        mean_reward=total / n,
        nfe=round(sum(o.nfe * o.completions.shape[0] for o in out.outputs) / max(n, 1), 2),  # per prompt
        generated_tokens=out.generated_tokens,
        seconds=out.seconds,
        tokens_per_second=out.generated_tokens / out.seconds if out.seconds > 0 else 0.0,
        reward_errors=sum(getattr(reward, "errors", {}).values()) - errors_before,
        samples=samples,
    )
