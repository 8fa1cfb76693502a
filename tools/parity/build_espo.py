"""Build the ESPO parity fixture from the official trainer (run by hand, never in CI).

    git clone https://github.com/ML-GSAI/ESPO /tmp/espo && git -C /tmp/espo checkout b5f2dac4c54073a2f36c00bb28bc754a99730159
    .venv/bin/python tools/parity/build_espo.py /tmp/espo

Runs ``ESPOTrainer._get_elbo_mc`` (``forward_process``: stratified counts ``k/(L+1)`` and ``randperm`` positions
after ``set_seed``; ``_get_elbo``: the mask and its complement, averaged) and ``ESPOTrainer.compute_loss``
(sequence ratio ``exp((l - l_old) / L)``, clip 0.2, k2 KL on the raw ELBO over ``B L``) of
``espo/espo_trainer.py`` on :class:`tools.parity.common.TinyDenoiser` read as a LLaDA model (current, old and
reference weights, inner iteration 2 of 2, ``num_mc`` 2), with the math recipe's settings
(``recipes/run_math_llada.sh``). The masks each ``forward_process`` call drew are recorded by wrapping it.
``L + 1`` is a multiple of the batch, so the official ``torch.round`` (half-to-even) and DARE's half-up
stratification agree. Advantages as ``_generate_and_score_completions`` (leave-one-out, l.705-709). Writes
``tests/fixtures/parity/espo/``; ``tests/parity/test_espo.py`` compares DARE.
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

COMMIT = "b5f2dac4c54073a2f36c00bb28bc754a99730159"
MASK_ID, EOS_ID, PAD_ID = 15, 2, 1
GROUP = 3
SETTINGS = {"epsilon": 0.2, "beta": 1e-3, "num_iterations": 2, "num_mc": 2}
GRAD_PARAMS = ("embed.weight", "head.weight")


def _import_trainer(checkout: Path):
    import accelerate.utils  # noqa: F401  (the real ones, before any stub)
    import transformers  # noqa: F401

    stub_modules({
        "trl.trainer.grpo_trainer": {"GRPOTrainer": type("GRPOTrainer", (), {}), "nanmin": torch.min,
                                     "nanmax": torch.max},
        "trl.trainer.grpo_config": {}, "trl.extras.profiling": {"profiling_decorator": lambda f: f},
        "trl.data_utils": {}, "trl.models": {}, "trl.trainer.utils": {},
        "trl.import_utils": {"is_rich_available": lambda: False, "is_vllm_available": lambda: False},
        "wandb": {},
    })
    sys.path.insert(0, str(checkout / "espo"))
    import espo_trainer

    return espo_trainer


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("checkout", help=f"ML-GSAI/ESPO checkout at {COMMIT}")
    checkout = official_checkout(ap.parse_args().checkout, COMMIT)
    module = _import_trainer(checkout)
    Trainer = next(v for k, v in vars(module).items() if isinstance(v, type) and hasattr(v, "_get_elbo_mc"))

    models = policy_models()
    prompts = torch.tensor([[PAD_ID, PAD_ID, 4, 5, 6], [PAD_ID, 12, 13, 4, 5]]).repeat_interleave(GROUP, dim=0)
    E = EOS_ID
    completions = torch.tensor([[3, 4, E, E, E], [5, 6, 7, 8, 9], [11, E, E, E, E],
                                [12, 13, 14, 3, E], [4, E, 6, E, E], [7, 8, 9, E, E]])
    rewards = torch.tensor([1.0, 0.0, 0.5, 0.0, 1.0, 1.0])
    ids = torch.cat([prompts, completions], 1)
    N, G = completions.shape
    assert (G + 1) % N == 0
    grouped = rewards.view(-1, GROUP)
    advantages = (grouped - (grouped.sum(dim=1, keepdim=True) - grouped) / (GROUP - 1)).view(-1)
    mask_seeds = torch.tensor([[[11, 12], [23, 24]]])  # [1, num_iterations, num_mc]

    t = Trainer.__new__(Trainer)
    t.args = types.SimpleNamespace(num_iterations=SETTINGS["num_iterations"], gradient_accumulation_steps=1)
    t.processing_class = types.SimpleNamespace(mask_token_id=MASK_ID)
    t.model = types.SimpleNamespace(config=types.SimpleNamespace(name_or_path="GSAI-ML/LLaDA-8B-Instruct"))
    t.num_iterations, t.num_mc, t.beta, t._step = SETTINGS["num_iterations"], SETTINGS["num_mc"], SETTINGS["beta"], 2
    t.epsilon_low = t.epsilon_high = SETTINGS["epsilon"]
    t.control = types.SimpleNamespace(should_evaluate=False)
    t._metrics = {"train": defaultdict(list), "eval": defaultdict(list)}
    t.accelerator = types.SimpleNamespace(gather_for_metrics=lambda x: x)

    expanded = ids.unsqueeze(0).expand(SETTINGS["num_iterations"], -1, -1)
    with torch.no_grad():  # [N, num_iterations] as the trainer stores them
        old = torch.cat([t._get_elbo_mc(models["old"], expanded[j:j + 1], G, mask_seeds[0][j:j + 1], num_mc=2)
                         for j in range(2)], dim=1)
        ref = torch.cat([t._get_elbo_mc(models["ref"], expanded[j:j + 1], G, mask_seeds[0][j:j + 1], num_mc=2)
                         for j in range(2)], dim=1)
    recorded = []
    real = module.forward_process

    def forward_process(batch, prompt_index, mask_id, seed=None):
        noisy, p_mask = real(batch, prompt_index, mask_id, seed=seed)
        recorded.append(noisy == mask_id)
        return noisy, p_mask

    module.forward_process = forward_process
    inputs = {"prompt_ids": prompts, "completion_ids": completions, "mask_seeds": mask_seeds,
              "advantages": advantages, "old_per_token_logps": old, "ref_per_token_logps": ref}
    loss = t.compute_loss(models["current"], inputs)
    loss.backward()
    print(f"loss {loss.item():.7f}; {len(recorded)} forward_process calls")
    tensors = {**{f"{m}.{k}": v for m, mod in models.items() for k, v in mod.state_dict().items()},
               "input_ids": ids, "rewards": rewards, "masks": torch.stack(recorded),  # [num_mc, N, S]
               "expected.old": old[:, 1], "expected.ref": ref[:, 1], "expected.advantages": advantages,
               "expected.loss": loss.detach().reshape(1),
               **{f"expected.grad.{n}": dict(models["current"].named_parameters())[n].grad for n in GRAD_PARAMS}}
    meta = {"official": f"ML-GSAI/ESPO@{COMMIT}", "file": "espo/espo_trainer.py",
            "functions": ["forward_process", "ESPOTrainer._get_elbo", "ESPOTrainer._get_elbo_mc",
                          "ESPOTrainer.compute_loss"],
            "mask_id": MASK_ID, "eos_id": EOS_ID, "pad_id": PAD_ID, "group_size": GROUP,
            "prompt_length": prompts.shape[1], "settings": SETTINGS, "grad_params": list(GRAD_PARAMS),
            "torch": torch.__version__}
    print("wrote", write_fixture("espo", tensors, meta))


if __name__ == "__main__":
    main()
