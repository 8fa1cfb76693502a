"""Build the d1 parity fixture from the official trainer (run by hand, never in CI).

    git clone https://github.com/dllm-reasoning/d1 /tmp/d1 && git -C /tmp/d1 checkout 837888f22c21a5da91a0af2b0d7b19e81d9b47ec
    .venv/bin/python tools/parity/build_d1.py /tmp/d1

Runs ``DiffuGRPOTrainer._get_per_token_logps`` (its ``forward_process``: ``set_seed(mask_seed)`` then one
``torch.rand`` over the whole sequence) and ``DiffuGRPOTrainer.compute_loss`` of
``diffu-grpo/diffu_grpo_trainer.py`` on :class:`tools.parity.common.TinyDenoiser` (current, old and
reference weights), inner iteration 2 of 2 so the ratio is not 1, with left-padded prompts and EOS inside
the completions. The completion mask and the advantages follow the trainer's
``_generate_and_score_completions`` (l.441-445 first-EOS mask, l.536-539 ``r - mean``). Writes
``tests/fixtures/parity/d1/``: the inputs, the random matrix ``forward_process`` drew, per-token
log-probs, the loss, the gradients of two parameters, and one optimizer step as the release configures it
(:func:`tools.parity.common.official_update`: the clipped gradients and the updated weights of every parameter);
``tests/parity/test_d1.py`` compares DARE.
"""

from __future__ import annotations

import argparse
import sys
import types
from collections import defaultdict
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from tools.parity.common import official_checkout, official_update, policy_models, stub_modules, write_fixture  # noqa: E402

COMMIT = "837888f22c21a5da91a0af2b0d7b19e81d9b47ec"
MASK_ID, EOS_ID, PAD_ID = 15, 2, 1
GROUP, MASK_SEEDS, ITERATION = 3, [11, 23], 1
SETTINGS = {"p_mask_prompt": 0.15, "epsilon": 0.5, "beta": 0.04, "num_iterations": 2}
#: The release's optimizer (``diffu-grpo/slurm_scripts/train.yaml:23-35``; AdamW's epsilon is transformers'
#: default): the learning rate after its ``constant_with_warmup`` warmup.
OPTIMIZER = {"learning_rate": 3e-6, "adam_beta1": 0.9, "adam_beta2": 0.99, "adam_epsilon": 1e-8, "weight_decay": 0.1,
             "max_grad_norm": 0.2}
GRAD_PARAMS = ("embed.weight", "head.weight")


def _import_trainer(checkout: Path):
    import accelerate.utils  # noqa: F401  (the real ones, before any stub)
    import transformers  # noqa: F401

    stub_modules({
        "trl.trainer.grpo_trainer": {"GRPOTrainer": type("GRPOTrainer", (), {})},
        "trl.trainer.grpo_config": {}, "trl.extras.profiling": {"profiling_decorator": lambda f: f},
        "trl.data_utils": {}, "trl.models": {},
        "trl.trainer.utils": {},
        "trl.import_utils": {"is_rich_available": lambda: False, "is_vllm_available": lambda: False},
        "wandb": {},
    })
    sys.path.insert(0, str(checkout / "diffu-grpo"))
    import diffu_grpo_trainer

    return diffu_grpo_trainer.DiffuGRPOTrainer


