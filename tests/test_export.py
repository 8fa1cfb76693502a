"""`dare export`: merge LoRA adapters, convert trainer checkpoints; adapter dirs as model.path (SFT -> RL hand-off)."""

from __future__ import annotations

import json

import pytest
import torch
from safetensors import safe_open

from dare.errors import CheckpointError
from dare.ops.export import export_model
from dare.runspec import LoraSpec


@pytest.fixture(autouse=True)
def one_thread():
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def _tensors(model_dir) -> dict[str, torch.Tensor]:
    from dare.modeling.checkpoint import checkpoint_shapes

    out = {}
    for f in sorted(model_dir.glob("*.safetensors")):
        with safe_open(str(f), "pt") as h:
            out |= {k: h.get_tensor(k) for k in h.keys()}
    assert set(out) == set(checkpoint_shapes(model_dir))
    return out


@pytest.fixture(scope="module")
def adapter_dir(tiny_llada_dir, tmp_path_factory):
    """A LoRA adapter (peft format) on the tiny LLaDA with non-zero B, as a LoRA run saves it."""
    from dare.modeling import load_model
    from dare.modeling.lora import apply_lora

    lm = load_model(tiny_llada_dir)
    model = apply_lora(lm.model, lm.family, LoraSpec(r=4, alpha=8), base_name_or_path=str(tiny_llada_dir.resolve()))
    g = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for n, p in model.named_parameters():
            if "lora_B" in n:
                p.copy_(0.3 * torch.randn(p.shape, generator=g))
    d = tmp_path_factory.mktemp("adapter") / "adapter"
    model.save_pretrained(str(d))
    lm.tokenizer.save_pretrained(str(d))
    return d


def _base_plus_adapter_logits(base_dir, adapter, ids):
    from peft import PeftModel
    from transformers import AutoModel

    with torch.no_grad():
        return PeftModel.from_pretrained(AutoModel.from_pretrained(base_dir), str(adapter))(input_ids=ids).logits


