"""Build the MDPO parity fixture from the official trainer (run by hand, never in CI).

    git clone https://github.com/autonomousvision/mdpo /tmp/mdpo && git -C /tmp/mdpo checkout e6ae43906d202a11813860746c9f361d2da3ab5d
    .venv/bin/python tools/parity/build_mdpo.py /tmp/mdpo

Runs ``MDPOTrainer._get_per_token_logps`` (logits divided by the rollout temperature) and
``MDPOTrainer.compute_loss`` (per step row: clipped surrogate times ``lambda = G / #masked``, k2 KL, weighted by
the recorded confidence, summed over the masked positions of every row / their count) of
``src/open_r1/mdpo/mdpo_trainer.py``, compiled from the file (:func:`tools.parity.common.official_functions`: the
module's imports need the whole training stack), on :class:`tools.parity.common.TinyDenoiser` (current and
reference weights) over random step rows (48-token states mostly masked, predictions, confidences, step advantages), with the
LLaDA recipe's temperature 0.1 (``recipes/LLaDA-Instruct/mdpo/config_demo.yaml``). TRL's
``selective_log_softmax`` is ``log_softmax`` + ``gather``. Writes ``tests/fixtures/parity/mdpo/``;
``tests/parity/test_mdpo.py`` compares DARE's step loss.
"""

from __future__ import annotations

import argparse
import sys
import types
from collections import defaultdict
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from tools.parity.common import TinyDenoiser, official_checkout, official_functions, write_fixture  # noqa: E402

COMMIT = "e6ae43906d202a11813860746c9f361d2da3ab5d"
MASK_ID, EOS_ID, PAD_ID = 15, 2, 1
SETTINGS = {"temperature": 0.1, "epsilon": 0.2, "beta": 0.02, "num_iterations": 1}
GRAD_PARAMS = ("embed.weight", "head.weight")


def _selective_log_softmax(logits, index):
    return torch.log_softmax(logits, dim=-1).gather(-1, index.unsqueeze(-1)).squeeze(-1)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("checkout", help=f"autonomousvision/mdpo checkout at {COMMIT}")
    checkout = official_checkout(ap.parse_args().checkout, COMMIT)
    fns = official_functions(checkout / "src/open_r1/mdpo/mdpo_trainer.py", ("_get_per_token_logps", "compute_loss"),
                             {"torch": torch, "selective_log_softmax": _selective_log_softmax})

    torch.manual_seed(0)
    models = {"current": TinyDenoiser(), "ref": TinyDenoiser()}
    with torch.no_grad():
        models["ref"].load_state_dict(models["current"].state_dict())
        for p in models["ref"].parameters():
            p.add_(0.1 * torch.randn_like(p))
    prompts = torch.tensor([[PAD_ID, PAD_ID, 4, 5, 6], [PAD_ID, 12, 13, 4, 5], [7, 8, 9, 10, 11], [PAD_ID, 4, 5, 6, 7]])
    # 48-token completions, most positions still masked: the official epsilons (1e-4 added to the masked count,
    # float32 eps to the temperature) then stay below 1e-6 relative
    predictions = torch.randint(3, 15, (4, 48))
    predictions[:, 40:] = EOS_ID
    states = torch.where(torch.rand(predictions.shape) < 0.8, torch.full_like(predictions, MASK_ID), predictions)
    confidence = torch.rand(states.shape)
    advantages = torch.tensor([0.8, -0.5, 1.2, -1.1])
    G = states.shape[1]
    prompt_mask = (prompts != PAD_ID).long()

    t = types.SimpleNamespace(max_completion_length=G, temperature=SETTINGS["temperature"], epsilon=SETTINGS["epsilon"],
                              beta=SETTINGS["beta"], num_iterations=SETTINGS["num_iterations"],
                              processing_class=types.SimpleNamespace(mask_token_id=MASK_ID),
                              control=types.SimpleNamespace(should_evaluate=False),
                              _metrics={"train": defaultdict(list), "eval": defaultdict(list)},
                              accelerator=types.SimpleNamespace(gather_for_metrics=lambda x: x))
    t._get_per_token_logps = types.MethodType(fns["_get_per_token_logps"], t)
    model = models["current"]
    model.module = types.SimpleNamespace(config=types.SimpleNamespace(model_type="llada"))
    input_ids = torch.cat([prompts, states], 1)
    target_ids = torch.cat([prompts, predictions], 1)
    input_mask = torch.cat([prompt_mask, torch.ones_like(states)], 1)
    with torch.no_grad():
        ref = t._get_per_token_logps(models["ref"], input_ids, target_ids, input_mask)
    inputs = {"input_ids": input_ids, "input_mask": input_mask, "target_ids": target_ids, "conf": confidence,
              "advantages": advantages[:, None].expand_as(states), "ref_per_token_logps": ref}
    loss = fns["compute_loss"](t, model, inputs)
    loss.backward()
    print(f"loss {loss.item():.7f}")
    del model.module
    tensors = {**{f"{m}.{k}": v for m, mod in models.items() for k, v in mod.state_dict().items()},
               "prompt_ids": prompts, "states": states, "predictions": predictions, "confidence": confidence,
               "advantages": advantages, "expected.loss": loss.detach().reshape(1),
               **{f"expected.grad.{n}": dict(models["current"].named_parameters())[n].grad for n in GRAD_PARAMS}}
    meta = {"official": f"autonomousvision/mdpo@{COMMIT}", "file": "src/open_r1/mdpo/mdpo_trainer.py",
            "functions": ["MDPOTrainer._get_per_token_logps", "MDPOTrainer.compute_loss"], "mask_id": MASK_ID,
            "eos_id": EOS_ID, "pad_id": PAD_ID, "settings": SETTINGS, "grad_params": list(GRAD_PARAMS),
            "torch": torch.__version__}
    print("wrote", write_fixture("mdpo", tensors, meta))


if __name__ == "__main__":
    main()
