"""LLaDA's official semi-autoregressive low-confidence remasking decoder, with Fast-dLLM acceleration.

Source: ML-GSAI/LLaDA ``generate.py`` (``generate``), arXiv 2502.09992 §2.4 and Appendix B.3. The
completion (``gen_length`` masks) is split into ``gen_length / block_length`` blocks decoded left to
right, ``steps / num_blocks`` denoising steps each. At every step the model predicts all masked
tokens (Gumbel-max at ``temperature``; greedy at 0), scores them (``low_confidence``: un-tempered
softmax probability; ``random``: uniform), and commits the ``k`` most confident ones inside the
current block, ``k`` from :func:`dare.sampling.num_transfer_tokens`. Classifier-free guidance
re-runs the batch with every prompt position masked: ``un + (cfg + 1)(cond - un)``.

Fast-dLLM (arXiv 2505.22618; NVlabs/Fast-dLLM ``llada/generate.py``), as parameters of the same decoder:

* ``cache: prefix | dual``: block-wise approximate KV cache (:mod:`dare.sampling.kv_cache`). The block's
  first step is a full forward that refreshes the cache and commits like any step; later steps run the
  block plus suffix (prefix) or the block alone (dual) against it, and only the block's positions
  compete. With the fixed schedule they are ranked over the release's columns (the whole sequence at the
  refresh step, block plus suffix or the block at later steps, :func:`release_window`), so exact ties of
  confidences break as Fast-dLLM's ``torch.topk`` breaks them. The step schedule, NFE and ``unmask_step``
  are those of the uncached decoder. Exact at every
  refresh step and for a 1-layer model; otherwise approximate (deeper layers' cached keys/values go stale
  as the block changes), see :mod:`dare.sampling.kv_cache`.
* ``threshold`` / ``factor``: confidence-aware parallel decoding (:mod:`dare.sampling.parallel`). Each
  block is denoised until it has no mask, each step committing every masked position of the block whose
  confidence (the proposal's probability) is ``>= threshold`` and always the most confident one (or the
  factor rule's count); ``steps`` then does not set the per-step count. A proposal of the mask token is
  never committed under these rules.

Confidence dtype: under any Fast-dLLM rule (a cache, a threshold, a factor) the proposals are scored in
float64 (:func:`dare.sampling.fastdllm_confidence`), as Fast-dLLM's ``get_transfer_index``; the
cache-free fixed-schedule decoder keeps the LLaDA release's softmax in the logits' dtype, so it stays the
release token for token (near-ties of confidences then break as the release breaks them).

``cache: none`` without a parallel rule is the official decoder token for token (any masked position
before the block's end competes, as there). Every mode works at batch size > 1 with left padding
(the padding mask reaches the cached forwards; Fast-dLLM's batched dual cache crashed and its model
ignored the mask), and rows never influence each other, so tokens do not depend on the batch. NaN/Inf
logits raise :class:`dare.sampling.NonFiniteLogitsError` naming the step.

``generate`` keeps the official signature and returns the same tensor at temperature 0 for the same
weights; :class:`dare_llada.sampler.LLaDASampler` wraps it as a DARE ``Sampler`` that decodes any full-attention family
(through the family's aligned logits, or its ``kv_logits`` with a cache) and records the trajectory.
"""

from __future__ import annotations

import dataclasses
from typing import Callable

import torch

from dare.components import SpecialTokens
from dare.randomness import RowGenerators
from dare.sampling import (
    CACHE_MODES,
    BlockKVCache,
    Trajectory,
    add_gumbel_noise,
    confidence_scores,
    factor_transfer,
    require_finite_logits,
    num_transfer_tokens,
    threshold_transfer,
    topk_transfer,
)
from dare.sampling.options import DecodeOptions
from dare_llada.params import LLaDASamplerParams

__all__ = ["generate", "decode", "denoise_steps", "decode_options", "release_window", "windowed_topk_transfer"]


def _parallel(p) -> bool:
    """Fast-dLLM parallel decoding applies: ``p.threshold`` or ``p.factor`` is set."""
    return p.threshold is not None or p.factor is not None


def _fastdllm(p) -> bool:
    """A Fast-dLLM rule applies (``p.cache``, ``p.threshold`` or ``p.factor``): confidences in float64 as Fast-dLLM."""
    return p.cache != "none" or _parallel(p)


