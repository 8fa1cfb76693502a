"""Build the SPG parity fixture from the official trainer (run by hand, never in CI).

    git clone https://github.com/facebookresearch/SPG /tmp/spg && git -C /tmp/spg checkout a1c712091aee3fde759bbf73b7850546265cd52d
    .venv/bin/python tools/parity/build_spg.py /tmp/spg

Runs ``SPGTrainer.compute_loss`` of ``spg/spg_trainer.py`` (its ``forward_process`` with ``forward_type:
block_random``, ``_get_per_seq_logps`` with ``logp_estimation: mix``) on
:class:`tools.parity.common.TinyDenoiser`, with the launch script's settings (``num_t`` 2, ``min_t`` 0,
``max_t`` 1, ``mix_weight`` 0.5, ``eubo_beta`` 1.5, ``p_mask_prompt`` 0.15; block length 4 for the tiny
completions), left-padded prompts and EOS inside the completions. The corrupted copies are recorded from
the official ``forward_process`` (its noisy batch and block mask) and its ``torch.rand`` matrix (the
prompt/earlier-block draw). The completion mask and advantages follow ``_generate_and_score_completions``
(l.644-648 first-EOS mask, l.720 ``r - mean``, l.721 ``reward_mask = A > 0``). Every row's response either
fills the completion or ends in its first block, so the official block choice ``randperm(num_blocks) %
completion_num_blocks`` and DARE's uniform choice over the response's blocks (docs/algorithms.md §3.6) can
draw the same blocks. Writes ``tests/fixtures/parity/spg/``; ``tests/parity/test_spg.py`` compares DARE.
"""

from __future__ import annotations

import argparse
import sys
import types
from collections import defaultdict
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from tools.parity.common import TinyDenoiser, official_checkout, stub_modules, write_fixture  # noqa: E402

COMMIT = "a1c712091aee3fde759bbf73b7850546265cd52d"
MASK_ID, EOS_ID, PAD_ID = 15, 2, 1
GROUP, MASK_SEED = 3, 7
SETTINGS = {"forward_type": "block_random", "num_t": 2, "min_t": 0.0, "max_t": 1.0, "block_length": 4,
            "use_mask_prompt": True, "p_mask_prompt": 0.15, "logp_estimation": "mix", "mix_weight": 0.5,
            "eubo_beta": 1.5, "num_iterations": 1}
GRAD_PARAMS = ("embed.weight", "head.weight")


def _import_trainer(checkout: Path):
    import accelerate.utils  # noqa: F401  (the real ones, before any stub)
    import transformers  # noqa: F401

    stub_modules({
        "trl.trainer.grpo_trainer": {"GRPOTrainer": type("GRPOTrainer", (), {})},
        "trl.trainer.grpo_config": {}, "trl.extras.profiling": {"profiling_decorator": lambda f: f},
        "trl.data_utils": {}, "trl.models": {}, "trl.trainer.utils": {},
        "trl.import_utils": {"is_rich_available": lambda: False, "is_vllm_available": lambda: False},
        "wandb": {},
    })
    sys.path.insert(0, str(checkout / "spg"))
    import spg_trainer

    return spg_trainer.SPGTrainer


