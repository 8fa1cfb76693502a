"""GRPOTrainer on a tiny LLaDA: learning direction, proxy replay, inner iterations, reference, resume."""

from __future__ import annotations

import json

import pytest
import torch
import yaml

from dare.diffusion.estimators import ScoringBatch, score_pass
from dare.modeling import load_model
from dare.rewards import WeightedReward
from dare.rl import group_advantages
from dare.trainers import DareConfig
from dare.rl.prompts import PromptDataset
from dare_grpo.objectives import BGPO, CJGRPO, D1, ESPO, CoupledGRPO, TraceRL
from dare.rl.rollout import Rollout
from dare.rl.trainer import GRPOTrainer

pytest.importorskip("dare_llada")
from dare_llada.sampler import LLaDASampler  # noqa: E402


class Cycle:
    """Test reward: ``pattern`` repeated in call order (default 1, 0, 1, 0, ...: every group of 2 has
    advantages (+a, -a))."""

    name = "cycle"

    def __init__(self, pattern=(1.0, 0.0)):
        self.pattern, self.calls = pattern, 0

    def score(self, completion, sample):
        self.calls += 1
        return float(self.pattern[(self.calls - 1) % len(self.pattern)])


class Raising:
    name = "raising"

    def score(self, completion, sample):
        raise RuntimeError("reward server down")


def make_trainer(lm, objective, out, **cfg):
    """A GRPOTrainer: ``cfg`` keys the objective's Params declare go to the objective, the rest to DareConfig."""
    rl = {k: cfg.pop(k) for k in list(cfg) if k in type(objective).Params.model_fields}
    objective = type(objective)(objective.params, **{"group_size": 2, **rl})
    kw = dict(output_dir=str(out), per_device_train_batch_size=1, max_steps=2, learning_rate=1e-2,
              logging_steps=1, save_steps=100, report_to="none", seed=0)
    kw.update(cfg)
    args = DareConfig(**kw)
    sampler = LLaDASampler({"gen_length": 4, "block_length": 4, "steps": 4, "temperature": 1.0})
    return GRPOTrainer(
        model=lm.model, args=args, train_dataset=PromptDataset(["12", "34", "56", "78"], [{}] * 4),
        processing_class=lm.tokenizer, family=lm.family, tokens=lm.tokens, objective=objective,
        estimator=objective.make_estimator(lm.family, lm.model.config, sampler), sampler=sampler,
        reward=WeightedReward([(Cycle(), 1.0)]),
    )


def hand_rollout(lm, trainer):
    """One prompt, two different completions (reward 1 then 0), left-to-right trajectories."""
    tok = lm.tokenizer
    prompt = tok("12", add_special_tokens=False)["input_ids"]
    comps = [tok("ab", add_special_tokens=False)["input_ids"] + [lm.tokens.eos_id] * 2,
             tok("xyzw", add_special_tokens=False)["input_ids"]]
    ids = torch.tensor([prompt + c for c in comps])
    batch = ScoringBatch(ids, torch.ones_like(ids), torch.ones(2, 4, dtype=torch.bool), len(prompt),
                         lm.tokens.mask_id, torch.tensor([[0, 1, 2, 3], [3, 2, 1, 0]]))
    rewards = torch.tensor([1.0, 0.0])
    return Rollout(batch=batch, texts=["ab", "xyzw"], rewards=rewards, reward_parts={},
                   advantages=group_advantages(rewards, 2), passes=[trainer.draw_passes(batch)])


@torch.no_grad()
def estimator_scores(trainer, rollout):
    fn = trainer.logits_fn(trainer.model)
    return sum(score_pass(fn, rollout.batch, p).sequence for p in rollout.passes[0])


@pytest.mark.parametrize("objective", [D1(), CoupledGRPO(), BGPO({"mc_num": 4}), ESPO(), CJGRPO(), TraceRL()],
                         ids=lambda o: o.name)
