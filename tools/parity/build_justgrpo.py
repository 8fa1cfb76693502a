"""Build the JustGRPO parity fixture from the official code (run by hand, never in CI).

    git clone https://github.com/LeapLabTHU/JustGRPO /tmp/jg && git -C /tmp/jg checkout eebe50e71f5b84ec6b3824cb502664577989db1b
    .venv/bin/python tools/parity/build_justgrpo.py /tmp/jg

Runs ``grpo.py::compute_group_advantages`` and ``grpo.py::logprob_loss`` (one backward per response
position on ``[prompt ; y_<t ; MASK ...]``, ratio ``exp(l - l.detach())``, clip 0.2, scale
``1 / gen_length / valid_samples``) on :class:`tools.parity.common.TinyDenoiser`, with left-padded prompts
and the official row layout (``prompt_ids.repeat(num_generations, 1)``: completion ``j`` of prompt ``p`` is
row ``j * num_prompts + p``). The rewards give every row a non-zero advantage, so the official normaliser
(rows with a non-zero advantage, ``train.py`` l.184) counts every row. Records the loss (the sum of the
per-position losses passed to ``accelerator.backward``) and the gradients. Writes
``tests/fixtures/parity/justgrpo/``; ``tests/parity/test_justgrpo.py`` compares DARE.
"""

from __future__ import annotations

import argparse
import sys
import types
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from tools.parity.common import TinyDenoiser, official_checkout, write_fixture  # noqa: E402

COMMIT = "eebe50e71f5b84ec6b3824cb502664577989db1b"
MASK_ID, EOS_ID, PAD_ID = 15, 2, 1
GROUP, GEN_LENGTH = 3, 6
GRAD_PARAMS = ("embed.weight", "head.weight")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("checkout", help=f"LeapLabTHU/JustGRPO checkout at {COMMIT}")
    checkout = official_checkout(ap.parse_args().checkout, COMMIT)
    sys.path.insert(0, str(checkout))
    import grpo as official

    torch.manual_seed(0)
    model = TinyDenoiser()
    prompts = torch.tensor([[PAD_ID, PAD_ID, 4, 5, 6], [PAD_ID, 12, 13, 4, 5]])
    E = EOS_ID
    # official layout: row j * 2 + p is completion j of prompt p
    completions = torch.tensor([[3, 4, E, E, E, E], [12, 13, 14, 3, E, E], [5, 6, 7, 8, 9, 10],
                                [4, E, E, E, E, E], [11, E, E, E, E, E], [7, 8, 9, 10, 11, E]])
    rewards = torch.tensor([1.0, 0.2, 0.0, 1.0, 0.3, 0.0])
    ids = torch.cat([prompts.repeat(GROUP, 1), completions], 1)
    advantages = official.compute_group_advantages(rewards, GROUP)
    valid_samples = (advantages != 0).sum()
    assert int(valid_samples) == len(rewards)
    losses = []

    def backward(loss):
        losses.append(float(loss))
        loss.backward()

    accelerator = types.SimpleNamespace(gather=lambda x: x, backward=backward)
    official.logprob_loss(model, {"advantages": advantages, "generated_ids": ids, "prompt_len": prompts.shape[1],
                                  "rewards": rewards}, valid_samples, eps=0.2, gain=1.0, temperature=1.0,
                          accelerator=accelerator, gen_length=GEN_LENGTH, mask_id=MASK_ID)
    loss = sum(losses)
    print(f"loss {loss:.7f} over {len(losses)} positions")
    tensors = {**{f"current.{k}": v for k, v in model.state_dict().items()},
               "input_ids": ids, "rewards": rewards, "expected.advantages": advantages,
               "expected.loss": torch.tensor([loss], dtype=torch.float64),
               **{f"expected.grad.{n}": dict(model.named_parameters())[n].grad for n in GRAD_PARAMS}}
    meta = {"official": f"LeapLabTHU/JustGRPO@{COMMIT}", "file": "grpo.py",
            "functions": ["compute_group_advantages", "logprob_loss"], "mask_id": MASK_ID, "eos_id": EOS_ID,
            "pad_id": PAD_ID, "group_size": GROUP, "num_prompts": 2, "layout": "repeat",
            "prompt_length": prompts.shape[1], "settings": {"eps": 0.2, "temperature": 1.0, "std_eps": 1e-4},
            "grad_params": list(GRAD_PARAMS), "torch": torch.__version__}
    print("wrote", write_fixture("justgrpo", tensors, meta))


if __name__ == "__main__":
    main()
