"""The run spec's structure: pydantic models of the YAML sections, and the spec hash.

A spec has the sections ``model / data / algorithm / sampler / rewards / train / eval / output``
(docs/run-spec.md). These models are the first validation pass (structure, ``extra="forbid"``
everywhere); components' ``params`` are validated by each component's own ``Params`` model in the
second pass (:mod:`dare.runspec.resolve`).
"""

from __future__ import annotations

import hashlib
import json
import typing
from typing import Any, Literal, Union

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

__all__ = [
    "RunSpec",
    "ModelSpec",
    "NewModelSpec",
    "LoraSpec",
    "DatasetSpec",
    "DataSpec",
    "ComponentSpec",
    "RewardSpec",
    "TrainSpec",
    "BenchmarkSpec",
    "EvalSpec",
    "OutputSpec",
    "LaunchSpec",
    "spec_hash",
]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)  # .inf/.nan in YAML: refused for every float

    @field_validator("*", mode="before")
    @classmethod
    def _no_bool_numbers(cls, value, info):
        """``true``/``false`` for a number field is a mistake (pydantic would read it as 1/0)."""
        if isinstance(value, bool):
            field_info = cls.model_fields.get(info.field_name)
            todo, kinds = [field_info.annotation if field_info else None], set()
            while todo:
                a = todo.pop()
                kinds.add(a)
                todo.extend(typing.get_args(a))
            if bool not in kinds and (int in kinds or float in kinds):
                raise ValueError(f"expected {'an integer' if int in kinds else 'a number'}, not a boolean")
        return value


# --------------------------------------------------------------------------- model
class NewModelSpec(_Strict):
    """Create a fresh, randomly initialised model in the official checkpoint format."""

    family: str = Field(description="Model family name (see `dare plugins`), e.g. llada.")
    preset: str = Field("tiny", description="Family preset, e.g. tiny.")
    config: dict[str, Any] = Field(default_factory=dict, description="config.json overrides, e.g. {d_model: 128}.")
    tokenizer: str = Field(
        "byte",
        description="'byte' builds DARE's byte-level tokenizer with the family's special tokens and chat template; "
        "otherwise a tokenizer directory.",
    )
    seed: int = Field(0, description="Seed of the random initialisation.")


class LoraSpec(_Strict):
    """LoRA adapters through peft."""

    r: int = Field(16, gt=0, description="LoRA rank.")
    alpha: float = Field(32.0, gt=0, description="LoRA alpha (scale = alpha / r).")
    dropout: float = Field(0.0, ge=0.0, lt=1.0, description="Dropout on the LoRA input.")
    target_modules: Union[Literal["all-linear"], list[str]] = Field(
        "all-linear", description="'all-linear' (resolved per family, LM head excluded) or module names."
    )
    include_lm_head: bool = Field(False, description="Also adapt the LM head when target_modules is all-linear.")
    path: str | None = Field(None, description="Existing adapter directory to continue training from.")


class ModelSpec(_Strict):
    """Which model to train or evaluate: a checkpoint (``path``) or a fresh one (``new``)."""

    path: str | None = Field(None, description="Local checkpoint directory or hub id; family from config.json "
                                               "model_type.")
    new: NewModelSpec | None = Field(None, description="Create a new random model instead of loading one.")
    dtype: Literal["float32", "bfloat16", "float16"] = Field("float32", description="Weights dtype.")
    lora: LoraSpec | None = Field(None, description="Train LoRA adapters instead of all weights.")
    gradient_checkpointing: bool = Field(
        False,
        description="Gradient (activation) checkpointing while training: keep only each decoder layer's input and "
        "recompute the layer in the backward pass. Less activation memory for about one more forward per step; the "
        "loss and gradients are unchanged. No effect on evaluation or rollouts (no gradients there).",
    )

    @model_validator(mode="after")
    def _one_source(self):
        if (self.path is None) == (self.new is None):
            raise ValueError("give exactly one of model.path (a checkpoint) or model.new (a fresh model)")
        return self


