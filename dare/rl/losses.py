"""What an RL objective's loss receives and returns, and the clipped token loss most objectives share.

* :class:`PassLossInput`: one pass of the likelihood estimator over a chunk of rows, scored by the
  current policy (differentiable), with the rollout (``old``) and reference policies' scores, advantages
  and the whole batch's normalisers;
* :class:`SequenceLossInput`: the pass-mean sequence scores of the whole batch;
* :class:`LossTerms`: a loss and metric contributions (summed over passes and chunks by the trainer);
* :class:`RLParams`: the parameters every RL objective accepts (its ``Params`` derive from it);
* :func:`clipped_token_loss`: the GRPO token-level clipped surrogate with dual clip and a KL term.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Literal

import torch
from pydantic import Field, field_validator

from dare.components.official import OfficialParams
from dare.diffusion.estimators import PassScore
from dare.rl.aggregation import Aggregation, aggregate
from dare.rl.conventions import BlockAlignment, PromptPadding, ResponsePadding, ResponseTokens
from dare.rl.kl import kl_estimate
from dare.rl.policy_loss import clipped_policy_loss, ratio_from_log

__all__ = ["RLParams", "PassLossInput", "SequenceLossInput", "LossTerms", "clipped_token_loss",
           "vanishes_at_zero_advantage"]


class RLParams(OfficialParams):
    """Parameters every RL objective accepts (DARE recipe defaults, docs/algorithms.md §4.1). The trainer and
    the losses read them from the objective; the trainer config holds training-loop settings only.
    ``preset: official`` switches to the objective's released settings (:mod:`dare.components.official`)."""

    group_size: int = Field(8, ge=2, description="Completions per prompt (G).")
    num_iterations: int = Field(1, ge=1, description="Inner iterations mu per rollout batch (one optimizer step each).")
    advantage: Literal["grpo", "drgrpo", "rloo"] = Field(
        "grpo", description="Group advantage: grpo = (r - mean) / (std + advantage_std_eps), drgrpo = r - mean (d1, "
        "SPG), rloo = leave-one-out r - mean of the others (DiffuCoder).")
    advantage_std_eps: float = Field(1e-6, ge=0.0, description="Added to the group std by the grpo advantage "
                                     "(1e-6 as verl; 1e-4 in the TRL-based official trainers; 0 in TraceRL's).")
    advantage_std: Literal["sample", "population"] = Field(
        "sample", description="The grpo advantage's group std: sample = unbiased (DARE/verl); population = divided by "
        "G (the TraceRL release).")
    overlong_margin: int | None = Field(
        None, ge=0, description="A response of at least gen_length - n tokens (through its first EOS or end-of-turn) "
        "scores reward 0 (incorrect) before the advantages (the TraceRL release: 5); null = rewards as scored. "
        "dare.rl.advantages.overlong_as_incorrect.")
    group_filter: tuple[float, float] | None = Field(
        None, description="(low, high): train only the groups whose mean reward (the accuracy for a 0/1 reward) is in "
        "the range (the TraceRL release: 0.2 to 0.8); the others get advantage 0 and are not scored, so token and "
        "(row, pass) normalisers do not count them. null = every group. dare.rl.advantages.groups_in_range.")
    beta: float = Field(0.0, ge=0.0, description="KL coefficient against the reference policy (0 = no reference).")
    kl_estimator: Literal["k1", "k2", "k3"] = Field("k3", description="KL estimator (dare.rl.kl).")
    clip_eps_low: float = Field(0.2, ge=0.0, lt=1.0, description="Lower clip epsilon.")
    clip_eps_high: float = Field(0.2, ge=0.0, description="Upper clip epsilon.")
    dual_clip_c: float | None = Field(3.0, gt=1.0, description="Dual-clip bound for negative advantages (null = off).")
    loss_aggregation: Aggregation = Field("token-mean", description="token-mean or sequence-mean.")
    response_tokens: ResponseTokens = Field(
        "all",
        description="Completion tokens the loss scores and counts: all = every response token, EOS padding included "
        "(DARE); through_first_eos = up to and including the first EOS/end-of-turn (the official d1, DiffuCoder and "
        "SPG trainers; later positions stay masked but weigh 0). dare.rl.conventions.",
    )
    prompt_padding: PromptPadding = Field(
        "exclude",
        description="Prompt left-padding in likelihood forwards: exclude = attention 0, never masked (DARE); "
        "attend = attended to and masked like a prompt token (the official d1 trainer). dare.rl.conventions.",
    )
    block_alignment: BlockAlignment = Field(
        "first_token",
        description="Block families' training forward: first_token = blocks from each row's first real token (DARE, as "
        "decoding); prompt_end = a block starts at the padded prompt's end (the TraceRL SDAR release). "
        "dare.rl.conventions.",
    )
    response_padding: ResponsePadding = Field(
        "exclude",
        description="Positions after a truncating family's response (SDAR, LLaDA2): exclude = attention 0 (DARE); "
        "masked = attended to as the mask token in every corrupted copy, never scored (the TraceRL SDAR release). "
        "dare.rl.conventions.",
    )
    likelihood_temperature: float | Literal["sampler"] = Field(
        1.0,
        description="Temperature of every likelihood (logits / T). 1 = the model's distribution (DARE); "
        "'sampler' = the rollout sampler's temperature (the decoding-matched likelihood).",
    )
    rollout_sampler: dict[str, Any] = Field(
        default_factory=dict,
        description="Overrides of sampler.params for training rollouts, e.g. {temperature: 1.0}; evaluation keeps "
                    "sampler.params.",
    )
    sync_ref_model: bool = Field(
        False,
        description="Mix the policy into the reference policy every ref_model_sync_steps optimizer steps, "
        "ref = alpha * policy + (1 - alpha) * ref (TRL's GRPOConfig sync_ref_model, TR-DPO; only with a reference: "
        "beta > 0). With a LoRA policy the "
        "reference is the base with the adapters disabled and nothing is mixed, as in TRL (no reference copy under "
        "PEFT).",
    )
    ref_model_sync_steps: int = Field(512, ge=1, description="Optimizer steps between two reference syncs (TRL's "
                                      "ref_model_sync_steps; used with sync_ref_model).")
    ref_model_mixup_alpha: float = Field(0.6, ge=0.0, le=1.0, description="Weight alpha of the policy in a reference "
                                         "sync (TRL's ref_model_mixup_alpha; 1 = copy the policy).")
    rollout_batch_size: int | None = Field(None, gt=0, description="Completions per sampler call (null = all at once).")
    micro_batch_size: int | None = Field(None, gt=0, description="Completions per likelihood forward/backward "
                                                                 "(null = all, or as many as activation_budget_mib "
                                                                 "allows).")
    activation_budget_mib: float | Literal["auto"] | None = Field(
        None,
        description="With micro_batch_size null: the update's forward/backward runs as many completions at once as "
        "keep their estimated activations (layers and logits, dare/ops/memory_estimate.py) within this many MiB, at "
        "least one. auto = the policy's training state on this process (weights, gradients and AdamW moments), so "
        "the update's activations at most double the step's memory; null = every completion at once. "
        "micro_batch_size, when set, takes precedence.",
    )
    skip_zero_advantage: bool = Field(
        True,
        description="Skip the update's forward/backward of rows that add exactly zero gradient: advantage 0 (a group "
        "of equal rewards) when the objective's loss vanishes there and beta = 0, or dL/dscore = 0 for pass-mean "
        "objectives. Same loss and gradient (normalisers count every row) up to float summation order, less "
        "compute; entropy then averages the rows run. With dropout (e.g. LoRA dropout) fewer forwards draw "
        "other dropout masks, so runs agree in distribution only. false = run every row.",
    )

    def uses_reference_policy(self) -> bool:
        """Whether the loss's KL term needs a frozen reference policy (the trainer keeps one, and
        ``dare profile --estimate`` counts it): ``beta > 0`` here. An objective whose KL is taken against another
        policy (TraceRL's ``kl_target: rollout``, the rollout policy) overrides it in its ``Params``, so the core
        never reads an objective's own settings by name."""
        return self.beta > 0

    def trains_value_model(self) -> bool:
        """Whether training keeps a value model besides the policy (a full model copy with its optimizer, which
        ``dare profile --estimate`` counts): False here; TraceRL's ``value_model`` overrides it."""
        return False


    @field_validator("activation_budget_mib")
    @classmethod
    def _positive_budget(cls, value):
        if isinstance(value, (int, float)) and not value > 0:
            raise ValueError(f"activation_budget_mib must be a positive number of MiB, auto or null, got {value}: "
                             "use e.g. 4096, or auto (the training state's size)")
        return value

    @field_validator("group_filter")
    @classmethod
    def _ordered_range(cls, value):
        if value is not None and value[0] > value[1]:
            raise ValueError(f"group_filter is (low, high) with low <= high, got {list(value)}: swap the two values")
        return value


