"""TraceRL with its diffusion value model (``algorithm.params.value_model``; arXiv 2509.06949 §3.2).

:class:`TraceRLValueTrainer` is the :class:`~dare.rl.trainer.GRPOTrainer` plus the released trainer's value
stage (Gen-Verse/dLLM-RL@10b4fd1 ``rl.py`` with ``model.value_base_model``: ``train/train_sdar_value.py`` then
``train/train_sdar_policy.py``), once per rollout:

1. the rollout-time values ``V_j`` of every response token, each from the state before its transition (the
   trajectory replay's passes through the family's training forward; :func:`dare.rl.value.score_values`);
2. step-level GAE (:func:`dare.rl.value.step_gae`) of the sequence reward, which TraceRL takes group-normalised
   (``reward/rl_reward_v.py`` z-scores; here the trainer's group advantages, ``algorithm.params.advantage``),
   gives token advantages ``A_j`` and returns ``R_j``;
3. one AdamW step of the value model on the clipped value loss (:func:`dare.rl.value.clipped_value_loss`), each
   (completion, transition) row's token sum divided by the completion length ``G`` and averaged over rows
   (``train_sdar_value.py:1003-1005``), gradient norm clipped at ``train.max_grad_norm``;
4. the policy update with the token advantages ``A_j`` (:class:`~dare_grpo.objectives.tracerl.TraceRL`).

Steps 1-3 run in :meth:`TraceRLValueTrainer.after_passes` (a hook of :class:`dare.rl.hooks.RLStepHooks`), before the rollout policy scores the passes, so the rows
the update runs (``skip_zero_advantage``) follow the token advantages. A rollout is one micro-batch of prompts: with
``train.gradient_accumulation_steps`` k, the value model takes k steps per policy optimizer step.

Differences from the released trainer, by design: the value model starts as a copy of the policy's starting
weights with a zeroed head (the release loads ``model.value_base_model``, usually the same checkpoint); it takes
one optimizer step per rollout over every row (the release steps every ``batch_size_lm x
gradient_accumulation_steps x processes`` rows); its gradients are averaged over processes by an all-reduce, so it
supports one process and DDP, not FSDP or DeepSpeed sharding (refused with the spec,
:meth:`~dare_grpo.objectives.tracerl.TraceRL.check`). Its weights and AdamW state are saved with every
checkpoint (``value_model.safetensors``, ``value_optimizer.safetensors`` + ``value_optimizer.json``: no pickle) and
restored on resume (and when a finished run is re-run); the final value model is written to
``<output_dir>/value_model`` (safetensors): the last step's, also with ``train.keep_best_metric`` (``model/`` then
holds the best step's policy).

Steps 1-3 are public functions, :func:`rollout_values`, :func:`value_gae` and :func:`value_loss_backward` (the
trainer adds the all-reduce, the clip and the AdamW step), which the trainer and the parity test
(``tests/parity/test_tracerl_value.py``) call alike.
"""

from __future__ import annotations

import contextlib
import json
import time
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

from dare.scaling import distributed
from dare.rl import step
from dare.rl.batch_totals import whole_batch_sums
from dare.rl.rollout import Rollout
from dare.rl.trainer import GRPOTrainer
from dare.rl.value import clipped_value_loss, score_values, step_gae, transition_ranks, value_model_from
from dare.trainers.precision import upcast_trainable_to_fp32

__all__ = ["TraceRLValueTrainer", "rollout_values", "value_gae", "value_loss_backward"]

VALUE_WEIGHTS, VALUE_OPT, VALUE_OPT_META = "value_model.safetensors", "value_optimizer.safetensors", "value_optimizer.json"


@torch.no_grad()
def rollout_values(fn: step.LogitsFn, batch, passes, micro_batch_size: int | None = None,
                   context=contextlib.nullcontext) -> torch.Tensor:
    """``[N, G]`` float32 rollout-time values of every scored token under the value model's ``fn`` (each token's
    value from the state before its transition, :func:`dare.rl.value.score_values`), 0 elsewhere; no gradient."""
    G = batch.input_ids.shape[1] - batch.prompt_length
    out = torch.zeros(batch.num_rows, G, dtype=torch.float32, device=batch.input_ids.device)
    with context():
        for pas in passes:
            for r in step.row_chunks(batch.num_rows, micro_batch_size):
                if bool(pas.rows(r).scored.any()):
                    out[r] += score_values(fn, batch.rows(r), pas.rows(r))
    return out


