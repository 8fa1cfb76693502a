"""Likelihood estimators under uniform-noise corruption (DiffusionGemma; docs/algorithms.md §3.16).

A uniform-noise family (``ModelFamily.forward_process == "uniform"``) has no mask token: its forward process
replaces each corrupted token with a token drawn uniformly from the vocabulary, ``q(x_t | x_0) = (1 - t) x_0 + t / V``
per position (D3PM-uniform, Austin et al. arXiv 2107.03006 §3.1; :func:`dare.diffusion.forward.uniform_noise`). A
:class:`~dare.diffusion.estimators.base.Pass` carries the replacement tokens in ``noise`` ``[K, N, S]``, which
:func:`~dare.diffusion.estimators.base.score_pass` writes at the corrupted positions instead of the mask token.

:class:`UniformELBOEstimator` (``uniform-elbo``) is the denoising score DiffusionGemma is trained with, NeMo AutoModel's
``BlockDiffusionCrossEntropyLoss`` (``nemo_automodel/components/loss/dllm_loss.py``: a flat cross-entropy over every
response position of the canvas, corrupted or not, no ``1/t`` weight), which DARE's SFT of the family reproduces
(the SFT trainer, tests/parity). For ``K`` noise levels ``t_k``, stratified over ``[eps, 1)``
(``t_k = eps + (1 - eps)(k + u) / K``, one ``u ~ U[0, 1)`` per completion) or all equal to a fixed ``t``::

    s[n, g] = (1 / K) sum_k log p_theta(y_g | x~_k, y_{t_k})    for every response token g

where ``y_{t_k}`` is the completion with each response token replaced, with probability ``t_k``, by a uniformly random
token, and ``x~_k`` the prompt with each real token replaced with probability ``p_mask_prompt``. The sequence score
``sum_g s[n, g]`` is the Monte-Carlo estimate of ``E_t E_q [sum_g log p_theta(y_g | x, y_t)]``, the x0-prediction
term that D3PM adds to its variational bound (Austin et al. §3.4, the auxiliary loss ``L_lambda``). It is **not** a
bound on ``log p(y | x)``: the exact uniform-state ELBO (Schiff et al. arXiv 2412.10193, UDLM; Sahoo et al. arXiv
2506.10892, Duo) also involves the probabilities the model gives every other token of the vocabulary, which the
pass form (the clean token's log-probability only) does not carry. With ``t = 1`` and ``K = 1`` it is d1's one-step
mean-field estimator under uniform noise (the completion is pure noise: the decoder's first denoising state).

:class:`UniformNoise` turns any [MASK]-corruption estimator (trajectory replay, ...) into its uniform-noise
counterpart: the same masks and weights, each corrupted position holding a uniformly random token.

Randomness: every draw comes from the ``generator`` (with :class:`dare.randomness.RowGenerators` each row draws its own
values, in this order: ``u`` (when ``t`` is not fixed), then per copy ``k`` the prompt uniforms ``[P]`` (when
``p_mask_prompt > 0``), the response uniforms ``[G]`` and the noise tokens ``[S]``), so the same passes score the
current, old and reference policies.
"""

from __future__ import annotations

from dataclasses import replace

import torch
from pydantic import Field

from dare.components import Params
from dare.diffusion.estimators.base import Estimator, Pass, ScoringBatch, uniform
from dare.diffusion.forward import uniform_noise

__all__ = ["UniformELBOParams", "UniformELBOEstimator", "UniformNoise", "noise_tokens", "with_uniform_noise",
           "vocab_size_of", "for_forward_process"]


def vocab_size_of(model_config) -> int:
    """The vocabulary size ``V`` of a model config (an object or a dict; a composite config's text config).

    :raises ValueError: the config names no vocabulary size.
    """
    if isinstance(model_config, dict):
        size = model_config.get("vocab_size") or (model_config.get("text_config") or {}).get("vocab_size")
    else:
        text = model_config.get_text_config() if hasattr(model_config, "get_text_config") else model_config
        size = getattr(text, "vocab_size", None) or getattr(model_config, "vocab_size", None)
    if not size:
        raise ValueError("the model config has no vocab_size; uniform-noise corruption draws tokens from "
                         "[0, vocab_size)")
    return int(size)


def noise_tokens(shape: tuple[int, int], vocab_size: int, generator, device) -> torch.Tensor:
    """``[N, S]`` int64 tokens drawn uniformly from ``[0, vocab_size)`` (row ``n`` from its own generator with
    :class:`dare.randomness.RowGenerators`; :func:`dare.diffusion.forward.uniform_noise`)."""
    zeros = torch.zeros(shape, dtype=torch.long, device=device)
    return uniform_noise(zeros, torch.ones(shape, dtype=torch.bool, device=device), vocab_size, generator)


