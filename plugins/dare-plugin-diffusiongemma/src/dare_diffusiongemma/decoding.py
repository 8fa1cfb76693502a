"""DiffusionGemma canvas decoding: transformers' ``DiffusionGemmaGenerationMixin.generate``
(``transformers/models/diffusion_gemma/generation_diffusion_gemma.py``, 5.25) with per-row random streams.

Algorithm (docs/model-families.md §10): the prompt is encoded once into a KV cache; the completion is written
canvas by canvas (``canvas_length`` tokens). A canvas starts as uniformly random tokens ``x_N ~ U(V)``; at step
``n = N .. 1`` the decoder scores the canvas (self-conditioned on the previous step's logits), the logits are divided
by the linear temperature ``t_min + (t_max - t_min) n / N`` (``LinearTemperatureScheduleLogitsProcessor``), a
proposal is sampled per position, the ``k`` lowest-entropy proposals with ``sum_k H - max_k H <= entropy_bound``
are accepted (entropy-bounded sampling, arXiv 2505.24857) and every other position is re-noised with a uniformly
random token. A canvas ends after ``N`` steps or when its argmax has been stable for ``stability_threshold`` steps
with mean entropy below ``confidence_threshold`` (``StableAndConfidentStoppingCriteria``); its argmax is the
canvas's text, which the encoder then appends to the cache. A row stops after the canvas that holds a stop id
(tokens after it become padding).

Randomness: each row draws, from its own generator (:class:`dare.randomness.RowGenerators`), exactly what
``generate`` draws for a batch of that row alone after ``torch.manual_seed``: the initial canvas
(``randint [1, C]``), then per step the proposals (``multinomial [C, V]``) and the re-noising tokens
(``randint [1, C]``); a row draws nothing once its canvas stopped, so its tokens do not depend on the other rows.
Positions are per row (left padding is skipped), so a left-padded row decodes as it would alone.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from dare.randomness import row_generator
from dare.sampling.options import DecodeOptions

__all__ = ["CanvasDecodeResult", "canvas_decode", "accept_by_entropy"]


@dataclass
class CanvasDecodeResult:
    """``completion [B, G]`` int64; ``unmask_step [B, G]`` int64 (canvas ``k``'s step ``s`` is ``k N + s``: the step
    after which the position's final token no longer changed, -1 for padding of stopped rows); ``nfe`` decoder
    forwards; ``steps`` denoising steps run (all canvases); ``encoder_forwards``."""

    completion: torch.Tensor
    unmask_step: torch.Tensor
    nfe: int
    steps: int
    encoder_forwards: int


def accept_by_entropy(logits: torch.Tensor, entropy_bound: float) -> torch.Tensor:
    """The accepted positions ``[B, C]`` bool of ``EntropyBoundSampler.accept_canvas``: per row, sorting positions by
    the entropy of ``Categorical(logits)`` (ascending), accept the prefix whose ``cumsum(H) - H <= entropy_bound``
    (an upper bound on the proposals' joint mutual information, arXiv 2505.24857).

    :param logits: ``[B, C, V]`` float (temperature-scaled). :param entropy_bound: > 0.
    """
    entropy = torch.distributions.Categorical(logits=logits).entropy()
    sorted_entropy, order = torch.sort(entropy, dim=-1, descending=False)
    keep = torch.cumsum(sorted_entropy, dim=-1) - sorted_entropy <= entropy_bound
    return torch.scatter(torch.zeros_like(keep), dim=-1, index=order, src=keep)


def _randint(vocab_size: int, length: int, generator, row: int, device) -> torch.Tensor:
    g = row_generator(generator, row)
    gen_device = g.device if g is not None else device
    return torch.randint(0, vocab_size, (1, length), generator=g, device=gen_device).to(device)


def canvas_decode(model, family, prompt_ids: torch.Tensor, attention_mask: torch.Tensor | None,
                  options: DecodeOptions) -> CanvasDecodeResult:
    """Decode ``gen_length`` tokens after left-padded prompts ``prompt_ids`` ``[B, Lp]`` (``attention_mask``
    ``[B, Lp]``, 1 = real token) with the DiffusionGemma canvas loop (module docstring).

    :param family: a :class:`dare_diffusiongemma.family.DiffusionGemmaFamily` (encoder and canvas forwards).
    :param options: :class:`~dare.sampling.options.DecodeOptions` with ``params`` a
        :class:`dare_diffusiongemma.params.DiffusionGemmaSamplerParams`, ``tokens`` (``stop_ids``: the ids that end
        a row, EOS and end-of-turn; ``pad_id``: the id written after a row's stop id) and the ``generator``
        (``torch.Generator``, :class:`dare.randomness.RowGenerators` or None: torch's global RNG).
    :raises ValueError: ``gen_length`` not a multiple of the model's ``canvas_length``.
    """
    from transformers import DynamicCache
    from transformers.models.diffusion_gemma.generation_diffusion_gemma import (
        LinearTemperatureScheduleLogitsProcessor,
        StableAndConfidentStoppingCriteria,
    )

    params, tokens, generator = options.params, options.tokens, options.generator
    stop_ids, pad_id = tokens.stop_ids, tokens.pad_id
    config = model.config
    C = int(config.canvas_length)
    V = int(config.get_text_config().vocab_size)
    N = int(params.max_denoising_steps)
    if params.gen_length % C != 0:
        raise ValueError(f"gen_length ({params.gen_length}) must be a multiple of the model's canvas_length ({C})")
    device = prompt_ids.device
    B, Lp = prompt_ids.shape
    attn = torch.ones((B, Lp), dtype=torch.bool, device=device) if attention_mask is None else attention_mask.bool()
    positions = (attn.long().cumsum(dim=1) - 1).clamp(min=0)
    real_len = attn.long().sum(dim=1)
    temperature = LinearTemperatureScheduleLogitsProcessor(t_min=params.t_min, t_max=params.t_max, max_denoising_steps=N)
    stopping = None
    if params.stability_threshold is not None and params.confidence_threshold is not None:
        stopping = StableAndConfidentStoppingCriteria(stability_threshold=params.stability_threshold,
                                                      confidence_threshold=float(params.confidence_threshold))
    stop_tensor = torch.tensor(list(stop_ids), device=device)
    dtype = model.model.decoder.embed_tokens.weight.dtype

    encoder = model.model.encoder
    dummy = torch.empty((B, Lp, 0), dtype=model.dtype, device=device)  # the mask builder reads shape/dtype only
    cache = DynamicCache(config=config.get_text_config(decoder=True))
    enc_mask = encoder.create_masks_for_generate(config=config, inputs_embeds=dummy, attention_mask=attn, cache=cache,
                                                 position_ids=positions, mm_token_type_ids=None)
    _, cache = family.encode(model, prompt_ids, enc_mask, positions, cache=cache)
    encoder_forwards, nfe, steps_run = 1, 0, 0

    finished_seq = torch.zeros(B, dtype=torch.bool, device=device)
    canvases, unmask = [], []
    for k in range(params.gen_length // C):
        if k > 0:
            prev = canvases[-1]
            enc_pos = real_len[:, None] + (k - 1) * C + torch.arange(C, device=device)[None, :]
            attn = torch.nn.functional.pad(attn, (0, C), value=True)
            enc_mask = encoder.create_masks_for_generate(
                config=config, inputs_embeds=torch.empty((B, C, 0), dtype=model.dtype, device=device),
                attention_mask=attn, cache=cache, position_ids=enc_pos, mm_token_type_ids=None)
            _, cache = family.encode(model, prev, enc_mask, enc_pos, cache=cache)
            encoder_forwards += 1
        dec_pos = real_len[:, None] + k * C + torch.arange(C, device=device)[None, :]
        dec_attn = torch.nn.functional.pad(attn, (0, C), value=True)
        live = (~finished_seq).nonzero().flatten().tolist()
        current = torch.full((B, C), pad_id, dtype=torch.long, device=device)
        for b in live:
            current[b] = _randint(V, C, generator, b, device)[0]
        mask_mapping = model.model.decoder.create_diffusion_decoder_attention_mask(
            config=config, inputs_embeds=current.unsqueeze(-1), cache=cache, decoder_attention_mask=dec_attn)
        finished = finished_seq.clone()
        if stopping is not None:
            stopping.reset()
        argmax_canvas = current.clone()
        self_cond = None
        fixed_at = torch.zeros((B, C), dtype=torch.long, device=device)
        for s, cur_step in enumerate(reversed(range(1, N + 1))):
            if bool(finished.all()):
                break
            logits = family.canvas_logits(model, current, cache, mask_mapping, dec_pos, self_conditioning_logits=self_cond)
            nfe += 1
            steps_run += 1
            processed = temperature(prompt_ids, logits, cur_step=torch.tensor(cur_step, device=device, dtype=torch.int32))
            probs = torch.softmax(processed, dim=-1, dtype=torch.float32)
            active = (~finished).nonzero().flatten().tolist()
            proposal = current.clone()
            for b in active:
                g = row_generator(generator, b)
                p = probs[b].to(g.device) if g is not None else probs[b]
                proposal[b] = torch.multinomial(p, num_samples=1, generator=g).squeeze(-1).to(device)
            new_argmax = torch.argmax(processed, dim=-1)
            keep = accept_by_entropy(processed, params.entropy_bound)
            accepted = torch.where(keep, proposal, current)
            new_current = accepted.clone()
            for b in active:
                noise = _randint(V, C, generator, b, device)[0]
                new_current[b] = torch.where(keep[b], accepted[b], noise)
            if finished.any():
                new_argmax = torch.where(finished[:, None], argmax_canvas, new_argmax)
                new_current = torch.where(finished[:, None], current, new_current)
                previous = processed if self_cond is None else self_cond.to(processed.dtype)
                processed = torch.where(finished[:, None, None], previous, processed)
            changed = (new_argmax != argmax_canvas) & ~finished[:, None]
            fixed_at = torch.where(changed, torch.full_like(fixed_at, k * N + s), fixed_at)
            if stopping is not None:
                finished = finished | stopping(new_argmax, processed)
            argmax_canvas, current = new_argmax, new_current
            self_cond = processed.to(dtype)
        canvas = torch.where(finished_seq[:, None], torch.full_like(argmax_canvas, pad_id), argmax_canvas)
        step_of = torch.where(finished_seq[:, None], torch.full_like(fixed_at, -1), fixed_at)
        if params.stop_at_eos:
            is_stop = torch.isin(canvas, stop_tensor)
            seen = is_stop.long().cumsum(dim=-1)
            after = (seen > 0) & ~((seen == 1) & is_stop)
            canvas = torch.where(after, torch.full_like(canvas, pad_id), canvas)
            step_of = torch.where(after, torch.full_like(step_of, -1), step_of)
            finished_seq = finished_seq | is_stop.any(dim=-1)
        canvases.append(canvas)
        unmask.append(step_of)
        if params.stop_at_eos and bool(finished_seq.all()):
            break
    done = len(canvases) * C
    completion = torch.cat(canvases, dim=1)
    step_ids = torch.cat(unmask, dim=1)
    if done < params.gen_length:
        fill = params.gen_length - done
        completion = torch.cat([completion, torch.full((B, fill), pad_id, dtype=torch.long, device=device)], dim=1)
        step_ids = torch.cat([step_ids, torch.full((B, fill), -1, dtype=torch.long, device=device)], dim=1)
    return CanvasDecodeResult(completion=completion, unmask_step=step_ids, nfe=nfe, steps=steps_run,
                              encoder_forwards=encoder_forwards)