# --------------------------------------------------------------------------- data
class DatasetSpec(_Strict):
    """A dataset file (parquet or JSONL, in the data_source/prompt/reward_model/extra_info format)."""

    path: str = Field(description="parquet/JSONL file, 'dare://' packaged asset, or hub dataset id.")
    split: str = Field("train", description="Split, for hub datasets.")
    offset: int = Field(0, ge=0, description="Skip the first N rows (with limit: rows offset .. offset+limit-1), e.g. "
                        "to hold rows out for eval.validation.")
    limit: int | None = Field(None, gt=0, description="Use only the first N rows (after offset).")
    prompt_template: str | None = Field(
        None, description="Jinja template over row fields giving the user message, e.g. '{{ extra_info.puzzle }}'."
    )
    response_template: str | None = Field(
        None, description="Jinja template giving the target response (supervised training)."
    )
    chat_template: bool = Field(True, description="Wrap the prompt with the tokenizer's chat template.")
    system_prompt: str | None = Field(None, description="System message prepended when chat_template is on.")


class DataSpec(_Strict):
    train: DatasetSpec | None = None
    eval: DatasetSpec | None = Field(None, description="Held-out rows for in-training metrics.")


# --------------------------------------------------------------------------- components
class ComponentSpec(_Strict):
    name: str = Field(description="Installed component name (see `dare plugins`).")
    params: dict[str, Any] = Field(default_factory=dict, description="Validated by the component's own Params model.")


class RewardSpec(ComponentSpec):
    weight: float = Field(1.0, description="Weight in the summed reward.")
    timeout_s: float = Field(300.0, gt=0, description="Seconds one call of this reward may take; a call past it stops "
                             "the run with an error naming the reward and the sample.")


