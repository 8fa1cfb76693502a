"""Build the EBPO parity fixture from the seed paper's verl-based release (run by hand, never in CI).

    git clone https://github.com/yjyddq/DARE /tmp/yjyddq-dare && git -C /tmp/yjyddq-dare checkout 83ae8a305a53a914cce563aedceeac88566891cb
    .venv/bin/python tools/parity/build_ebpo.py /tmp/yjyddq-dare

Runs the SDAR EBPO actor of the release: ``EBPOActorMixin.update_policy`` (``verl/workers/actor/ebpo_actor_mixin.py``:
composite ELBOs without gradient, the scalar proxy, its gradient, then one replayed backward per Monte-Carlo row)
with ``_forward_micro_batch`` of ``verl/workers/actor/sdar_dp_actor_ebpo.py``, ``_build_block_diffusion_artifacts``
of ``sdar_dp_actor_bgpo.py``, ``compact_block_diffusion_artifacts`` and ``scatter_compact_values_to_response`` of
``block_diffusion_utils.py``, and ``_forward_process_ebpo`` (global block origin), ``compute_ebpo_composite_elbo``,
``compute_policy_loss_ebpo`` of ``verl/trainer/ppo/dllm_core_algos.py``; GRPO advantages
(``compute_grpo_outcome_advantage``), clip 0.2, no KL (``recipe/sdar/run_ebpo_sdar_4b_chat.sh``,
``verl/trainer/config/ppo_trainer.yaml``). Corruptions follow the worker's loop
(``verl/workers/dllm_fsdp_workers.py:1178-1223``: per row, ``n_l = mc_num`` copies in one call, so the noise
levels are stratified over the (row, block) cells of one sequence). The response mask is verl's
``get_response_mask`` (through the first EOS, ``verl/utils/torch_functional.py:236-256``).

The one part replaced is the block-diffusion model call (``_compute_block_diffusion_token_losses``: the SDAR
model's fused cross-entropy over ``[noisy; clean]`` with the BD3LM mask): here
:class:`tools.parity.common.TinyDenoiser` scores the compact (left-aligned) noisy rows with full attention over
their valid tokens (:func:`tools.parity.build_bgpo.compact_forward`), and the test scores DARE's passes with the
same forward. The fixture therefore checks the
corruption, the composite ELBO, the log-domain clip, the advantages and the replayed gradients, not SDAR's
block attention. Writes ``tests/fixtures/parity/ebpo/``; ``tests/parity/test_ebpo.py`` compares DARE.
"""

from __future__ import annotations

import argparse
import logging
import sys
import types
from collections import defaultdict
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from tools.parity.common import official_checkout, official_functions, policy_models, write_fixture  # noqa: E402
from tools.parity.build_bgpo import _DataProto, block_diffusion_utils, block_token_losses  # noqa: E402

COMMIT = "83ae8a305a53a914cce563aedceeac88566891cb"
MASK_ID, EOS_ID, PAD_ID = 15, 2, 1
GROUP, MC_NUM, BLOCK, MASK_SEED = 3, 4, 4, 13
SETTINGS = {"clip_ratio": 0.2, "clip_ratio_low": 0.2, "clip_ratio_high": 0.2, "loss_agg_mode": "token-mean",
            "entropy_coeff": 0.0, "use_kl_loss": False, "ppo_epochs": 1, "mc_num": MC_NUM, "n_l": MC_NUM,
            "block_length": BLOCK, "block_origin": "global", "adv_estimator": "grpo", "norm_adv_by_std_in_grpo": True}
GRAD_PARAMS = ("embed.weight", "head.weight")


