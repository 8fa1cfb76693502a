"""Build the TraceRL value-model parity fixture from the official trainer (run by hand, never in CI).

    git clone https://github.com/Gen-Verse/dLLM-RL /tmp/tr && git -C /tmp/tr checkout 10b4fd1cba83e4496c20585dc2fd01dc02f20255
    .venv/bin/python tools/parity/build_tracerl_value.py /tmp/tr

The released value pipeline (``rl.py`` with ``model.value_base_model``; ``configs/rl_sdar_with_value.yaml``) in
three official files, whose functions are nested in ``main()`` (:func:`tools.parity.common.official_functions`):

* ``train/init_sdar_value_model.py``: ``_get_value_model``, the value model class (a ``Linear(hidden, 1, bias=False)``
  ``value_head`` on the base model's ``last_hidden_state``), here over :class:`tools.parity.common.TinyDenoiser`'s
  trunk;
* ``train/train_sdar_value.py``: ``compute_old_value_parallel`` (rollout-time values, under a perturbed copy of the
  value weights so that the value clip acts), ``compute_returns_and_advantages_from_fragments`` (step-level GAE,
  run with the config's ``gam = lam = 1`` and once more with ``gam 0.9, lam 0.8``) and ``forward_process`` (the
  clipped value loss);
* ``train/train_sdar_policy.py``: ``compute_logp_old_tok_parallel`` and ``forward_process`` (clipped surrogate with
  the token advantages, each row's sum / the response length, k3 KL against the rollout policy).

The (completion, transition) rows come from ``train/rl_llada.py``'s ``prepare_inputs_and_labels_for_text``
(``method: TraceRL``, per-row shrinkage), one completion at a time so each row's completion is known, as in
``tools/parity/build_tracerl.py``. The SDAR trainers run ``[x ; x_t response]`` through a block-attention forward and
splice the second copy back (``torch.cat([out[:, :L0], out[:, L0 + L1:]])``); here the forward is the tiny
bidirectional model on the row itself and the splice is fed ``[out ; out[:, L0:]]``, so the splice returns the
row's outputs (``basic_block_attention``/``process_pad`` are identity stubs). Writes
``tests/fixtures/parity/tracerl_value/``; ``tests/parity/test_tracerl_value.py`` compares DARE.
"""

from __future__ import annotations

import argparse
import sys
import types
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from tools.parity.common import (TinyDenoiser, official_checkout, official_functions, policy_models,  # noqa: E402
                                 write_fixture)

COMMIT = "10b4fd1cba83e4496c20585dc2fd01dc02f20255"
MASK_ID, EOS_ID, PAD_ID = 15, 2, 1
SETTINGS = {"shrink": 2, "eps": 0.2, "beta": 0.01, "post_num": 0, "use_kl_estimator_k3": True, "gam": 1.0, "lam": 1.0}
OTHER_GAE = {"gam": 0.9, "lam": 0.8}
POLICY_GRADS = ("embed.weight", "head.weight")
VALUE_GRADS = ("value_head.weight", "model.embed.weight")


