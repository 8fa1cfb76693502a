"""Build the d-TreeRPO parity fixture from the official trainer (run by hand, never in CI).

    git clone https://github.com/THU-BPM/d-TreeRPO /tmp/dt && git -C /tmp/dt checkout 3eb6f215184bd078e948651539ce046133a68174
    .venv/bin/python tools/parity/build_dtreerpo.py /tmp/dt

Runs ``DTreeRPOTrainer._get_local_transition_logps`` and ``DTreeRPOTrainer.compute_loss`` of
``dtreerpo/dtreerpo_trainer.py`` (local transition PPO with the k3 KL, and the sibling self-distillation at
training progress 0.5) on :class:`tools.parity.common.TinyDenoiser` (current, old and reference weights) over
hand-made tree edges: two parents with three children each, siblings sharing some decoded tokens, EOS inside
some children, local advantages of both signs, with the settings of ``dtreerpo/slurm_scripts/dtreerpo.yaml``.
The tree rollout itself is not run. Writes ``tests/fixtures/parity/dtreerpo/``;
``tests/parity/test_dtreerpo.py`` compares DARE's edge loss.
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

COMMIT = "3eb6f215184bd078e948651539ce046133a68174"
MASK_ID, EOS_ID, PAD_ID = 15, 2, 1
SETTINGS = {"epsilon": 0.4, "beta": 0.01, "enable_self_distillation_loss": True, "max_steps": 30000,
            "self_distillation_lambda_max": 3e-3, "self_distillation_gamma": 2.0, "self_distillation_tau_max": 2.0,
            "self_distillation_beta": 0.7, "global_step": 15000}
GRAD_PARAMS = ("embed.weight", "head.weight")


def _import_trainer(checkout: Path):
    import accelerate.utils  # noqa: F401  (the real ones, before any stub)
    import transformers  # noqa: F401

    stub_modules({
        "trl.trainer.grpo_trainer": {"GRPOTrainer": type("GRPOTrainer", (), {})},
        "trl.trainer.grpo_config": {}, "trl.extras.profiling": {"profiling_decorator": lambda f: f},
        "trl.data_utils": {}, "trl.models": {}, "trl.trainer.utils": {},
        "trl.import_utils": {"is_rich_available": lambda: False, "is_vllm_available": lambda: False},
        "wandb": {}, "dtreerpo_config": {},
    })
    sys.path.insert(0, str(checkout / "dtreerpo"))
    import dtreerpo_trainer

    return dtreerpo_trainer.DTreeRPOTrainer


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("checkout", help=f"THU-BPM/d-TreeRPO checkout at {COMMIT}")
    checkout = official_checkout(ap.parse_args().checkout, COMMIT)
    Trainer = _import_trainer(checkout)

    models = policy_models()
    M, E = MASK_ID, EOS_ID
    parents = torch.tensor([[PAD_ID, 4, 5, 6, 3, M, M, M, M, M], [7, 8, 9, 10, 11, 12, M, M, M, M]])
    children = torch.tensor([
        [PAD_ID, 4, 5, 6, 3, 7, 8, M, M, M], [PAD_ID, 4, 5, 6, 3, 7, 9, E, M, M], [PAD_ID, 4, 5, 6, 3, 6, 8, M, M, M],
        [7, 8, 9, 10, 11, 12, 13, E, E, M], [7, 8, 9, 10, 11, 12, 13, 3, M, M], [7, 8, 9, 10, 11, 12, 4, 3, M, M],
    ])
    parent_ids = parents.repeat_interleave(3, dim=0)
    group_ids = torch.tensor([0, 0, 0, 1, 1, 1])
    advantages = torch.tensor([0.5, 0.25, -0.75, -0.5, 1.0, -0.5])
    P = 4

    t = Trainer.__new__(Trainer)
    t.args = types.SimpleNamespace(mask_id=MASK_ID, cfg_scale=0.0,
                                   **{k: v for k, v in SETTINGS.items() if k != "global_step"})
    t.processing_class = types.SimpleNamespace(eos_token_id=EOS_ID)
    t.state = types.SimpleNamespace(global_step=SETTINGS["global_step"])
    t.accelerator = types.SimpleNamespace(device=torch.device("cpu"), gather_for_metrics=lambda x: x)
    t.control = types.SimpleNamespace(should_evaluate=False)
    t._metrics = {"train": defaultdict(list), "eval": defaultdict(list)}
    t.log = lambda logs: None
    with torch.no_grad():
        old = t._get_local_transition_logps(models["old"], parent_ids, children, P)
        ref = t._get_local_transition_logps(models["ref"], parent_ids, children, P)
    inputs = {"parent_ids": parent_ids, "child_ids": children, "prompt_length": P, "old_local_logps": old,
              "ref_local_logps": ref, "local_advantages": advantages, "group_ids": group_ids}
    loss = t.compute_loss(models["current"], inputs)
    loss.backward()
    print(f"loss {loss.item():.7f}")
    tensors = {**{f"{m}.{k}": v for m, mod in models.items() for k, v in mod.state_dict().items()},
               "parent_ids": parent_ids, "child_ids": children, "group_ids": group_ids, "advantages": advantages,
               "expected.loss": loss.detach().reshape(1),
               **{f"expected.grad.{n}": dict(models["current"].named_parameters())[n].grad for n in GRAD_PARAMS}}
    meta = {"official": f"THU-BPM/d-TreeRPO@{COMMIT}", "file": "dtreerpo/dtreerpo_trainer.py",
            "functions": ["DTreeRPOTrainer._get_local_transition_logps", "DTreeRPOTrainer.compute_loss"],
            "mask_id": MASK_ID, "eos_id": EOS_ID, "pad_id": PAD_ID, "prompt_length": P, "settings": SETTINGS,
            "grad_params": list(GRAD_PARAMS), "torch": torch.__version__}
    print("wrote", write_fixture("dtreerpo", tensors, meta))


if __name__ == "__main__":
    main()