def _official(checkout: Path):
    algos = checkout / "verl" / "trainer" / "ppo"
    ns: dict = {"torch": torch, "F": F, "np": np, "defaultdict": defaultdict}
    official_functions(algos / "core_algos.py", ("compute_grpo_outcome_advantage",), ns)
    official_functions(algos / "dllm_core_algos.py", ("_forward_process_ebpo", "compute_ebpo_composite_elbo",
                                                      "compute_policy_loss_ebpo", "compute_ebpo_kl"), ns)
    bdu = block_diffusion_utils(checkout)
    mixin_ns = {"torch": torch, "DataProto": _DataProto, "logger": logging.getLogger("ebpo-parity"),
                "compute_ebpo_composite_elbo": ns["compute_ebpo_composite_elbo"],
                "compute_ebpo_kl": ns["compute_ebpo_kl"], "compute_policy_loss_ebpo": ns["compute_policy_loss_ebpo"],
                "append_to_dict": lambda d, new: [d.setdefault(k, []).append(v) for k, v in new.items()],
                "get_torch_device": lambda: types.SimpleNamespace(current_device=lambda: "cpu")}
    mixin = official_functions(checkout / "verl/workers/actor/ebpo_actor_mixin.py",
                               ("_masked_sequence_mean", "_composite_elbo", "update_policy"), mixin_ns)
    sdar_ns = {"torch": torch, "scatter_compact_values_to_response": bdu.scatter_compact_values_to_response,
               "compact_block_diffusion_artifacts": bdu.compact_block_diffusion_artifacts}
    sdar = official_functions(checkout / "verl/workers/actor/sdar_dp_actor_ebpo.py", ("_forward_micro_batch",), sdar_ns)
    sdar.update(official_functions(checkout / "verl/workers/actor/sdar_dp_actor_bgpo.py",
                                   ("_build_block_diffusion_artifacts",), sdar_ns))

    methods = {"_composite_elbo": staticmethod(mixin["_composite_elbo"]), "update_policy": mixin["update_policy"],
               "_forward_micro_batch": sdar["_forward_micro_batch"],
               "_build_block_diffusion_artifacts": sdar["_build_block_diffusion_artifacts"],
               "_compute_block_diffusion_token_losses": block_token_losses}
    return ns, type("SDAREBPOActor", (), methods)