@dataclass
class PassLossInput:
    """What :meth:`OnlineRLObjective.pass_loss` receives for one pass and one chunk of rows.

    * ``current``: the pass scored by the policy being trained (differentiable);
    * ``old``: ``[n, G]`` float32 token scores under the rollout policy (no gradient; equal to
      ``current.token.detach()`` when ``num_iterations == 1``; only rows the update runs are passed: rows
      skipped by ``skip_zero_advantage`` have no old scores, docs/algorithms.md §9.6b);
    * ``ref``: ``[n, G]`` float32 under the reference policy, or None when ``beta == 0``;
    * ``advantages``: ``[n]`` float32, or ``[n, G]`` token advantages (TraceRL's value model,
      :mod:`dare.rl.value`; :func:`clipped_token_loss` takes either); ``response_lengths``: ``[n]`` int64 (``|y|``);
    * ``pass_index``/``num_passes``: this pass's position in this process's list, and how many passes the
      estimate has over the *whole* batch (trajectory replay: distinct denoising steps over every process's
      rows, so it can exceed this process's own pass count);
    * ``num_tokens``: tokens this pass scores in the *whole* rollout batch; ``num_sequences``: rows
      of the whole batch; ``total_response_tokens``: ``sum |y|`` over the whole batch (global
      normalisers, so chunk losses add up to the batch loss); ``num_row_passes``: ``(row, pass)`` pairs of the
      whole batch in which the pass scores a token of the row (TraceRL's transition count);
    * ``row_values``: ``{name: [n] tensor}``, the chunk's rows of ``Rollout.row_values`` (values a trainer subclass
      records per row for its objective, e.g. LightningRL's correctness); empty by default.
    """

    current: PassScore
    old: torch.Tensor
    ref: torch.Tensor | None
    advantages: torch.Tensor
    response_lengths: torch.Tensor
    pass_index: int
    num_passes: int
    num_tokens: float
    num_sequences: int
    total_response_tokens: float
    num_row_passes: float = 0.0
    row_values: dict[str, torch.Tensor] = field(default_factory=dict)


