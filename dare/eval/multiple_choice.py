"""Multiple-choice benchmarks scored by the Monte-Carlo ELBO (likelihood evaluation in ``dare eval``).

A :class:`MultipleChoiceEvaluator` poses each row as a context (the benchmark's prompt, built like a
generation benchmark's: ``prompt_template``, ``chat_template``, ``system_prompt``) and a list of
choices. Every choice is scored by the MC-ELBO of ``target_delimiter + choice`` given the context
(:func:`dare.eval.likelihood.elbo_loglikelihood`; block-diffusion ELBO for block families), and the
row is answered by the highest score, as lm-evaluation-harness scores ``multiple_choice`` tasks
(``lm_eval/api/task.py``, ``process_results``):

* ``acc``: ``argmax_c ELBO_c == gold`` (the ``accuracy`` column of reports);
* ``acc_norm``: ``argmax_c ELBO_c / len(choice_c) == gold``, ``len`` in characters of the choice text
  without the delimiter (lm-eval's length normalisation);
* ``mean_reward``: the benchmark's reward of the chosen choice text (partial credit where the reward has
  it, e.g. Sudoku's fraction of empty cells filled correctly).

Choice ``c`` of row ``i`` (``i`` counted from the first evaluated row) draws its corruptions from
``request_seed(eval.seed, i, c)``, so scores do not depend on ``eval.batch_size`` and equal those of the
lm-eval ``dare`` model on the same rows (whose keys are ``(doc_id, choice)``).

The estimator, ``mc_samples``, scheme and seed are recorded in each result's ``extra`` (and so in
``report.json`` and ``report.md``). With several processes (:mod:`dare.scaling.distributed`) each scores a
contiguous slice of the rows and the per-row records are gathered, as for generation benchmarks.
"""

from __future__ import annotations

import time
from typing import Any, ClassVar, Literal

from pydantic import Field

from dare.components import Evaluator, Params
from dare.errors import DataError

__all__ = ["MultipleChoiceParams", "MultipleChoiceEvaluator", "evaluate_multiple_choice", "argmax"]


class MultipleChoiceParams(Params):
    """Parameters of a likelihood (multiple-choice) benchmark."""

    mc_samples: int = Field(128, ge=1, description="Monte-Carlo terms (forward passes) per choice; LLaDA's "
                            "likelihood evaluation uses 128 (arXiv 2502.09992 App. B.5).")
    mc_scheme: Literal["stratified", "uniform", "bernoulli"] = Field(
        "stratified", description="Mask counts: stratified over [1, L] (lower variance), independent uniform, or "
        "Bernoulli masks at a uniform ratio t.")
    target_delimiter: str = Field(" ", description="Text between the context and each choice (lm-eval's "
                                  "target_delimiter).")


class MultipleChoiceEvaluator(Evaluator):
    """A benchmark whose rows are answered by choosing among given texts, scored by MC-ELBO.

    Subclasses implement :meth:`choices`; ``reward`` scores the chosen text (``mean_reward``).
    """

    #: How ``dare eval`` runs this evaluator: scoring choices, not generating (no sampler needed).
    style: ClassVar[str] = "loglikelihood"
    Params = MultipleChoiceParams

    def choices(self, row: dict[str, Any], index: int) -> tuple[list[str], int]:
        """``(choice texts, index of the gold choice)`` of one row (``index``: its position in the file).

        :raises DataError: a malformed row.
        """
        raise NotImplementedError

    def score_benchmark(self, decoding, bspec, reward, batch_size: int = 32, seed: int = 0, limit: int | None = None):
        """What :func:`dare.eval.runner.evaluate_benchmark` runs for this benchmark: :func:`evaluate_multiple_choice`
        with ``decoding``'s model, family, special ids and tokenizer (a :class:`~dare.sampling.DecodingBundle`; its
        sampler is not used)."""
        return evaluate_multiple_choice(decoding.model, decoding.family, decoding.tokens, decoding.tokenizer, self,
                                        bspec, reward, batch_size=batch_size, seed=seed, limit=limit)


def argmax(values) -> int:
    """Index of the first maximum (``numpy.argmax`` semantics, as lm-eval uses)."""
    best = 0
    for i, v in enumerate(values):
        if v > values[best]:
            best = i
    return best


