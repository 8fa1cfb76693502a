"""Gradient checkpointing (``model.gradient_checkpointing``) for every family: the same loss and gradients as
without it, and the decoder layers really are recomputed in the backward pass."""

from __future__ import annotations

import json

import pytest
import torch
import yaml

from dare.modeling import enable_gradient_checkpointing
from dare.modeling.gradient_checkpointing import uses_gradient_checkpointing
from dare.testing import tiny_model

FAMILIES = [("llada", "tiny"), ("dream", "tiny"), ("sdar", "tiny"), ("sdar", "tiny-moe"), ("llada2", "tiny")]


def _family(name: str):
    from dare.plugins.manager import get_registry

    return get_registry().get("model_family", name).create()


def _loss_and_grads(model, family, noisy, clean, masked):
    """Masked-token cross-entropy of the training forward (``denoiser_logits``) and every parameter's gradient."""
    model.zero_grad(set_to_none=True)
    torch.manual_seed(0)
    logits = family.denoiser_logits(model, noisy, clean, None)
    loss = torch.nn.functional.cross_entropy(logits[masked].float(), clean[masked])
    loss.backward()
    grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    return loss.detach(), grads


def _count_linear_calls(model, layer_cls: str) -> tuple[dict[str, int], list]:
    """Forward-call counters of every ``nn.Linear`` inside the decoder layers (hooks returned for removal)."""
    counts: dict[str, int] = {}
    hooks = []
    for lname, layer in model.named_modules():
        if type(layer).__name__ != layer_cls:
            continue
        for name, mod in layer.named_modules():
            if isinstance(mod, torch.nn.Linear):
                key = f"{lname}.{name}"
                counts[key] = 0

                def hook(_m, _i, _o, key=key):
                    counts[key] += 1

                hooks.append(mod.register_forward_hook(hook))
    return counts, hooks


@pytest.mark.parametrize("name,preset", FAMILIES)
def test_checkpointing_gives_the_same_loss_and_gradients_and_recomputes_each_layer(tmp_path, name, preset):
    pytest.importorskip(f"dare_{name}")
    family = _family(name)
    lm = tiny_model(name, tmp_path / "m", preset=preset)
    model = lm.model.float().train()
    gen = torch.Generator().manual_seed(0)
    vocab = model.config.vocab_size
    clean = torch.randint(0, min(vocab, 250), (2, 16), generator=gen)
    masked = torch.rand(2, 16, generator=gen) < 0.5
    masked[:, 0] = True
    noisy = torch.where(masked, torch.full_like(clean, lm.tokens.mask_id), clean)

    counts, hooks = _count_linear_calls(model, family.decoder_layer_class)
    assert counts, f"no Linear inside {family.decoder_layer_class}"
    loss0, grads0 = _loss_and_grads(model, family, noisy, clean, masked)
    plain = dict(counts)
    assert all(v >= 1 for v in plain.values() if v) and sum(plain.values()) > 0

    assert not uses_gradient_checkpointing(model)
    enable_gradient_checkpointing(model)
    assert uses_gradient_checkpointing(model)
    counts.update(dict.fromkeys(counts, 0))
    loss1, grads1 = _loss_and_grads(model, family, noisy, clean, masked)
    # every decoder layer was run again in the backward pass (the recomputation stops once every tensor the
    # backward needs is rebuilt, so a layer's last projection may run only once: torch's checkpoint early stop)
    assert all(plain[k] <= counts[k] <= 2 * plain[k] for k in counts)
    layers = {_layer_of(k, family.decoder_layer_class, model) for k in counts}
    assert len(layers) == model.config.num_hidden_layers
    for layer in layers:
        mine = [k for k in counts if _layer_of(k, family.decoder_layer_class, model) == layer]
        assert sum(counts[k] for k in mine) > sum(plain[k] for k in mine), f"{layer} was not recomputed"

    assert torch.allclose(loss0, loss1, rtol=0, atol=1e-6), (float(loss0), float(loss1))
    assert grads0.keys() == grads1.keys() and len(grads0) > 0
    worst = max(float((grads0[k] - grads1[k]).abs().max()) for k in grads0)
    assert worst <= 1e-6, f"gradients differ by up to {worst}"

    # without gradients (evaluation, rollouts) the layers run once
    counts.update(dict.fromkeys(counts, 0))
    with torch.no_grad():
        family.denoiser_logits(model, noisy, clean, None)
    assert counts == plain
    for h in hooks:
        h.remove()


def _layer_of(key: str, layer_cls: str, model) -> str:
    """The decoder layer (module name) that the Linear ``key`` belongs to."""
    names = [n for n, m in model.named_modules() if type(m).__name__ == layer_cls and key.startswith(n + ".")]
    return max(names, key=len)


def test_spec_flag_switches_it_on_and_sft_losses_are_unchanged(tmp_path):
    pytest.importorskip("dare_llada")
    from dare.run import Run

    def spec(name: str, gc: bool) -> str:
        s = {
            "model": {"new": {"family": "llada", "preset": "tiny"}, "gradient_checkpointing": gc},
            "data": {"train": {"path": "dare://sudoku/train.parquet", "limit": 16, "prompt_template": "{{ extra_info.puzzle }}",
                               "chat_template": False, "response_template": "{{ reward_model.ground_truth }}"}},
            "algorithm": {"name": "sft"},
            "train": {"learning_rate": 1e-3, "max_steps": 2, "per_device_batch_size": 4, "logging_steps": 1,
                      "save_steps": 2, "num_threads": 1},
            "output": {"dir": str(tmp_path / name)},
        }
        path = tmp_path / f"{name}.yaml"
        path.write_text(yaml.safe_dump(s))
        return str(path)

    losses = {}
    for gc in (False, True):
        run = Run.from_file(spec(f"gc{int(gc)}", gc))
        run.prepare()
        assert uses_gradient_checkpointing(run.model) is gc
        run.execute(train=True, evaluate=False)
        recs = [json.loads(x) for x in (run.dir / "metrics.jsonl").read_text().splitlines()]
        losses[gc] = [r["loss"] for r in recs if "loss" in r]
    assert len(losses[False]) == 2 and losses[True] == pytest.approx(losses[False], abs=1e-6)


def test_a_family_without_support_is_refused_by_name():
    class NoSupport(torch.nn.Module):
        supports_gradient_checkpointing = False

    from dare.errors import DareError

    with pytest.raises(DareError, match="model.gradient_checkpointing"):
        enable_gradient_checkpointing(NoSupport())