def test_one_step_raises_likelihood_of_rewarded_completion(tmp_path, tiny_llada_dir, objective):
    lm = load_model(tiny_llada_dir)
    trainer = make_trainer(lm, objective, tmp_path, num_iterations=1)
    trainer.current_gradient_accumulation_steps = 1
    rollout = hand_rollout(lm, trainer)
    before = estimator_scores(trainer, rollout)
    update = trainer.update
    lm.model.zero_grad()
    update(lm.model, rollout, 0)
    with torch.no_grad():
        for p in lm.model.parameters():
            if p.grad is not None:
                p -= 0.05 * p.grad
    after = estimator_scores(trainer, rollout)
    assert after[0] > before[0] and after[1] < before[1], (before, after)


def test_proxy_replay_gradient_equals_direct_gradient(tmp_path, tiny_llada_dir):
    """ESPO's scalar-proxy replay (one MC sample in memory) gives the gradient of L(mean_p l_p)."""
    lm = load_model(tiny_llada_dir)
    objective = ESPO({"mc_num": 3, "beta": 0.0})
    trainer = make_trainer(lm, objective, tmp_path, micro_batch_size=1)
    trainer.current_gradient_accumulation_steps = 1
    rollout = hand_rollout(lm, trainer)
    old = [s.token * 1.01 for s in trainer.score_passes(lm.model, rollout.batch, rollout.passes[0])]  # ratio != 1
    rollout.old = [old]
    lm.model.zero_grad()
    trainer.update(lm.model, rollout, 0)
    replay = {n: p.grad.clone() for n, p in lm.model.named_parameters() if p.grad is not None}
    lm.model.zero_grad()
    fn = trainer.logits_fn(lm.model)
    mean = torch.stack([score_pass(fn, rollout.batch, p).sequence for p in rollout.passes[0]]).mean(0)
    from dare_grpo.objectives import SequenceLossInput

    old_mean = torch.stack([s.sum(-1) for s in old]).mean(0)
    trainer.objective.sequence_loss(SequenceLossInput(mean, old_mean, None, rollout.advantages,
                                                      rollout.batch.response_lengths)).loss.backward()
    for n, p in lm.model.named_parameters():
        if p.grad is not None:
            assert torch.allclose(replay[n], p.grad, atol=1e-6, rtol=1e-4), n


def test_inner_iterations_reuse_the_rollout(tmp_path, tiny_llada_dir):
    lm = load_model(tiny_llada_dir)
    trainer = make_trainer(lm, D1(), tmp_path, num_iterations=2, max_steps=4, per_device_train_batch_size=2)
    calls = []
    original = trainer.generate_rollout
    trainer.generate_rollout = lambda model, inputs: calls.append(list(inputs["index"])) or original(model, inputs)
    trainer.train()
    assert len(calls) == 2 and calls[0] != calls[1]  # 4 optimizer steps, 2 rollouts of 2 prompts
    recs = [json.loads(x) for x in (tmp_path / "metrics.jsonl").read_text().splitlines() if '"loss"' in x]
    assert [("nfe/rollout" in r) for r in recs] == [True, False, True, False]
    assert recs[1]["approx_kl"] > 0  # second iteration: the policy moved, ratio != 1
    assert recs[0]["approx_kl"] == 0.0


def test_a_raising_reward_scores_zero_and_is_counted(tiny_llada_dir):
    from dare.rl.rollout import score_completions

    lm = load_model(tiny_llada_dir)
    ids = torch.tensor([[50, 51, 97, 98, lm.tokens.eos_id], [50, 51, 99, lm.tokens.eos_id, lm.tokens.eos_id]])
    batch = ScoringBatch(ids, torch.ones_like(ids), torch.ones(2, 3, dtype=torch.bool), 2, lm.tokens.mask_id)
    reward = WeightedReward([(Raising(), 1.0), (Cycle(), 2.0)])
    texts, rewards, parts, stats = score_completions(batch, lm.tokenizer, lm.tokens, reward, [{"data_source": "x"}], 2)
    assert texts == [lm.tokenizer.decode([97, 98]), lm.tokenizer.decode([99])]
    assert rewards.tolist() == [2.0, 0.0] and parts["raising"].tolist() == [0.0, 0.0]
    assert stats["reward_errors"] == 2.0 and stats["completion_length"] == 2.5


