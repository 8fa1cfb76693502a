"""The DiffusionGemma model family adapter (google/diffusiongemma-26B-A4B-it; transformers'
``models/diffusion_gemma``), docs/model-families.md §10.

DiffusionGemma is an encoder-decoder block-diffusion LM on one shared backbone: a causal encoder reads the prompt
(and every committed canvas) into a KV cache; a decoder denoises a canvas of ``canvas_length`` tokens with
bidirectional self-attention and cross-attention to that cache, self-conditioned on the previous step's soft
embeddings (``softmax(logits) @ E``). Corruption is uniform noise: a corrupted position holds a token drawn
uniformly from the vocabulary (D3PM-uniform, Austin et al. arXiv 2107.03006 §3.1), so the family has no mask token
(``SpecialTokens.mask_id`` is None) and ``forward_process = "uniform"``; objectives that need [MASK] refuse it at
validation.

The modeling code is ``transformers``' own (``DiffusionGemmaForBlockDiffusion``); this module holds the checkpoint
facts: presets, special tokens (Gemma 4's ``<bos>``/``<eos>``/``<pad>`` and turn markers), the chat template, and the
encoder/decoder forwards training and decoding call.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, ClassVar

from dare.components import ModelFamily, SpecialTokens
from dare.errors import CheckpointError

if TYPE_CHECKING:  # pragma: no cover - torch is imported by the methods that run the model
    import torch

__all__ = ["DiffusionGemmaFamily", "DIFFUSIONGEMMA_CHAT_TEMPLATE", "PRESETS"]

#: The Gemma 4 turn format of the release (``<bos><|turn>user\n...<turn|>\n<|turn>model\n``), text-only: the
#: released template's system, tool and thinking branches are not reproduced; the supervised region starts after
#: the model turn header (as NeMo AutoModel's ``diffusion_gemma_chat_template.jinja`` arranges with generation tags).
DIFFUSIONGEMMA_CHAT_TEMPLATE = (
    "{{- bos_token -}}"
    "{%- for message in messages -%}"
    "{%- set role = 'model' if message['role'] == 'assistant' else message['role'] -%}"
    "{{- '<|turn>' + role + '\\n' + (message['content'] | trim) + '<turn|>\\n' -}}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{- '<|turn>model\\n' -}}{%- endif -%}"
)

_TINY_VISION = {
    # the vision tower is part of every DiffusionGemma checkpoint; a text-only test model keeps it minimal
    "model_type": "gemma4_vision", "hidden_size": 16, "intermediate_size": 32, "num_hidden_layers": 1,
    "num_attention_heads": 1, "num_key_value_heads": 1, "head_dim": 16, "patch_size": 4,
    "position_embedding_size": 64, "pooling_kernel_size": 1,
}

PRESETS: dict[str, dict[str, Any]] = {
    # docs/model-families.md §10: the CPU test size (~60k parameters with the byte tokenizer), canvas of 8 tokens
    "tiny": {
        "canvas_length": 8,
        "text_config": {
            "hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2, "num_attention_heads": 2,
            "num_key_value_heads": 1, "head_dim": 16, "global_head_dim": 16, "sliding_window": 16,
            "layer_types": ["sliding_attention", "full_attention"], "max_position_embeddings": 512,
            "num_experts": 4, "top_k_experts": 2, "moe_intermediate_size": 32,
        },
        "vision_config": _TINY_VISION,
    },
}


class DiffusionGemmaFamily(ModelFamily):
    """DiffusionGemma: causal prompt encoder + bidirectional canvas decoder, uniform-noise corruption."""

    name = "diffusiongemma"
    model_types = ("diffusion_gemma",)
    attention = "block"
    forward_process = "uniform"
    blocks_from_prompt_end = True
    pad_in_response = False
    lora_target_modules = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
    default_sampler = "diffusiongemma"
    decoder_layer_class = "DiffusionGemmaDecoderTextLayer"
    chat_template = DIFFUSIONGEMMA_CHAT_TEMPLATE
    special_token_strings: ClassVar[dict[str, str]] = {
        "bos": "<bos>",
        "eos": "<eos>",
        "pad": "<pad>",
        "eot": "<turn|>",
    }
    extra_special_tokens = ("<|turn>",)

    def config_class(self):
        from transformers import DiffusionGemmaConfig

        return DiffusionGemmaConfig

    def model_class(self):
        from transformers import DiffusionGemmaForBlockDiffusion

        return DiffusionGemmaForBlockDiffusion

    def presets(self) -> dict[str, dict[str, Any]]:
        import copy

        return copy.deepcopy(PRESETS)

    def new_config(self, preset: str, overrides: dict[str, Any], vocab_size: int, tokens: SpecialTokens):
        """A ``DiffusionGemmaConfig`` from a preset: ``vocab_size`` and the special ids go into ``text_config``;
        ``overrides`` keys of ``text_config`` (e.g. ``hidden_size``) or of the outer config (``canvas_length``)."""
        cfg = self.presets()[preset]
        text = dict(cfg.pop("text_config"))
        text.update(vocab_size=vocab_size, eos_token_id=tokens.eos_id, pad_token_id=tokens.pad_id)
        if tokens.bos_id is not None:
            text["bos_token_id"] = tokens.bos_id
        outer_keys = {"canvas_length", "vision_config", "tie_word_embeddings", "initializer_range"}
        for key, value in overrides.items():
            (cfg if key in outer_keys else text)[key] = value
        return self.config_class()(text_config=text, **cfg)

    def tokens_from_tokenizer(self, tokenizer) -> SpecialTokens:
        """Special ids from a tokenizer; DiffusionGemma has no mask token (``mask_id`` None).

        :raises dare.errors.CheckpointError: the tokenizer has no EOS token.
        """
        vocab = tokenizer.get_vocab()

        def lookup(role: str) -> int | None:
            declared = getattr(tokenizer, f"{role}_token", None) if role in ("bos", "eos", "pad") else None
            for tok in (declared, self.special_token_strings.get(role)):
                if isinstance(tok, str) and tok in vocab:
                    return int(vocab[tok])
            return None

        eos = lookup("eos")
        if eos is None:
            raise CheckpointError("the tokenizer has no EOS token (<eos>); a diffusiongemma model needs one")
        pad = lookup("pad")
        return SpecialTokens(mask_id=None, eos_id=eos, pad_id=eos if pad is None else pad, eot_id=lookup("eot"),
                             bos_id=lookup("bos"))

    def special_tokens(self, config, tokenizer) -> SpecialTokens:
        """Special ids of a checkpoint: ``text_config``'s EOS/pad ids where set, else the tokenizer's."""
        tok = self.tokens_from_tokenizer(tokenizer)
        text = config.get_text_config()
        eos = getattr(text, "eos_token_id", None)
        if isinstance(eos, (list, tuple)):
            eos = eos[0] if eos else None
        pad = getattr(text, "pad_token_id", None)
        return SpecialTokens(mask_id=None, eos_id=tok.eos_id if eos is None else int(eos),
                             pad_id=tok.pad_id if pad is None else int(pad), eot_id=tok.eot_id, bos_id=tok.bos_id)

    def block_size(self, config) -> int:
        """The canvas length (``config.json`` ``canvas_length``): the decoder's block."""
        return int(config.canvas_length)

    # ------------------------------------------------------------------ forwards
    def logits(self, model, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None) -> torch.Tensor:
        """Not defined: DiffusionGemma scores a canvas given an encoded prompt (:meth:`canvas_logits`), not a
        sequence in place.

        :raises NotImplementedError: always, naming the family.
        """
        raise NotImplementedError(
            "model family 'diffusiongemma' scores a canvas given its encoded prompt (DiffusionGemmaFamily."
            "canvas_logits); estimators that score a sequence in place (one forward over [prompt ; x_t]) do not apply")

    def denoiser_logits(self, model, noisy_ids: torch.Tensor, clean_ids: torch.Tensor,
                        attention_mask: torch.Tensor | None = None, block_anchor: int | None = None) -> torch.Tensor:
        """Aligned denoiser logits ``[N, S, V]`` float32 of completions: the likelihood forward of RL estimators.

        The rows are ``[prompt ; completion]``, the prompt left-padded to ``P = block_anchor`` columns (the canvases
        start at the prompt's end in every row, as :mod:`dare_diffusiongemma.decoding` writes them). The encoder reads
        the row's real prompt tokens of ``noisy_ids`` (a corrupted prompt, d1's prompt noise) followed by the clean
        completion ``clean_ids[:, P:]``; the decoder scores the noisy completion ``noisy_ids[:, P:]`` canvas by canvas,
        canvas ``b`` attending the prompt, the clean canvases before it and itself (:meth:`training_masks`, the rule
        decoding follows), with positions counted from the row's first real token, and without self-conditioning
        (the decoder's first denoising step; one decoder forward, :meth:`training_logits`). Position ``i >= P`` holds
        the logits of completion token ``i - P``; prompt positions hold zeros.

        :param attention_mask: ``[N, S]`` (0 = prompt padding, or completion positions after a truncated response),
            or None (all real). :param block_anchor: ``P``, the first completion column (``ScoringBatch.block_anchor``,
            set by the RL rollout for this family: ``blocks_from_prompt_end``).
        :raises ValueError: ``block_anchor`` is None.
        """
        import torch

        if block_anchor is None:
            raise ValueError("model family 'diffusiongemma' scores completions canvas by canvas from the prompt's end: "
                             "pass block_anchor = the padded prompt length (ScoringBatch.block_anchor)")
        N, S = clean_ids.shape
        P = int(block_anchor)
        attn = (torch.ones_like(clean_ids, dtype=torch.bool) if attention_mask is None else attention_mask.bool())
        rows = torch.where(torch.arange(S, device=clean_ids.device)[None, :] < P, noisy_ids, clean_ids)
        pad = (attn[:, :P].long().cumsum(dim=1) == 0).sum(dim=1)  # leading prompt padding per row
        # right-align: row n starts at its first real token (positions 0, 1, ... as decoding counts them)
        index = (torch.arange(S, device=clean_ids.device)[None, :] + pad[:, None]).clamp(max=S - 1)
        inside = torch.arange(S, device=clean_ids.device)[None, :] < (S - pad)[:, None]
        shifted = torch.where(inside, torch.gather(rows, 1, index), torch.zeros_like(rows))
        shifted_attn = inside & torch.gather(attn, 1, index)
        logits, _ = self.training_logits(model, shifted, shifted_attn.long(), P - pad, noisy_ids[:, P:], None)
        return torch.cat([logits.new_zeros((N, P, logits.shape[-1])), logits], dim=1)

    def encode(self, model, input_ids: torch.Tensor, attention_mask: torch.Tensor | None, position_ids: torch.Tensor,
               cache=None):
        """Run the causal encoder over ``input_ids`` ``[B, L]`` (int64) at ``position_ids`` ``[B, L]``, appending
        their keys/values to ``cache`` (a new ``DynamicCache`` when None).

        :param attention_mask: ``[B, Lc + L]`` bool over ``[cache ; new]`` keys (False = padding), or None.
        :returns: ``(last_hidden_state [B, L, H], cache)``.
        """
        from transformers import DynamicCache

        if cache is None:
            cache = DynamicCache(config=model.config.get_text_config(decoder=True))
        out = model.model.encoder(input_ids=input_ids, attention_mask=attention_mask, cache=cache,
                                  position_ids=position_ids, use_cache=True)
        return out.last_hidden_state, out.cache

    def encoder_logits(self, model, hidden: torch.Tensor) -> torch.Tensor:
        """Next-token logits ``[B, L, V]`` float32 of encoder hidden states: the tied LM head with the final logit
        soft-capping of ``DiffusionGemmaForBlockDiffusion.forward`` (position ``i`` scores token ``i + 1``)."""
        import torch

        logits = model.lm_head(hidden).to(torch.float32)
        cap = model.final_logit_softcapping
        return torch.tanh(logits / cap) * cap

    def canvas_logits(self, model, canvas: torch.Tensor, cache, decoder_attention_mask: torch.Tensor | None,
                      position_ids: torch.Tensor, self_conditioning_logits: torch.Tensor | None = None,
                      self_conditioning_mask: torch.Tensor | None = None) -> torch.Tensor:
        """Denoiser logits ``[B, C, V]`` float32 of a canvas ``[B, C]`` given the encoder ``cache`` (unchanged).

        :param decoder_attention_mask: ``[B, Lc + C]`` bool over ``[cache ; canvas]`` keys, or None.
        :param position_ids: ``[B, C]`` absolute positions of the canvas tokens.
        :param self_conditioning_logits: ``[B, C, V]`` previous logits (None: zero self-conditioning).
        :param self_conditioning_mask: ``[B]`` bool, rows whose self-conditioning is used (None: all).
        """
        return model(decoder_input_ids=canvas, cache=cache, decoder_attention_mask=decoder_attention_mask,
                     decoder_position_ids=position_ids, self_conditioning_logits=self_conditioning_logits,
                     self_conditioning_mask=self_conditioning_mask).logits

    # ------------------------------------------------------------------ training forward
    def training_masks(self, model, prefix_lengths: torch.Tensor, response_lengths: torch.Tensor, enc_len: int,
                       canvas_len: int) -> dict[str, torch.Tensor]:
        """The block-causal decoder masks of SFT, ``{"full_attention", "sliding_attention"}`` -> ``[B, 1, R, S + R]``
        bool (True = attend), keys ``[clean encoder sequence (S) ; noisy canvas (R)]``.

        The rule of NeMo AutoModel's DiffusionGemma recipe (``components/models/diffusion_gemma/attention_mask.py``
        ``build_block_diffusion_training_mask`` and ``recipes/dllm/train_ft.py`` ``_build_batched_block_mask``):
        canvas query ``j`` of block ``b = j // C`` attends the clean prompt and the clean response blocks strictly
        before ``b`` (offset-block-causal, never its own clean block) and the canvas positions of block ``b``
        (block-diagonal); a sliding layer also drops encoder keys before ``prefix + b C - window + 1`` (the window
        anchored at the block's cache end, as at inference). Canvas rows past a row's response attend their own
        position only.

        :param prefix_lengths: ``[B]`` int64 prompt lengths. :param response_lengths: ``[B]`` int64 (``<= R``).
        """
        import torch

        C = int(model.config.canvas_length)
        window = int(model.config.get_text_config().sliding_window)
        device = prefix_lengths.device
        B = prefix_lengths.shape[0]
        q = torch.arange(canvas_len, device=device)
        q_block = q // C
        rel = torch.arange(enc_len, device=device)[None, :] - prefix_lengths[:, None]  # [B, S]
        enc_block = torch.where(rel >= 0, rel // C, torch.full_like(rel, -1))
        enc_valid = rel < response_lengths[:, None]
        real = q[None, :] < response_lengths[:, None]  # [B, R]
        left = (q_block[None, :, None] > enc_block[:, None, :]) & enc_valid[:, None, :] & real[:, :, None]
        right = (q_block[:, None] == q_block[None, :])[None] & real[:, :, None] & real[:, None, :]
        right = right | torch.eye(canvas_len, dtype=torch.bool, device=device)[None]
        full = torch.cat([left, right], dim=2)
        cache_end = prefix_lengths[:, None] + (q_block * C)[None, :]  # [B, R]
        within = torch.arange(enc_len, device=device)[None, None, :] >= (cache_end[:, :, None] - window + 1)
        sliding = full & torch.cat([within, torch.ones((B, canvas_len, canvas_len), dtype=torch.bool, device=device)],
                                   dim=2)
        return {"full_attention": full[:, None], "sliding_attention": sliding[:, None]}

    def training_logits(self, model, clean_ids: torch.Tensor, attention_mask: torch.Tensor,
                        prefix_lengths: torch.Tensor, canvas_ids: torch.Tensor,
                        self_conditioning_mask: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor]:
        """The SFT forward of NeMo AutoModel's DiffusionGemma recipe on transformers' modules: ``(canvas logits
        [B, R, V], encoder logits [B, S, V])``, float32, soft-capped.

        The encoder runs causally over the clean right-padded sequence ``clean_ids`` ``[B, S]`` (``attention_mask``
        ``[B, S]``, positions ``0 .. S-1``) into a full-length KV cache; the decoder scores the noisy response
        window ``canvas_ids`` ``[B, R]`` (canvas position ``j`` of row ``b`` is absolute position
        ``prefix_lengths[b] + j``) under :meth:`training_masks`, twice: pass 1 without gradient and without
        self-conditioning, pass 2 self-conditioned on pass 1's logits for the rows of ``self_conditioning_mask``
        ``[B]`` bool (Analog-Bits self-conditioning, arXiv 2208.04202 §3; NeMo's ``DiffusionGemmaForBlockDiffusion.
        forward``). Only pass 2 and the encoder carry gradients. ``self_conditioning_mask`` None: one decoder pass
        without self-conditioning (the likelihood forward of :meth:`denoiser_logits`).
        """
        import torch
        from transformers import DynamicCache

        B, S = clean_ids.shape
        R = canvas_ids.shape[1]
        attn = attention_mask.bool()
        cache = DynamicCache()  # full-length keys on every layer: the masks decide what each query sees
        positions = torch.arange(S, device=clean_ids.device)[None, :].expand(B, -1)
        hidden, cache = self.encode(model, clean_ids, attn, positions, cache=cache)
        encoder_logits = self.encoder_logits(model, hidden)
        response_lengths = (attn.long().sum(dim=1) - prefix_lengths).clamp(min=0)
        low = torch.finfo(model.dtype).min
        masks = {k: torch.where(v, 0.0, low).to(model.dtype)  # additive, as every attention implementation takes it
                 for k, v in self.training_masks(model, prefix_lengths, response_lengths, S, R).items()}
        dec_pos = (prefix_lengths[:, None] + torch.arange(R, device=clean_ids.device)[None, :]).clamp(max=S - 1)
        if self_conditioning_mask is None:
            return self.canvas_logits(model, canvas_ids, cache, masks, dec_pos), encoder_logits
        with torch.no_grad():
            first = self.canvas_logits(model, canvas_ids, cache, masks, dec_pos)
        logits = self.canvas_logits(model, canvas_ids, cache, masks, dec_pos, self_conditioning_logits=first.detach(),
                                    self_conditioning_mask=self_conditioning_mask)
        return logits, encoder_logits
