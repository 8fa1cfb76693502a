"""LoRA adapters (through peft) for every model family, and the reference policy they imply.

A spec's ``model.lora`` (a ``dare.runspec.LoraSpec``: ``r``, ``alpha``, ``dropout``, ``target_modules``,
``include_lm_head``, ``path``) becomes a peft ``LoraConfig`` (LoRA, arXiv
2106.09685: ``W x + (alpha / r) B A x`` with ``B = 0`` at init, as DARE's recipes build it,
docs/algorithms.md §2.5). Target names come from the family adapter, never from a family name:

* ``target_modules: all-linear`` -> ``ModelFamily.lora_target_modules`` (leaf names such as
  ``q_proj``), with the LM head (``ModelFamily.lm_head_module``, a full module name) excluded
  unless ``include_lm_head``. This matters for LLaDA, whose block MLP output and LM head are both
  called ``ff_out``: the head is excluded by its full name, the block projections stay targeted.
* an explicit list -> each name must match a module (peft's rule: the full name, or a suffix after a
  dot); a name that matches nothing is a :class:`~dare.errors.SpecError` listing the candidates.

Checkpoints: adapters are saved in peft's format (``adapter_config.json`` +
``adapter_model.safetensors``) with ``base_model_name_or_path`` set to the absolute base directory,
so an adapter directory is self-describing. :func:`load_adapter_checkpoint` loads base + adapter
merged (what ``model.path: <adapter dir>`` means); :func:`merged_state_dict` gives the official-format
tensors of ``W + (alpha / r) B A`` without touching the live model.

:class:`ReferencePolicy` is the frozen initial policy of preference/RL objectives: the same model
with its adapters disabled when LoRA is on (no second copy), else a frozen deep copy.
"""

from __future__ import annotations

import contextlib
import copy
import json
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from dare.errors import CheckpointError, SpecError

from dare.modeling.checkpoint import ADAPTER_CONFIG, adapter_base, load_adapter_checkpoint

if TYPE_CHECKING:  # pragma: no cover
    from dare.components import ModelFamily

__all__ = [
    "ADAPTER_CONFIG",
    "resolve_lora_targets",
    "lora_config",
    "apply_lora",
    "is_peft_model",
    "trainable_parameter_count",
    "merged_state_dict",
    "save_merged",
    "adapter_base",
    "load_adapter_checkpoint",
    "ReferencePolicy",
]

_LOC = "model.lora.target_modules"


# =========================================================================== target modules
def _linear_names(model: torch.nn.Module) -> list[str]:
    return [name for name, mod in model.named_modules() if isinstance(mod, torch.nn.Linear)]


def _matches(name: str, target: str) -> bool:
    """peft's list rule: the full module name, or a suffix after a dot."""
    return name == target or name.endswith(f".{target}")


def resolve_lora_targets(model: torch.nn.Module, family: ModelFamily, lora) -> tuple[list[str], list[str]]:
    """``(target_modules, exclude_modules)`` for peft, checked against ``model``'s modules.

    The LM head (``family.lm_head_module``) is adapted only with ``include_lm_head`` or when an
    explicit list names it by its full name; a leaf name it shares with block layers (LLaDA's
    ``ff_out``) does not select it.

    :param model: the base model (not yet wrapped by peft; a meta-device model works).
    :returns: target names (leaf names, plus the head's full name when it is wanted) and excluded
        full names (the head, when a target name would otherwise select it).
    :raises SpecError: at ``model.lora.*``: a name matching no module, ``all-linear`` on a family
        that declares no LoRA targets, ``include_lm_head`` with a tied/absent head, or no linear
        layer selected.
    """
    linear = _linear_names(model)
    leaves = sorted({n.rsplit(".", 1)[-1] for n in linear})
    head = family.lm_head_module
    has_head = head in linear
    if lora.target_modules == "all-linear":
        targets = list(family.lora_target_modules)
        if not targets:
            raise SpecError([(_LOC, f"model family {family.name!r} declares no LoRA target modules; list them "
                                    f"explicitly, e.g. [{', '.join(leaves[:4])}]")])
    else:
        targets = list(lora.target_modules)
        names = [n for n, _ in model.named_modules() if n]
        for t in targets:
            if not any(_matches(n, t) for n in names):
                raise SpecError([(_LOC, f"{t!r} matches no module of this {family.name} model; linear modules are "
                                        f"named {', '.join(leaves)} (LM head: {head!r}), or use all-linear")])
    if lora.include_lm_head:
        if not has_head:
            raise SpecError([("model.lora.include_lm_head", f"this {family.name} model has no separate LM head module "
                              f"{head!r} (its output projection is tied to the embeddings); set include_lm_head: "
                              "false")])
        if not any(_matches(head, t) for t in targets):
            targets.append(head)
    wants_head = lora.include_lm_head or head in targets
    exclude = [head] if has_head and not wants_head and any(_matches(head, t) for t in targets) else []
    if not any(_matches(n, t) for n in linear if n not in exclude for t in targets):
        raise SpecError([(_LOC, f"{targets} selects no linear layer of this {family.name} model; linear modules are "
                                f"named {', '.join(leaves)}")])
    return targets, exclude