def test_reference_policy_kl_and_metrics(tmp_path, tiny_llada_dir):
    lm = load_model(tiny_llada_dir)
    trainer = make_trainer(lm, D1(), tmp_path, beta=0.1, max_steps=2)
    assert trainer.reference is not None and not trainer.reference.shares_weights
    trainer.train()
    recs = [json.loads(x) for x in (tmp_path / "metrics.jsonl").read_text().splitlines() if '"loss"' in x]
    assert recs[0]["kl"] == pytest.approx(0.0, abs=1e-7)  # reference == policy before the first step
    assert recs[1]["kl"] > 0 and recs[0]["grad_norm"] > 0
    for key in ("reward", "reward/cycle", "advantage_std", "clip_fraction", "entropy", "completion_length",
                "nfe/rollout", "time/rollout", "time/score", "time/update", "reward_errors"):
        assert key in recs[0], key


def test_reference_sync_in_the_trainer_follows_trls_rule(tmp_path, tiny_llada_dir):
    """sync_ref_model with N = 2, alpha = 0.5 over 3 steps: the reference is the initial weights after step 1, then
    0.5 * policy_2 + 0.5 * initial after step 2 and unchanged after step 3 (TRL's SyncRefModelCallback)."""
    from transformers import TrainerCallback

    lm = load_model(tiny_llada_dir)
    start = {n: p.detach().clone() for n, p in lm.model.named_parameters()}
    trainer = make_trainer(lm, D1(), tmp_path, beta=0.1, max_steps=3, sync_ref_model=True, ref_model_sync_steps=2,
                           ref_model_mixup_alpha=0.5)
    policy_at = {}

    class Record(TrainerCallback):
        def on_step_end(self, args, state, control, **kwargs):
            policy_at[state.global_step] = {n: p.detach().clone() for n, p in lm.model.named_parameters()}

    trainer.add_callback(Record())
    trainer.train()
    with trainer.reference.model() as ref:
        got = dict(ref.named_parameters())
    name = "model.transformer.wte.weight" if "model.transformer.wte.weight" in got else next(iter(got))
    want = 0.5 * policy_at[2][name] + 0.5 * start[name]
    assert not torch.equal(policy_at[2][name], start[name]) and not torch.equal(policy_at[3][name], policy_at[2][name])
    torch.testing.assert_close(got[name], want, rtol=0, atol=1e-6)


def test_reference_of_a_peft_model_is_the_base_without_a_copy(tmp_path, tiny_llada_dir):
    from dare.modeling.lora import apply_lora
    from dare.runspec import LoraSpec

    lm = load_model(tiny_llada_dir)
    lm.model = apply_lora(lm.model, lm.family, LoraSpec(r=2, alpha=4))
    trainer = make_trainer(lm, D1(), tmp_path, beta=0.1, max_steps=1)
    assert trainer.reference.shares_weights
    trainer.train()
    rec = next(json.loads(x) for x in (tmp_path / "metrics.jsonl").read_text().splitlines() if '"loss"' in x)
    assert rec["kl"] == pytest.approx(0.0, abs=1e-7)  # LoRA B = 0 at init: adapters off == policy


def _spec(model_dir, out, objective="d1", iterations=1, steps=3):
    return {
        "model": {"path": str(model_dir)},
        "data": {"train": {"path": "dare://sudoku/train.parquet", "limit": 16, "chat_template": False,
                           "prompt_template": "{{ extra_info.puzzle }}"}},
        "algorithm": {"name": objective, "params": {"group_size": 2, "num_iterations": iterations,
                                                     "rollout_sampler": {"temperature": 1.0}}},
        "sampler": {"name": "llada", "params": {"gen_length": 4, "block_length": 4, "steps": 4}},
        "rewards": [{"name": "sudoku", "params": {"require_answer_tags": False}}],
        "train": {"learning_rate": 1e-2, "max_steps": steps, "per_device_batch_size": 2, "logging_steps": 1, "save_steps": 1},
        "output": {"dir": str(out)},
    }