def test_merge_adapter_export_equals_base_plus_adapter(tiny_llada_dir, adapter_dir, tmp_path):
    from transformers import AutoModel

    out = tmp_path / "merged"
    assert export_model(adapter_dir, out) == "adapter"
    ids = torch.randint(10, 200, (3, 24), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        merged = AutoModel.from_pretrained(out)(input_ids=ids).logits
    expect = _base_plus_adapter_logits(tiny_llada_dir, adapter_dir, ids)
    assert (merged - expect).abs().max().item() < 5e-5  # float32 rounding of W + (alpha / r) B A
    assert not torch.allclose(merged, AutoModel.from_pretrained(tiny_llada_dir)(input_ids=ids).logits, atol=1e-3)
    names = _tensors(out)
    assert names.keys() == _tensors(tiny_llada_dir).keys()  # official names only: no prefixes, no lora_ tensors
    cfg, base_cfg = (json.loads((d / "config.json").read_text()) for d in (out, tiny_llada_dir))
    assert cfg.keys() == base_cfg.keys() and cfg["model_type"] == "llada"
    assert (out / "tokenizer_config.json").is_file()
    assert [p.name for p in tmp_path.iterdir()] == ["merged"]  # no temporary directory left behind
    from huggingface_hub import ModelCard

    card = ModelCard.load(out / "README.md")  # every saved model has a model card
    assert card.data.library_name == "transformers" and card.data.tags[-1] == "llada"
    assert card.data.base_model is None and "merged into" in card.text  # a local base is not a hub id


def test_export_refuses_a_non_empty_directory(adapter_dir, tmp_path, run_cli):
    out = tmp_path / "taken"
    out.mkdir()
    (out / "notes.txt").write_text("keep me")
    with pytest.raises(CheckpointError, match="not empty.*--overwrite"):
        export_model(adapter_dir, out)
    code, _, err = run_cli("export", str(adapter_dir), str(out))
    assert code == 2 and "--overwrite" in err and (out / "notes.txt").read_text() == "keep me"
    code, stdout, _ = run_cli("export", str(adapter_dir), str(out), "--overwrite")
    assert code == 0 and "merged adapter" in stdout
    assert (out / "config.json").is_file() and not (out / "notes.txt").exists()


def _checkpoint_layout(tiny_llada_dir, d, layout: str) -> None:
    """Write the tiny model's tensors the way a trainer on one machine would."""
    import shutil

    from transformers import AutoModel

    model = AutoModel.from_pretrained(tiny_llada_dir)
    state = model.state_dict()
    d.mkdir()
    if layout == "safetensors":  # what transformers.Trainer writes by default
        model.save_pretrained(d)
    elif layout == "ddp-bin":  # save_safetensors=False under DDP: "module." prefixes
        torch.save({f"module.{k}": v for k, v in state.items()}, d / "pytorch_model.bin")
    elif layout == "sharded-safetensors":
        model.save_pretrained(d, max_shard_size="40KB")
    elif layout == "fsdp-full":  # accelerate FULL_STATE_DICT of a torch.compile'd model, no config.json
        torch.save({f"_orig_mod.{k}": v for k, v in state.items()}, d / "pytorch_model_fsdp.bin")
        return
    elif layout == "fsdp-sharded":  # accelerate SHARDED_STATE_DICT: torch.distributed.checkpoint of {"model": ...}
        import torch.distributed.checkpoint as dcp

        dcp.save({"model": {k: v.clone() for k, v in state.items()}}, storage_writer=dcp.FileSystemWriter(str(d / "pytorch_model_fsdp_0")))
        return
    for f in ("config.json", "tokenizer.json", "tokenizer_config.json"):
        shutil.copy(tiny_llada_dir / f, d / f)


@pytest.mark.filterwarnings("ignore:torch.distributed is disabled")
@pytest.mark.parametrize("layout", ["safetensors", "ddp-bin", "sharded-safetensors", "fsdp-full", "fsdp-sharded"])
def test_trainer_checkpoints_convert_bit_exact(tiny_llada_dir, tmp_path, layout):
    src = tmp_path / "checkpoint-10"
    _checkpoint_layout(tiny_llada_dir, src, layout)
    needs_base = not (src / "config.json").is_file()
    if needs_base:
        with pytest.raises(CheckpointError, match="--base"):
            export_model(src, tmp_path / "out")
    assert export_model(src, tmp_path / "out", base=str(tiny_llada_dir) if needs_base else None) == "checkpoint"
    got, want = _tensors(tmp_path / "out"), _tensors(tiny_llada_dir)
    assert got.keys() == want.keys() and all(torch.equal(got[k], want[k]) for k in want)
    assert "converted to the official format" in (tmp_path / "out" / "README.md").read_text()


def test_lora_tensors_inside_a_full_state_dict_are_refused(tiny_llada_dir, tmp_path):
    src = tmp_path / "ckpt"
    _checkpoint_layout(tiny_llada_dir, src, "ddp-bin")
    state = torch.load(src / "pytorch_model.bin", weights_only=True)
    state["module.model.transformer.blocks.0.q_proj.lora_A.default.weight"] = torch.zeros(4, 64)
    torch.save(state, src / "pytorch_model.bin")
    with pytest.raises(CheckpointError, match="export the adapter directory"):
        export_model(src, tmp_path / "out")


def test_adapter_directory_as_model_path(tiny_llada_dir, adapter_dir, tmp_path):
    """SFT -> RL hand-off: a later spec starts from an earlier run's adapter directory."""
    from dare.modeling import load_model
    from dare.run import Run
    from dare.runspec import validate_spec

    ids = torch.randint(10, 200, (2, 16), generator=torch.Generator().manual_seed(0))
    lm = load_model(adapter_dir)  # base + adapter, merged into a plain LLaDA model
    assert type(lm.model).__name__ == "LLaDAModelLM"
    with torch.no_grad():
        assert (lm.model(input_ids=ids).logits - _base_plus_adapter_logits(tiny_llada_dir, adapter_dir, ids)).abs().max() < 5e-5
    spec = validate_spec({"model": {"path": str(adapter_dir), "lora": {"r": 2, "alpha": 4}}, "output": {"dir": str(tmp_path / "rl")}})
    run = Run(spec)
    assert run.family.name == "llada"
    model = run.model  # a new adapter on top of the merged SFT model, recorded against the adapter dir
    assert model.peft_config["default"].base_model_name_or_path == str(adapter_dir.resolve())
    with torch.no_grad():
        assert (model(input_ids=ids).logits - lm.model(input_ids=ids).logits).abs().max() == 0  # B = 0 at init


def test_adapter_with_missing_base_is_reported(adapter_dir, tmp_path):
    import shutil

    moved = tmp_path / "adapter"
    shutil.copytree(adapter_dir, moved)
    cfg = json.loads((moved / "adapter_config.json").read_text())
    cfg["base_model_name_or_path"] = str(tmp_path / "gone")
    (moved / "adapter_config.json").write_text(json.dumps(cfg))
    with pytest.raises(CheckpointError, match="does not exist.*--base"):
        export_model(moved, tmp_path / "out")


def test_export_refuses_output_that_is_inside_or_around_its_source(adapter_dir, tmp_path, run_cli):
    import shutil

    src = tmp_path / "run" / "model" / "adapter"
    shutil.copytree(adapter_dir, src)
    before = sorted(p.name for p in src.iterdir())
    for out, how in [(tmp_path / "run" / "model", "contains"), (src, "is"), (src / "merged", "is inside")]:
        code, _, err = run_cli("export", str(src), str(out), "--overwrite")
        assert code == 2 and f"the output directory {out} {how} the source {src}" in err, err
        assert sorted(p.name for p in src.iterdir()) == before  # the source is untouched
    with pytest.raises(CheckpointError, match="contains the source"):
        export_model(tmp_path / "run" / "model" / "adapter" / ".." / "adapter", tmp_path / "run", overwrite=True)
    assert sorted(p.name for p in src.iterdir()) == before


# --------------------------------------------------------------------------- no code runs on load
class _Payload:
    """A pickle that runs ``cmd`` through ``fn`` when unpickled (what a crafted checkpoint file would hold)."""

    def __init__(self, fn, *args):
        self.fn, self.args = fn, args

    def __reduce__(self):
        return self.fn, self.args


def _payloads(marker):
    import builtins
    import os
    import subprocess

    return {
        "os.system": _Payload(os.system, f"touch {marker}"),
        "subprocess.call": _Payload(subprocess.call, ["touch", str(marker)]),
        "builtins.exec": _Payload(builtins.exec, f"open({str(marker)!r}, 'w').close()"),
        "torch.load": _Payload(torch.load, str(marker)),  # an allowed module, a name outside the allow-list
    }


@pytest.mark.filterwarnings("ignore:torch.distributed is disabled")
@pytest.mark.parametrize("payload", ["os.system", "subprocess.call", "builtins.exec", "torch.load", "inside-metadata"])
def test_a_crafted_sharded_metadata_runs_nothing(tiny_llada_dir, tmp_path, run_cli, capsys, payload):
    """`dare export` of an FSDP sharded folder used to pickle.load its .metadata (via dcp_to_torch_save)."""
    import pickle

    src = tmp_path / "checkpoint-10"
    _checkpoint_layout(tiny_llada_dir, src, "fsdp-sharded")
    meta = src / "pytorch_model_fsdp_0" / ".metadata"
    marker = tmp_path / "PWNED"
    if payload == "inside-metadata":  # a real Metadata record with the payload hidden in planner_data
        real = pickle.loads(meta.read_bytes())
        real.planner_data = _Payload(__import__("os").system, f"touch {marker}")
        meta.write_bytes(pickle.dumps(real, protocol=4))
    else:
        meta.write_bytes(pickle.dumps(_payloads(marker)[payload], protocol=4))
    capsys.readouterr()
    code, out, err = run_cli("export", str(src), str(tmp_path / "out"), "--base", str(tiny_llada_dir))
    assert code == 2, err
    assert not marker.exists()
    assert err.startswith(f"error: {meta} is not torch.distributed.checkpoint metadata that DARE can read safely")
    assert "never unpickles" in err and "dcp_to_torch" in err and "Traceback" not in err
    assert len(err.strip().splitlines()) == 1
    assert not (tmp_path / "out").exists()


@pytest.mark.filterwarnings("ignore:torch.distributed is disabled")
def test_sharded_metadata_pointing_outside_its_folder_is_refused(tiny_llada_dir, tmp_path):
    import pickle

    src = tmp_path / "checkpoint-10"
    _checkpoint_layout(tiny_llada_dir, src, "fsdp-sharded")
    meta = src / "pytorch_model_fsdp_0" / ".metadata"
    real = pickle.loads(meta.read_bytes())
    (tmp_path / "secret").write_bytes(b"x")
    for rec in real.storage_data.values():
        rec.relative_path = "../../secret"
    meta.write_bytes(pickle.dumps(real, protocol=4))
    with pytest.raises(CheckpointError, match=r"points at '\.\./\.\./secret', which is not a file inside the folder"):
        export_model(src, tmp_path / "out", base=str(tiny_llada_dir))


@pytest.mark.parametrize("payload", ["os.system", "subprocess.call", "builtins.exec"])
def test_a_crafted_bin_checkpoint_runs_nothing(tiny_llada_dir, tmp_path, run_cli, capsys, payload):
    src = tmp_path / "checkpoint-10"
    src.mkdir()
    marker = tmp_path / "PWNED"
    torch.save({"w": _payloads(marker)[payload]}, src / "pytorch_model.bin")
    capsys.readouterr()
    code, _, err = run_cli("export", str(src), str(tmp_path / "out"), "--base", str(tiny_llada_dir))
    assert code == 2 and not marker.exists()
    assert err.startswith(f"error: {src / 'pytorch_model.bin'} cannot be read as a weights-only PyTorch file")
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1
