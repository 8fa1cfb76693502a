"""Build the TraceRL parity fixture from the official trainer (run by hand, never in CI).

    git clone https://github.com/Gen-Verse/dLLM-RL /tmp/tr && git -C /tmp/tr checkout 10b4fd1cba83e4496c20585dc2fd01dc02f20255
    .venv/bin/python tools/parity/build_tracerl.py /tmp/tr

Compiles ``collapse_k_unique``, ``prepare_inputs_and_labels_for_text`` (``method: TraceRL``: one training row
per (completion, shrunk transition), the state before the transition, the transition's tokens as ``p_mask``),
``compute_logp_old_tok_parallel`` and ``forward_process`` (clipped surrogate, token mean inside each row, mean
over rows; k3 KL against the rollout policy summed over each row's tokens) from ``train/rl_llada.py``, where they
are nested in ``main()`` (:func:`tools.parity.common.official_functions`), and runs them on
:class:`tools.parity.common.TinyDenoiser` (current and rollout-policy weights) with the LLaDA config's values
(``configs/rl_llada.yaml``: shrink 8 there, 2 here for 8-token completions; eps 0.2, beta 0.01, post_num 0) over a
hand-made decoding trajectory with repeated and skipped steps, left-padded prompts and given advantages (the
official z-scores come from ``reward/rl_reward.py``, a separate process). ``uni_prompting`` is replaced by the
already tokenised rows. Then one optimizer step as the release configures it
(:func:`tools.parity.common.official_update`). Writes ``tests/fixtures/parity/tracerl/``; ``tests/parity/test_tracerl.py`` compares DARE.
"""

from __future__ import annotations

import argparse
import sys
import types
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from tools.parity.common import TinyDenoiser, official_checkout, official_functions, official_update, write_fixture  # noqa: E402

COMMIT = "10b4fd1cba83e4496c20585dc2fd01dc02f20255"
MASK_ID, EOS_ID, PAD_ID = 15, 2, 1
SETTINGS = {"shrink": 2, "eps": 0.2, "beta": 0.01, "post_num": 0, "use_kl_estimator_k3": True}
#: The release's optimizer (``configs/rl_llada.yaml:56, 70-78``: torch AdamW, ``train/rl_llada.py:169-193``, and
#: ``accelerator.clip_grad_norm_`` at l.657-659); its weight decay is 0, so its own decay groups change nothing.
OPTIMIZER = {"learning_rate": 1e-6, "adam_beta1": 0.9, "adam_beta2": 0.999, "adam_epsilon": 1e-8, "weight_decay": 0.0,
             "max_grad_norm": 1.0}
GRAD_PARAMS = ("embed.weight", "head.weight")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("checkout", help=f"Gen-Verse/dLLM-RL checkout at {COMMIT}")
    checkout = official_checkout(ap.parse_args().checkout, COMMIT)
    source = checkout / "train" / "rl_llada.py"

    torch.manual_seed(0)
    models = {"current": TinyDenoiser(), "old": TinyDenoiser()}
    with torch.no_grad():
        models["old"].load_state_dict(models["current"].state_dict())
        for p in models["old"].parameters():
            p.add_(0.15 * torch.randn_like(p))
    prompts = torch.tensor([[PAD_ID, PAD_ID, 4, 5, 6], [PAD_ID, 12, 13, 4, 5], [7, 8, 9, 10, 11], [PAD_ID, 4, 5, 6, 7]])
    E = EOS_ID
    completions = torch.tensor([[3, 4, E, E, E, E, E, E], [5, 6, 7, 8, 9, 10, 11, 12],
                                [11, E, E, E, E, E, E, E], [12, 13, 14, 3, 4, 5, 6, E]])
    # the step that committed each token: repeats (two tokens at once) and gaps (steps committing nothing)
    step_map = torch.tensor([[0, 0, 1, 3, 3, 4, 6, 7], [1, 0, 2, 2, 3, 5, 5, 6],
                             [0, 2, 1, 3, 4, 4, 7, 6], [0, 1, 1, 2, 4, 6, 6, 7]])
    advantages = [1.2, -0.4, -0.9, 0.6]
    ids = torch.cat([prompts, completions], 1)
    P, L = prompts.shape[1], ids.shape[1]
    labels = ids.clone()
    labels[:, :P] = -100
    training = types.SimpleNamespace(max_gen_length=completions.shape[1], lower_p=0.1, upper_p=0.9, method="TraceRL",
                                     mask_times_per_sample=1, **SETTINGS)
    config = types.SimpleNamespace(training=training)

    ns = {"torch": torch, "F": F, "config": config, "mask_id": MASK_ID, "pad_id": PAD_ID,
          "uni_prompting": lambda pair: (ids, labels, P, 0)}
    fns = official_functions(source, ("collapse_k_unique", "prepare_inputs_and_labels_for_text"), ns)
    noisy, row_labels, p_mask, rewards, _, _ = fns["prepare_inputs_and_labels_for_text"](None, None, step_map.tolist(),
                                                                                         advantages)
    # logp_old_tok as the trainer computes it before the updates (compute_logp_old_tok_parallel, rollout policy)
    old_ns = {"torch": torch, "F": F, "model": models["old"]}
    official_functions(source, ("compute_logp_old_tok_parallel",), old_ns)
    dataset = types.SimpleNamespace(logp_old_tok=torch.zeros(noisy.shape))
    batches = [{"ids": torch.arange(noisy.shape[0]), "input_ids": noisy, "labels": row_labels}]
    accelerator = types.SimpleNamespace(device=torch.device("cpu"), wait_for_everyone=lambda: None)
    with torch.no_grad():
        old_ns["compute_logp_old_tok_parallel"](accelerator, dataset, batches, P, PAD_ID, noisy.shape[0])
    cur_ns = {"torch": torch, "F": F, "config": config, "model": models["current"]}
    official_functions(source, ("forward_process",), cur_ns)
    loss = cur_ns["forward_process"](noisy, row_labels, p_mask.float(), rewards, dataset.logp_old_tok)
    loss.backward()
    print(f"loss {loss.item():.7f} over {noisy.shape[0]} transition rows")
    grads = {f"expected.grad.{n}": dict(models["current"].named_parameters())[n].grad.clone() for n in GRAD_PARAMS}
    tensors = {**{f"{m}.{k}": v.clone() for m, mod in models.items() for k, v in mod.state_dict().items()},
               "input_ids": ids, "unmask_step": step_map, "advantages": torch.tensor(advantages),
               "expected.num_rows": torch.tensor([noisy.shape[0]]), "expected.loss": loss.detach().reshape(1),
               **grads, **official_update(models["current"], OPTIMIZER)}
    meta = {"official": f"Gen-Verse/dLLM-RL@{COMMIT}", "file": "train/rl_llada.py",
            "functions": ["collapse_k_unique", "prepare_inputs_and_labels_for_text", "compute_logp_old_tok_parallel",
                          "forward_process"],
            "mask_id": MASK_ID, "eos_id": EOS_ID, "pad_id": PAD_ID, "prompt_length": P, "settings": SETTINGS,
            "grad_params": list(GRAD_PARAMS), "torch": torch.__version__, "optimizer": OPTIMIZER,
            "optimizer_source": "configs/rl_llada.yaml:56, 70-78"}
    print("wrote", write_fixture("tracerl", tensors, meta))


if __name__ == "__main__":
    main()