def with_uniform_noise(passes: list[Pass], vocab_size: int, generator=None) -> list[Pass]:
    """``passes`` whose corrupted positions hold uniformly random tokens: ``noise`` ``[K, N, S]`` drawn per pass and
    copy (after the passes themselves), masks, weights and keys unchanged.

    :raises ValueError: ``vocab_size < 1``.
    """
    out = []
    for p in passes:
        K, N, S = p.mask.shape
        noise = torch.stack([noise_tokens((N, S), vocab_size, generator, p.mask.device) for _ in range(K)])
        out.append(replace(p, noise=noise))
    return out


class UniformELBOParams(Params):
    """Parameters of :class:`UniformELBOEstimator`."""

    mc_num: int = Field(1, ge=1, description="Noise levels t per completion (one decoder forward each).")
    t: float | None = Field(None, gt=0.0, le=1.0, description="A fixed noise level for every copy (1 = the completion "
                                                              "is pure noise, d1's one-step); null = stratified over "
                                                              "[t_eps, 1).")
    t_eps: float = Field(1e-3, ge=0.0, lt=1.0, description="Smallest noise level of the stratified draw.")
    p_mask_prompt: float = Field(0.0, ge=0.0, le=1.0, description="Probability of replacing each real prompt token "
                                                                  "with a uniformly random token (d1's prompt noise).")


class UniformELBOEstimator(Estimator):
    """Uniform-noise denoising score (NeMo's flat canvas cross-entropy) of every response token at ``mc_num`` levels."""

    name = "uniform-elbo"
    level = "token"

    Params = UniformELBOParams

    def __init__(self, params=None, vocab_size: int | None = None, **values):
        super().__init__(params, **values)
        self.vocab_size = vocab_size

    def bind(self, family, model_config, sampler) -> UniformELBOEstimator:
        """This estimator with the model's vocabulary size (the range of the noise tokens)."""
        return UniformELBOEstimator(self.params, vocab_size=vocab_size_of(model_config))

    def draw(self, batch: ScoringBatch, generator=None) -> list[Pass]:
        """One pass of ``K = mc_num`` copies (module docstring): ``mask [K, N, S]``, ``noise [K, N, S]``, ``weight``
        ``1 / K`` on every response token.

        :raises ValueError: the estimator has no vocabulary size (build it with :meth:`bind`).
        """
        if self.vocab_size is None:
            raise ValueError("uniform-elbo needs the model's vocabulary size: build it with "
                             ".bind(family, model_config, "
                             "sampler) or UniformELBOEstimator(vocab_size=V)")
        p = self.params
        resp = batch.completion_mask
        N, device = batch.num_rows, resp.device
        K = p.mc_num
        if p.t is None:
            u = uniform((N,), generator, device)
            ks = torch.arange(K, device=device, dtype=torch.float32)
            t = p.t_eps + (1.0 - p.t_eps) * (ks[None, :] + u[:, None]) / K  # [N, K]
        else:
            t = torch.full((N, K), float(p.t), device=device)
        prompt_valid = batch.prompt_valid
        masks, noises = [], []
        for k in range(K):
            if p.p_mask_prompt > 0:
                prompt = prompt_valid & (uniform(prompt_valid.shape, generator, device) < p.p_mask_prompt)
            else:
                prompt = torch.zeros_like(prompt_valid)
            response = resp & (uniform(resp.shape, generator, device) < t[:, k : k + 1])
            masks.append(torch.cat([prompt, response], dim=1))
            noises.append(noise_tokens(tuple(batch.input_ids.shape), self.vocab_size, generator, device))
        weight = (resp.float() / K)[None].expand(K, -1, -1).contiguous()
        return [Pass(mask=torch.stack(masks), weight=weight, noise=torch.stack(noises))]


class UniformNoise(Estimator):
    """A [MASK]-corruption estimator under uniform noise: its passes, each corrupted position a uniformly random token.

    Not a registered component (no ``name``): objectives build it around their own estimator for a uniform-noise
    family (:func:`for_forward_process`). ``level`` is the wrapped estimator's.
    """

    def __init__(self, base: Estimator, vocab_size: int):
        super().__init__()
        self.base = base
        self.vocab_size = int(vocab_size)
        self.level = base.level

    def draw(self, batch: ScoringBatch, generator=None) -> list[Pass]:
        """The wrapped estimator's passes, then their noise tokens from the same ``generator``."""
        return with_uniform_noise(self.base.draw(batch, generator), self.vocab_size, generator)


def for_forward_process(estimator: Estimator, family, model_config) -> Estimator:
    """``estimator`` for the family's forward process: unchanged for [MASK] corruption, wrapped in
    :class:`UniformNoise` for uniform noise (``ModelFamily.forward_process``)."""
    if getattr(family, "forward_process", "mask") != "uniform":
        return estimator
    return UniformNoise(estimator, vocab_size_of(model_config))
