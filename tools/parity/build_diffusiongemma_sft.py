"""Build the DiffusionGemma SFT parity fixture from NeMo AutoModel's recipe (run by hand, never in CI).

    git clone https://github.com/NVIDIA-NeMo/Automodel /tmp/nemo && git -C /tmp/nemo checkout 36044ad3d139363fb6c73c24af2e7c6b65ec52f6
    .venv/bin/python tools/parity/build_diffusiongemma_sft.py /tmp/nemo

Runs, on a tiny ``transformers`` ``DiffusionGemmaForBlockDiffusion`` (the ``tiny`` preset of
``dare-plugin-diffusiongemma``, vocabulary 300, canvas 8), one step of ``DiffusionGemmaSFTRecipe``
(``nemo_automodel/recipes/dllm/train_ft.py``) with its official pieces: the per-sample corruption
``corrupt_uniform_random`` (``components/datasets/dllm/corruption.py``, via ``BlockDiffusionStrategy.apply_corruption``:
one ``t`` per example), the response window, one-canvas block selection and batched block-causal masks
(``_build_response_window``, ``_build_batched_block_mask``, ``build_block_diffusion_training_mask`` of
``components/models/diffusion_gemma/attention_mask.py``), the per-example self-conditioning coins
(``_decide_self_conditioning``) and the losses ``BlockDiffusionCrossEntropyLoss`` + ``encoder_loss_weight *
encoder_ar_loss`` (``components/loss/dllm_loss.py``) with the recipe's global denominators
(``_compute_loss_denominators``). The forward is the recipe model's two-pass forward
(``components/models/diffusion_gemma/model.py`` ``DiffusionGemmaForBlockDiffusion.forward``: clean causal encoder
pass, pass 1 without gradient and self-conditioning, pass 2 self-conditioned per the coins) on transformers'
encoder/decoder modules, which NeMo's model loads the checkpoint of (its ``state_dict_adapter``).

Draws: each example's generator is DARE's ``RowGenerators.keyed(seed, "sft", step, index)`` (NeMo seeds one
generator per example too: ``corruption_sample_seed``); after the corruption, the example's uniforms for the block
selection and the self-conditioning coin come from the same generator, and are fed to NeMo's ``torch.rand`` calls of
``_build_response_window`` and ``_decide_self_conditioning`` in place of their step-seeded streams. Writes
``tests/fixtures/parity/diffusiongemma_sft/``: the weights, the batch, NeMo's window tensors, the loss terms and the
gradients of three parameters; ``tests/parity/test_diffusiongemma_sft.py``
compares DARE.
"""

from __future__ import annotations

import argparse
import importlib.util
import math
import sys
from pathlib import Path
from types import SimpleNamespace

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from tools.parity.common import official_checkout, official_functions, write_fixture  # noqa: E402

COMMIT = "36044ad3d139363fb6c73c24af2e7c6b65ec52f6"
SEED, STEP, INDICES = 42, 3, [5, 9, 2]
SETTINGS = {"eps": 1e-3, "self_conditioning_p": 0.5, "encoder_loss_weight": 1.0}
#: a sliding window shorter than the sequences, so the sliding layer's block-anchored window cuts encoder keys
OVERRIDES = {"sliding_window": 4}
GRAD_PARAMS = ("model.encoder.language_model.embed_tokens.weight",
               "model.encoder.language_model.layers.0.self_attn.q_proj.weight",
               "model.decoder.self_conditioning.pre_norm.weight")


