"""Build the CJ-GRPO parity fixture from the official trainer (run by hand, never in CI).

    git clone https://github.com/yjyddq/EOSER-ASS-RL /tmp/cj && git -C /tmp/cj checkout 5affb4ec0db9d3819175c2011c94e38c74325624
    .venv/bin/python tools/parity/build_cj_grpo.py /tmp/cj

Runs ``FlowGRPOTrainer._get_per_token_logps`` (each state of the reversed trajectory scored against the next
state) and ``FlowGRPOTrainer.compute_loss`` (per step, the clipped loss token-mean over the positions
unmasked at that step, averaged over the steps) of ``cj-grpo/cj_grpo_trainer_semiar.py`` on
:class:`tools.parity.common.TinyDenoiser` (current, old and reference weights, ``num_iterations`` 2 so the
ratio is not 1, ``beta`` 0.04), with a hand-made decoding trajectory (a random commit order, one token per
row and step) and left-padded prompts. TRL's ``selective_log_softmax`` is replaced by
``log_softmax`` + ``gather`` (what it computes). Advantages as ``_generate_and_score_completions``
(l.584-587, ``r - mean``). Writes ``tests/fixtures/parity/cj_grpo/``; ``tests/parity/test_cj_grpo.py``
compares DARE's trajectory replay.
"""

from __future__ import annotations

import argparse
import sys
import types
from collections import defaultdict
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from tools.parity.common import official_checkout, policy_models, stub_modules, write_fixture  # noqa: E402

COMMIT = "5affb4ec0db9d3819175c2011c94e38c74325624"
MASK_ID, EOS_ID, PAD_ID = 15, 2, 1
GROUP = 3
SETTINGS = {"epsilon": 0.5, "beta": 0.04, "num_iterations": 2}
GRAD_PARAMS = ("embed.weight", "head.weight")


def _selective_log_softmax(logits, index):
    return torch.log_softmax(logits, dim=-1).gather(-1, index.unsqueeze(-1)).squeeze(-1)


def _import_trainer(checkout: Path):
    import accelerate.utils  # noqa: F401  (the real ones, before any stub)
    import transformers  # noqa: F401

    stub_modules({
        "trl.trainer.grpo_trainer": {"GRPOTrainer": type("GRPOTrainer", (), {})},
        "trl.trainer.grpo_config": {}, "trl.extras.profiling": {"profiling_decorator": lambda f: f},
        "trl.data_utils": {}, "trl.models": {},
        "trl.trainer.utils": {"selective_log_softmax": _selective_log_softmax},
        "trl.import_utils": {"is_rich_available": lambda: False, "is_vllm_available": lambda: False},
        "wandb": {},
    })
    sys.path.insert(0, str(checkout / "cj-grpo"))
    import cj_grpo_trainer_semiar

    return cj_grpo_trainer_semiar.FlowGRPOTrainer


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("checkout", help=f"yjyddq/EOSER-ASS-RL checkout at {COMMIT}")
    checkout = official_checkout(ap.parse_args().checkout, COMMIT)
    Trainer = _import_trainer(checkout)

    models = policy_models()
    prompts = torch.tensor([[PAD_ID, PAD_ID, 4, 5, 6], [PAD_ID, 12, 13, 4, 5]]).repeat_interleave(GROUP, dim=0)
    E = EOS_ID
    completions = torch.tensor([[3, 4, E, E, E], [5, 6, 7, 8, 9], [11, E, E, E, E],
                                [12, 13, 14, 3, E], [4, E, 6, E, E], [7, 8, 9, E, E]])
    rewards = torch.tensor([1.0, 0.0, 0.5, 0.0, 1.0, 1.0])
    N, G = completions.shape
    P = prompts.shape[1]
    unmask_step = torch.stack([torch.randperm(G) for _ in range(N)])  # step that commits each position
    traj = [torch.cat([prompts, torch.full_like(completions, MASK_ID)], 1)]
    unmask_positions = []
    for s in range(G):
        now = unmask_step == s
        unmask_positions.append(now)
        nxt = traj[-1].clone()
        nxt[:, P:] = torch.where(now, completions, nxt[:, P:])
        traj.append(nxt)
    advantages = rewards - rewards.view(-1, GROUP).mean(dim=1).repeat_interleave(GROUP)

    t = Trainer.__new__(Trainer)
    t.args = types.SimpleNamespace(mask_id=MASK_ID, cfg_scale=0.0, num_iterations=SETTINGS["num_iterations"])
    t.num_iterations, t.epsilon, t.beta = SETTINGS["num_iterations"], SETTINGS["epsilon"], SETTINGS["beta"]
    t.control = types.SimpleNamespace(should_evaluate=False)
    t._metrics = {"train": defaultdict(list), "eval": defaultdict(list)}
    t.accelerator = types.SimpleNamespace(gather_for_metrics=lambda x: x)
    ids = torch.cat([prompts, completions], 1)
    with torch.no_grad():
        old = t._get_per_token_logps(models["old"], ids, traj, unmask_positions, G)
        ref = t._get_per_token_logps(models["ref"], ids, traj, unmask_positions, G)
    inputs = {"reversed_traj": traj, "reversed_traj_unmask_positions": unmask_positions,
              "reversed_traj_old_per_token_logps": old, "reversed_traj_ref_per_token_logps": ref,
              "prompt_ids": prompts, "prompt_mask": (prompts != PAD_ID).long(), "completion_ids": completions,
              "completion_mask": torch.ones_like(completions), "advantages": advantages}
    loss = t.compute_loss(models["current"], inputs)
    loss.backward()
    print(f"loss {loss.item():.7f}")
    tensors = {**{f"{m}.{k}": v for m, mod in models.items() for k, v in mod.state_dict().items()},
               "input_ids": ids, "unmask_step": unmask_step, "rewards": rewards,
               "expected.advantages": advantages, "expected.loss": loss.detach().reshape(1),
               **{f"expected.grad.{n}": dict(models["current"].named_parameters())[n].grad for n in GRAD_PARAMS}}
    meta = {"official": f"yjyddq/EOSER-ASS-RL@{COMMIT}", "file": "cj-grpo/cj_grpo_trainer_semiar.py",
            "functions": ["FlowGRPOTrainer._get_per_token_logps", "FlowGRPOTrainer.compute_loss"],
            "mask_id": MASK_ID, "eos_id": EOS_ID, "pad_id": PAD_ID, "group_size": GROUP, "prompt_length": P,
            "settings": SETTINGS, "grad_params": list(GRAD_PARAMS), "torch": torch.__version__}
    print("wrote", write_fixture("cj_grpo", tensors, meta))


if __name__ == "__main__":
    main()
