"""Shared pieces of the parity fixture builders (``tools/parity/build_<algo>.py``) and their tests.

A builder is run by hand, never in CI: it takes the path of a checkout of the official repository,
checks that its ``HEAD`` is the pinned commit (:func:`official_checkout`), imports only the official
functions it needs (heavy imports stubbed: :func:`stub_modules`), runs them on :class:`TinyDenoiser` with
recorded random draws, and writes a small fixture (:func:`write_fixture`: safetensors tensors + JSON
metadata, no pickle) under ``tests/fixtures/parity/<algo>/``. The test ``tests/parity/test_<algo>.py``
reads it back (:func:`read_fixture`), feeds the same draws to DARE's code with the official settings and
compares (:func:`rel_diff`). Nothing of the official code is stored in the repository.
"""

from __future__ import annotations

import ast
import importlib.machinery
import json
import os
import subprocess
import sys
import tempfile
import types
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file, save_file

__all__ = ["REPO", "FIXTURES", "TinyDenoiser", "policy_models", "official_checkout", "stub_modules",
           "official_functions", "official_lines", "write_fixture", "read_fixture", "rel_diff", "model_from_state",
           "plain_logits", "public_step", "official_update", "trainer_update", "update_worst", "given_logprobs",
           "logprob_batch", "LOGPROB_EOS"]

REPO = Path(__file__).resolve().parents[2]
FIXTURES = REPO / "tests" / "fixtures" / "parity"


class TinyDenoiser(torch.nn.Module):
    """A bidirectional one-layer transformer denoiser: ``model(ids [N, S], attention_mask=None).logits``
    ``[N, S, V]`` float32. Small enough for a fixture (vocabulary 16, width 16); attention to positions with
    ``attention_mask == 0`` is blocked, as in the dLLM families."""

    def __init__(self, vocab: int = 16, width: int = 16, heads: int = 2):
        super().__init__()
        self.embed = torch.nn.Embedding(vocab, width)
        self.pos = torch.nn.Parameter(torch.zeros(64, width))
        self.attn = torch.nn.MultiheadAttention(width, heads, batch_first=True)
        self.mlp = torch.nn.Sequential(torch.nn.Linear(width, 2 * width), torch.nn.GELU(), torch.nn.Linear(2 * width, width))
        self.head = torch.nn.Linear(width, vocab)

    @property
    def device(self) -> torch.device:
        return self.head.weight.device

    def get_output_embeddings(self) -> torch.nn.Linear:
        return self.head

    def set_output_embeddings(self, head: torch.nn.Linear) -> None:
        self.head = head

    def hidden(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None) -> torch.Tensor:
        """``[N, S, width]`` last hidden states (the output layer's input)."""
        h = self.embed(input_ids) + self.pos[: input_ids.shape[1]]
        pad = None if attention_mask is None else ~attention_mask.bool()
        a, _ = self.attn(h, h, h, key_padding_mask=pad, need_weights=False)
        h = h + a
        return h + self.mlp(h)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None):
        return types.SimpleNamespace(logits=self.head(self.hidden(input_ids, attention_mask)))


def policy_models(seed: int = 0) -> dict[str, TinyDenoiser]:
    """``{"current", "old", "ref"}``: a :class:`TinyDenoiser` drawn with ``torch.manual_seed(seed)`` and two copies
    of it perturbed by Gaussian noise of scale 0.15 (the rollout policy) and 0.1 (the reference policy), drawn
    in that order, so a builder's later draws are the same whichever builder calls it."""
    torch.manual_seed(seed)
    models = {"current": TinyDenoiser(), "old": TinyDenoiser(), "ref": TinyDenoiser()}
    with torch.no_grad():
        for name, scale in (("old", 0.15), ("ref", 0.1)):
            models[name].load_state_dict(models["current"].state_dict())
            for p in models[name].parameters():
                p.add_(scale * torch.randn_like(p))
    return models


def model_from_state(state: dict[str, torch.Tensor], prefix: str) -> TinyDenoiser:
    """A :class:`TinyDenoiser` with the weights stored under ``prefix`` in a fixture's tensors."""
    model = TinyDenoiser()
    model.load_state_dict({k[len(prefix):]: v for k, v in state.items() if k.startswith(prefix)})
    return model


