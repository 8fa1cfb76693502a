"""Build the MC-ELBO parity fixture from LLaDA's released likelihood (run by hand, never in CI).

    git clone https://github.com/ML-GSAI/LLaDA /tmp/llada && git -C /tmp/llada checkout b7e6c3565f194352da44b38dd12b6970597309f3
    .venv/bin/python tools/parity/build_mc_elbo.py /tmp/llada

Runs ``get_log_likelihood`` of ``get_log_likelihood.py`` (stratified mask counts from one
``k ~ U{1..L}`` per mini-batch, ``torch.randperm`` positions, ``1 / p_mask`` weighting) on
:class:`tools.parity.common.TinyDenoiser`, recording every ``forward_process`` draw (the masks and the
mask ratios) by wrapping the official function. ``L`` and the mini-batch are chosen so that no stratified
count is a rounding tie (the official ``torch.round`` is half-to-even, DARE's half-up). Writes
``tests/fixtures/parity/mc_elbo/``; ``tests/parity/test_mc_elbo.py`` compares DARE's
``dare.diffusion.elbo`` (the VRPO/BGPO ELBO).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from tools.parity.common import TinyDenoiser, official_checkout, write_fixture  # noqa: E402

COMMIT = "b7e6c3565f194352da44b38dd12b6970597309f3"
MASK_ID, MC_NUM, BATCH = 15, 8, 4


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("checkout", help=f"ML-GSAI/LLaDA checkout at {COMMIT}")
    checkout = official_checkout(ap.parse_args().checkout, COMMIT)
    import transformers  # noqa: F401  (imported by the official module)

    sys.path.insert(0, str(checkout))
    import get_log_likelihood as official

    draws = []
    real = official.forward_process

    def recording(batch, prompt_index, mask_id):
        noisy, p_mask = real(batch, prompt_index, mask_id)
        draws.append((noisy == mask_id, p_mask[:, 0].clone()))
        return noisy, p_mask

    official.forward_process = recording
    torch.manual_seed(0)
    model = TinyDenoiser()
    prompt, answer = torch.tensor([4, 5, 6]), torch.tensor([7, 8, 9, 10, 3, 2, 2, 2])
    torch.manual_seed(1)
    value = official.get_log_likelihood(model, prompt, answer, mc_num=MC_NUM, batch_size=BATCH, mask_id=MASK_ID)
    masks = torch.cat([m for m, _ in draws])          # [MC_NUM, S]
    p_mask = torch.cat([p for _, p in draws])         # [MC_NUM]
    print(f"ELBO {value:.7f}; counts {(p_mask * len(answer)).round().long().tolist()}")
    tensors = {**{f"current.{k}": v for k, v in model.state_dict().items()},
               "input_ids": torch.cat([prompt, answer]), "masks": masks, "p_mask": p_mask.float(),
               "expected.elbo": torch.tensor([value], dtype=torch.float64)}
    meta = {"official": f"ML-GSAI/LLaDA@{COMMIT}", "file": "get_log_likelihood.py",
            "functions": ["forward_process", "get_log_likelihood"], "mask_id": MASK_ID, "mc_num": MC_NUM,
            "batch_size": BATCH, "prompt_length": len(prompt), "torch": torch.__version__}
    print("wrote", write_fixture("mc_elbo", tensors, meta))


if __name__ == "__main__":
    main()