@pytest.mark.parametrize("objective,iterations,steps", [("coupled-grpo", 1, 3), ("espo", 2, 4)])
def test_resume_reproduces_masks_rollouts_and_weights(tmp_path, tiny_llada_dir, monkeypatch, objective, iterations, steps):
    """Kill-and-resume equals an uninterrupted run: same masks, same completions, bit-identical weights.

    Every draw is keyed by (seed, step, completion index), so nothing random is checkpointed. coupled-grpo
    resumes after step 2 and redraws step 3's rollout and masks; espo (2 inner iterations) checkpoints only
    at rollout boundaries (the saves due at steps 1 and 3 are deferred to 2 and 4), resumes after step 2 and
    redraws the rollout of steps 3-4, so no rollout buffer is ever saved.
    """
    import shutil

    from dare.run import Run
    from dare.runspec import load_spec

    seen: dict[int, list] = {}
    original = GRPOTrainer.draw_passes

    def record(self, batch, iteration=0):
        passes = original(self, batch, iteration)
        seen.setdefault(self.state.global_step, []).append((batch.input_ids.clone(), [p.mask.clone() for p in passes]))
        return passes

    monkeypatch.setattr(GRPOTrainer, "draw_passes", record)
    out = tmp_path / "run"
    (tmp_path / "s.yaml").write_text(yaml.safe_dump(_spec(tiny_llada_dir, out, objective, iterations, steps)))
    run = Run(load_spec(tmp_path / "s.yaml", check=False))
    run.execute(evaluate=False)
    full = {k: v.clone() for k, v in run.model.state_dict().items()}
    first = dict(seen)
    ckpts = sorted(p.name for p in (out / "checkpoints").glob("checkpoint-*"))
    assert ckpts == [f"checkpoint-{steps - 1}", f"checkpoint-{steps}"] if iterations == 1 else ["checkpoint-2", "checkpoint-4"]
    assert not list(out.rglob("rl_state*")) and not list(out.rglob("*.pkl"))

    # lose the last checkpoint and the final model: the rerun resumes from the one before
    shutil.rmtree(out / "checkpoints" / f"checkpoint-{steps}")
    shutil.rmtree(out / "model")
    seen.clear()
    run2 = Run(load_spec(tmp_path / "s.yaml", check=False))
    run2.execute(evaluate=False)
    assert set(seen) == {2}  # the rollout of the resumed step is drawn again, with the same completions and masks
    for (ids, masks), (ids0, masks0) in zip(seen[2], first[2], strict=True):
        assert torch.equal(ids, ids0) and all(torch.equal(a, b) for a, b in zip(masks, masks0, strict=True))
    for k, v in run2.model.state_dict().items():
        assert torch.equal(v, full[k]), k


def test_prompt_order_repeats_each_rollout_batch_and_is_a_function_of_seed_and_epoch():
    from dare.errors import DataError
    from dare.rl.prompts import RepeatChunkSampler

    s = RepeatChunkSampler(7, chunk_size=3, repeats=2, seed=5)
    order = list(s)
    assert len(order) == len(s) == 12 and order[:3] == order[3:6] and order[6:9] == order[9:12]
    assert len(set(order[:3] + order[6:9])) == 6  # without replacement within an epoch
    assert list(RepeatChunkSampler(7, 3, 2, seed=5)) == order
    s.set_epoch(1)
    assert list(s) != order
    with pytest.raises(DataError, match="cannot fill one rollout batch"):
        RepeatChunkSampler(2, chunk_size=3, repeats=1)