@dataclass
class SequenceLossInput:
    """What :meth:`OnlineRLObjective.sequence_loss` receives (whole rollout batch, ``[N]`` each).

    ``current`` is the mean over passes of the sequence scores (a leaf requiring grad), ``old`` and
    ``ref`` the same under the rollout and reference policies (``ref`` None when ``beta == 0``).
    """

    current: torch.Tensor
    old: torch.Tensor
    ref: torch.Tensor | None
    advantages: torch.Tensor
    response_lengths: torch.Tensor


@dataclass
class LossTerms:
    """A loss (scalar, to minimise) and metric contributions that the trainer *sums* over passes and
    row chunks (so each metric should be normalised like the loss)."""

    loss: torch.Tensor
    metrics: dict[str, torch.Tensor] = field(default_factory=dict)


def clipped_token_loss(
    inp: PassLossInput,
    params: RLParams,
    mode: Aggregation | None = None,
    num_tokens: float | None = None,
    num_sequences: float | None = None,
    agg: Callable[[torch.Tensor], torch.Tensor] | None = None,
    log_ratio_clamp: float | None = None,
) -> LossTerms:
    """Token-level clipped GRPO loss of one pass plus ``beta`` x KL, aggregated over the scored tokens.

    ``rho_k = exp(l_k - l_k^old)`` per scored token, the clipped surrogate with dual clip
    (:func:`dare.rl.clipped_policy_loss`), ``+ beta * KL(l, l_ref)`` per token with
    ``params.kl_estimator``; both aggregated with ``mode`` (default ``params.loss_aggregation``) using the
    whole batch's normalisers (default: ``inp.num_tokens``/``inp.num_sequences``).
    Metrics: ``clip_fraction`` (+ ``_low``/``_high``), ``dual_clip_fraction``, ``approx_kl``
    (k3 of current vs old), ``kl`` (vs reference), with the same aggregation.

    :param agg: ``[B, L] per-token values -> scalar``, replacing that aggregation (e.g. JustGRPO's
        position chunks, which each see part of the completion but the whole batch's normalisers).
    :param log_ratio_clamp: ``c``: the log-ratio is clamped to ``[-c, c]`` before the ``exp`` (gradient 0 outside;
        the TraceRL release, Gen-Verse/dLLM-RL ``train/rl_sdar.py:732``, c = 10); None = no clamp.
    """
    if agg is None:
        mode = mode or params.loss_aggregation
        num_tokens = inp.num_tokens if num_tokens is None else num_tokens
        num_sequences = inp.num_sequences if num_sequences is None else num_sequences
        weights = inp.current.scored.float()

        def agg(values: torch.Tensor) -> torch.Tensor:
            return aggregate(values, weights, mode, num_tokens=num_tokens, num_sequences=num_sequences)

    cur = inp.current.token
    log_ratio = cur - inp.old
    if log_ratio_clamp is not None:
        log_ratio = log_ratio.clamp(-log_ratio_clamp, log_ratio_clamp)
    clipped = clipped_policy_loss(
        ratio_from_log(log_ratio), inp.advantages if inp.advantages.dim() == 2 else inp.advantages[:, None],
        params.clip_eps_low, params.clip_eps_high, params.dual_clip_c
    )
    loss = agg(clipped.loss)
    metrics = {
        "clip_fraction_high": agg(clipped.clipped_high.float()),
        "clip_fraction_low": agg(clipped.clipped_low.float()),
        "dual_clip_fraction": agg(clipped.dual_clipped.float()),
        "approx_kl": agg(kl_estimate(cur.detach(), inp.old, "k3")),
    }
    metrics["clip_fraction"] = metrics["clip_fraction_high"] + metrics["clip_fraction_low"]
    if inp.ref is not None and params.beta > 0:
        kl = agg(kl_estimate(cur, inp.ref, params.kl_estimator))
        loss = loss + params.beta * kl
        metrics["kl"] = kl.detach()
    return LossTerms(loss=loss, metrics=metrics)


def vanishes_at_zero_advantage(objective) -> bool:
    """Whether ``objective``'s own class declares ``zero_advantage_rows_vanish = True`` (with ``beta = 0`` a row
    of advantage exactly 0 has a loss identically 0, so the trainer may skip it: docs/algorithms.md §9.6b).

    Read from the class itself, not inherited: a subclass that adds a term without the advantage (an entropy
    bonus, ...) must not be skipped on its parent's word, so it re-declares the flag when its loss still
    vanishes. ``objective``: an :class:`~dare.rl.objective.OnlineRLObjective` instance.
    """
    return bool(type(objective).__dict__.get("zero_advantage_rows_vanish", False))
