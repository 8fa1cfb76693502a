"""d-TreeRPO's tree rollout: branch partly decoded states, propagate leaf rewards, local advantages.

Source: d-TreeRPO (arXiv 2512.09675 §3.1-3.2); DARE ``dtreerpo_llada_rollout.py`` (``generate_sequences``,
``_tree_generate_partial``) and ``dtreerpo_algos.compute_dtreerpo_rewards_and_segments``;
docs/algorithms.md §3.9.

* **Branch points** (:func:`branch_points`): with ``T`` total steps and contraction ``s``, the remaining
  step counts ``T, T - T/s, T - 2T/s, ..., 0`` (``{128, 64, 0}`` for ``T = 128, s = 2``). Level ``l`` of the
  tree runs the sampler's global steps ``[T - b_l, T - b_{l+1})``.
* **Growth** (:func:`grow_tree`): the root (prompt + all-mask completion) gets ``num_tree_samples``
  children, every later node ``tree_branch_factor``; each child is its parent's state denoised through the
  next level's steps with :meth:`dare.components.Sampler.partial_denoise` (so any sampler with a
  partial-denoising entry point works; the LLaDA decoder gives DARE's low-confidence semi-AR schedule for
  LLaDA and, through the family's aligned logits, Dream). Rows are laid out node-major: the children of
  row ``r`` of level ``l`` are rows ``[r f, (r + 1) f)`` of level ``l + 1``, so a prompt's leaves are
  contiguous. With per-node generators (a sampler with ``supports_row_generators``; the trainer keys node
  ``j`` of level ``l`` of prompt ``i`` by :func:`node_indices`) a node's draws do not depend on the other
  rows decoded with it (the batch split, the process count).
* **Values** (:func:`propagate_values`): leaf value = reward; every internal node (root included) = the
  mean of its children's values.
* **Local advantage** (:func:`local_advantages`): ``A_i = V_i - mean(V_siblings \\ i)``, no std
  normalisation (a node without siblings would get ``V_i``; fan-outs are validated >= 2).
* **Transitions** (:func:`transition_mask`): an edge scores the positions the child decoded,
  ``parent = M`` and ``child != M``, up to and including the child's first stop id (DARE's active mask:
  changed tokens, excluding anything after the end of the answer).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch

from dare.randomness import RowGenerators

from dare.sampling import completion_mask

__all__ = ["Tree", "branch_points", "node_indices", "grow_tree", "propagate_values", "local_advantages", "transition_mask"]


def branch_points(total_steps: int, contraction: int) -> list[int]:
    """Remaining-step counts at which the tree branches, descending, ending at 0 (DARE's formula
    ``T - int(k T / s)`` for ``k = 0..s``, deduplicated).

    :raises ValueError: ``total_steps < 1`` or ``contraction`` outside ``[1, total_steps]``.
    """
    if total_steps < 1 or not 1 <= contraction <= total_steps:
        raise ValueError(f"need total_steps >= 1 and 1 <= contraction <= total_steps, got {total_steps}, {contraction}")
    points = {total_steps} | {total_steps - int(k * total_steps / contraction) for k in range(1, contraction + 1)}
    return sorted(points, reverse=True)


@dataclass
class Tree:
    """A batch of trees (one per prompt).

    * ``levels[l]``: ``[R_l, P + G]`` int64 node states of depth ``l`` (``levels[0]``: the ``B`` roots);
    * ``fans[l]``: children per node of level ``l`` (``len(fans) = depth``);
    * ``prompt_attention``: ``[B, P]`` of the roots; ``prompt_length``: ``P``; ``nfe``: forward passes.
    """

    levels: list[torch.Tensor]
    fans: list[int]
    prompt_attention: torch.Tensor
    prompt_length: int
    nfe: int

    def attention(self, level: int) -> torch.Tensor:
        """``[R_l, P]`` prompt attention of the nodes of ``level``."""
        reps = 1
        for f in self.fans[:level]:
            reps *= f
        return self.prompt_attention.repeat_interleave(reps, dim=0)

    @property
    def leaves(self) -> torch.Tensor:
        """``[B * prod(fans), P + G]`` the leaf states, prompt-major."""
        return self.levels[-1]


def node_indices(prompt_indices: list[int], fans: list[int], level: int) -> list[int]:
    """A global index for every node of ``level`` (``1 .. len(fans)``), in the tree's row order: node ``j`` of
    that level of prompt ``i``'s tree is ``i * N + (nodes of levels 1 .. level - 1) + j``, ``N`` the nodes of a
    tree below its root. Distinct over every node of every prompt, whatever the batch.

    :raises ValueError: ``level`` outside ``1 .. len(fans)``.
    """
    if not 1 <= level <= len(fans):
        raise ValueError(f"level must be in 1..{len(fans)}, got {level}")
    sizes, width = [], 1
    for f in fans:
        width *= f
        sizes.append(width)
    total, offset, per = sum(sizes), sum(sizes[:level - 1]), sizes[level - 1]
    return [int(i) * total + offset + j for i in prompt_indices for j in range(per)]


@torch.no_grad()
def grow_tree(sampler, model, family, tokens, prompt_ids: torch.Tensor, attention_mask: torch.Tensor,
              fans: list[int], points: list[int],
              generator: torch.Generator | Callable[[int], RowGenerators] | None = None,
              batch_size: int | None = None) -> Tree:
    """Grow the trees (module docstring). ``points`` from :func:`branch_points`, ``fans[l]`` per level.

    :param prompt_ids: ``[B, P]`` int64 left-padded; :param attention_mask: ``[B, P]``.
    :param generator: one ``torch.Generator`` for every draw (None: the global RNG), or a function of the level
        (``1 .. len(fans)``) giving the row generators of that level's nodes (``B * prod(fans[:level])``, row
        order), e.g. keyed by :func:`node_indices`.
    :param batch_size: rows per ``partial_denoise`` call (None = all).
    :raises ValueError: ``len(fans) != len(points) - 1``.
    """
    if len(fans) != len(points) - 1:
        raise ValueError(f"{len(points) - 1} levels need {len(points) - 1} fan-outs, got {fans}")
    B, P = prompt_ids.shape
    G = sampler.gen_length
    T = points[0]
    root = torch.cat([prompt_ids, torch.full((B, G), tokens.mask_id, dtype=torch.long, device=prompt_ids.device)], 1)
    tree = Tree(levels=[root], fans=list(fans), prompt_attention=attention_mask, prompt_length=P, nfe=0)
    for level, fan in enumerate(fans):
        states = tree.levels[-1].repeat_interleave(fan, dim=0)
        attn = tree.attention(level + 1)
        step = batch_size or states.shape[0]
        gen = generator(level + 1) if callable(generator) else generator
        out = []
        for i in range(0, states.shape[0], step):
            rows = gen.rows(slice(i, i + step)) if isinstance(gen, RowGenerators) else gen
            res = sampler.partial_denoise(model, family, tokens, states[i:i + step], P, attn[i:i + step],
                                          step_range=(T - points[level], T - points[level + 1]), generator=rows)
            out.append(res.sequences)
            tree.nfe += int(res.nfe)
        tree.levels.append(torch.cat(out))
    return tree


def propagate_values(leaf_values: torch.Tensor, fans: list[int]) -> list[torch.Tensor]:
    """Node values per level, ``values[l]`` ``[R_l]`` float32: leaves given, every parent the mean of its children."""
    values = [leaf_values.float()]
    for fan in reversed(fans):
        values.insert(0, values[0].view(-1, fan).mean(dim=1))
    return values


def local_advantages(values: torch.Tensor, fan: int) -> torch.Tensor:
    """``A_i = V_i - mean_{j != i} V_j`` over each sibling group of ``fan`` rows: ``[R]`` float32.

    :raises ValueError: ``fan < 2`` (no sibling baseline) or ``R`` not a multiple of ``fan``.
    """
    if fan < 2 or values.numel() % fan != 0:
        raise ValueError(f"need fan >= 2 dividing the {values.numel()} nodes, got {fan}")
    v = values.float().view(-1, fan)
    others = (v.sum(dim=1, keepdim=True) - v) / (fan - 1)
    return (v - others).view(-1)


def transition_mask(parent: torch.Tensor, child: torch.Tensor, mask_id: int, stop_ids: tuple[int, ...]) -> torch.Tensor:
    """``[n, G]`` bool: positions decoded on the edge (``parent == M``, ``child != M``) up to and including the
    child's first stop id. ``parent``/``child``: ``[n, G]`` int64 completion parts."""
    decoded = (parent == mask_id) & (child != mask_id)
    return decoded & completion_mask(child, stop_ids, pad_in_response=False)