def test_tracerl_trains_on_fast_dllm_rollouts_from_the_spec(tmp_path, tiny_llada_dir, monkeypatch):
    """``algorithm.params.rollout_sampler`` carries Fast-dLLM's dual cache + threshold to the rollouts of a 2-step
    TraceRL run: the accelerated decoder runs, records every completion token's step (unmask_step, in block order),
    and the policy trains on those trajectories."""
    from dare.run import Run
    from dare.runspec import load_spec

    decoders, seen = [], []
    generate, draw = LLaDASampler.generate, GRPOTrainer.draw_passes

    def spy_generate(self, *args, **kwargs):
        out = generate(self, *args, **kwargs)
        decoders.append((self.params.cache, self.params.threshold, self.params.temperature, out.nfe, out.steps))
        return out

    def spy_draw(self, batch, iteration=0):
        seen.append(batch.unmask_step.clone())
        return draw(self, batch, iteration)

    monkeypatch.setattr(LLaDASampler, "generate", spy_generate)
    monkeypatch.setattr(GRPOTrainer, "draw_passes", spy_draw)
    # an untrained model never writes 16 digits: score the distinct characters instead, so groups have advantages
    monkeypatch.setattr("dare.builtins.rewards.sudoku_score", lambda completion, *a: len(set(completion)) / 8)
    spec = _spec(tiny_llada_dir, tmp_path / "run", objective="tracerl", steps=2)
    spec["sampler"]["params"] = {"gen_length": 8, "block_length": 4, "steps": 8}
    spec["algorithm"]["params"]["rollout_sampler"] = {"temperature": 1.0, "cache": "dual", "threshold": 0.9}
    (tmp_path / "s.yaml").write_text(yaml.safe_dump(spec))
    run = Run(load_spec(tmp_path / "s.yaml"))  # validated: the dual cache needs the family's kv_logits
    before = {k: v.clone() for k, v in run.model.state_dict().items()}
    run.execute(evaluate=False)

    assert decoders and all(d[:3] == ("dual", 0.9, 1.0) for d in decoders)
    assert all(nfe == steps <= 8 for *_, nfe, steps in decoders)  # one forward per step, at most one step per token
    assert len(seen) == 2  # one rollout per step (num_iterations 1)
    for unmask_step in seen:
        assert unmask_step.shape == (4, 8) and bool((unmask_step >= 0).all())  # every token's step recorded
        # blocks are decoded left to right: block 0's commits all precede block 1's
        assert bool((unmask_step[:, :4].max(dim=1).values < unmask_step[:, 4:].min(dim=1).values).all())
    changed = [k for k, v in run.model.state_dict().items() if not torch.equal(v, before[k])]
    assert changed  # the policy trained on the accelerated rollouts


