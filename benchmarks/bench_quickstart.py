"""Throughput of the quickstart model: SFT tokens/s and sampler tokens/s, each beside a naive baseline.

Run: ``python benchmarks/bench_quickstart.py`` (about 2 minutes on 2 CPU cores).

* SFT: DARE's ``SFTTrainer.training_step`` (loss on masked positions only, via
  ``dare.diffusion.token_logprobs``) vs a naive loop that computes the full-vocabulary
  cross-entropy at every position and masks afterwards, with per-example Python masking. Same model
  size, same batches, same optimizer; tokens = all positions of the batch.
* Sampler: the LLaDA sampler decoding the 500 test puzzles in batches of 250 vs the same sampler one
  prompt at a time (the naive baseline). Tokens = generated positions.

Both baselines run in the same process right after DARE's path; the script prints tokens/s and the
ratio DARE / baseline.
"""

from __future__ import annotations

import argparse
import copy
import tempfile
import time

import torch


def _setup(tmp: str):
    from dare.data import Prompter, load_rows
    from dare.data.supervised import SupervisedCollator, tokenize_example
    from dare.testing import tiny_model

    lm = tiny_model("llada", f"{tmp}/model", preset="quickstart")
    prompter = Prompter(lm.tokenizer, "{{ extra_info.puzzle }}", "{{ reward_model.ground_truth }}", chat_template=False)
    rows = load_rows("dare://sudoku/train.parquet", limit=4096)
    examples = [tokenize_example(lm.tokenizer, prompter.prompt(r), prompter.response(r), lm.tokens) for r in rows]
    collator = SupervisedCollator(lm.tokens, lm.family.pad_in_response)
    return lm, examples, collator


def bench_sft(lm, examples, collator, steps: int, batch: int, tmp: str) -> tuple[float, float]:
    from dare.trainers import DareConfig
    from dare_sft.objective import SFT
    from dare_sft.trainer import SFTTrainer

    batches = [collator(examples[i * batch : (i + 1) * batch]) for i in range(steps)]
    tokens = sum(b["input_ids"].numel() for b in batches)

    args = DareConfig(output_dir=f"{tmp}/ckpt", learning_rate=2e-3, report_to="none", max_steps=steps)
    trainer = SFTTrainer(model=lm.model, args=args, train_dataset=examples, data_collator=collator,
                         family=lm.family, tokens=lm.tokens, objective=SFT())
    trainer.create_optimizer_and_scheduler(num_training_steps=steps)
    trainer.current_gradient_accumulation_steps = 1
    naive_model = copy.deepcopy(lm.model)
    naive_opt = torch.optim.AdamW(naive_model.parameters(), lr=2e-3)
    lm.model.train()
    naive_model.train()

    def dare_step(b):
        trainer.training_step(lm.model, b)
        trainer.optimizer.step()
        trainer.optimizer.zero_grad()

    def naive_step(b):
        # full-vocabulary CE everywhere, mask afterwards, per-example Python loop for the masks
        ids, loss_mask = b["input_ids"], b["loss_mask"]
        noisy = ids.clone()
        masked = torch.zeros_like(loss_mask)
        ts = []
        for i in range(ids.shape[0]):
            t = 0.999 * torch.rand(()).item() + 0.001
            ts.append(t)
            for j in range(ids.shape[1]):
                if loss_mask[i, j] and torch.rand(()).item() < t:
                    masked[i, j] = True
                    noisy[i, j] = lm.tokens.mask_id
        logits = naive_model(noisy).logits
        ce = torch.nn.functional.cross_entropy(logits.transpose(1, 2), ids, reduction="none")
        loss = sum((ce[i] * masked[i]).sum() / ts[i] / loss_mask[i].sum() for i in range(ids.shape[0])) / ids.shape[0]
        loss.backward()
        naive_opt.step()
        naive_opt.zero_grad()

    dare_step(batches[0])  # warm-up
    naive_step(batches[0])
    dare_s = naive_s = 0.0
    for b in batches:  # interleaved, so background load hits both alike
        t0 = time.perf_counter()
        dare_step(b)
        t1 = time.perf_counter()
        naive_step(b)
        dare_s += t1 - t0
        naive_s += time.perf_counter() - t1
    dare_tps, naive_tps = tokens / dare_s, tokens / naive_s
    return dare_tps, naive_tps


def bench_sampler(lm, n_prompts: int, batch: int) -> tuple[float, float, bool]:
    from dare.data import Prompter, load_rows
    from dare.plugins.manager import get_registry
    from dare.sampling import DecodingBundle
    from dare.sampling.text import generate_texts

    rows = load_rows("dare://sudoku/test.parquet", limit=n_prompts)
    prompts = [Prompter(lm.tokenizer, "{{ extra_info.puzzle }}", chat_template=False).prompt(r) for r in rows]
    sampler = get_registry().get("sampler", "llada").create({"gen_length": 17, "block_length": 17, "steps": 17})
    decoding = DecodingBundle.of(lm, sampler)
    fast = generate_texts(decoding, prompts, batch_size=batch)
    slow = generate_texts(decoding, prompts, batch_size=1)
    return fast.generated_tokens / fast.seconds, slow.generated_tokens / slow.seconds, fast.texts == slow.texts


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sft-steps", type=int, default=10)
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--prompts", type=int, default=500)
    ap.add_argument("--sampler-batch", type=int, default=250)
    args = ap.parse_args()
    torch.manual_seed(0)
    with tempfile.TemporaryDirectory() as tmp:
        lm, examples, collator = _setup(tmp)
        n = sum(p.numel() for p in lm.model.parameters())
        print(f"quickstart model: {n:,} parameters, torch threads {torch.get_num_threads()}")
        dare_tps, naive_tps = bench_sft(lm, examples, collator, args.sft_steps, args.batch, tmp)
        print(f"SFT      DARE {dare_tps:10.1f} tokens/s | naive loop {naive_tps:10.1f} tokens/s | ratio {dare_tps / naive_tps:.2f}x")
        lm.model.eval()
        fast, slow, same = bench_sampler(lm, args.prompts, args.sampler_batch)
        print(f"sampler  DARE batch {args.sampler_batch} {fast:10.1f} tokens/s | one prompt at a time {slow:10.1f} tokens/s | "
              f"ratio {fast / slow:.2f}x | identical outputs: {same}")


if __name__ == "__main__":
    main()