def official_checkout(path: str | os.PathLike, commit: str) -> Path:
    """``path`` as a checkout of the official repository at ``commit`` (``git -C path rev-parse HEAD``).

    :raises SystemExit: not a git checkout, or another commit (the fixture would not match its citation).
    """
    p = Path(path).resolve()
    try:
        head = subprocess.run(["git", "-C", str(p), "rev-parse", "HEAD"], check=True, capture_output=True,
                              text=True).stdout.strip()
    except (subprocess.CalledProcessError, FileNotFoundError) as exc:
        raise SystemExit(f"{p} is not a git checkout of the official repository: {exc}") from exc
    if head != commit:
        raise SystemExit(f"{p} is at {head}, the fixture is pinned to {commit}: `git -C {p} checkout {commit}`")
    return p


def stub_modules(names: dict[str, dict[str, Any]]) -> None:
    """Put placeholder modules in ``sys.modules`` (``{module name: {attribute: value}}``), with their parent
    packages, so that an official module imports without its heavy dependencies (trl, wandb, ...). Every
    attribute not given is a placeholder class."""

    class _Module(types.ModuleType):
        def __getattr__(self, attr):
            if attr.startswith("__"):
                raise AttributeError(attr)
            value = type(attr, (), {})
            setattr(self, attr, value)
            return value

    for name, attrs in names.items():
        parts = name.split(".")
        for i in range(1, len(parts) + 1):
            sub = ".".join(parts[:i])
            if sub not in sys.modules:
                mod = _Module(sub)
                mod.__path__ = []
                mod.__spec__ = importlib.machinery.ModuleSpec(sub, None)
                sys.modules[sub] = mod
        for k, v in attrs.items():
            setattr(sys.modules[name], k, v)


def official_functions(path: str | os.PathLike, names: tuple[str, ...], namespace: dict[str, Any]) -> dict[str, Any]:
    """The functions or methods called ``names`` in the official source file ``path``, compiled from that file
    (wherever they are defined: module level, a class body or nested in a function) into ``namespace`` (the
    globals they need), for official modules whose imports cannot be satisfied here. Decorators are dropped.

    :raises SystemExit: a name is not defined in the file.
    """
    tree = ast.parse(Path(path).read_text(encoding="utf-8"), filename=str(path))
    found = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef) and node.name in names and node.name not in found:
            node.decorator_list = []
            found[node.name] = node
    missing = sorted(set(names) - set(found))
    if missing:
        raise SystemExit(f"{path} defines no {', '.join(missing)}: is the checkout at the pinned commit?")
    module = ast.Module(body=[found[n] for n in names], type_ignores=[])
    exec(compile(module, str(path), "exec"), namespace)  # noqa: S102 (the pinned official source, run by hand)
    return {n: namespace[n] for n in names}


def official_update(model: torch.nn.Module, optimizer: dict[str, float]) -> dict[str, torch.Tensor]:
    """One optimizer step of ``model`` from the gradients its official loss left in it, configured as a release's
    ``transformers.Trainer`` does it (a builder calls it after the official ``loss.backward()``): the gradient norm
    clipped at ``max_grad_norm`` over every parameter, then ``torch.optim.AdamW`` with ``learning_rate`` (the
    release's rate after its warmup), ``(adam_beta1, adam_beta2)``, ``adam_epsilon`` and ``weight_decay`` on the
    parameters ``transformers.Trainer.get_decay_parameter_names`` decays (not biases or norms).

    :returns: ``expected.clipped_grad.<name>`` (the gradients the optimizer stepped with) and
        ``expected.updated.<name>`` (the weights after the step) of every parameter.
    """
    from transformers import Trainer

    named = dict(model.named_parameters())
    for p in named.values():
        if p.grad is None:
            p.grad = torch.zeros_like(p)
    torch.nn.utils.clip_grad_norm_(list(named.values()), optimizer["max_grad_norm"])
    out = {f"expected.clipped_grad.{n}": p.grad.detach().clone() for n, p in named.items()}
    decay = set(Trainer.get_decay_parameter_names(None, model))
    groups = [{"params": [p for n, p in named.items() if n in decay], "weight_decay": optimizer["weight_decay"]},
              {"params": [p for n, p in named.items() if n not in decay], "weight_decay": 0.0}]
    opt = torch.optim.AdamW(groups, lr=optimizer["learning_rate"], betas=(optimizer["adam_beta1"], optimizer["adam_beta2"]),
                            eps=optimizer["adam_epsilon"])
    opt.step()
    out.update({f"expected.updated.{n}": p.detach().clone() for n, p in named.items()})
    return out


