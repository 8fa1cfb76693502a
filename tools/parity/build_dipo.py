"""Build the DiPO parity fixture from the official DiRL code (run by hand, never in CI).

    git clone https://github.com/OpenMOSS/DiRL /tmp/dirl && git -C /tmp/dirl checkout ec4bfb30ebeab62eb31b820937cedd2cdde3ae0c
    .venv/bin/python tools/parity/build_dipo.py /tmp/dirl

Runs, from the pinned checkout: ``train/rollout_dapo_server.py::z_score_normalize`` on each group's rewards (the
advantages), and the inline RL loss of ``models/sdar/modeling_sdar.py`` (lines 1244-1282 of
``SDARForCausalLM.forward`` with ``compute_rl_loss=True``: log-ratio clamped to [-10, 10], clip
``[1 - eps, 1 + eps + 0.08]``, token mean of the surrogate, k3 KL with its exponent clamped, ``loss_mean=True``)
once per training row with ``configs/rl.yaml``'s ``eps: 0.2``, ``beta: 0.1``, ``use_kl_estimator_k3: True``. The
rows are the block rounds of ``N = 4`` completions with ``R = 3`` rounds each (a completion with fewer rounds has
only padding rows, which add nothing); the release divides the accumulated row losses by the number of rows
``N R`` (``train/grpo.py:163-168``, ``gradient_accumulation_steps``). The token log-probabilities are leaf
tensors (the model forward is not the object of this fixture: test_tracerl_sdar.py checks the block-round
forward); one token's rollout log-prob is 12 nats above its current one (the log-ratio clamp) and one row has a
negative advantage with a ratio above 3 (DARE's dual clip would change it). Records the advantages, the loss and
its gradient with respect to the token log-probabilities. Writes ``tests/fixtures/parity/dipo/``;
``tests/parity/test_dipo.py`` compares DARE.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from tools.parity.common import official_checkout, official_functions, official_lines, write_fixture  # noqa: E402

COMMIT = "ec4bfb30ebeab62eb31b820937cedd2cdde3ae0c"
N, R, G, GROUP = 4, 3, 6, 2
EPS, BETA = 0.2, 0.1


def inputs() -> dict[str, torch.Tensor]:
    """Token log-probs ``[N, R, G]`` (current, rollout, reference), the round masks and the rewards."""
    g = torch.Generator().manual_seed(0)
    logp = -torch.rand(N, R, G, generator=g, dtype=torch.float64) * 3
    old = logp + 0.3 * torch.randn(N, R, G, generator=g, dtype=torch.float64)
    ref = logp + 0.2 * torch.randn(N, R, G, generator=g, dtype=torch.float64)
    rounds = torch.randint(0, R, (N, G), generator=g)
    rounds[3] = torch.tensor([0, 0, 0, 1, 1, 1])  # completion 3: two rounds only (its third row is padding)
    mask = torch.stack([rounds == r for r in range(R)], 1)  # [N, R, G], disjoint over rounds
    old[0, rounds[0, 0], 0] = logp[0, rounds[0, 0], 0] + 12.0  # stale rollout policy: the clamp
    old[1, rounds[1, 1], 1] = logp[1, rounds[1, 1], 1] - 2.0  # ratio e^2 > 3 on a negative-advantage row
    rewards = torch.tensor([1.0, 0.0, 0.25, 0.75], dtype=torch.float64)
    return {"logp": logp.float(), "old": old.float(), "ref": ref.float(), "mask": mask, "rewards": rewards.float()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("checkout", help=f"OpenMOSS/DiRL checkout at {COMMIT}")
    checkout = official_checkout(ap.parse_args().checkout, COMMIT)
    z = official_functions(checkout / "train" / "rollout_dapo_server.py", ("z_score_normalize",), {})["z_score_normalize"]
    t = inputs()
    adv = torch.tensor([x for grp in t["rewards"].view(-1, GROUP).tolist() for x in z(grp)], dtype=torch.float32)
    assert float(adv[1]) < 0
    logp = t["logp"].clone().requires_grad_(True)
    total = torch.zeros(())
    for b in range(N):
        for r in range(R):
            p_mask = t["mask"][b, r][None]
            if not bool(p_mask.any()):
                continue  # a padding row: reward 0, no token, no loss
            ns = {"torch": torch, "adv": adv[b:b + 1], "p_mask": p_mask, "masked_indices": torch.ones_like(p_mask),
                  "p_to_keep_real": p_mask.flatten(), "logp_p": logp[b, r][p_mask[0]], "device": "cpu",
                  "logp_old_tok": t["old"][b, r][None], "logp_ref_tok": t["ref"][b, r][None], "ppo_eps": EPS,
                  "kl_beta": BETA, "use_kl_estimator_k3": True, "loss_mean": True}
            official_lines(checkout / "models" / "sdar" / "modeling_sdar.py", 1244, 1282, ns)
            total = total + ns["loss"]
    total = total / (N * R)
    total.backward()
    write_fixture("dipo", {**{k: v.contiguous() for k, v in t.items()}, "expected.advantages": adv,
                           "expected.loss": total.detach(), "expected.grad": logp.grad},
                  {"commit": COMMIT, "num_completions": N, "rounds": R, "group_size": GROUP,
                   "source": "OpenMOSS/DiRL models/sdar/modeling_sdar.py:1244-1282, train/rollout_dapo_server.py:58-61"})


if __name__ == "__main__":
    main()
