"""LightningRL's rollout step: accuracy + tokens-per-forward rewards and parallelism-aware dynamic sampling
(arXiv 2603.13319 §3; SJTU-DENG-Lab/LightningRL ``reward/rl_reward.py``, ``train/train_policy_no_value.py``).

:class:`LightningRLTrainer` is the :class:`~dare.rl.trainer.GRPOTrainer` with one public hook,
:meth:`~dare.rl.hooks.RLStepHooks.after_passes`, which runs after the passes are drawn and before the rollout
and reference policies score them. For each completion it takes the correctness (reward at least
``correct_threshold``) and the tokens per forward from the recorded trajectory
(:func:`tokens_per_forward`), then

1. shapes the rewards within each group (:func:`shaped_rewards`);
2. drops the groups the dynamic sampling rejects (:func:`kept_groups`): their
   passes' weights become 0, so they are neither scored nor counted by any normaliser;
3. replaces the advantages by the batch-level z-score of the kept rewards over every process
   (:func:`batch_advantages`);
4. records per-row loss weights in ``Rollout.row_values`` for the objective's pass loss: ``policy_weight``
   (``1 / N`` kept rows) and ``nll_weight`` (``1 / T_c`` on kept correct rows, ``T_c`` their scored tokens).
"""

from __future__ import annotations

from dataclasses import replace

import torch

from dare.rl.batch_totals import whole_batch_sums, whole_batch_values
from dare.rl.rollout import content_lengths
from dare.rl.trainer import GRPOTrainer

__all__ = ["LightningRLTrainer", "shaped_rewards", "kept_groups", "batch_advantages", "tokens_per_forward"]


def _population_z(x: torch.Tensor) -> torch.Tensor:
    """Row-wise ``(x - mean) / std`` with the population std, 0 where the std is 0. ``x``: ``[groups, G]``."""
    x = x.double()
    mean = x.mean(dim=1, keepdim=True)
    std = ((x - mean) ** 2).mean(dim=1, keepdim=True).sqrt()
    return torch.where(std > 0, (x - mean) / torch.where(std > 0, std, torch.ones_like(std)), torch.zeros_like(x))


def shaped_rewards(correct: torch.Tensor, tpf: torch.Tensor, group_size: int, tpf_norm: str = "z_score",
                   acc_norm: bool = True, tpf_coefficient: float = 1.0) -> torch.Tensor:
    """LightningRL's reward ``r = acc part + speed part``, each normalised within its group (module docstring).

    :param correct: ``[N]`` bool; :param tpf: ``[N]`` float tokens per forward; ``N`` = groups x ``group_size``
        (completion ``j`` of group ``g`` is row ``g G + j``).
    :returns: ``[N]`` float32. Source: SJTU-DENG-Lab/LightningRL ``reward/rl_reward.py:142-183``.
    :raises ValueError: ``N`` not a multiple of ``group_size``, or an unknown ``tpf_norm``.
    """
    if correct.numel() % group_size:
        raise ValueError(f"{correct.numel()} rows are not whole groups of {group_size}")
    c = correct.double().view(-1, group_size)
    t = tpf.double().view(-1, group_size)
    if tpf_norm == "z_score":
        speed = _population_z(t)
    elif tpf_norm == "minmax":
        lo, hi = t.min(dim=1, keepdim=True).values, t.max(dim=1, keepdim=True).values
        span = hi - lo
        speed = torch.where(span > 0, (t - lo) / torch.where(span > 0, span, torch.ones_like(span)), torch.full_like(t, 0.5))
    elif tpf_norm == "none":
        speed = tpf_coefficient * t
    else:
        raise ValueError(f"unknown tpf_norm {tpf_norm!r}; use z_score, minmax or none")
    base = _population_z(c) if acc_norm else 2.0 * c - 1.0
    return (base + speed).flatten().float()


def kept_groups(correct: torch.Tensor, tpf: torch.Tensor, group_size: int, drop_all_wrong: bool = True,
                tpf_range_threshold: float = 0.01) -> torch.Tensor:
    """``[N]`` bool: rows of the groups the dynamic sampling keeps (at least one correct completion when
    ``drop_all_wrong``, and a tpf range ``max - min >= tpf_range_threshold``).

    Source: SJTU-DENG-Lab/LightningRL ``reward/rl_reward.py:186-197``.
    """
    c = correct.view(-1, group_size)
    t = tpf.double().view(-1, group_size)
    keep = (t.max(dim=1).values - t.min(dim=1).values) >= tpf_range_threshold
    if drop_all_wrong:
        keep &= c.any(dim=1)
    return keep.repeat_interleave(group_size)


