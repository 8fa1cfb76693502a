"""The ``diffusiongemma`` sampler equals transformers' DiffusionGemma ``generate`` token for token (same seed, same
settings), is batch-invariant under left padding, and records its trajectory."""

from __future__ import annotations

import pytest
import torch
from transformers import DiffusionGemmaForBlockDiffusion
from transformers.models.diffusion_gemma.generation_diffusion_gemma import EntropyBoundSamplerConfig

from dare.components import SpecialTokens
from dare.randomness import RowGenerators
from dare_diffusiongemma.decoding import accept_by_entropy
from dare_diffusiongemma.family import DiffusionGemmaFamily
from dare_diffusiongemma.sampler import DiffusionGemmaSampler

TOKENS = SpecialTokens(mask_id=None, eos_id=1, pad_id=0, bos_id=2)
SETTINGS = {
    "defaults": dict(max_denoising_steps=6, entropy_bound=0.1, t_min=0.4, t_max=0.8, stability_threshold=1,
                     confidence_threshold=0.005),
    "hot-no-early-stop": dict(max_denoising_steps=4, entropy_bound=2.0, t_min=0.1, t_max=1.5, stability_threshold=None,
                              confidence_threshold=None),
    # every canvas is "confident" (threshold above ln 300) and stability 0: each canvas stops after its first step
    "confident-stop": dict(max_denoising_steps=8, entropy_bound=0.5, t_min=0.01, t_max=0.02, stability_threshold=0,
                           confidence_threshold=6.0),
}


@pytest.fixture(scope="module")
def model():
    fam = DiffusionGemmaFamily()
    cfg = fam.new_config("tiny", {}, 300, TOKENS)
    torch.manual_seed(0)
    return DiffusionGemmaForBlockDiffusion(cfg).eval()


@pytest.mark.parametrize("setting", sorted(SETTINGS))
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_tokens_equal_transformers_generate(model, setting, seed):
    s = SETTINGS[setting]
    sampler = DiffusionGemmaSampler(DiffusionGemmaSampler.Params(gen_length=16, **s))
    prompt = torch.tensor([[2, 5, 6, 7, 8, 9]])
    torch.manual_seed(seed)
    ref = model.generate(prompt, max_new_tokens=16, sampler_config=EntropyBoundSamplerConfig(entropy_bound=s["entropy_bound"]),
                         eos_token_id=[1], pad_token_id=0,
                         **{k: v for k, v in s.items() if k != "entropy_bound"}).sequences
    out = sampler.generate(model, DiffusionGemmaFamily(), TOKENS, prompt,
                           generator=RowGenerators([torch.Generator().manual_seed(seed)]))
    assert out.sequences.tolist() == ref.tolist()
    assert out.prompt_length == 6 and out.sequences.shape == (1, 22)
    assert out.nfe == (2 if setting == "confident-stop" else 2 * s["max_denoising_steps"])


def test_stop_id_pads_the_rest_like_generate(model):
    """A stop id the tiny model does emit (found from an unstopped run) ends the row as generate ends it."""
    s = SETTINGS["hot-no-early-stop"]
    prompt = torch.tensor([[2, 5, 6, 7, 8, 9]])
    torch.manual_seed(1)
    free = model.generate(prompt, max_new_tokens=16, sampler_config=EntropyBoundSamplerConfig(entropy_bound=2.0),
                          eos_token_id=[299], pad_token_id=0,
                          **{k: v for k, v in s.items() if k != "entropy_bound"}).sequences[0, 6:]
    stop = int(free[3])
    torch.manual_seed(1)
    ref = model.generate(prompt, max_new_tokens=16, sampler_config=EntropyBoundSamplerConfig(entropy_bound=2.0),
                         eos_token_id=[stop], pad_token_id=0,
                         **{k: v for k, v in s.items() if k != "entropy_bound"}).sequences
    tokens = SpecialTokens(mask_id=None, eos_id=stop, pad_id=0, bos_id=2)
    out = DiffusionGemmaSampler(DiffusionGemmaSampler.Params(gen_length=16, **s)).generate(
        model, DiffusionGemmaFamily(), tokens, prompt, generator=RowGenerators([torch.Generator().manual_seed(1)]))
    # generate stops after the canvas holding the stop id; DARE keeps the fixed [B, Lp + G] shape, padded
    assert ref.shape[1] == 6 + 8
    assert out.sequences.tolist() == torch.nn.functional.pad(ref, (0, 8), value=0).tolist()
    first = int((out.completions[0] == stop).nonzero()[0])
    assert out.completion_mask[0].tolist() == [j <= first for j in range(16)]
    assert (out.unmask_step[0, first + 1:] == -1).all() and (out.unmask_step[0, : first + 1] >= 0).all()


def test_rows_decode_as_alone_under_left_padding(model):
    sampler = DiffusionGemmaSampler(DiffusionGemmaSampler.Params(gen_length=16, max_denoising_steps=4, entropy_bound=0.5))
    fam = DiffusionGemmaFamily()
    a, b = torch.tensor([[2, 5, 6, 7, 8, 9]]), torch.tensor([[2, 11, 12]])
    alone_a = sampler.generate(model, fam, TOKENS, a, generator=RowGenerators.keyed(0, 7, 0, [3]))
    alone_b = sampler.generate(model, fam, TOKENS, b, generator=RowGenerators.keyed(0, 7, 0, [4]))
    batch = torch.tensor([[2, 5, 6, 7, 8, 9], [0, 0, 0, 2, 11, 12]])
    attn = torch.tensor([[1, 1, 1, 1, 1, 1], [0, 0, 0, 1, 1, 1]])
    both = sampler.generate(model, fam, TOKENS, batch, attn, generator=RowGenerators.keyed(0, 7, 0, [3, 4]))
    assert both.completions[0].tolist() == alone_a.completions[0].tolist()
    assert both.completions[1].tolist() == alone_b.completions[0].tolist()
    assert both.unmask_step[1].tolist() == alone_b.unmask_step[0].tolist()
    # canvas k numbers its steps k * N + s: the second canvas's steps are 4..7
    assert ((both.unmask_step[:, 8:] >= 4) & (both.unmask_step[:, 8:] < 8)).all()
    assert ((both.unmask_step[:, :8] >= 0) & (both.unmask_step[:, :8] < 4)).all()
    assert sampler.steps_per_block() == 4


def test_entropy_bound_acceptance_hand_computed():
    """Entropies ln 2 (uniform over 2), 0 (one-hot), ln 4: sorted 0, ln2, ln4; cumsum - H = 0, 0, ln2."""
    big = 1e4
    logits = torch.tensor([[[0.0, 0.0, -big, -big], [big, 0.0, 0.0, 0.0], [0.0, 0.0, 0.0, 0.0]]])
    assert accept_by_entropy(logits, 0.1).tolist() == [[True, True, False]]
    assert accept_by_entropy(logits, 0.7).tolist() == [[True, True, True]]


def test_params_refuse_a_rising_schedule_and_half_stopping():
    with pytest.raises(ValueError, match="t_max"):
        DiffusionGemmaSampler.Params(t_min=0.8, t_max=0.4)
    with pytest.raises(ValueError, match="together"):
        DiffusionGemmaSampler.Params(stability_threshold=None)