def evaluate_multiple_choice(
    model,
    family,
    tokens,
    tokenizer,
    evaluator: MultipleChoiceEvaluator,
    bspec,
    reward,
    batch_size: int = 32,
    seed: int = 0,
    limit: int | None = None,
):
    """Score every row's choices by MC-ELBO and answer with the best one (module docstring).

    :param evaluator: the benchmark (its ``params``: ``mc_samples``, ``mc_scheme``, ``target_delimiter``);
    :param bspec: its ``BenchmarkSpec`` (data path, offset/limit, prompt template); :param reward: a
        ``WeightedReward`` scoring the chosen text; :param batch_size: corrupted rows per forward pass.
    :returns: a :class:`~dare.eval.runner.BenchmarkResult` with ``accuracy`` = acc, ``extra`` holding
        ``acc_norm`` and the estimator settings, and per-row samples (context, choices, gold, ELBO and
        standard error of each choice, prediction).
    :raises DataError: unreadable data, a template referring to a missing field, or a malformed row.
    """
    from dare.scaling import distributed
    from dare.data import Prompter, load_rows
    from dare.eval.likelihood import elbo_loglikelihood, encode_pair, max_context_length
    from dare.eval.runner import BenchmarkResult, benchmark_path

    p = evaluator.params
    path = benchmark_path(evaluator, bspec)
    rows = load_rows(str(path), limit=limit or bspec.limit, offset=bspec.offset)
    prompter = Prompter(tokenizer, bspec.prompt_template, None, bspec.chat_template, bspec.system_prompt,
                        loc=f"eval.benchmarks[{bspec.name}]")
    max_len = max_context_length(model.config)
    mine = distributed.shard(len(rows))  # with several processes: a contiguous slice of the rows each
    contexts, choice_lists, golds, requests, keys = [], [], [], [], []
    for i in mine:
        context = prompter.prompt(rows[i])
        choices, gold = evaluator.choices(rows[i], bspec.offset + i)
        if not choices or not 0 <= gold < len(choices):
            raise DataError(f"{evaluator.name}: row {bspec.offset + i} has {len(choices)} choices and gold index "
                            f"{gold}")
        contexts.append(context)
        choice_lists.append(choices)
        golds.append(gold)
        for c, choice in enumerate(choices):
            requests.append(encode_pair(tokenizer, context, p.target_delimiter + choice, max_len))
            keys.append((i, c))
    t0 = time.perf_counter()
    scores = elbo_loglikelihood(model, family, tokens.mask_id, requests, keys, mc_samples=p.mc_samples,
                                scheme=p.mc_scheme, seed=seed, batch_size=batch_size)
    seconds = time.perf_counter() - t0
    errors_before = sum(getattr(reward, "errors", {}).values())
    samples = []
    k = 0
    for i, context, choices, gold in zip(mine, contexts, choice_lists, golds, strict=True):
        est = scores[k : k + len(choices)]
        k += len(choices)
        lls = [e.logprob for e in est]
        pred = argmax(lls)
        pred_norm = argmax([ll / max(len(c), 1) for ll, c in zip(lls, choices)])
        r, _ = reward.score_one(choices[pred], rows[i])
        samples.append({"index": i, "prompt": context, "choices": choices, "gold": gold, "elbo": lls,
                        "stderr": [e.stderr for e in est], "pred": pred, "pred_norm": pred_norm,
                        "completion": choices[pred], "reward": r, "correct": pred == gold})
    errors = sum(getattr(reward, "errors", {}).values()) - errors_before
    parts = distributed.gather((samples, seconds, errors))
    samples = [s for part in parts for s in part[0]]
    n = len(rows)
    forward = sum(len(s["choices"]) for s in samples) * p.mc_samples
    return BenchmarkResult(
        name=evaluator.name,
        n=n,
        accuracy=sum(s["correct"] for s in samples) / n if n else 0.0,
        mean_reward=sum(s["reward"] for s in samples) / n if n else 0.0,
        nfe=round(forward / max(n, 1), 2),  # forward passes per row: choices x mc_samples
        generated_tokens=0,
        seconds=max(part[1] for part in parts),
        tokens_per_second=0.0,
        reward_errors=sum(part[2] for part in parts),
        samples=samples,
        extra={
            "style": "loglikelihood",
            "acc_norm": sum(s["pred_norm"] == s["gold"] for s in samples) / n if n else 0.0,
            "estimator": "block-mc-elbo" if family.attention == "block" else "mc-elbo",
            "mc_samples": p.mc_samples,
            "mc_scheme": p.mc_scheme,
            "target_delimiter": p.target_delimiter,
            "seed": seed,
            "seeds": "request_seed(seed, row, choice)",
        },
    )