def _without_cfg(options: DecodeOptions) -> DecodeOptions:
    """``options`` with ``params.cfg_scale = 0`` (a step over logits already guided)."""
    return dataclasses.replace(options, params=options.params.model_copy(update={"cfg_scale": 0.0}))


def _step_logits(forward, x, attention_mask, prompt_index, o: DecodeOptions):
    """``(logits, nfe)`` of one step from ``forward(ids, attention_mask)``; CFG runs ``[x; x with the prompt
    masked]`` as one batch and returns ``un + (cfg + 1)(cond - un)`` (2 function evaluations)."""
    p = o.params
    if p.cfg_scale > 0.0:
        un_x = x.clone()
        un_x[prompt_index] = o.tokens.mask_id
        am = None if attention_mask is None else torch.cat([attention_mask, attention_mask], dim=0)
        cond, un = torch.chunk(forward(torch.cat([x, un_x], dim=0), am), 2, dim=0)
        return un + (p.cfg_scale + 1) * (cond - un), 2
    return forward(x, attention_mask), 1


def _denoise_step(forward, x, attention_mask, prompt_index, region: tuple[int, int], allowed: torch.Tensor,
                  select, o: DecodeOptions, step: int, prompt_length: int = 0):
    """One denoising step of the official decoder, in place on ``x`` ``[B, L]``.

    ``forward(ids, attention_mask)`` returns the logits of positions ``region = (r0, r1)``. Predict every
    masked token there (Gumbel-max at ``o.params.temperature``), score the proposals (un-tempered softmax or
    uniform), and commit ``select(confidence, proposals)`` among the masked positions where ``allowed``
    ``[B, r1 - r0]`` is True. Returns ``(committed [B, r1 - r0] bool, nfe)``; as in the official code a
    position may be "committed" with the mask token itself (a model that proposes [MASK]): it stays
    masked and is decoded again, so ``committed`` excludes it.

    With :class:`dare.randomness.RowGenerators` the step works on the completion part of the region only
    (positions ``>= prompt_length``; prompt positions are never masked, so nothing there is committed):
    each row then draws ``[r1 - max(r0, prompt_length), V]`` noise values, a shape that does not depend on
    the batch's padded prompt length, and only rows with a masked position they may commit draw, so a row
    samples the same tokens in any batch. A ``torch.Generator``
    (or None) draws over the whole region, as the official code.

    :raises NonFiniteLogitsError: the model returned NaN/Inf logits.
    """
    r0, r1 = region
    p, tok, fastdllm = o.params, o.tokens, _fastdllm(o.params)
    logits, nfe = _step_logits(forward, x, attention_mask, prompt_index, o)
    require_finite_logits(logits, f"denoising step {step} (sampler 'llada')")
    skip = max(prompt_length - r0, 0) if isinstance(o.generator, RowGenerators) else 0
    if skip:
        committed, _ = _denoise_step(lambda ids, am: logits[:, skip:], x, attention_mask, prompt_index,
                                     (r0 + skip, r1), allowed[:, skip:], select, _without_cfg(o), step)
        pad = torch.zeros((x.shape[0], skip), dtype=torch.bool, device=x.device)
        return torch.cat([pad, committed], dim=1), nfe
    xr = x[:, r0:r1]
    mask_index = xr == tok.mask_id
    if p.logits_eos_inf:
        logits[:, :, tok.eos_id] = -torch.inf
    if isinstance(o.generator, RowGenerators):
        # only rows that can commit here draw (a row done with its block waits without consuming its generator)
        live = (mask_index & allowed).any(dim=1)
        gen = o.generator.rows(live)
        x0 = torch.argmax(logits, dim=-1)
        if p.temperature > 0 and bool(live.any()):  # at temperature 0 the noisy argmax is the argmax above
            x0[live] = torch.argmax(add_gumbel_noise(logits[live], p.temperature, gen), dim=-1)
    else:
        x0 = torch.argmax(add_gumbel_noise(logits, p.temperature, o.generator), dim=-1)
    if p.confidence_eos_eot_inf:
        # official: EOS/EOT may still be proposed but are committed last
        logits[:, :, tok.eos_id] = -torch.inf
        if tok.eot_id is not None:
            logits[:, :, tok.eot_id] = -torch.inf
    if isinstance(o.generator, RowGenerators) and p.remasking == "random":
        x0_p = torch.zeros(x0.shape, dtype=torch.float32, device=x0.device)
        if bool(live.any()):
            x0_p[live] = confidence_scores(logits[live], x0[live], p.remasking, gen, fastdllm)
    else:
        x0_p = confidence_scores(logits, x0, p.remasking, o.generator, fastdllm)
    x0 = torch.where(mask_index, x0, xr)
    conf = torch.where(mask_index & allowed, x0_p, torch.tensor(-torch.inf, dtype=x0_p.dtype, device=x0_p.device))
    transfer = select(conf, x0)
    xr[transfer] = x0[transfer]
    return transfer & (x0 != tok.mask_id), nfe


