"""The bad-input corpus: every case goes through the real CLI and must end with exit status 2, one
paragraph naming the spec field or the file (no traceback), and no file created or changed outside the run's
staging area (its ``output.dir``; nothing at all for ``validate``, ``generate`` and ``export``).

Cases build on one small world per module: a tiny LLaDA checkpoint, a LoRA adapter on it, an 8-row parquet
file and a finished 1-step SFT run (for resume cases). Most cases are validation-only. A case whose failure
lies in a file owned elsewhere is marked ``xfail(strict=True)`` naming that area.
"""

from __future__ import annotations

import hashlib
import json
import os
import pickle
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import pytest
import torch
import yaml


@pytest.fixture(autouse=True, scope="module")
def _one_thread():
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


# =========================================================================== the world (built once)
@dataclass
class World:
    root: Path
    model: Path
    data: Path
    adapter: Path
    run: Path  # a finished run of run_spec(): checkpoints/checkpoint-1, model/


def train_spec(w: World | None, model: str, out: str, **train) -> dict:
    data = str(w.data) if w is not None else "dare://sudoku/train.parquet"
    return {
        "model": {"path": model},
        "data": {"train": {"path": data, "limit": 8, "prompt_template": "{{ extra_info.puzzle }}",
                           "response_template": "{{ reward_model.ground_truth }}", "chat_template": False}},
        "algorithm": {"name": "sft"},
        "train": {"learning_rate": 1e-3, "max_steps": 1, "per_device_batch_size": 2, "save_steps": 1,
                  "logging_steps": 1, "num_threads": 1, "seed": 0, **train},
        "output": {"dir": out},
    }


def eval_spec(w: World, model: str, out: str, bench_path: str | None = None) -> dict:
    return {
        "model": {"path": model},
        "sampler": {"name": "llada", "params": {"gen_length": 4, "block_length": 4, "steps": 4}},
        "eval": {"batch_size": 4, "benchmarks": [{"name": "sudoku", "path": bench_path or str(w.data), "limit": 2,
                                                  "prompt_template": "{{ extra_info.puzzle }}", "chat_template": False,
                                                  "reward": {"name": "sudoku", "params": {"require_answer_tags": False}}}]},
        "output": {"dir": out},
    }


@pytest.fixture(scope="module")
def world(tmp_path_factory, tiny_llada_dir) -> World:
    import pyarrow.parquet as pq

    from dare import assets
    from dare.modeling import load_model
    from dare.modeling.lora import apply_lora
    from dare.run import Run
    from dare.runspec import LoraSpec, validate_spec

    root = tmp_path_factory.mktemp("bad-inputs")
    w = World(root, root / "world" / "model", root / "world" / "train.parquet", root / "world" / "adapter",
              root / "world" / "run")
    shutil.copytree(tiny_llada_dir, w.model)
    pq.write_table(pq.read_table(assets.path("sudoku/train.parquet")).slice(0, 8), w.data)
    lm = load_model(w.model)
    peft_model = apply_lora(lm.model, lm.family, LoraSpec(r=2, alpha=4), base_name_or_path=str(w.model))
    peft_model.save_pretrained(str(w.adapter))
    lm.tokenizer.save_pretrained(str(w.adapter))
    Run(validate_spec(train_spec(w, str(w.model), str(w.run)))).execute(train=True, evaluate=False)
    assert (w.run / "checkpoints" / "checkpoint-1" / "model.safetensors").is_file()
    return w


# =========================================================================== helpers for cases
def write_spec(c: Path, spec: dict) -> str:
    (c / "spec.yaml").write_text(yaml.safe_dump(spec, sort_keys=False))
    return "spec.yaml"


def copy_model(w: World, c: Path, name: str = "model") -> Path:
    return Path(shutil.copytree(w.model, c / name))


def edit_json(path: Path, **changes) -> None:
    data = json.loads(path.read_text())
    data.update(changes)
    path.write_text(json.dumps(data))


