"""A diffusion value model and step-level GAE over decoding trajectories (TraceRL, arXiv 2509.06949 §3.2).

TraceRL's optional value model (Gen-Verse/dLLM-RL@10b4fd1, ``train/init_sdar_value_model.py``,
``train/train_sdar_value.py``) predicts one value per response token from the *same* input the policy scores
that token under (the state before the token's transition). Its baseline turns the sequence reward into
token-level advantages by generalised advantage estimation (GAE, arXiv 1506.02438) over the decoding
*steps* (transitions), not over token positions:

* the reward ``r_j`` is the sequence reward on the tokens of the row's last transition, 0 elsewhere;
* per transition ``t`` (in decoding order): ``r*_t`` and ``V*_t``, the means of ``r_j`` and of the rollout-time
  values ``V_j`` over its tokens; ``R*_t = r*_t + gamma R*_{t+1}``;
  ``A*_t = r*_t - V*_t + gamma V*_{t+1} + gamma lam A*_{t+1}`` (0 past the last transition);
* per token ``j`` of transition ``t``: return ``R_j = r_j + gamma R*_{t+1}`` and advantage
  ``A_j = r_j - V_j + gamma V*_{t+1} + gamma lam A*_{t+1}`` (``train_sdar_value.py:716-900``). With
  ``gamma = lam = 1`` (the released configs) ``R_j`` is the sequence reward and ``A_j = R_j - V_j``.

The value model is trained with PPO's clipped value loss ``0.5 max((V - R)^2, (V_old + clip(V - V_old, -eps, eps)
- R)^2)`` per token (``train_sdar_value.py:983-1007``).

The value model here is the policy with its output layer replaced by a bias-free ``hidden -> 1`` linear head,
zero-initialised as the official ``init_*_value_model.py`` scripts do: the family's training forward
(``ModelFamily.denoiser_logits``) then returns ``[N, S, 1]`` "logits" aligned exactly like the policy's (Dream's
shift, the block families' ``[x_t ; x_0]`` layout), so the values need no family-specific code.
"""

from __future__ import annotations

import copy

import torch

from dare.diffusion.estimators import Pass, ScoringBatch
from dare.errors import DareError

__all__ = ["value_model_from", "score_values", "transition_ranks", "step_gae", "clipped_value_loss"]


def value_model_from(policy: torch.nn.Module) -> torch.nn.Module:
    """A value model: a deep copy of ``policy`` whose output layer is a zero-initialised ``Linear(hidden, 1,
    bias=False)`` (Gen-Verse/dLLM-RL@10b4fd1 ``train/init_sdar_value_model.py``: ``value_head``, weight zeroed).

    :param policy: an unwrapped model with ``get_output_embeddings``/``set_output_embeddings`` (every DARE family).
    :returns: the value model, same device and dtype, in train mode; its forward's ``.logits`` are ``[B, L, 1]``.
    :raises DareError: the model has no separate output layer (e.g. LLaDA with ``weight_tying: true``), or it is a
        LoRA (peft) model.
    """
    from dare.modeling.lora import is_peft_model

    if is_peft_model(policy):
        raise DareError(
            "algorithm.params.value_model: the policy is a LoRA (peft) model; TraceRL's value model is a full copy of "
            "the policy with its own head and cannot share the adapters. Remove model.lora to train the value model, "
            "or remove algorithm.params.value_model.")
    getter = getattr(policy, "get_output_embeddings", None)
    head = getter() if callable(getter) else None
    if not isinstance(head, torch.nn.Linear) or not hasattr(policy, "set_output_embeddings"):
        raise DareError(
            f"algorithm.params.value_model: {type(policy).__name__} has no separate output layer "
            "(get_output_embeddings() is not a Linear; e.g. LLaDA with weight_tying: true), so no value head can "
            "replace it. Use a checkpoint with an untied output layer, or remove algorithm.params.value_model.")
    value = copy.deepcopy(policy)
    new_head = torch.nn.Linear(head.in_features, 1, bias=False, device=head.weight.device, dtype=head.weight.dtype)
    torch.nn.init.zeros_(new_head.weight)
    value.set_output_embeddings(new_head)
    config = getattr(value, "config", None)
    if config is not None and hasattr(config, "tie_word_embeddings"):
        config.tie_word_embeddings = False
    return value.train()


def score_values(value_fn, batch: ScoringBatch, pas: Pass) -> torch.Tensor:
    """``[N, G]`` float32 values of the completion tokens ``pas`` scores, each from the copy that scores it
    (weighted by the copy's weight, 1 in trajectory replay), 0 elsewhere; differentiable under grad.

    :param value_fn: ``(noisy [N, S], clean [N, S], attention_mask or None) -> [N, S, 1]`` (the value model through
        the family's training forward). :param batch: the rows. :param pas: a pass over the same rows.
    """
    clean, P = batch.input_ids, batch.prompt_length
    attn = None if bool(batch.attention_mask.all()) else batch.attention_mask
    out = torch.zeros(clean[:, P:].shape, dtype=torch.float32, device=clean.device)
    for k in range(pas.mask.shape[0]):
        where = pas.weight[k] != 0
        if not bool(where.any()):
            continue
        noisy = pas.corrupted(k, clean, batch.mask_id)
        v = value_fn(noisy, clean, attn)[:, P:, 0].float()
        out = out + torch.where(where, pas.weight[k].to(out.device) * v, torch.zeros_like(v))
    return out


