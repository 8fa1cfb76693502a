"""Build the TraceRL-on-SDAR parity fixture from the official SDAR trainer (run by hand, never in CI).

    git clone https://github.com/Gen-Verse/dLLM-RL /tmp/tr && git -C /tmp/tr checkout 10b4fd1cba83e4496c20585dc2fd01dc02f20255
    .venv/bin/python tools/parity/build_tracerl_sdar.py /tmp/tr

Compiles, from ``train/rl_sdar.py`` (the trainer ``rl.py`` runs for ``model_base: sdar``), where they are nested in
``main()`` (:func:`tools.parity.common.official_functions`): ``collapse_k_unique``, ``make_basic_block_attention``
(blocks aligned at the padded prompt end), ``process_pad`` (prompt padding never attended), ``one_round_vectorized``
and ``collect_training_data`` (``method: TraceRL``: one training row per round, bundling step r of every block;
response padding excluded from ``p_mask`` with ``post_num: 0``), ``compute_logp_old_tok_parallel`` and
``forward_process`` (log-ratio clamped to [-10, 10], clipped surrogate, token sum / response length, mean over rows;
k3 KL against the rollout policy, same normaliser), and runs them with the values of ``configs/rl_sdar.yaml``
(block 4, shrink 1, eps 0.2, beta 0.01, k3, post_num 0) on a tiny SDAR model with current and rollout-policy
weights. The model is DARE's ``SDARForCausalLM``: the release's copy (``models/sdar/modeling_sdar.py``) imports
flash-attn, and its training forward is SDPA under the given 0/1 mask made additive (``SDARAttention.forward``),
the Qwen3 forward DARE's model computes (docs/model-families.md §3.3). The rows are left-padded prompts whose real lengths (5, 3, 6, 7) are not multiples of
the block, and responses ending in an end-of-turn id then right padding (lengths 6, 10, 3, 8 of 10, the last block
partial), with a hand-made per-block decoding trajectory with repeated and skipped steps; the step map of the
padding is extended as the trainer does (``rl_sdar.py:278-287``). ``uni_prompting`` is replaced by the tokenised
rows. The whole batch of training rows runs as one micro-batch (the release runs one row per micro-batch and divides
by ``gradient_accumulation_steps``: the same mean over the rows of an optimizer step). The advantages are given
(``reward/rl_reward.py`` computes them in a separate process; :func:`dare.rl.advantages.grpo_advantages` with the
population std is tested on its own). A second loss is computed with one rollout log-prob 12 nats above the
current one (a stale rollout policy) to show the log-ratio clamp. Writes ``tests/fixtures/parity/tracerl_sdar/``;
``tests/parity/test_tracerl_sdar.py`` compares DARE.
"""

from __future__ import annotations

import argparse
import sys
import types
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from tools.parity.common import official_checkout, official_functions, write_fixture  # noqa: E402

COMMIT = "10b4fd1cba83e4496c20585dc2fd01dc02f20255"
PAD_ID, EOT_ID, MASK_ID = 1, 2, 23
BLOCK = 4
SETTINGS = {"block_size": BLOCK, "shrink": 1, "eps": 0.2, "beta": 0.01, "post_num": 0, "use_kl_estimator_k3": True}
#: a tiny dense SDAR (Qwen3 architecture), block size 4
CONFIG = {"vocab_size": 24, "hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2,
          "num_attention_heads": 2, "num_key_value_heads": 1, "head_dim": 16, "max_position_embeddings": 64,
          "max_window_layers": 2, "block_size": BLOCK, "mask_token_id": MASK_ID, "eos_token_id": EOT_ID,
          "bos_token_id": EOT_ID, "pad_token_id": PAD_ID, "tie_word_embeddings": False, "use_cache": False}
GRAD_PARAMS = ("model.embed_tokens.weight", "lm_head.weight", "model.layers.0.self_attn.q_proj.weight",
               "model.layers.1.mlp.down_proj.weight")
#: (row, completion position, nats added to the rollout log-prob) of the stale-rollout loss
STALE = (1, 5, -12.0)