def value_gae(passes, num_rows: int, advantages: torch.Tensor, old_values: torch.Tensor, params):
    """Step-level GAE (:func:`dare.rl.value.step_gae`) of the ``[N]`` group-normalised sequence rewards over the
    transitions of ``passes`` with ``params.value_model``'s ``gamma`` and ``lam``: ``(ranks, returns, token
    advantages)``, each ``[N, G]``."""
    G = old_values.shape[1]
    ranks = transition_ranks(passes, num_rows, G)
    settings = params.value_model
    returns, token_advantages = step_gae(ranks, advantages, old_values, settings.gamma, settings.lam)
    return ranks, returns, token_advantages


def value_loss_backward(fn: step.LogitsFn, batch, passes, old_values: torch.Tensor, returns: torch.Tensor,
                        params, backprop: step.Backprop | None = None) -> torch.Tensor:
    """The clipped value loss (:func:`dare.rl.value.clipped_value_loss`, clip range ``params.value_model.clip_eps``)
    of every (completion, transition) row, its token sum divided by the completion length ``G`` and averaged over the
    whole batch's rows (``train_sdar_value.py:1003-1005``), backpropagated into the value model behind ``fn`` one row
    chunk at a time.

    :returns: the 0-d float32 loss (this process's part; summed over processes by the caller).
    """
    backprop = backprop or step.Backprop()
    G = batch.input_ids.shape[1] - batch.prompt_length
    (pairs,), _ = whole_batch_sums(sum(float(x.scored.any(dim=-1).sum()) for x in passes))
    denom = max(pairs, 1.0) * G
    clip_eps = params.value_model.clip_eps
    total = torch.zeros((), dtype=torch.float32, device=batch.input_ids.device)
    for pas in passes:
        for r in step.row_chunks(batch.num_rows, params.micro_batch_size):
            sub = pas.rows(r)
            if not bool(sub.scored.any()):
                continue
            with backprop.context():
                v = score_values(fn, batch.rows(r), sub)
                loss = (clipped_value_loss(v, old_values[r], returns[r], clip_eps) * sub.scored).sum() / denom
            backprop.backward(loss)
            total += loss.detach()
    return total


