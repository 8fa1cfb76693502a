"""``justgrpo``: GRPO on the exact likelihood of autoregressively decoded diffusion LMs (JustGRPO,
arXiv 2601.15165 §3; DARE ``llada_dp_actor_justgrpo``, recipe ``run_justgrpo_llada_8b_instruct.sh``;
docs/algorithms.md §3.10).

Rollout: the spec's sampler decoding strictly left to right, one token per step, sampling each token
from ``softmax(logits / T)``. The learner then has the *exact* rollout likelihood
``log pi(y) = sum_t log softmax(logits(c ; y_<t ; M ... M)_t / T)[y_t]``
(:mod:`dare.diffusion.estimators.autoregressive`, one copy per position, ``chunk_size`` positions per
pass; ``likelihood_temperature`` defaults to ``"sampler"``, the recipe's learner temperature 0.6 = the
rollout temperature). Loss: standard token-level GRPO, clip + dual clip (eps 0.2, c 3), token-mean over
*all* response tokens: the position chunks add up to the full aggregation exactly (DARE's
``_aggregate_position_chunk``). KL off by default; when on (``beta > 0``) it is the textbook estimator of
:mod:`dare.rl.kl` per token (not DARE's advantage-dependent ``log(1 + d)`` form, which can be NaN).

**Sampler validation (at spec validation).** The likelihood is exact only if the sampler's transition
at step ``t`` is "sample token ``t`` from ``softmax(logits / T)`` given ``[c ; y_<t ; M ...]``". That holds
for (a) a semi-autoregressive global-step sampler (``gen_length``/``block_length``/``steps``, LLaDA's) with
``block_length = 1`` and ``steps = gen_length`` (one token per block, one step per block), without CFG
(``cfg_scale`` changes the distribution) and without ``logits_eos_inf`` (it removes EOS from the
distribution), decoding any full-attention family (LLaDA, and Dream through its aligned logits); and
(b) a block decoder with ``remasking: sequential`` and ``denoising_steps = block_length`` (SDAR's: the
leftmost mask each step; the block-diffusion forward of the scorer sees the same state, earlier blocks
clean), without top-k/top-p filtering (a filtered distribution is not ``softmax(logits / T)``). Any other
sampler (LLaDA2's threshold decoder, Dream's confidence decoder) commits positions out of order, so it is
rejected with the reason. Greedy rollouts are rejected by the base check.

``preset: official`` gives the released trainer's settings (``JustGRPOParams.official``: G = 16, learner
temperature 1, std epsilon 1e-4, no dual clip, prompt padding attended to); its normaliser counts only rows of
non-zero advantage, which DARE does not (docs/algorithms.md §10.9); tests/parity/test_justgrpo.py checks the
gradients against the official code's.
"""

from __future__ import annotations

from typing import Callable, ClassVar, Literal

import torch
from pydantic import Field

from dare.components.official import OfficialSetting
from dare.diffusion.estimators import AutoregressiveEstimator
from dare.rl import OnlineRLObjective, RLParams, clipped_token_loss

__all__ = ["JustGRPO", "JustGRPOParams", "chunk_aggregate", "autoregressive_sampler_problems"]


def chunk_aggregate(values: torch.Tensor, weights: torch.Tensor, mode: str, response_lengths: torch.Tensor,
                    total_tokens: float, num_sequences: int) -> torch.Tensor:
    """One position chunk's share of a full-response aggregation (chunks add up to the full value).

    ``token-mean``: ``sum(values * weights) / total_tokens``; ``sequence-mean``:
    ``sum_b [sum_k values * weights]_b / |y_b|  / num_sequences``. ``values``/``weights``: ``[n, G]``;
    ``response_lengths``: ``[n]``. :returns: float32 scalar.
    :raises ValueError: unknown mode.
    """
    w = weights.float()
    if mode == "token-mean":
        return (values * w).sum() / max(float(total_tokens), 1e-8)
    if mode == "sequence-mean":
        per_row = (values * w).sum(dim=-1) / response_lengths.float().clamp(min=1.0)
        return per_row.sum() / max(num_sequences, 1)
    raise ValueError(f"unknown aggregation {mode!r}; use token-mean or sequence-mean")


