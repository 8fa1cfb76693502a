"""Group-relative advantages of outcome rewards (GRPO, Dr.GRPO, RLOO).

Completions are laid out group by group: rows ``[g * G, (g + 1) * G)`` are the ``G`` completions
of prompt ``g`` (``G`` = group size). Each function returns one scalar advantage per completion,
which objectives broadcast over the completion's tokens.

A group whose completions all got the same reward carries no learning signal: every estimator gives
each of its completions an advantage of exactly ``0.0``. Computing ``r_i - mean_g r`` in floating point
does not guarantee that (the mean of eight copies of ``2/3`` is not ``2/3`` in float32 or float64, and
GRPO divides that residue by a standard deviation of ~1e-17, giving 0.056 per completion), so such
groups (:func:`zero_std_groups`, the groups ``frac_zero_std_groups`` counts) are set to zero explicitly.
Group statistics are computed in float64.
"""

from __future__ import annotations

from typing import Literal

import torch

__all__ = ["AdvantageKind", "group_advantages", "grpo_advantages", "drgrpo_advantages", "rloo_advantages",
           "zero_std_groups", "groups_in_range", "overlong_as_incorrect"]

AdvantageKind = Literal["grpo", "drgrpo", "rloo"]

#: Added to the group standard deviation in GRPO (DARE ``core_algos.compute_grpo_outcome_advantage``).
GRPO_STD_EPS = 1e-6


def _groups(rewards: torch.Tensor, group_size: int) -> torch.Tensor:
    """``rewards`` ``[N]`` as ``[N / G, G]`` float64. :raises ValueError: not 1-D or not a multiple of ``G``."""
    if rewards.ndim != 1:
        raise ValueError(f"rewards must be 1-D [N], got shape {tuple(rewards.shape)}")
    if group_size <= 0 or rewards.numel() % group_size != 0:
        raise ValueError(f"{rewards.numel()} rewards do not split into groups of {group_size}")
    return rewards.detach().to(torch.float64).view(-1, group_size)


def zero_std_groups(rewards: torch.Tensor, group_size: int) -> torch.Tensor:
    """Which groups got the same reward for every completion (zero spread: ``max == min``).

    :param rewards: ``[N]`` float, ``N = groups * group_size``.
    :returns: ``[N / group_size]`` bool. Its mean is the ``frac_zero_std_groups`` metric.
    :raises ValueError: ``N`` is not a multiple of ``group_size``.
    """
    r = _groups(rewards, group_size)
    return r.amax(dim=1) == r.amin(dim=1)


def _centred(r: torch.Tensor) -> torch.Tensor:
    """``r - mean_g r`` per group ``[groups, G]`` float64, exactly 0 in groups of equal rewards."""
    out = r - r.mean(dim=1, keepdim=True)
    out[r.amax(dim=1) == r.amin(dim=1)] = 0.0
    return out


def grpo_advantages(rewards: torch.Tensor, group_size: int, std_eps: float = GRPO_STD_EPS,
                    unbiased: bool = True) -> torch.Tensor:
    """GRPO (arXiv 2402.03300 §4.1.2): ``A_i = (r_i - mean_g r) / (std_g r + std_eps)`` (``std_eps`` 1e-6 as
    verl; the TRL-based official trainers, e.g. JustGRPO's ``grpo.py::compute_group_advantages``, use 1e-4).

    ``std`` is the *unbiased* standard deviation over the group, as DARE/verl compute it
    (``torch.std``), or with ``unbiased=False`` the population one (divided by ``G``; the TraceRL release's
    ``z_score_normalize``, Gen-Verse/dLLM-RL ``reward/rl_reward.py:74-79``, with ``std_eps = 0``). A group of equal
    rewards gets ``A = 0`` exactly (module docstring), also with ``std_eps = 0``. A group of size 1 gets mean 0
    and std 1 (verl's convention), so ``A = r``.

    :param rewards: ``[N]`` float, ``N = groups * group_size``.
    :returns: ``[N]`` float32.
    :raises ValueError: ``N`` is not a multiple of ``group_size``.
    """
    r = _groups(rewards, group_size)
    if group_size == 1:
        return r.view(-1).to(torch.float32)
    if std_eps < 0:
        raise ValueError(f"std_eps must be >= 0, got {std_eps}")
    std = r.std(dim=1, keepdim=True, unbiased=unbiased) + std_eps
    centred = _centred(r)
    return torch.where(std > 0, centred / torch.where(std > 0, std, 1.0), 0.0).view(-1).to(torch.float32)