def _inputs():
    """Two left-padded prompts, three completions each of 8 tokens (2 blocks of 4): each response fills the
    completion or ends (first EOS) in block 0; rewards give positive, negative and zero advantages."""
    prompts = torch.tensor([[PAD_ID, PAD_ID, 4, 5, 6], [PAD_ID, 12, 13, 4, 5]])
    E = EOS_ID
    completions = torch.tensor([
        [3, 4, E, E, E, E, E, E], [5, 6, 7, 8, 9, 10, 11, 12], [11, E, E, E, E, E, E, E],
        [12, 13, 14, 3, 4, 5, 6, E], [4, 5, E, 6, E, E, E, E], [7, 8, 9, 10, 11, 12, 13, 14],
    ])
    rewards = torch.tensor([1.0, 0.0, 0.5, 0.0, 1.0, 0.5])
    return prompts.repeat_interleave(GROUP, dim=0), completions, rewards


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("checkout", help=f"facebookresearch/SPG checkout at {COMMIT}")
    checkout = official_checkout(ap.parse_args().checkout, COMMIT)
    Trainer = _import_trainer(checkout)

    torch.manual_seed(0)
    model = TinyDenoiser()
    prompt_ids, completion_ids, rewards = _inputs()
    prompt_mask = (prompt_ids != PAD_ID).long()
    G = completion_ids.shape[1]

    t = Trainer.__new__(Trainer)
    t.args = types.SimpleNamespace(mask_id=MASK_ID, cfg_scale=0.0, **SETTINGS)
    t.num_iterations, t.beta, t._step = SETTINGS["num_iterations"], 0.0, 0
    t.control = types.SimpleNamespace(should_evaluate=False)
    t._metrics = {"train": defaultdict(list), "eval": defaultdict(list)}
    t.accelerator = types.SimpleNamespace(gather_for_metrics=lambda x: x)

    # the trainer's completion mask (l.644-648), advantages (l.718-720) and reward mask (l.721)
    is_eos = completion_ids == EOS_ID
    eos_idx = torch.full((is_eos.size(0),), is_eos.size(1), dtype=torch.long)
    eos_idx[is_eos.any(dim=1)] = is_eos.int().argmax(dim=1)[is_eos.any(dim=1)]
    completion_mask = (torch.arange(G).expand(is_eos.size(0), -1) <= eos_idx.unsqueeze(1)).int()
    advantages = rewards - rewards.view(-1, GROUP).mean(dim=1).repeat_interleave(GROUP)
    reward_mask = advantages > 0

    recorded = {}
    real_forward, real_rand = t.forward_process, torch.rand

    def forward_process(*args, **kwargs):
        noisy, block_mask = real_forward(*args, **kwargs)
        recorded["noisy"], recorded["block_mask"] = noisy, block_mask
        return noisy, block_mask

    def rand(*args, **kwargs):
        out = real_rand(*args, **kwargs)
        recorded["random_matrix"] = out
        return out

    t.forward_process = forward_process
    torch.rand = rand
    try:
        inputs = {"prompt_ids": prompt_ids, "prompt_mask": prompt_mask, "completion_ids": completion_ids,
                  "completion_mask": completion_mask, "mask_seeds": [MASK_SEED], "advantages": advantages,
                  "reward_mask": reward_mask}
        loss = t.compute_loss(model, inputs)
    finally:
        torch.rand = real_rand
    loss.backward()
    print(f"loss {loss.item():.7f}; random_matrix {tuple(recorded['random_matrix'].shape)}")

    tensors = {**{f"current.{k}": v for k, v in model.state_dict().items()},
               "input_ids": torch.cat([prompt_ids, completion_ids], 1), "prompt_mask": prompt_mask, "rewards": rewards,
               "noisy": recorded["noisy"], "block_mask": recorded["block_mask"],
               "random_matrix": recorded["random_matrix"],
               "expected.completion_mask": completion_mask, "expected.advantages": advantages,
               "expected.loss": loss.detach().reshape(1),
               **{f"expected.grad.{n}": dict(model.named_parameters())[n].grad for n in GRAD_PARAMS}}
    meta = {"official": f"facebookresearch/SPG@{COMMIT}", "file": "spg/spg_trainer.py",
            "functions": ["SPGTrainer.forward_process", "SPGTrainer._get_per_seq_logps", "SPGTrainer.compute_loss"],
            "mask_id": MASK_ID, "eos_id": EOS_ID, "pad_id": PAD_ID, "group_size": GROUP,
            "prompt_length": prompt_ids.shape[1], "mask_seed": MASK_SEED, "settings": SETTINGS,
            "grad_params": list(GRAD_PARAMS), "torch": torch.__version__}
    print("wrote", write_fixture("spg", tensors, meta))


if __name__ == "__main__":
    main()