def autoregressive_sampler_problems(sampler, where: Callable[[str], str]) -> list[tuple[str, str]]:
    """``(yaml path, message)`` for each reason ``sampler`` does not decode left to right, one token per
    step, from ``softmax(logits / T)`` (module docstring, rules (a) and (b)).

    :param where: maps a sampler param name (or ``"name"``) to its YAML path.
    """
    p = sampler.params
    why = "JustGRPO's likelihood is exact only for left-to-right decoding of one token per step"
    fields = type(p).model_fields
    if "denoising_steps" in fields and "remasking" in fields:
        problems = []
        if p.remasking != "sequential":
            problems.append((where("remasking"), f"{why}; set remasking: sequential (the leftmost mask each step)"))
        if p.denoising_steps != p.block_length:
            problems.append((where("denoising_steps"), f"{why}; set denoising_steps = block_length ({p.block_length})"))
        if getattr(p, "top_k", 0) or getattr(p, "top_p", 1.0) < 1.0:
            problems.append((where("top_k"), "top-k/top-p filtering samples from a truncated distribution, not "
                                               "softmax(logits / T); set top_k: 0 and top_p: 1.0"))
        return problems
    parallel = getattr(p, "threshold", None) is not None or getattr(p, "factor", None) is not None
    # a block_length of None (Dream's default) means one block over the whole completion
    if not {"gen_length", "block_length", "steps"} <= set(fields) or parallel or p.block_length is None:
        return [(where("name"), f"sampler {sampler.name!r} commits positions by confidence, not left to right; {why}. "
                                "Use sampler 'llada' with block_length: 1 and steps = gen_length (full-attention "
                                "families) or 'sdar' with remasking: sequential")]
    problems = []
    if p.block_length != 1:
        problems.append((where("block_length"), f"{why}; set block_length: 1"))
    if p.steps != p.gen_length:
        problems.append((where("steps"), f"{why}; set steps = gen_length ({p.gen_length})"))
    if getattr(p, "top_k", None) or (getattr(p, "top_p", None) or 1.0) < 1.0:
        problems.append((where("top_k"), "top-k/top-p filtering samples from a truncated distribution, not "
                                           "softmax(logits / T); set top_k and top_p to null"))
    if getattr(p, "cfg_scale", 0.0):
        problems.append((where("cfg_scale"), "classifier-free guidance samples from a guided distribution, not the "
                                               "model's softmax(logits / T); set cfg_scale: 0"))
    if getattr(p, "logits_eos_inf", False):
        problems.append((where("logits_eos_inf"), "logits_eos_inf removes EOS from the sampling distribution, so "
                                                    "the AR likelihood would not be the rollout's; set it false"))
    return problems


#: The released JustGRPO code (docs/algorithms.md §10.9).
JUSTGRPO = "LeapLabTHU/JustGRPO@eebe50e71f5b84ec6b3824cb502664577989db1b"


class JustGRPOParams(RLParams):
    #: the release trains LLaDA-8B-Instruct only (train.py)
    official_families: ClassVar[tuple[str, ...]] = ("llada",)
    official: ClassVar[tuple[OfficialSetting, ...]] = (
        OfficialSetting("group_size", 16, f"{JUSTGRPO}:train.py:28-29", "DARE's recipes use G = 8"),
        OfficialSetting("advantage", "grpo", f"{JUSTGRPO}:grpo.py:58-61"),
        OfficialSetting("advantage_std_eps", 1e-4, f"{JUSTGRPO}:grpo.py:61", "verl's 1e-6"),
        OfficialSetting("clip_eps_low", 0.2, f"{JUSTGRPO}:grpo.py:25,47"),
        OfficialSetting("clip_eps_high", 0.2, f"{JUSTGRPO}:grpo.py:25,47"),
        OfficialSetting("dual_clip_c", None, f"{JUSTGRPO}:grpo.py:48", "DARE's recipes add a dual clip c = 3"),
        OfficialSetting("num_iterations", 1, f"{JUSTGRPO}:grpo.py:46"),
        OfficialSetting("beta", 0.0, f"{JUSTGRPO}:grpo.py:48"),
        OfficialSetting("likelihood_temperature", 1.0, f"{JUSTGRPO}:grpo.py:25,40",
                        "DARE's recipe scores at the rollout temperature (0.6), the exact rollout likelihood"),
        OfficialSetting("response_tokens", "all", f"{JUSTGRPO}:grpo.py:34"),
        OfficialSetting("prompt_padding", "attend", f"{JUSTGRPO}:grpo.py:40", "DARE never attends to prompt padding"),
    )
    likelihood_temperature: float | Literal["sampler"] = Field(
        "sampler", description="Temperature of the AR likelihood; 'sampler' = the rollout temperature (exact)."
    )
    chunk_size: int = Field(1, ge=1, description="Response positions per pass (DARE justgrpo_position_chunk_size).")


class JustGRPO(OnlineRLObjective):
    """JustGRPO (arXiv 2601.15165): AR decoding (block length 1), exact AR likelihood, clipped GRPO."""

    name = "justgrpo"
    Params = JustGRPOParams
    zero_advantage_rows_vanish = True  # loss -A * clip(rho): identically 0 at A = 0

    def make_estimator(self, family, model_config, sampler):
        return AutoregressiveEstimator(chunk_size=self.params.chunk_size)

    def pass_loss(self, inp):
        mode = self.params.loss_aggregation
        weights = inp.current.scored

        def agg(values: torch.Tensor) -> torch.Tensor:
            return chunk_aggregate(values, weights, mode, inp.response_lengths, inp.total_response_tokens,
                                   inp.num_sequences)

        return clipped_token_loss(inp, self.params, agg=agg)

    def check(self, ctx, loc):
        problems = super().check(ctx, loc)
        rollout = ctx.rollout_sampler
        if rollout is None:
            return problems  # no sampler, or overrides it rejects (reported by the resolution)
        return problems + autoregressive_sampler_problems(rollout.sampler, rollout.where)