def tied_group_rollout(lm, trainer, rewards=(1.0, 0.0, 0.5, 0.5)):
    """Two prompts x two completions; with the default rewards the second group ties (advantages exactly 0)."""
    tok = lm.tokenizer
    eos = lm.tokens.eos_id
    prompts = [tok(p, add_special_tokens=False)["input_ids"] for p in ("12", "34")]
    comps = [tok("ab", add_special_tokens=False)["input_ids"] + [eos] * 2, tok("xyzw", add_special_tokens=False)["input_ids"],
             tok("pq", add_special_tokens=False)["input_ids"] + [eos] * 2, tok("rs1", add_special_tokens=False)["input_ids"] + [eos]]
    ids = torch.tensor([prompts[i // 2] + c for i, c in enumerate(comps)])
    batch = ScoringBatch(ids, torch.ones_like(ids), torch.ones(4, 4, dtype=torch.bool), 2, lm.tokens.mask_id,
                         torch.tensor([[0, 1, 2, 3], [3, 2, 1, 0], [1, 0, 3, 2], [0, 0, 1, 1]]))
    rewards = torch.tensor(rewards)
    return Rollout(batch=batch, texts=["ab", "xyzw", "pq", "rs1"], rewards=rewards, reward_parts={},
                   advantages=group_advantages(rewards, 2), passes=[trainer.draw_passes(batch)])


def update_grads(lm, trainer, rollout, skip: bool):
    """Gradients, loss and metrics of one update of ``rollout`` with ``skip_zero_advantage = skip``."""
    trainer.params.skip_zero_advantage = skip
    update = trainer.update
    lm.model.zero_grad(set_to_none=True)
    rows, original = [], trainer.denoiser_logits
    trainer.denoiser_logits = lambda model, noisy, *a: rows.append(noisy.shape[0]) or original(model, noisy, *a)
    try:
        loss, metrics = update(lm.model, rollout, 0)
    finally:
        trainer.denoiser_logits = original
    metrics["rows_run"] = sum(rows)
    return {n: p.grad.clone() for n, p in lm.model.named_parameters() if p.grad is not None}, loss, metrics


@pytest.mark.parametrize("objective", [D1(), CoupledGRPO(), BGPO({"mc_num": 2}), CJGRPO(), TraceRL({"shrink": 2}),
                                       ESPO({"mc_num": 2})], ids=lambda o: o.name)
def test_skipping_zero_advantage_rows_keeps_the_gradient(tmp_path, tiny_llada_dir, objective):
    """The rows of a tied group add exactly zero gradient, so skipping them (the default) gives the gradient and
    the loss of the whole batch, with fewer forwards; the policy ratio is made != 1 so the clip branches matter."""
    lm = load_model(tiny_llada_dir)
    trainer = make_trainer(lm, objective, tmp_path)
    trainer.current_gradient_accumulation_steps = 1
    rollout = tied_group_rollout(lm, trainer)
    assert rollout.advantages[2:].eq(0).all() and rollout.advantages[:2].ne(0).all()
    # an old policy 1 % off the current one (as after an inner iteration), so ratios differ from 1
    rollout.old = [[s.token * 1.01 for s in trainer.score_passes(lm.model, rollout.batch, rollout.passes[0])]]
    full, full_loss, full_metrics = update_grads(lm, trainer, rollout, skip=False)
    skipped, skip_loss, skip_metrics = update_grads(lm, trainer, rollout, skip=True)
    assert full.keys() == skipped.keys() and len(full) > 0
    for n in full:
        assert torch.allclose(full[n], skipped[n], rtol=1e-5, atol=1e-8), (n, (full[n] - skipped[n]).abs().max())
    assert skip_loss == pytest.approx(full_loss, rel=1e-6, abs=1e-9)
    assert 0 < skip_metrics["rows_run"] < full_metrics["rows_run"]
    assert max(g.abs().max() for g in full.values()) > 1e-4  # a real gradient, not a vacuous comparison


def test_a_rollout_of_tied_groups_still_steps_the_optimizer(tmp_path, tiny_llada_dir):
    """Every group tied: no row is run, but one zero-gradient job gives every parameter a zero gradient, so the
    optimizer steps exactly as over rows that all add zero gradient (AdamW's weight decay and moments)."""
    lm = load_model(tiny_llada_dir)
    trainer = make_trainer(lm, D1(), tmp_path)
    trainer.current_gradient_accumulation_steps = 1
    rollout = tied_group_rollout(lm, trainer, rewards=(0.5, 0.5, 1.0, 1.0))
    full, _, full_metrics = update_grads(lm, trainer, rollout, skip=False)
    skipped, loss, metrics = update_grads(lm, trainer, rollout, skip=True)
    assert skipped.keys() == full.keys() and len(full) > 0
    assert all(float(g.abs().max()) == 0.0 for g in skipped.values())
    assert all(float(g.abs().max()) == 0.0 for g in full.values())
    assert loss == 0.0 and metrics["nfe/update"] == 0 and full_metrics["nfe/update"] > 0
    assert metrics["rows_run"] == 1  # the zero-gradient job's one row
    assert "entropy" not in metrics and full_metrics["entropy"] > 0  # nothing run: no entropy, not an entropy of 0


def test_skip_zero_advantage_is_off_where_the_loss_does_not_vanish(tmp_path, tiny_llada_dir):
    """With a KL term (beta > 0) a tied row still has a gradient, so every row runs."""
    lm = load_model(tiny_llada_dir)
    trainer = make_trainer(lm, D1(), tmp_path)
    rollout = tied_group_rollout(lm, trainer)
    assert trainer.trained_rows(rollout).tolist() == [0, 1]
    trainer.params.beta = 0.1
    assert trainer.trained_rows(rollout) is None
    trainer.params.beta = 0.0
    trainer.params.skip_zero_advantage = False
    assert trainer.trained_rows(rollout) is None


def test_a_subclass_does_not_inherit_the_zero_advantage_flag(tmp_path, tiny_llada_dir):
    """A plugin subclassing D1 to add a term without the advantage must not have its tied rows skipped on D1's
    word: the flag counts only where the objective's own class declares it."""

    class D1WithBonus(D1):
        name = "d1-with-bonus"

    class D1Declared(D1):
        name = "d1-declared"
        zero_advantage_rows_vanish = True

    lm = load_model(tiny_llada_dir)
    rows = {}
    for cls in (D1, D1WithBonus, D1Declared):
        trainer = make_trainer(lm, cls(), tmp_path / cls.name)
        rows[cls.name] = trainer.trained_rows(tied_group_rollout(lm, trainer))
    assert rows["d1"].tolist() == [0, 1] and rows["d1-declared"].tolist() == [0, 1]
    assert rows["d1-with-bonus"] is None


@pytest.mark.parametrize("objective", [D1(), TraceRL()], ids=lambda o: o.name)
def test_training_with_skipped_rows_equals_training_every_row(tmp_path, tiny_llada_dir, objective):
    """Two inner iterations per rollout (old-policy scores, ratios != 1 in the second), AdamW with weight decay:
    the weights after 4 steps with and without skipping the tied group's rows agree to float rounding."""
    weights = []
    for skip in (False, True):
        lm = load_model(tiny_llada_dir)
        trainer = make_trainer(lm, objective, tmp_path / str(skip), num_iterations=2, max_steps=4,
                               per_device_train_batch_size=2, weight_decay=0.1, skip_zero_advantage=skip)
        trainer.reward = WeightedReward([(Cycle((1.0, 1.0, 1.0, 0.0)), 1.0)])  # one tied group, one not
        trainer.train()
        weights.append({n: p.detach().clone() for n, p in lm.model.named_parameters()})
    start = load_model(tiny_llada_dir).model.state_dict()
    moved = max(float((weights[0][n] - start[n]).abs().max()) for n in weights[0])
    assert moved > 1e-3
    for n in weights[0]:
        assert torch.allclose(weights[0][n], weights[1][n], rtol=1e-5, atol=1e-6), (n, (weights[0][n] - weights[1][n]).abs().max())


def test_reference_sync_resumes_with_the_mixed_reference(tmp_path, tiny_llada_dir):
    """The mixed reference is saved with each checkpoint: 4 steps with a sync every step equal 2 steps, then a resume
    from checkpoint-2 to step 4 (weights and the reference bit-exact); the checkpoint holds the reference's file."""
    from dare.rl.reference_sync import REFERENCE_FILE

    def run(out, resume=None):
        lm = load_model(tiny_llada_dir)
        trainer = make_trainer(lm, D1(), out, beta=0.1, max_steps=4, save_steps=2, sync_ref_model=True,
                               ref_model_sync_steps=1, ref_model_mixup_alpha=0.5)
        trainer.train(resume_from_checkpoint=resume)
        with trainer.reference.model() as ref:
            return ({n: p.detach().clone() for n, p in lm.model.named_parameters()},
                    {n: p.detach().clone() for n, p in ref.named_parameters()})

    straight = run(tmp_path / "a")
    assert (tmp_path / "a" / "checkpoint-2" / REFERENCE_FILE).is_file()
    resumed = run(tmp_path / "a", resume=str(tmp_path / "a" / "checkpoint-2"))
    for want, got in zip(straight, resumed):
        for name in want:
            assert torch.equal(want[name], got[name]), name
