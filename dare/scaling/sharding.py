"""Sharded models (FSDP2, DeepSpeed ZeRO-3): the launch's sharding on CPU processes, lock-step decoding, frozen copies.

A sharded model gathers its parameters at every forward (a collective), so every process must run the same forwards
in the same order (docs/scaling.md, "Sharded models: the same forwards on every process"): evaluation pads each
process's slice to the same length (:func:`padded_shard`) and decoders run in lock-step (:func:`lockstep`). A frozen
copy of the policy (the reference policy) is sharded and placed like the policy (:func:`place_frozen`); ``dare eval``
shards the model it evaluates (:func:`shard_for_evaluation`). ``DARE_CPU_SHARDING=1``
(:func:`dare.scaling.distributed.cpu_sharding`) applies a launch's FSDP2/ZeRO on CPU processes
(:func:`sharding_accelerator_state`).
"""

from __future__ import annotations

import contextlib
import copy
import os
import sys
from collections.abc import Iterator
from typing import Any

import torch

from dare.scaling.distributed import (CPU_SHARDING_ENV, LaunchError, cpu_sharding, device, is_main, shard, shards_model,
                              world_size)

__all__ = [
    "sharding_accelerator_state",
    "is_sharded",
    "padded_shard",
    "lockstep",
    "place_frozen",
    "shard_for_evaluation",
]


@contextlib.contextmanager
def sharding_accelerator_state() -> Iterator[None]:
    """While the trainer creates its ``accelerate.Accelerator``: under :func:`cpu_sharding`, on a CPU process group,
    let accelerate apply the launch's sharding. No-op otherwise.

    * FSDP (``ACCELERATE_USE_FSDP``): the group is presented to accelerate as data parallel over devices
      (``MULTI_GPU``), so its ``AcceleratorState`` takes the FSDP plugin; the device stays the CPU and the group gloo;
    * DeepSpeed (``ACCELERATE_USE_DEEPSPEED``): ``ACCELERATE_USE_CPU`` is hidden from the ``AcceleratorState`` (which
      turns DeepSpeed on only when it is unset) and DeepSpeed runs on its CPU accelerator (``DS_ACCELERATOR=cpu``,
      set by :func:`setup`; gloo without Intel's oneCCL bindings).

    The main process prints what shards the model (``sharding: FSDP2 over 2 CPU processes ...``).

    :raises LaunchError: the switch with an FSDP version other than 2 (FSDP1 on CPU is not supported).
    """
    fsdp = os.environ.get("ACCELERATE_USE_FSDP", "").lower() in ("1", "true")
    zero = os.environ.get("ACCELERATE_USE_DEEPSPEED", "").lower() in ("1", "true")
    if not (cpu_sharding() and (fsdp or zero) and world_size() > 1 and device().type == "cpu"):
        yield
        return
    from accelerate.state import AcceleratorState, PartialState
    from accelerate.utils import DistributedType

    if fsdp and os.environ.get("FSDP_VERSION", "1") != "2":
        raise LaunchError(f"{CPU_SHARDING_ENV}=1 shards with FSDP2 only, but the launch asks for FSDP version "
                          f"{os.environ.get('FSDP_VERSION', '1')}: set `fsdp_version: 2` in the accelerate config "
                          "(examples/accelerate/fsdp2.yaml) or unset the variable")
    PartialState()  # the trainer's own state (gloo, CPU)
    if AcceleratorState._shared_state.get("distributed_type") in (DistributedType.FSDP, DistributedType.DEEPSPEED):
        yield
        return
    cpu_flag = os.environ.pop("ACCELERATE_USE_CPU", None) if zero else None
    multi_cpu = PartialState._shared_state.get("distributed_type") == DistributedType.MULTI_CPU
    if fsdp and multi_cpu:
        PartialState._shared_state["distributed_type"] = DistributedType.MULTI_GPU
    try:
        yield
    finally:
        if cpu_flag is not None:
            os.environ["ACCELERATE_USE_CPU"] = cpu_flag
        if PartialState._shared_state.get("distributed_type") == DistributedType.MULTI_GPU:  # the Accelerator failed
            PartialState._shared_state["distributed_type"] = DistributedType.MULTI_CPU
    kind = AcceleratorState._shared_state.get("distributed_type")
    if is_main() and kind == DistributedType.FSDP:
        print(f"sharding: FSDP2 over {world_size()} CPU processes ({CPU_SHARDING_ENV}=1)", file=sys.stderr)
    elif is_main() and kind == DistributedType.DEEPSPEED:
        stage = AcceleratorState().deepspeed_plugin.zero_stage
        print(f"sharding: DeepSpeed ZeRO-{stage} over {world_size()} CPU processes ({CPU_SHARDING_ENV}=1)",
              file=sys.stderr)


