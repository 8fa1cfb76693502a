"""The d-TreeRPO trainer: tree rollout, leaf rewards, local advantages, edge-level PPO (arXiv 2512.09675).

One rollout batch (docs/algorithms.md §3.9):

1. :func:`~dare_grpo.objectives.dtreerpo.rollout.grow_tree` per prompt (no group expansion: ``group_size`` is unused),
   with the rollout sampler's ``partial_denoise`` and the rollout generator;
2. leaves: leftover masks become EOS (as every DARE rollout), rewards with the spec's rewards;
   :func:`~dare_grpo.objectives.dtreerpo.rollout.propagate_values`,
   :func:`~dare_grpo.objectives.dtreerpo.rollout.local_advantages`;
3. edges: every (parent, child) pair with its child tokens, active mask and local advantage; parents are
   the distinct internal states (roots included). Old (``num_iterations > 1``) and reference (``beta > 0``)
   log-probs are taken once.

The update (each of the ``num_iterations`` PPO epochs) runs one forward per chunk of ``micro_batch_size``
parents, gathers every child's token log-probs from the parent's logits, and backpropagates
:meth:`~dare_grpo.objectives.dtreerpo.DTreeRPO.edge_loss`. Logged besides the base metrics:
``dtreerpo/mean_root_value``, ``dtreerpo/num_edges``, ``sd_loss``.

On N processes each process grows its prompts' trees with per-node generators (keyed by the step and
:func:`~dare_grpo.objectives.dtreerpo.rollout.node_indices`, when the sampler draws per row), the edge count and the
self-distillation pair count that normalise the loss are the whole batch's, each process's loss is multiplied
by N (DDP averages the gradients), and the logged statistics are the whole batch's: N processes train and log
what one does (``tests/test_distributed.py``).

The edge scores and the update are public functions, :func:`edge_scores` and :func:`tree_update`, which
:class:`DTreeRPOTrainer`'s hooks (:class:`dare.rl.hooks.RLStepHooks` ``generate_rollout`` and ``update``) and the
parity test (``tests/parity/test_dtreerpo.py``) call alike.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import torch

from dare.diffusion.likelihood import token_entropy
from dare.randomness import RowGenerators
from dare.rl import step
from dare.sampling import completion_mask as family_completion_mask
from dare.sampling.text import encode_prompts
from dare_grpo.objectives.dtreerpo.loss import EdgeLossInput, sd_pair_count
from dare.rl.batch_totals import whole_batch_metrics, whole_batch_sums, whole_batch_values
from dare.rl.rollout import Rollout, score_completions
from dare_grpo.objectives.dtreerpo.rollout import (
    Tree, branch_points, grow_tree, local_advantages, node_indices, propagate_values, transition_mask,
)
from dare.rl.trainer import GRPOTrainer

__all__ = ["TreeRollout", "DTreeRPOTrainer", "tree_edges", "edge_scores", "score_edges", "tree_update"]


@dataclass
class TreeRollout(Rollout):
    """A :class:`~dare.rl.rollout.Rollout` over the leaves plus the tree's training edges.

    * ``parent_ids``: ``[Np, S]`` int64 parent states; ``parent_attention``: ``[Np, S]``;
    * ``edge_parent``: ``[Ne]`` int64 row of ``parent_ids``; ``edge_tokens``: ``[Ne, G]`` child completions;
    * ``active``: ``[Ne, G]`` bool; ``edge_advantages``: ``[Ne]`` float32 local advantages;
    * ``edge_old`` / ``edge_ref``: ``[Ne, G]`` float32 or None; ``sd_pairs``: self-distillation pairs.
    """

    parent_ids: torch.Tensor | None = None
    parent_attention: torch.Tensor | None = None
    edge_parent: torch.Tensor | None = None
    edge_tokens: torch.Tensor | None = None
    active: torch.Tensor | None = None
    edge_advantages: torch.Tensor | None = None
    edge_old: torch.Tensor | None = None
    edge_ref: torch.Tensor | None = None
    sd_pairs: int = 0


def tree_edges(tree: Tree, values: list[torch.Tensor], mask_id: int, stop_ids: tuple[int, ...]):
    """``(parent_ids, parent_attention, edge_parent, edge_tokens, active, edge_advantages)`` of every edge.

    Parents of level ``l + 1`` are the rows of level ``l`` (offset by the rows of the levels before).
    """
    P = tree.prompt_length
    parents, attns, edge_parent, tokens, active, adv = [], [], [], [], [], []
    offset = 0
    for level, fan in enumerate(tree.fans):
        parent, child = tree.levels[level], tree.levels[level + 1]
        parents.append(parent)
        attn = tree.attention(level)
        attns.append(torch.cat([attn.long(), torch.ones_like(parent[:, P:])], 1))
        index = torch.arange(child.shape[0], device=child.device) // fan
        edge_parent.append(offset + index)
        tokens.append(child[:, P:])
        active.append(transition_mask(parent[index, P:], child[:, P:], mask_id, stop_ids))
        adv.append(local_advantages(values[level + 1], fan).to(child.device))
        offset += parent.shape[0]
    cat = torch.cat
    return cat(parents), cat(attns), cat(edge_parent), cat(tokens), cat(active), cat(adv)


def edge_scores(fn: step.LogitsFn, rollout: TreeRollout, parents: slice, temperature: float = 1.0,
                with_entropy: bool = False) -> tuple[torch.Tensor, torch.Tensor, float]:
    """Log-probs ``[n, G]`` float32 of the edges whose parent is in ``parents`` (0 off the active positions), their
    edge indices ``[n]`` int64, and the summed predictive entropy of the scored positions (0 unless ``with_entropy``).

    One forward of each parent state (``fn(parent, parent, attention)``, attention None when every position is
    attended); each child's tokens are scored from its parent's logits (divided by ``temperature``).
    """
    ids, attn = rollout.parent_ids[parents], rollout.parent_attention[parents]
    P = rollout.batch.prompt_length
    am = None if bool(attn.all()) else attn
    logits = fn(ids, ids, am)[:, P:]
    if temperature != 1.0:
        logits = logits / temperature
    start = parents.start or 0
    edges = torch.nonzero((rollout.edge_parent >= start) & (rollout.edge_parent < start + ids.shape[0])).flatten()
    local = rollout.edge_parent[edges] - start
    logp = torch.log_softmax(logits.float(), dim=-1)
    G = logp.shape[1]
    pos = torch.arange(G, device=logp.device)
    token = logp[local[:, None], pos[None, :], rollout.edge_tokens[edges]]
    active = rollout.active[edges]
    token = torch.where(active, token, torch.zeros_like(token))
    entropy = 0.0
    if with_entropy:
        ent = token_entropy(logits.detach())[local]
        entropy = float((ent * active).sum())
    return token, edges, entropy


@torch.no_grad()
def score_edges(fn: step.LogitsFn, rollout: TreeRollout, temperature: float = 1.0,
                micro_batch_size: int | None = None) -> torch.Tensor:
    """``[Ne, G]`` float32 log-probs of every edge without gradient (the old and reference scores), in chunks of
    ``micro_batch_size`` parents."""
    out = torch.zeros(rollout.edge_tokens.shape, dtype=torch.float32, device=rollout.edge_tokens.device)
    for r in step.row_chunks(rollout.parent_ids.shape[0], micro_batch_size):
        token, edges, _ = edge_scores(fn, rollout, r, temperature)
        out[edges] = token
    return out


def tree_update(settings: step.StepSettings, fn: step.LogitsFn, rollout: TreeRollout, progress: float,
                backprop: step.Backprop | None = None) -> tuple[float, dict[str, float]]:
    """d-TreeRPO's loss (:meth:`~dare_grpo.objectives.dtreerpo.DTreeRPO.edge_loss`) over every edge of ``rollout``,
    one forward/backward per chunk of ``micro_batch_size`` parents.

    :param progress: training progress in ``[0, 1]`` (``global_step / max_steps``), which schedules the
        self-distillation weight.
    :returns: ``(loss of the whole batch, metrics)``; gradients are accumulated into the parameters behind ``fn``.
    """
    backprop = backprop or step.Backprop()
    T = settings.temperature
    (num_edges, sd_pairs, active), world = whole_batch_sums(rollout.edge_parent.numel(), rollout.sd_pairs,
                                                            float(rollout.active.sum()))
    total, metrics, forwards, entropy = 0.0, {}, 0, 0.0
    chunks = step.row_chunks(rollout.parent_ids.shape[0], settings.params.micro_batch_size)
    pads = backprop.pads(len(chunks))
    for r in chunks:
        with backprop.context():
            token, edges, ent = edge_scores(fn, rollout, r, T, with_entropy=True)
        old = rollout.edge_old[edges] if rollout.edge_old is not None else token.detach()
        ref = rollout.edge_ref[edges] if rollout.edge_ref is not None else None
        terms = settings.objective.edge_loss(
            EdgeLossInput(current=token, old=old, ref=ref, tokens=rollout.edge_tokens[edges],
                          active=rollout.active[edges], advantages=rollout.edge_advantages[edges],
                          group=rollout.edge_parent[edges], num_edges=int(num_edges), sd_pairs=int(sd_pairs),
                          progress=progress),
        )
        backprop.backward(terms.loss * world)
        total += float(terms.loss.detach()) * world
        step.accumulate_metrics(metrics, terms)
        forwards += r.stop - r.start
        entropy += ent
    backprop.pad(pads, lambda: edge_scores(fn, rollout, slice(0, 1), T)[0].sum())
    metrics, entropy, _ = whole_batch_metrics(metrics, entropy, 0.0)
    metrics["nfe/update"] = float(forwards)
    metrics["entropy"] = entropy / max(active, 1.0)
    return total, metrics


class DTreeRPOTrainer(GRPOTrainer):
    """GRPO trainer with d-TreeRPO's rollout and update (module docstring)."""

    # ------------------------------------------------------------------ rollout
    def _leaf_batch(self, tree: Tree):
        from dare.diffusion.estimators import ScoringBatch

        tokens, P = self.tokens, tree.prompt_length
        leaves = tree.leaves
        comp = leaves[:, P:]
        comp = torch.where(comp == tokens.mask_id, torch.full_like(comp, tokens.eos_id), comp)
        cmask = family_completion_mask(comp, tokens.stop_ids, self.family.pad_in_response)
        comp = torch.where(cmask, comp, torch.full_like(comp, tokens.pad_id))
        attn = tree.attention(len(tree.fans))
        return ScoringBatch(torch.cat([leaves[:, :P], comp], 1), torch.cat([attn.long(), cmask.long()], 1), cmask, P,
                            tokens.mask_id)

    def generate_rollout(self, model, inputs) -> TreeRollout:
        """Grow the trees, score the leaves, build the edges, score old/reference (module docstring)."""
        a, obj = self.params, self.objective
        device = next(model.parameters()).device
        prompt_ids, attn = encode_prompts(self.processing_class, inputs["prompt"], self.tokens.pad_id, device)
        fans = obj.fans()
        points = branch_points(int(self.sampler.params.steps), obj.params.contraction)
        generator = self.rollout_generator
        if self.row_generators:  # node j of a level of prompt i's tree: its own generator (module docstring)
            seed, step, index = self.args.seed, int(self.state.global_step), [int(i) for i in inputs["index"]]
            generator = lambda level: RowGenerators.keyed(seed, "rollout", step, node_indices(index, fans, level),  # noqa: E731
                                                          device=self.args.device)
        was_training = model.training
        t0 = time.perf_counter()
        model.eval()
        try:
            tree = grow_tree(self.sampler, self.accelerator.unwrap_model(model), self.family, self.tokens, prompt_ids, attn, fans, points,
                             generator=generator, batch_size=a.rollout_batch_size)
        finally:
            model.train(was_training)
        t1 = time.perf_counter()
        leaves = self._leaf_batch(tree)
        per_prompt = leaves.num_rows // prompt_ids.shape[0]
        texts, rewards, parts, score_stats = score_completions(leaves, self.processing_class, self.tokens, self.reward,
                                                               inputs["row"], per_prompt)
        values = propagate_values(rewards.to(device), fans)
        parent_ids, parent_attn, edge_parent, tokens, active, adv = tree_edges(tree, values, self.tokens.mask_id,
                                                                               self.tokens.stop_ids)
        if a.prompt_padding == "attend":  # the parents' prompt padding attended to (dare.rl.conventions)
            parent_attn[:, :leaves.prompt_length] = 1
        rollout = TreeRollout(batch=leaves, texts=texts, rewards=rewards, reward_parts=parts, advantages=adv,
                              parent_ids=parent_ids, parent_attention=parent_attn, edge_parent=edge_parent,
                              edge_tokens=tokens, active=active, edge_advantages=adv,
                              sd_pairs=sd_pair_count(edge_parent, adv, active))
        t2 = time.perf_counter()
        model.eval()
        try:
            if a.num_iterations > 1:
                rollout.edge_old = score_edges(self.logits_fn(model), rollout, self.likelihood_temperature, a.micro_batch_size)
            if self.reference is not None:
                with self.reference.model() as ref_model:
                    rollout.edge_ref = score_edges(self.logits_fn(ref_model), rollout, self.likelihood_temperature,
                                                     a.micro_batch_size)
        finally:
            model.train(was_training)
        every = whole_batch_values({"reward": rewards, "root": values[0], "advantage": adv,  # leaves, roots, edges
                                    **{f"part/{k}": v for k, v in parts.items()}})
        groups = every["reward"].view(-1, per_prompt)
        r, e = every["reward"], every["advantage"]
        rollout.stats = {
            "reward": float(r.mean()),
            "reward_std": float(r.std()) if r.numel() > 1 else 0.0,
            "advantage_mean": float(e.mean()),
            "advantage_std": float(e.std()) if e.numel() > 1 else 0.0,
            "advantage_abs": float(e.abs().mean()),
            "frac_zero_std_groups": float((groups.max(1).values == groups.min(1).values).float().mean()),
            **{f"reward/{k}": float(every[f"part/{k}"].float().mean()) for k in parts},
            "completion_length": score_stats["completion_length"],
            "reward_errors": score_stats["reward_errors"],
            "nfe/rollout": float(tree.nfe),
            "time/rollout": t1 - t0,
            "time/score": t2 - t1,
            "time/old_ref": time.perf_counter() - t2,
            "dtreerpo/mean_root_value": float(every["root"].mean()),
            "dtreerpo/num_edges": whole_batch_sums(edge_parent.numel())[0][0],
        }
        return rollout

    # ------------------------------------------------------------------ update
    def update(self, model, rollout: TreeRollout, iteration: int) -> tuple[float, dict[str, float]]:
        """:func:`tree_update` over the model's logits at this step's training progress."""
        progress = self.state.global_step / max(self.state.max_steps, 1)
        return tree_update(self.step_settings, self.logits_fn(model), rollout, progress, self.backprop)