def _forward_for(logits_fn, cache: BlockKVCache | None, block: tuple[int, int], refresh: bool):
    """``(forward, region)`` of one step: the full sequence without a cache, the block with one."""
    if cache is None:
        return logits_fn, None
    start, end = block
    return (lambda ids, am: cache.block_logits(ids, am, start, end, refresh)), (start, end)


def release_window(cache: str, refresh: bool, start: int, end: int, length: int) -> tuple[int, int]:
    """The columns Fast-dLLM ranks at a cached fixed-schedule step of the block ``[start, end)``.

    NVlabs/Fast-dLLM ``llada/generate.py`` (``generate_with_prefix_cache``, ``generate_with_dual_cache``) calls
    ``get_transfer_index`` on the refresh step's logits of the whole sequence ``[0, length)`` and, at later
    steps, on the block plus the suffix ``[start, length)`` (prefix cache) or the block alone (dual cache), with
    ``-inf`` outside the block. ``torch.topk`` on CPU may pick another member of an exact tie at another width,
    so DARE ranks over the same columns (:func:`windowed_topk_transfer`).

    :param cache: ``"prefix"`` or ``"dual"``. :param refresh: the block's refresh (first) step.
    :returns: ``(w0, w1)`` with ``w0 <= start < end <= w1 <= length``.
    :raises ValueError: another cache mode.
    """
    if cache not in ("prefix", "dual"):
        raise ValueError(f"release_window needs cache prefix or dual, got {cache!r}")
    if refresh:
        return 0, length
    return (start, length) if cache == "prefix" else (start, end)


def windowed_topk_transfer(confidence: torch.Tensor, k: torch.Tensor, region: tuple[int, int],
                           window: tuple[int, int], first_real: torch.Tensor) -> torch.Tensor:
    """:func:`dare.sampling.topk_transfer` over the release's columns: ``confidence`` ``[B, r1 - r0]`` (float, -inf
    where a position may not be chosen) of columns ``region = (r0, r1)`` is placed in a row of ``-inf`` spanning
    ``window = (w0, w1)`` (:func:`release_window`), and row ``b`` is ranked from column ``max(first_real[b], w0)``:
    the release decodes one unpadded prompt, so a left-padded row's sequence starts at its first real token.
    Exact ties then break as the release's ``torch.topk`` breaks them.

    :param k: ``[B]`` int64 quota per row. :param first_real: ``[B]`` int64, each row's first non-padding column.
    :returns: ``[B, r1 - r0]`` bool transfer mask.
    """
    (r0, r1), (w0, w1) = region, window
    B = confidence.shape[0]
    if w0 == r0 and w1 == r1:
        return topk_transfer(confidence, k)
    wide = torch.full((B, w1 - w0), -torch.inf, dtype=confidence.dtype, device=confidence.device)
    wide[:, r0 - w0 : r1 - w0] = confidence
    transfer = torch.zeros_like(wide, dtype=torch.bool)
    for j in range(B):
        kj = int(k[j])
        if kj > 0:
            lo = max(int(first_real[j]) - w0, 0)
            _, idx = torch.topk(wide[j, lo:], k=kj)
            transfer[j, idx + lo] = True
    return transfer[:, r0 - w0 : r1 - w0]


def _first_real_column(attention_mask: torch.Tensor | None, B: int, prompt_length: int, device) -> torch.Tensor:
    """``[B]`` int64: each row's first non-padding column (0 without a mask; prompts are left-padded)."""
    if attention_mask is None:
        return torch.zeros(B, dtype=torch.long, device=device)
    return (prompt_length - attention_mask[:, :prompt_length].sum(dim=1)).long()


