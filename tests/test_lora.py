"""LoRA through peft for every family: targets, parameter counts, reference policy, runs that save and resume."""

from __future__ import annotations

import json
import shutil

import pytest
import torch
from safetensors import safe_open

from dare.errors import SpecError
from dare.modeling.lora import ReferencePolicy, apply_lora, resolve_lora_targets, trainable_parameter_count
from dare.runspec import LoraSpec, validate_spec

FAMILIES = ("llada", "dream", "sdar", "llada2")


@pytest.fixture(autouse=True)
def one_thread():
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def _tiny(family: str, path):
    from dare.plugins.manager import get_registry
    from dare.testing import tiny_model

    if get_registry().find("model_family", family) is None:
        pytest.skip(f"model family {family!r} is not installed")
    return tiny_model(family, path)


@pytest.mark.parametrize("family", FAMILIES)
def test_all_linear_lora_per_family(tmp_path, family):
    """Parameter count = peft's report = sum r (in + out); the merged save equals base + adapter."""
    from transformers import AutoModel

    from dare.modeling.lora import save_merged

    lm = _tiny(family, tmp_path / "m")
    fam = lm.family
    r = 4
    # by hand: every linear layer whose leaf name the family lists, except the LM head
    want = sum(
        r * (m.in_features + m.out_features)
        for name, m in lm.model.named_modules()
        if isinstance(m, torch.nn.Linear) and name.rsplit(".", 1)[-1] in fam.lora_target_modules and name != fam.lm_head_module
    )
    model = apply_lora(lm.model, fam, LoraSpec(r=r, alpha=8))
    trainable, total = model.get_nb_trainable_parameters()
    assert trainable == trainable_parameter_count(model) == want > 0
    assert all("lora_" in n for n, p in model.named_parameters() if p.requires_grad)
    head = model.get_base_model().get_submodule(fam.lm_head_module) if fam.lm_head_module else None
    assert head is None or not hasattr(head, "lora_A")  # the head is never adapted by all-linear
    with torch.no_grad():
        for n, p in model.named_parameters():
            if "lora_B" in n:
                p.normal_(0, 0.3)
    save_merged(model, tmp_path / "merged")
    ids = torch.randint(10, 200, (2, 16), generator=torch.Generator().manual_seed(0))
    model.eval()
    with torch.no_grad():
        merged = AutoModel.from_pretrained(tmp_path / "merged").eval()(input_ids=ids).logits
        assert (merged - model(input_ids=ids).logits).abs().max().item() < 5e-5  # float32 rounding of W + (alpha / r) B A


def test_llada_head_shares_its_leaf_name_but_is_excluded(tiny_llada_dir):
    from dare.modeling import load_model

    lm = load_model(tiny_llada_dir)
    targets, exclude = resolve_lora_targets(lm.model, lm.family, LoraSpec())
    assert "ff_out" in targets and exclude == ["model.transformer.ff_out"]
    model = apply_lora(lm.model, lm.family, LoraSpec(r=2, alpha=4))
    base = model.get_base_model()
    assert hasattr(base.get_submodule("model.transformer.blocks.0.ff_out"), "lora_A")
    assert not hasattr(base.get_submodule("model.transformer.ff_out"), "lora_A")

    lm2 = load_model(tiny_llada_dir)
    with_head = apply_lora(lm2.model, lm2.family, LoraSpec(r=2, alpha=4, include_lm_head=True))
    head = with_head.get_base_model().get_submodule("model.transformer.ff_out")
    assert hasattr(head, "lora_A")
    assert trainable_parameter_count(with_head) - trainable_parameter_count(model) == 2 * (head.in_features + head.out_features)


def test_unknown_target_names_list_the_candidates(tiny_llada_dir, tmp_path):
    from dare.modeling import load_model

    lm = load_model(tiny_llada_dir)
    with pytest.raises(SpecError) as err:
        apply_lora(lm.model, lm.family, LoraSpec(target_modules=["q_proj", "o_proj"]))
    ((loc, msg),) = err.value.problems
    assert loc == "model.lora.target_modules"
    assert "'o_proj' matches no module" in msg and "attn_out" in msg and "q_proj" in msg
    # `dare validate` finds it too, from a meta-device model (no weights read)
    spec = {"model": {"path": str(tiny_llada_dir), "lora": {"target_modules": ["o_proj"]}}, "output": {"dir": str(tmp_path / "o")}}
    with pytest.raises(SpecError, match="'o_proj' matches no module"):
        validate_spec(spec)


def test_reference_policy_is_the_base_model_with_adapters_off(tiny_llada_dir):
    from dare.modeling import load_model

    base = load_model(tiny_llada_dir).model.eval()
    lm = load_model(tiny_llada_dir)
    model = apply_lora(lm.model, lm.family, LoraSpec(r=4, alpha=8))
    with torch.no_grad():
        for n, p in model.named_parameters():
            if "lora_B" in n:
                p.normal_(0, 0.5)
    ids = torch.randint(10, 200, (2, 12))
    ref = ReferencePolicy(model)
    assert ref.shares_weights
    model.train()
    with torch.no_grad(), ref.model() as m:
        assert not m.training
        ref_logits = m(input_ids=ids).logits
    assert model.training  # restored
    with torch.no_grad():
        assert torch.equal(ref_logits, base(input_ids=ids).logits)
        assert not torch.allclose(model(input_ids=ids).logits, ref_logits)