def tiny_sdar(seed: int):
    from dare_sdar.configuration_sdar import SDARConfig
    from dare_sdar.family import PRESETS
    from dare_sdar.modeling_sdar import SDARForCausalLM

    torch.manual_seed(seed)
    model = SDARForCausalLM(SDARConfig(**{**PRESETS["tiny"], **CONFIG}))
    return model.float().eval()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("checkout", help=f"Gen-Verse/dLLM-RL checkout at {COMMIT}")
    checkout = official_checkout(ap.parse_args().checkout, COMMIT)
    source = checkout / "train" / "rl_sdar.py"

    models = {"current": tiny_sdar(0), "old": tiny_sdar(0)}
    torch.manual_seed(1)
    with torch.no_grad():
        for p in models["old"].parameters():
            p.add_(0.15 * torch.randn_like(p))
    P_, E = PAD_ID, EOT_ID
    prompts = torch.tensor([[P_, P_, 4, 5, 6, 7, 8], [P_, P_, P_, P_, 12, 13, 4], [P_, 9, 10, 11, 12, 13, 14],
                            [3, 4, 5, 6, 7, 8, 9]])
    responses = [[10, 11, 12, 13, 14, E], [5, 6, 7, 8, 9, 10, 11, 12, 13, 14], [20, 21, E], [15, 16, 17, 18, 19, 3, 4, E]]
    # the step that committed each response token: per block of 4 increasing, repeats and gaps
    steps = [[0, 1, 1, 2, 5, 4], [1, 0, 0, 3, 4, 6, 5, 4, 9, 8], [2, 0, 0], [0, 0, 0, 2, 3, 5, 5, 4]]
    advantages = [1.1, -0.7, 0.9, -0.5]
    L1 = max(len(r) for r in responses)
    completions = torch.tensor([r + [PAD_ID] * (L1 - len(r)) for r in responses])
    input_ids = torch.cat([prompts, completions], 1)
    L0 = prompts.shape[1]
    step_map_list = []
    for s in steps:  # rl_sdar.py:278-287: the padding's steps follow the row's last step
        step_map_list.append(s[:L1] if len(s) > L1 else s + [max(s) + 1] * (L1 - len(s)))
    unmask = torch.tensor([s + [-1] * (L1 - len(s)) for s in steps])

    training = types.SimpleNamespace(method="TraceRL", lower_p=0.1, upper_p=0.9, **SETTINGS)
    config = types.SimpleNamespace(training=training)
    ns = {"torch": torch, "F": F, "config": config, "mask_id": MASK_ID, "pad_id": PAD_ID, "start_pos": L0, "L0": L0,
          "L1": L1, "post_num": SETTINGS["post_num"]}
    official_functions(source, ("collapse_k_unique", "make_basic_block_attention", "process_pad", "one_round_vectorized",
                                "collect_training_data"), ns)
    ns["basic_block_attention"] = ns["make_basic_block_attention"](L0 + 2 * L1, L0, BLOCK).cpu()
    ext, p_mask, tok_idx_ext, labels, rewards = ns["collect_training_data"](input_ids, [list(s) for s in step_map_list],
                                                                            advantages)
    R = ext.shape[0]
    # which completion and round each training row is (rows come completion by completion, round by round)
    row_completion = torch.tensor([int((input_ids == ext[i, : L0 + L1]).all(1).nonzero()[0]) for i in range(R)])
    row_round = torch.zeros(R, dtype=torch.long)
    for i in range(1, R):
        row_round[i] = row_round[i - 1] + 1 if row_completion[i] == row_completion[i - 1] else 0

    def run(model):
        fns = {**ns, "model": model}
        official_functions(source, ("compute_logp_old_tok_parallel", "forward_process"), fns)
        return fns

    old_ns = run(models["old"])
    dataset = types.SimpleNamespace(logp_old_tok=torch.full(p_mask.shape, float("-inf")))
    batches = [{"ids": torch.arange(R), "extended_input_ids": ext, "p_mask": p_mask, "tok_idx_ext": tok_idx_ext,
                "labels": labels}]
    accelerator = types.SimpleNamespace(device=torch.device("cpu"), wait_for_everyone=lambda: None)
    with torch.no_grad():  # the official @torch.no_grad() (official_functions drops decorators)
        old_ns["compute_logp_old_tok_parallel"](accelerator, dataset, batches, L0, PAD_ID, R)
    models["old"].train()
    state = {k: v.clone() for k, v in models["current"].state_dict().items()}
    cur = tiny_sdar(0)
    cur.load_state_dict(state)
    cur_ns = run(cur.train())

    # the current policy's per-token log-probs of every training row (forward_process's logp_new_tok)
    with torch.no_grad():
        attn = cur_ns["process_pad"](ns["basic_block_attention"].clone().repeat_interleave(R, dim=0), ext)
        logits = cur(input_ids=ext, attention_mask=attn, position_ids=tok_idx_ext).logits
        logits = torch.cat([logits[:, :L0], logits[:, L0 + L1:]], 1)
        logp = F.log_softmax(logits, -1).gather(-1, labels.unsqueeze(-1)).squeeze(-1)[:, L0:] * p_mask[:, L0:]

    out = {}
    for tag, old in (("", dataset.logp_old_tok), ("stale.", dataset.logp_old_tok.clone())):
        if tag:
            b, g, shift = STALE
            rows = ((row_completion == b) & p_mask[:, L0 + g]).nonzero()[:, 0]
            old[rows, L0 + g] += shift
        cur = tiny_sdar(0)
        cur.load_state_dict(state)
        cur_ns = run(cur.train())
        loss = cur_ns["forward_process"](ext, p_mask, tok_idx_ext, labels, rewards, old)
        loss.backward()
        print(f"{tag or 'main '}loss {loss.item():.7f} over {R} training rows")
        grads = dict(cur.named_parameters())
        out[f"expected.{tag}loss"] = loss.detach().reshape(1)
        out.update({f"expected.{tag}grad.{n}": grads[n].grad.clone() for n in GRAD_PARAMS})

    tensors = {**{f"old.{k}": v.contiguous() for k, v in models["old"].state_dict().items()},
               **{f"current.{k}": v.contiguous() for k, v in state.items()},
               "input_ids": input_ids, "unmask_step": unmask, "advantages": torch.tensor(advantages),
               "response_lengths": torch.tensor([len(r) for r in responses]),
               "expected.num_rows": torch.tensor([R]), "expected.row_completion": row_completion,
               "expected.row_round": row_round, "expected.logp": logp, **out}
    meta = {"official": f"Gen-Verse/dLLM-RL@{COMMIT}", "file": "train/rl_sdar.py", "config": "configs/rl_sdar.yaml",
            "functions": ["collapse_k_unique", "make_basic_block_attention", "process_pad", "one_round_vectorized",
                          "collect_training_data", "compute_logp_old_tok_parallel", "forward_process"],
            "mask_id": MASK_ID, "eot_id": EOT_ID, "pad_id": PAD_ID, "prompt_length": L0, "settings": SETTINGS,
            "model_config": CONFIG, "stale": list(STALE), "grad_params": list(GRAD_PARAMS), "torch": torch.__version__}
    print("wrote", write_fixture("tracerl_sdar", tensors, meta))


if __name__ == "__main__":
    main()
