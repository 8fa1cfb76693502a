"""The reference policy synced every N optimizer steps (``RLParams.sync_ref_model``, dare.rl.reference_sync): TRL's
rule, ``ref <- alpha * policy + (1 - alpha) * ref`` at every step s with ``s % ref_model_sync_steps == 0``."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from dare.modeling.lora import ReferencePolicy
from dare.rl import RLParams
from dare.rl.reference_sync import ReferenceSync, reference_sync


def _linear(w):
    m = torch.nn.Linear(2, 1, bias=False)
    with torch.no_grad():
        m.weight.copy_(torch.tensor([w]))
    return m


def test_sync_every_two_steps_is_trls_mixup_computed_by_hand():
    policy = _linear([1.0, 2.0])
    ref = ReferencePolicy(policy)
    sync = ReferenceSync(ref, steps=2, alpha=0.6)
    seen = []
    for step, w in enumerate(([3.0, 2.0], [5.0, 0.0], [0.0, 4.0], [1.0, 1.0]), start=1):
        with torch.no_grad():
            policy.weight.copy_(torch.tensor([w]))  # the optimizer step
        sync.on_step_end(None, SimpleNamespace(global_step=step), None)
        with ref.model() as m:
            seen.append(m.weight.detach().squeeze(0).tolist())
    # step 1: no sync; step 2: 0.6 * (5, 0) + 0.4 * (1, 2) = (3.4, 0.8); step 3: no sync;
    # step 4: 0.6 * (1, 1) + 0.4 * (3.4, 0.8) = (1.96, 0.92)
    assert seen[0] == [1.0, 2.0] and seen[2] == pytest.approx([3.4, 0.8])
    assert seen[1] == pytest.approx([3.4, 0.8]) and seen[3] == pytest.approx([1.96, 0.92])
    assert policy.weight.squeeze(0).tolist() == [1.0, 1.0]  # the policy is never touched


def test_alpha_one_copies_the_policy_and_step_zero_never_syncs():
    policy = _linear([1.0, 2.0])
    ref = ReferencePolicy(policy)
    sync = ReferenceSync(ref, steps=1, alpha=1.0)
    with torch.no_grad():
        policy.weight.copy_(torch.tensor([[7.0, -1.0]]))
    sync.on_step_end(None, SimpleNamespace(global_step=0), None)
    with ref.model() as m:
        assert m.weight.squeeze(0).tolist() == [1.0, 2.0]
    sync.on_step_end(None, SimpleNamespace(global_step=1), None)
    with ref.model() as m:
        assert m.weight.squeeze(0).tolist() == [7.0, -1.0]


def test_a_lora_policy_mixes_nothing_as_trl_under_peft(caplog):
    peft = pytest.importorskip("peft")

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = torch.nn.Linear(2, 2)

        def forward(self, x):
            return self.lin(x)

    policy = peft.get_peft_model(Net(), peft.LoraConfig(r=1, target_modules=["lin"]))
    ref = ReferencePolicy(policy)
    with caplog.at_level("WARNING", logger="dare.rl"):
        ReferenceSync(ref, steps=1, alpha=0.6)
    assert "nothing is mixed" in caplog.text
    assert ref.mix_in(0.6) is False


def test_the_params_hold_trls_defaults():
    p = RLParams()
    assert (p.sync_ref_model, p.ref_model_sync_steps, p.ref_model_mixup_alpha) == (False, 512, 0.6)
    with pytest.raises(ValueError, match="ref_model_mixup_alpha"):
        RLParams(ref_model_mixup_alpha=1.5)


def test_no_callback_without_a_reference_and_it_is_said(caplog):
    ref = ReferencePolicy(_linear([1.0, 2.0]))
    assert reference_sync(ref, RLParams()) is None  # off
    on = RLParams(sync_ref_model=True, ref_model_sync_steps=3, ref_model_mixup_alpha=0.25)
    sync = reference_sync(ref, on)
    assert (sync.steps, sync.alpha, sync.reference) == (3, 0.25, ref)
    with caplog.at_level("WARNING", logger="dare.rl"):
        assert reference_sync(None, on) is None
    assert "no reference policy" in caplog.text


def test_a_launch_that_shards_the_parameters_is_refused_at_validation(tmp_path):
    """The sync needs the policy's whole parameters: ZeRO-3 is refused by name, ZeRO-2 accepted."""
    from types import SimpleNamespace as NS

    from dare.rl.objective import sync_problems
    from dare.testing import repo_root

    on = RLParams(sync_ref_model=True, beta=0.01)
    for config, refused in (("zero3.yaml", True), ("zero2.yaml", False)):
        path = str(repo_root() / "examples" / "accelerate" / config)
        ctx = NS(spec=NS(launch=NS(accelerate_config=path), model=NS(lora=None)), source=None)
        found = sync_problems(on, ctx, "algorithm")
        assert bool(found) == refused, (config, found)
        if refused:
            assert found[0][0] == "algorithm.params.sync_ref_model" and "deepspeed-zero3" in found[0][1]
        assert sync_problems(RLParams(sync_ref_model=True, beta=0.0), ctx, "algorithm") == []  # nothing to sync
        lora = NS(spec=NS(launch=ctx.spec.launch, model=NS(lora={"r": 8})), source=None)
        assert sync_problems(on, lora, "algorithm") == []  # a LoRA reference: nothing is mixed