def batch_advantages(rewards: torch.Tensor, keep: torch.Tensor, eps: float = 1e-8) -> torch.Tensor:
    """``[N]`` float32: ``(r - mean) / max(std, eps)`` over the kept rows (unbiased std), 0 on dropped rows.

    Source: SJTU-DENG-Lab/LightningRL ``train/train_policy_no_value.py:99-113`` (``adv_norm_mode: batch``).
    """
    out = torch.zeros_like(rewards, dtype=torch.float32)
    r = rewards[keep].double()
    if r.numel() == 0:
        return out
    std = max(float(r.std()) if r.numel() > 1 else float("nan"), eps)
    std = eps if std != std else std  # one kept row: the unbiased std is undefined
    out[keep] = ((r - r.mean()) / std).float()
    return out


def tokens_per_forward(unmask_step: torch.Tensor, completions: torch.Tensor, stop_ids: tuple[int, ...]) -> torch.Tensor:
    """``[N]`` float32 ``tpf = |y| / F``: the completion's tokens through the first stop id over ``F``, the distinct
    denoising steps that committed them (the release's ``response_length / num_forwards``, rl_reward.py:117-124).

    :param unmask_step: ``[N, G]`` int64 (-1 = never committed); :param completions: ``[N, G]`` int64.
    """
    lengths = content_lengths(completions, stop_ids)
    pos = torch.arange(completions.shape[1], device=completions.device)[None, :]
    inside = (pos < lengths[:, None]) & (unmask_step >= 0)
    out = torch.zeros(completions.shape[0], dtype=torch.float32)
    for b in range(completions.shape[0]):
        steps = unmask_step[b][inside[b]].unique().numel()
        out[b] = float(lengths[b]) / steps if steps else 0.0
    return out


class LightningRLTrainer(GRPOTrainer):
    """GRPO trainer with LightningRL's reward shaping and dynamic sampling (module docstring)."""

    def after_passes(self, rollout) -> dict[str, float]:
        p = self.params
        batch = rollout.batch
        device = batch.input_ids.device
        correct = rollout.rewards.to(device) >= p.correct_threshold
        if batch.unmask_step is None:
            tpf = torch.zeros(batch.num_rows)
        else:
            tpf = tokens_per_forward(batch.unmask_step, batch.input_ids[:, batch.prompt_length:], self.tokens.stop_ids)
        shaped = shaped_rewards(correct.cpu(), tpf, p.group_size, p.tpf_norm, p.acc_norm, p.tpf_coefficient)
        keep = kept_groups(correct.cpu(), tpf, p.group_size, p.drop_all_wrong, p.tpf_range_threshold)
        every = whole_batch_values({"reward": shaped, "keep": keep.float()})
        all_adv = batch_advantages(every["reward"], every["keep"] > 0)
        start = self._first_row_index(batch.num_rows)
        advantages = all_adv[start:start + batch.num_rows].to(device)
        w = keep.to(device=device, dtype=torch.float32)
        rollout.passes = [[replace(x, weight=x.weight * w[None, :, None]) for x in ps]
                          for ps in rollout.passes]
        scored = rollout.passes[0][0].scored.sum(-1).float() if rollout.passes and rollout.passes[0] else w * 0
        good = (keep.to(device) & correct).float()
        (kept_rows, correct_tokens), _ = whole_batch_sums(float(w.sum()), float((scored * good).sum()))
        rollout.advantages = advantages
        rollout.row_values = {"policy_weight": w / max(kept_rows, 1.0), "nll_weight": good / max(correct_tokens, 1.0)}
        return {"lightningrl/tpf": float(tpf.mean()) if tpf.numel() else 0.0,
                "lightningrl/kept_fraction": float(every["keep"].mean()) if every["keep"].numel() else 0.0,
                "lightningrl/shaped_reward": float(every["reward"].mean()) if every["reward"].numel() else 0.0}

    def _first_row_index(self, num_rows: int) -> int:
        """Index of this process's first row in the whole batch (rank order, as :func:`whole_batch_values` gathers)."""
        counts = whole_batch_values({"n": torch.tensor([float(num_rows)])})["n"]
        rank = self.accelerator.process_index
        return int(counts[:rank].sum()) if counts.numel() > 1 else 0
