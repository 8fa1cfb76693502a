"""One d1 RL step on the quickstart model: DARE's GRPOTrainer vs a minimal ``trl.GRPOTrainer`` subclass.

Both trainers run the same step on the same model (LLaDA architecture, the quickstart preset: d_model
128, 4 layers) and the same Sudoku prompts: ``--prompts`` prompts x ``--group`` completions sampled
with LLaDA's low-confidence decoder at temperature 1, scored with the Sudoku reward, and one optimizer
step on d1's one-step estimator (completion fully masked, prompt masked with p = 0.15), token-level GRPO
loss, mu = 1, beta = 0, in the same precision (``--precision``, default fp32: trl's GRPOConfig defaults
to bf16 autocast, which this benchmark turns off unless asked, because a bf16 baseline against an fp32
candidate measures the CPU's bf16 support, 2-3x faster with AVX512-BF16 and slower without, not the
trainers).

The TRL baseline is the d1 design: ``GRPOTrainer`` with the generation replaced by LLaDA's vanilla
decoder (``_generate_single_turn``: ``dare_llada.sampler.decode``, the official low-confidence schedule,
one token per step) and the log-prob computation replaced by the one-step masked forward
(``_get_per_token_logps_and_entropies``); everything else is TRL's.

DARE's update skips the rows of groups whose rewards all tie (advantage exactly 0, so exactly zero gradient:
``skip_zero_advantage``, on by default); TRL runs them. ``--baseline dare-every-row`` replaces the TRL
baseline by DARE's own trainer with that switched off, which measures what the skip alone saves (no trl needed).
On a fresh random model every reward is 0, so every group ties: use ``--model`` for a realistic mix.

Settings:

* default: gen_length 17, one block, 17 steps, 16 prompts x 8 completions, both trainers with the vanilla
  decoder (DARE's rollout differs only in its own code path: keyed per-row noise drawn over the completion);
* ``--long``: gen_length 128, block 32, 128 steps (vanilla, one token per step), 4 prompts x 4 completions;
  DARE's rollouts accelerated with Fast-dLLM (``--cache dual --threshold 0.9`` unless given), the TRL
  baseline keeps the vanilla decoder (TRL has no Fast-dLLM).
``--cache``/``--threshold`` set DARE's rollout acceleration in either setting; ``--model DIR`` uses a trained
checkpoint instead of a fresh random quickstart model (threshold decoding commits more than one token
per step only where the model is confident, i.e. with trained weights).

Run: ``python benchmarks/bench_rl_step.py [--long] [--rounds 5] [--steps 2] [--threads 1]`` (the TRL
baseline needs ``pip install -e '.[bench]'``: DARE itself does not depend on trl). The trainers run in
``--rounds`` (at least 5) alternating rounds (DARE then TRL, then TRL then DARE, ...; each round builds both
trainers on a fresh copy of the same weights, runs one warm-up step, then ``--steps`` timed ones), so a
change of machine load hits both. Threads are pinned before torch is imported (``OMP_NUM_THREADS`` and
``torch.set_num_threads`` = ``--threads``). Prints the CPU model, the load average before and after, then
min / median / max seconds of rollout, scoring, update and the whole step for each trainer, and the ratio
TRL / DARE of the whole step (> 1 means DARE is faster): of the medians over all timed steps, and min /
median / max of the per-round ratios. Timings of both come from this process.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

MIN_ROUNDS = 5
#: the vanilla decoder of both trainers (``--long`` replaces gen_length, block_length, steps)
SAMPLER = {"gen_length": 17, "block_length": 17, "steps": 17, "temperature": 1.0}
LONG = {"gen_length": 128, "block_length": 32, "steps": 128}
PHASES = ("rollout", "scoring", "update", "total")


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


def bench_model(tmp: str, args):
    """A fresh quickstart LLaDA (seed 0), or ``--model`` loaded; long enough for the prompt + ``gen_length``."""
    if args.model:
        from dare.modeling.checkpoint import load_model

        return load_model(args.model)
    from dare.testing import tiny_model

    return tiny_model("llada", os.path.join(tmp, "model"), preset="quickstart", seed=0,
                      max_sequence_length=max(128, 64 + SAMPLER["gen_length"]))


# ============================================================================ DARE
def run_dare(lm, rows, args, tmp, skip_zero_advantage: bool = True) -> list[dict[str, float]]:
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
    sampler = LLaDASampler({**SAMPLER, **args.accel})
    objective = D1({"group_size": args.group, "skip_zero_advantage": skip_zero_advantage})
    config = DareConfig(output_dir=os.path.join(tmp, "dare"), per_device_train_batch_size=args.prompts,
                        max_steps=args.steps + args.warmup, learning_rate=1e-4, logging_steps=10_000,
                        logging_first_step=False, save_strategy="no", report_to="none", seed=0, disable_tqdm=True,
                        bf16=args.precision == "bf16")

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
    return timer.steps[args.warmup:]


# ============================================================================ TRL baseline
def run_trl(lm, rows, args, tmp) -> list[dict[str, float]]:
    import torch
    from datasets import Dataset
    from transformers import TrainerCallback
    from trl import GRPOConfig as TRLConfig
    from trl import GRPOTrainer as TRLTrainer

    from dare.rewards.sudoku import sudoku_score
    from dare.sampling import completion_mask
    from dare_llada.sampler import decode, decode_options

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
                x, _, _ = decode(lambda a, m: family.logits(self.model, a, m), ids, attn,
                                 decode_options(mask_id=tokens.mask_id, eos_id=tokens.eos_id, eot_id=tokens.eot_id,
                                                **SAMPLER))
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
                       num_generations=args.group, max_completion_length=SAMPLER["gen_length"], max_steps=args.steps + args.warmup,
                       learning_rate=1e-4, beta=0.0, loss_type="grpo", logging_steps=10_000, save_strategy="no",
                       report_to="none", use_cpu=True, seed=0, disable_tqdm=True, temperature=1.0,
                       gradient_checkpointing=False, bf16=args.precision == "bf16")  # TRL defaults to bf16
    from transformers import GenerationConfig

    lm.model.generation_config = GenerationConfig(pad_token_id=tokens.pad_id, eos_token_id=tokens.eos_id)
    trainer = D1TRL(model=lm.model, reward_funcs=sudoku_reward, args=config, train_dataset=data,
                    processing_class=lm.tokenizer, callbacks=[Timing()])
    trainer.train()
    return timer.steps[args.warmup:]


def phases(steps: list[dict[str, float]]) -> dict[str, list[float]]:
    """Per phase, the seconds of every timed step (update = total - rollout - scoring)."""
    out = {k: [s[k] for s in steps] for k in ("rollout", "scoring", "total")}
    out["update"] = [s["total"] - s["rollout"] - s["scoring"] for s in steps]
    return out


def summary(name: str, steps: list[dict[str, float]]) -> float:
    """Print min / median / max of each phase over ``steps``; return the median step time."""
    ph = phases(steps)
    print(f"{name} ({len(steps)} timed steps), seconds  min / median / max")
    for k in PHASES:
        v = ph[k]
        label = "step" if k == "total" else k
        print(f"  {label:8s} {min(v):8.3f} / {statistics.median(v):8.3f} / {max(v):8.3f}")
    return statistics.median(ph["total"])


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.lower().startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    import platform

    return platform.processor() or platform.machine()


def load_average() -> str:
    try:
        return " ".join(f"{x:.2f}" for x in os.getloadavg())
    except OSError:
        return "n/a"


def parse(argv=None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=2, help="timed steps per round and trainer (after the warm-up)")
    ap.add_argument("--warmup", type=int, default=1, help="untimed warm-up steps per round and trainer")
    ap.add_argument("--rounds", type=int, default=MIN_ROUNDS,
                    help=f"alternating DARE/TRL rounds (at least {MIN_ROUNDS}: evens out machine load)")
    ap.add_argument("--prompts", type=int, default=None, help="prompts per step (default 16; 4 with --long)")
    ap.add_argument("--group", type=int, default=None, help="completions per prompt (default 8; 4 with --long)")
    ap.add_argument("--threads", type=int, default=1, help="torch intra-op threads and OMP_NUM_THREADS")
    ap.add_argument("--long", action="store_true",
                    help="long generation (gen 128, block 32, 128 steps) with accelerated DARE rollouts")
    ap.add_argument("--cache", choices=("none", "prefix", "dual"), default=None,
                    help="DARE's rollout KV cache (default: none; dual with --long)")
    ap.add_argument("--threshold", type=float, default=None,
                    help="DARE's rollout confidence threshold (default: off; 0.9 with --long; 0 = off)")
    ap.add_argument("--precision", choices=("fp32", "bf16"), default="fp32",
                    help="both trainers' compute precision (bf16: accelerate's autocast, trl's default; fp32: DARE's)")
    ap.add_argument("--model", default=None, help="a trained LLaDA checkpoint directory instead of a fresh model")
    ap.add_argument("--baseline", choices=("trl", "dare-every-row"), default="trl",
                    help="the baseline: the TRL subclass, or DARE's own trainer running every row "
                         "(skip_zero_advantage false: what skipping tied groups' rows saves)")
    args = ap.parse_args(argv)
    if args.rounds < MIN_ROUNDS:
        ap.error(f"--rounds {args.rounds}: at least {MIN_ROUNDS} alternating rounds are needed for a median "
                 "that machine load does not decide")
    if args.steps < 1 or args.threads < 1 or args.warmup < 0:
        ap.error("--steps and --threads must be >= 1, --warmup >= 0")
    if args.long:
        SAMPLER.update(LONG)
    args.prompts = args.prompts or (4 if args.long else 16)
    args.group = args.group or (4 if args.long else 8)
    cache = args.cache or ("dual" if args.long else "none")
    threshold = args.threshold if args.threshold is not None else (0.9 if args.long else 0.0)
    args.accel = {"cache": cache, **({"threshold": threshold} if threshold > 0 else {})}
    return args


def main(argv=None) -> int:
    args = parse(argv)
    # pin threads before torch (and its OpenMP runtime) is loaded
    os.environ["OMP_NUM_THREADS"] = str(args.threads)
    os.environ["MKL_NUM_THREADS"] = str(args.threads)
    import importlib.util

    if args.baseline == "trl" and importlib.util.find_spec("trl") is None:
        print("bench_rl_step.py: the TRL baseline needs trl, which DARE does not install; pip install -e '.[bench]'",
              file=sys.stderr)
        return 2
    import torch

    torch.set_num_threads(args.threads)
    load_before = load_average()
    accel = ", ".join(f"{k} {v}" for k, v in args.accel.items())
    print(f"CPU: {cpu_model()}; torch {torch.__version__}, torch threads {torch.get_num_threads()}, "
          f"OMP_NUM_THREADS={os.environ['OMP_NUM_THREADS']}; load average before: {load_before}", flush=True)
    rows = load_rows(args.prompts * (args.steps + args.warmup))
    dare_steps, trl_steps, ratios = [], [], []
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(args.rounds):
            order = [("DARE", run_dare), ("TRL", run_trl)] if args.baseline == "trl" else \
                [("DARE", run_dare), ("DARE every row", lambda *a: run_dare(*a, skip_zero_advantage=False))]
            base = order[1][0]
            if r % 2:
                order.reverse()
            got = {}
            for name, fn in order:
                got[name] = fn(bench_model(f"{tmp}/{name}{r}", args), rows, args, f"{tmp}/{name}{r}")
            dare_steps += got["DARE"]
            trl_steps += got[base]
            d = statistics.median(s["total"] for s in got["DARE"])
            t = statistics.median(s["total"] for s in got[base])
            ratios.append(t / d)
            print(f"round {r + 1}/{args.rounds} ({' then '.join(n for n, _ in order)}): DARE {d:.3f} s, {base} {t:.3f} s, "
                  f"{base} / DARE {t / d:.2f}", flush=True)
    print(f"\nd1, {'a trained model ' + args.model if args.model else 'fresh quickstart LLaDA'} "
          f"({args.prompts} prompts x {args.group} completions, gen {SAMPLER['gen_length']}, block "
          f"{SAMPLER['block_length']}, {SAMPLER['steps']} steps, temperature {SAMPLER['temperature']}; DARE rollouts: "
          f"{accel}; {'TRL: vanilla decoder' if args.baseline == 'trl' else 'baseline: the same, every row'}), {args.precision} both, {args.threads} thread(s), {args.rounds} alternating rounds x "
          f"{args.steps} timed step(s)")
    print(f"CPU: {cpu_model()}; load average before: {load_before}, after: {load_average()}")
    d = summary("DARE", dare_steps)
    base = "TRL" if args.baseline == "trl" else "DARE every row"
    t = summary(base, trl_steps)
    print(f"per-round ratio {base} / DARE  min / median / max: {min(ratios):.2f} / {statistics.median(ratios):.2f} / "
          f"{max(ratios):.2f}")
    print(f"ratio {base} / DARE (median step): {t / d:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