def lora_config(model: torch.nn.Module, family: ModelFamily, lora):
    """The peft ``LoraConfig`` of a ``LoraSpec`` (plain ``PeftModel``, no task head; bias untouched).

    :raises SpecError: see :func:`resolve_lora_targets`.
    """
    from peft import LoraConfig

    targets, exclude = resolve_lora_targets(model, family, lora)
    return LoraConfig(
        r=lora.r,
        lora_alpha=lora.alpha,
        lora_dropout=lora.dropout,
        target_modules=targets,
        exclude_modules=exclude or None,
        bias="none",
    )


def apply_lora(model, family: ModelFamily, lora, base_name_or_path: str | None = None, seed: int = 0):
    """Wrap ``model`` in a peft ``PeftModel``: fresh adapters, or ``lora.path`` to continue training one.

    Base weights are frozen; only ``lora_A``/``lora_B`` train. Fresh ``A`` matrices are initialised
    under ``seed`` (forked RNG), so the initial adapter does not depend on earlier draws. With
    ``lora.path`` the saved adapter's own config (rank, alpha, targets) applies.

    :param base_name_or_path: the base checkpoint (absolute directory or hub id) written into the
        adapter's config.
    :raises SpecError: bad target names (:func:`resolve_lora_targets`).
    :raises CheckpointError: ``lora.path`` is not an adapter directory.
    """
    from peft import PeftModel, get_peft_model

    if lora.path is not None:
        path = Path(lora.path).expanduser()
        if not (path / ADAPTER_CONFIG).is_file():
            raise CheckpointError(f"model.lora.path {lora.path!r} has no {ADAPTER_CONFIG}; point it at a LoRA adapter "
                                  "directory (a LoRA run's model/adapter or checkpoint-N)")
        peft_model = PeftModel.from_pretrained(model, str(path), is_trainable=True)
        if base_name_or_path is not None:
            peft_model.peft_config["default"].base_model_name_or_path = base_name_or_path
        return peft_model
    config = lora_config(model, family, lora)
    if base_name_or_path is not None:
        model.name_or_path = base_name_or_path  # peft copies it into adapter_config.json
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return get_peft_model(model, config)


def is_peft_model(model) -> bool:
    """Whether ``model`` is a peft ``PeftModel`` (adapters injected)."""
    try:
        from peft import PeftModel
    except ImportError:  # pragma: no cover - peft is a core dependency
        return False
    return isinstance(model, PeftModel)


def trainable_parameter_count(model: torch.nn.Module) -> int:
    """Number of scalar parameters with ``requires_grad`` (what the optimizer updates)."""
    return sum(p.numel() for p in model.parameters() if p.requires_grad)