def _module(path: Path, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


class _Replay:
    """A stand-in for the recipe's step-seeded ``torch.Generator``s: ``torch.rand(B, generator=...)`` returns the
    uniforms DARE's rows draw."""

    def __init__(self, values: torch.Tensor):
        self.values = values

    def manual_seed(self, seed):
        return self


def _torch_with(replays: list[torch.Tensor]):
    """``torch`` for the recipe's methods, its ``Generator`` and ``rand`` replaying ``replays`` in call order."""
    queue = list(replays)
    ns = SimpleNamespace(**{k: getattr(torch, k) for k in dir(torch) if not k.startswith("__")})
    ns.Generator = lambda *a, **k: _Replay(queue.pop(0))
    ns.rand = lambda *a, generator=None, **k: generator.values.clone() if isinstance(generator, _Replay) else torch.rand(
        *a, generator=generator, **k)
    return ns


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("checkout", help="a git checkout of NVIDIA-NeMo/Automodel at the pinned commit")
    root = official_checkout(ap.parse_args().checkout, COMMIT)
    corruption = _module(root / "nemo_automodel/components/datasets/dllm/corruption.py", "nemo_corruption")
    loss_mod = _module(root / "nemo_automodel/components/loss/dllm_loss.py", "nemo_dllm_loss")
    mask_mod = _module(root / "nemo_automodel/components/models/diffusion_gemma/attention_mask.py", "nemo_bd_mask")
    split = official_functions(root / "nemo_automodel/recipes/dllm/strategy.py", ("split_prompt_response",),
                               {"torch": torch})["split_prompt_response"]

    from transformers import DiffusionGemmaForBlockDiffusion, DynamicCache

    from dare.components import SpecialTokens
    from dare.randomness import RowGenerators
    from dare_diffusiongemma.family import DiffusionGemmaFamily

    fam = DiffusionGemmaFamily()
    config = fam.new_config("tiny", OVERRIDES, 300, SpecialTokens(mask_id=None, eos_id=1, pad_id=0, bos_id=2))
    torch.manual_seed(0)
    model = DiffusionGemmaForBlockDiffusion(config).train()
    V, C = config.text_config.vocab_size, config.canvas_length

    # right-padded [prompt ; response ; pad] rows; responses of 10, 13 and 4 tokens (2, 2 and 1 canvas blocks)
    g = torch.Generator().manual_seed(7)
    rows = [(4, 10), (3, 13), (6, 4)]
    S = max(p + r for p, r in rows) + 1
    ids = torch.zeros((3, S), dtype=torch.long)
    attn = torch.zeros((3, S), dtype=torch.bool)
    loss_mask = torch.zeros((3, S), dtype=torch.bool)
    for b, (p, r) in enumerate(rows):
        ids[b, : p + r] = torch.randint(3, V, (p + r,), generator=g)
        ids[b, 0], ids[b, p + r - 1] = 2, 1
        attn[b, : p + r] = True
        loss_mask[b, p: p + r] = True

    gens = RowGenerators.keyed(SEED, "sft", STEP, INDICES)
    noisy, noise, pmask, sel_u, coin_u = [], [], [], [], []
    for b, gen in enumerate(gens.generators):
        n, m, pm = corruption.corrupt_uniform_random(ids[b: b + 1], loss_mask[b: b + 1], V, block_size=None,
                                                     eps=SETTINGS["eps"], generator=gen)
        noisy.append(n), noise.append(m), pmask.append(pm)
        sel_u.append(torch.rand((1,), generator=gen)), coin_u.append(torch.rand((1,), generator=gen))
    noisy, noise, pmask = torch.cat(noisy), torch.cat(noise), torch.cat(pmask)
    sel_u, coin_u = torch.cat(sel_u), torch.cat(coin_u)

    ns = {"torch": _torch_with([sel_u, coin_u]), "BlockDiffusionStrategy": SimpleNamespace(split_prompt_response=split),
          "build_block_diffusion_training_mask": mask_mod.build_block_diffusion_training_mask}
    fns = official_functions(root / "nemo_automodel/recipes/dllm/train_ft.py",
                             ("_build_batched_block_mask", "_build_response_window", "_decide_self_conditioning"), ns)
    recipe = SimpleNamespace(_self_cond_base_seed=SEED, step_scheduler=SimpleNamespace(step=STEP), dllm_block_size=C,
                             canvas_length=C, block_diffusion_sliding_window=config.text_config.sliding_window,
                             distributed_config=SimpleNamespace(autocast_dtype=None),
                             self_conditioning_p=SETTINGS["self_conditioning_p"],
                             _build_batched_block_mask=fns["_build_batched_block_mask"])
    window = fns["_build_response_window"](recipe, ids, noisy, noise, loss_mask, pmask, attention_mask=attn,
                                           microbatch_idx=0)
    coins = fns["_decide_self_conditioning"](recipe, 3, 0)

    # the recipe model's two-pass training forward (model.py), on transformers' modules
    cache = DynamicCache()
    enc = model.model.encoder(input_ids=ids, attention_mask=attn, cache=cache,
                              position_ids=window["encoder_position_ids"], use_cache=True)
    encoder_logits = fam.encoder_logits(model, enc.last_hidden_state)
    masks = window["decoder_attention_mask"]
    pos = window["decoder_position_ids"]
    with torch.no_grad():
        first = model(decoder_input_ids=window["canvas_ids"], cache=enc.cache, decoder_attention_mask=masks,
                      decoder_position_ids=pos).logits.detach()
    logits = model(decoder_input_ids=window["canvas_ids"], cache=enc.cache, decoder_attention_mask=masks,
                   decoder_position_ids=pos, self_conditioning_logits=first, self_conditioning_mask=coins).logits

    num_diffusion = int(window["loss_mask"].sum())
    num_ar = int((attn[:, :-1] & attn[:, 1:]).sum())
    diffusion = loss_mod.BlockDiffusionCrossEntropyLoss()(logits=logits, target_ids=window["target_ids"],
                                                          noise_mask=window["noise_mask"], p_mask=window["p_mask"],
                                                          loss_mask=window["loss_mask"],
                                                          num_diffusion_tokens=num_diffusion).total_loss
    ar = loss_mod.encoder_ar_loss(encoder_logits, ids, valid_mask=attn, num_tokens=num_ar)
    loss = diffusion + SETTINGS["encoder_loss_weight"] * ar
    loss.backward()
    params = dict(model.named_parameters())
    stored = model.state_dict()  # each tied tensor once (named_parameters/named_buffers drop the aliases)
    tensors = {f"weight.{k}": v.detach().clone() for k, v in [*model.named_parameters(), *model.named_buffers()]
               if k in stored}
    tensors.update(ids=ids, attention_mask=attn, loss_mask=loss_mask, noisy=noisy, noise_mask=noise,
                   canvas_ids=window["canvas_ids"], canvas_loss_mask=window["loss_mask"], coins=coins,
                   mask_full=masks["full_attention"], mask_sliding=masks["sliding_attention"],
                   loss=loss.detach(), diffusion_loss=diffusion.detach(), ar_loss=ar.detach())
    tensors.update({f"grad.{k}": params[k].grad.detach().clone() for k in GRAD_PARAMS})
    meta = {"commit": COMMIT, "repo": "NVIDIA-NeMo/Automodel", "seed": SEED, "step": STEP, "indices": INDICES,
            "settings": SETTINGS, "overrides": OVERRIDES, "grad_params": list(GRAD_PARAMS), "loss": float(loss),
            "config": config.to_dict()}
    assert math.isfinite(float(loss))
    print(write_fixture("diffusiongemma_sft", tensors, meta), float(loss), float(diffusion), float(ar), coins.tolist())


if __name__ == "__main__":
    main()