class TraceRLValueTrainer(GRPOTrainer):
    """:class:`~dare.rl.trainer.GRPOTrainer` with TraceRL's value model (module docstring).

    :raises DareError: a policy without a separate output layer (:func:`dare.rl.value.value_model_from`).
    """

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        p = self.params
        self.value_model = value_model_from(self.accelerator.unwrap_model(self.model))
        if self.args.bf16 or self.args.fp16:  # fp32 master weights, as the policy's (dare/trainers/precision.py)
            upcast_trainable_to_fp32(self.value_model)
        self.value_optimizer = torch.optim.AdamW(self.value_model.parameters(), lr=p.value_model.learning_rate,
                                                 betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0)

    # ------------------------------------------------------------------ values, GAE and the value step
    def _value_fn(self):
        return lambda noisy, clean, attn, **options: self.denoiser_logits(self.value_model, noisy, clean, attn, **options)

    def _values(self, batch, passes) -> torch.Tensor:
        """``[N, G]`` values of every scored token under the value model (no gradient): :func:`rollout_values`."""
        self.value_model.eval()
        return rollout_values(self._value_fn(), batch, passes, self.params.micro_batch_size,
                              self.compute_loss_context_manager)

    def _value_step(self, batch, passes, old_values, returns) -> dict[str, float]:
        """One AdamW step of the value model on the clipped value loss (module docstring, step 3)."""
        p = self.params
        vm = self.value_model.train()
        # plain backwards: the value model is not wrapped by the accelerator (its gradients are all-reduced below)
        total = value_loss_backward(self._value_fn(), batch, passes, old_values, returns, p,
                                    step.Backprop(context=self.compute_loss_context_manager))
        params = [q for q in vm.parameters() if q.requires_grad]
        for q in params:
            if q.grad is None:
                q.grad = torch.zeros_like(q)
        if distributed.world_size() > 1:
            for q in params:  # each process's loss carries the whole batch's normaliser: sum the parts
                torch.distributed.all_reduce(q.grad)
            torch.distributed.all_reduce(total)
        max_norm = self.args.max_grad_norm if self.args.max_grad_norm and self.args.max_grad_norm > 0 else float("inf")
        norm = torch.nn.utils.clip_grad_norm_(params, max_norm)
        finite = bool(torch.isfinite(total)) and bool(torch.isfinite(norm))
        if finite:  # never write non-finite weights: a non-finite value step is skipped on every process alike
            self.value_optimizer.step()
        self.value_optimizer.zero_grad(set_to_none=True)
        return {"value/loss": float(total), "value/grad_norm": float(norm), "value/skipped": float(not finite)}

    def after_passes(self, rollout: Rollout) -> dict[str, float]:
        """Values, GAE and the value step (module docstring) once the passes are drawn, before the old policy is
        scored: ``rollout.advantages`` becomes the ``[N, G]`` token advantages, so the rows the update runs (and
        scores under the rollout policy) are those with a non-zero token advantage."""
        p, batch, passes = self.params, rollout.batch, rollout.passes[0]
        t0 = time.perf_counter()
        old_values = self._values(batch, passes)
        ranks, returns, advantages = value_gae(passes, batch.num_rows, rollout.advantages, old_values, p)
        stats = self._value_step(batch, passes, old_values, returns)
        trained = (ranks >= 0).float()
        count = max(float(trained.sum()), 1.0)
        stats |= {"value/mean": float((old_values * trained).sum()) / count,
                  "value/return_mean": float((returns * trained).sum()) / count,
                  "value/advantage_abs": float((advantages.abs() * trained).sum()) / count,
                  "time/value": time.perf_counter() - t0}
        rollout.advantages = advantages
        return stats

    # ------------------------------------------------------------------ checkpoints and the final save (hooks)
    def save_extra_state(self, output_dir: str) -> None:
        """The value model and its AdamW state, into each checkpoint (main process)."""
        if distributed.is_main():
            save_value_state(self.value_model, self.value_optimizer, output_dir)

    def load_extra_state(self, checkpoint: str) -> None:
        """The value model and its AdamW state from ``checkpoint`` when it holds them: on resume, and when a finished
        run is re-run (so the final save publishes the trained value model, not the fresh copy made at start)."""
        if (Path(checkpoint) / VALUE_WEIGHTS).exists():
            load_value_state(self.value_model, self.value_optimizer, checkpoint)

    def save_final(self, model_dir, card: str | None = None) -> None:
        super().save_final(model_dir, card=card)

        def write(staged: str) -> None:
            if distributed.is_main():
                self.value_model.save_pretrained(staged, safe_serialization=True)

        self._publish(Path(model_dir).parent / "value_model", "the value model", write)


def save_value_state(model: torch.nn.Module, optimizer: torch.optim.Optimizer, directory) -> None:
    """Write the value model's weights and its AdamW state to ``directory`` as safetensors + JSON (no pickle)."""
    d = Path(directory)
    save_file({k: v.detach().contiguous().clone() for k, v in model.state_dict().items()}, str(d / VALUE_WEIGHTS))
    state = optimizer.state_dict()
    tensors, meta = {}, {"param_groups": state["param_groups"], "state": {}}
    for idx, st in state["state"].items():
        meta["state"][str(idx)] = sorted(st)
        for name, value in st.items():
            tensors[f"{idx}.{name}"] = torch.as_tensor(value).detach().contiguous().clone()
    save_file(tensors, str(d / VALUE_OPT))
    (d / VALUE_OPT_META).write_text(json.dumps(meta))


def load_value_state(model: torch.nn.Module, optimizer: torch.optim.Optimizer, directory) -> None:
    """Restore what :func:`save_value_state` wrote (``load_state_dict`` strict: a mismatching checkpoint raises)."""
    d = Path(directory)
    device = next(model.parameters()).device
    model.load_state_dict(load_file(str(d / VALUE_WEIGHTS), device=str(device)))
    meta = json.loads((d / VALUE_OPT_META).read_text())
    tensors = load_file(str(d / VALUE_OPT), device=str(device))
    state = {int(i): {n: tensors[f"{i}.{n}"] for n in names} for i, names in meta["state"].items()}
    optimizer.load_state_dict({"state": state, "param_groups": meta["param_groups"]})
