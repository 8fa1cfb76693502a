"""``tracerl``: trajectory-aware PPO (Wang et al., "Revolutionizing Reinforcement Learning Framework
for Diffusion Large Language Models", arXiv 2509.06949 §3, the TraceRL policy objective; not in the
DARE repo, docs/algorithms.md §3.12).

Estimator: replay of the sampler's trajectory with *trajectory shrinkage* ``s`` (``shrink``): every
``s`` neighbouring steps form one transition ``tau^s(t)``, scored under the state before it
(:mod:`dare.diffusion.estimators.trajectory`; ``shrink = 1`` is exact replay). Where the rollout sampler
declares its block stride (:meth:`dare.components.Sampler.steps_per_block`) a transition never spans two blocks:
a block of ``b`` steps splits into ``ceil(b / s)`` transitions, the last one shorter when ``s`` does not divide
``b`` (merging across the boundary would score the next block's first tokens under a state the decoder never
saw). Block families need no split (LLaDA2 declares no stride: its rows count their steps across blocks): the
block-diffusion forward conditions each block on its *clean* predecessors, so a transition spanning two blocks
scores each block's tokens under a state the decoder saw (the later block fully masked after the earlier one was
complete). Loss (the paper's
``J_policy``)::

    L = (1 / N) sum_i sum_t (1 / |tau_i^s(t)|) sum_{k in tau_i^s(t)} C_eps(rho_k, A_i)  + beta KL

i.e. a per-sequence token mean inside each transition, *summed* over transitions and averaged over
the ``N`` completions (``C_eps``: clipped surrogate with dual clip). ``loss_aggregation`` is
therefore not used. Metrics are averaged over transitions.

Out of scope: TraceRL's diffusion value model (token-wise GAE baselines) and sliced block training;
advantages are the group advantages of the trainer (the paper's value-free variant).

``preset: official`` sets the released trainer's values DARE can express (``TraceRLParams.official``: G = 8,
eps 0.2, no dual clip, shrinkage 8, prompt padding attended to); docs/algorithms.md §10.11 lists those it
cannot (transition-mean normaliser, KL to the rollout policy summed per transition, per-row step grouping,
population-std advantages), so TraceRL has no parity test.
"""

from __future__ import annotations

from typing import ClassVar

from pydantic import Field

from dare.components.official import OfficialSetting

from dare.diffusion.estimators import TrajectoryEstimator
from dare.rl import LossTerms, OnlineRLObjective, RLParams, clipped_token_loss

__all__ = ["TraceRL", "TraceRLParams"]


#: The released TraceRL code and LLaDA config (docs/algorithms.md §10.11).
TRACERL_REPO = "Gen-Verse/dLLM-RL@10b4fd1cba83e4496c20585dc2fd01dc02f20255"


class TraceRLParams(RLParams):
    official: ClassVar[tuple[OfficialSetting, ...]] = (
        OfficialSetting("group_size", 8, f"{TRACERL_REPO}:configs/rl_llada.yaml:34"),
        OfficialSetting("clip_eps_low", 0.2, f"{TRACERL_REPO}:configs/rl_llada.yaml:65", "DARE's recipes: the same"),
        OfficialSetting("clip_eps_high", 0.2, f"{TRACERL_REPO}:configs/rl_llada.yaml:65", "DARE's recipes: the same"),
        OfficialSetting("dual_clip_c", None, f"{TRACERL_REPO}:train/rl_llada.py:584-588",
                        "DARE's recipes add a dual clip c = 3"),
        OfficialSetting("shrink", 8, f"{TRACERL_REPO}:configs/rl_llada.yaml:60", "exact replay (s = 1) by default"),
        OfficialSetting("prompt_padding", "attend", f"{TRACERL_REPO}:train/rl_llada.py:575",
                        "DARE never attends to prompt padding"),
    )
    shrink: int = Field(1, ge=1, description="Trajectory shrinkage s: merge every s neighbouring denoising steps.")


class TraceRL(OnlineRLObjective):
    """TraceRL (arXiv 2509.06949): trajectory-aware PPO with shrinkage; value model not included."""

    name = "tracerl"
    Params = TraceRLParams
    zero_advantage_rows_vanish = True  # loss -A * clip(rho): identically 0 at A = 0

    def make_estimator(self, family, model_config, sampler):
        return TrajectoryEstimator(shrink=self.params.shrink, block_stride=sampler.steps_per_block())

    def pass_loss(self, inp):
        terms = clipped_token_loss(inp, self.params, mode="sequence-mean", num_sequences=inp.num_sequences)
        return LossTerms(terms.loss, {k: v / inp.num_passes for k, v in terms.metrics.items()})