def damage(path: Path, how: str) -> None:
    data = path.read_bytes()
    path.write_bytes({"empty": b"", "truncated": data[: len(data) // 2], "random": os.urandom(4096)}[how])


def edit_tensors(model: Path, fn: Callable[[dict], None]) -> None:
    from safetensors.torch import load_file, save_file

    f = model / "model.safetensors"
    state = load_file(str(f))
    fn(state)
    save_file(state, str(f), metadata={"format": "pt"})


def poison(state: dict, value: float = float("nan")) -> None:
    state["model.transformer.blocks.0.q_proj.weight"].view(-1)[3] = value


def resumable_run(w: World, c: Path, **train) -> tuple[Path, str]:
    """A copy of the world's finished run, re-labelled as the run of this case's spec (same spec hash)."""
    from dare.runspec import spec_hash, validate_spec

    run = Path(shutil.copytree(w.run, c / "out"))
    spec = train_spec(w, str(w.model), "out", **train)
    edit_json(run / "run.json", spec_hash=spec_hash(validate_spec(spec, check=False)))
    return run / "checkpoints" / "checkpoint-1", write_spec(c, spec)


def tiny_model_with(c: Path, **overrides) -> Path:
    from dare.testing import tiny_model

    tiny_model("llada", c / "model", **overrides)
    return c / "model"


class _Payload:
    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return os.system, (f"touch {self.marker}",)


def bad_sharded_checkpoint(w: World, c: Path) -> Path:
    """An accelerate FSDP sharded folder whose ``.metadata`` pickle would create ``PWNED`` when unpickled."""
    import warnings

    import torch.distributed.checkpoint as dcp
    from safetensors.torch import load_file

    src = c / "checkpoint-10"
    state = load_file(str(w.model / "model.safetensors"))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        dcp.save({"model": state}, storage_writer=dcp.FileSystemWriter(str(src / "pytorch_model_fsdp_0")), no_dist=True)
    (src / "pytorch_model_fsdp_0" / ".metadata").write_bytes(pickle.dumps(_Payload(c / "PWNED"), protocol=4))
    return src


# =========================================================================== the cases
@dataclass
class Case:
    id: str
    make: Callable[[World, Path], list[str]]  # builds the case's files under its directory; returns the CLI args
    needles: tuple[str, ...]  # what the one-paragraph message must name (field, file, cause)
    staging: str | None = None  # the run directory (relative to the case directory) the command may write
    xfail: str | None = None
    unprivileged: bool = False  # run as an unprivileged user in a subprocess (read-only directories as root)


def _validate(spec_fn):
    return lambda w, c: ["validate", write_spec(c, spec_fn(w, c))]


def _model_case(edit, cmd: str = "validate"):
    """A copy of the tiny model, edited, as model.path of a training spec."""
    def make(w, c):
        m = copy_model(w, c)
        edit(m)
        return [cmd, write_spec(c, train_spec(w, "model", "out"))]
    return make


def _raw_spec(text: str):
    def make(w, c):
        (c / "spec.yaml").write_text(text)
        return ["validate", "spec.yaml"]
    return make


def _data_case(write_file, name: str):
    """``data.train.path`` is the file ``name`` that ``write_file`` writes (or not) in the case directory."""
    def make(w, c):
        write_file(c / name)
        spec = train_spec(w, str(w.model), "out")
        spec["data"]["train"]["path"] = name
        return ["validate", write_spec(c, spec)]
    return make


def _empty_parquet(p: Path) -> None:
    """A parquet file with the training file's columns and zero rows."""
    import pyarrow.parquet as pq

    from dare import assets

    pq.write_table(pq.read_table(assets.path("sudoku/train.parquet")).slice(0, 0), p)


def _adapter_case(edit, cmd: str = "validate"):
    def make(w, c):
        a = Path(shutil.copytree(w.adapter, c / "adapter"))
        edit(a)
        if cmd == "generate":
            return ["generate", "--model", "adapter", "--prompt", "12", "--no-chat", "--param", "gen_length=4",
                    "--param", "block_length=4", "--param", "steps=4"]
        return [cmd, write_spec(c, train_spec(w, "adapter", "out"))]
    return make


def _readonly_output(cmd: str, mode: int = 0o555):
    """output.dir inside a directory this user may not write (0555) or not even enter (0700, owned by root)."""
    def make(w, c):
        ro = c / "readonly"
        ro.mkdir()
        spec = train_spec(None, "unused", "readonly/out")
        spec["model"] = {"new": {"family": "llada", "preset": "tiny"}}
        args = [cmd, write_spec(c, spec)]
        ro.chmod(mode)
        return args
    return make


def _output_case(prepare):
    def make(w, c):
        prepare(c)
        return ["validate", write_spec(c, train_spec(w, str(w.model), "out"))]
    return make


def _spec_with_output(path: str):
    """``output.dir: path`` where the case directory's ``parent`` is a file."""
    def make(w, c):
        (c / "parent").write_text("a file")
        return ["validate", write_spec(c, train_spec(w, str(w.model), path))]
    return make


def _generate(model_arg: str, prepare=None):
    def make(w, c):
        if prepare is not None:
            prepare(w, c)
        return ["generate", "--model", model_arg, "--prompt", "12", "--no-chat", "--param", "gen_length=4",
                "--param", "block_length=4", "--param", "steps=4"]
    return make


def _resume_case(edit, **train):
    def make(w, c):
        ckpt, spec = resumable_run(w, c, **train)
        edit(ckpt)
        return ["train", spec]
    return make


def _export_case(prepare, out: str = "exported", extra=()):
    def make(w, c):
        src = prepare(w, c)
        return ["export", str(src), out, *extra]
    return make


def _different_run(c: Path) -> None:
    (c / "out").mkdir()
    (c / "out" / "run.json").write_text(json.dumps({"spec_hash": "0123456789abcdef"}))
    (c / "out" / "model").mkdir()


def _not_a_run_dir(c: Path) -> None:
    (c / "out").mkdir()
    (c / "out" / "notes.txt").write_text("mine")


def _runs_typo(w, c):
    (c / "runs" / "quickstart-sft-short").mkdir(parents=True)
    return ["validate", write_spec(c, train_spec(w, "runs/quickstart-sft-shrt", "out"))]


def _hub_not_cached(w, c):
    """`dare run` of a hub id missing from the cache with HF_HUB_OFFLINE=1 (the test session sets it)."""
    return ["run", write_spec(c, train_spec(w, "some-org/not-a-cached-model", "out"))]


def _small_tokenizer(w, c):
    tiny_model_with(c, vocab_size=4096, embedding_size=4096)
    return ["validate", write_spec(c, train_spec(w, "model", "out"))]


def _large_tokenizer(w, c):
    tiny_model_with(c, vocab_size=200, embedding_size=200)
    return ["validate", write_spec(c, train_spec(w, "model", "out"))]


def _card_without_vocab(w, c):
    from dare.testing import shared_path

    card = shared_path("model-cards", "SDAR-30B-A3B-Chat")
    return ["validate", write_spec(c, train_spec(w, str(card), "out"))]


def _drop_tensor(m: Path) -> None:
    edit_tensors(m, lambda s: s.pop("model.transformer.blocks.0.q_proj.weight"))


def _reshape_tensor(m: Path) -> None:
    def fn(s):
        s["model.transformer.blocks.0.q_proj.weight"] = s["model.transformer.blocks.0.q_proj.weight"][:-1].clone()
    edit_tensors(m, fn)


def _extra_tensor(m: Path) -> None:
    edit_tensors(m, lambda s: s.__setitem__("model.transformer.stray.weight", torch.zeros(3)))


def _sharded_missing(m: Path) -> None:
    """The model re-saved as two shards with an index, then the second shard deleted."""
    from safetensors.torch import load_file, save_file

    state = load_file(str(m / "model.safetensors"))
    (m / "model.safetensors").unlink()
    names = sorted(state)
    parts = {"model-00001-of-00002.safetensors": names[: len(names) // 2],
             "model-00002-of-00002.safetensors": names[len(names) // 2:]}
    for fname, keys in parts.items():
        save_file({k: state[k] for k in keys}, str(m / fname), metadata={"format": "pt"})
    (m / "model.safetensors.index.json").write_text(json.dumps(
        {"metadata": {}, "weight_map": {k: f for f, ks in parts.items() for k in ks}}))
    (m / "model-00002-of-00002.safetensors").unlink()


def _bad_index(m: Path) -> None:
    (m / "model.safetensors.index.json").write_text("{not json")


def _no_tokenizer(m: Path) -> None:
    for f in ("tokenizer.json", "tokenizer_config.json"):
        (m / f).unlink()


def _tokenizer_json_garbage(m: Path) -> None:
    (m / "tokenizer.json").write_text("{\"version\": ")


def _optimizer_pickle(ckpt: Path) -> None:
    torch.save({"state": {0: _Payload(ckpt / "PWNED")}, "param_groups": []}, ckpt / "optimizer.pt")


def _later_row_lacks_field(w: World, c: Path) -> list[str]:
    """`dare train` of a JSONL file whose row 0 fits the template (validation renders it) but row 1 lacks the field:
    refused at run time, naming the spec field, with nothing left in output.dir."""
    rows = [{"extra_info": {"puzzle": "12"}, "answer": "3"}, {"extra_info": {"grid": "12"}, "answer": "3"}]
    (c / "train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    spec = train_spec(w, str(w.model), "out/run")  # a parent the run creates, removed with it
    spec["data"]["train"].update(path="train.jsonl", response_template="{{ answer }}")
    return ["train", write_spec(c, spec)]


def _lone_surrogate(w: World, c: Path) -> list[str]:
    """`dare train` of a JSONL file whose row 2 holds a lone surrogate (``"\\ud800"``: valid JSON, not Unicode):
    refused naming the file, the line and the column, before any tokenizer sees it."""
    lines = [json.dumps({"extra_info": {"puzzle": "12"}, "answer": "3"}),
             '{"extra_info": {"puzzle": "1\\ud800 2"}, "answer": "3"}']
    (c / "train.jsonl").write_text("\n".join(lines) + "\n")
    spec = train_spec(w, str(w.model), "out/run")
    spec["data"]["train"].update(path="train.jsonl", response_template="{{ answer }}")
    return ["train", write_spec(c, spec)]


def _stepped_trainer_state(ckpt: Path) -> None:
    """Valid types, but a step the checkpoint was not saved at (a resume would skip training to 99999)."""
    state = json.loads((ckpt / "trainer_state.json").read_text())
    state["global_step"] = 99999
    (ckpt / "trainer_state.json").write_text(json.dumps(state))


def _retyped_trainer_state(ckpt: Path) -> None:
    """Valid JSON with a wrong type: ``"global_step": "two"``."""
    state = json.loads((ckpt / "trainer_state.json").read_text())
    state["global_step"] = "two"
    (ckpt / "trainer_state.json").write_text(json.dumps(state))


CASES: list[Case] = [
    # ------------------------------------------------------------------ spec files
    Case("spec-missing-file", lambda w, c: ["validate", "nope.yaml"], ("nope.yaml", "does not exist")),
    Case("spec-not-yaml", _raw_spec("model: [unclosed\n"), ("spec.yaml", "not valid YAML", "line 2, column 1")),
    Case("spec-not-a-mapping", _raw_spec("- model\n- output\n"), ("spec.yaml", "must be a mapping")),
    Case("spec-unknown-key", _validate(lambda w, c: {**train_spec(w, str(w.model), "out"), "modle": {}}),
         ("modle", "unknown key")),
    Case("spec-negative-learning-rate", _validate(lambda w, c: train_spec(w, str(w.model), "out", learning_rate=-1.0)),
         ("train.learning_rate",)),
    Case("spec-path-and-new", _validate(lambda w, c: {**train_spec(w, str(w.model), "out"),
                                                      "model": {"path": str(w.model), "new": {"family": "llada"}}}),
         ("model", "exactly one of model.path")),
    Case("spec-bad-override", lambda w, c: ["validate", write_spec(c, train_spec(w, str(w.model), "out")), "--set",
                                            "train.max_steps"], ("train.max_steps", "must look like")),
    Case("spec-unknown-objective", _validate(lambda w, c: {**train_spec(w, str(w.model), "out"),
                                                           "algorithm": {"name": "stf"}}), ("algorithm.name",)),
    Case("spec-inf-learning-rate", lambda w, c: ["train", write_spec(c, train_spec(w, str(w.model), "out",
                                                                                   learning_rate=float("inf")))],
         ("train.learning_rate", "finite number", "(got inf)")),
    Case("spec-inf-max-grad-norm", _validate(lambda w, c: train_spec(w, str(w.model), "out", max_grad_norm=float("inf"))),
         ("train.max_grad_norm", "finite number")),
    Case("spec-nan-lora-alpha", _validate(lambda w, c: {**train_spec(w, str(w.model), "out"), "model": {
        "path": str(w.model), "lora": {"alpha": float("nan")}}}), ("model.lora.alpha", "finite number")),
    Case("spec-inf-objective-param", _validate(lambda w, c: {**train_spec(w, str(w.model), "out"), "algorithm": {
        "name": "dpo", "params": {"beta": float("inf")}}}), ("algorithm.params.beta", "finite number")),
    Case("spec-inf-sampler-param", _validate(lambda w, c: {**train_spec(w, str(w.model), "out"), "sampler": {
        "name": "llada", "params": {"temperature": float("-inf")}}}), ("sampler.params.temperature", "finite number")),
    Case("spec-eval-steps-zero", _validate(lambda w, c: train_spec(w, str(w.model), "out", eval_steps=0)),
         ("train.eval_steps", "must be greater than 0", "use null or leave it out to disable in-training evaluation")),
    Case("spec-bad-dtype", _validate(lambda w, c: {**train_spec(w, str(w.model), "out"),
                                                   "model": {"path": str(w.model), "dtype": "float64"}}), ("model.dtype",)),
    # ------------------------------------------------------------------ model paths
    Case("model-run-dir-typo", _runs_typo, ("model.path", "runs/quickstart-sft-shrt", "no such directory",
                                            "not looked up on the hub")),
    Case("model-relative-missing", _validate(lambda w, c: train_spec(w, "./checkpoints/last", "out")),
         ("model.path", "no such directory './checkpoints/last'")),
    Case("model-path-is-a-file", lambda w, c: (c.joinpath("weights.bin").write_bytes(b"x"),
                                               ["validate", write_spec(c, train_spec(w, "weights.bin", "out"))])[1],
         ("model.path", "'weights.bin' is a file")),
    Case("model-hub-id-offline-not-cached", _hub_not_cached, ("some-org/not-a-cached-model", "HF_HUB_OFFLINE"),),
    Case("model-no-config", _model_case(lambda m: (m / "config.json").unlink()), ("model.path", "has no config.json")),
    Case("model-config-not-json", _model_case(lambda m: (m / "config.json").write_text("{")),
         ("model.path", "config.json is not valid JSON")),
    Case("model-config-random-bytes", _model_case(lambda m: (m / "config.json").write_bytes(os.urandom(256))),
         ("model.path", "config.json is not valid JSON")),
    Case("model-config-unknown-type", _model_case(lambda m: edit_json(m / "config.json", model_type="gpt9")),
         ("model.path", "model_type 'gpt9'")),
    Case("model-config-bad-value", _model_case(lambda m: edit_json(m / "config.json", n_heads=3)),
         ("model.path", "config.json")),
    Case("weights-empty", _model_case(lambda m: damage(m / "model.safetensors", "empty")),
         ("model.path", "model.safetensors is empty (0 bytes)")),
    Case("weights-truncated", _model_case(lambda m: damage(m / "model.safetensors", "truncated")),
         ("model.path", "model.safetensors is truncated or damaged")),
    Case("weights-random-bytes", _model_case(lambda m: damage(m / "model.safetensors", "random")),
         ("model.path", "model.safetensors is not a safetensors file")),
    Case("weights-missing", _model_case(lambda m: (m / "model.safetensors").unlink()),
         ("model.path", "has no *.safetensors weights")),
    Case("weights-missing-tensor", _model_case(_drop_tensor),
         ("model.path", "'model.transformer.blocks.0.q_proj.weight'", "is missing from the checkpoint")),
    Case("weights-wrong-shape", _model_case(_reshape_tensor),
         ("model.path", "'model.transformer.blocks.0.q_proj.weight' has shape")),
    Case("weights-unexpected-tensor", _model_case(_extra_tensor), ("model.path", "unexpected tensor 'model.transformer.stray.weight'")),
    Case("weights-index-missing-shard", _model_case(_sharded_missing),
         ("model.path", "model-00002-of-00002.safetensors", "is missing")),
    Case("weights-index-not-json", _model_case(_bad_index), ("model.path", "model.safetensors.index.json is not a readable")),
    Case("weights-nan-run", _model_case(lambda m: edit_tensors(m, poison), cmd="run"),
         ("model.safetensors", "'model.transformer.blocks.0.q_proj.weight'", "NaN or infinite")),
    Case("weights-inf-train", _model_case(lambda m: edit_tensors(m, lambda s: poison(s, float("inf"))), cmd="train"),
         ("model.safetensors", "'model.transformer.blocks.0.q_proj.weight'", "NaN or infinite")),
    Case("weights-nan-generate", _generate("model", lambda w, c: edit_tensors(copy_model(w, c), poison)),
         ("model.safetensors", "'model.transformer.blocks.0.q_proj.weight'", "NaN or infinite")),
    Case("weights-truncated-generate", _generate("model", lambda w, c: damage(copy_model(w, c) / "model.safetensors",
                                                                              "truncated")),
         ("--model", "model.safetensors is truncated or damaged")),
    Case("weights-random-eval", lambda w, c: (damage(copy_model(w, c) / "model.safetensors", "random"),
                                              ["eval", write_spec(c, eval_spec(w, "model", "out"))])[1],
         ("model.path", "model.safetensors is not a safetensors file")),
    Case("weights-nan-eval", lambda w, c: (edit_tensors(copy_model(w, c), poison),
                                           ["eval", write_spec(c, eval_spec(w, "model", "out"))])[1],
         ("model.safetensors", "NaN or infinite")),
    Case("run-trained-model-nan-eval", lambda w, c: _nan_trained_model(w, c),
         ("out/model/model.safetensors", "NaN or infinite"), staging="out"),
    Case("generate-run-dir-typo", _generate("runs/quickstart-sft-shrt", lambda w, c: (c / "runs").mkdir()),
         ("--model", "no such directory 'runs/quickstart-sft-shrt'")),
    Case("generate-hub-id-offline", _generate("some-org/not-a-cached-model"), ("some-org/not-a-cached-model",
                                                                               "HF_HUB_OFFLINE")),
    # ------------------------------------------------------------------ tokenizers
    Case("tokenizer-missing", _model_case(_no_tokenizer), ("model.path", "could not load the tokenizer")),
    Case("tokenizer-json-damaged", _model_case(_tokenizer_json_garbage), ("model.path", "could not load the tokenizer")),
    Case("tokenizer-mask-id-mismatch", _model_case(lambda m: edit_json(m / "config.json", mask_token_id=7)),
         ("model.path", "mask_token_id 7 differs")),
    Case("tokenizer-far-smaller-than-vocab", _small_tokenizer, ("model.path", "tokens for a model with 4096 embedding rows")),
    Case("tokenizer-larger-than-vocab", _large_tokenizer, ("model.path", "but the model has 200 embedding rows")),
    Case("tokenizer-card-without-vocab-files", _card_without_vocab, ("model.path", "only 27 tokens", "151936")),
    Case("new-model-tokenizer-missing", _validate(lambda w, c: {**train_spec(w, "x", "out"), "model": {
        "new": {"family": "llada", "tokenizer": "no-such-tokenizer"}}}), ("model.new.tokenizer",)),
    Case("new-model-unknown-family", _validate(lambda w, c: {**train_spec(w, "x", "out"), "model": {
        "new": {"family": "gpt9"}}}), ("model.new.family",)),
    Case("new-model-unknown-config-key", _validate(lambda w, c: {**train_spec(w, "x", "out"), "model": {
        "new": {"family": "llada", "config": {"d_modle": 64}}}}), ("model.new.config.d_modle",)),
    # ------------------------------------------------------------------ adapters
    Case("adapter-config-not-json", _adapter_case(lambda a: (a / "adapter_config.json").write_text("{")),
         ("model.path", "adapter_config.json is not a valid peft adapter config")),
    Case("adapter-no-base", _adapter_case(lambda a: edit_json(a / "adapter_config.json", base_model_name_or_path=None)),
         ("model.path", "names no base model")),
    Case("adapter-base-gone", _adapter_case(lambda a: edit_json(a / "adapter_config.json",
                                                                base_model_name_or_path="/nonexistent/base")),
         ("model.path", "'/nonexistent/base' does not exist")),
    Case("adapter-weights-truncated", _adapter_case(lambda a: damage(a / "adapter_model.safetensors", "truncated")),
         ("model.path", "adapter_model.safetensors is truncated or damaged")),
    Case("adapter-weights-missing", _adapter_case(lambda a: (a / "adapter_model.safetensors").unlink()),
         ("model.path", "has no adapter_model.safetensors")),
    Case("adapter-weights-nan-train", _adapter_case(lambda a: _poison_adapter(a), cmd="train"),
         ("adapter_model.safetensors", "NaN or infinite", "adapter")),
    Case("adapter-weights-random-generate", _adapter_case(lambda a: damage(a / "adapter_model.safetensors", "random"),
                                                          cmd="generate"),
         ("--model", "adapter_model.safetensors is not a safetensors file")),
    Case("lora-path-not-an-adapter", _validate(lambda w, c: {**train_spec(w, str(w.model), "out"), "model": {
        "path": str(w.model), "lora": {"path": str(w.model)}}}), ("model.lora.path", "has no adapter_config.json")),
    Case("lora-unknown-target", _validate(lambda w, c: {**train_spec(w, str(w.model), "out"), "model": {
        "path": str(w.model), "lora": {"target_modules": ["q_porj"]}}}), ("model.lora.target_modules", "'q_porj'")),
    # ------------------------------------------------------------------ datasets
    Case("data-missing-file", _data_case(lambda p: None, "train.parquet"), ("data.train.path", "does not exist")),
    Case("data-zero-rows", _data_case(_empty_parquet, "train.parquet"), ("data.train.path", "has no rows")),
    Case("data-parquet-random-bytes", _data_case(lambda p: p.write_bytes(os.urandom(2048)), "train.parquet"),
         ("data.train.path", "not a readable parquet file")),
    Case("data-jsonl-empty", _data_case(lambda p: p.write_text(""), "train.jsonl"), ("data.train.path", "is empty")),
    Case("data-jsonl-blank-lines", _data_case(lambda p: p.write_text("\n\n  \n"), "train.jsonl"),
         ("data.train.path", "is empty")),
    Case("data-jsonl-not-json", _data_case(lambda p: p.write_text("prompt,answer\n"), "train.jsonl"),
         ("data.train.path", "first line is not JSON")),
    Case("data-jsonl-binary", _data_case(lambda p: p.write_bytes(b"\xff\xfe\x00garbage\x80"), "train.jsonl"),
         ("data.train.path", "not a readable UTF-8 JSONL file")),
    Case("data-unsupported-type", _data_case(lambda p: p.write_text("a,b\n"), "train.csv"),
         ("data.train.path", "unsupported file type '.csv'")),
    Case("data-missing-column", _validate(lambda w, c: _with(train_spec(w, str(w.model), "out"), "data.train.prompt_template",
                                                              "{{ puzle }}")), ("data.train.prompt_template", "'puzle'")),
    Case("data-missing-nested-field", _validate(lambda w, c: _with(train_spec(w, str(w.model), "out"),
                                                                   "data.train.prompt_template", "{{ extra_info.puzle }}")),
         ("data.train.prompt_template", "row 0 of", "has no field 'extra_info.puzle'")),
    Case("data-missing-nested-field-response", _validate(lambda w, c: _with(
        train_spec(w, str(w.model), "out"), "data.train.response_template", "{{ reward_model['truth'] }}")),
         ("data.train.response_template", "has no field 'reward_model.truth'")),
    Case("data-later-row-missing-field", _later_row_lacks_field, ("data.train.prompt_template", "'extra_info.puzzle'")),
    Case("benchmark-missing-nested-field", lambda w, c: ["validate", write_spec(c, _with(
        eval_spec(w, str(w.model), "out"), "eval.benchmarks", [{**eval_spec(w, "", "")["eval"]["benchmarks"][0],
                                                                "prompt_template": "{{ extra_info.puzle }}"}]))],
         ("eval.benchmarks[0].prompt_template", "has no field 'extra_info.puzle'")),
    Case("data-offset-past-end", _validate(lambda w, c: _with(train_spec(w, str(w.model), "out"), "data.train.offset", 8)),
         ("data.train.offset", "skips every row")),
    Case("benchmark-zero-rows", lambda w, c: (_empty_parquet(c / "bench.parquet"),
                                              ["validate", write_spec(c, eval_spec(w, str(w.model), "out", "bench.parquet"))])[1],
         ("eval.benchmarks[0].path", "has no rows")),
    # ------------------------------------------------------------------ run directories and I/O
    Case("output-is-a-file", _output_case(lambda c: (c / "out").write_text("x")), ("output.dir", "not a directory")),
    Case("output-not-a-run-dir", _output_case(_not_a_run_dir), ("output.dir", "not a DARE run directory")),
    Case("output-holds-another-run", _output_case(_different_run), ("output.dir", "different run")),
    Case("output-parent-is-a-file", _spec_with_output("parent/out"), ("output.dir", "'parent/out' cannot be created",
                                                                      "is a file")),
    Case("output-in-proc", _validate(lambda w, c: train_spec(w, str(w.model), "/proc/dare-out")),
         ("output.dir", "'/proc/dare-out' cannot be created", "does not accept new directories")),
    Case("output-in-sys-run", lambda w, c: ["run", write_spec(c, train_spec(w, str(w.model), "/sys/dare-out"))],
         ("output.dir", "'/sys/dare-out' cannot be created")),
    Case("output-in-proc-train", lambda w, c: ["train", write_spec(c, train_spec(w, str(w.model), "/proc/a/b"))],
         ("output.dir", "'/proc/a/b' cannot be created")),
    Case("output-read-only-validate", _readonly_output("validate"), ("output.dir", "is not writable", "read-only"),
         unprivileged=True),
    Case("output-read-only-train", _readonly_output("train"), ("output.dir", "is not writable", "read-only"),
         unprivileged=True),
    Case("output-inside-private-dir", _readonly_output("validate", 0o700), ("output.dir", "'readonly/out' is not writable"),
         unprivileged=True),
    Case("resume-weights-truncated", _resume_case(lambda k: damage(k / "model.safetensors", "truncated"), max_steps=2),
         ("train.resume", "checkpoint-1/model.safetensors is truncated or damaged"), staging="out"),
    Case("resume-weights-empty-finished", _resume_case(lambda k: damage(k / "model.safetensors", "empty")),
         ("train.resume", "checkpoint-1/model.safetensors is empty"), staging="out"),
    Case("resume-optimizer-truncated", _resume_case(lambda k: damage(k / "optimizer.pt", "truncated"), max_steps=2),
         ("train.resume", "checkpoint-1/optimizer.pt"), staging="out"),
    Case("resume-trainer-state-damaged", _resume_case(lambda k: (k / "trainer_state.json").write_text("{\"global_"),
                                                      max_steps=2),
         ("train.resume", "checkpoint-1/trainer_state.json"), staging="out"),
    Case("resume-trainer-state-wrong-types", _resume_case(_retyped_trainer_state, max_steps=2),
         ("train.resume", "checkpoint-1/trainer_state.json", "'global_step' is \"two\" (a JSON str), not int"),
         staging="out"),
    Case("resume-trainer-state-other-step", _resume_case(_stepped_trainer_state, max_steps=2),
         ("train.resume", "checkpoint-1/trainer_state.json", "'global_step' is 99999, but the checkpoint was saved at "
          "step 1"), staging="out"),
    Case("data-jsonl-lone-surrogate", _lone_surrogate,
         ("train.jsonl", "line 2, column 'extra_info.puzzle'", "lone UTF-16 surrogate (\\ud800 at character 1)"),
         staging="out"),
    Case("data-jsonl-lone-surrogate-validate",
         _data_case(lambda p: p.write_text('{"extra_info": {"puzzle": "12"}, "reward_model": {"ground_truth": "3"}}\n'
                                           '{"extra_info": {"puzzle": "\\udc00"}, "reward_model": {"ground_truth": "3"}}\n'),
                    "train.jsonl"),
         ("data.train.path", "line 2, column 'extra_info.puzzle'", "lone UTF-16 surrogate (\\udc00 at character 0)")),
    Case("resume-off-with-checkpoints", _resume_case(lambda k: None, resume=False), ("train.resume", "resume: false"),
         staging="out"),
    Case("resume-optimizer-pickle", _resume_case(_optimizer_pickle, max_steps=2), ("optimizer.pt", "weights_only"),
         staging="out"),
    Case("eval-without-eval-section", lambda w, c: ["eval", write_spec(c, train_spec(w, str(w.model), "out"))],
         ("eval",)),
    Case("export-source-missing", lambda w, c: ["export", "no-such-dir", "exported"], ("no-such-dir", "not a directory")),
    Case("export-output-not-empty", _export_case(lambda w, c: (c.joinpath("exported").mkdir(),
                                                               c.joinpath("exported", "x").write_text("x"),
                                                               copy_model(w, c))[2]),
         ("exported", "not empty")),
    Case("export-truncated-weights", _export_case(lambda w, c: (damage(copy_model(w, c) / "model.safetensors",
                                                                       "truncated"), c / "model")[1]),
         ("model.safetensors is truncated or damaged",)),
    Case("export-sharded-metadata-pickle", _export_case(bad_sharded_checkpoint, extra=("--base", "MODEL")),
         (".metadata is not torch.distributed.checkpoint metadata", "never unpickles")),
    Case("export-bin-pickle", _export_case(lambda w, c: _bin_pickle(c), extra=("--base", "MODEL")),
         ("pytorch_model.bin cannot be read as a weights-only PyTorch file",)),
]


def _with(spec: dict, dotted: str, value):
    cur = spec
    *parents, last = dotted.split(".")
    for p in parents:
        cur = cur[p]
    cur[last] = value
    return spec


def _nan_trained_model(w: World, c: Path) -> list[str]:
    """`dare eval` of a run directory whose trained model/ was saved with NaN weights."""
    from dare.runspec import spec_hash, validate_spec

    run = Path(shutil.copytree(w.run, c / "out"))
    edit_tensors(run / "model", poison)
    spec = eval_spec(w, str(w.model), "out")
    edit_json(run / "run.json", spec_hash=spec_hash(validate_spec(spec, check=False)))
    return ["eval", write_spec(c, spec)]


def _poison_adapter(a: Path) -> None:
    from safetensors.torch import load_file, save_file

    f = a / "adapter_model.safetensors"
    state = load_file(str(f))
    next(v for k, v in sorted(state.items()) if "lora_A" in k).view(-1)[0] = float("nan")
    save_file(state, str(f), metadata={"format": "pt"})


def _bin_pickle(c: Path) -> Path:
    src = c / "checkpoint-10"
    src.mkdir()
    torch.save({"w": _Payload(c / "PWNED")}, src / "pytorch_model.bin")
    return src


# =========================================================================== the harness
def snapshot(root: Path) -> dict[str, str]:
    """Every file (sha256) and directory under ``root``."""
    out = {}
    for p in sorted(root.rglob("*")):
        rel = str(p.relative_to(root))
        if p.is_symlink():
            out[rel] = "link:" + os.readlink(p)
        elif p.is_dir():
            out[rel] = "dir"
        else:
            try:
                out[rel] = hashlib.sha256(p.read_bytes()).hexdigest()
            except PermissionError:
                out[rel] = "unreadable"
    return out


def _run_unprivileged(args: list[str], cwd: Path) -> tuple[int, str]:
    """``dare ARGS`` as an unprivileged user (root writes through read-only permissions)."""
    if os.geteuid() != 0:
        raise AssertionError("only needed as root")
    if shutil.which("setpriv") is None:
        pytest.skip("needs setpriv to run as an unprivileged user")
    env = {**os.environ, "HOME": str(cwd), "HF_HOME": str(cwd / ".hf"), "HF_HUB_OFFLINE": "1"}
    proc = subprocess.run(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups",
                           str(Path(sys.executable).parent / "dare"), *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=600)
    return proc.returncode, proc.stderr


def _assert_one_paragraph(err: str, needles: tuple[str, ...]) -> str:
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert not any(ln.startswith(("Traceback", "  File")) for ln in lines), err
    errors = [i for i, ln in enumerate(lines) if ln.startswith("error: ")]
    assert len(errors) == 1, err  # the error is the last thing printed: its line, then its problems indented
    assert all(ln.startswith("  ") for ln in lines[errors[0] + 1:]), err
    assert "\n\n" not in err[err.index("error: "):].strip(), err  # one paragraph: no blank line
    errors = ["\n".join(lines[errors[0]:])]  # the error is the last thing printed, on one line
    for n in needles:
        assert n in errors[0], (n, errors[0])
    return errors[0]


def _params():
    out = []
    for case in CASES:
        marks = [pytest.mark.xfail(strict=True, reason=case.xfail)] if case.xfail else []
        out.append(pytest.param(case, id=case.id, marks=marks))
    return out


@pytest.mark.filterwarnings("ignore")
@pytest.mark.parametrize("case", _params())
def test_bad_input(case: Case, world: World, run_cli, capsys, monkeypatch):
    c = world.root / "cases" / case.id
    c.mkdir(parents=True)
    args = case.make(world, c)
    args = [str(world.model) if a == "MODEL" else a for a in args]
    before = snapshot(world.root)
    if case.unprivileged and os.geteuid() == 0:
        c.chmod(0o755)
        d = Path(tempfile.mkdtemp(prefix="dare-bad-input-"))
        try:  # a world-readable copy of the case directory (pytest's tmp root is private to root)
            d.chmod(0o755)
            shutil.copytree(c, d / "case", symlinks=True)
            (d / "case").chmod(0o777)
            code, err = _run_unprivileged(args, d / "case")
            after_copy = snapshot(d / "case")
        finally:
            shutil.rmtree(d, ignore_errors=True)
        assert after_copy == {k[len(f"cases/{case.id}/"):]: v for k, v in before.items()
                              if k.startswith(f"cases/{case.id}/")}
    else:
        monkeypatch.chdir(c)
        capsys.readouterr()
        code, _, err = run_cli(*args)
    assert code == 2, err
    _assert_one_paragraph(err, case.needles)
    after = snapshot(world.root)
    staging = f"cases/{case.id}/{case.staging}" if case.staging else None
    changed = sorted(k for k in set(before) | set(after)
                     if before.get(k) != after.get(k) and not (staging and (k == staging or k.startswith(staging + "/"))))
    assert changed == [], changed
    assert not (c / "PWNED").exists() and not any(world.root.rglob("PWNED"))


def test_the_corpus_is_large_enough():
    assert len(CASES) >= 40 and len({c.id for c in CASES}) == len(CASES)