def official_lines(path: str | os.PathLike, first: int, last: int, namespace: dict[str, Any]) -> dict[str, Any]:
    """Run lines ``first..last`` (1-based, inclusive) of the official source file ``path``, dedented, in
    ``namespace`` (the variables they read), for official code written inline in a larger function (a loss
    inside a model's ``forward``, a reward rule inside ``main``). :returns: ``namespace`` with what they set.

    :raises SystemExit: the file is shorter than ``last`` lines.
    """
    import textwrap

    lines = Path(path).read_text(encoding="utf-8").splitlines()
    if last > len(lines):
        raise SystemExit(f"{path} has {len(lines)} lines, not {last}: is the checkout at the pinned commit?")
    code = textwrap.dedent("\n".join(lines[first - 1:last]))
    exec(compile(code, f"{path}:{first}-{last}", "exec"), namespace)  # noqa: S102 (pinned official source, by hand)
    return namespace


def write_fixture(algo: str, tensors: dict[str, torch.Tensor], meta: dict[str, Any]) -> Path:
    """Write ``tests/fixtures/parity/<algo>/{tensors.safetensors,meta.json}`` (temp files, then rename)."""
    out = FIXTURES / algo
    out.mkdir(parents=True, exist_ok=True)
    for name, write in (("tensors.safetensors", lambda p: save_file({k: v.contiguous() for k, v in tensors.items()}, p)),
                        ("meta.json", lambda p: Path(p).write_text(json.dumps(meta, indent=2, sort_keys=True) + "\n"))):
        fd, tmp = tempfile.mkstemp(dir=out, suffix=".tmp")
        os.close(fd)
        write(tmp)
        os.replace(tmp, out / name)
    return out


def read_fixture(algo: str) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
    """``(tensors, meta)`` of ``tests/fixtures/parity/<algo>/``."""
    d = FIXTURES / algo
    return load_file(str(d / "tensors.safetensors")), json.loads((d / "meta.json").read_text())


def rel_diff(a: torch.Tensor, b: torch.Tensor) -> float:
    """``max |a - b| / max(max |b|, 1e-12)`` in float64 (0 for equal tensors)."""
    a, b = a.detach().double(), b.detach().double()
    return float((a - b).abs().max() / b.abs().max().clamp(min=1e-12))


def plain_logits(model: torch.nn.Module):
    """``model``'s logits as DARE's step scores a policy (:data:`dare.rl.step.LogitsFn`):
    ``fn(noisy, clean, attention_mask) -> model(noisy, attention_mask=attention_mask).logits``."""
    return lambda noisy, clean, attn: model(noisy, attention_mask=attn).logits


#: The stop token id of :func:`logprob_batch` (its other completion tokens are id 0).
LOGPROB_EOS = 1


def given_logprobs(logp: torch.Tensor, masks: torch.Tensor, prompt_length: int, mask_id: int):
    """A policy whose token log-probabilities are the given ``logp``, as DARE's step scores a policy
    (:data:`dare.rl.step.LogitsFn`), for a fixture whose official loss takes token log-probs as leaf tensors (the model
    forward is not the object of that fixture).

    The rows' clean ids (:func:`logprob_batch`) hold the row's index ``n`` at position 0 (a prompt token, so a chunk of
    rows still finds its log-probs) and id 0 or 1 at every completion token. Pass ``r`` of row ``n`` masks the
    completion positions ``masks[n, r]``; a call finds ``r`` by the masked positions (the last pass with that mask:
    passes with equal masks score nothing of that row but the last) and returns, at each position, the two-token
    logits ``(x, log(1 - e^x))`` with ``x = logp[n, r, j]`` (swapped where the clean token is 1): their log-softmax at
    the clean token is ``x`` and its gradient with respect to ``x`` is exactly 1 (``log(e^x + 1 - e^x) = 0`` for every
    ``x``), so the gradients reaching ``logp`` are the loss's gradients with respect to the token log-probs.

    :param logp: ``[N, R, G]`` float32 log-probs ``< 0`` (a leaf with ``requires_grad`` to read gradients back).
    :param masks: ``[N, R, G]`` bool, the completion positions pass ``r`` masks.
    :returns: ``fn(noisy [n, P + G], clean [n, P + G], attention_mask) -> [n, P + G, 2]`` logits.
    :raises ValueError: ``logp`` and ``masks`` are not both ``[N, R, G]``; a row's masked positions are none of its
        passes'.
    """
    if logp.ndim != 3 or masks.shape != logp.shape:
        raise ValueError(f"given_logprobs needs logp and masks of one shape [N, R, G]; got {tuple(logp.shape)} and "
                         f"{tuple(masks.shape)}")
    P = prompt_length

    def fn(noisy, clean, attn):
        rows = []
        for b in range(noisy.shape[0]):
            n = int(clean[b, 0])
            masked = noisy[b, P:] == mask_id
            x = torch.full_like(logp[n, 0], -1.0)
            if bool(masked.any()):
                match = [r for r in range(masks.shape[1]) if torch.equal(masks[n, r], masked)]
                if not match:
                    raise ValueError(f"row {n}: the masked positions are none of its passes'")
                x = logp[n, match[-1]]
            y = torch.log1p(-torch.exp(x))
            one = clean[b, P:] == 1
            rows.append(torch.stack([torch.where(one, y, x), torch.where(one, x, y)], -1))
        completion = torch.stack(rows)
        return torch.cat([torch.zeros(noisy.shape[0], P, 2, dtype=completion.dtype), completion], 1)

    return fn


