"""Build the BGPO parity fixture from the seed paper's verl-based release (run by hand, never in CI).

    git clone https://github.com/yjyddq/DARE /tmp/yjyddq-dare && git -C /tmp/yjyddq-dare checkout 83ae8a305a53a914cce563aedceeac88566891cb
    .venv/bin/python tools/parity/build_bgpo.py /tmp/yjyddq-dare                  # -> bgpo/ (LLaDA actor)
    .venv/bin/python tools/parity/build_bgpo.py /tmp/yjyddq-dare --family sdar    # -> bgpo_sdar/ (SDAR actor)

Runs the LLaDA BGPO actor of ``verl/workers/actor/llada_dp_actor_bgpo.py`` (``compute_log_prob`` for the
rollout policy's per-sample ELBO terms, ``update_policy`` for the loss and the gradients, one backward per
Monte-Carlo term) with ``compute_policy_loss_bgpo``, ``_forward_process_bgpo`` and ``agg_loss`` of
``verl/trainer/ppo/{dllm_core_algos,core_algos}.py`` and the GRPO advantage
(``compute_grpo_outcome_advantage``) on :class:`tools.parity.common.TinyDenoiser`, with the defaults of
``verl/trainer/config/ppo_trainer.yaml`` and the LLaDA recipe (``recipe/llada/run_bgpo_llada_8b_instruct.sh``:
GRPO advantage, token-mean, clip 0.2, dual clip 3, no KL, ``mc_num = n_l``; here 4 terms on responses of 8
tokens, so no stratified count is a rounding tie). The corruptions follow the worker's loop
(``verl/workers/dllm_fsdp_workers.py:1178-1223``: per row, ``n_l`` copies, one ``_forward_process_bgpo`` call).
LLaDA rollouts attend to the whole response (``verl/workers/rollout/rollout_utils.py:262-263``), EOS
padding included, and left-pad prompts; the actor packs the attended tokens of each row into a varlen
forward. The released model's RoPE makes that equal to a padded forward with the padding's attention
blocked, which is what this harness runs (the tiny model has absolute positions, so each packed row is
put back at its padded positions). Gradients accumulate over one micro-batch holding the whole batch
(``use_dynamic_bsz: false``). Writes ``tests/fixtures/parity/bgpo/``; ``tests/parity/test_bgpo.py``
compares DARE.

``--family sdar`` runs ``verl/workers/actor/sdar_dp_actor_bgpo.py`` instead (its ``_forward_micro_batch``,
``compute_log_prob``, ``update_policy`` and ``_build_block_diffusion_artifacts``, the release's
``compact_block_diffusion_artifacts``): responses end at the first EOS (verl's ``get_response_mask``), so the
corruption, the ``1 / |y|`` normaliser and the token mean count valid tokens only. The one part replaced is the
block-diffusion model call (``_compute_block_diffusion_token_losses``: ``[noisy; clean]`` with the BD3LM mask and
SDAR's fused cross-entropy): :func:`block_token_losses` scores the compact (left-aligned) noisy rows with full
attention (:func:`compact_forward`), and the test scores DARE's passes with the same forward; SDAR's block attention
is not compared. Writes ``tests/fixtures/parity/bgpo_sdar/``.
"""

from __future__ import annotations

import argparse
import importlib.util
import itertools
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

COMMIT = "83ae8a305a53a914cce563aedceeac88566891cb"
MASK_ID, EOS_ID, PAD_ID = 15, 2, 1
GROUP, MC_NUM, MASK_SEED = 3, 4, 11
SETTINGS = {"clip_ratio": 0.2, "clip_ratio_low": 0.2, "clip_ratio_high": 0.2, "clip_ratio_c": 3.0,
            "loss_agg_mode": "token-mean", "entropy_coeff": 0.0, "use_kl_loss": False, "ppo_epochs": 1,
            "mc_num": MC_NUM, "n_l": MC_NUM, "adv_estimator": "grpo", "norm_adv_by_std_in_grpo": True}
GRAD_PARAMS = ("embed.weight", "head.weight")


class _Batch(dict):
    """The part of verl's TensorDict the actor uses: ``split``, ``to`` and item access."""

    def split(self, size: int):
        n = next(iter(self.values())).shape[0]
        return [_Batch({k: v[i:i + size] for k, v in self.items()}) for i in range(0, n, size)]

    def to(self, device):
        return self