def drgrpo_advantages(rewards: torch.Tensor, group_size: int) -> torch.Tensor:
    """Dr.GRPO (arXiv 2503.20783 §3.1): ``A_i = r_i - mean_g r`` (no division by the std;
    verl's ``norm_adv_by_std_in_grpo=False``). A group of equal rewards gets ``A = 0`` exactly.

    :param rewards: ``[N]`` float. :returns: ``[N]`` float32.
    :raises ValueError: ``N`` is not a multiple of ``group_size``.
    """
    return _centred(_groups(rewards, group_size)).view(-1).to(torch.float32)


def rloo_advantages(rewards: torch.Tensor, group_size: int) -> torch.Tensor:
    """RLOO (Ahmadian et al., arXiv 2402.14740 eq. (5)): ``A_i = r_i - mean_{j != i} r_j``
    ``= G / (G - 1) * (r_i - mean_g r)`` (DARE ``compute_rloo_outcome_advantage``, used by ESPO).
    A group of equal rewards gets ``A = 0`` exactly.

    :param rewards: ``[N]`` float. :returns: ``[N]`` float32.
    :raises ValueError: ``group_size < 2`` (no leave-one-out baseline) or ``N`` not a multiple of it.
    """
    if group_size < 2:
        raise ValueError(f"RLOO needs group_size >= 2, got {group_size}")
    r = _groups(rewards, group_size)
    return (group_size / (group_size - 1) * _centred(r)).view(-1).to(torch.float32)


_KINDS = {"grpo": grpo_advantages, "drgrpo": drgrpo_advantages, "rloo": rloo_advantages}


def group_advantages(rewards: torch.Tensor, group_size: int, kind: AdvantageKind = "grpo",
                     std_eps: float = GRPO_STD_EPS, unbiased: bool = True) -> torch.Tensor:
    """Dispatch to :func:`grpo_advantages` (with ``std_eps``, ``unbiased``), :func:`drgrpo_advantages` or
    :func:`rloo_advantages`.

    :raises ValueError: unknown ``kind``, or the checks of the chosen estimator.
    """
    if kind not in _KINDS:
        raise ValueError(f"unknown advantage estimator {kind!r}; use one of {', '.join(_KINDS)}")
    if kind == "grpo":
        return grpo_advantages(rewards, group_size, std_eps, unbiased)
    return _KINDS[kind](rewards, group_size)


def groups_in_range(rewards: torch.Tensor, group_size: int, low: float, high: float) -> torch.Tensor:
    """``[N]`` bool: the completions of groups whose mean reward is in ``[low, high]`` (the group accuracy for a 0/1
    correctness reward). The TraceRL release trains only those prompts (Gen-Verse/dLLM-RL
    ``reward/rl_reward.py:112-114``, ``[0.2, 0.8]``: a group with more than 80% or fewer than 20% correct is dropped).

    :param rewards: ``[N]`` float, ``N = groups * group_size``. :raises ValueError: ``N`` not a multiple of ``G``.
    """
    mean = _groups(rewards, group_size).mean(dim=1)
    keep = (mean >= low) & (mean <= high)
    return keep.repeat_interleave(group_size)


def overlong_as_incorrect(rewards: torch.Tensor, response_lengths: torch.Tensor, completion_length: int,
                          margin: int) -> torch.Tensor:
    """``rewards`` with 0 (incorrect) for every response of at least ``completion_length - margin`` tokens: a
    completion that (nearly) filled the decoding budget is treated as truncated (the TraceRL release:
    ``lengths >= max_token - 5``, Gen-Verse/dLLM-RL ``reward/rl_reward.py:100-103``).

    :param rewards: ``[N]`` float; :param response_lengths: ``[N]`` int64 tokens through the first stop id
        (:func:`dare.rl.rollout.content_lengths`: EOS padding not counted, whatever the family);
    :param completion_length: ``G``, the decoding budget; :param margin: ``>= 0``.
    :returns: ``[N]`` float, a new tensor.
    """
    overlong = response_lengths.to(rewards.device) >= completion_length - margin
    return torch.where(overlong, torch.zeros_like(rewards), rewards)
