"""Build the fixture of the seed paper's d1 (yjyddq/DARE's re-implementation) (run by hand, never in CI).

    git clone https://github.com/yjyddq/DARE /tmp/yjyddq-dare && git -C /tmp/yjyddq-dare checkout 83ae8a305a53a914cce563aedceeac88566891cb
    .venv/bin/python tools/parity/build_d1_seed.py /tmp/yjyddq-dare

d1 is released by its authors (dllm-reasoning/d1, ``tests/parity/test_d1.py``) and re-implemented in the seed paper's
verl fork. This runs the fork's LLaDA d1 actor (``verl/workers/actor/llada_dp_actor_d1.py``: ``compute_log_prob``
for the rollout policy's per-token log-probabilities, ``update_policy`` for the loss and the gradients) with
``_forward_process_d1`` and ``compute_policy_loss`` of ``verl/trainer/ppo/dllm_core_algos.py``, ``agg_loss`` and the
GRPO advantage of ``verl/trainer/ppo/core_algos.py``, and the settings of ``recipe/llada/run_d1_llada_8b_instruct.sh``
with ``verl/trainer/config/ppo_trainer.yaml`` (GRPO advantage, clip 0.2, dual clip 3, token-mean, no KL, one copy),
on :class:`tools.parity.common.TinyDenoiser` with the inputs of ``tools/parity/build_bgpo.py`` (left-padded prompts,
LLaDA's all-ones response attention, the varlen forward run at the padded positions). The corruption follows the
worker's loop (``verl/workers/dllm_fsdp_workers.py:1178-1223``, one ``_forward_process_d1`` call per row); its
``torch.rand`` prompt draws are recorded. Writes ``tests/fixtures/parity/d1_seed/``; ``tests/parity/test_d1_seed.py``
shows that these are DARE's defaults (``preset: dare``), not the authors' release (``preset: official``).
"""

from __future__ import annotations

import argparse
import sys
import types
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from tools.parity.build_bgpo import (  # noqa: E402
    COMMIT, EOS_ID, GROUP, MASK_ID, PAD_ID, _DataProto, _inputs, _official_namespace,
)
from tools.parity.common import official_checkout, official_functions, policy_models, write_fixture  # noqa: E402

MASK_SEED = 17
SETTINGS = {"clip_ratio": 0.2, "clip_ratio_low": 0.2, "clip_ratio_high": 0.2, "clip_ratio_c": 3.0,
            "loss_agg_mode": "token-mean", "entropy_coeff": 0.0, "use_kl_loss": False, "ppo_epochs": 1,
            "mc_num": 1, "n_l": 1, "p_mask_prompt": 0.15, "adv_estimator": "grpo", "norm_adv_by_std_in_grpo": True}