def transition_ranks(passes: list[Pass], num_rows: int, length: int) -> torch.Tensor:
    """``[N, G]`` int64: for each completion token, the decoding-order rank of its transition within its row
    (0 = the row's first transition that scores a token), -1 where no pass scores the token.

    Passes are ordered by ``Pass.key`` (trajectory replay's transition index) or, without keys, by their position
    in ``passes``; a row's ranks skip the transitions that score none of its tokens, like the distinct step ids of
    the official step map. :raises ValueError: a token is scored by two passes (not a trajectory replay).
    """
    order = sorted(range(len(passes)), key=lambda i: (passes[i].key if passes[i].key is not None else i, i))
    index = torch.full((num_rows, length), -1, dtype=torch.long, device=passes[0].weight.device if passes else None)
    for position, i in enumerate(order):
        scored = passes[i].scored
        if bool((scored & (index >= 0)).any()):
            raise ValueError("a completion token is scored by two passes; step-level GAE needs a trajectory replay "
                             "(each token in one transition)")
        index[scored] = position
    ranks = torch.full_like(index, -1)
    for n in range(num_rows):
        row = index[n]
        valid = row >= 0
        if bool(valid.any()):
            ranks[n, valid] = torch.unique(row[valid], sorted=True, return_inverse=True)[1]
    return ranks


def step_gae(ranks: torch.Tensor, rewards: torch.Tensor, values: torch.Tensor, gamma: float = 1.0,
             lam: float = 1.0) -> tuple[torch.Tensor, torch.Tensor]:
    """Token returns and advantages by step-level GAE (module docstring).

    :param ranks: ``[N, G]`` int64 transition rank of each token (:func:`transition_ranks`; -1 = not trained).
    :param rewards: ``[N]`` float, the sequence reward (TraceRL feeds the group-normalised reward).
    :param values: ``[N, G]`` float, rollout-time values ``V_j`` (only read where ``ranks >= 0``).
    :param gamma: discount over transitions, in ``[0, 1]``. :param lam: GAE lambda, in ``[0, 1]``.
    :returns: ``(returns, advantages)``, ``[N, G]`` float32 each, 0 where ``ranks < 0``.
    """
    N, G = ranks.shape
    device = ranks.device
    trained = ranks >= 0
    S = int(ranks.max()) + 1 if bool(trained.any()) else 0
    values = values.float()
    returns = torch.zeros(N, G, dtype=torch.float32, device=device)
    advantages = torch.zeros_like(returns)
    if S == 0:
        return returns, advantages
    last = torch.where(trained, ranks, torch.full_like(ranks, -1)).amax(dim=1, keepdim=True)  # [N, 1]
    r_tok = torch.where(trained & (ranks == last), rewards.float().to(device)[:, None], torch.zeros_like(returns))
    idx = ranks.clamp(min=0)
    w = trained.float()
    count = torch.zeros(N, S, device=device).scatter_add_(1, idx, w)
    r_star = torch.zeros(N, S, device=device).scatter_add_(1, idx, r_tok * w) / count.clamp(min=1.0)
    v_star = torch.zeros(N, S, device=device).scatter_add_(1, idx, values * w) / count.clamp(min=1.0)
    exists = count > 0  # rows have ranks 0..last: transitions past a row's last one do not exist
    r_star, v_star = r_star * exists, v_star * exists
    # R*, A* and their "next" values, by the backward recursion of train_sdar_value.py:818-832
    R_star = torch.zeros(N, S + 1, device=device)
    A_star = torch.zeros(N, S + 1, device=device)
    V_next = torch.cat([v_star, torch.zeros(N, 1, device=device)], dim=1)
    for i in range(S - 1, -1, -1):
        R_star[:, i] = (r_star[:, i] + gamma * R_star[:, i + 1]) * exists[:, i]
        delta = r_star[:, i] - v_star[:, i] + gamma * V_next[:, i + 1]
        A_star[:, i] = (delta + gamma * lam * A_star[:, i + 1]) * exists[:, i]
    nxt = (idx + 1)
    R_next, A_next, Vn = R_star.gather(1, nxt), A_star.gather(1, nxt), V_next.gather(1, nxt)
    returns = torch.where(trained, r_tok + gamma * R_next, returns)
    advantages = torch.where(trained, r_tok - values + gamma * Vn + gamma * lam * A_next, advantages)
    return returns, advantages


def clipped_value_loss(values: torch.Tensor, old_values: torch.Tensor, returns: torch.Tensor,
                       clip_eps: float) -> torch.Tensor:
    """Per-token PPO value loss ``0.5 max((V - R)^2, (V_old + clip(V - V_old, -eps, eps) - R)^2)``, ``[N, G]``
    float32 (Gen-Verse/dLLM-RL@10b4fd1 ``train/train_sdar_value.py:998-1001``; PPO value clipping, OpenAI
    baselines ``ppo2``). :param clip_eps: ``eps > 0``. :raises ValueError: ``clip_eps <= 0``."""
    if clip_eps <= 0:
        raise ValueError(f"value clip epsilon must be > 0, got {clip_eps}")
    values, old_values, returns = values.float(), old_values.float(), returns.float()
    clipped = old_values + (values - old_values).clamp(-clip_eps, clip_eps)
    return 0.5 * torch.maximum((values - returns) ** 2, (clipped - returns) ** 2)
