"""DiffusionGemma SFT against NeMo AutoModel's recipe (NVIDIA-NeMo/Automodel@36044ad, ``recipes/dllm/train_ft.py``
``DiffusionGemmaSFTRecipe``, ``components/loss/dllm_loss.py``).

The fixture (``tests/fixtures/parity/diffusiongemma_sft/``, built by ``tools/parity/build_diffusiongemma_sft.py`` from
the official code) holds a tiny DiffusionGemma, a right-padded batch of three responses (one and two canvas blocks),
NeMo's corruption, response window, block-causal masks and self-conditioning coins, and its loss (flat canvas CE +
encoder AR CE) and gradients. DARE's ``sft`` on a uniform-noise family draws the same values from the same per-example
generators; loss and gradients must match to 1e-5 (relative), and changing one setting must break the match.
"""

from __future__ import annotations

import pytest
import torch
from transformers import DiffusionGemmaForBlockDiffusion

from dare.components import SpecialTokens
from dare.diffusion import bernoulli_mask, sample_mask_ratio, uniform_noise
from dare.randomness import RowGenerators
from dare_diffusiongemma.family import DiffusionGemmaFamily
from dare_sft.objective import SFTParams
from dare_sft.trainer import canvas_sft_loss
from tools.parity.common import read_fixture, rel_diff

TOL = 1e-5


def run_dare(**overrides):
    t, meta = read_fixture("diffusiongemma_sft")
    fam = DiffusionGemmaFamily()
    config = fam.new_config("tiny", meta["overrides"], 300, SpecialTokens(mask_id=None, eos_id=1, pad_id=0, bos_id=2))
    model = DiffusionGemmaForBlockDiffusion(config)
    # the fixture holds each tied tensor once; loading it sets its aliases too
    result = model.load_state_dict({k[len("weight."):]: v for k, v in t.items() if k.startswith("weight.")}, strict=False)
    assert result.unexpected_keys == []
    state = model.state_dict()
    loaded = {state[k].data_ptr() for k in state if k not in result.missing_keys}
    assert all(state[k].data_ptr() in loaded for k in result.missing_keys)  # every key left out is an alias
    model.train()
    s = meta["settings"]
    params = SFTParams(mask_eps=s["eps"], self_conditioning_p=s["self_conditioning_p"],
                       encoder_loss_weight=s["encoder_loss_weight"]).model_copy(update=overrides)
    gens = RowGenerators.keyed(meta["seed"], "sft", meta["step"], meta["indices"])
    ratio = sample_mask_ratio(3, params.mask_eps, generator=gens)
    loss, _, corrupted = canvas_sft_loss(fam, model, t["ids"], t["loss_mask"], t["attention_mask"], ratio, gens, params)
    loss.backward()
    grads = {k: dict(model.named_parameters())[k].grad for k in meta["grad_params"]}
    return t, meta, loss, corrupted, grads, model, fam


def test_loss_and_gradients_equal_nemo():
    t, meta, loss, corrupted, grads, _, _ = run_dare()
    assert corrupted.tolist() == t["noise_mask"].tolist()
    assert rel_diff(loss, t["loss"]) <= TOL
    for name in meta["grad_params"]:
        assert rel_diff(grads[name], t[f"grad.{name}"]) <= TOL, name


def test_corruption_and_masks_equal_nemo():
    t, meta = read_fixture("diffusiongemma_sft")
    gens = RowGenerators.keyed(meta["seed"], "sft", meta["step"], meta["indices"])
    ratio = sample_mask_ratio(3, meta["settings"]["eps"], generator=gens)
    corrupted = bernoulli_mask(ratio, t["loss_mask"].bool(), generator=gens)
    assert uniform_noise(t["ids"], corrupted, 300, gens).tolist() == t["noisy"].tolist()
    fam = DiffusionGemmaFamily()
    model = DiffusionGemmaForBlockDiffusion(fam.new_config("tiny", meta["overrides"], 300, SpecialTokens(None, 1, 0, bos_id=2)))
    attn, lm = t["attention_mask"].bool(), t["loss_mask"].bool()
    prefix = lm.int().argmax(dim=1).long()
    masks = fam.training_masks(model, prefix, attn.long().sum(1) - prefix, attn.shape[1], t["canvas_ids"].shape[1])
    assert masks["full_attention"].tolist() == (t["mask_full"] == 0).tolist()
    assert masks["sliding_attention"].tolist() == (t["mask_sliding"] == 0).tolist()
    assert not torch.equal(masks["sliding_attention"], masks["full_attention"])  # the window cuts keys here


@pytest.mark.parametrize("override", [{"encoder_loss_weight": 0.5}, {"self_conditioning_p": 1.0}, {"mask_eps": 0.1}])
def test_changing_a_setting_breaks_the_match(override):
    t, meta, loss, _, grads, *_ = run_dare(**override)
    diffs = [rel_diff(loss, t["loss"])] + [rel_diff(grads[n], t[f"grad.{n}"]) for n in meta["grad_params"]]
    assert max(diffs) > 100 * TOL
