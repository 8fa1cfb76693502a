"""Gradient (activation) checkpointing for every family, through transformers.

Each first-party family's decoder layer is a ``transformers.modeling_layers.GradientCheckpointingLayer``
(``ModelFamily.decoder_layer_class``; also the FSDP wrap unit). Once enabled, a layer called in training
mode with gradients on runs under ``torch.utils.checkpoint.checkpoint`` (non-reentrant): only its inputs are
kept, and its forward is run again in the backward pass to rebuild the activations. The loss and the
gradients are those of the plain forward (tests/test_gradient_checkpointing.py checks both, per family);
the cost is about one extra forward of the layers per step. Calls without gradients (evaluation, rollouts,
reference-policy scores) run the layer once, as before.
"""

from __future__ import annotations

import torch

from dare.errors import DareError

__all__ = ["enable_gradient_checkpointing", "uses_gradient_checkpointing"]


def enable_gradient_checkpointing(model: torch.nn.Module) -> None:
    """Switch on per-layer gradient checkpointing (non-reentrant ``torch.utils.checkpoint``).

    Call it on the bare ``PreTrainedModel`` before wrapping it (peft, DDP/FSDP).

    :raises DareError: the model class does not support it (``supports_gradient_checkpointing`` is False),
        naming ``model.gradient_checkpointing``.
    """
    if not getattr(model, "supports_gradient_checkpointing", False):
        raise DareError(f"model.gradient_checkpointing: {type(model).__name__} does not support gradient checkpointing "
                        "(its decoder layers must be transformers GradientCheckpointingLayer subclasses and the model "
                        "class must set supports_gradient_checkpointing = True); set model.gradient_checkpointing: "
                        "false")
    kwargs = {"use_reentrant": False}
    enable = getattr(model, "activation_checkpointing_enable", None)  # transformers >= 5.x name
    if enable is not None:
        enable(activation_checkpointing_kwargs=kwargs)
    else:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs=kwargs)


def uses_gradient_checkpointing(model: torch.nn.Module) -> bool:
    """Whether any layer of ``model`` has gradient checkpointing switched on."""
    return any(getattr(m, "gradient_checkpointing", False) is True for m in model.modules())
