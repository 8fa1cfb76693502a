"""DreamFamily: the logit shift, left padding, presets, tokenizers, LoRA targets, training through the adapter."""

from __future__ import annotations

import json

import pytest
import torch

from dare.components import SpecialTokens
from dare.diffusion import masked_diffusion_loss
from dare.testing import LogitsStub, shared_path
from dare_dream.family import DREAM_CHAT_TEMPLATE, DreamFamily, left_padding_inputs, shift_logits

RELEASE = ("model-cards", "Dream-v0-Instruct-7B")


class _Recorder(torch.nn.Module):
    """Returns raw logits whose value at position j is j, and records the keyword arguments."""

    def __init__(self):
        super().__init__()
        self.kwargs = None

    def forward(self, input_ids, **kwargs):
        self.kwargs = kwargs
        B, L = input_ids.shape
        out = type("Out", (), {})()
        out.logits = torch.arange(L, dtype=torch.float32)[None, :, None].expand(B, L, 3).clone()
        return out


def test_logits_shift_position_i_reads_raw_i_minus_1_and_keeps_position_0():
    model = _Recorder()
    aligned = DreamFamily().logits(model, torch.zeros(2, 5, dtype=torch.long))
    assert aligned[0, :, 0].tolist() == [0.0, 0.0, 1.0, 2.0, 3.0]
    assert aligned.shape == (2, 5, 3) and model.kwargs == {}  # no padding: no mask, default positions
    raw = torch.randn(1, 4, 6)
    assert torch.equal(shift_logits(raw)[0, 1:], raw[0, :-1]) and torch.equal(shift_logits(raw)[0, 0], raw[0, 0])


def test_left_padding_passes_the_official_mask_and_positions():
    model = _Recorder()
    am = torch.tensor([[0, 0, 1, 1, 1], [1, 1, 1, 1, 1]])
    DreamFamily().logits(model, torch.zeros(2, 5, dtype=torch.long), am)
    assert model.kwargs["position_ids"].tolist() == [[1, 1, 0, 1, 2], [0, 1, 2, 3, 4]]
    mask = model.kwargs["attention_mask"]
    assert mask.shape == (2, 1, 5, 5) and mask.dtype == torch.bool
    assert mask[0, 0, 2].tolist() == [False, False, True, True, True] and not mask[0, 0, 0].any() and mask[1].all()
    assert left_padding_inputs(torch.ones(2, 5)) == (None, None) and left_padding_inputs(None) == (None, None)


def test_denoiser_logits_are_the_shifted_logits_of_the_noisy_input(tiny):
    fam = DreamFamily()
    noisy = torch.tensor([[3, 250, 5, 250, 7]])
    with torch.no_grad():
        got = fam.denoiser_logits(tiny, noisy, torch.tensor([[3, 4, 5, 6, 7]]))
        raw = tiny(noisy).logits
    assert torch.equal(got[:, 1:], raw[:, :-1])


def test_sft_loss_through_the_adapter_is_ce_of_raw_logits_one_position_earlier_and_it_trains():
    """The SFT estimator (core masked_diffusion_loss) sees position i scored by raw output i - 1."""
    from dream_helpers import perturbed_tiny_model

    model = perturbed_tiny_model(seed=2).train()
    fam = DreamFamily()
    clean = torch.tensor([[10, 11, 12, 13, 14, 15, 1, 1], [20, 21, 22, 23, 24, 25, 26, 1]])
    masked = torch.zeros_like(clean, dtype=torch.bool)
    masked[0, [3, 5, 6]] = True
    masked[1, [2, 7]] = True
    t = torch.tensor([0.5, 0.25])
    response_length = torch.tensor([5, 6])
    noisy = torch.where(masked, torch.full_like(clean, 250), clean)
    loss, _ = masked_diffusion_loss(fam.denoiser_logits(model, noisy, clean), clean, masked, t, response_length)
    logp = torch.log_softmax(model(noisy).logits.float(), -1)
    ce = lambda b, i: -logp[b, i - 1, clean[b, i]]  # noqa: E731
    want = ((ce(0, 3) + ce(0, 5) + ce(0, 6)) / 0.5 / 5 + (ce(1, 2) + ce(1, 7)) / 0.25 / 6) / 2
    torch.testing.assert_close(loss, want)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2, foreach=False)
    first = float(loss.detach())
    for _ in range(3):
        opt.zero_grad()
        loss, _ = masked_diffusion_loss(fam.denoiser_logits(model, noisy, clean), clean, masked, t, response_length)
        loss.backward()
        opt.step()
    assert float(loss.detach()) < 0.7 * first


