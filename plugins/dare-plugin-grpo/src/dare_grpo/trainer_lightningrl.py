"""LightningRL's rollout step: accuracy + tokens-per-forward rewards and parallelism-aware dynamic sampling
(arXiv 2603.13319 §3; SJTU-DENG-Lab/LightningRL ``reward/rl_reward.py``, ``train/train_policy_no_value.py``).

:class:`LightningRLTrainer` is the :class:`~dare.rl.trainer.GRPOTrainer` with one hook,
:meth:`~dare.rl.trainer.GRPOTrainer._after_passes`, which runs after the passes are drawn and before the rollout
and reference policies score them. For each completion it takes the correctness (reward at least
``correct_threshold``) and the tokens per forward from the recorded trajectory
(:func:`~dare_grpo.objectives.lightningrl.tokens_per_forward`), then

1. shapes the rewards within each group (:func:`~dare_grpo.objectives.lightningrl.shaped_rewards`);
2. drops the groups the dynamic sampling rejects (:func:`~dare_grpo.objectives.lightningrl.kept_groups`): their
   passes' weights become 0, so they are neither scored nor counted by any normaliser;
3. replaces the advantages by the batch-level z-score of the kept rewards over every process
   (:func:`~dare_grpo.objectives.lightningrl.batch_advantages`);
4. records per-row loss weights in ``Rollout.row_values`` for the objective's pass loss: ``policy_weight``
   (``1 / N`` kept rows) and ``nll_weight`` (``1 / T_c`` on kept correct rows, ``T_c`` their scored tokens).
"""

from __future__ import annotations

import torch

from dare.diffusion.estimators import Pass
from dare.rl.batch_totals import whole_batch_sums, whole_batch_values
from dare.rl.trainer import GRPOTrainer
from dare_grpo.objectives.lightningrl import batch_advantages, kept_groups, shaped_rewards, tokens_per_forward

__all__ = ["LightningRLTrainer"]


class LightningRLTrainer(GRPOTrainer):
    """GRPO trainer with LightningRL's reward shaping and dynamic sampling (module docstring)."""

    def _after_passes(self, rollout) -> dict[str, float]:
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
        rollout.passes = [[Pass(mask=x.mask, weight=x.weight * w[None, :, None], key=x.key) for x in ps]
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
