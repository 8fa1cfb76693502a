"""The pieces of dare.scaling.sharding that need no process group: padded slices, DeepSpeed configs without "auto", no-ops.

The 2-process behaviour (lock-step decoding, FSDP2/ZeRO on CPU processes) is tests/test_sharding.py.
"""

from __future__ import annotations

import pytest
import torch

from dare.scaling import distributed, sharding


@pytest.mark.parametrize("n,world,rank,expected", [
    (9, 2, 0, ([0, 1, 2, 3, 4], 5)),
    (9, 2, 1, ([5, 6, 7, 8, 8], 4)),  # one padding row: the last real one again
    (8, 2, 1, ([4, 5, 6, 7], 4)),
    (1, 2, 1, ([0], 0)),  # an empty slice decodes row n - 1 as padding, keeps nothing
    (0, 2, 0, ([], 0)),
    (5, 3, 2, ([4, 4], 1)),
])
def test_padded_shard_gives_every_process_the_same_count(monkeypatch, n, world, rank, expected):
    monkeypatch.setattr(distributed, "world_size", lambda: world)
    monkeypatch.setattr(distributed, "rank", lambda: rank)
    monkeypatch.setattr(sharding, "world_size", lambda: world)
    assert sharding.padded_shard(n) == expected


def test_deepspeed_config_without_auto_values_follows_the_model_dtype():
    config = {"bf16": {"enabled": "auto"}, "fp16": {"enabled": "auto", "loss_scale": 0}, "gradient_clipping": "auto",
              "zero_optimization": {"stage": 3, "stage3_prefetch_bucket_size": "auto", "reduce_bucket_size": 5}}
    assert sharding._without_auto(config, torch.bfloat16) == {
        "bf16": {"enabled": True}, "fp16": {"enabled": False, "loss_scale": 0},
        "zero_optimization": {"stage": 3, "reduce_bucket_size": 5}}
    assert sharding._without_auto(config, torch.float32)["bf16"] == {"enabled": False}


def test_one_process_is_never_sharded_and_lockstep_is_a_no_op():
    model = torch.nn.Linear(2, 2)
    assert not sharding.is_sharded(model)
    with sharding.lockstep(model):
        model(torch.ones(1, 2))
    assert not model._forward_pre_hooks  # no hook left behind
    assert sharding.shard_for_evaluation(model) is model


def test_the_cpu_switch_reads_the_environment(monkeypatch):
    monkeypatch.delenv(distributed.CPU_SHARDING_ENV, raising=False)
    assert not distributed.cpu_sharding()
    for value, on in (("1", True), ("true", True), ("TRUE", True), ("0", False), ("", False)):
        monkeypatch.setenv(distributed.CPU_SHARDING_ENV, value)
        assert distributed.cpu_sharding() is on
    with sharding.sharding_accelerator_state():  # one process: nothing to shard, nothing changed
        pass


@pytest.mark.parametrize("family", ["llada", "dream", "sdar", "llada2"])
def test_the_dummy_forward_of_a_finished_process_runs_on_every_family(tmp_path, family):
    """A process that is done decoding runs the model on one token (no mask, no cache) while the others decode: every
    family's model takes it and returns finite logits for it."""
    pytest.importorskip(f"dare_{family}")
    from dare.testing import tiny_model

    model = tiny_model(family, tmp_path / family).model.eval()
    with torch.no_grad():
        out = sharding._dummy_forward(model, torch.tensor([[5, 6], [7, 8]]))
    assert out.logits.shape[:2] == (1, 1) and bool(torch.isfinite(out.logits).all())


def test_the_reference_policy_kept_whole_in_bf16_when_asked(tmp_path):
    """``train.reference_placement: device_bf16``: the reference copy is cast to bfloat16 at its first use (on the
    policy's device, the CPU here) while the policy stays float32; its scores are the policy's to bf16 precision.
    The default keeps the copy as it is (one process: nothing to shard)."""
    from accelerate import Accelerator

    from dare.testing import tiny_model

    pytest.importorskip("dare_llada")
    policy = tiny_model("llada", tmp_path / "m").model.eval()
    ids = torch.tensor([[5, 6, 7, 8]])
    try:
        _compare_placements(policy, ids, Accelerator)
    finally:
        from accelerate.state import AcceleratorState

        AcceleratorState._reset_state(reset_partial_state=True)  # later tests build their own


def _compare_placements(policy, ids, Accelerator):
    from dare.modeling.lora import ReferencePolicy

    with torch.no_grad():
        want = policy(input_ids=ids).logits
        bf16 = ReferencePolicy(policy, Accelerator(cpu=True), "device_bf16")
        with bf16.model() as ref:
            assert {p.dtype for p in ref.parameters()} == {torch.bfloat16}
            got = ref(input_ids=ids).logits.float()
        assert {p.dtype for p in policy.parameters()} == {torch.float32}
        assert 0 < float((got - want).abs().max()) < 0.05 * float(want.abs().max())
        same = ReferencePolicy(policy, Accelerator(cpu=True))
        with same.model() as ref:
            assert {p.dtype for p in ref.parameters()} == {torch.float32}
            assert torch.equal(ref(input_ids=ids).logits, want)


def test_the_default_reference_placement_keeps_the_spec_hash():
    """Specs written before ``train.reference_placement`` existed keep their hash (their runs still resume)."""
    from dare.runspec.models import RunSpec, spec_hash

    base = {"model": {"path": "m"}, "output": {"dir": "o"}, "train": {"learning_rate": 1e-3, "max_steps": 2}}
    default = RunSpec.model_validate(base)
    explicit = RunSpec.model_validate(base | {"train": base["train"] | {"reference_placement": "like_policy"}})
    other = RunSpec.model_validate(base | {"train": base["train"] | {"reference_placement": "device_bf16"}})
    assert spec_hash(default) == spec_hash(explicit) != spec_hash(other)
