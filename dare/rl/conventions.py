"""Which completion tokens an RL loss scores, and what the likelihood forward sees of prompt padding.

Two conventions differ between DARE and the official trainers (docs/algorithms.md §10):

* ``response_tokens``:

  * ``"all"`` (DARE): every completion token of the response (``ScoringBatch.completion_mask``) is
    scored and counted in the loss normaliser; for EOS-padded families (LLaDA, Dream) that includes the
    EOS padding after the answer;
  * ``"through_first_eos"`` (official d1 ``diffu-grpo/diffu_grpo_trainer.py``, DiffuCoder
    ``src/open_r1/coupled_grpo.py``, SPG ``spg/spg_trainer.py``): only the tokens up to and including the
    first stop id (EOS or end-of-turn) are scored and counted; later positions are still masked and
    attended to, as in those trainers, but weigh 0.

* ``prompt_padding``:

  * ``"exclude"`` (DARE): prompt left-padding has attention 0 and is never masked;
  * ``"attend"`` (official d1, whose trainer calls the model without an attention mask and draws the
    prompt mask over every prompt position): the padding is attended to, and masked with the
    prompt-mask probability like any prompt token. Rollouts keep the sampler's own attention.

Two more concern block families (SDAR, LLaDA2) and follow the TraceRL SDAR release (Gen-Verse/dLLM-RL
``train/rl_sdar.py``):

* ``block_alignment``: ``"first_token"`` (DARE: blocks start at each row's first real token, as single-sequence
  decoding) or ``"prompt_end"`` (the release's training forward: a block starts at the padded prompt's end ``P``,
  prompt blocks counted backwards from it; :func:`align_blocks_at_prompt_end`). They differ when a prompt's
  length is not a multiple of the block size;
* ``response_padding``: ``"exclude"`` (DARE: positions after a truncating family's response have attention 0)
  or ``"masked"`` (the release: they are attended to, as the mask token in every corrupted copy, and never
  scored; :func:`attend_response_padding` then :func:`mask_after_response`).

How positions after the first EOS are corrupted differs between the official trainers, and DARE follows
each: d1 and DiffuCoder draw their corruption over the whole completion and only weigh the later positions 0
(:func:`score_through_first_stop`, applied by :class:`~dare.rl.trainer.GRPOTrainer`); SPG's response ends at
the first EOS (its blocks, mask ratios and length weights count only those tokens) and every later position
is always masked (:func:`cut_response_at_first_stop` then :func:`mask_after_response`, applied by
SPG's trainer). :func:`attend_prompt_padding`, :func:`align_blocks_at_prompt_end` and
:func:`attend_response_padding` are applied by the trainer's rollout.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Literal

import torch

from dare.diffusion.estimators import Pass, ScoringBatch

__all__ = ["ResponseTokens", "PromptPadding", "keep_through_first_stop", "score_through_first_stop",
           "cut_response_at_first_stop", "mask_after_response", "attend_prompt_padding", "BlockAlignment",
           "ResponsePadding", "align_blocks_at_prompt_end", "attend_response_padding"]

ResponseTokens = Literal["all", "through_first_eos"]
PromptPadding = Literal["exclude", "attend"]
BlockAlignment = Literal["first_token", "prompt_end"]
ResponsePadding = Literal["exclude", "masked"]


def keep_through_first_stop(completions: torch.Tensor, stop_ids: tuple[int, ...]) -> torch.Tensor:
    """``[N, G]`` bool: positions up to and including the first stop id of each row (all when none).

    The official rule (d1 ``diffu_grpo_trainer.py::_generate_and_score_completions``:
    ``sequence_indices <= eos_idx``).

    :param completions: ``[N, G]`` int64 completion token ids. :param stop_ids: ids that end a completion.
    :raises ValueError: ``completions`` is not 2-D or ``stop_ids`` is empty.
    """
    if completions.ndim != 2:
        raise ValueError(f"completions must be [N, G], got shape {tuple(completions.shape)}")
    if not stop_ids:
        raise ValueError("stop_ids must name at least one token id")
    is_stop = torch.zeros_like(completions, dtype=torch.bool)
    for sid in stop_ids:
        is_stop |= completions == sid
    before = torch.cumsum(is_stop.to(torch.int64), dim=1) - is_stop.to(torch.int64)
    return before == 0


def score_through_first_stop(passes: list[Pass], batch: ScoringBatch, stop_ids: tuple[int, ...]) -> list[Pass]:
    """``passes`` with the weight of every completion token after the first stop id set to 0 (masks unchanged).

    :returns: new :class:`Pass` objects (``key`` kept); the inputs are not modified.
    """
    keep = keep_through_first_stop(batch.input_ids[:, batch.prompt_length:], stop_ids)
    return [replace(p, weight=p.weight * keep.to(p.weight.dtype)[None]) for p in passes]


def cut_response_at_first_stop(batch: ScoringBatch, stop_ids: tuple[int, ...]) -> ScoringBatch:
    """``batch`` whose response (``completion_mask``, hence ``response_lengths``) ends at the first stop id,
    inclusive; ids and attention are unchanged (SPG ``spg/spg_trainer.py::_generate_and_score_completions``)."""
    keep = keep_through_first_stop(batch.input_ids[:, batch.prompt_length:], stop_ids)
    return replace(batch, completion_mask=batch.completion_mask & keep)


def mask_after_response(passes: list[Pass], batch: ScoringBatch) -> list[Pass]:
    """``passes`` with every completion position outside ``batch.completion_mask`` masked (weight unchanged,
    so 0 there): SPG's ``is_mask | ~completion_mask_append`` (``spg/spg_trainer.py::forward_process``)."""
    outside = torch.cat([torch.zeros_like(batch.prompt_valid), ~batch.completion_mask], dim=1)
    return [replace(p, mask=p.mask | outside[None].to(p.mask.device)) for p in passes]


def attend_prompt_padding(batch: ScoringBatch) -> ScoringBatch:
    """``batch`` with attention 1 on every prompt position, so prompt padding is attended to and counts as
    a prompt token (``ScoringBatch.prompt_valid`` all True: a prompt-masking estimator may mask it)."""
    attn = batch.attention_mask.clone()
    attn[:, : batch.prompt_length] = 1
    return replace(batch, attention_mask=attn)


def align_blocks_at_prompt_end(batch: ScoringBatch) -> ScoringBatch:
    """``batch`` whose block-family forwards start a block at the padded prompt's end (``block_anchor = P``):
    the completion's blocks are ``[P + k b, P + (k + 1) b)`` in every row, whatever its prompt length (Gen-Verse/
    dLLM-RL ``train/rl_sdar.py::make_basic_block_attention``, ``one_round_vectorized``)."""
    return replace(batch, block_anchor=batch.prompt_length)


def attend_response_padding(batch: ScoringBatch) -> ScoringBatch:
    """``batch`` with attention 1 on the completion positions after the response (``completion_mask`` False), which
    stay unscored; with :func:`mask_after_response` on the passes they are attended to as mask tokens (the TraceRL
    SDAR release: response padding is never a masked key, ``rl_sdar.py::process_pad``, and holds the mask token in
    the noisy copy while its block is scored, ``one_round_vectorized``)."""
    attn = batch.attention_mask.clone()
    attn[:, batch.prompt_length:] = 1
    return replace(batch, attention_mask=attn)
