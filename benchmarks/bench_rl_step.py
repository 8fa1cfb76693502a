"""One d1 RL step on the quickstart model: DARE's GRPOTrainer vs a minimal ``trl.GRPOTrainer`` subclass.

Both trainers run the same step on the same model (LLaDA architecture, the quickstart preset: d_model
128, 4 layers) and the same Sudoku prompts: ``--prompts`` prompts x ``--group`` completions sampled
with LLaDA's low-confidence decoder (gen_length 17, 17 steps, temperature 1), scored with the Sudoku
reward, and one optimizer step on d1's one-step estimator (completion fully masked, prompt masked
with p = 0.15), token-level GRPO loss, mu = 1, beta = 0.

The TRL baseline is the d1 design: ``GRPOTrainer`` with the generation replaced by the same LLaDA
sampler (``_generate_single_turn``) and the log-prob computation replaced by the one-step masked
forward (``_get_per_token_logps_and_entropies``); everything else is TRL's.

Run: ``python benchmarks/bench_rl_step.py [--steps 2] [--rounds 3] [--threads 1]``. The trainers run in
alternating rounds (DARE, TRL, DARE, ...; each round one warm-up step, then ``--steps`` timed ones)
so that a change of machine load hits both. Prints the median seconds per step split into rollout /
scoring / update for each trainer, and the ratio TRL / DARE of the whole step (> 1 means DARE is
faster). Timings of both come from this process.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time

import torch

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

SAMPLER = {"gen_length": 17, "block_length": 17, "steps": 17, "temperature": 1.0}


class StepTimer:
    """Wall time of named phases within the current optimizer step."""

    def __init__(self):
        self.steps: list[dict[str, float]] = []

    def new_step(self):
        self.steps.append({"rollout": 0.0, "scoring": 0.0, "total": 0.0})

    def add(self, key: str, seconds: float):
        self.steps[-1][key] += seconds


def load_rows(n: int):
    from dare.data import load_rows as _load

    return _load("dare://sudoku/train.parquet", limit=n)


def quickstart_model(tmp: str):
    from dare.testing import tiny_model

    return tiny_model("llada", os.path.join(tmp, "model"), preset="quickstart", seed=0)


# ============================================================================ DARE
def run_dare(lm, rows, args, tmp) -> list[dict[str, float]]:
    import dare.rl.trainer as trainer_mod
    from dare.data import Prompter
    from dare.rewards import WeightedReward
    from dare.builtins.rewards import SudokuReward
    from dare.rl.trainer import GRPOTrainer
    from dare.trainers import DareConfig
    from dare.rl.prompts import PromptDataset
    from dare_grpo.objectives import D1
    from dare_llada.sampler import LLaDASampler
    from transformers import TrainerCallback

    timer = StepTimer()
    prompter = Prompter(lm.tokenizer, "{{ extra_info.puzzle }}", None, chat_template=False)
    dataset = PromptDataset.from_rows(rows, prompter, lm.tokenizer, None, SAMPLER["gen_length"])
    sampler = LLaDASampler(SAMPLER)
    objective = D1({"group_size": args.group})
    config = DareConfig(output_dir=os.path.join(tmp, "dare"), per_device_train_batch_size=args.prompts,
                        max_steps=args.steps + 1, learning_rate=1e-4, logging_steps=10_000,
                        logging_first_step=False, save_strategy="no", report_to="none", seed=0, disable_tqdm=True)

    class Timing(TrainerCallback):
        def on_step_begin(self, a, state, control, **kw):
            timer.new_step()
            timer.t0 = time.perf_counter()

        def on_step_end(self, a, state, control, **kw):
            timer.add("total", time.perf_counter() - timer.t0)

    trainer = GRPOTrainer(
        model=lm.model, args=config, train_dataset=dataset, processing_class=lm.tokenizer, family=lm.family,
        tokens=lm.tokens, objective=objective, estimator=objective.make_estimator(lm.family, lm.model.config, sampler),
        sampler=sampler, reward=WeightedReward([(SudokuReward({"require_answer_tags": False}), 1.0)]),
        callbacks=[Timing()],
    )
    sample, score = trainer_mod.sample_completions, trainer_mod.score_completions

    def timed_sample(*a, **kw):
        t = time.perf_counter()
        out = sample(*a, **kw)
        timer.add("rollout", time.perf_counter() - t)
        return out

    def timed_score(*a, **kw):
        t = time.perf_counter()
        out = score(*a, **kw)
        timer.add("scoring", time.perf_counter() - t)
        return out

    trainer_mod.sample_completions, trainer_mod.score_completions = timed_sample, timed_score
    try:
        trainer.train()
    finally:
        trainer_mod.sample_completions, trainer_mod.score_completions = sample, score
    return timer.steps[1:]


# ============================================================================ TRL baseline
def run_trl(lm, rows, args, tmp) -> list[dict[str, float]]:
    from datasets import Dataset
    from transformers import TrainerCallback
    from trl import GRPOConfig as TRLConfig
    from trl import GRPOTrainer as TRLTrainer

    from dare.rewards.sudoku import sudoku_score
    from dare.sampling import completion_mask
    from dare_llada.sampler import decode

    timer = StepTimer()
    family, tokens = lm.family, lm.tokens

    def sudoku_reward(prompts, completions, puzzle, solution, **kw):
        t = time.perf_counter()
        out = [sudoku_score(c, p, s, require_tags=False) for c, p, s in zip(completions, puzzle, solution)]
        timer.add("scoring", time.perf_counter() - t)
        return out

    class D1TRL(TRLTrainer):
        """d1 on TRL: the LLaDA sampler for generation, the one-step masked forward for log-probs."""

        def _generate_single_turn(self, prompt_ids, images, multimodal_fields, num_generations, has_tool_images=False):
            t = time.perf_counter()
            width = max(len(p) for p in prompt_ids)
            ids = torch.full((len(prompt_ids), width), tokens.pad_id, dtype=torch.long)
            attn = torch.zeros_like(ids)
            for i, p in enumerate(prompt_ids):
                ids[i, width - len(p):], attn[i, width - len(p):] = torch.tensor(p), 1
            with torch.no_grad():
                x, _, _ = decode(lambda a, m: family.logits(self.model, a, m), ids, attn, mask_id=tokens.mask_id,
                                 eos_id=tokens.eos_id, eot_id=tokens.eot_id, **SAMPLER)
            comp = x[:, width:]
            keep = completion_mask(comp, tokens.stop_ids, pad_in_response=False)
            out = [row[m].tolist() for row, m in zip(comp, keep)]
            timer.add("rollout", time.perf_counter() - t)
            return out, None

        def _get_per_token_logps_and_entropies(self, model, input_ids, attention_mask, logits_to_keep,
                                               batch_size=None, compute_entropy=False, compute_aux_loss=False, **kw):
            noisy = input_ids.clone()
            prompt = torch.zeros_like(input_ids, dtype=torch.bool)
            prompt[:, :-logits_to_keep] = attention_mask[:, :-logits_to_keep].bool()
            p_mask = prompt & (torch.rand(input_ids.shape) < 0.15)
            noisy[p_mask] = tokens.mask_id
            noisy[:, -logits_to_keep:] = tokens.mask_id
            logits = family.logits(model, noisy, attention_mask)[:, -logits_to_keep:].float()
            logp = torch.log_softmax(logits, -1)
            logps = logp.gather(-1, input_ids[:, -logits_to_keep:, None]).squeeze(-1)
            ent = -(logp.exp() * logp).sum(-1).detach() if compute_entropy else None
            return logps, ent, None

    class Timing(TrainerCallback):
        def on_step_begin(self, a, state, control, **kw):
            timer.new_step()
            timer.t0 = time.perf_counter()

        def on_step_end(self, a, state, control, **kw):
            timer.add("total", time.perf_counter() - timer.t0)

    data = Dataset.from_list([{"prompt": r["extra_info"]["puzzle"], "puzzle": r["extra_info"]["puzzle"],
                               "solution": r["reward_model"]["ground_truth"]} for r in rows])
    config = TRLConfig(output_dir=os.path.join(tmp, "trl"), per_device_train_batch_size=args.prompts * args.group,
                       num_generations=args.group, max_completion_length=SAMPLER["gen_length"], max_steps=args.steps + 1,
                       learning_rate=1e-4, beta=0.0, loss_type="grpo", logging_steps=10_000, save_strategy="no",
                       report_to="none", use_cpu=True, seed=0, disable_tqdm=True, temperature=1.0,
                       gradient_checkpointing=False)
    from transformers import GenerationConfig

    lm.model.generation_config = GenerationConfig(pad_token_id=tokens.pad_id, eos_token_id=tokens.eos_id)
    trainer = D1TRL(model=lm.model, reward_funcs=sudoku_reward, args=config, train_dataset=data,
                    processing_class=lm.tokenizer, callbacks=[Timing()])
    trainer.train()
    return timer.steps[1:]


def summary(name: str, steps: list[dict[str, float]]) -> float:
    """Print the per-phase medians over ``steps``; return the median step time."""
    med = {k: statistics.median(s[k] for s in steps) for k in steps[0]}
    update = statistics.median(s["total"] - s["rollout"] - s["scoring"] for s in steps)
    print(f"{name:5s} step {med['total']:.3f} s = rollout {med['rollout']:.3f} + scoring {med['scoring']:.4f} "
          f"+ update {update:.3f}  (medians of {len(steps)} steps)")
    return med["total"]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=2, help="timed steps per round and trainer (after one warm-up step)")
    ap.add_argument("--rounds", type=int, default=3, help="alternating DARE/TRL rounds (evens out machine load)")
    ap.add_argument("--prompts", type=int, default=16)
    ap.add_argument("--group", type=int, default=8)
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    rows = load_rows(args.prompts * (args.steps + 1))
    dare_steps, trl_steps = [], []
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(args.rounds):
            dare_steps += run_dare(quickstart_model(f"{tmp}/d{r}"), rows, args, f"{tmp}/d{r}")
            trl_steps += run_trl(quickstart_model(f"{tmp}/t{r}"), rows, args, f"{tmp}/t{r}")
    print(f"d1, quickstart LLaDA ({args.prompts} prompts x {args.group} completions, gen 17, {args.threads} thread(s), "
          f"{args.rounds} alternating rounds)")
    d = summary("DARE", dare_steps)
    t = summary("TRL", trl_steps)
    print(f"ratio TRL / DARE (whole step): {t / d:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