# --------------------------------------------------------------------------- train / eval / output
class TrainSpec(_Strict):
    """Optimisation settings shared by every trainer."""

    learning_rate: float = Field(gt=0, description="Peak learning rate (AdamW).")
    max_steps: int = Field(gt=0, description="Optimizer steps.")
    per_device_batch_size: int = Field(8, gt=0, description="Examples (or prompts, for RL) per device per step.")
    gradient_accumulation_steps: int = Field(1, gt=0)
    seed: int = 0
    lr_scheduler: Literal["constant", "constant_with_warmup", "linear", "cosine"] = "constant"
    warmup_ratio: float = Field(0.0, ge=0.0, lt=1.0)
    weight_decay: float = Field(0.0, ge=0.0)
    adam_beta1: float = Field(0.9, ge=0.0, lt=1.0)
    adam_beta2: float = Field(0.999, ge=0.0, lt=1.0)
    max_grad_norm: float = Field(1.0, gt=0.0, description="Gradient clipping (global norm).")
    logging_steps: int = Field(10, gt=0)
    save_steps: int = Field(500, gt=0, description="Checkpoint every N steps (official format + trainer state).")
    save_total_limit: int | None = Field(2, gt=0)
    eval_steps: int | None = Field(
        None, gt=0, description="Evaluate every N steps during training: eval.validation when given, else the first "
                                "eval benchmark."
    )
    eval_limit: int | None = Field(None, gt=0, description="Rows of that benchmark used for in-training evaluation.")
    keep_best: bool = Field(
        False,
        description="End training with the weights that scored the highest eval.validation accuracy among the "
        "in-training evaluations (every eval_steps, plus one before the first step; ties keep the earliest) instead of "
        "the last step's. Needs train.eval_steps and eval.validation (never selects on a test benchmark).",
    )
    max_length: int | None = Field(None, gt=0, description="Truncate/filter sequences longer than this (tokens).")
    bf16: bool = Field(False, description="bf16 autocast.")
    resume: bool = Field(True, description="Resume from the last checkpoint in the output directory, if any.")
    num_threads: int | None = Field(None, gt=0, description="torch CPU threads of a command that trains, for all its "
                                    "stages (default: eval.num_threads, else DARE's choice: "
                                    "see dare/scaling/threads.py).")
    max_nonfinite_steps: int = Field(3, gt=0, description="Optimizer steps with a NaN/Inf loss or gradient (RL: or a "
                                     "NaN/Inf reward, named in the error) that are skipped in a row before training "
                                     "stops with an error.")
    packing: bool = Field(
        False,
        description="Padding-free training: the training forwards (SFT, DPO/VRPO, RL likelihood passes) pack the valid "
        "tokens of several examples into one row with block-diagonal attention and per-example positions (block "
        "families: [x_t ; x_0] pairs), same loss per example as padded. With LLaDA/Dream SFT each response ends at its "
        "EOS (no EOS padding to the longest example). See docs/run-spec.md.",
    )
    packing_max_tokens: int | None = Field(
        None, gt=0, description="Tokens per packed row (block families count both halves of a pair); default the whole "
        "micro-batch in one row (with model.gradient_checkpointing: the longest example). Only with train.packing.",
    )
    report_to: list[Literal["tensorboard", "wandb", "trackio", "mlflow"]] = Field(
        default_factory=lambda: ["tensorboard"],
        description="Experiment trackers the training metrics go to (besides metrics.jsonl, always written): "
        "tensorboard (<output.dir>/tensorboard), wandb, trackio, mlflow, through transformers' Trainer integrations; "
        "[] for none. wandb/trackio/mlflow need their package (pip install 'dare-dllm[wandb]' etc.) and read their "
        "usual environment variables (WANDB_MODE=offline, MLFLOW_TRACKING_URI, ...); unset, wandb and MLflow write "
        "under output.dir and trackio to its local store. See docs/run-spec.md.",
    )
    reference_placement: Literal["like_policy", "device_bf16"] = Field(
        "like_policy", description="Where the frozen reference policy (DPO/VRPO, RL with beta > 0; not with LoRA, "
        "where it is the policy with its adapters off) lives: like_policy = sharded and placed like the policy (FSDP2 "
        "units, a ZeRO-3 engine, or the policy's device); device_bf16 = a whole bf16 copy on each process's device "
        "(2 bytes per parameter per process, no gathers at its forwards). See docs/scaling.md.",
    )

    @field_validator("eval_steps", "eval_limit", "save_total_limit", "max_length", mode="before")
    @classmethod
    def _null_disables(cls, value, info):
        """0 or less for an optional count: say that null (or leaving the key out) is how to turn it off."""
        if isinstance(value, (int, float)) and not isinstance(value, bool) and value <= 0:
            off = {"eval_steps": "disable in-training evaluation", "eval_limit": "use every row",
                   "save_total_limit": "keep every checkpoint", "max_length": "keep sequences of any length"}
            raise ValueError(f"must be greater than 0; use null or leave it out to {off[info.field_name]}")
        return value


class BenchmarkSpec(_Strict):
    name: str = Field(description="Evaluator (benchmark) name, e.g. gsm8k, sudoku.")
    path: str | None = Field(None, description="Data file; defaults to the benchmark's file under $DARE_DATA_DIR.")
    offset: int = Field(0, ge=0, description="Skip the first N rows.")
    limit: int | None = Field(None, gt=0, description="Use only the first N rows (after offset).")
    prompt_template: str | None = None
    chat_template: bool = True
    system_prompt: str | None = None
    reward: ComponentSpec | None = Field(None, description="Override the benchmark's reward.")
    reward_timeout_s: float = Field(300.0, gt=0, description="Seconds one call of the benchmark's reward may take; a "
                                    "call past it stops the evaluation with an error naming the reward and the sample.")
    params: dict[str, Any] = Field(
        default_factory=dict,
        description="The benchmark's own params, validated by its Params model (likelihood benchmarks: mc_samples, "
        "mc_scheme, target_delimiter).",
    )


class EvalSpec(_Strict):
    benchmarks: list[Union[BenchmarkSpec, str]] = Field(description="Benchmarks (names or objects).")
    validation: BenchmarkSpec | None = Field(
        None,
        description="Held-out benchmark scored every train.eval_steps during training (instead of the first benchmark) "
        "and used by train.keep_best; give it rows that are neither trained on nor in the test benchmarks, e.g. "
        "training rows held out with data.train.limit and this offset.",
    )
    before_train: bool = Field(True, description="With `dare run`: also evaluate the model before training.")
    batch_size: int = Field(32, gt=0)
    seed: int = 0
    num_threads: int | None = Field(None, gt=0, description="torch CPU threads of a command that only evaluates (dare "
                                    "eval; no train section needed); default train.num_threads, else DARE's choice.")

    @property
    def resolved(self) -> list[BenchmarkSpec]:
        return [BenchmarkSpec(name=b) if isinstance(b, str) else b for b in self.benchmarks]


