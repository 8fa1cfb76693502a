"""Build the LightningRL parity fixture from the official code (run by hand, never in CI).

    git clone https://github.com/SJTU-DENG-Lab/LightningRL /tmp/lrl && git -C /tmp/lrl checkout e4d7d293f3d5b1482cc3597a677af1c1c055ff53
    .venv/bin/python tools/parity/build_lightningrl.py /tmp/lrl

Runs, from the pinned checkout, with the values of ``configs/lightningrl.yaml`` (``tpf_norm_mode: z_score``,
``acc_norm: True``, ``tpf_coefficient: 1``, ``filter_all_wrong: true``, ``filter_tpf_threshold: 0.01``,
``adv_norm_mode: batch``, ``eps``/``eps_high`` 0.2, ``kl_estimator: k3``, ``kl_beta: 0.01``, ``nll_loss_weight: 0.1``,
reductions ``sequence``/``token``/``token``), the release's inline code:

* ``reward/rl_reward.py:142-183`` (each group's speed and accuracy parts and their sum) and ``:188-196`` (the
  dynamic-sampling filter, inside a one-pass loop for its ``continue``), on 4 groups of 4 completions with
  hand-made correctness and tokens per forward: group 1 has no correct completion and group 2 a flat tpf (both
  dropped);
* ``train/train_policy_no_value.py:96-123`` (the batch-level z-score of the kept rewards);
* ``models/sdar/modeling_sdar.py:1259-1398`` (NLL on the correct rows, k3 KL with its exponent clamp, the
  clipped surrogate with the log-ratio clamp, per-row mean over the response, mean over rows) on the kept rows as
  one micro-batch, with leaf token log-probabilities (one rollout log-prob 12 nats above the current one).

Records the shaped rewards, the kept rows, the advantages, the loss and its gradient with respect to the token
log-probabilities. Writes ``tests/fixtures/parity/lightningrl/``; ``tests/parity/test_lightningrl.py`` compares
DARE.
"""

from __future__ import annotations

import argparse
import logging
import sys
import textwrap
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from tools.parity.common import official_checkout, official_lines, write_fixture  # noqa: E402

COMMIT = "e4d7d293f3d5b1482cc3597a677af1c1c055ff53"
GROUP, GROUPS, L = 4, 4, 8


def inputs() -> dict[str, torch.Tensor]:
    """Correctness, tokens per forward, token log-probs ``[N, L]`` (current, rollout, reference), response masks."""
    correct = torch.tensor([1, 0, 1, 0, 0, 0, 0, 0, 1, 1, 0, 1, 0, 1, 1, 1], dtype=torch.bool)
    tpf = torch.tensor([2.0, 1.5, 3.0, 1.0, 1.2, 2.5, 1.1, 1.9, 2.0, 2.0, 2.005, 2.0, 1.0, 4.0, 2.5, 1.5])
    n = GROUP * GROUPS
    g = torch.Generator().manual_seed(0)
    logp = -torch.rand(n, L, generator=g) * 3
    old = logp + 0.3 * torch.randn(n, L, generator=g)
    ref = logp + 0.2 * torch.randn(n, L, generator=g)
    lengths = torch.randint(2, L + 1, (n,), generator=g)
    mask = torch.arange(L)[None, :] < lengths[:, None]
    old[0, 0] = logp[0, 0] + 12.0
    return {"correct": correct, "tpf": tpf, "logp": logp, "old": old, "ref": ref, "mask": mask}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("checkout", help=f"SJTU-DENG-Lab/LightningRL checkout at {COMMIT}")
    checkout = official_checkout(ap.parse_args().checkout, COMMIT)
    t = inputs()
    reward_py = checkout / "reward" / "rl_reward.py"
    lines = reward_py.read_text(encoding="utf-8").splitlines()
    filter_code = "for _once in (0,):\n" + textwrap.indent(textwrap.dedent("\n".join(lines[187:196])), "    ") + \
        "\n    kept = True\n"
    rewards, keep = [], []
    for grp in range(GROUPS):
        rows = slice(grp * GROUP, (grp + 1) * GROUP)
        ns = {"local_tpf_list": t["tpf"][rows].tolist(), "correctness": t["correct"][rows].tolist(),
              "tpf_norm_mode": "z_score", "tpf_coefficient": 1, "acc_norm": True}
        official_lines(reward_py, 142, 183, ns)
        rewards += ns["rewards"]
        fns = {"filter_all_wrong": True, "correctness": ns["correctness"], "local_tpf_list": ns["local_tpf_list"],
               "filter_tpf_threshold": 0.01, "kept": False}
        exec(compile(filter_code, f"{reward_py}:188-196", "exec"), fns)  # noqa: S102 (pinned official source)
        keep += [fns["kept"]] * GROUP
    rewards_t = torch.tensor(rewards, dtype=torch.float32)
    keep_t = torch.tensor(keep)
    assert keep == [True] * 4 + [False] * 8 + [True] * 4, keep
    kept = keep_t.nonzero().flatten()
    B = len(kept)
    p_mask = torch.cat([torch.zeros(B, 2, dtype=torch.bool), t["mask"][kept]], 1)  # 2 prompt columns
    ns = {"per_seq_reward": rewards_t[kept], "B": B, "p_mask": p_mask, "L0": 2, "adv_mat": torch.zeros(B, L + 2),
          "Return_mat": torch.zeros(B, L + 2), "logger": logging.getLogger("lightningrl"), "adv_norm_mode": "batch",
          "num_responses_per_task": GROUP}
    official_lines(checkout / "train" / "train_policy_no_value.py", 96, 123, ns)
    adv = ns["adv_mat"][:, 2:].max(dim=1).values + ns["adv_mat"][:, 2:].min(dim=1).values  # the row's one value
    logp = t["logp"].clone().requires_grad_(True)
    m = t["mask"][kept]
    ns = {"torch": torch, "device": "cpu", "logger": logging.getLogger("lightningrl"),
          "rl_correctness": t["correct"][kept], "rl_p_mask": m, "p_mask_real": m, "logits_to_keep_half": m,
          "logp_p": logp[kept][m], "batch_indices_p": torch.arange(B)[:, None].expand(B, L)[m],
          "input_ids": torch.zeros(B, L, dtype=torch.long), "nll_reduction_mode": "token", "rl_nll_weight": 0.1,
          "valid_token_mask": torch.ones(int(m.sum()), dtype=torch.bool), "rl_kl_beta": 0.01,
          "rl_logp_ref_tok": t["ref"][kept], "rl_logp_ref_mask": None, "kl_reduction_mode": "token",
          "rl_kl_estimator": "k3", "adv_p": adv[:, None].expand(B, L)[m], "logp_old_p": t["old"][kept][m],
          "rl_ppo_eps": 0.2, "rl_ppo_eps_high": 0.2, "policy_reduction_mode": "sequence", "seq_lengths": m.sum(1)}
    official_lines(checkout / "models" / "sdar" / "modeling_sdar.py", 1259, 1398, ns)
    ns["loss"].backward()
    write_fixture("lightningrl", {**{k: v.contiguous() for k, v in t.items()}, "expected.rewards": rewards_t,
                                  "expected.keep": keep_t, "expected.advantages": adv.float(),
                                  "expected.loss": ns["loss"].detach(), "expected.grad": logp.grad},
                  {"commit": COMMIT, "group_size": GROUP,
                   "source": "SJTU-DENG-Lab/LightningRL reward/rl_reward.py:142-196, "
                             "train/train_policy_no_value.py:96-123, models/sdar/modeling_sdar.py:1259-1398"})


if __name__ == "__main__":
    main()