def _first_competing_column(x: torch.Tensor, prompt_length: int, o: DecodeOptions) -> int:
    """First column of ``x`` ``[B, L]`` whose logits an uncached step samples from.

    The official decoder samples (Gumbel noise, argmax, softmax) over the whole sequence, prompt included,
    although only masked positions can be committed. With per-row generators (:class:`RowGenerators`,
    DARE's keyed rollouts) the draws are restricted to the completion, ``prompt_length``: each row then
    draws ``[gen_length, V]`` values whatever the batch's padded prompt length (the contract of
    :mod:`dare.randomness`), and the prompt's sampling work is skipped (about half of it for a prompt as long as
    the completion). Tokens are unchanged in distribution; a prompt that contains the mask token keeps column 0
    (its masked positions compete, as in the official code). With a ``torch.Generator`` or the global RNG the
    official full-sequence draws are kept, so seeded results reproduce the official decoder.
    """
    if not isinstance(o.generator, RowGenerators) or prompt_length == 0:
        return 0
    return 0 if bool((x[:, :prompt_length] == o.tokens.mask_id).any()) else prompt_length


def _uncached_region(logits_fn, c0: int, length: int):
    """``(forward, region)`` of an uncached step whose proposals cover columns ``c0 .. length - 1``."""
    if c0 == 0:
        return logits_fn, (0, length)
    return (lambda ids, am: logits_fn(ids, am)[:, c0:]), (c0, length)


def _parallel_select(p, mask_id: int):
    """Fast-dLLM's rule (``p.threshold`` or ``p.factor``): proposals of the mask token are never candidates (they
    would not make progress)."""

    def select(conf, x0):
        conf = conf.masked_fill(x0 == mask_id, -torch.inf)
        if p.threshold is not None:
            return threshold_transfer(conf, p.threshold)
        return factor_transfer(conf, p.factor)

    return select


@torch.no_grad()
def decode(
    logits_fn: Callable[[torch.Tensor, torch.Tensor | None], torch.Tensor],
    prompt: torch.Tensor,
    attention_mask: torch.Tensor | None,
    options: DecodeOptions,
) -> tuple[torch.Tensor, torch.Tensor, int]:
    """The decoding loop over a logits function, with Fast-dLLM acceleration when asked (module docstring).

    :param logits_fn: ``(x [B, L] int64, attention_mask [B, L] | None) -> logits [B, L, V]`` aligned.
    :param prompt: ``[B, Lp]`` int64, left-padded.
    :param attention_mask: ``[B, Lp]`` (1 real, 0 pad) or None.
    :param options: :class:`~dare.sampling.options.DecodeOptions` with ``params`` a
        :class:`~dare_llada.params.LLaDASamplerParams` (``steps``, ``gen_length``, ``block_length``, ``temperature``,
        ``cfg_scale``, ``remasking``, ``logits_eos_inf``, ``confidence_eos_eot_inf``, ``cache``, ``threshold``,
        ``factor``), ``tokens`` (``mask_id``, ``eos_id``, ``eot_id``), the ``generator`` and, with ``cache``
        ``prefix``/``dual`` (:mod:`dare.sampling.kv_cache`), ``kv_logits``: ``(x, attention_mask, past, start, end,
        use_cache) -> (logits, cache)`` (a family's ``kv_logits`` bound to a model). ``threshold``: confidence
        threshold of parallel decoding (:func:`dare.sampling.threshold_transfer`); ``factor``: Fast-dLLM's factor
        rule (:func:`dare.sampling.factor_transfer`); at most one.
    :returns: ``(x [B, Lp + gen_length], unmask_step [B, gen_length] int64, nfe)``.
    :raises ValueError: ``gen_length % block_length != 0``, ``steps % num_blocks != 0``, an unknown cache,
        a cache without ``kv_logits``, or both ``threshold`` and ``factor``.
    :raises NonFiniteLogitsError: the model returned NaN/Inf logits.
    """
    p, mask_id = options.params, options.tokens.mask_id
    B, Lp = prompt.shape
    x = torch.full((B, Lp + p.gen_length), mask_id, dtype=torch.long, device=prompt.device)
    x[:, :Lp] = prompt
    _check_acceleration(options)
    # the official prompt index: every position not holding the mask token
    if _parallel(p):
        return _run_parallel(logits_fn, x, x != mask_id, Lp, attention_mask, options)
    return _run_schedule(logits_fn, x, x != mask_id, Lp, attention_mask, (0, p.steps), options)


