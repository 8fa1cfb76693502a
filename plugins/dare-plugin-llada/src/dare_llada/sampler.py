"""LLaDA's official semi-autoregressive low-confidence remasking decoder.

Source: ML-GSAI/LLaDA ``generate.py`` (``generate``), arXiv 2502.09992 §2.4 and Appendix B.3. The
completion (``gen_length`` masks) is split into ``gen_length / block_length`` blocks decoded left to
right, ``steps / num_blocks`` denoising steps each. At every step the model predicts all masked
tokens (Gumbel-max at ``temperature``; greedy at 0), scores them (``low_confidence``: un-tempered
softmax probability; ``random``: uniform), and commits the ``k`` most confident ones inside the
current block, ``k`` from :func:`dare.sampling.num_transfer_tokens`. Classifier-free guidance
re-runs the batch with every prompt position masked: ``un + (cfg + 1)(cond - un)``.

``generate`` keeps the official signature and returns the same tensor at temperature 0 for the same
weights; :class:`LLaDASampler` wraps it as a DARE ``Sampler`` that decodes any full-attention family
(through the family's aligned logits) and records the trajectory.
"""

from __future__ import annotations

from typing import Callable, Literal, NamedTuple

import torch
from pydantic import Field, model_validator

from dare.components import Params, Sampler, SamplerOutput
from dare.sampling import (
    Trajectory,
    add_gumbel_noise,
    completion_mask,
    confidence_scores,
    num_transfer_tokens,
    topk_transfer,
)

__all__ = ["generate", "decode", "denoise_steps", "LLaDASampler", "LLaDASamplerParams"]


class _StepOptions(NamedTuple):
    temperature: float
    cfg_scale: float
    remasking: str
    mask_id: int
    logits_eos_inf: bool
    confidence_eos_eot_inf: bool
    eos_id: int
    eot_id: int | None
    generator: torch.Generator | None


def _denoise_step(logits_fn, x, attention_mask, prompt_index, block_end: int, k: torch.Tensor, o: _StepOptions):
    """One denoising step of the official decoder, in place on ``x`` ``[B, L]``.

    Predict every masked token (Gumbel-max at ``o.temperature``; CFG re-runs the batch with the prompt
    masked), score proposals (un-tempered softmax or uniform), and commit the ``k[b]`` most confident
    masked positions before ``block_end``. Returns ``(committed [B, L] bool, nfe)``; as in the official
    code a position may be "committed" with the mask token itself (a model that proposes [MASK]): it
    stays masked and is decoded again, so ``committed`` excludes it.
    """
    mask_index = x == o.mask_id
    if o.cfg_scale > 0.0:
        un_x = x.clone()
        un_x[prompt_index] = o.mask_id
        am = None if attention_mask is None else torch.cat([attention_mask, attention_mask], dim=0)
        cond, un = torch.chunk(logits_fn(torch.cat([x, un_x], dim=0), am), 2, dim=0)
        logits = un + (o.cfg_scale + 1) * (cond - un)
        nfe = 2
    else:
        logits = logits_fn(x, attention_mask)
        nfe = 1
    if o.logits_eos_inf:
        logits[:, :, o.eos_id] = -torch.inf
    x0 = torch.argmax(add_gumbel_noise(logits, o.temperature, o.generator), dim=-1)
    if o.confidence_eos_eot_inf:
        # official: EOS/EOT may still be proposed but are committed last
        logits[:, :, o.eos_id] = -torch.inf
        if o.eot_id is not None:
            logits[:, :, o.eot_id] = -torch.inf
    x0_p = confidence_scores(logits, x0, o.remasking, o.generator)
    x0_p[:, block_end:] = -torch.inf
    x0 = torch.where(mask_index, x0, x)
    conf = torch.where(mask_index, x0_p, torch.tensor(-torch.inf, dtype=x0_p.dtype, device=x0_p.device))
    transfer = topk_transfer(conf, k)
    x[transfer] = x0[transfer]
    return transfer & (x0 != o.mask_id), nfe


@torch.no_grad()
def decode(
    logits_fn: Callable[[torch.Tensor, torch.Tensor | None], torch.Tensor],
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
    eos_id: int = 126081,
    eot_id: int | None = 126348,
    generator: torch.Generator | None = None,
) -> tuple[torch.Tensor, torch.Tensor, int]:
    """The decoding loop over a logits function.

    :param logits_fn: ``(x [B, L] int64, attention_mask [B, L] | None) -> logits [B, L, V]`` aligned.
    :param prompt: ``[B, Lp]`` int64, left-padded.
    :param attention_mask: ``[B, Lp]`` (1 real, 0 pad) or None.
    :returns: ``(x [B, Lp + gen_length], unmask_step [B, gen_length] int64, nfe)``.
    :raises ValueError: ``gen_length % block_length != 0`` or ``steps % num_blocks != 0``.
    """
    B, Lp = prompt.shape
    x = torch.full((B, Lp + gen_length), mask_id, dtype=torch.long, device=prompt.device)
    x[:, :Lp] = prompt
    opts = _StepOptions(temperature, cfg_scale, remasking, mask_id, logits_eos_inf, confidence_eos_eot_inf, eos_id, eot_id,
                        generator)
    # the official prompt index: every position not holding the mask token
    return _run_schedule(logits_fn, x, x != mask_id, Lp, attention_mask, 0, steps, steps, gen_length, block_length, opts)