def logprob_batch(num_rows: int, completion_length: int, lengths: torch.Tensor | None = None, mask_id: int = 2):
    """The :class:`~dare.diffusion.estimators.ScoringBatch` that :func:`given_logprobs` scores: one prompt token (the
    row's index), ``completion_length`` completion tokens of id 0 except, with ``lengths`` (``[N]`` int64), the stop
    token id 1 (:data:`LOGPROB_EOS`) at position ``lengths[n] - 1`` of each row shorter than ``completion_length``
    (so ``response_tokens: through_first_eos`` scores ``lengths[n]`` tokens); every token attended and in the
    response."""
    from dare.diffusion.estimators import ScoringBatch

    completion = torch.zeros(num_rows, completion_length, dtype=torch.int64)
    if lengths is not None:
        for n, k in enumerate(lengths.tolist()):
            if 0 < k < completion_length:
                completion[n, k - 1] = LOGPROB_EOS
    ids = torch.cat([torch.arange(num_rows)[:, None], completion], 1)
    return ScoringBatch(ids, torch.ones_like(ids), torch.ones(num_rows, completion_length, dtype=torch.bool), 1,
                        mask_id)


def public_step(objective, batch, passes, advantages: torch.Tensor, current: torch.nn.Module,
                old: torch.nn.Module | None = None, ref: torch.nn.Module | None = None, temperature: float = 1.0,
                stop_ids: tuple[int, ...] = (), logits=plain_logits):
    """One inner iteration of DARE's public RL step (:mod:`dare.rl.step`) as ``GRPOTrainer`` runs it on a rollout
    batch and its passes: the rollout policy ``old`` scores the rows the update runs (None: one inner iteration,
    ``old = current.detach()``), the reference policy ``ref`` scores every row when the objective's params use one,
    then :func:`dare.rl.step.update` runs the loss and its backwards into ``current``'s gradients.

    :param logits: ``model -> LogitsFn`` (default :func:`plain_logits`; a Dream-style model shifts its logits).
    :returns: ``(loss, metrics)`` of :func:`dare.rl.step.update`.
    """
    from dare.rl import step
    from dare.rl.rollout import Rollout

    rollout = Rollout(batch, [], torch.zeros(batch.num_rows), {}, advantages, passes=[passes])
    if old is not None:
        rows = step.trained_rows(objective, advantages)
        rollout.old = [step.token_scores(logits(old), batch, passes, temperature, rows=rows)]
    if ref is not None and objective.params.uses_reference_policy():
        rollout.ref = [step.token_scores(logits(ref), batch, passes, temperature)]
    settings = step.StepSettings(objective, temperature, tuple(stop_ids))
    return step.update(settings, logits(current), rollout, 0)


class _FixtureSampler:
    """The rollout sampler of a fixture's trainer step: the completions are the fixture's (``sample_completions`` is
    replaced), so only the attributes ``GRPOTrainer`` reads at construction are here."""

    supports_row_generators = False
    params = types.SimpleNamespace(temperature=1.0)