GRAD_PARAMS = ("embed.weight", "head.weight")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("checkout", help=f"yjyddq/DARE checkout at {COMMIT}")
    checkout = official_checkout(ap.parse_args().checkout, COMMIT)
    ns, actor_ns = _official_namespace(checkout)
    official_functions(checkout / "verl/trainer/ppo/dllm_core_algos.py", ("_forward_process_d1", "compute_policy_loss"), ns)
    actor_ns["compute_policy_loss"] = ns["compute_policy_loss"]
    methods = official_functions(checkout / "verl/workers/actor/llada_dp_actor_d1.py",
                                 ("_forward_micro_batch", "_get_logits", "compute_log_prob", "update_policy"), actor_ns)
    Actor = type("LLaDAD1Actor", (), methods)
    models = policy_models(0)
    prompt_ids, responses, rewards = _inputs()
    N, R = responses.shape
    P = prompt_ids.shape[1]
    input_ids = torch.cat([prompt_ids, responses], 1)
    attention_mask = torch.cat([(prompt_ids != PAD_ID).long(), torch.ones_like(responses)], 1)

    torch.manual_seed(MASK_SEED)
    draws, seqs, masks, p_masks = [], [], [], []
    real_rand = torch.rand

    def rand(*args, **kwargs):
        out = real_rand(*args, **kwargs)
        draws.append(out.clone())
        return out

    torch.rand = rand
    try:
        for i in range(N):
            noisy, mask, p_mask = ns["_forward_process_d1"](batch=input_ids[i:i + 1], attention_mask=attention_mask[i],
                                                            prompt_len=P, MASK_TOKEN_ID=MASK_ID)
            seqs.append(noisy), masks.append(mask), p_masks.append(p_mask)
    finally:
        torch.rand = real_rand
    perturbed, mask_indices, p_mask = torch.stack(seqs), torch.stack(masks), torch.stack(p_masks)  # [N, 1, S]

    token_rewards = torch.zeros(N, R)
    token_rewards[:, -1] = rewards
    advantages, _ = ns["compute_grpo_outcome_advantage"](token_rewards, attention_mask[:, P:],
                                                         np.array([i // GROUP for i in range(N)]))

    def actor(model):
        a = Actor()
        a.actor_module, a.MASK_TOKEN_ID, a.PAD_TOKEN_ID = model, MASK_ID, PAD_ID
        a.mc_num, a.n_l, a.cfg_scale, a.attention_mask = 1, 1, 0.0, attention_mask
        a.config = types.SimpleNamespace(ppo_mini_batch_size=N, ppo_micro_batch_size_per_gpu=N,
                                         use_dynamic_bsz=False, get=lambda k, d=None: SETTINGS.get(k, d),
                                         **{k: v for k, v in SETTINGS.items() if k not in ("mc_num", "n_l")})
        return a

    data = {"responses": responses, "input_ids": input_ids, "attention_mask": attention_mask,
            "position_ids": torch.cumsum(attention_mask, 1) - 1, "perturbed_seq": perturbed,
            "mask_indices": mask_indices, "p_mask": p_mask}
    meta_info = {"micro_batch_size": N, "temperature": 1.0, "use_dynamic_bsz": False}
    _, old_logp, old_terms = actor(models["old"]).compute_log_prob(_DataProto(data, meta_info))   # [N, 1, R]

    current = actor(models["current"])
    grads, recorded = {}, []
    real_forward = current._forward_micro_batch

    def forward(*args, **kwargs):
        out = real_forward(*args, **kwargs)
        recorded.append(out[1][:, 0].detach())
        return out

    def optimizer_step():
        grads.update({n: p.grad.clone() for n, p in current.actor_module.named_parameters() if n in GRAD_PARAMS})
        return torch.tensor(0.0)

    current._forward_micro_batch = forward
    current._optimizer_step = optimizer_step
    current.actor_optimizer = types.SimpleNamespace(zero_grad=lambda: current.actor_module.zero_grad())
    update = {**data, "old_log_probs": old_logp, "old_loss_per_sample": old_terms, "advantages": advantages}
    metrics = current.update_policy(_DataProto(update, meta_info))
    loss = torch.tensor([sum(metrics["actor/pg_loss"])], dtype=torch.float64)
    print(f"loss {loss.item():.7f}; advantages {advantages[:, 0].tolist()}")

    tensors = {**{f"{m}.{k}": v for m in ("current", "old") for k, v in models[m].state_dict().items()},
               "input_ids": input_ids, "attention_mask": attention_mask, "rewards": rewards,
               "mask_indices": mask_indices[:, 0].contiguous(), "prompt_draws": torch.cat(draws),   # [N, P]
               "expected.advantages": advantages[:, 0].contiguous(), "expected.old_logp": old_logp[:, 0].contiguous(),
               "expected.logp": recorded[0], "expected.loss": loss,
               **{f"expected.grad.{n}": g for n, g in grads.items()}}
    meta = {"official": f"yjyddq/DARE@{COMMIT}", "file": "verl/workers/actor/llada_dp_actor_d1.py",
            "functions": ["DLLMDataParallelPPOActor._forward_micro_batch", "DLLMDataParallelPPOActor.compute_log_prob",
                          "DLLMDataParallelPPOActor.update_policy", "compute_policy_loss", "_forward_process_d1",
                          "agg_loss", "compute_grpo_outcome_advantage"],
            "mask_id": MASK_ID, "eos_id": EOS_ID, "pad_id": PAD_ID, "group_size": GROUP, "prompt_length": P,
            "mask_seed": MASK_SEED, "settings": SETTINGS, "grad_params": list(GRAD_PARAMS),
            "torch": torch.__version__}
    print("wrote", write_fixture("d1_seed", tensors, meta))


if __name__ == "__main__":
    main()
