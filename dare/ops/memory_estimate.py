"""``dare profile SPEC --estimate``: per-GPU training memory of a spec, computed from its model config.

Nothing is trained and no weight is read: the model is built on the meta device from ``config.json`` (a
model card is enough) to count parameters, and the memory of one training micro-batch is summed from
closed-form terms. The sharding follows the spec's ``launch.accelerate_config`` (``distributed_type``,
DeepSpeed ``zero_stage``, FSDP sharding and CPU offload) and is evaluated for several process counts.

Terms, in bytes per GPU, with ``P`` parameters, ``T`` trainable parameters (LoRA: the adapters peft adds, ``r * (in +
out)`` per adapted linear layer), ``w`` bytes per weight (``model.dtype``), ``m`` bytes per trainable weight as it
is trained, ``N`` processes, and ``shard(x) = x / N`` where the strategy shards that state (else ``x``):

* ``m``: 4 with fp32 master weights, i.e. ``train.bf16`` with 16-bit weights outside DeepSpeed (DARE's trainer on one
  process or DDP, accelerate's FSDP2 upcast: dare/trainers/precision.py) and LoRA adapters (peft keeps them fp32);
  else ``w``;
* weights ``shard_p(F * w + T * m)``, ``F`` the frozen parameters (``P - T``; with LoRA the whole base ``P``);
  sharded by ZeRO-3 and FSDP full sharding. DeepSpeed keeps the module in 16 bits: ``shard_p(P * w)``;
* gradients ``shard_g(T * m)`` (DeepSpeed: ``T * w``); sharded by ZeRO-2/3 and FSDP;
* optimizer (AdamW, two moments): DeepSpeed ``shard_o(T * 12)`` with 16-bit weights (fp32 master copy and
  moments) or ``shard_o(T * 8)`` with fp32 weights; torch's AdamW (DDP, FSDP2) ``shard_o(2 * T * m)``
  (moments in the trained parameters' dtype); 0 on the GPU with optimizer offload;
* reference policy: ``shard_p(P * w)`` when the objective keeps one (preference objectives, RL with ``beta >
  0`` against the reference) and the model has no LoRA adapters (with LoRA the reference is the base with
  adapters disabled). It is a copy taken before training, so 16-bit when ``model.dtype`` is; it is sharded and
  placed like the policy (``dare.scaling.distributed.place_frozen``: FSDP2 units, a ZeRO-3 engine), so sharded exactly
  when the weights are, replicated under DDP and ZeRO-1/2;
* TraceRL's value model (``algorithm.params.value_model``): a copy of the model with a 1-wide head, ``P_v = P -
  V h + h`` parameters, replicated on every process (one process or DDP only): weights, gradients and torch
  AdamW's two moments, ``4 * P_v * m_v`` (``m_v`` = 4 with ``train.bf16``: its fp32 master weights, else ``w``);
* activations of one micro-batch of ``b`` rows of ``s`` tokens (block-diffusion families run ``[x_t ; x_0]``,
  so ``s`` doubles; an online-RL objective's ``activation_budget_mib`` bounds ``b`` as its update does), hidden
  size ``h``, ``L`` layers and MLP width ``i`` (MoE: ``moe_intermediate_size * num_experts_per_tok`` plus shared
  experts): a layer keeps about ``s * b * (10 h + 4 i) * w`` bytes for the
  backward pass (attention inputs, q/k/v, output, norms, residuals; MLP input, gate, up, activation and
  product; fused SDPA keeps no ``s x s`` score matrix); with gradient checkpointing only each layer's input,
  ``L * s * b * h * w``, plus one recomputed layer; without it ``L`` layers. Times ``K``, the forwards kept
  before one backward: a preference objective scores every pass of its estimator (VRPO's ``mc_num``) before its
  loss's backward (the preference trainer), so ``K`` = the passes its estimator draws; RL runs one backward per pass
  and row chunk (``K = 1``);
* logits ``K * s * b * V * (w + 4)`` (the head's output and its float32 log-softmax).

Not counted: the rollout's KV cache and sampling buffers (no gradients; freed before the update), CUDA
context and allocator fragmentation (budget 1-3 GiB), DeepSpeed's communication buckets. The activation
constant follows Korthikanti et al., *Reducing Activation Recomputation in Large Transformer Models* (arXiv
2205.05198, Sec. 4.1: ``34 s b h`` for a GPT layer with a ``4h`` MLP in 16-bit), rewritten for a gated MLP
of width ``i``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import torch
import yaml

from dare.errors import SpecError
from dare.io import resolve_path

__all__ = ["Strategy", "MemoryEstimate", "strategy_from_accelerate_config", "layer_activation_bytes", "logits_bytes",
           "estimate_memory", "estimate_report", "FORMULA"]

_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}
#: the formula, printed under the table
FORMULA = (
    "m = 4 with fp32 master weights (train.bf16 and 16-bit weights outside DeepSpeed; LoRA adapters), else w; "
    "weights = shard_p(F*w + T*m) (DeepSpeed: shard_p(P*w)); gradients = shard_g(T*m) (DeepSpeed: T*w); "
    "optimizer = DeepSpeed shard_o(12*T) (16-bit weights) or torch AdamW shard_o(2*T*m); reference = shard_p(P*w) "
    "when kept without LoRA; value model (TraceRL) = 4*P_v*m_v; activations = K*(L*s*b*h*w + s*b*(10h+4i)*w) with "
    "gradient checkpointing, else K*L*s*b*(10h+4i)*w; logits = K*s*b*V*(w+4); K = forwards kept before one "
    "backward (a preference estimator's passes, e.g. VRPO mc_num); RL rows b at most what activation_budget_mib "
    "allows (auto: weights + gradients + optimizer, unsharded); shard(x) = x/N where the strategy shards it "
    "(dare/ops/memory_estimate.py)"
)


@dataclass(frozen=True)
class Strategy:
    """What a launch shards: parameters, gradients, optimizer state; where the optimizer lives."""

    name: str
    shard_params: bool = False
    shard_grads: bool = False
    shard_optimizer: bool = False
    deepspeed: bool = False
    offload_optimizer: bool = False


def strategy_from_accelerate_config(path: str | None, spec_file: str | None = None) -> Strategy:
    """The :class:`Strategy` of an accelerate config file (None: plain data parallel, DDP).

    A relative ``path`` is looked up in the working directory, then beside ``spec_file`` and in its parent
    folders (a recipe in examples/recipes/ names examples/accelerate/... from the repository root).

    :raises SpecError: at ``launch.accelerate_config`` when the file is missing or not an accelerate config.
    """
    if path is None:
        return Strategy("ddp")
    p = resolve_path(path)
    if not p.is_absolute() and not p.exists() and spec_file is not None:
        p = next((d / path for d in Path(spec_file).resolve().parents if (d / path).is_file()), p)
    try:
        cfg = yaml.safe_load(Path(p).read_text())
        kind = str(cfg.get("distributed_type", "NO")).upper()
    except (OSError, yaml.YAMLError, AttributeError) as exc:
        raise SpecError([("launch.accelerate_config", f"cannot read accelerate config {path!r}: {exc}")]) from None
    if kind == "DEEPSPEED":
        ds = cfg.get("deepspeed_config") or {}
        stage = int(ds.get("zero_stage", 0))
        return Strategy(f"deepspeed-zero{stage}", shard_params=stage >= 3, shard_grads=stage >= 2,
                        shard_optimizer=stage >= 1, deepspeed=True,
                        offload_optimizer=str(ds.get("offload_optimizer_device", "none")) not in ("none", "None"))
    if kind == "FSDP":
        fsdp = cfg.get("fsdp_config") or {}
        strategy = str(fsdp.get("fsdp_sharding_strategy", fsdp.get("fsdp_reshard_after_forward", "FULL_SHARD"))).upper()
        full = strategy in ("FULL_SHARD", "1", "TRUE")
        return Strategy(f"fsdp{fsdp.get('fsdp_version', 1)}", shard_params=full, shard_grads=True, shard_optimizer=True,
                        offload_optimizer=bool(fsdp.get("fsdp_offload_params", False)))
    return Strategy("ddp")


@dataclass
class MemoryEstimate:
    """Bytes per GPU of each term (module docstring) for ``processes`` GPUs; ``forwards`` is ``K``, the forwards
    whose activations are kept before one backward."""

    processes: int
    strategy: str
    parameters: int
    trainable: int
    rows: int
    seq_len: int
    terms: dict[str, float] = field(default_factory=dict)
    forwards: int = 1

    @property
    def total(self) -> float:
        return sum(self.terms.values())


def _mlp_width(cfg) -> int:
    experts = getattr(cfg, "num_experts_per_tok", None)
    moe = getattr(cfg, "moe_intermediate_size", None)
    if experts and moe:
        shared = getattr(cfg, "num_shared_experts", 0) or 0
        return int(moe) * (int(experts) + int(shared))
    for key in ("intermediate_size", "mlp_hidden_size"):
        if getattr(cfg, key, None):
            return int(getattr(cfg, key))
    return 4 * _hidden(cfg)


def _hidden(cfg) -> int:
    for key in ("hidden_size", "d_model"):
        if getattr(cfg, key, None):
            return int(getattr(cfg, key))
    raise SpecError([("model.path", "config.json has neither hidden_size nor d_model: cannot size activations")])


def _layers(cfg) -> int:
    for key in ("num_hidden_layers", "n_layers"):
        if getattr(cfg, key, None):
            return int(getattr(cfg, key))
    raise SpecError([("model.path", "config.json has neither num_hidden_layers nor n_layers: cannot size activations")])


def _counts(ctx, config) -> tuple[int, int, int]:
    """``(P, T, H)``: parameters of the meta-device model, those training would update (LoRA: the adapters
    peft adds with the spec's ``model.lora``, built as training builds them, :func:`dare.modeling.lora.lora_config`),
    and those of its output layer (``V * h``; 0 when it has none of its own)."""
    with torch.device("meta"):
        model = ctx.family.model_class_for(config)(config)
    total = sum(p.numel() for p in {id(p): p for p in model.parameters()}.values())
    getter = getattr(model, "get_output_embeddings", None)
    head = getter() if callable(getter) else None
    head_params = head.weight.numel() if isinstance(head, torch.nn.Linear) else 0
    lora = ctx.spec.model.lora
    if lora is None:
        return total, total, head_params
    from peft import get_peft_model

    from dare.modeling.lora import lora_config

    peft_model = get_peft_model(model, lora_config(model, ctx.family, lora))
    return total, sum(p.numel() for p in peft_model.parameters() if p.requires_grad), head_params


def forwards_before_backward(ctx, config) -> int:
    """``K``: the training forwards whose activations are alive at once. A preference objective scores every pass
    its estimator draws before one backward (the preference trainer's ``sequence_scores``), so ``K`` is the number of
    passes the objective's own estimator (``make_estimator``) draws for a 2-row batch (VRPO's ``mc_num``); other
    objectives backward each pass (and row chunk) in turn: 1."""
    obj = ctx.objective
    if obj.stage != "preference" or not hasattr(obj, "make_estimator"):
        return 1
    from dare.diffusion.estimators.base import ScoringBatch

    estimator = obj.make_estimator(ctx.family, config)
    prompt, gen = 4, 16
    ids = torch.ones(2, prompt + gen, dtype=torch.long)
    batch = ScoringBatch(input_ids=ids, attention_mask=torch.ones_like(ids), prompt_length=prompt, mask_id=0,
                         completion_mask=torch.ones(2, gen, dtype=torch.bool))
    return max(len(estimator.draw(batch, torch.Generator().manual_seed(0))), 1)


def _micro_batch(ctx) -> tuple[int, int]:
    """``(b, s)``: rows of one training forward and their tokens (before the block families' doubling)."""
    spec, obj = ctx.spec, ctx.objective
    train = spec.train
    params = getattr(obj, "params", None)
    if obj.stage == "online_rl":
        group = int(params.group_size)  # an online-RL objective's params are an RLParams
        rows = params.micro_batch_size or train.per_device_batch_size * group
        prompt = (spec.launch.prompt_length if spec.launch and spec.launch.prompt_length else 256)
        gen = ctx.sampler.params.gen_length if ctx.sampler is not None else 0
        return int(rows), int(prompt + gen)
    if train.max_length is None:
        raise SpecError([("train.max_length", "`dare profile --estimate` sizes activations by the longest sequence: "
                                              "set train.max_length")])
    rows = train.per_device_batch_size * (2 if obj.stage == "preference" else 1)  # chosen + rejected
    return int(rows), int(train.max_length)


def _budget_rows(ctx, config, rows: int, seq_len: int, w: int, state: float) -> int:
    """``rows`` bounded by an online-RL objective's ``activation_budget_mib`` (with ``micro_batch_size`` null) as the
    update bounds its row chunks (:meth:`dare.rl.step.StepSettings.micro_batch_size`): ``auto`` is the unsharded
    training ``state`` (weights, gradients, AdamW moments), a number is MiB."""
    params = getattr(ctx.objective, "params", None)
    budget = getattr(params, "activation_budget_mib", None)
    if ctx.objective.stage != "online_rl" or budget is None or params.micro_batch_size is not None:
        return rows
    per_row = (layer_activation_bytes(config, 1, seq_len, w, ctx.spec.model.gradient_checkpointing)
               + logits_bytes(config, 1, seq_len, w))
    total = state if budget == "auto" else float(budget) * 2**20
    return max(1, min(rows, int(total // per_row)))


def _keeps_value_model(ctx) -> bool:
    return ctx.objective.stage == "online_rl" and ctx.objective.params.trains_value_model()


def _keeps_reference(ctx) -> bool:
    """Whether training holds a reference copy: the trainers' rule (the preference trainer: always; dare.rl.trainer:
    ``beta > 0`` against the reference, not TraceRL's ``kl_target: rollout``), and no LoRA (adapters disabled)."""
    if ctx.spec.model.lora is not None:
        return False
    if ctx.objective.stage == "preference":
        return True
    if ctx.objective.stage == "online_rl":
        return ctx.objective.params.uses_reference_policy()
    return False


def layer_activation_bytes(config, rows: int, seq_len: int, bytes_per_value: int,
                           gradient_checkpointing: bool = False) -> float:
    """Bytes a training forward of ``rows`` x ``seq_len`` tokens keeps for its backward in the layers (module
    docstring): ``L * s * b * (10 h + 4 i) * w``, or with gradient checkpointing ``L * s * b * h * w + s * b * (10 h +
    4 i) * w`` (each layer's input plus one recomputed layer). ``config`` is the model's ``config.json`` (hidden size,
    layers, MLP width). :raises SpecError: the config lacks a hidden size or a layer count."""
    h, n_layers, i = _hidden(config), _layers(config), _mlp_width(config)
    layer = seq_len * rows * (10 * h + 4 * i) * bytes_per_value
    if gradient_checkpointing:
        return float(n_layers * seq_len * rows * h * bytes_per_value + layer)
    return float(n_layers * layer)


def logits_bytes(config, rows: int, seq_len: int, bytes_per_value: int) -> float:
    """Bytes of the logits of ``rows`` x ``seq_len`` tokens and their float32 log-softmax: ``s * b * V * (w + 4)``."""
    return float(seq_len * rows * int(getattr(config, "vocab_size")) * (bytes_per_value + 4))


def estimate_memory(ctx, processes: list[int]) -> list[MemoryEstimate]:
    """Per-GPU memory of ``ctx``'s training for each process count in ``processes``.

    :param ctx: a :class:`~dare.runspec.resolve.ResolvedSpec` with its family, config, objective and ``train``
        section resolved (``resolve_spec(..., config_only=True)`` suffices: no weights).
    :raises SpecError: the spec has no objective or train section, or the config lacks the sizes needed.
    """
    from transformers import AutoConfig

    from dare.modeling.locate import trained_model_dir
    from dare.plugins.manager import register_auto_classes

    spec = ctx.spec
    missing = [(loc, what) for loc, what, absent in (
        ("model.path", "a model directory or card (model.new has no config.json to read)", spec.model.path is None),
        ("algorithm", "the objective to size", ctx.objective is None),
        ("train", "the batch sizes", spec.train is None)) if absent]
    if missing or ctx.family is None:
        raise SpecError([(loc, f"`dare profile --estimate` needs {what}") for loc, what in missing]
                        or [("model.path", "`dare profile --estimate` needs a model whose family resolves")])
    register_auto_classes()
    config = AutoConfig.from_pretrained(str(trained_model_dir(resolve_path(spec.model.path))))
    total, trainable, head = _counts(ctx, config)
    strategy = strategy_from_accelerate_config(spec.launch.accelerate_config if spec.launch else None, ctx.source)
    w = _BYTES[spec.model.dtype]
    lora = spec.model.lora is not None
    mixed = bool(spec.train.bf16)
    m = 4 if lora or (mixed and w == 2) else w  # bytes per trainable weight as trained (fp32 master weights)
    frozen = total if lora else total - trainable
    b, s = _micro_batch(ctx)
    if ctx.family.attention == "block":
        s *= 2
    h = _hidden(config)
    b = _budget_rows(ctx, config, b, s, w, frozen * w + 4 * trainable * m)
    k = forwards_before_backward(ctx, config)
    act = k * layer_activation_bytes(config, b, s, w, spec.model.gradient_checkpointing)
    value = 0.0
    if _keeps_value_model(ctx):
        value = 4.0 * (total - head + h) * (4 if mixed else w)
    out = []
    for n in processes:
        def shard(x, on):
            return x / n if on else x
        if strategy.deepspeed:
            weights, grads = total * w + (trainable * w if lora else 0), trainable * w
            opt = trainable * (12 if w == 2 else 8)
        else:
            weights, grads, opt = frozen * w + trainable * m, trainable * m, 2 * trainable * m
        terms = {
            "weights": shard(weights, strategy.shard_params),
            "gradients": shard(grads, strategy.shard_grads),
            "optimizer": 0.0 if strategy.offload_optimizer else shard(opt, strategy.shard_optimizer),
            "reference policy": shard(total * w, strategy.shard_params) if _keeps_reference(ctx) else 0.0,
            "value model": value,
            "activations": float(act),
            "logits": float(k * logits_bytes(config, b, s, w)),
        }
        out.append(MemoryEstimate(n, strategy.name, total, trainable, b, s, terms, k))
    return out


def estimate_report(spec: str, overrides: list[str], gpus: str | None, as_json: bool,
                    unset: list[str] | None = None) -> str:
    """What ``dare profile SPEC --estimate`` prints: a table (GiB per term and process count) and the formula, or
    JSON (bytes). Only the model, objective, sampler, train and launch sections are checked: the data files
    need not be on this machine.

    :param gpus: process counts, comma-separated; None: 1 and the spec's ``launch.num_processes`` (its own launch).
    :raises DareError: ``gpus`` is not a comma-separated list of positive counts.
    :raises SpecError: the sections the estimate reads are invalid.
    """
    import json

    from dare.errors import DareError
    from dare.runspec import load_spec, resolve_spec

    loaded = load_spec(spec, overrides=list(overrides), unset=list(unset or []), check=False)
    if gpus is None:
        counts = list(dict.fromkeys([1, loaded.launch.num_processes if loaded.launch else 1]))
    else:
        try:
            counts = [int(g) for g in gpus.split(",")]
            if min(counts) < 1:
                raise ValueError
        except ValueError:
            raise DareError(f"--gpus {gpus!r}: give process counts separated by commas, e.g. --gpus 1,8") from None
    ctx = resolve_spec(loaded, spec, config_only=True)
    ctx.problems = [(loc, msg) for loc, msg in ctx.problems
                    if not loc.startswith(("data", "eval", "rewards", "output"))]
    ctx.raise_problems()
    estimates = estimate_memory(ctx, counts)
    if as_json:
        return json.dumps({"formula": FORMULA, "estimates": [
            {**{k: v for k, v in vars(e).items() if k != "terms"}, "terms_bytes": e.terms, "total_bytes": e.total}
            for e in estimates]}, indent=2)
    first = estimates[0]
    lines = [f"{spec}: per-GPU memory estimate, {first.strategy}, {first.parameters:,} parameters ({first.trainable:,} "
             f"trainable), micro-batch {first.rows} rows x {first.seq_len} tokens"
             + (f", {first.forwards} forwards kept before one backward" if first.forwards > 1 else ""),
             "| term | " + " | ".join(f"{e.processes} GPU{'s' if e.processes > 1 else ''} (GiB)" for e in estimates)
             + " |",
             "|---|" + "---:|" * len(estimates)]
    for term in [*first.terms, "total"]:
        vals = [(e.total if term == "total" else e.terms[term]) / 2**30 for e in estimates]
        lines.append(f"| {term} | " + " | ".join(f"{v:.2f}" for v in vals) + " |")
    return "\n".join(lines + [f"formula: {FORMULA}"])