def _inputs():
    """Two left-padded prompts, three completions each (EOS inside most, EOS padding after), 0/1/0.5 rewards."""
    prompts = torch.tensor([[PAD_ID, PAD_ID, 4, 5, 6], [PAD_ID, 12, 13, 4, 5]])
    completions = torch.tensor([
        [3, 4, EOS_ID, EOS_ID, EOS_ID, EOS_ID], [5, 6, 7, 8, 9, 10], [11, EOS_ID, EOS_ID, EOS_ID, EOS_ID, EOS_ID],
        [12, 13, 14, 3, EOS_ID, EOS_ID], [4, EOS_ID, 6, EOS_ID, EOS_ID, EOS_ID], [7, 8, 9, EOS_ID, EOS_ID, EOS_ID],
    ])
    rewards = torch.tensor([1.0, 0.0, 0.5, 0.0, 1.0, 1.0])
    return prompts.repeat_interleave(GROUP, dim=0), completions, rewards


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("checkout", help=f"dllm-reasoning/d1 checkout at {COMMIT}")
    checkout = official_checkout(ap.parse_args().checkout, COMMIT)
    Trainer = _import_trainer(checkout)
    from accelerate.utils import set_seed

    models = policy_models()
    prompt_ids, completion_ids, rewards = _inputs()
    prompt_mask = (prompt_ids != PAD_ID).long()
    ids = torch.cat([prompt_ids, completion_ids], 1)
    G = completion_ids.shape[1]

    t = Trainer.__new__(Trainer)
    t.args = types.SimpleNamespace(p_mask_prompt=SETTINGS["p_mask_prompt"], mask_id=MASK_ID, cfg_scale=0.0,
                                   num_iterations=SETTINGS["num_iterations"])
    t.num_iterations, t.epsilon, t.beta, t._step = SETTINGS["num_iterations"], SETTINGS["epsilon"], SETTINGS["beta"], ITERATION
    t.control = types.SimpleNamespace(should_evaluate=False)
    t._metrics = {"train": defaultdict(list), "eval": defaultdict(list)}
    t.accelerator = types.SimpleNamespace(gather_for_metrics=lambda x: x)

    # the trainer's completion mask (l.441-445) and advantages (l.536-539)
    is_eos = completion_ids == EOS_ID
    eos_idx = torch.full((is_eos.size(0),), is_eos.size(1), dtype=torch.long)
    eos_idx[is_eos.any(dim=1)] = is_eos.int().argmax(dim=1)[is_eos.any(dim=1)]
    completion_mask = (torch.arange(G).expand(is_eos.size(0), -1) <= eos_idx.unsqueeze(1)).int()
    advantages = rewards - rewards.view(-1, GROUP).mean(dim=1).repeat_interleave(GROUP)

    expanded = ids.unsqueeze(0).expand(SETTINGS["num_iterations"], -1, -1)
    with torch.no_grad():
        old = t._get_per_token_logps(models["old"], expanded, G, MASK_SEEDS)
        ref = t._get_per_token_logps(models["ref"], expanded, G, MASK_SEEDS)
        current = t._get_per_token_logps(models["current"], ids[None], G, [MASK_SEEDS[ITERATION]])[0]
    inputs = {"prompt_ids": prompt_ids, "prompt_mask": prompt_mask, "completion_ids": completion_ids,
              "completion_mask": completion_mask, "mask_seeds": MASK_SEEDS, "advantages": advantages,
              "old_per_token_logps": old, "ref_per_token_logps": ref}
    loss = t.compute_loss(models["current"], inputs)
    loss.backward()
    # the draw forward_process made for this iteration (set_seed, then torch.rand over [N, S])
    set_seed(MASK_SEEDS[ITERATION])
    random_matrix = torch.rand(ids.shape)
    ratio = torch.exp(current - old[ITERATION])
    print(f"loss {loss.item():.7f}; ratio range {ratio.min():.3f}..{ratio.max():.3f}; "
          f"clipped at eps 0.5: {int(((ratio - 1).abs() > 0.5).sum())}, at 0.2: {int(((ratio - 1).abs() > 0.2).sum())}")

    tensors = {f"{m}.{k}": v.clone() for m, mod in models.items() for k, v in mod.state_dict().items()}
    grads = {f"expected.grad.{n}": dict(models["current"].named_parameters())[n].grad.clone() for n in GRAD_PARAMS}
    update = official_update(models["current"], OPTIMIZER)  # after the state is recorded: it changes the weights
    tensors.update({
        "input_ids": ids, "prompt_mask": prompt_mask, "rewards": rewards, "random_matrix": random_matrix,
        "expected.completion_mask": completion_mask, "expected.advantages": advantages,
        "expected.logp": current, "expected.old_logp": old[ITERATION], "expected.ref_logp": ref[ITERATION],
        "expected.loss": loss.detach().reshape(1),
        **grads, **update,
    })
    meta = {"official": f"dllm-reasoning/d1@{COMMIT}", "file": "diffu-grpo/diffu_grpo_trainer.py",
            "functions": ["DiffuGRPOTrainer.forward_process", "DiffuGRPOTrainer._get_per_token_logps",
                          "DiffuGRPOTrainer.compute_loss"],
            "mask_id": MASK_ID, "eos_id": EOS_ID, "pad_id": PAD_ID, "group_size": GROUP,
            "prompt_length": prompt_ids.shape[1], "mask_seeds": MASK_SEEDS, "iteration": ITERATION,
            "settings": SETTINGS, "grad_params": list(GRAD_PARAMS), "torch": torch.__version__,
            "optimizer": OPTIMIZER, "optimizer_source": "diffu-grpo/slurm_scripts/train.yaml:23-35"}
    print("wrote", write_fixture("d1", tensors, meta))


if __name__ == "__main__":
    main()