# =========================================================================== merging / saving
def merged_state_dict(peft_model) -> dict[str, torch.Tensor]:
    """Official-format tensors of a LoRA model with its active adapter merged: ``W + (alpha / r) B A``.

    The live model is not modified (deltas are added to copies). Keys are the base model's own
    names: no ``base_model.model.`` prefix, no ``.base_layer``, no ``lora_`` tensors.

    :returns: name -> tensor (base dtype, detached).
    """
    from peft.tuners.lora import LoraLayer

    base = peft_model.get_base_model()
    adapter = peft_model.active_adapter
    deltas: dict[str, torch.Tensor] = {}
    with torch.no_grad():
        for name, module in base.named_modules():
            if isinstance(module, LoraLayer) and adapter in module.lora_A:
                deltas[f"{name}.weight"] = module.get_delta_weight(adapter)
    out: dict[str, torch.Tensor] = {}
    for key, value in base.state_dict().items():
        if ".lora_" in key:
            continue
        clean = key.replace(".base_layer.", ".")
        value = value.detach()
        if clean in deltas:
            value = (value + deltas[clean].to(value.dtype)).contiguous()
        out[clean] = value
    return out


def save_merged(peft_model, out_dir: str | Path, tokenizer=None) -> None:
    """Write the merged model (official format, via the base model's ``save_pretrained``) to ``out_dir``.

    Not atomic by itself: callers write into an :func:`dare.io.atomic_dir` temporary directory.
    """
    base = peft_model.get_base_model()
    base.save_pretrained(str(out_dir), state_dict=merged_state_dict(peft_model))
    if tokenizer is not None:
        tokenizer.save_pretrained(str(out_dir))


# =========================================================================== reference policy
class ReferencePolicy:
    """The frozen initial policy ``pi_ref`` that KL and DPO terms compare against.

    * LoRA (peft) policy: the *same* model with its adapters disabled (peft ``disable_adapter``);
      with ``B = 0`` at init this is exactly the initial policy and costs no memory (DARE's
      ``ref_in_actor``, docs/algorithms.md §3.9).
    * otherwise: a deep copy of the policy taken at construction, in eval mode, without gradients.

    Use ``with ref.model() as m:`` under ``torch.no_grad()``; the policy's train/eval mode is restored.

    :param accelerator: the trainer's ``accelerate.Accelerator``. The copy is taken before the trainer shards and
        places the policy; at its first use it is sharded and placed like the policy
        (:func:`dare.scaling.sharding.place_frozen`: FSDP2 units on the policy's mesh, a ZeRO-3 inference engine, or the
        policy's device), so each process holds its shard of it, not a whole CPU copy.
    :param placement: ``like_policy`` (above) or ``device_bf16``: a whole bf16 copy on the process's device
        (``train.reference_placement``).
    """

    def __init__(self, policy: torch.nn.Module, accelerator=None, placement: str = "like_policy"):
        self.policy = policy
        self.accelerator = accelerator
        self.placement = placement
        self.shares_weights = is_peft_model(policy)
        self._copy = None if self.shares_weights else copy.deepcopy(policy).eval().requires_grad_(False)
        self._placed = accelerator is None and placement == "like_policy"

    def mix_in(self, alpha: float) -> bool:
        """``ref <- alpha * policy + (1 - alpha) * ref``, parameter by parameter, in place: TRL's reference sync
        (``SyncRefModelCallback._sync_target_model``, huggingface/trl@1bca49515ecd5b85d16e68c42c76670e252e19f1
        ``trl/trainer/callbacks.py:107-109``; TR-DPO, arXiv 2404.09656). Buffers are not mixed (as TRL).

        :param alpha: the policy's weight in ``[0, 1]`` (1 copies the policy).
        :returns: False, and nothing changes, for a peft policy: its reference is the base with the adapters
            disabled, which no sync touches (TRL keeps no reference copy under PEFT either).
        """
        if self._copy is None:
            return False
        with torch.no_grad():
            for ref_p, p in zip(self._copy.parameters(), self.policy.parameters()):
                ref_p.mul_(1.0 - alpha).add_(p.detach().to(ref_p.dtype), alpha=alpha)
        return True

    @contextlib.contextmanager
    def model(self) -> Iterator[Any]:
        """The reference model for the duration of the block (dropout off)."""
        if self._copy is not None:
            if not self._placed:
                from dare.scaling.sharding import place_frozen

                self._copy = place_frozen(self._copy, self.accelerator, placement=self.placement)
                self._placed = True
            yield self._copy
            return
        was_training = self.policy.training
        self.policy.eval()
        try:
            with self.policy.disable_adapter():
                yield self.policy
        finally:
            self.policy.train(was_training)
