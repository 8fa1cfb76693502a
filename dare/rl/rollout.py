"""One rollout batch: sample ``G`` completions per prompt, decode them, score them, compute advantages.

Layout: completions of prompt ``i`` are rows ``[i G, (i + 1) G)`` (interleaved groups, as verl's
``repeat(interleave=True)``), which is what :func:`dare.rl.group_advantages` expects.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Callable

import torch

from dare.scaling import sharding
from dare.diffusion.estimators import Pass, ScoringBatch
from dare.randomness import RowGenerators
from dare.sampling import completion_mask as family_completion_mask
from dare.sampling.bundle import DecodingBundle
from dare.sampling.text import decode_completions, encode_prompts

__all__ = ["Rollout", "sample_completions", "score_completions", "content_lengths"]


@dataclass
class Rollout:
    """A scored rollout batch and everything the inner iterations reuse.

    * ``batch``: the completions as estimators see them (:class:`dare.diffusion.estimators.ScoringBatch`);
    * ``texts``: decoded completions; ``rewards``: ``[N]`` weighted reward; ``reward_parts``: per
      reward name, ``[N]`` unweighted values; ``advantages``: ``[N]``;
    * ``passes[i]``: the estimator passes of inner iteration ``i`` (drawn once, shared by the old,
      reference and current policies); ``old[i][p]``/``ref[i][p]``: ``[N, G]`` token scores of pass
      ``p`` under the rollout/reference policy (None when not needed);
    * ``stats``: rollout metrics (timings, NFE, lengths) logged once per rollout;
    * ``row_values``: ``{name: [N] tensor}`` per-row values a trainer subclass records for its objective's loss
      (LightningRL's correctness); each pass loss gets its chunk's rows (``PassLossInput.row_values``).
    """

    batch: ScoringBatch
    texts: list[str]
    rewards: torch.Tensor
    reward_parts: dict[str, torch.Tensor]
    advantages: torch.Tensor
    passes: list[list[Pass]] = field(default_factory=list)
    old: list[list[torch.Tensor]] | None = None
    ref: list[list[torch.Tensor]] | None = None
    stats: dict[str, float] = field(default_factory=dict)
    row_values: dict[str, torch.Tensor] = field(default_factory=dict)


@torch.no_grad()
def sample_completions(decoding: DecodingBundle, prompts: list[str], group_size: int,
                       generator: torch.Generator | None = None, batch_size: int | None = None,
                       on_batch: Callable[[int], None] | None = None) -> tuple[ScoringBatch, dict[str, float]]:
    """Generate ``group_size`` completions per prompt with ``decoding``'s sampler (model in eval mode). A sharded
    model (FSDP2, ZeRO-3) decodes in lock-step with the other processes (:func:`dare.scaling.sharding.lockstep`).

    Positions the sampler never committed (still the mask token) become EOS, as DARE's rollouts do;
    for families with ``pad_in_response = False`` the completion mask is then recomputed and
    positions outside it are set to the pad id with attention 0.

    :param decoding: the model (unwrapped), family, special ids, tokenizer and sampler
        (:class:`~dare.sampling.DecodingBundle`).
    :param on_batch: called with the number of completions of each finished sampler call (progress display).
    :returns: ``(ScoringBatch, stats)`` with stats ``nfe``, ``rollout_calls`` and ``edits`` (tokens the
        sampler rewrote after committing them, ``SamplerOutput.extras["edits"]``; 0 for pure unmasking).
    """
    model, family, tokens = decoding.model, decoding.family, decoding.tokens
    device = next(model.parameters()).device
    expanded = [p for p in prompts for _ in range(group_size)]
    ids, attn = encode_prompts(decoding.tokenizer, expanded, tokens.pad_id, device)
    step = batch_size or len(expanded)
    was_training = model.training
    model.eval()
    outs = []
    try:
        with sharding.lockstep(model):  # a sharded model: every process runs the same forwards
            for i in range(0, len(expanded), step):
                gen = generator.rows(slice(i, i + step)) if isinstance(generator, RowGenerators) else generator
                outs.append(decoding.generate(ids[i : i + step], attn[i : i + step], generator=gen))
                if on_batch is not None:
                    on_batch(outs[-1].sequences.shape[0])
    finally:
        model.train(was_training)
    P = outs[0].prompt_length
    seqs = torch.cat([o.sequences for o in outs])
    cmask = torch.cat([o.completion_mask for o in outs]).bool()
    unmask = torch.cat([o.unmask_step for o in outs])
    comp = seqs[:, P:]
    leftover = comp == tokens.mask_id if tokens.mask_id is not None else None  # uniform noise: no mask token
    if leftover is not None and bool(leftover.any()):
        comp = torch.where(leftover, torch.full_like(comp, tokens.eos_id), comp)
        cmask = family_completion_mask(comp, tokens.stop_ids, family.pad_in_response)
    comp = torch.where(cmask, comp, torch.full_like(comp, tokens.pad_id))
    batch = ScoringBatch(
        input_ids=torch.cat([seqs[:, :P], comp], dim=1),
        attention_mask=torch.cat([attn.to(torch.long), cmask.to(torch.long)], dim=1),
        completion_mask=cmask,
        prompt_length=P,
        mask_id=tokens.mask_id,
        unmask_step=unmask,
        block_anchor=P if getattr(family, "blocks_from_prompt_end", False) else None,
    )
    edits = sum(float(torch.as_tensor(o.extras["edits"]).sum()) for o in outs if "edits" in o.extras)
    return batch, {"nfe": float(sum(o.nfe for o in outs)), "rollout_calls": float(len(outs)), "edits": edits}


def content_lengths(completions: torch.Tensor, stop_ids: tuple[int, ...]) -> torch.Tensor:
    """``[N]`` int64 tokens up to and including the first stop id (``G`` when there is none): a completion's length
    whatever the family's padding convention (the ``completion_length`` metric, the overlong rule).

    :param completions: ``[N, G]`` int64; :param stop_ids: the ids that end a completion (EOS, end-of-turn)."""
    is_stop = torch.zeros_like(completions, dtype=torch.bool)
    for sid in stop_ids:
        is_stop |= completions == sid
    G = completions.shape[1]
    first = torch.where(is_stop.any(dim=1), is_stop.float().argmax(dim=1) + 1,
                        torch.full_like(is_stop[:, 0], G, dtype=torch.long))
    return first


def score_completions(batch: ScoringBatch, tokenizer, tokens, reward, rows: list[dict[str, Any]], group_size: int
                      ) -> tuple[list[str], torch.Tensor, dict[str, torch.Tensor], dict[str, float]]:
    """Decode completions and score them with a ``dare.rewards.WeightedReward``.

    A reward that raises scores 0 and is logged by ``WeightedReward``; ``reward_errors`` counts them.
    :param rows: one dataset row per *prompt*; each is repeated ``group_size`` times.
    :returns: ``(texts, rewards [N], parts {name: [N]}, stats)``.
    """
    t0 = time.perf_counter()
    completions = batch.input_ids[:, batch.prompt_length :]
    texts = decode_completions(tokenizer, completions, tokens)
    errors_before = sum(reward.errors.values())
    totals, parts = [], {}
    for i, text in enumerate(texts):
        total, part = reward.score_one(text, rows[i // group_size])
        totals.append(total)
        for name, value in part.items():
            parts.setdefault(name, []).append(value)
    stats = {
        "reward_errors": float(sum(reward.errors.values()) - errors_before),
        "completion_length": float(content_lengths(completions, tokens.stop_ids).float().mean()),
        "time/score": time.perf_counter() - t0,
    }
    return texts, torch.tensor(totals, dtype=torch.float32), {k: torch.tensor(v) for k, v in parts.items()}, stats