def _check_acceleration(options: DecodeOptions) -> None:
    """Fast-dLLM's settings of ``options.params`` (``cache``, ``threshold``, ``factor``) and ``options.kv_logits``.

    :raises ValueError: an unknown cache, a cache without ``kv_logits``, or both ``threshold`` and ``factor``.
    """
    p = options.params
    if p.cache not in CACHE_MODES:
        raise ValueError(f"cache must be one of {', '.join(CACHE_MODES)}, got {p.cache!r}")
    if p.cache != "none" and options.kv_logits is None:
        raise ValueError(f"cache={p.cache!r} needs kv_logits (the family's cached forward)")
    if p.threshold is not None and p.factor is not None:
        raise ValueError("give at most one of threshold and factor")


def _block_cache(options: DecodeOptions) -> BlockKVCache | None:
    """The KV cache of one decode call (``params.cache``; None for ``none``)."""
    cache = options.params.cache
    return None if cache == "none" else BlockKVCache(options.kv_logits, cache)


@torch.no_grad()
def denoise_steps(
    logits_fn: Callable[[torch.Tensor, torch.Tensor | None], torch.Tensor],
    state: torch.Tensor,
    prompt_length: int,
    attention_mask: torch.Tensor | None,
    options: DecodeOptions,
    start_step: int = 0,
    end_step: int | None = None,
) -> tuple[torch.Tensor, torch.Tensor, int]:
    """Global steps ``start_step .. end_step - 1`` of :func:`decode`'s schedule, from an intermediate state.

    The partial-denoising entry point of tree rollouts (d-TreeRPO, arXiv 2512.09675; DARE
    ``dtreerpo_llada_rollout._tree_generate_partial``). Global step ``s`` belongs to block
    ``s // steps_per_block``; on entering a block (its first step, or ``start_step`` in its middle) the
    quota is recomputed over the block's remaining steps from its remaining masks, as DARE does. For a
    state this schedule produced, that equals the quota :func:`decode` computed at the block's start
    (``num_transfer_tokens`` front-loads the remainder), so ``denoise_steps(s0 -> s1)`` followed by
    ``denoise_steps(s1 -> s2)`` with the same generator reproduces ``decode`` exactly (unless the model
    proposes the mask token itself, which leaves a committed position masked and changes the recomputed
    quota; a trained model gives it ~0 probability). The step body is
    :func:`decode`'s (:func:`_denoise_step`). With a ``cache`` the KV cache is refreshed on entering a
    block, so a split inside a block refreshes once more than :func:`decode` does (exact where the cache
    is exact, :mod:`dare.sampling.kv_cache`). Parallel decoding (``threshold``/``factor``) has no fixed
    schedule to resume and is not offered here.

    :param logits_fn: ``(x [B, L] int64, attention_mask [B, L] | None) -> logits [B, L, V]`` aligned
        (e.g. ``family.logits`` bound to a model, so any full-attention family decodes).
    :param state: ``[B, prompt_length + gen_length]`` int64, prompt then partly decoded completion.
    :param attention_mask: ``[B, prompt_length]`` (1 real, 0 pad) or None.
    :param options: as :func:`decode`'s (``threshold``/``factor`` unset).
    :param end_step: ``None`` = ``steps``.
    :returns: ``(x [B, L] new state, unmask_step [B, gen_length] int64 (-1 outside this call), nfe)``.
    :raises ValueError: block/step divisibility as :func:`decode`, a state of the wrong length,
        ``0 <= start_step <= end_step <= steps`` violated, or ``threshold``/``factor`` set.
    """
    p = options.params
    steps, gen_length = p.steps, p.gen_length
    if p.threshold is not None or p.factor is not None:
        raise ValueError("denoise_steps resumes a fixed step schedule, which threshold/factor parallel decoding does "
                         "not have; unset threshold and factor")
    end_step = steps if end_step is None else end_step
    if not 0 <= start_step <= end_step <= steps:
        raise ValueError(f"need 0 <= start_step ({start_step}) <= end_step ({end_step}) <= steps ({steps})")
    B, L = state.shape
    if L != prompt_length + gen_length:
        raise ValueError(f"state has {L} positions, expected prompt_length + gen_length = {prompt_length + gen_length}")
    x = state.clone()
    prompt_index = torch.zeros_like(x, dtype=torch.bool)
    prompt_index[:, :prompt_length] = True
    _check_acceleration(options)
    return _run_schedule(logits_fn, x, prompt_index, prompt_length, attention_mask, (start_step, end_step), options)


