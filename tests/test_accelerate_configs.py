"""examples/accelerate/*.yaml: each is a config ``accelerate launch --config_file`` accepts, and means what its
comments say (read through accelerate's own loader, launch-argument processing and plugins).

Nothing here launches processes or needs a GPU: the files are parsed the way ``accelerate launch`` parses
them, the environment it would hand to the workers is built, and the FSDP/DeepSpeed plugins the workers'
``Accelerator`` would create from that environment are constructed and inspected.
"""

from __future__ import annotations

import importlib
import os
from pathlib import Path
from unittest import mock

import pytest
from accelerate.commands.config.config_args import load_config_from_file
from accelerate.commands.launch import _validate_launch_command, launch_command_parser
from accelerate.utils import DeepSpeedPlugin, DistributedType, FullyShardedDataParallelPlugin
from accelerate.utils import prepare_deepspeed_cmd_env, prepare_multi_gpu_env
from accelerate.utils.fsdp_utils import fsdp2_prepare_auto_wrap_policy
from transformers.modeling_layers import GradientCheckpointingLayer

from dare.testing import repo_root

CONFIGS = repo_root() / "examples" / "accelerate"
#: (family, preset) of every first-party model class
FAMILIES = [("llada", "tiny"), ("dream", "tiny"), ("sdar", "tiny"), ("sdar", "tiny-moe"), ("llada2", "tiny")]


def _launch_env(path: Path) -> dict[str, str]:
    """The environment ``accelerate launch --config_file path`` gives each worker (accelerate's own code)."""
    args = launch_command_parser().parse_args(["--config_file", str(path), "train.py"])
    args, defaults, _ = _validate_launch_command(args)
    if args.use_deepspeed:
        args.deepspeed_fields_from_accelerate_config = ",".join(defaults.deepspeed_config)  # as launch_command does
        return prepare_deepspeed_cmd_env(args)[1]
    return prepare_multi_gpu_env(args)


def _family(name: str):
    from dare.plugins.manager import get_registry

    return get_registry().get("model_family", name).create()


def test_every_config_is_listed_and_parses_with_accelerates_loader():
    found = sorted(p.name for p in CONFIGS.glob("*.yaml"))
    assert found == ["ddp.yaml", "fsdp2.yaml", "zero2.yaml", "zero3.yaml"]
    kinds = {name: load_config_from_file(str(CONFIGS / name)).distributed_type for name in found}
    assert kinds == {"ddp.yaml": DistributedType.MULTI_GPU, "fsdp2.yaml": DistributedType.FSDP,
                     "zero2.yaml": DistributedType.DEEPSPEED, "zero3.yaml": DistributedType.DEEPSPEED}
    for name in found:
        text = (CONFIGS / name).read_text()
        assert text.startswith("#") and "accelerate launch --config_file examples/accelerate/" + name in text
        cfg = load_config_from_file(str(CONFIGS / name))
        # precision is the spec's (train.bf16): the file must not force one
        assert cfg.mixed_precision == "no" and cfg.use_cpu is False and cfg.num_machines == 1


def test_ddp_launch_environment():
    env = _launch_env(CONFIGS / "ddp.yaml")
    assert env["ACCELERATE_MIXED_PRECISION"] == "no"
    assert "ACCELERATE_USE_FSDP" not in env and "ACCELERATE_USE_DEEPSPEED" not in env


def test_fsdp2_config_wraps_each_familys_decoder_layer(tmp_path):
    env = _launch_env(CONFIGS / "fsdp2.yaml")
    assert (env["ACCELERATE_USE_FSDP"], env["FSDP_VERSION"], env["FSDP_AUTO_WRAP_POLICY"]) == ("true", "2", "TRANSFORMER_BASED_WRAP")
    assert env["FSDP_STATE_DICT_TYPE"] == "FULL_STATE_DICT"  # checkpoints and model/ in the official format
    with mock.patch.dict(os.environ, env):
        plugin = FullyShardedDataParallelPlugin()
    assert plugin.fsdp_version == 2
    explicit = plugin.transformer_cls_names_to_wrap  # None: the model's _no_split_modules
    from dare.testing import tiny_model

    for name, preset in FAMILIES:
        family = _family(name)
        lm = tiny_model(name, tmp_path / f"{name}-{preset}", preset=preset)
        layer = family.decoder_layer_class
        # the class exists in the family's modeling code, is the checkpointing unit, and is what FSDP wraps
        classes = {type(m) for m in lm.model.modules() if type(m).__name__ == layer}
        assert len(classes) == 1, (name, preset, layer)
        cls = classes.pop()
        package = type(lm.model).__module__.split(".")[0]
        assert cls.__module__.startswith(package + ".modeling_") and getattr(importlib.import_module(cls.__module__), layer) is cls
        assert issubclass(cls, GradientCheckpointingLayer), layer
        assert list(type(lm.model)._no_split_modules) == [layer]
        assert explicit is None or layer in explicit
        policy = fsdp2_prepare_auto_wrap_policy(plugin, lm.model)
        wrapped = [type(m).__name__ for m in lm.model.modules() if policy(m)]
        n_layers = sum(isinstance(m, cls) for m in lm.model.modules())
        assert wrapped == [layer] * n_layers and n_layers == lm.model.config.num_hidden_layers, (name, preset, wrapped)


@pytest.mark.parametrize("name,stage", [("zero2.yaml", 2), ("zero3.yaml", 3)])
def test_deepspeed_configs_leave_batch_clipping_and_precision_to_the_spec(name, stage):
    env = _launch_env(CONFIGS / name)
    assert env["ACCELERATE_USE_DEEPSPEED"] == "true" and env["ACCELERATE_DEEPSPEED_ZERO_STAGE"] == str(stage)
    with mock.patch.dict(os.environ, env):
        plugin = DeepSpeedPlugin()
    ds = plugin.deepspeed_config
    assert ds["zero_optimization"]["stage"] == stage
    # "auto": transformers fills them from train.per_device_batch_size / gradient_accumulation_steps / max_grad_norm
    assert (ds["train_micro_batch_size_per_gpu"], ds["gradient_accumulation_steps"], ds["gradient_clipping"]) == ("auto",) * 3
    assert "bf16" not in ds and "fp16" not in ds
    # ZeRO-3 gathers 16-bit weights on save, so model/ is a loadable official-format checkpoint
    assert ds["zero_optimization"]["stage3_gather_16bit_weights_on_model_save"] is (stage == 3)
    assert load_config_from_file(str(CONFIGS / name)).deepspeed_config["deepspeed_multinode_launcher"] == "standard"


def test_an_fsdp_or_deepspeed_launch_on_cpu_warns_that_the_model_is_not_sharded(monkeypatch, capsys):
    """On a machine without GPUs accelerate runs FSDP/DeepSpeed configs as plain data parallelism: say so."""
    import torch

    from dare.scaling import distributed

    if torch.cuda.is_available():
        pytest.skip("checks the CPU fallback")
    monkeypatch.setenv("ACCELERATE_USE_FSDP", "true")
    assert distributed.shards_model() and distributed.device().type == "cpu"
    distributed.setup()
    assert "every process holds the whole model" in capsys.readouterr().err
    monkeypatch.delenv("ACCELERATE_USE_FSDP")
    assert not distributed.shards_model()
    distributed.setup()
    assert "FSDP" not in capsys.readouterr().err