def _lora_sft_spec(tmp_path, out: str, max_steps: int = 4):
    return {
        "model": {"new": {"family": "llada", "preset": "tiny"}, "lora": {"r": 4, "alpha": 8}},
        "data": {"train": {"path": "dare://sudoku/train.parquet", "limit": 64, "prompt_template": "{{ extra_info.puzzle }}",
                           "response_template": "{{ reward_model.ground_truth }}", "chat_template": False}},
        "algorithm": {"name": "sft"},
        "train": {"learning_rate": 5e-3, "max_steps": max_steps, "per_device_batch_size": 16, "save_steps": 2,
                  "logging_steps": 2, "num_threads": 1, "seed": 0},
        "output": {"dir": str(tmp_path / out)},
    }


def _tensors(path) -> dict[str, torch.Tensor]:
    with safe_open(str(path), "pt") as f:
        return {k: f.get_tensor(k) for k in f.keys()}


def test_lora_sft_run_saves_merged_model_and_peft_adapter_and_resumes(tmp_path):
    from peft import PeftModel
    from transformers import AutoModel

    from dare.modeling import load_model
    from dare.run import Run

    spec = _lora_sft_spec(tmp_path, "run")
    run = Run(validate_spec(spec))
    run.prepare()
    run.train()
    adapter = run.model_dir / "adapter"
    cfg = json.loads((adapter / "adapter_config.json").read_text())
    assert cfg["base_model_name_or_path"] == str((run.dir / "init-model").resolve()) and cfg["r"] == 4
    assert cfg["exclude_modules"] == ["model.transformer.ff_out"]
    names = _tensors(run.model_dir / "model.safetensors")
    assert not any("lora_" in k or k.startswith("base_model") or "base_layer" in k for k in names)
    assert (run.checkpoint_dir / "checkpoint-4" / "adapter_model.safetensors").is_file()
    # the merged model equals base + adapter; base weights were not trained
    ids = torch.randint(10, 200, (2, 20))
    merged = AutoModel.from_pretrained(run.model_dir)
    peft = PeftModel.from_pretrained(AutoModel.from_pretrained(run.dir / "init-model"), str(adapter))
    with torch.no_grad():
        assert torch.allclose(merged(input_ids=ids).logits, peft(input_ids=ids).logits, atol=1e-5, rtol=0)
        with peft.disable_adapter():
            base_logits = peft(input_ids=ids).logits
        assert torch.equal(base_logits, AutoModel.from_pretrained(run.dir / "init-model")(input_ids=ids).logits)
        # SFT -> RL hand-off: a spec's model.path may name the run directory itself (its trained model/)
        validate_spec({"model": {"path": str(run.dir)}, "output": {"dir": str(tmp_path / "next")}})
        assert torch.equal(load_model(run.dir).model(input_ids=ids).logits, merged(input_ids=ids).logits)
    final = _tensors(adapter / "adapter_model.safetensors")
    # resume: drop the last checkpoint and the final model, re-run: it continues from checkpoint-2
    shutil.rmtree(run.checkpoint_dir / "checkpoint-4")
    shutil.rmtree(run.model_dir)
    again = Run(validate_spec(spec))
    again.prepare()
    assert again.train()["global_step"] == 4
    resumed = _tensors(again.model_dir / "adapter" / "adapter_model.safetensors")
    assert resumed.keys() == final.keys() and all(torch.equal(resumed[k], final[k]) for k in final)


def test_full_sft_from_an_adapter_directory_trains_every_weight(tiny_llada_dir, tmp_path):
    """`model.path: <adapter dir>` without model.lora trains every weight in SFT and RL instead of failing with
    "element 0 of tensors does not require grad" (a merged model that kept peft's frozen flags: 0/21 trainable)."""
    from dare.modeling import load_model
    from dare.run import Run

    lm = load_model(tiny_llada_dir)
    peft_model = apply_lora(lm.model, lm.family, LoraSpec(r=2, alpha=4), base_name_or_path=str(tiny_llada_dir.resolve()))
    with torch.no_grad():
        for n, p in peft_model.named_parameters():
            if "lora_B" in n:
                p.fill_(0.01)
    adapter = tmp_path / "adapter"
    peft_model.save_pretrained(str(adapter))
    lm.tokenizer.save_pretrained(str(adapter))

    start = load_model(adapter)
    params = dict(start.model.named_parameters())
    assert trainable_parameter_count(start.model) == sum(p.numel() for p in params.values()) > 0
    assert all(p.requires_grad for p in params.values())
    before = {k: v.detach().clone() for k, v in start.model.state_dict().items()}

    spec = _lora_sft_spec(tmp_path, "run", max_steps=1)
    spec["model"] = {"path": str(adapter)}
    spec["train"] |= {"per_device_batch_size": 4, "save_steps": 1}
    run = Run(validate_spec(spec))
    run.prepare()
    assert trainable_parameter_count(run.model) == sum(p.numel() for p in run.model.parameters())
    assert run.train()["global_step"] == 1
    after = _tensors(run.model_dir / "model.safetensors")
    assert after.keys() == before.keys()
    changed = [k for k in before if not torch.equal(after[k], before[k])]
    assert len(changed) == len(before)  # one AdamW step moves every weight tensor (no frozen leftovers)