def is_sharded(model: Any) -> bool:
    """Whether ``model``'s parameters are sharded over the processes, so that each forward is a collective: an FSDP2
    module (``torch.distributed.fsdp.FSDPModule``), an FSDP1 wrapper, or DeepSpeed ZeRO-3 parameters (``ds_id``)."""
    if model is None or world_size() == 1:
        return False
    from torch.distributed.fsdp import FSDPModule
    from torch.distributed.fsdp import FullyShardedDataParallel as FSDP1

    inner = getattr(model, "module", model)  # a DeepSpeed engine or a DDP wrapper
    if isinstance(model, (FSDPModule, FSDP1)) or isinstance(inner, (FSDPModule, FSDP1)):
        return True
    if isinstance(inner, torch.nn.Module):
        return any(isinstance(m, (FSDPModule, FSDP1)) for m in inner.modules()) or \
            any(hasattr(p, "ds_id") for p in inner.parameters())
    return False


def padded_shard(n: int) -> tuple[list[int], int]:
    """This process's slice of ``n`` items (:func:`shard`), padded to ``ceil(n / world)`` items by repeating its last
    item (item ``n - 1`` for an empty slice), so that every process works through the same number of items and
    batches (a sharded model's forwards are collectives). Returns ``(indices, real)``: the first ``real`` indices are
    this process's own items; the rest are padding whose results are dropped. ``n`` = 0 gives ``([], 0)``."""
    mine = list(shard(n))
    if n == 0:
        return [], 0
    per = -(-n // world_size())
    return mine + [mine[-1] if mine else n - 1] * (per - len(mine)), len(mine)


def _any(flag: bool) -> bool:
    """Whether ``flag`` is true on any process (an all-reduce; collective). The flag travels on this process's device
    (:func:`dare.scaling.distributed.device`: nccl groups reduce GPU tensors only)."""
    t = torch.tensor([1 if flag else 0], dtype=torch.int64, device=device())
    torch.distributed.all_reduce(t, op=torch.distributed.ReduceOp.MAX)
    return bool(t.item())


class _LockStep:
    """The forward pre-hook of :func:`lockstep`: before each real forward, every process agrees that some process
    still decodes; :meth:`finish` runs dummy forwards until none does."""

    def __init__(self, model: torch.nn.Module):
        self.model = model
        self.dummy = False
        self.template: torch.Tensor | None = None
        self.handle = model.register_forward_pre_hook(self._before, with_kwargs=True)

    def _before(self, module, args, kwargs):
        if self.dummy:
            return None
        ids = kwargs.get("input_ids", args[0] if args else None)
        if isinstance(ids, torch.Tensor) and self.template is None:
            self.template = ids[:1, :1].detach().clone()
        _any(True)
        return None

    @torch.no_grad()
    def finish(self) -> None:
        self.handle.remove()
        while _any(False):
            self.dummy = True
            try:
                _dummy_forward(self.model, self.template)
            finally:
                self.dummy = False


def _dummy_forward(model: torch.nn.Module, template: torch.Tensor | None) -> Any:
    """One forward of ``model`` on one token (``template``'s first, else id 0), no mask, no cache: what a process that
    is done decoding runs while the others are not (its output is unused)."""
    ids = template[:1, :1] if template is not None else torch.zeros(1, 1, dtype=torch.long)
    return model(input_ids=ids.to(_param_device(model)))


def _param_device(model: torch.nn.Module) -> torch.device:
    for p in model.parameters():
        return p.device if p.device.type != "meta" else torch.device("cpu")
    return torch.device("cpu")


@contextlib.contextmanager
def lockstep(model: Any) -> Iterator[None]:
    """Run the block's forwards of ``model`` in lock-step over the processes when the model is sharded
    (:func:`is_sharded`; a no-op otherwise).

    A sharded model gathers its parameters at every forward, so the processes must run the same number of forwards:
    threshold decoders take data-dependent step counts and a process may have fewer batches. Before each forward of
    ``model`` (a forward pre-hook on the root module, which every family's decoder calls) the processes all-reduce
    "am I still decoding"; when the block ends, a process runs dummy forwards (one token, no cache, results unused)
    while any other process is still decoding. The collective order is then the same on every process:
    ``[agree, forward] * k, agree(nobody)``. Wrap whole decoding calls, never a part of one step. An exception in the
    block ends the lock-step without the final agreement (the other processes then fail in their next collective).
    """
    if not is_sharded(model):
        yield
        return
    root = model.module if hasattr(model, "module") and not hasattr(model, "config") else model
    if getattr(root, "_dare_lockstep", False):  # already in lock-step (an enclosing block): one agreement per forward
        yield
        return
    root._dare_lockstep = True
    try:
        step = _LockStep(root)
        try:
            yield
        except BaseException:
            step.handle.remove()
            raise
        step.finish()
    finally:
        root._dare_lockstep = False


def _without_auto(config: dict, dtype: torch.dtype) -> dict:
    """A DeepSpeed config without accelerate's ``"auto"`` values (filled by the trainer, absent without one):
    ``bf16``/``fp16`` follow the model's dtype, other ``"auto"`` keys are left to DeepSpeed's defaults."""
    out = {}
    for key, value in config.items():
        if key in ("bf16", "fp16") and isinstance(value, dict):
            wanted = dtype == (torch.bfloat16 if key == "bf16" else torch.float16)
            value = {**value, "enabled": wanted if value.get("enabled") == "auto" else value.get("enabled", False)}
        if isinstance(value, dict):
            value = _without_auto(value, dtype)
        if value != "auto":
            out[key] = value
    return out


def place_frozen(model: torch.nn.Module, accelerator, what: str = "reference policy",
                 placement: str = "like_policy") -> Any:
    """Shard and place a frozen model (the reference policy, a frozen copy) like the trainer's policy.

    * FSDP2 (``accelerator.is_fsdp2``): ``accelerate``'s ``fsdp2_prepare_model``, the same units (the family's decoder
      layers) on the same mesh, so each process keeps ``1 / world`` of its weights; its forwards are collectives like
      the policy's;
    * DeepSpeed ZeRO-3: a ``deepspeed.initialize`` engine without optimizer from the policy's ZeRO config (ZeRO-3
      partitions parameters); ZeRO-1/2 shard only optimizer state and gradients, so the model goes to the device;
    * otherwise (one process, DDP, FSDP1): moved to ``accelerator.device`` (the GPU of this process, or the CPU).

    With ``placement="device_bf16"`` (``train.reference_placement``) the model is instead cast to bfloat16 and moved
    whole to ``accelerator.device`` (the device its parameters are on without an accelerator): 2 bytes per parameter
    on every process, and its forwards gather nothing.

    :param what: what the main process names in its ``... : sharded like the policy (FSDP2)`` line.

    Gradients stay off and the model in eval mode. :returns: the module to call (a DeepSpeed engine's module under
    ZeRO-3). Called once, after the trainer has prepared the policy (at the frozen model's first use).
    """
    from accelerate.utils import DistributedType

    model = model.eval().requires_grad_(False)
    if placement == "device_bf16":
        target = accelerator.device if accelerator is not None else _param_device(model)
        if is_main():
            print(f"{what}: whole, in bfloat16, on {target} (train.reference_placement: device_bf16)", file=sys.stderr)
        return model.to(device=target, dtype=torch.bfloat16)
    kind = accelerator.distributed_type
    if kind == DistributedType.FSDP and getattr(accelerator, "is_fsdp2", False):
        from accelerate.utils.fsdp_utils import fsdp2_prepare_model

        model = fsdp2_prepare_model(accelerator, model).eval()
        if is_main():
            print(f"{what}: sharded like the policy (FSDP2)", file=sys.stderr)
        return model
    if kind == DistributedType.DEEPSPEED:
        plugin = accelerator.state.deepspeed_plugin
        config = _without_auto(copy.deepcopy(plugin.deepspeed_config), next(model.parameters()).dtype)
        if config.get("zero_optimization", {}).get("stage") == 3:
            import deepspeed

            for key in ("optimizer", "scheduler"):
                config.pop(key, None)
            config["train_micro_batch_size_per_gpu"] = 1
            config.pop("train_batch_size", None)
            config.pop("gradient_accumulation_steps", None)
            engine, *_ = deepspeed.initialize(model=model, config=config)
            if is_main():
                print(f"{what}: sharded like the policy (ZeRO-3)", file=sys.stderr)
            return engine.module.eval()
    return model.to(accelerator.device)


def shard_for_evaluation(model: torch.nn.Module) -> Any:
    """The model of an evaluation without training (``dare eval``) under a sharding launch (FSDP2, ZeRO-3), sharded
    as training would shard it (:func:`place_frozen` with the launch's ``accelerate.Accelerator``), so that a model
    too large for one device is evaluated in shards, on the devices, with lock-step decoding. Without a sharding
    launch (or with one process) ``model`` is returned unchanged.

    :returns: the module to evaluate (the same module, sharded in place).
    """
    if not shards_model() or world_size() == 1:
        return model
    from accelerate import Accelerator

    with sharding_accelerator_state():
        accelerator = Accelerator()
    return place_frozen(model, accelerator, what="evaluated model")
