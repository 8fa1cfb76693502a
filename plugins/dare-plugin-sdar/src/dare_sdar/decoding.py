"""SDAR's block diffusion decoder with a KV cache of committed blocks.

Source: JetAstra/SDAR ``generate.py`` ``block_diffusion_generate`` (HEAD c2041a8; docs/model-families.md §3.5),
SDAR arXiv 2510.06303 §3. The sequence ``[prompt | masks]`` is cut into blocks of ``block_length`` tokens
counted from the first prompt token. The whole prompt blocks are prefilled into the KV cache
(``store_kv=True``); each later block (the first may hold the prompt tail) is denoised in up to
``denoising_steps`` steps attending to the cache plus itself (``store_kv=False``). Each step samples
``x0`` for the block and commits ``quota[step]`` masked positions (``quota`` =
:func:`dare.sampling.block_quota`: ``block_length // steps``, the first ``block_length % steps`` steps one
more) chosen by the remasking rule:

* ``low_confidence_static``: the ``quota`` most confident masked positions;
* ``low_confidence_dynamic``: every masked position with confidence ``> confidence_threshold`` if there
  are at least ``quota`` of them, else the ``quota`` most confident;
* ``sequential``: the ``quota`` leftmost masked positions.

A finished block is run once more with ``store_kv=True`` to commit its keys/values. After each block a
row stops when its completion holds a stop id (``stopping_criteria_idx``; EOS and end-of-turn in the
sampler); its later blocks stay masks.

Sampling (official ``sample_with_temperature_topk_topp``; :func:`dare.sampling.sample_tokens` with
:data:`~dare.sampling.BLOCK_RULE`, shared with the LLaDA2 decoder): logits ``/ temperature``, top-k, then
top-p (the usual right-shifted nucleus rule), softmax, one multinomial draw per position; the confidence is
the drawn token's probability under that filtered distribution. The official code always samples:
temperature 0 divides by zero, and its greedy emulation ``top_k=1`` makes every confidence 1.0 (so the
dynamic rule commits a whole block in one step). Here **temperature 0 is greedy**: ``x0 = argmax``, and
the confidence is the softmax probability of ``x0`` at temperature 1 before filtering (the confidence
DARE's OpenCompass SDAR wrapper reports for ``top_k=1``, and LLaDA2.1's greedy rule), so the remasking
rules stay meaningful. ``temperature=1, top_k=1`` reproduces the official greedy emulation exactly.

Deliberate deviations from the official code (each only where the official one misbehaves):

* the per-step quota is capped at the number of masked positions in the row. The official ``topk`` then
  picks non-masked positions at confidence ``-inf`` and overwrites them with fresh samples: prompt tokens
  in the partial first block (e.g. ``block_length=8, denoising_steps=4`` and a prompt of 11 tokens) or,
  for batches, tokens of rows that finished the block earlier;
* the mask token is never proposed (its logit is set to ``-inf``). The official code can propose it: the
  position then stays masked and, at the last step of a block, the schedule is indexed past its end
  (``IndexError``). A trained model gives ``<|MASK|>`` ~0 probability, so outputs are otherwise unchanged;
* rows are independent in a batch (the official loop stops the whole batch when any row produces a stop
  id, and ``sequential`` raises for a finished row);
* left-padded batches are supported: each row is re-aligned so that its padding fills whole blocks in
  front of it (padding keys are masked out, RoPE positions start at the row's first real token;
  :func:`dare.sampling.block_canvas`), so every row is decoded exactly as it would be alone;
* NaN/Inf logits raise :class:`dare.sampling.NonFiniteLogitsError` naming the block and step (the
  official code would commit token 0, the argmax of NaN, at temperature 0).

The model is called only through the family's KV-cache interface
(:meth:`dare.modeling.BlockDiffusionFamily.new_cache` / ``block_logits``), so the loop decodes any
block-diffusion family.

:func:`block_diffusion_generate` keeps the official signature and return value (the whole ``x``
``[B, T]``, trailing masks included) for unpadded prompts; :class:`dare_sdar.sampler.SDARSampler` wraps the same loop as a
DARE ``Sampler`` with the trajectory, NFE and a no-cache variant (``use_cache=False`` recomputes the whole
prefix each step under the block-causal mask; same outputs, used as the speed baseline).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import torch

from dare.components import SpecialTokens
from dare.modeling.block_family import BlockDiffusionFamily
from dare.sampling import (
    Trajectory,
    block_canvas,
    block_quota,
    left_padding_problem,
    require_finite_logits,
    row_index,
    sample_tokens,
)
from dare.randomness import RowGenerators
from dare.sampling.options import DecodeOptions

from dare_sdar.errors import SDARInputError
from dare_sdar.family import SDARFamily
from dare_sdar.params import REMASKING_STRATEGIES, SDARSamplerParams

__all__ = ["BlockDecodeResult", "select_transfer", "block_decode", "block_diffusion_generate"]


@dataclass
class BlockDecodeResult:
    """Output of :func:`block_decode`.

    * ``x``: ``[B, T]`` int64, the decoder's working sequence (row ``b``: whole blocks of padding slots when
      the batch is left-padded, the prompt, the generated blocks, trailing masks); without padding exactly
      the official ``x``;
    * ``gen_start``: ``[B]`` index in ``x`` of each row's first completion token;
    * ``completions``: ``[B, gen_length]`` int64 (masks where a stopped row was never decoded);
    * ``unmask_step``: ``[B, gen_length]`` int64 global denoising step that committed each token (-1: never);
    * ``nfe``: denoising forward passes (each one's logits choose tokens);
    * ``forward_passes``: all model calls (``nfe`` + the prefill + one KV-commit pass per finished block
      with the cache);
    * ``steps``: generated blocks x ``denoising_steps`` (the range of ``unmask_step``).
    """

    x: torch.Tensor
    gen_start: torch.Tensor
    completions: torch.Tensor
    unmask_step: torch.Tensor
    nfe: int
    forward_passes: int
    steps: int


def select_transfer(
    confidence: torch.Tensor,
    masked: torch.Tensor,
    quota: int,
    remasking: str,
    confidence_threshold: float = 0.9,
) -> torch.Tensor:
    """Which masked positions of a block to commit this step (module docstring).

    :param confidence: ``[B, L]`` float, confidence of each proposal. :param masked: ``[B, L]`` bool, still
        masked positions a row may commit (all False for a finished row).
    :param quota: this step's quota; capped per row at the number of masked positions.
    :returns: ``[B, L]`` bool, a subset of ``masked``.
    :raises SDARInputError: unknown ``remasking``.
    """
    if remasking not in REMASKING_STRATEGIES:
        raise SDARInputError(f"remasking {remasking!r} is not one of {', '.join(REMASKING_STRATEGIES)}")
    transfer = torch.zeros_like(masked)
    conf = torch.where(masked, confidence, torch.full_like(confidence, -torch.inf))
    for j in range(masked.shape[0]):
        k = min(quota, int(masked[j].sum()))
        if k == 0:
            if remasking == "low_confidence_dynamic":
                transfer[j] = masked[j] & (conf[j] > confidence_threshold)  # a 0-quota step still takes the sure ones
            continue
        if remasking == "sequential":
            first = int(masked[j].nonzero()[0])
            transfer[j, first : first + k] = True
            transfer[j] &= masked[j]
            continue
        if remasking == "low_confidence_dynamic":
            high = masked[j] & (conf[j] > confidence_threshold)
            if int(high.sum()) >= k:
                transfer[j] = high
                continue
        transfer[j, torch.topk(conf[j], k).indices] = True
    return transfer


def _check_args(prompt, attention_mask, mask_id, p):
    """The prompts and ``p`` (:class:`~dare_sdar.params.SDARSamplerParams`, possibly built unvalidated).

    :raises SDARInputError: the first problem found.
    """
    if prompt.dim() != 2 or prompt.dtype != torch.long or prompt.shape[1] == 0:
        raise SDARInputError(
            f"input_ids must be a non-empty [batch, prompt_length] int64 tensor, got {tuple(prompt.shape)} {prompt.dtype}"
        )
    for name in ("gen_length", "block_length", "denoising_steps"):
        value = getattr(p, name)
        if not isinstance(value, int) or value <= 0:
            raise SDARInputError(f"{name} must be a positive integer, got {value!r}")
    if mask_id is None:
        raise SDARInputError("mask_id is required (SDAR's <|MASK|> is 151669; DARE tokenizers define their own)")
    if p.temperature < 0 or p.top_k < 0 or not 0.0 < p.top_p <= 1.0:
        raise SDARInputError(
            "need temperature >= 0, top_k >= 0 and 0 < top_p <= 1; "
            f"got temperature={p.temperature}, top_k={p.top_k}, top_p={p.top_p}"
        )
    if p.remasking not in REMASKING_STRATEGIES:
        raise SDARInputError(f"remasking_strategy {p.remasking!r} is not one of {', '.join(REMASKING_STRATEGIES)}")
    problem = left_padding_problem(prompt, attention_mask)
    if problem:
        raise SDARInputError(problem)


def _propose(logits: torch.Tensor, mask_id: int, p, generator,
             live: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """:func:`dare.sampling.sample_tokens` (official rule) on the active block's logits ``[B, L, V]``, with
    ``<|MASK|>`` never proposed, at ``p.temperature``, ``p.top_k``, ``p.top_p`` (``p`` the sampler's params).

    With :class:`dare.randomness.RowGenerators` only the ``live`` rows (``[B]`` bool: rows with a masked
    position this step) draw, ``L`` values each from their own generator, so a row consumes its generator
    exactly as it would alone (rows done with the block, or stopped, draw nothing); the others get
    proposal 0 and confidence 0, which nothing reads (they commit nothing).
    """
    logits = logits.clone()
    if mask_id < logits.shape[-1]:
        logits[..., mask_id] = -torch.inf
    if not isinstance(generator, RowGenerators) or p.temperature == 0:
        return sample_tokens(logits, p.temperature, p.top_k, p.top_p, generator=generator)
    B, L, V = logits.shape
    live = torch.ones(B, dtype=torch.bool, device=logits.device) if live is None else live
    x0 = torch.zeros((B, L), dtype=torch.long, device=logits.device)
    conf = torch.zeros((B, L), dtype=logits.dtype, device=logits.device)
    if bool(live.any()):
        tokens, probs = sample_tokens(logits[live].reshape(-1, V), p.temperature, p.top_k, p.top_p,
                                      generator=generator, rows=row_index(live, L))
        x0[live], conf[live] = tokens.view(-1, L), probs.view(-1, L)
    return x0, conf


def _completion_hits(transfer: torch.Tensor, comp_idx: torch.Tensor, gen_length: int) -> torch.Tensor:
    """``[B, gen_length]`` bool: the completion positions of a block's ``transfer`` ``[B, L]``."""
    hit = transfer & (comp_idx >= 0) & (comp_idx < gen_length)
    out = torch.zeros(transfer.shape[0], gen_length, dtype=torch.bool, device=transfer.device)
    out[hit.nonzero(as_tuple=True)[0], comp_idx[hit]] = True
    return out


@torch.no_grad()
def block_decode(
    family: BlockDiffusionFamily,
    model,
    prompt: torch.Tensor,
    attention_mask: torch.Tensor | None,
    options: DecodeOptions,
    stop_ids: tuple[int, ...] | None = None,
) -> BlockDecodeResult:
    """The block decoding loop of the module docstring, calling ``model`` through the family's KV-cache
    interface (:meth:`dare.modeling.BlockDiffusionFamily.block_logits` / ``new_cache``).

    :param prompt: ``[B, Lp]`` int64, left-padded. :param attention_mask: ``[B, Lp]`` 1 real / 0 padding, or None.
    :param options: :class:`~dare.sampling.options.DecodeOptions` with ``params`` a
        :class:`~dare_sdar.params.SDARSamplerParams` (``gen_length``, ``block_length``, ``denoising_steps``,
        ``temperature``, ``top_k``, ``top_p``, ``remasking``, ``confidence_threshold``, ``use_cache``: False
        recomputes the whole prefix at every step (no prefill, no commit passes), ``stop_at_eos``), ``tokens``
        (``mask_id``, and the stop ids ``eos_id``/``eot_id``) and the ``generator``.
    :param stop_ids: a row stops after the block in which its completion first holds one of these ids; None:
        ``options.tokens.stop_ids`` when ``stop_at_eos``, else none.
    :raises SDARInputError: bad shapes, non-left padding, or out-of-range arguments (before any forward).
    :raises dare.sampling.NonFiniteLogitsError: the model returned NaN/Inf logits (naming block and step).
    """
    p, mask_id, generator = options.params, options.tokens.mask_id, options.generator
    if stop_ids is None:
        stop_ids = options.tokens.stop_ids if p.stop_at_eos else ()
    _check_args(prompt, attention_mask, mask_id, p)
    gen_length, block_length, denoising_steps = p.gen_length, p.block_length, p.denoising_steps
    canvas = block_canvas(prompt, attention_mask, gen_length=gen_length, block_length=block_length, mask_id=mask_id)
    x, pos, device, B = canvas.x, canvas.position_ids, prompt.device, prompt.shape[0]
    quota = block_quota(block_length, denoising_steps)
    traj = Trajectory(B, gen_length, device=device)
    active = torch.ones(B, dtype=torch.bool, device=device)
    stop = torch.tensor(sorted(set(stop_ids)), dtype=torch.long, device=device)
    cache = family.new_cache(model) if p.use_cache else None
    nfe = passes = 0
    prefill = canvas.first_block * block_length
    if p.use_cache and prefill > 0:
        family.block_logits(model, x[:, :prefill], pos[:, :prefill], canvas.prefix_mask(prefill), cache, True)
        passes += 1

    for blk in range(canvas.first_block, canvas.num_blocks):
        start, end = blk * block_length, (blk + 1) * block_length
        cur = x[:, start:end].clone()
        comp_idx = canvas.completion_index(start, block_length)
        key_mask = canvas.key_mask(end)  # the active block sees every real key
        for step in range(denoising_steps + 1):
            masked = (cur == mask_id) & active[:, None]
            if not bool(masked.any()):
                if p.use_cache:  # commit the finished block's keys/values
                    family.block_logits(model, cur, pos[:, start:end], key_mask, cache, True)
                    passes += 1
                break
            if step == denoising_steps:  # unreachable: the capped quota always empties a block in time
                raise RuntimeError("a block still holds masks after all denoising steps")
            if p.use_cache:
                logits = family.block_logits(model, cur, pos[:, start:end], key_mask, cache, False)
            else:
                ids = torch.cat([x[:, :start], cur], dim=1)
                logits = family.block_logits(model, ids, pos[:, :end], canvas.prefix_mask(end), None, False, block_length)
            nfe += 1
            passes += 1
            logits = logits[:, -block_length:]
            require_finite_logits(logits, f"completion block {blk - canvas.first_block}, denoising step {step} (0-based)")
            x0, conf = _propose(logits, mask_id, p, generator, masked.any(dim=1))
            transfer = select_transfer(conf, masked, quota[step], p.remasking, p.confidence_threshold)
            cur[transfer] = x0[transfer]
            global_step = (blk - canvas.first_block) * denoising_steps + step
            traj.record(_completion_hits(transfer, comp_idx, gen_length), global_step)
        x[:, start:end] = cur
        if stop.numel():
            in_completion = torch.arange(end, device=device)[None] >= canvas.gen_start[:, None]
            produced = torch.isin(x[:, :end], stop) & in_completion
            active &= ~produced.any(dim=1)
            if not bool(active.any()):
                break

    return BlockDecodeResult(
        x=x,
        gen_start=canvas.gen_start,
        completions=canvas.completions(gen_length),
        unmask_step=traj.unmask_step,
        nfe=nfe,
        forward_passes=passes,
        steps=(canvas.num_blocks - canvas.first_block) * denoising_steps,
    )


def block_diffusion_generate(
    model,
    input_ids: torch.Tensor,
    mask_id: int,
    gen_length: int = 128,
    block_length: int = 8,
    denoising_steps: int = 8,
    temperature: float = 1.0,
    top_k: int = 0,
    top_p: float = 1.0,
    remasking_strategy: str = "low_confidence_dynamic",
    confidence_threshold: float = 0.85,
    stopping_criteria_idx: list[int] | int | None = None,
    *,
    use_cache: bool = True,
    generator: torch.Generator | None = None,
) -> torch.Tensor:
    """Drop-in for the official ``block_diffusion_generate`` (defaults included; ``entropy_bounded`` is not
    ported: it is broken upstream).

    :param model: an SDAR model (or anything with its forward: ``store_kv``/``past_key_values``).
    :param input_ids: ``[B, Lp]`` int64 prompts without padding, or the official ``prompt`` mapping holding them.
    :param stopping_criteria_idx: stop ids (one int or a list; None = decode all blocks).
    :param temperature: 0 = greedy (module docstring); ``temperature=1, top_k=1`` = the official greedy emulation.
    :returns: ``x`` ``[B, ceil((Lp + gen_length) / block_length) * block_length]``: prompt, generated blocks,
        masks after a stop.
    :raises SDARInputError: bad arguments (before any forward).
    """
    if isinstance(input_ids, Mapping):
        input_ids = input_ids["input_ids"]
    if isinstance(stopping_criteria_idx, int):
        stopping_criteria_idx = [stopping_criteria_idx]
    tokens = SpecialTokens(mask_id=mask_id, eos_id=-1, pad_id=-1)  # the release takes its stop ids, not an EOS id
    options = DecodeOptions.of(
        SDARSamplerParams, tokens, generator, gen_length=gen_length,
        block_length=block_length, denoising_steps=denoising_steps, temperature=temperature, top_k=top_k, top_p=top_p,
        remasking=remasking_strategy, confidence_threshold=confidence_threshold, use_cache=use_cache,
    )
    result = block_decode(SDARFamily(), model, input_ids, None, options, tuple(stopping_criteria_idx or ()))
    return result.x