class Spliced(torch.nn.Module):
    """The official SDAR forward's output layout for a row model: ``[out ; out[:, L0:]]`` (module docstring)."""

    def __init__(self, inner, L: int, L0: int, values: bool):
        super().__init__()
        self.inner, self.L, self.L0, self.values = inner, L, L0, values

    def forward(self, input_ids=None, attention_mask=None, position_ids=None):
        ids = input_ids[:, : self.L]
        if self.values:
            out = self.inner(input_ids=ids)
            return torch.cat([out, out[:, self.L0:]], dim=1)
        logits = self.inner(ids).logits
        return types.SimpleNamespace(logits=torch.cat([logits, logits[:, self.L0:]], dim=1))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("checkout", help=f"Gen-Verse/dLLM-RL checkout at {COMMIT}")
    checkout = official_checkout(ap.parse_args().checkout, COMMIT)
    train = checkout / "train"

    models = policy_models(0)  # current, old (rollout), ref (unused)
    torch.manual_seed(1)
    value_trunk = {"current": TinyDenoiser(), "old": TinyDenoiser()}
    head = {"current": torch.randn(1, 16) * 0.5}
    with torch.no_grad():
        value_trunk["old"].load_state_dict(value_trunk["current"].state_dict())
        for p in value_trunk["old"].parameters():
            p.add_(0.3 * torch.randn_like(p))
        head["old"] = head["current"] + 0.5 * torch.randn(1, 16)

    # the official value model class on the tiny trunk (init_sdar_value_model.py)
    class TinyBase(torch.nn.Module):
        def __init__(self, config):
            super().__init__()
            self.model = types.SimpleNamespace()  # replaced below by the trunk

    vns = {"torch": torch, "nn": torch.nn, "AutoConfig": object}
    ValueModel = official_functions(train / "init_sdar_value_model.py", ("_get_value_model",), vns)["_get_value_model"](
        TinyBase, "value_head")

    def official_value_model(which: str):
        vm = ValueModel(types.SimpleNamespace(hidden_size=16))
        trunk = value_trunk[which]
        vm.model = lambda input_ids, attention_mask=None, position_ids=None, **kw: {
            "last_hidden_state": trunk.hidden(input_ids)}
        vm.trunk = trunk  # registers the trunk's parameters
        with torch.no_grad():
            vm.value_head.weight.copy_(head[which])
        return vm

    prompts = torch.tensor([[PAD_ID, PAD_ID, 4, 5, 6], [PAD_ID, 12, 13, 4, 5], [7, 8, 9, 10, 11], [PAD_ID, 4, 5, 6, 7]])
    E = EOS_ID
    completions = torch.tensor([[3, 4, E, E, E, E, E, E], [5, 6, 7, 8, 9, 10, 11, 12],
                                [11, E, E, E, E, E, E, E], [12, 13, 14, 3, 4, 5, 6, E]])
    step_map = torch.tensor([[0, 0, 1, 3, 3, 4, 6, 7], [1, 0, 2, 2, 3, 5, 5, 6],
                             [0, 2, 1, 3, 4, 4, 7, 6], [0, 1, 1, 2, 4, 6, 6, 7]])
    rewards = [1.2, -0.4, -0.9, 0.6]  # the group z-scores rl_reward_v.py writes
    ids = torch.cat([prompts, completions], 1)
    B, L0, L = ids.shape[0], prompts.shape[1], ids.shape[1]
    L1 = L - L0
    labels = ids.clone()
    labels[:, :L0] = -100
    training = types.SimpleNamespace(max_gen_length=L1, lower_p=0.1, upper_p=0.9, method="TraceRL",
                                     mask_times_per_sample=1, block_size=L1, **SETTINGS)
    config = types.SimpleNamespace(training=training)

    # (completion, transition) rows, one completion at a time (rl_llada.py)
    rows_noisy, rows_pmask, seq_ids, collapsed = [], [], [], []
    for b in range(B):
        ns = {"torch": torch, "F": F, "config": config, "mask_id": MASK_ID, "pad_id": PAD_ID,
              "uni_prompting": lambda pair, b=b: (ids[b:b + 1], labels[b:b + 1], L0, 0)}
        fns = official_functions(train / "rl_llada.py", ("collapse_k_unique", "prepare_inputs_and_labels_for_text"), ns)
        noisy, _, p_mask, _, _, _ = fns["prepare_inputs_and_labels_for_text"](None, None, step_map[b:b + 1].tolist(),
                                                                              [rewards[b]])
        rows_noisy.append(noisy)
        rows_pmask.append(p_mask.bool())
        seq_ids += [b] * noisy.shape[0]
        collapsed.append(fns["collapse_k_unique"](step_map[b].tolist(), SETTINGS["shrink"]))
    noisy, p_mask = torch.cat(rows_noisy), torch.cat(rows_pmask)
    R = noisy.shape[0]
    extended = torch.cat([noisy, noisy[:, L0:]], dim=1)
    tok_idx_ext = torch.zeros_like(extended)
    row_labels = ids[torch.tensor(seq_ids)]
    accelerator = types.SimpleNamespace(device=torch.device("cpu"), num_processes=1, wait_for_everyone=lambda: None)
    stubs = {"basic_block_attention": torch.zeros(1, 1, 1, 1), "process_pad": lambda attn, input_ids: attn}
    batches = [{"ids": torch.arange(R), "extended_input_ids": extended, "p_mask": p_mask, "tok_idx_ext": tok_idx_ext,
                "labels": row_labels}]

    # rollout-time values and step-level GAE (train_sdar_value.py)
    dataset = types.SimpleNamespace(
        L0=L0, L1=L1, step_map_all=torch.tensor(collapsed), seq_ids=torch.tensor(seq_ids), p_mask=p_mask,
        Return=torch.zeros(R, L), adv=torch.zeros(R, L), old_values=torch.zeros(R, L),
        resp_input_ids_all=completions.clone(), pad_id=PAD_ID, post_num=SETTINGS["post_num"],
        use_vector_reward=False, per_token_reward_all=torch.tensor(rewards), per_seq_reward=torch.tensor(rewards))
    old_ns = {"torch": torch, "value_model": Spliced(official_value_model("old"), L, L0, True), **stubs}
    official_functions(train / "train_sdar_value.py", ("compute_old_value_parallel",), old_ns)
    with torch.no_grad():
        old_ns["compute_old_value_parallel"](accelerator, dataset, batches, L0, PAD_ID, R)
    gae_ns = {"torch": torch}
    gae = official_functions(train / "train_sdar_value.py", ("compute_returns_and_advantages_from_fragments",),
                             gae_ns)["compute_returns_and_advantages_from_fragments"]
    other = types.SimpleNamespace(**{**vars(dataset), "Return": torch.zeros(R, L), "adv": torch.zeros(R, L)})
    gae(other, OTHER_GAE["gam"], OTHER_GAE["lam"], atol=1e-5)
    gae(dataset, SETTINGS["gam"], SETTINGS["lam"], atol=1e-5)

    # the value loss and its gradients (train_sdar_value.py forward_process)
    value_current = official_value_model("current")
    val_ns = {"torch": torch, "config": config, "start_pos": L0, "value_model": Spliced(value_current, L, L0, True),
              **stubs}
    official_functions(train / "train_sdar_value.py", ("forward_process",), val_ns)
    value_loss = val_ns["forward_process"](extended, p_mask, tok_idx_ext, dataset.Return, dataset.old_values)
    value_loss.backward()
    value_params = dict(value_current.named_parameters())
    value_params["model.embed.weight"] = value_trunk["current"].embed.weight

    # the policy loss with the token advantages (train_sdar_policy.py)
    logp_ns = {"torch": torch, "F": F, "model": Spliced(models["old"], L, L0, False), **stubs}
    official_functions(train / "train_sdar_policy.py", ("compute_logp_old_tok_parallel",), logp_ns)
    pol_data = types.SimpleNamespace(logp_old_tok=torch.zeros(R, L))
    with torch.no_grad():
        logp_ns["compute_logp_old_tok_parallel"](accelerator, pol_data, batches, L0, PAD_ID, R)
    pol_ns = {"torch": torch, "F": F, "config": config, "start_pos": L0,
              "model": Spliced(models["current"], L, L0, False), **stubs}
    official_functions(train / "train_sdar_policy.py", ("forward_process",), pol_ns)
    policy_loss = pol_ns["forward_process"](extended, p_mask, tok_idx_ext, row_labels, dataset.adv, pol_data.logp_old_tok)
    policy_loss.backward()
    print(f"{R} rows; value loss {value_loss.item():.7f}, policy loss {policy_loss.item():.7f}")

    def per_token(rows: torch.Tensor) -> torch.Tensor:  # rows x L (nonzero on p_mask) -> B x L1
        out = torch.zeros(B, L1)
        for r in range(R):
            out[seq_ids[r]] += torch.where(p_mask[r], rows[r], torch.zeros_like(rows[r]))[L0:]
        return out

    tensors = {**{f"{m}.{k}": v for m in ("current", "old") for k, v in models[m].state_dict().items()},
               **{f"value_{m}.{k}": v for m, t in value_trunk.items() for k, v in t.state_dict().items()},
               **{f"value_head.{m}": h for m, h in head.items()},
               "input_ids": ids, "unmask_step": step_map, "rewards": torch.tensor(rewards),
               "expected.num_rows": torch.tensor([R]), "expected.old_values": per_token(dataset.old_values),
               "expected.returns": per_token(dataset.Return), "expected.advantages": per_token(dataset.adv),
               "expected.other.returns": per_token(other.Return), "expected.other.advantages": per_token(other.adv),
               "expected.value_loss": value_loss.detach().reshape(1), "expected.policy_loss": policy_loss.detach().reshape(1),
               **{f"expected.grad.{n}": dict(models["current"].named_parameters())[n].grad for n in POLICY_GRADS},
               **{f"expected.value_grad.{n}": value_params[n].grad for n in VALUE_GRADS}}
    meta = {"official": f"Gen-Verse/dLLM-RL@{COMMIT}",
            "files": {"train/init_sdar_value_model.py": ["_get_value_model"],
                      "train/train_sdar_value.py": ["compute_old_value_parallel",
                                                    "compute_returns_and_advantages_from_fragments", "forward_process"],
                      "train/train_sdar_policy.py": ["compute_logp_old_tok_parallel", "forward_process"],
                      "train/rl_llada.py": ["collapse_k_unique", "prepare_inputs_and_labels_for_text"]},
            "mask_id": MASK_ID, "eos_id": EOS_ID, "pad_id": PAD_ID, "prompt_length": L0, "settings": SETTINGS,
            "other_gae": OTHER_GAE, "policy_grads": list(POLICY_GRADS), "value_grads": list(VALUE_GRADS),
            "torch": torch.__version__}
    print("wrote", write_fixture("tracerl_value", tensors, meta))


if __name__ == "__main__":
    main()
