"""The paper recipes (examples/recipes/): each validates against the real model config of its release (the model
cards in the shared reference files: config.json and weight index, no weights), its per-GPU memory is estimated
from that config, and it trains 2 steps with the model swapped for a tiny model of the same family.

The dry run keeps the recipe's objective and every one of its settings except sizes: lengths, group size, batch
and steps shrink so that 2 steps run on a CPU (``train.max_length`` is removed: the tiny model's context is shorter
than the examples), and 16-bit weights become float32 (CPUs lack fast bf16 kernels).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml

from dare.testing import shared_path

ROOT = Path(__file__).resolve().parents[1]
RECIPES = sorted((ROOT / "examples" / "recipes").glob("*.yaml"))

#: the release each recipe's model.path names -> the model card with its config (DiffuCoder-7B has Dream's architecture)
CARDS = {
    "GSAI-ML/LLaDA-8B-Instruct": "LLaDA-8B-Instruct",
    "apple/DiffuCoder-7B-Instruct": "Dream-v0-Instruct-7B",
    "JetLM/SDAR-8B-Chat": "SDAR-8B-Chat",
    "inclusionAI/LLaDA2.0-mini": "LLaDA2.0-mini",
}
FAMILY = {"LLaDA-8B-Instruct": "llada", "Dream-v0-Instruct-7B": "dream", "SDAR-8B-Chat": "sdar", "LLaDA2.0-mini": "llada2"}
#: training files a recipe names that are not among the shared datasets: a file of the same layout stands in
STAND_INS = {"data/rl/train/acecode_hard.parquet": "data/rl/test/mbpp_1.parquet"}


def _raw(path: Path) -> dict:
    return yaml.safe_load(path.read_text())


def _card(raw: dict) -> Path:
    card = shared_path("model-cards", CARDS[raw["model"]["path"]])
    if not (card / "config.json").is_file():
        pytest.skip(f"the model card {card} is not available (shared reference files)")
    return card


def _data_overrides(raw: dict) -> list[str]:
    out = []
    for split in ("train", "eval"):
        ds = (raw.get("data") or {}).get(split)
        if ds and ds["path"] in STAND_INS:
            out.append(f"data.{split}.path={STAND_INS[ds['path']]}")
    return out


def test_every_recipe_is_known():
    assert len(RECIPES) >= 6
    names = {p.stem for p in RECIPES}
    for needed in ("d1-llada-8b-gsm8k", "coupled-grpo-diffucoder-7b-code", "spg-llada-8b-gsm8k", "tracerl-sdar-8b-math",
                   "vrpo-llada-8b", "sft-llada2-mini"):
        assert needed in names
    for p in RECIPES:
        raw = _raw(p)
        assert raw["model"]["path"] in CARDS, p.name
        assert raw["launch"]["accelerate_config"] and raw["launch"]["num_processes"] >= 1, p.name
        assert "@" in p.read_text().split("\nmodel:")[0] or "arXiv" in p.read_text(), f"{p.name} names no source"


@pytest.mark.parametrize("path", RECIPES, ids=lambda p: p.stem)
def test_recipe_validates_against_the_release_config(path, monkeypatch, tmp_path):
    from dare.runspec import load_spec

    raw = _raw(path)
    card = _card(raw)
    data_root = shared_path("data")
    if not data_root.is_dir():
        pytest.skip("the shared datasets are not available")
    monkeypatch.chdir(data_root.parent)  # recipes name data/rl/... relative to the working directory
    spec = load_spec(path, overrides=[f"model.path={card}", f"output.dir={tmp_path / 'run'}", *_data_overrides(raw)],
                     config_only=True)
    assert spec.launch is not None and spec.model.dtype == "bfloat16"


def test_config_only_still_checks_the_weight_index(tmp_path):
    """A card whose index names a tensor the config does not imply is refused (the check is not a no-op)."""
    from dare.errors import SpecError
    from dare.runspec import load_spec

    card = shared_path("model-cards", "LLaDA-8B-Instruct")
    if not (card / "config.json").is_file():
        pytest.skip("the LLaDA-8B-Instruct model card is not available")
    bad = tmp_path / "card"
    bad.mkdir()
    (bad / "config.json").write_text((card / "config.json").read_text())
    index = json.loads((card / "model.safetensors.index.json").read_text())
    index["weight_map"]["model.transformer.blocks.99.extra.weight"] = "model-00001-of-00006.safetensors"
    (bad / "model.safetensors.index.json").write_text(json.dumps(index))
    spec = {"model": {"path": str(bad)}, "output": {"dir": str(tmp_path / "run")}}
    (tmp_path / "s.yaml").write_text(yaml.safe_dump(spec))
    with pytest.raises(SpecError, match="unexpected tensor 'model.transformer.blocks.99.extra.weight'"):
        load_spec(tmp_path / "s.yaml", config_only=True)
    (bad / "model.safetensors.index.json").write_text(json.dumps(
        {"weight_map": {k: v for k, v in json.loads((card / "model.safetensors.index.json").read_text())["weight_map"].items()}}))
    load_spec(tmp_path / "s.yaml", config_only=True)  # the real index passes


@pytest.mark.parametrize("path", RECIPES, ids=lambda p: p.stem)
def test_recipe_memory_estimate(path, tmp_path):
    from dare.ops.memory_estimate import estimate_memory
    from dare.runspec import load_spec, resolve_spec

    raw = _raw(path)
    card = _card(raw)
    spec = load_spec(path, overrides=[f"model.path={card}", f"output.dir={tmp_path / 'run'}"], check=False)
    ctx = resolve_spec(spec, str(path), config_only=True)
    one, eight = estimate_memory(ctx, [1, 8])
    assert one.parameters > 1e9 and 0 < one.trainable <= one.parameters
    assert one.total > 0 and eight.total <= one.total
    sharded = ctx.spec.launch.accelerate_config.endswith(("zero3.yaml", "fsdp2.yaml"))
    assert eight.terms["weights"] == pytest.approx(one.terms["weights"] / (8 if sharded else 1))
    assert eight.terms["reference policy"] == pytest.approx(one.terms["reference policy"] / (8 if sharded else 1))


def _bytes(tensors) -> int:
    return sum(t.numel() * t.element_size() for t in {id(t): t for t in tensors}.values())


@pytest.mark.parametrize("path", RECIPES, ids=lambda p: p.stem)
def test_recipe_memory_estimate_equals_what_the_code_holds(path, tmp_path):
    """On one process, each parameter term equals the bytes the training code itself would hold, built on the meta
    device as training builds them: the policy (LoRA by peft; fp32 master weights by the trainer's own
    upcast_trainable_to_fp32, outside DeepSpeed), its gradients (the trained parameters' dtype) and torch AdamW's
    two moments, the reference copy (ReferencePolicy, taken before training), TraceRL's value model
    (value_model_from, upcast as its trainer does); the activations are the forwards the objective's own estimator
    keeps before one backward (VRPO: mc_num)."""
    import torch
    from transformers import AutoConfig

    from dare.ops.memory_estimate import estimate_memory, strategy_from_accelerate_config
    from dare.modeling.lora import ReferencePolicy, apply_lora
    from dare.plugins.manager import register_auto_classes
    from dare.rl.value import value_model_from
    from dare.runspec import load_spec, resolve_spec
    from dare.trainers.precision import upcast_trainable_to_fp32

    raw = _raw(path)
    card = _card(raw)
    sets = [f"model.path={card}", f"output.dir={tmp_path / 'run'}"]
    if raw["algorithm"]["name"] == "tracerl":  # its value model, on the DDP launch it needs
        sets += ["algorithm.params.value_model={}", "launch.accelerate_config=examples/accelerate/ddp.yaml"]
    spec = load_spec(path, overrides=sets, check=False)
    ctx = resolve_spec(spec, str(path), config_only=True)
    (est,) = estimate_memory(ctx, [1])
    register_auto_classes()
    config = AutoConfig.from_pretrained(str(card))
    with torch.device("meta"):
        model = ctx.family.model_class_for(config)(config).to(getattr(torch, spec.model.dtype))
    if spec.model.lora is not None:
        model = apply_lora(model, ctx.family, spec.model.lora, base_name_or_path=str(card), seed=0)
    strategy = strategy_from_accelerate_config(spec.launch.accelerate_config, str(path))
    keeps = ctx.objective.stage == "preference" or (
        spec.model.lora is None and getattr(ctx.objective.params, "beta", 0) > 0
        and getattr(ctx.objective.params, "kl_target", "reference") == "reference")
    reference = ReferencePolicy(model) if keeps else None  # taken in the trainer's __init__, before train()
    if spec.train.bf16 and not strategy.deepspeed:
        upcast_trainable_to_fp32(model)  # DareTrainer.train
    trained = [p for p in model.parameters() if p.requires_grad]
    if not strategy.deepspeed:
        assert est.terms["weights"] == _bytes(model.parameters())
        assert est.terms["gradients"] == _bytes(trained)
        assert est.terms["optimizer"] == 2 * _bytes(trained)
    else:  # DeepSpeed: the module in 16 bits, fp32 master copy and moments in its optimizer
        assert est.terms["weights"] == sum(p.numel() for p in model.parameters()) * 2
        assert est.terms["optimizer"] == 12 * sum(p.numel() for p in trained)
    copy = reference._copy if reference is not None else None
    assert est.terms["reference policy"] == (_bytes(copy.parameters()) if copy is not None else 0)
    if raw["algorithm"]["name"] == "tracerl":
        value = value_model_from(model)
        upcast_trainable_to_fp32(value)  # TraceRLValueTrainer with train.bf16
        assert est.terms["value model"] == 4 * _bytes(value.parameters()) > 0  # weights, gradients, 2 moments
    else:
        assert est.terms["value model"] == 0
    if ctx.objective.stage == "preference":
        assert est.forwards == ctx.objective.params.estimator.params["mc_num"] == 4  # VRPO's mc_num
    else:
        assert est.forwards == 1  # one backward per pass (and row chunk)


def test_memory_estimate_by_hand(tmp_path):
    """The d1 recipe's terms, computed by hand from LLaDA-8B-Instruct's config (ZeRO-2, LoRA r 128)."""
    from dare.ops.memory_estimate import estimate_memory
    from dare.runspec import load_spec, resolve_spec

    path = ROOT / "examples/recipes/d1-llada-8b-gsm8k.yaml"
    card = _card(_raw(path))
    cfg = json.loads((card / "config.json").read_text())
    spec = load_spec(path, overrides=[f"model.path={card}", f"output.dir={tmp_path / 'run'}"], check=False)
    (one,) = estimate_memory(resolve_spec(spec, str(path), config_only=True), [1])
    h, n_layers, i, vocab = cfg["d_model"], cfg["n_layers"], cfg["mlp_hidden_size"], cfg["vocab_size"]
    b, s, w = 6, 200 + 256, 2  # group 6 x 1 prompt; launch.prompt_length + gen_length; bf16
    assert (one.rows, one.seq_len) == (b, s)
    assert one.terms["activations"] == n_layers * s * b * (10 * h + 4 * i) * w  # no gradient checkpointing
    assert one.terms["logits"] == s * b * vocab * (w + 4)
    assert one.terms["optimizer"] == one.trainable * 12  # DeepSpeed with 16-bit weights
    assert one.terms["gradients"] == one.trainable * w
    assert one.terms["weights"] == (one.parameters + one.trainable) * w  # the base and the adapters, in 16 bits
    assert one.terms["reference policy"] == 0  # LoRA: adapters disabled
    assert one.terms["value model"] == 0  # not TraceRL's value model


def test_memory_estimate_counts_tracerls_value_model(tmp_path):
    """The TraceRL recipe with ``value_model: {}``: a replicated copy of the model with a 1-wide head, in fp32
    master weights (train.bf16): 4 x 4 bytes per parameter on every GPU."""
    from dare.ops.memory_estimate import estimate_memory
    from dare.runspec import load_spec, resolve_spec

    path = ROOT / "examples/recipes/tracerl-sdar-8b-math.yaml"
    card = _card(_raw(path))
    cfg = json.loads((card / "config.json").read_text())
    spec = load_spec(path, overrides=[f"model.path={card}", f"output.dir={tmp_path / 'run'}",
                                      "algorithm.params.value_model={}"], check=False)
    one, eight = estimate_memory(resolve_spec(spec, str(path), config_only=True), [1, 8])
    h, vocab = cfg["hidden_size"], cfg["vocab_size"]
    assert one.terms["value model"] == eight.terms["value model"] == 16 * (one.parameters - vocab * h + h)


def test_profile_estimate_cli_prints_formula(tmp_path):
    from click.testing import CliRunner

    from dare.cli import cli

    path = ROOT / "examples/recipes/tracerl-sdar-8b-math.yaml"
    card = _card(_raw(path))
    res = CliRunner().invoke(cli, ["profile", str(path), "--estimate", "--set", f"model.path={card}",
                                   "--set", f"output.dir={tmp_path / 'r'}", "--json"])
    assert res.exit_code == 0, res.output
    out = json.loads(res.output)
    assert "shard" in out["formula"] and [e["processes"] for e in out["estimates"]] == [1, 32]  # the recipe's own
    assert out["estimates"][0]["strategy"] == "deepspeed-zero3"
    assert out["estimates"][1]["terms_bytes"]["weights"] == pytest.approx(out["estimates"][0]["terms_bytes"]["weights"] / 32)


def _dry_run_overrides(raw: dict, model_dir: Path, out: Path) -> list[str]:
    """The tiny model (one override) plus the size reductions of the module docstring."""
    sets = [f"model.path={model_dir}", f"output.dir={out}", "train.max_steps=2", "train.bf16=false",
            "model.dtype=float32", "train.per_device_batch_size=1", "train.gradient_accumulation_steps=1",
            "train.save_steps=2", "train.num_threads=1", "train.logging_steps=1"]
    sampler = raw.get("sampler", {})
    if sampler.get("name") in ("llada", "dream"):
        sets += ["sampler.params.gen_length=16", "sampler.params.steps=8"]
        if "block_length" in sampler.get("params", {}):
            sets.append("sampler.params.block_length=8")
    elif sampler.get("name") == "sdar":
        sets.append("sampler.params.gen_length=8")
    elif sampler.get("name") == "llada2":
        sets.append("sampler.params.gen_length=16")
    params = (raw.get("algorithm") or {}).get("params", {})
    if "group_size" in params:
        sets.append("algorithm.params.group_size=2")
    if params.get("micro_batch_size"):
        sets.append("algorithm.params.micro_batch_size=2")
    for split in ("train", "eval"):
        if (raw.get("data") or {}).get(split):
            sets.append(f"data.{split}.limit=4")
    return sets


@pytest.mark.parametrize("path", RECIPES, ids=lambda p: p.stem)
def test_recipe_dry_run_two_steps_on_a_tiny_model(path, tmp_path, monkeypatch):
    from dare.run import Run
    from dare.runspec import load_spec
    from dare.testing import tiny_model

    raw = _raw(path)
    family = FAMILY[CARDS[raw["model"]["path"]]]
    data_root = shared_path("data")
    if not data_root.is_dir():
        pytest.skip("the shared datasets are not available")
    model_dir = tmp_path / "tiny"
    tiny_model(family, model_dir)
    sets = _dry_run_overrides(raw, model_dir, tmp_path / "run") + _data_overrides(raw)
    if raw["algorithm"]["name"] in ("vrpo", "dpo"):  # hub preference pairs: a local file of the same layout
        pairs = tmp_path / "pairs.jsonl"
        pairs.write_text("".join(json.dumps({"prompt": f"{a}+{a}=", "chosen": str(2 * a), "rejected": str(2 * a + 1)})
                                 + "\n" for a in range(8)))
        sets += [f"data.train.path={pairs}", f"data.eval.path={pairs}"]
    monkeypatch.chdir(data_root.parent)
    # the tiny model's context is a few hundred tokens: its max_length would drop every GSM8K example (bytes)
    spec = load_spec(path, overrides=sets, unset=["train.max_length"] if raw["train"].get("max_length") else [])
    Run(spec, source=str(path)).train()
    logged = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    steps = [r["step"] for r in logged if "loss" in r]
    assert steps == [1, 2] and all(r["loss"] == r["loss"] for r in logged if "loss" in r)  # finite, two steps
    assert (tmp_path / "run" / "model" / "config.json").is_file()


@pytest.mark.parametrize("name,expected", [
    ("ddp.yaml", (False, False, False, False)), ("zero2.yaml", (False, True, True, True)),
    ("zero3.yaml", (True, True, True, True)), ("fsdp2.yaml", (True, True, True, False))])
def test_strategy_of_each_shipped_accelerate_config(name, expected):
    from dare.ops.memory_estimate import strategy_from_accelerate_config

    s = strategy_from_accelerate_config(str(ROOT / "examples" / "accelerate" / name))
    assert (s.shard_params, s.shard_grads, s.shard_optimizer, s.deepspeed) == expected
    assert not s.offload_optimizer


def test_profile_estimate_names_what_is_missing(tmp_path):
    from dare.errors import SpecError
    from dare.ops.memory_estimate import estimate_report

    spec = tmp_path / "s.yaml"
    spec.write_text(yaml.safe_dump({"model": {"new": {"family": "llada"}}, "algorithm": {"name": "sft"},
                                    "train": {"learning_rate": 1e-4, "max_steps": 1, "max_length": 64},
                                    "output": {"dir": str(tmp_path / "run")}}))
    with pytest.raises(SpecError) as err:
        estimate_report(str(spec), [], "1,8", False)
    assert [loc for loc, _ in err.value.problems] == ["model.path"]
    assert "model.new has no config.json" in err.value.problems[0][1]


#: a recipe header line listing one deviation from the official table: ``# deviation: PARAM: reason``
DEVIATION = re.compile(r"^# deviation: (\w+): (\S.*)$", re.M)


def _official_table(params_cls, family: str) -> dict | None:
    """The official ``{param: value}`` of ``params_cls`` for ``family``, or None when it has none (no table, or a
    release that did not train that family)."""
    if not getattr(params_cls, "official", ()):
        return None
    try:
        return params_cls.official_values(family)
    except ValueError:
        return None


def official_table_problems(path: Path, tmp_path: Path) -> list[str]:
    """What keeps the recipe at ``path`` from being its release's official table: a recipe says ``preset: official``
    wherever its (algorithm, family) has an official table, states only what the table lacks, and resolves (against
    its release's model card) to every official value except the deviations its header lists, each with a reason
    and each actually deviating."""
    from dare.runspec import load_spec, resolve_spec

    raw = _raw(path)
    card = _card(raw)
    spec = load_spec(path, overrides=[f"model.path={card}", f"output.dir={tmp_path / 'run'}"], check=False)
    ctx = resolve_spec(spec, str(path), config_only=True)
    assert ctx.family.name == FAMILY[card.name] and ctx.objective is not None, ctx.problems
    params = ctx.objective.params
    table = _official_table(type(params), ctx.family.name)
    stated = dict(raw["algorithm"].get("params") or {})
    deviations = dict(DEVIATION.findall(path.read_text().split("\nmodel:")[0]))
    if table is None:
        problems = ["says preset: official without an official table"] if stated.get("preset") == "official" else []
        return problems + ([f"lists deviations {sorted(deviations)} without an official table"] if deviations else [])
    problems = []
    if stated.get("preset") != "official":
        problems.append(f"{raw['algorithm']['name']} on {ctx.family.name} has an official table: say preset: official")
    problems += [f"deviation {k} is not in the official table" for k in deviations if k not in table]
    problems += [f"restates the official {k}" for k in stated if k in table and k not in deviations]
    for name, official in table.items():
        value = getattr(params, name)
        same = {k: value.get(k) for k in official} == official if isinstance(official, dict) else value == official
        if name in deviations and same:
            problems.append(f"listed deviation {name} equals the official {official!r}")
        elif name not in deviations and not same:
            problems.append(f"{name} = {value!r}, official {official!r}, no deviation listed")
    return problems


@pytest.mark.parametrize("path", RECIPES, ids=lambda p: p.stem)
def test_recipe_resolves_to_the_official_table_of_its_algorithm_and_family(path, tmp_path):
    assert official_table_problems(path, tmp_path) == [], path.name


def test_a_deviation_passes_only_when_listed_with_its_reason(tmp_path):
    """The check is not a no-op: the d1 recipe with group_size 8 fails until its header lists the deviation."""
    text = (ROOT / "examples/recipes/d1-llada-8b-gsm8k.yaml").read_text()
    changed = tmp_path / "d1.yaml"
    changed.write_text(text.replace("params: {preset: official}", "params: {preset: official, group_size: 8}"))
    assert official_table_problems(changed, tmp_path) == [
        "restates the official group_size", "group_size = 8, official 6, no deviation listed"]
    header, body = text.split("\nmodel:", 1)
    changed.write_text(header + "\n# deviation: group_size: 8 completions per prompt fit the GPU\nmodel:"
                       + body.replace("params: {preset: official}", "params: {preset: official, group_size: 8}"))
    assert official_table_problems(changed, tmp_path) == []
    changed.write_text(header + "\n# deviation: group_size: listed but not applied\nmodel:" + body)
    assert official_table_problems(changed, tmp_path) == ["listed deviation group_size equals the official 6"]