def test_presets_tiny_and_7b():
    presets = DreamFamily().presets()
    tiny = presets["tiny"]
    assert (tiny["hidden_size"], tiny["intermediate_size"], tiny["num_hidden_layers"]) == (64, 128, 2)
    assert (tiny["num_attention_heads"], tiny["num_key_value_heads"], tiny["max_position_embeddings"]) == (4, 2, 128)
    assert (tiny["rope_theta"], tiny["rms_norm_eps"], tiny["tie_word_embeddings"]) == (1e6, 1e-6, False)
    raw = json.loads(shared_path(*RELEASE, "config.json").read_text())
    for key, value in presets["7b"].items():
        if key in raw:
            assert raw[key] == value, key
    assert {"hidden_size", "vocab_size", "num_key_value_heads", "mask_token_id"} <= set(presets["7b"])


def test_new_config_takes_vocab_and_ids_from_the_tokenizer():
    tokens = SpecialTokens(mask_id=2, eos_id=1, pad_id=1, eot_id=3, bos_id=0)
    cfg = DreamFamily().new_config("tiny", {"num_hidden_layers": 1}, 261, tokens)
    assert (cfg.vocab_size, cfg.mask_token_id, cfg.eos_token_id, cfg.pad_token_id) == (261, 2, 1, 1)
    assert cfg.bos_token_id == 1 and cfg.num_hidden_layers == 1 and cfg.model_type == "Dream"
    with pytest.raises(KeyError):
        DreamFamily().new_config("huge", {}, 261, tokens)


def test_created_checkpoint_loads_back_bit_exact_with_its_tokens(tiny_dream_dir):
    from dare.modeling import load_model
    from dare.plugins.manager import get_registry

    lm = load_model(tiny_dream_dir)
    assert lm.family.name == "dream" and type(lm.model).__name__ == "DreamModel"
    tok = lm.tokenizer
    assert lm.tokens.mask_id == tok.convert_tokens_to_ids("<|mask|>") == lm.model.config.mask_token_id
    assert lm.tokens.eot_id == tok.convert_tokens_to_ids("<|im_end|>")
    assert lm.tokens.eos_id == lm.tokens.pad_id == tok.convert_tokens_to_ids("<|endoftext|>")
    again = load_model(tiny_dream_dir)
    assert all(torch.equal(a, b) for a, b in zip(lm.model.state_dict().values(), again.model.state_dict().values()))
    assert get_registry().family_for_model_type("Dream").cls is DreamFamily


@pytest.fixture(scope="module")
def release_tokenizer():
    """Dream-v0-Instruct-7B's tokenizer files, loaded by AutoTokenizer without remote code."""
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(shared_path(*RELEASE))


@pytest.mark.parametrize(
    "messages",
    [
        [{"role": "user", "content": "What is 2+2?"}],
        [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}],
        [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}, {"role": "user", "content": "c"}],
    ],
)
def test_chat_template_renders_like_the_release(messages, release_tokenizer):
    release = release_tokenizer
    for gen in (True, False):
        want = release.apply_chat_template(messages, tokenize=False, add_generation_prompt=gen)
        got = release.apply_chat_template(messages, tokenize=False, add_generation_prompt=gen,
                                          chat_template=DREAM_CHAT_TEMPLATE)
        assert got == want


def test_release_tokenizer_loads_without_remote_code_and_gives_the_release_ids(release_tokenizer):
    tok = release_tokenizer
    assert type(tok).__name__ == "DreamTokenizer"
    assert tok("Hello world, 12", add_special_tokens=False)["input_ids"] == [9707, 1879, 11, 220, 16, 17]
    assert DreamFamily().tokens_from_tokenizer(tok) == SpecialTokens(
        mask_id=151666, eos_id=151643, pad_id=151643, eot_id=151645, bos_id=151665
    )


def test_all_linear_lora_targets_every_projection_but_not_the_head(tiny):
    from dare.modeling.lora import resolve_lora_targets
    from dare.runspec import LoraSpec

    targets, exclude = resolve_lora_targets(tiny, DreamFamily(), LoraSpec())
    assert targets == ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"] and exclude == []
    linear = {n.rsplit(".", 1)[-1] for n, m in tiny.named_modules() if isinstance(m, torch.nn.Linear)}
    assert linear - set(targets) == {"lm_head"}


def test_family_facts():
    fam = DreamFamily()
    assert (fam.name, fam.model_types, fam.attention, fam.pad_in_response) == ("dream", ("Dream",), "full", True)
    assert (fam.default_sampler, fam.lm_head_module) == ("dream", "lm_head")
    assert fam.decoder_layer_class == "DreamDecoderLayer"
    assert fam.block_size(None) is None


def test_logits_stub_through_the_family_is_shifted():
    positions = lambda ids: torch.arange(ids.shape[1], dtype=torch.float32)[None, :, None]  # noqa: E731
    stub = LogitsStub(lambda ids: positions(ids).repeat(ids.shape[0], 1, 2))
    out = DreamFamily().logits(stub, torch.zeros(1, 4, dtype=torch.long))
    assert out[0, :, 0].tolist() == [0.0, 0.0, 1.0, 2.0] and stub.calls == 1