class OutputSpec(_Strict):
    dir: str = Field(description="Run directory (checkpoints, final model, metrics, report).")
    overwrite: bool = Field(False, description="Allow replacing a directory that holds a different run.")


class LaunchSpec(_Strict):
    """How a spec is meant to be launched at scale (recipes). ``dare run`` does not read it (launch with
    ``accelerate launch --config_file ...``); ``dare profile --estimate`` reads it to size per-GPU memory,
    ``dare sweep`` to launch each run (processes, machines, accelerate config), and it is left out of the spec
    hash (it does not change what a run computes)."""

    accelerate_config: str | None = Field(
        None, description="accelerate config the recipe is launched with (e.g. examples/accelerate/zero2.yaml): its "
        "distributed_type and zero_stage choose the sharding that `dare profile --estimate` assumes.")
    num_processes: int = Field(1, gt=0, description="Processes (GPUs) the recipe's numbers were set for, over all "
                               "machines (`dare sweep` asks SLURM for num_processes / num_machines GPUs per node).")
    num_machines: int = Field(1, gt=0, description="Machines (nodes) the processes are spread over, an equal number "
                              "on each; `dare sweep --launcher slurm` asks for this many nodes per run.")
    gpu: str | None = Field(None, description="GPU the recipe was written for, e.g. 'A100 80GB' (informational).")
    prompt_length: int | None = Field(
        None, gt=0, description="Longest prompt in tokens (the official trainer's max_prompt_length); with the "
        "sampler's gen_length it sets the sequence length `dare profile --estimate` sizes activations for.")

    @model_validator(mode="after")
    def _processes_per_machine(self) -> "LaunchSpec":
        if self.num_processes % self.num_machines:
            raise ValueError(f"num_processes {self.num_processes} is not a multiple of num_machines "
                             f"{self.num_machines}: "
                             "every machine runs the same number of processes; set num_processes to a multiple of it")
        return self


class RunSpec(_Strict):
    """A whole run: model, data, algorithm, sampler, rewards, train, eval, output."""

    model: ModelSpec
    data: DataSpec | None = None
    algorithm: ComponentSpec | None = None
    sampler: ComponentSpec | None = None
    rewards: list[RewardSpec] = Field(default_factory=list)
    train: TrainSpec | None = None
    eval: EvalSpec | None = None
    output: OutputSpec
    launch: LaunchSpec | None = Field(None, description="How the spec is launched at scale (recipes); not read by "
                                                        "`dare run`.")


def spec_hash(spec: RunSpec) -> str:
    """SHA-256 (first 16 hex digits) of the validated spec, ignoring ``output.overwrite``/``train.resume``/
    ``train.report_to``, the default ``train.reference_placement`` and the rewards' time limits."""
    data = spec.model_dump(mode="json")
    data["output"].pop("overwrite", None)
    data.pop("launch", None)
    if data.get("eval") and data["eval"].get("num_threads") is None:  # unset: the hash of specs written before the key
        data["eval"].pop("num_threads", None)
    if data.get("train"):
        data["train"].pop("resume", None)
        data["train"].pop("report_to", None)  # where metrics are logged never changes the run
        if data["train"].get("reference_placement") == "like_policy":  # the default: the hash of specs written before
            data["train"].pop("reference_placement")
    for reward in data.get("rewards") or []:  # a time limit changes no score: the hash of specs written before it
        reward.pop("timeout_s", None)
    ev = data.get("eval") or {}
    for bench in [*(ev.get("benchmarks") or []), ev.get("validation")]:
        if isinstance(bench, dict):
            bench.pop("reward_timeout_s", None)
    blob = json.dumps(data, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(blob.encode()).hexdigest()[:16]