def trainer_update(objective, estimator, family, tokens, models: dict[str, torch.nn.Module], batch, rewards,
                   optimizer: dict[str, float], output_dir, advantages: torch.Tensor | None = None
                   ) -> tuple[float, dict[str, torch.Tensor], dict[str, torch.Tensor]]:
    """One real optimizer step of :class:`dare.rl.trainer.GRPOTrainer` (``transformers.Trainer.train``, ``max_steps``
    1) from a parity fixture's rollout: ``batch`` (the sampled completions) and ``rewards`` replace the sampler and the
    reward functions; everything else is the trainer's own (the objective's conventions, advantages, the estimator's
    passes, old and reference scores, the update, gradient clipping, AdamW and its parameter groups). The rollout
    policy is ``models["old"]`` (the trainer scores it at rollout time; the current weights when absent) and the
    reference policy ``models["ref"]``; the trainer updates ``models["current"]`` in place with the release's
    ``optimizer`` settings (:func:`official_update`'s keys) at a constant learning rate. ``advantages`` (``[N]``)
    replace the group advantages of ``rewards`` where the release computes them in a separate reward script.

    :returns: ``(loss, clipped gradients, updated weights)``, both dicts by parameter name.
    """
    from unittest import mock

    from transformers import TrainerCallback

    from dare.modeling.lora import ReferencePolicy
    from dare.rl import step as step_module
    from dare.rl import trainer as trainer_module
    from dare.rl.prompts import PromptDataset
    from dare.trainers import DareConfig

    current = models["current"]
    num_prompts = batch.num_rows // objective.params.group_size
    args = DareConfig(output_dir=str(output_dir), per_device_train_batch_size=num_prompts, max_steps=1,
                      save_strategy="no", report_to="none", logging_steps=1, seed=0, lr_scheduler_type="constant",
                      learning_rate=optimizer["learning_rate"], adam_beta1=optimizer["adam_beta1"],
                      adam_beta2=optimizer["adam_beta2"], adam_epsilon=optimizer["adam_epsilon"],
                      weight_decay=optimizer["weight_decay"], max_grad_norm=optimizer["max_grad_norm"])
    clipped: dict[str, torch.Tensor] = {}

    class Capture(TrainerCallback):
        def on_pre_optimizer_step(self, args, state, control, **kwargs):
            clipped.update({n: p.grad.detach().clone() for n, p in current.named_parameters() if p.grad is not None})

    trainer = trainer_module.GRPOTrainer(
        model=current, args=args, train_dataset=PromptDataset([""] * num_prompts, [{}] * num_prompts),
        processing_class=None, family=family, tokens=tokens, objective=objective, estimator=estimator,
        sampler=_FixtureSampler(), reward=None, callbacks=[Capture()])
    if trainer.reference is not None and "ref" in models:
        trainer.reference = ReferencePolicy(models["ref"])
    rollout_policy = models.get("old", current)
    N = batch.num_rows
    scored = ([""] * N, rewards, {}, {"completion_length": 0.0, "reward_errors": 0.0, "time/score": 0.0})
    given = step_module.rollout_advantages if advantages is None else (lambda rewards, params: advantages.clone())
    # given advantages are the reward script's output: its overlong rule and group filter are already in them
    kept = step_module.kept_groups if advantages is None else (lambda rewards, params: None)
    overlong = step_module.overlong_rewards if advantages is None else (lambda rewards, *a: rewards)
    with mock.patch.object(trainer_module, "sample_completions", lambda *a, **k: (batch, {"nfe": 0.0, "edits": 0.0})), \
            mock.patch.object(trainer_module, "score_completions", lambda *a, **k: scored), \
            mock.patch.object(step_module, "rollout_advantages", given), \
            mock.patch.object(step_module, "kept_groups", kept), \
            mock.patch.object(step_module, "overlong_rewards", overlong), \
            mock.patch.object(trainer, "generate_rollout",
                              lambda model, inputs: trainer_module.GRPOTrainer.generate_rollout(trainer, rollout_policy, inputs)):
        out = trainer.train()
    return float(out.training_loss), clipped, {n: p.detach().clone() for n, p in current.named_parameters()}


def update_worst(t: dict[str, torch.Tensor], loss: float, clipped: dict[str, torch.Tensor],
                 updated: dict[str, torch.Tensor], conditioned: float = 1e-5) -> float:
    """The worst relative difference (:func:`rel_diff`) between a trainer step (:func:`trainer_update`) and the
    official one (:func:`official_update`'s tensors in ``t``): the loss, each parameter's clipped gradient, and its
    weight change ``updated - current`` on the elements whose official clipped gradient is at least ``conditioned``
    in magnitude. Below that, AdamW's first step ``lr * g / (|g| + eps)`` turns float noise of ``g`` into changes up
    to ``lr`` (an attention key bias, whose exact gradient is 0, has such elements); those are compared through their
    gradients only."""
    diffs = [rel_diff(torch.tensor([loss]), t["expected.loss"].reshape(1))]
    for n, g in clipped.items():
        want = t[f"expected.clipped_grad.{n}"]
        diffs.append(rel_diff(g, want))
        keep = want.abs() >= conditioned
        if bool(keep.any()):
            start = t[f"current.{n}"]
            diffs.append(rel_diff((updated[n] - start)[keep], (t[f"expected.updated.{n}"] - start)[keep]))
    return max(diffs)
