"""TraceRL on SDAR against the official SDAR trainer (Gen-Verse/dLLM-RL@10b4fd1, ``train/rl_sdar.py``).

The fixture (``tests/fixtures/parity/tracerl_sdar/``, built by ``tools/parity/build_tracerl_sdar.py``) holds a tiny
SDAR model (current and rollout-policy weights), left-padded prompts whose lengths are not multiples of the block,
responses ending in an end-of-turn id then padding, a per-block decoding trajectory with repeated and skipped steps,
the advantages, and the official training rows' per-token log-probs, loss and gradients (and a second loss with a
stale rollout log-prob, for the log-ratio clamp). DARE's trajectory replay and TraceRL loss with ``preset: official``
resolved for the ``sdar`` family, through the SDAR family's block-diffusion forward and the rollout conventions the
RL trainer applies, must match to 1e-5 (relative); changing one official setting must break the match.
"""

from __future__ import annotations

import types

import pytest
import torch

from dare.diffusion.estimators import ScoringBatch
from dare.rl import step
from dare.rl.rollout import Rollout
from dare_grpo.objectives.tracerl import TraceRL, TraceRLParams
from tools.parity.common import read_fixture, rel_diff

TOL = 1e-5
NO_STRIDE = types.SimpleNamespace(steps_per_block=lambda: None)  # the hand-made trajectory has no step grid


def _model(t, meta, prefix):
    from dare_sdar.configuration_sdar import SDARConfig
    from dare_sdar.family import PRESETS
    from dare_sdar.modeling_sdar import SDARForCausalLM

    model = SDARForCausalLM(SDARConfig(**{**PRESETS["tiny"], **meta["model_config"]})).float()
    model.load_state_dict({k[len(prefix):]: v for k, v in t.items() if k.startswith(prefix)})
    return model.train()


def run_dare(stale: bool = False, **overrides):
    """DARE's loss, per-pass token log-probs and gradients on the fixture, as the RL trainer wires them."""
    from dare_sdar.family import SDARFamily

    t, meta = read_fixture("tracerl_sdar")
    params = TraceRLParams.model_validate({"preset": "official", "group_size": 2, "num_iterations": 2, **overrides},
                                          context={"family": "sdar"})
    family = SDARFamily()
    models = {m: _model(t, meta, f"{m}.") for m in ("current", "old")}
    P, ids = meta["prompt_length"], t["input_ids"]
    G = ids.shape[1] - P
    response = torch.arange(G)[None] < t["response_lengths"][:, None]
    attn = torch.cat([(ids[:, :P] != meta["pad_id"]).long(), response.long()], 1)
    batch = ScoringBatch(ids, attn, response, P, meta["mask_id"], t["unmask_step"])
    # the public RL step (dare.rl.step), as GRPOTrainer runs it: rollout conventions, passes, old scores, update
    batch = step.rollout_batch(batch, params)
    objective = TraceRL(params)
    estimator = objective.make_estimator(family, models["current"].config, NO_STRIDE)
    passes = step.draw_passes(estimator, batch, None, params, ())
    rows = sum(float(p.scored.any(dim=-1).sum()) for p in passes)

    def fn(model):
        return lambda noisy, clean, a, **kw: family.denoiser_logits(model, noisy, clean, a, **kw)

    old = step.token_scores(fn(models["old"]), batch, passes)
    if stale:
        b, g, shift = meta["stale"]
        for i, pas in enumerate(passes):
            old[i][b, g] += shift * float(pas.scored[b, g])
    rollout = Rollout(batch, [], torch.zeros(batch.num_rows), {}, t["advantages"], passes=[passes], old=[old])
    total, _ = step.update(step.StepSettings(objective), fn(models["current"]), rollout, 0)
    logps = [s.token for s in step.score_passes(fn(models["current"]), batch, passes)]
    grads = {k: p.grad for k, p in models["current"].named_parameters() if k in meta["grad_params"]}
    return t, rows, total, grads, logps