@torch.no_grad()
def denoise_steps(
    logits_fn: Callable[[torch.Tensor, torch.Tensor | None], torch.Tensor],
    state: torch.Tensor,
    prompt_length: int,
    attention_mask: torch.Tensor | None = None,
    start_step: int = 0,
    end_step: int | None = None,
    steps: int = 128,
    gen_length: int = 128,
    block_length: int = 128,
    temperature: float = 0.0,
    cfg_scale: float = 0.0,
    remasking: str = "low_confidence",
    mask_id: int = 126336,
    logits_eos_inf: bool = False,
    confidence_eos_eot_inf: bool = False,
    eos_id: int = 126081,
    eot_id: int | None = 126348,
    generator: torch.Generator | None = None,
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
    :func:`decode`'s (:func:`_denoise_step`).

    :param logits_fn: ``(x [B, L] int64, attention_mask [B, L] | None) -> logits [B, L, V]`` aligned
        (e.g. ``family.logits`` bound to a model, so any full-attention family decodes).
    :param state: ``[B, prompt_length + gen_length]`` int64, prompt then partly decoded completion.
    :param attention_mask: ``[B, prompt_length]`` (1 real, 0 pad) or None.
    :param end_step: ``None`` = ``steps``.
    :returns: ``(x [B, L] new state, unmask_step [B, gen_length] int64 (-1 outside this call), nfe)``.
    :raises ValueError: block/step divisibility as :func:`decode`, a state of the wrong length, or
        ``0 <= start_step <= end_step <= steps`` violated.
    """
    end_step = steps if end_step is None else end_step
    if not 0 <= start_step <= end_step <= steps:
        raise ValueError(f"need 0 <= start_step ({start_step}) <= end_step ({end_step}) <= steps ({steps})")
    B, L = state.shape
    if L != prompt_length + gen_length:
        raise ValueError(f"state has {L} positions, expected prompt_length + gen_length = {prompt_length + gen_length}")
    x = state.clone()
    prompt_index = torch.zeros_like(x, dtype=torch.bool)
    prompt_index[:, :prompt_length] = True
    opts = _StepOptions(temperature, cfg_scale, remasking, mask_id, logits_eos_inf, confidence_eos_eot_inf, eos_id, eot_id,
                        generator)
    return _run_schedule(logits_fn, x, prompt_index, prompt_length, attention_mask, start_step, end_step, steps,
                         gen_length, block_length, opts)


def _run_schedule(logits_fn, x: torch.Tensor, prompt_index: torch.Tensor, prompt_length: int,
                  attention_mask: torch.Tensor | None, start_step: int, end_step: int, steps: int, gen_length: int,
                  block_length: int, opts: _StepOptions) -> tuple[torch.Tensor, torch.Tensor, int]:
    """Global steps ``start_step .. end_step - 1`` of the semi-AR schedule on ``x`` (modified in place).

    Global step ``s`` belongs to block ``s // steps_per_block``; on entering a block the quota is
    computed over the block's remaining steps from its remaining masks (``num_transfer_tokens``).
    :param attention_mask: ``[B, prompt_length]`` or None; extended with ones over the completion.
    :returns: ``(x, unmask_step [B, gen_length] int64 (-1 where nothing was committed), nfe)``.
    :raises ValueError: ``gen_length % block_length != 0`` or ``steps % num_blocks != 0``.
    """
    if gen_length % block_length != 0:
        raise ValueError(f"gen_length ({gen_length}) must be a multiple of block_length ({block_length})")
    num_blocks = gen_length // block_length
    if steps % num_blocks != 0:
        raise ValueError(f"steps ({steps}) must be a multiple of the number of blocks ({num_blocks})")
    spb = steps // num_blocks
    B, Lp = x.shape[0], prompt_length
    if attention_mask is not None:
        attention_mask = torch.cat(
            [attention_mask, torch.ones((B, gen_length), dtype=attention_mask.dtype, device=x.device)], dim=-1
        )
    traj = Trajectory(B, gen_length, device=x.device)
    nfe = 0
    quota, first = None, 0
    for s in range(start_step, end_step):
        nb, i = divmod(s, spb)
        start, end = Lp + nb * block_length, Lp + (nb + 1) * block_length
        if quota is None or i == 0:
            quota, first = num_transfer_tokens(x[:, start:end] == opts.mask_id, spb - i), i
        committed, n = _denoise_step(logits_fn, x, attention_mask, prompt_index, end, quota[:, i - first], opts)
        nfe += n
        traj.record(committed[:, Lp:], s)
    return x, traj.unmask_step, nfe


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
    x, _, _ = decode(
        lambda ids, am: model(ids, attention_mask=am).logits,
        prompt,
        attention_mask,
        steps=steps,
        gen_length=gen_length,
        block_length=block_length,
        temperature=temperature,
        cfg_scale=cfg_scale,
        remasking=remasking,
        mask_id=mask_id,
        logits_eos_inf=logits_eos_inf,
        confidence_eos_eot_inf=confidence_eos_eot_inf,
        eos_id=getattr(model.config, "eos_token_id", 126081) or 126081,
    )
    return x


class LLaDASamplerParams(Params):
    gen_length: int = Field(128, gt=0, description="Completion length in tokens.")
    block_length: int = Field(32, gt=0, description="Semi-autoregressive block length; divides gen_length.")
    steps: int = Field(128, gt=0, description="Total denoising steps; a multiple of gen_length / block_length.")
    temperature: float = Field(0.0, ge=0.0, description="Gumbel-max temperature (0 = greedy).")
    remasking: Literal["low_confidence", "random"] = Field("low_confidence", description="Which proposals to commit.")
    cfg_scale: float = Field(0.0, ge=0.0, description="Classifier-free guidance scale (0 = off).")
    logits_eos_inf: bool = Field(False, description="Never propose EOS.")
    confidence_eos_eot_inf: bool = Field(False, description="Commit EOS/EOT proposals last.")

    @model_validator(mode="after")
    def _blocks(self):
        if self.gen_length % self.block_length != 0:
            raise ValueError(
                f"gen_length ({self.gen_length}) must be a multiple of block_length ({self.block_length})"
            )
        nb = self.gen_length // self.block_length
        if self.steps % nb != 0:
            raise ValueError(f"steps ({self.steps}) must be a multiple of gen_length / block_length ({nb})")
        return self


class LLaDASampler(Sampler):
    """LLaDA semi-autoregressive low-confidence remasking (official generate.py), with trajectory."""

    name = "llada"
    Params = LLaDASamplerParams
    attention_kinds = ("full",)
    supports_row_generators = True  # Gumbel noise and random remasking draw per row (dare.sampling)

    def generate(self, model, family, tokens, prompt_ids, attention_mask=None, generator=None) -> SamplerOutput:
        p = self.params
        x, unmask_step, nfe = decode(
            lambda ids, am: family.logits(model, ids, am),
            prompt_ids,
            attention_mask,
            steps=p.steps,
            gen_length=p.gen_length,
            block_length=p.block_length,
            temperature=p.temperature,
            cfg_scale=p.cfg_scale,
            remasking=p.remasking,
            mask_id=tokens.mask_id,
            logits_eos_inf=p.logits_eos_inf,
            confidence_eos_eot_inf=p.confidence_eos_eot_inf,
            eos_id=tokens.eos_id,
            eot_id=tokens.eot_id,
            generator=generator,
        )
        Lp = prompt_ids.shape[1]
        cmask = completion_mask(x[:, Lp:], tokens.stop_ids, family.pad_in_response)
        return SamplerOutput(
            sequences=x, prompt_length=Lp, completion_mask=cmask, unmask_step=unmask_step, nfe=nfe, steps=p.steps
        )

    def partial_denoise(self, model, family, tokens, state, prompt_length, attention_mask=None, start_step=0,
                        end_step=None, generator=None) -> SamplerOutput:
        """Steps ``start_step .. end_step - 1`` of this sampler's schedule from ``state`` (:func:`denoise_steps`),
        through ``family.logits`` so any full-attention family (LLaDA, Dream) decodes.

        :returns: ``SamplerOutput`` with the new state; ``unmask_step`` covers this call only.
        """
        p = self.params
        x, unmask_step, nfe = denoise_steps(
            lambda ids, am: family.logits(model, ids, am),
            state,
            prompt_length,
            attention_mask,
            start_step=start_step,
            end_step=end_step,
            steps=p.steps,
            gen_length=p.gen_length,
            block_length=p.block_length,
            temperature=p.temperature,
            cfg_scale=p.cfg_scale,
            remasking=p.remasking,
            mask_id=tokens.mask_id,
            logits_eos_inf=p.logits_eos_inf,
            confidence_eos_eot_inf=p.confidence_eos_eot_inf,
            eos_id=tokens.eos_id,
            eot_id=tokens.eot_id,
            generator=generator,
        )
        cmask = completion_mask(x[:, prompt_length:], tokens.stop_ids, family.pad_in_response)
        return SamplerOutput(
            sequences=x, prompt_length=prompt_length, completion_mask=cmask, unmask_step=unmask_step, nfe=nfe,
            steps=p.steps,
        )