def _blocks(gen_length: int, block_length: int) -> int:
    if gen_length % block_length != 0:
        raise ValueError(f"gen_length ({gen_length}) must be a multiple of block_length ({block_length})")
    return gen_length // block_length


def _full_mask(attention_mask: torch.Tensor | None, B: int, gen_length: int, device) -> torch.Tensor | None:
    if attention_mask is None:
        return None
    return torch.cat([attention_mask, torch.ones((B, gen_length), dtype=attention_mask.dtype, device=device)], dim=-1)


def _run_schedule(logits_fn, x: torch.Tensor, prompt_index: torch.Tensor, prompt_length: int,
                  attention_mask: torch.Tensor | None, span: tuple[int, int],
                  options: DecodeOptions) -> tuple[torch.Tensor, torch.Tensor, int]:
    """Global steps ``span = (start_step, end_step)``, ``start_step .. end_step - 1``, of the semi-AR schedule of
    ``options.params`` (``steps``, ``gen_length``, ``block_length``) on ``x`` (modified in place).

    Global step ``s`` belongs to block ``s // steps_per_block``; on entering a block the quota is
    computed over the block's remaining steps from its remaining masks (``num_transfer_tokens``).
    Without a cache every step runs the whole sequence and (official) any masked position before the
    block's end competes; with one, the block's first step refreshes the cache and only the block's
    positions compete.
    :param attention_mask: ``[B, prompt_length]`` or None; extended with ones over the completion.
    :returns: ``(x, unmask_step [B, gen_length] int64 (-1 where nothing was committed), nfe)``.
    :raises ValueError: ``gen_length % block_length != 0`` or ``steps % num_blocks != 0``.
    """
    p, mask_id = options.params, options.tokens.mask_id
    (start_step, end_step), steps, gen_length, block_length = span, p.steps, p.gen_length, p.block_length
    num_blocks = _blocks(gen_length, block_length)
    if steps % num_blocks != 0:
        raise ValueError(f"steps ({steps}) must be a multiple of the number of blocks ({num_blocks})")
    spb = steps // num_blocks
    B, Lp, L = x.shape[0], prompt_length, x.shape[1]
    attention_mask = _full_mask(attention_mask, B, gen_length, x.device)
    cache = _block_cache(options)
    pos = torch.arange(L, device=x.device)[None]
    c0 = _first_competing_column(x, Lp, options)
    first_real = _first_real_column(attention_mask, B, Lp, x.device)
    traj = Trajectory(B, gen_length, device=x.device)
    nfe = 0
    quota, first = None, 0
    for s in range(start_step, end_step):
        nb, i = divmod(s, spb)
        start, end = Lp + nb * block_length, Lp + (nb + 1) * block_length
        entering = quota is None or i == 0
        if entering:
            quota, first = num_transfer_tokens(x[:, start:end] == mask_id, spb - i), i
        forward, region = _forward_for(logits_fn, cache, (start, end), entering)
        k = quota[:, i - first]
        if region is None:
            forward, region = _uncached_region(logits_fn, c0, L)
            allowed = pos[:, c0:] < end
            select = lambda conf, x0, k=k: topk_transfer(conf, k)  # noqa: E731
        else:
            allowed = torch.ones((1, end - start), dtype=torch.bool, device=x.device)
            window = release_window(p.cache, entering, start, end, L)
            select = lambda conf, x0, k=k, w=window: windowed_topk_transfer(  # noqa: E731
                conf, k, region, w, first_real)
        committed, n = _denoise_step(forward, x, attention_mask, prompt_index, region, allowed, select, options, s,
                                     Lp)
        nfe += n
        traj.record(_completion_part(committed, region, Lp, gen_length), s)
    return x, traj.unmask_step, nfe


def _completion_part(committed: torch.Tensor, region: tuple[int, int], prompt_length: int, gen_length: int):
    """``[B, gen_length]`` bool from ``committed`` ``[B, r1 - r0]`` over positions ``region``."""
    r0, r1 = region
    out = torch.zeros((committed.shape[0], gen_length), dtype=torch.bool, device=committed.device)
    lo = max(r0, prompt_length)
    out[:, lo - prompt_length : r1 - prompt_length] = committed[:, lo - r0 :]
    return out