class _DataProto:
    """The part of verl's ``DataProto`` the actor uses."""

    def __init__(self, tensors: dict, meta_info: dict):
        self.batch, self.meta_info, self.non_tensor_batch = _Batch(tensors), meta_info, {}

    def select(self, batch_keys, non_tensor_batch_keys=None):
        return _DataProto({k: self.batch[k] for k in batch_keys}, self.meta_info)


def compact_forward(model, noisy: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
    """``[B, S, V]`` logits of left-aligned rows ``noisy`` ``[B, S]`` whose valid tokens are ``valid`` (full
    attention among them): the stand-in for the block-diffusion forward of the release's SDAR actors, shared with
    ``tests/parity/test_{bgpo,ebpo}.py``."""
    return model(noisy, attention_mask=valid.long()).logits


def block_diffusion_utils(checkout: Path):
    """The release's ``verl/workers/actor/block_diffusion_utils.py`` (imports torch only), loaded from its file."""
    spec = importlib.util.spec_from_file_location("block_diffusion_utils",
                                                  checkout / "verl/workers/actor/block_diffusion_utils.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def block_token_losses(self, artifacts):
    """NLL / p_mask on the compact noisy positions: the SDAR actors' ``_compute_block_diffusion_token_losses``
    with the model call (``[noisy; clean]``, BD3LM mask, fused cross-entropy) replaced by :func:`compact_forward`."""
    logits = compact_forward(self.actor_module, artifacts.noisy_input_ids, artifacts.valid_mask)
    nll = F.cross_entropy(logits.transpose(1, 2).float(), artifacts.clean_input_ids, reduction="none")
    p = torch.where(artifacts.target_mask, artifacts.p_mask, torch.ones_like(artifacts.p_mask))
    return nll / p * artifacts.target_mask.float()


def _official(checkout: Path, family: str) -> tuple[dict, type]:
    """The official functions, and an actor class whose methods are the released ones (``family``: llada or
    sdar)."""
    ns, actor_ns = _official_namespace(checkout)
    names = ("_forward_micro_batch", "compute_log_prob", "update_policy")
    if family == "llada":
        methods = official_functions(checkout / "verl/workers/actor/llada_dp_actor_bgpo.py", (*names, "_get_logits"),
                                     actor_ns)
        return ns, type("LLaDABGPOActor", (), methods)
    actor_ns["compact_block_diffusion_artifacts"] = block_diffusion_utils(checkout).compact_block_diffusion_artifacts
    methods = official_functions(checkout / "verl/workers/actor/sdar_dp_actor_bgpo.py",
                                 (*names, "_build_block_diffusion_artifacts"), actor_ns)
    methods["_compute_block_diffusion_token_losses"] = block_token_losses
    return ns, type("SDARBGPOActor", (), methods)


def _official_namespace(checkout: Path) -> tuple[dict, dict]:
    """``(ns, actor_ns)``: the official loss, corruption and advantage functions, and the globals the LLaDA actors
    of the release need (verl's pieces replaced by the minimal stand-ins of this module)."""
    algos = checkout / "verl" / "trainer" / "ppo"
    ns: dict = {"torch": torch, "F": F, "np": np, "defaultdict": defaultdict}
    official_functions(checkout / "verl/utils/torch_functional.py", ("masked_mean",), ns)
    ns["verl_F"] = types.SimpleNamespace(masked_mean=ns["masked_mean"])
    official_functions(algos / "core_algos.py", ("agg_loss", "compute_grpo_outcome_advantage"), ns)
    official_functions(algos / "dllm_core_algos.py", ("compute_policy_loss_bgpo", "_forward_process_bgpo",
                                                      "kl_penalty"), ns)
    actor_ns = {"torch": torch, "F": F, "itertools": itertools, "DataProto": _DataProto,
                "compute_policy_loss_bgpo": ns["compute_policy_loss_bgpo"], "agg_loss": ns["agg_loss"],
                "kl_penalty": ns["kl_penalty"], "logger": logging.getLogger("bgpo-parity"),
                "append_to_dict": lambda d, new: [d.setdefault(k, []).append(v) for k, v in new.items()],
                "get_torch_device": lambda: types.SimpleNamespace(current_device=lambda: "cpu"),
                "get_packed_logits": _packed_logits}
    return ns, actor_ns


def _packed_logits(actor, model, packed_input, cu_seqlens, max_seqlen, prompt_len, cfg_scale=0.0,
                   mask_token_id=MASK_ID, shift_logits=False):
    """The varlen forward of the packed rows: each row at its padded positions, padding not attended."""
    out = []
    attn = actor.attention_mask
    for b in range(len(cu_seqlens) - 1):
        seg = packed_input[0, cu_seqlens[b]:cu_seqlens[b + 1]]
        row = torch.full((attn.shape[1],), PAD_ID, dtype=seg.dtype)
        row[attn[b] == 1] = seg
        logits = model(row[None], attention_mask=attn[b:b + 1]).logits[0]
        out.append(logits[attn[b] == 1])
    return torch.cat(out)[None]


def _inputs():
    """Two left-padded prompts, three completions each of 8 tokens with EOS padding; rewards with a tie."""
    prompts = torch.tensor([[PAD_ID, PAD_ID, 4, 5, 6], [PAD_ID, 12, 13, 4, 5]])
    E = EOS_ID
    responses = torch.tensor([
        [3, 4, E, E, E, E, E, E], [5, 6, 7, 8, 9, 10, 11, 12], [11, E, E, E, E, E, E, E],
        [12, 13, 14, 3, 4, 5, 6, E], [4, 5, E, 6, E, E, E, E], [7, 8, 9, 10, 11, 12, 13, 14],
    ])
    rewards = torch.tensor([1.0, 0.0, 0.5, 0.0, 1.0, 0.0])
    return prompts.repeat_interleave(GROUP, dim=0), responses, rewards


def _sdar_inputs():
    """:func:`_inputs` with responses of 4 or 8 tokens through the first EOS (block rows count only those): with
    4 terms no stratified count is a rounding tie (the release rounds ``k + jL/n`` half to even, DARE half up,
    docs/algorithms.md §10.5), and the rows' lengths differ, so ``token-mean`` and ``sequence-mean`` differ."""
    prompts, responses, rewards = _inputs()
    E = EOS_ID
    responses = responses.clone()
    responses[0] = torch.tensor([3, 4, 5, E, E, E, E, E])
    responses[2] = torch.tensor([11, 9, 8, E, E, E, E, E])
    responses[4] = torch.tensor([4, 5, 6, E, E, E, E, E])
    return prompts, responses, rewards


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("checkout", help=f"yjyddq/DARE checkout at {COMMIT}")
    ap.add_argument("--family", choices=("llada", "sdar"), default="llada",
                    help="llada: llada_dp_actor_bgpo.py -> bgpo/; sdar: sdar_dp_actor_bgpo.py -> bgpo_sdar/")
    args = ap.parse_args()
    checkout = official_checkout(args.checkout, COMMIT)
    ns, Actor = _official(checkout, args.family)
    models = policy_models(0)
    prompt_ids, responses, rewards = _inputs() if args.family == "llada" else _sdar_inputs()
    N, R = responses.shape
    P = prompt_ids.shape[1]
    input_ids = torch.cat([prompt_ids, responses], 1)
    if args.family == "llada":  # LLaDA rollouts attend to the whole response
        response_mask = torch.ones_like(responses)
    else:  # verl's get_response_mask: through the first EOS
        eos = (responses == EOS_ID).int()
        response_mask = (eos.cumsum(dim=1) - eos).eq(0).long()
    attention_mask = torch.cat([(prompt_ids != PAD_ID).long(), response_mask], 1)

    # the worker's corruption loop (dllm_fsdp_workers.py:1178-1223): n_l copies per row, mc_num // n_l calls
    torch.manual_seed(MASK_SEED)
    seqs, masks, p_masks = [], [], []
    for i in range(N):
        noisy, mask, p_mask = ns["_forward_process_bgpo"](batch=input_ids[i:i + 1].repeat((MC_NUM, 1)),
                                                          attention_mask=attention_mask[i], prompt_len=P,
                                                          MASK_TOKEN_ID=MASK_ID)
        seqs.append(noisy), masks.append(mask), p_masks.append(p_mask)
    perturbed, mask_indices, p_mask = torch.stack(seqs), torch.stack(masks), torch.stack(p_masks)  # [N, M, S]

    # the GRPO outcome advantage (core_algos.py:113-165): the reward on the last response token
    token_rewards = torch.zeros(N, R)
    token_rewards[torch.arange(N), response_mask.sum(1) - 1] = rewards
    index = np.array([i // GROUP for i in range(N)])
    advantages, _ = ns["compute_grpo_outcome_advantage"](token_rewards, response_mask, index)

    def actor(model):
        a = Actor()
        a.actor_module, a.MASK_TOKEN_ID, a.PAD_TOKEN_ID = model, MASK_ID, PAD_ID
        a.mc_num, a.n_l, a.cfg_scale, a.attention_mask = MC_NUM, MC_NUM, 0.0, attention_mask
        a.block_length, a.block_origin = 4, "global"  # read by the SDAR actor's block mask, which is replaced here
        a.config = types.SimpleNamespace(ppo_mini_batch_size=N, ppo_micro_batch_size_per_gpu=N,
                                         use_dynamic_bsz=False, get=lambda k, d=None: SETTINGS.get(k, d),
                                         **{k: v for k, v in SETTINGS.items() if k not in ("mc_num", "n_l")})
        return a

    data = {"responses": responses, "input_ids": input_ids, "attention_mask": attention_mask,
            "position_ids": torch.cumsum(attention_mask, 1) - 1, "perturbed_seq": perturbed,
            "mask_indices": mask_indices, "p_mask": p_mask}
    meta_info = {"micro_batch_size": N, "temperature": 1.0, "use_dynamic_bsz": False}
    _, _, old_terms = actor(models["old"]).compute_log_prob(_DataProto(data, meta_info))   # [N, M, R]

    current = actor(models["current"])
    recorded, grads = [], {}
    real_forward = current._forward_micro_batch

    def forward(*args, **kwargs):
        out = real_forward(*args, **kwargs)
        recorded.append(out[2][:, 0, 0].detach())
        return out

    def optimizer_step():
        grads.update({n: p.grad.clone() for n, p in current.actor_module.named_parameters() if n in GRAD_PARAMS})
        return torch.tensor(0.0)

    current._forward_micro_batch = forward
    current._optimizer_step = optimizer_step
    current.actor_optimizer = types.SimpleNamespace(zero_grad=lambda: current.actor_module.zero_grad())
    update = {**data, "old_log_probs": old_terms, "old_loss_per_sample": old_terms, "advantages": advantages}
    metrics = current.update_policy(_DataProto(update, meta_info))
    loss = torch.tensor([sum(metrics["actor/pg_loss"])], dtype=torch.float64)
    print(f"loss {loss.item():.7f}; advantages {advantages[:, 0].tolist()}")

    tensors = {**{f"{m}.{k}": v for m in ("current", "old") for k, v in models[m].state_dict().items()},
               "input_ids": input_ids, "attention_mask": attention_mask, "rewards": rewards,
               "mask_indices": mask_indices, "p_mask": p_mask[:, :, 0].contiguous(),
               "expected.advantages": advantages[:, 0].contiguous(),
               "expected.old_terms": old_terms[:, :, 0].contiguous(),          # [N, M] ELBO term / R
               "expected.terms": torch.stack(recorded, 1),                      # [N, M]
               "expected.loss": loss,
               **{f"expected.grad.{n}": g for n, g in grads.items()}}
    meta = {"official": f"yjyddq/DARE@{COMMIT}", "file": f"verl/workers/actor/{args.family}_dp_actor_bgpo.py",
            "family": args.family,
            "functions": ["DLLMDataParallelPPOActor._forward_micro_batch", "DLLMDataParallelPPOActor.compute_log_prob",
                          "DLLMDataParallelPPOActor.update_policy", "compute_policy_loss_bgpo",
                          "_forward_process_bgpo", "agg_loss", "compute_grpo_outcome_advantage"],
            "mask_id": MASK_ID, "eos_id": EOS_ID, "pad_id": PAD_ID, "group_size": GROUP, "prompt_length": P,
            "mask_seed": MASK_SEED, "settings": SETTINGS, "grad_params": list(GRAD_PARAMS),
            "torch": torch.__version__}
    print("wrote", write_fixture("bgpo" if args.family == "llada" else "bgpo_sdar", tensors, meta))


if __name__ == "__main__":
    main()