def _worst(t, loss, grads, tag: str = "") -> float:
    return max([rel_diff(torch.tensor([loss]), t[f"expected.{tag}loss"])]
               + [rel_diff(g, t[f"expected.{tag}grad.{n}"]) for n, g in grads.items()])


def _official_rows(t, logps) -> torch.Tensor:
    """DARE's token log-probs laid out as the official training rows ``[R, G]`` (row i: completion, round)."""
    return torch.stack([logps[int(r)][int(b)] for b, r in zip(t["expected.row_completion"], t["expected.row_round"])])


def _per_token(t, logps) -> tuple[torch.Tensor, torch.Tensor]:
    """``(DARE, official)`` ``[N, G]`` log-prob of each response token (each is scored by exactly one pass or row)."""
    official = torch.zeros_like(logps[0]).index_add_(0, t["expected.row_completion"], t["expected.logp"])
    return torch.stack(logps).sum(0), official


def test_official_preset_on_sdar_reproduces_the_official_trainer():
    t, rows, loss, grads, logps = run_dare()
    assert rows == float(t["expected.num_rows"])  # a (completion, pass) pair per official training row
    assert len(logps) == int(t["expected.row_round"].max()) + 1  # one pass per round
    assert rel_diff(_official_rows(t, logps), t["expected.logp"]) <= TOL
    assert _worst(t, loss, grads) <= TOL


def test_official_preset_clamps_a_stale_log_ratio_as_the_official_trainer():
    t, _, loss, grads, _ = run_dare(stale=True)
    assert _worst(t, loss, grads, "stale.") <= TOL
    t, _, loss, grads, _ = run_dare(stale=True, log_ratio_clamp=None)
    assert _worst(t, loss, grads, "stale.") > 1e-4


def test_the_sdar_preset_is_the_sdar_trainers():
    p = TraceRLParams.model_validate({"preset": "official"}, context={"family": "sdar"})
    assert (p.group_size, p.shrink, p.normaliser, p.row_layout, p.kl_target, p.beta, p.prompt_padding) == (
        16, 1, "response_length", "block_round", "rollout", 0.01, "exclude")
    assert (p.block_alignment, p.response_padding, p.log_ratio_clamp, p.dual_clip_c) == (
        "prompt_end", "masked", 10.0, None)
    assert (p.advantage_std, p.advantage_std_eps, p.overlong_margin, p.group_filter) == (
        "population", 0.0, 5, (0.2, 0.8))
    llada = TraceRLParams.model_validate({"preset": "official"}, context={"family": "llada"})
    assert (llada.shrink, llada.normaliser, llada.row_layout, llada.prompt_padding, llada.group_size) == (
        8, "transitions", "transition", "attend", 8)
    assert TraceRLParams.model_validate({"preset": "official"}).shrink == 8  # no family known: the first (LLaDA)
    assert TraceRLParams.official_families == ("llada", "sdar")


def test_block_alignment_changes_the_log_probs_of_unaligned_prompts():
    t, _, _, _, logps = run_dare(block_alignment="first_token")
    assert rel_diff(*_per_token(t, logps)) > 1e-2
    t, _, _, _, logps = run_dare()
    assert rel_diff(*_per_token(t, logps)) <= TOL


@pytest.mark.parametrize("change", [
    {"block_alignment": "first_token"},
    {"response_padding": "exclude"},
    {"row_layout": "transition"},
    {"normaliser": "transitions"},
    {"kl_target": "reference"},
    {"beta": 0.0},
    {"clip_eps_low": 0.1, "clip_eps_high": 0.1},
    {"prompt_padding": "attend"},
    {"shrink": 2},
])
def test_changing_one_official_setting_breaks_parity(change):
    t, _, loss, grads, _ = run_dare(**change)
    assert _worst(t, loss, grads) > 1e-4, change