def _run_parallel(logits_fn, x: torch.Tensor, prompt_index: torch.Tensor, prompt_length: int,
                  attention_mask: torch.Tensor | None,
                  options: DecodeOptions) -> tuple[torch.Tensor, torch.Tensor, int]:
    """Fast-dLLM Algorithm 1: each block is denoised until none of its positions is masked, every step
    committing the positions the threshold/factor rule picks (at least one per row with a masked
    position, only inside the block). A row whose block is done waits, committing nothing, while the
    others finish theirs. A block gets at most ``block_length`` steps (only a model proposing the mask
    token everywhere needs more; its positions then stay masked, ``unmask_step`` -1), so a token committed
    at the block's ``i``-th step gets ``unmask_step = nb * block_length + i`` (block ``nb``): the row's
    own commit order, numbered independently of the other rows in the batch (a batch-wide step counter
    would shift a row's later blocks by how long its batch mates took, so trajectory replay's step groups
    would depend on the batch and the process count).

    :returns: ``(x, unmask_step [B, gen_length] int64, nfe)``; ``nfe`` = steps run (x2 with CFG).
    """
    p, mask_id = options.params, options.tokens.mask_id
    gen_length, block_length = p.gen_length, p.block_length
    num_blocks = _blocks(gen_length, block_length)
    B, Lp, L = x.shape[0], prompt_length, x.shape[1]
    attention_mask = _full_mask(attention_mask, B, gen_length, x.device)
    cache = _block_cache(options)
    pos = torch.arange(L, device=x.device)[None]
    c0 = _first_competing_column(x, Lp, options)
    select = _parallel_select(p, mask_id)
    traj = Trajectory(B, gen_length, device=x.device)
    nfe = 0
    for nb in range(num_blocks):
        start, end = Lp + nb * block_length, Lp + (nb + 1) * block_length
        for i in range(block_length):
            if not bool((x[:, start:end] == mask_id).any()):
                break
            forward, region = _forward_for(logits_fn, cache, (start, end), i == 0)
            if region is None:
                forward, region = _uncached_region(logits_fn, c0, L)
                allowed = (pos[:, c0:] >= start) & (pos[:, c0:] < end)
            else:
                allowed = torch.ones((1, end - start), dtype=torch.bool, device=x.device)
            step = nb * block_length + i
            committed, n = _denoise_step(forward, x, attention_mask, prompt_index, region, allowed, select, options,
                                         step, Lp)
            nfe += n
            traj.record(_completion_part(committed, region, Lp, gen_length), step)
    return x, traj.unmask_step, nfe


def decode_options(mask_id: int = 126336, eos_id: int = 126081, eot_id: int | None = 126348, generator=None,
                   kv_logits: Callable | None = None, **settings) -> DecodeOptions:
    """:class:`~dare.sampling.options.DecodeOptions` for :func:`decode` from keyword settings
    (:class:`~dare_llada.params.LLaDASamplerParams` fields; unnamed ones take its defaults), with LLaDA-8B's special
    ids by default (``pad_id`` = ``eos_id``). Built unvalidated (:meth:`DecodeOptions.of`): :func:`decode` raises
    the official decoder's errors."""
    tokens = SpecialTokens(mask_id=mask_id, eos_id=eos_id, pad_id=eos_id, eot_id=eot_id)
    return DecodeOptions.of(LLaDASamplerParams, tokens, generator, kv_logits, **settings)


def generate(
    model,
    prompt: torch.Tensor,
    attention_mask: torch.Tensor | None = None,
    steps: int = 128,
    gen_length: int = 128,
    block_length: int = 128,
    temperature: float = 0.0,
    cfg_scale: float = 0.0,
    remasking: str = "low_confidence",
    mask_id: int = 126336,
    logits_eos_inf: bool = False,
    confidence_eos_eot_inf: bool = False,
) -> torch.Tensor:
    """Drop-in for the official ``generate(model, prompt, ...)``: returns ``x`` ``[B, Lp + gen_length]``.

    Stochastic parts draw from the global RNG, as the official code does.
    """
    options = decode_options(
        mask_id, getattr(model.config, "eos_token_id", 126081) or 126081, steps=steps, gen_length=gen_length,
        block_length=block_length, temperature=temperature, cfg_scale=cfg_scale, remasking=remasking,
        logits_eos_inf=logits_eos_inf, confidence_eos_eot_inf=confidence_eos_eot_inf,
    )
    x, _, _ = decode(lambda ids, am: model(ids, attention_mask=am).logits, prompt, attention_mask, options)
    return x