def _inputs():
    """Two left-padded prompts (3 and 4 real tokens), three completions each of 8 tokens; the response ends at
    the first EOS (verl's response mask), so the responses have 1 to 3 blocks of 4 on the global grid."""
    prompts = torch.tensor([[PAD_ID, PAD_ID, 4, 5, 6], [PAD_ID, 12, 13, 4, 5]])
    E = EOS_ID
    responses = torch.tensor([
        [3, 4, E, E, E, E, E, E], [5, 6, 7, 8, 9, 10, 11, 12], [11, 9, 8, 7, E, E, E, E],
        [12, 13, 14, 3, 4, 5, 6, E], [4, 5, E, E, E, E, E, E], [7, 8, 9, 10, 11, 12, 13, 14],
    ])
    rewards = torch.tensor([1.0, 0.0, 0.5, 0.0, 1.0, 0.0])
    return prompts.repeat_interleave(GROUP, dim=0), responses, rewards


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("checkout", help=f"yjyddq/DARE checkout at {COMMIT}")
    checkout = official_checkout(ap.parse_args().checkout, COMMIT)
    ns, Actor = _official(checkout)
    models = policy_models(0)
    prompt_ids, responses, rewards = _inputs()
    N, R = responses.shape
    P = prompt_ids.shape[1]
    eos = (responses == EOS_ID).int()
    response_mask = (eos.cumsum(dim=1) - eos).eq(0).long()         # get_response_mask
    input_ids = torch.cat([prompt_ids, responses], 1)
    attention_mask = torch.cat([(prompt_ids != PAD_ID).long(), response_mask], 1)
    position_ids = (torch.cumsum(attention_mask, 1) - 1).clamp(min=0)

    torch.manual_seed(MASK_SEED)
    offsets, seqs, masks, p_masks = [], [], [], []
    real_rand = torch.rand
    for i in range(N):
        def rand(*args, **kwargs):
            out = real_rand(*args, **kwargs)
            offsets.append(out.clone())
            return out

        torch.rand = rand
        try:
            noisy, mask, p_mask = ns["_forward_process_ebpo"](
                batch=input_ids[i:i + 1].repeat((MC_NUM, 1)), attention_mask=attention_mask[i], prompt_len=P,
                block_length=BLOCK, MASK_TOKEN_ID=MASK_ID, block_origin="global")
        finally:
            torch.rand = real_rand
        seqs.append(noisy), masks.append(mask), p_masks.append(p_mask)
    perturbed, mask_indices, p_mask = torch.stack(seqs), torch.stack(masks), torch.stack(p_masks)  # [N, M, S]

    token_rewards = torch.zeros(N, R)
    token_rewards[torch.arange(N), response_mask.sum(1) - 1] = rewards
    index = np.array([i // GROUP for i in range(N)])
    advantages, _ = ns["compute_grpo_outcome_advantage"](token_rewards, response_mask, index)

    def actor(model):
        a = Actor()
        a.actor_module, a.MASK_TOKEN_ID, a.PAD_TOKEN_ID, a.mc_num = model, MASK_ID, PAD_ID, MC_NUM
        a.block_length, a.block_origin = BLOCK, "global"
        a.config = types.SimpleNamespace(ppo_mini_batch_size=N, ppo_micro_batch_size_per_gpu=N,
                                         use_dynamic_bsz=False, **{k: v for k, v in SETTINGS.items()
                                                                   if k not in ("mc_num", "n_l")})
        return a

    data = {"responses": responses, "input_ids": input_ids, "attention_mask": attention_mask,
            "position_ids": position_ids, "perturbed_seq": perturbed, "mask_indices": mask_indices, "p_mask": p_mask}
    with torch.no_grad():
        _, _, old_tokens = actor(models["old"])._forward_micro_batch(data, 1.0, 1, MC_NUM)   # [N, M, R]
    old_composite = old_tokens.masked_fill(~response_mask.bool()[:, None], 0).sum(-1).mean(1)

    current = actor(models["current"])
    grads, elbos = {}, []
    real_composite = Actor._composite_elbo

    def composite(token_elbos, mask):
        out = real_composite(token_elbos, mask)
        elbos.append(out.detach().clone())
        return out

    def optimizer_step():
        grads.update({n: p.grad.clone() for n, p in current.actor_module.named_parameters() if n in GRAD_PARAMS})
        return torch.tensor(0.0)

    current._composite_elbo = composite
    current._optimizer_step = optimizer_step
    current.actor_optimizer = types.SimpleNamespace(zero_grad=lambda: current.actor_module.zero_grad())
    update = {**data, "old_loss_per_sample": old_tokens, "advantages": advantages}
    metrics = current.update_policy(_DataProto(update, {"temperature": 1.0}))
    loss = torch.tensor([metrics["actor/pg_loss"][0]], dtype=torch.float64)
    print(f"loss {loss.item():.7f}; advantages {advantages[:, 0].tolist()}; composites {elbos[1].tolist()}")

    tensors = {**{f"{m}.{k}": v for m in ("current", "old") for k, v in models[m].state_dict().items()},
               "input_ids": input_ids, "attention_mask": attention_mask, "rewards": rewards,
               "mask_indices": mask_indices, "p_mask": p_mask, "offsets": torch.stack(offsets),
               "expected.advantages": advantages[:, 0].contiguous(), "expected.old": old_composite,
               "expected.old_tokens": old_tokens, "expected.current": elbos[1], "expected.loss": loss,
               **{f"expected.grad.{n}": g for n, g in grads.items()}}
    meta = {"official": f"yjyddq/DARE@{COMMIT}", "file": "verl/workers/actor/ebpo_actor_mixin.py",
            "functions": ["EBPOActorMixin.update_policy", "EBPOActorMixin._composite_elbo",
                          "DLLMDataParallelPPOActor._forward_micro_batch (sdar_dp_actor_ebpo.py)",
                          "compact_block_diffusion_artifacts", "scatter_compact_values_to_response",
                          "_forward_process_ebpo", "compute_ebpo_composite_elbo", "compute_policy_loss_ebpo",
                          "compute_grpo_outcome_advantage"],
            "mask_id": MASK_ID, "eos_id": EOS_ID, "pad_id": PAD_ID, "group_size": GROUP, "prompt_length": P,
            "mask_seed": MASK_SEED, "settings": SETTINGS, "grad_params": list(GRAD_PARAMS),
            "torch": torch.__version__}
    print("wrote", write_fixture("ebpo", tensors, meta))


if __name__ == "__main__":
    main()
