"""Block-diffusion SFT of SDAR through the family adapter (the ``sft`` objective never names a family)."""

from __future__ import annotations

import pytest
import torch

from dare.data.supervised import SupervisedCollator, SupervisedExample
from dare.modeling import load_model
from dare.plugins.manager import get_registry
from dare.run import Run
from dare.runspec import validate_spec
from dare.testing import tiny_model
from dare_sdar import SDARForCausalLM
from dare_sdar.family import SDARFamily


def test_collated_right_padding_is_invisible_to_the_training_logits(tmp_path):
    """SupervisedCollator pads to whole blocks with attention 0; the noisy half's logits of the real tokens
    equal those of the unpadded row (padding keys hidden, blocks from position 0)."""
    lm = tiny_model("sdar", tmp_path, seed=4)
    fam, model = SDARFamily(), lm.model.eval()
    examples = [SupervisedExample([5, 6, 7], [8, 9, lm.tokens.eos_id]), SupervisedExample([5, 6, 7, 8, 9], [10, 11, 12, 13, lm.tokens.eos_id])]
    batch = SupervisedCollator(lm.tokens, fam.pad_in_response, pad_to_multiple_of=fam.block_size(model.config))(examples)
    assert batch["input_ids"].shape == (2, 12) and batch["attention_mask"][0].tolist() == [1] * 6 + [0] * 6
    assert batch["loss_mask"][0].tolist() == [False] * 3 + [True] * 3 + [False] * 6  # EOS included, padding not
    ids, attn = batch["input_ids"], batch["attention_mask"]
    noisy = torch.where(batch["loss_mask"], torch.full_like(ids, lm.tokens.mask_id), ids)
    with torch.no_grad():
        padded = fam.denoiser_logits(model, noisy, ids, attn)
        alone = fam.denoiser_logits(model, noisy[:1, :6], ids[:1, :6])
    assert torch.allclose(padded[0, :6], alone[0], atol=1e-5)


def test_dare_run_trains_sdar_with_the_sft_objective(tmp_path):
    if get_registry().find("objective", "sft") is None:
        pytest.skip("needs dare-plugin-sft")
    spec = validate_spec({
        "model": {"new": {"family": "sdar", "preset": "tiny"}},
        "data": {"train": {"path": "dare://sudoku/train.parquet", "limit": 16, "prompt_template": "{{ extra_info.puzzle }}",
                           "response_template": "{{ reward_model.ground_truth }}", "chat_template": False}},
        "algorithm": {"name": "sft"},
        "train": {"learning_rate": 1e-3, "max_steps": 2, "per_device_batch_size": 8, "logging_steps": 1, "save_steps": 100},
        "output": {"dir": str(tmp_path / "run")},
    })
    run = Run(spec)
    run.prepare()
    metrics = run.train()
    assert metrics["global_step"] == 2 and torch.isfinite(torch.tensor(metrics["train_loss"]))
    trained = load_model(run.model_dir)
    assert isinstance(trained.model, SDARForCausalLM)
    init = load_model(run.dir / "init-model").model.state_dict()
    assert any(not torch.equal(v, init[k]) for k, v in trained.model.state_dict().items())
