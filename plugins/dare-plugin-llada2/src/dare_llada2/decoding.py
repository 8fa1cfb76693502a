"""LLaDA2's official block decoder (LLaDA2.0 threshold decoding, LLaDA2.1 token editing), batched, with a KV cache.

Source: ``LLaDA2MoeModelLM.generate`` of the inclusionAI releases LLaDA2.0-mini and LLaDA2.1-mini
(``modeling_llada2_moe.py``; docs/model-families.md §5.6). Layout: ``x = [prompt | mask ...]``
cut into blocks of ``block_length`` counted from the first prompt token; the first visited block may
hold the prompt's tail. Each block is denoised with the block-causal mask, then the next one.

Per denoising step the active block's logits give a proposal ``x0`` and its probability ``p``
(:func:`dare.sampling.sample_tokens` with the official rule: greedy at temperature 0, else temperature →
top-k → top-p → multinomial).

* **LLaDA2.0** (``variant="2.0"``): ``steps = min(steps, gen_length // minimal_topk)`` steps per block
  with quota ``q_s`` (``block_length // steps``, the first ``block_length % steps`` steps one more,
  :func:`dare.sampling.block_quota`). Every masked position with ``p > threshold`` is committed if
  there are at least ``q_s`` of them, else the ``min(q_s, #masks)`` most confident. With
  ``eos_early_stop``, a step that commits EOS ends the row when no mask precedes the first generated
  EOS. After each block the row ends if its generated part holds an EOS (always, as the release).
* **LLaDA2.1** (``variant="2.1"``): per block, loop until the block has no mask and no edit happened
  (or ``max_post_steps`` mask-free iterations passed): masks with ``p > threshold`` are committed if
  there are at least ``num_to_transfer`` of them, else the ``num_to_transfer`` most confident;
  **token editing** rewrites already-decoded (non-prompt) positions of the block whose new proposal
  differs with ``p > editing_threshold``. With ``eos_early_stop`` the row ends after a block when its
  generated part is mask-free and holds an EOS. ``steps`` is not used (as the release).

Deliberate choices (each documented where it applies):

* temperature 0 is **greedy** in both variants (2.1's rule). The 2.0 release samples at T = 1 when
  ``temperature=0`` (its sampler never special-cases 0); ``official_t0_sampling=True`` reproduces that.
* 2.1's release passes the block mask as a **0/1 additive bias** (no ``log``), a soft mask that lets
  earlier rows attend the active block with weight ``e^0`` vs ``e^1``. DARE uses the intended hard
  block-causal mask (the 2.0 semantics, and what dllm's llada21 sampler does);
  ``official_soft_mask=True`` reproduces the release (recompute only: the prefix then depends on the
  active block, so a cache would be wrong).
* the release recomputes the whole window ``x[:, :W]`` every step. ``use_cache=True`` (default)
  forwards only the active block against a KV cache of the committed blocks; one extra forward per
  block stores the finished block (``extras["cache_forwards"]``; ``nfe`` counts denoising forwards
  only, equal in both modes). Outputs equal the recompute path.
* batches: each row keeps the release's single-sequence layout. Rows are shifted by whole blocks so
  their first active blocks line up; the shift is hidden from attention (padding keys masked) and
  from positions (``position_ids`` count from each row's first token). A row therefore decodes exactly
  as it would alone.
* NaN/Inf logits raise :class:`dare.sampling.NonFiniteLogitsError` naming the block and step (the release
  would commit token 0, the argmax of NaN, at temperature 0).
* the model is called only through the family's KV-cache interface
  (:meth:`dare.modeling.BlockDiffusionFamily.new_cache` / ``block_logits``; the canvas is
  :func:`dare.sampling.block_canvas`), so the decoder runs any block-diffusion family.
* the 2.0 early stop looks for the first EOS in the *generated* part (the release scans the whole
  window, prompt included, which only differs when a prompt holds EOS).
* a 2.1 iteration that changes nothing (masks remain but every committed proposal is the mask token,
  and no edit) ends the block; the release would repeat it forever at temperature 0.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import torch

from dare.components import SpecialTokens
from dare.diffusion.block import block_causal_mask
from dare.errors import DareError
from dare.modeling.block_family import BlockDiffusionFamily
from dare.sampling import (
    BlockCanvas,
    block_canvas,
    block_quota,
    left_padding_problem,
    require_finite_logits,
    row_index,
    sample_tokens,
    topk_transfer,
)
from dare.randomness import RowGenerators
from dare.sampling.options import DecodeOptions
from dare_llada2.family import LLaDA2Family
from dare_llada2.params import LLaDA2SamplerParams

__all__ = ["decode", "decode_options", "BlockDecoding", "generate", "generate_v21"]


# =========================================================================== commit rule
def _select(confidence: torch.Tensor, quota: torch.Tensor, eligible: torch.Tensor, threshold: float) -> torch.Tensor:
    """The release's transfer rule per row: every eligible position with confidence ``> threshold`` when
    there are at least ``quota`` of them, else the ``min(quota, #eligible)`` most confident.

    :param confidence: ``[B, bl]`` float (``-inf`` where not eligible); :param quota: ``[B]`` int64;
    :param eligible: ``[B, bl]`` bool. :returns: ``[B, bl]`` bool.
    """
    high = (confidence > threshold) & eligible
    take_high = high.sum(dim=1) >= quota
    k = torch.where(take_high, torch.zeros_like(quota), torch.minimum(quota, eligible.sum(dim=1)))
    return torch.where(take_high[:, None], high, topk_transfer(confidence, k))


# =========================================================================== forwards
class _BlockForward:
    """Active-block logits through the family's KV-cache interface: recomputing the window ``[0, W)`` each step
    (the release), or one block against a KV cache of committed blocks. Both see the same keys under the same
    (hard) mask."""

    def __init__(self, family: BlockDiffusionFamily, model, canvas: BlockCanvas, use_cache: bool, soft_mask: bool):
        self.family = family
        self.model = model
        self.c = canvas
        self.bl = canvas.block_length
        self.soft_mask = soft_mask
        self.cache = family.new_cache(model) if use_cache else None
        self.cache_forwards = 0

    def _window_mask(self, end: int) -> torch.Tensor:
        """``[B|1, 1, W, W]``: the canvas's block-causal prefix mask, or LLaDA2.1's 0/1 additive soft mask
        (``-inf`` on shift keys other than the query itself)."""
        if not self.soft_mask:
            return self.c.prefix_mask(end)
        bc = block_causal_mask(end, self.bl, device=self.c.x.device)
        reach = self.c.valid[:, None, :end] | torch.eye(end, dtype=torch.bool, device=bc.device)[None]
        return torch.where(reach, bc.float(), float("-inf"))[:, None]

    def _store(self, start: int, end: int, mask) -> None:
        self.family.block_logits(
            self.model, self.c.x[:, start:end], self.c.position_ids[:, start:end], mask, self.cache, True
        )
        self.cache_forwards += 1

    def prefill(self) -> None:
        """Cache the blocks before the first active one (prompt blocks and the batch shift)."""
        end = self.c.first_block * self.bl
        if self.cache is not None and end > 0:
            self._store(0, end, self.c.prefix_mask(end))

    def logits(self, b: int, step: int) -> torch.Tensor:
        """``[B, bl, V]`` logits of block ``b`` given everything before it (``step``: this block's forward
        count, for the error message).

        :raises dare.sampling.NonFiniteLogitsError: the model returned NaN/Inf logits.
        """
        s, e = b * self.bl, (b + 1) * self.bl
        if self.cache is not None:
            logits = self.family.block_logits(
                self.model, self.c.x[:, s:e], self.c.position_ids[:, s:e], self.c.key_mask(e), self.cache, False
            )
        else:
            logits = self.family.block_logits(
                self.model, self.c.x[:, :e], self.c.position_ids[:, :e], self._window_mask(e), None, False, self.bl
            )
        require_finite_logits(logits, f"completion block {b - self.c.first_block}, denoising step {step} (0-based)")
        return logits

    def commit(self, b: int) -> None:
        """Append block ``b``'s final keys/values to the cache (cache mode only)."""
        if self.cache is not None:
            self._store(b * self.bl, (b + 1) * self.bl, self.c.key_mask((b + 1) * self.bl))


# =========================================================================== the decoding loop
@dataclass
class BlockDecoding:
    """What :func:`decode` returns.

    * ``x``: ``[B, T]`` the canvas (rows shifted by ``offset`` whole blocks, see the module docstring);
    * ``gen_start``/``offset``: ``[B]`` int64 canvas index of the first completion token / the shift;
    * ``unmask_step``: ``[B, gen_length]`` int64 per-row denoising step (0-based, counting the forwards the
      row took part in) that committed each completion position from the mask; -1 if never;
    * ``nfe``: denoising forwards; ``steps``: the most steps a row took; ``edits``: ``[B]`` 2.1 token edits;
    * ``early_end``: ``[B]`` canvas index of the EOS at which a 2.0 early stop ended a row, else -1;
    * ``cache_forwards``: forwards that only filled the KV cache.
    """

    x: torch.Tensor
    gen_start: torch.Tensor
    offset: torch.Tensor
    unmask_step: torch.Tensor
    nfe: int
    steps: int
    edits: torch.Tensor
    early_end: torch.Tensor
    cache_forwards: int
    gen_length: int

    def completions(self) -> torch.Tensor:
        """``[B, gen_length]`` completion tokens of each row (in the canvas, as decoded)."""
        idx = self.gen_start[:, None] + torch.arange(self.gen_length, device=self.x.device)[None]
        return torch.gather(self.x, 1, idx)


class _State:
    """Per-row bookkeeping shared by both variants."""

    def __init__(self, canvas: BlockCanvas, gen_length: int):
        B = canvas.x.shape[0]
        device = canvas.x.device
        self.c = canvas
        self.G = gen_length
        self.unmask_step = torch.full((B, gen_length), -1, dtype=torch.long, device=device)
        self.row_steps = torch.zeros(B, dtype=torch.long, device=device)
        self.done = torch.zeros(B, dtype=torch.bool, device=device)
        self.edits = torch.zeros(B, dtype=torch.long, device=device)
        self.early_end = torch.full((B,), -1, dtype=torch.long, device=device)
        self.nfe = 0

    def completion_index(self, start: int, width: int) -> torch.Tensor:
        """``[B, width]`` completion index of canvas positions ``start..start+width-1`` (may be out of range)."""
        return self.c.completion_index(start, width)

    def record(self, committed: torch.Tensor, start: int) -> None:
        """Mark ``committed`` (``[B, bl]`` block positions) with each row's current step.

        :raises RuntimeError: a position is committed twice without an edit re-masking it (a decoder bug).
        """
        comp = self.completion_index(start, committed.shape[1])
        rows, cols = (committed & (comp >= 0) & (comp < self.G)).nonzero(as_tuple=True)
        pos = comp[rows, cols]
        if bool((self.unmask_step[rows, pos] >= 0).any()):
            raise RuntimeError("a completion position was committed twice")
        self.unmask_step[rows, pos] = self.row_steps[rows]

    def forget(self, remasked: torch.Tensor, start: int) -> None:
        """Positions an edit turned back into the mask token are uncommitted."""
        comp = self.completion_index(start, remasked.shape[1])
        hit = remasked & (comp >= 0) & (comp < self.G)
        rows, cols = hit.nonzero(as_tuple=True)
        self.unmask_step[rows, comp[rows, cols]] = -1

    def generated(self, row: int, end: int) -> torch.Tensor:
        """Row ``row``'s generated tokens in canvas ``[gen_start, end)``."""
        return self.c.x[row, int(self.c.gen_start[row]) : end]


def _propose(logits, live, block, sampling) -> tuple[torch.Tensor, torch.Tensor]:
    """Proposals ``x0`` and probabilities ``p`` ``[B, bl]`` for the ``live`` rows (others keep ``block``, p = 0).

    Only live rows draw; with :class:`dare.randomness.RowGenerators` each draws its ``bl`` tokens from its
    own generator, so a row's draws do not depend on the other rows of the batch."""
    B, bl, V = logits.shape
    rows = row_index(live, bl) if isinstance(sampling.get("generator"), RowGenerators) else None
    tokens, probs = sample_tokens(logits[live].reshape(-1, V), rows=rows, **sampling)  # official rule
    x0 = block.clone()
    p = torch.zeros(block.shape, dtype=probs.dtype, device=block.device)
    x0[live] = tokens.view(-1, bl)
    p[live] = probs.view(-1, bl)
    return x0, p


def _denoise_v20(runner, st: _State, b: int, in_block, schedule, sampling, options: DecodeOptions):
    """LLaDA2.0's steps on block ``b`` for the ``in_block`` rows (module docstring), early stop included
    (``options.params``: ``threshold``, ``eos_early_stop``; ``options.tokens``: ``mask_id``, ``eos_id``)."""
    p, mask_id, eos_id = options.params, options.tokens.mask_id, options.tokens.eos_id
    bl = runner.bl
    s, e = b * bl, (b + 1) * bl
    for step, quota in enumerate(schedule):
        block = st.c.x[:, s:e]
        masked = block == mask_id
        live = in_block & ~st.done & masked.any(dim=1)
        if not live.any():
            return
        x0, prob = _propose(runner.logits(b, step), live, block, sampling)
        st.nfe += 1
        conf = torch.where(masked, prob, torch.full_like(prob, float("-inf")))
        eligible = masked & live[:, None]
        transfer = _select(conf, torch.full_like(st.row_steps, quota), eligible, p.threshold) & live[:, None]
        st.c.x[:, s:e] = torch.where(transfer, x0, block)
        st.record(transfer & (x0 != mask_id), s)
        st.row_steps += live.long()
        if p.eos_early_stop:
            for row in (transfer & (x0 == eos_id)).any(dim=1).nonzero().flatten().tolist():
                gen = st.generated(row, e)
                eos = (gen == eos_id).nonzero().flatten()
                if len(eos) and bool((gen[: int(eos[0])] != mask_id).all()):
                    st.done[row] = True
                    st.early_end[row] = st.c.gen_start[row] + eos[0]


def _denoise_v21(runner, st: _State, b: int, in_block, sampling, options: DecodeOptions):
    """LLaDA2.1's mask-transfer + token-editing loop on block ``b`` for the ``in_block`` rows (module docstring;
    ``options.params``: ``threshold``, ``editing_threshold``, ``max_post_steps``, ``num_to_transfer``)."""
    p, mask_id = options.params, options.tokens.mask_id
    bl = runner.bl
    s, e = b * bl, (b + 1) * bl
    finished = ~in_block
    post_steps = torch.zeros_like(st.row_steps)
    prompt_in_block = st.completion_index(s, bl) < 0
    for step in itertools.count():
        old = st.c.x[:, s:e].clone()
        masked = old == mask_id
        no_mask = ~masked.any(dim=1)
        post_steps += (no_mask & ~finished).long()
        finished |= post_steps > p.max_post_steps
        live = ~finished
        if not live.any():
            return
        x0, prob = _propose(runner.logits(b, step), live, old, sampling)
        st.nfe += 1
        conf = torch.where(masked, prob, torch.full_like(prob, float("-inf")))
        eligible = masked & live[:, None]
        unmask = _select(conf, torch.full_like(st.row_steps, p.num_to_transfer), eligible, p.threshold) & eligible
        edit = live[:, None] & ~masked & ~prompt_in_block & (prob > p.editing_threshold) & (x0 != old)
        st.c.x[:, s:e] = torch.where(unmask | edit, x0, old)
        st.record(unmask & (x0 != mask_id), s)
        st.forget(edit & (x0 == mask_id), s)
        st.edits += edit.sum(dim=1)
        st.row_steps += live.long()
        # the release ends a block after a mask-free iteration without edits. An iteration with masks that
        # commits only mask-token proposals changes nothing either: the release would repeat it (forever at
        # temperature 0); DARE ends the block there, leaving those positions masked.
        progress = (unmask & (x0 != mask_id)).any(dim=1) | edit.any(dim=1)
        finished |= live & ~progress


def _stop_after_block(st: _State, in_block, end: int, options: DecodeOptions) -> None:
    """2.0: a row ends once its generated part holds EOS. 2.1 (only with ``eos_early_stop``): once it is
    also mask-free (``options.params.variant``)."""
    p, mask_id, eos_id = options.params, options.tokens.mask_id, options.tokens.eos_id
    if p.variant == "2.1" and not p.eos_early_stop:
        return
    for row in (in_block & ~st.done).nonzero().flatten().tolist():
        gen = st.generated(row, end)
        if bool((gen == eos_id).any()) and (p.variant == "2.0" or not bool((gen == mask_id).any())):
            st.done[row] = True


@torch.no_grad()
def decode(
    model,
    prompt_ids: torch.Tensor,
    attention_mask: torch.Tensor | None,
    options: DecodeOptions,
    family: BlockDiffusionFamily | None = None,
) -> BlockDecoding:
    """Block-decode ``gen_length`` tokens after each (left-padded) prompt (module docstring).

    ``model`` is called through ``family``'s KV-cache interface
    (:meth:`dare.modeling.BlockDiffusionFamily.block_logits` / ``new_cache``; default :class:`LLaDA2Family`,
    i.e. ``LLaDA2MoeModelLM``'s ``cache=``/``use_cache=`` arguments).

    :param prompt_ids: ``[B, Lp]`` int64; :param attention_mask: ``[B, Lp]`` (1 real, 0 left padding).
    :param options: :class:`~dare.sampling.options.DecodeOptions` with ``params`` a
        :class:`~dare_llada2.params.LLaDA2SamplerParams` whose ``block_length`` is set (``variant``, ``gen_length``,
        ``block_length``, ``steps``, ``threshold``, ``temperature``, ``top_k``, ``top_p``, ``minimal_topk``,
        ``eos_early_stop``, ``editing_threshold``, ``max_post_steps``, ``num_to_transfer``, ``use_cache``,
        ``official_soft_mask``, ``official_t0_sampling``), ``tokens`` (``mask_id``, ``eos_id``, ``pad_id``) and the
        ``generator``.
    :raises DareError: invalid settings (non-positive sizes, a negative temperature, ``official_soft_mask`` with
        ``use_cache``, ``num_to_transfer < 1``, ``gen_length // minimal_topk == 0``, a mask that is not left
        padding), or a model that does not fill the cache.
    :raises dare.sampling.NonFiniteLogitsError: the model returned NaN/Inf logits (naming block and step).
    """
    p, tok = options.params, options.tokens
    if p.block_length is None:
        raise DareError("block_length is not set: give it (the sampler takes the model's training block size)")
    if p.gen_length <= 0 or p.block_length <= 0:
        raise DareError(f"gen_length ({p.gen_length}) and block_length ({p.block_length}) must be positive")
    if p.variant not in ("2.0", "2.1"):
        raise DareError(f"variant must be '2.0' or '2.1', got {p.variant!r}")
    if p.temperature < 0:
        raise DareError(f"temperature must be >= 0 (0 = greedy), got {p.temperature}")
    problem = left_padding_problem(prompt_ids, attention_mask)
    if problem:
        raise DareError(problem)
    if p.official_soft_mask and p.use_cache:
        raise DareError("official_soft_mask needs use_cache: false (under the 0/1 mask the prefix attends the active "
                        "block)")
    if p.variant == "2.1" and p.num_to_transfer < 1:
        raise DareError(f"num_to_transfer must be at least 1, got {p.num_to_transfer}")
    if p.minimal_topk < 1:
        raise DareError(f"minimal_topk must be at least 1, got {p.minimal_topk}")
    steps = min(p.steps, p.gen_length // p.minimal_topk)
    if p.variant == "2.0" and steps <= 0:
        raise DareError(f"steps ({steps}) must be positive: check steps and gen_length // minimal_topk")
    schedule = block_quota(p.block_length, steps) if p.variant == "2.0" else []
    # the 2.0 release's sampler never special-cases 0: it samples at T = 1
    temperature = 1.0 if p.temperature == 0 and p.official_t0_sampling else p.temperature
    sampling = dict(temperature=temperature, top_k=p.top_k, top_p=p.top_p, generator=options.generator)

    canvas = block_canvas(prompt_ids, attention_mask, gen_length=p.gen_length, block_length=p.block_length,
                          mask_id=tok.mask_id, pad_id=tok.pad_id)
    runner = _BlockForward(family or LLaDA2Family(), model, canvas, p.use_cache, p.official_soft_mask)
    st = _State(canvas, p.gen_length)
    runner.prefill()
    for b in range(canvas.first_block, canvas.num_blocks):
        in_block = ~st.done & (b < canvas.row_blocks)
        if p.variant == "2.0":
            _denoise_v20(runner, st, b, in_block, schedule, sampling, options)
        else:
            _denoise_v21(runner, st, b, in_block, sampling, options)
        _stop_after_block(st, in_block, (b + 1) * p.block_length, options)
        if not (~st.done & (b + 1 < canvas.row_blocks)).any():
            break
        runner.commit(b)
    return BlockDecoding(
        x=canvas.x,
        gen_start=canvas.gen_start,
        offset=canvas.offset,
        unmask_step=st.unmask_step,
        nfe=st.nfe,
        steps=int(st.row_steps.max()) if len(st.row_steps) else 0,
        edits=st.edits,
        early_end=st.early_end,
        cache_forwards=runner.cache_forwards,
        gen_length=p.gen_length,
    )


def decode_options(mask_id: int = 156895, eos_id: int = 156892, pad_id: int | None = None, generator=None,
                   **settings) -> DecodeOptions:
    """:class:`~dare.sampling.options.DecodeOptions` for :func:`decode` from keyword settings
    (:class:`~dare_llada2.params.LLaDA2SamplerParams` fields; unnamed ones take its defaults, ``block_length`` 32),
    with LLaDA2.0's special ids by default (``pad_id`` None = ``eos_id``). Built unvalidated
    (:meth:`DecodeOptions.of`): :func:`decode` raises the errors its checks name."""
    settings.setdefault("block_length", 32)
    tokens = SpecialTokens(mask_id=mask_id, eos_id=eos_id, pad_id=eos_id if pad_id is None else pad_id)
    return DecodeOptions.of(LLaDA2SamplerParams, tokens, generator, **settings)


# =========================================================================== the release's generate
def _official_return(res: BlockDecoding, eos_id: int) -> torch.Tensor:
    """The release's return value for one row: after a 2.0 early stop ``x[:, :eos + 1]`` **with the prompt**
    (a release quirk), otherwise the generation up to and including the first EOS (all ``gen_length``
    tokens when there is none)."""
    if int(res.early_end[0]) >= 0:
        return res.x[:1, int(res.offset[0]) : int(res.early_end[0]) + 1]
    gen = res.completions()[:1]
    eos = (gen[0] == eos_id).nonzero().flatten()
    return gen[:, : int(eos[0]) + 1] if len(eos) else gen


def _single_row(inputs: torch.Tensor) -> torch.Tensor:
    if inputs.dim() != 2 or inputs.shape[0] != 1:
        raise DareError(
            f"generate() mirrors the release and takes one prompt [1, Lp], got {list(inputs.shape)}; "
            "decode batches with LLaDA2Sampler or decode()"
        )
    return inputs


def generate(
    model,
    inputs: torch.Tensor,
    temperature: float = 0.0,
    block_length: int = 32,
    steps: int = 32,
    gen_length: int = 2048,
    top_p: float | None = None,
    top_k: int | None = None,
    eos_early_stop: bool = False,
    minimal_topk: int = 1,
    threshold: float = 0.95,
    eos_id: int = 156892,
    mask_id: int = 156895,
    *,
    use_cache: bool = True,
    official_t0_sampling: bool = False,
) -> torch.Tensor:
    """Drop-in for LLaDA2.0's ``model.generate(inputs, ...)`` (same arguments and return value).

    Temperature 0 is greedy unless ``official_t0_sampling`` (the 2.0 release samples at T = 1 there);
    sampling draws from the global RNG, as the release. ``use_cache`` only changes the speed.

    :param inputs: ``[1, Lp]`` int64 prompt. :returns: ``[1, n]`` int64 (see :func:`_official_return`).
    :raises DareError: a batch of more than one prompt, or invalid settings.
    """
    options = decode_options(
        mask_id, eos_id, variant="2.0", gen_length=gen_length, block_length=block_length, steps=steps,
        threshold=threshold, temperature=temperature, top_k=top_k, top_p=top_p, minimal_topk=minimal_topk,
        eos_early_stop=eos_early_stop, use_cache=use_cache, official_t0_sampling=official_t0_sampling,
    )
    res = decode(model, _single_row(inputs), None, options)
    return _official_return(res, eos_id)


def generate_v21(
    model,
    inputs: torch.Tensor,
    temperature: float = 0.0,
    block_length: int = 32,
    steps: int = 32,
    gen_length: int = 2048,
    top_p: float | None = None,
    top_k: int | None = None,
    eos_early_stop: bool = False,
    minimal_topk: int = 1,
    threshold: float = 0.95,
    editing_threshold: float = 0.9,
    max_post_steps: int = 16,
    eos_id: int = 156892,
    mask_id: int = 156895,
    num_to_transfer: int = 1,
    *,
    use_cache: bool = True,
    official_soft_mask: bool = False,
) -> torch.Tensor:
    """Drop-in for LLaDA2.1's ``model.generate(inputs, ...)`` (same arguments and return value).

    ``steps`` and ``minimal_topk`` are accepted and unused, as in the release. DARE's hard block mask is
    used unless ``official_soft_mask`` (the release's 0/1 mask; requires ``use_cache=False``).

    :param inputs: ``[1, Lp]`` int64 prompt. :returns: ``[1, n]`` int64: the generation up to and
        including the first EOS.
    :raises DareError: a batch of more than one prompt, or invalid settings.
    """
    options = decode_options(
        mask_id, eos_id, variant="2.1", gen_length=gen_length, block_length=block_length, steps=steps,
        threshold=threshold, temperature=temperature, top_k=top_k, top_p=top_p, minimal_topk=minimal_topk,
        eos_early_stop=eos_early_stop, editing_threshold=editing_threshold, max_post_steps=max_post_steps,
        num_to_transfer=num_to_transfer, use_cache=use_cache, official_soft_mask=official_soft_mask,
    )
    res = decode(model, _single_row(inputs), None, options)
    return _official_return(res, eos_id)
