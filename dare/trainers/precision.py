"""Mixed precision that trains: fp32 master weights for 16-bit models.

A 16-bit weight keeps 8 significant bits (bfloat16) or 11 (float16). An AdamW step moves each weight by about the
learning rate (``lr * m / sqrt(v)`` with ``|m / sqrt(v)|`` near 1), and the rounded result equals the old weight
whenever the step is below half the spacing of 16-bit numbers at that weight: for bfloat16, ``|w| * 2**-8`` to
``|w| * 2**-9``. At ``lr = 1e-5`` every bfloat16 weight above about 2.6e-3 in magnitude never changes (measured in
docs/results.md, benchmarks/bf16_updates.py: after 10 steps of a tiny LLaDA, 2.7 % of the weights had changed at
all, against 85.9 % with fp32 master weights, as many as with fp32 weights). Mixed-precision training therefore keeps
fp32 master weights and computes in 16 bits (Micikevicius et al., *Mixed Precision Training*, arXiv 1710.03740,
Sec. 3.1).

What each launch does with ``train.bf16: true`` and 16-bit trainable weights (``model.dtype: bfloat16``):

* DeepSpeed ZeRO (``bf16.enabled``): its optimizer keeps fp32 master copies of the 16-bit weights;
* accelerate's FSDP2 (``mixed_precision != 'no'``): upcasts every trainable parameter to fp32 before sharding
  (``accelerate.utils.fsdp_utils.fsdp2_prepare_model``); ``MixedPrecisionPolicy`` casts to bf16 for compute;
* one process or DDP: :func:`upcast_trainable_to_fp32`, called by :meth:`dare.trainers.base.DareTrainer.train`
  before training starts (after the reference copy is taken, before a checkpoint is resumed), does the same as
  FSDP2, and bf16 autocast computes in bf16; TraceRL's value model is cast likewise (by TraceRL's trainer).

With ``train.bf16: false`` nothing upcasts (pure 16-bit training): validation refuses it when the learning rate is
below :data:`MIN_PURE_16BIT_LR` (:func:`pure_16bit_problem`). LoRA adapters are kept in fp32 by peft
(``autocast_adapter_dtype``), frozen weights stay 16-bit.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch

__all__ = ["MIN_PURE_16BIT_LR", "upcast_trainable_to_fp32", "pure_16bit_problem"]

#: Below this learning rate, pure 16-bit AdamW loses most updates: half the bfloat16 spacing at a weight of magnitude
#: 2**-6 (0.0156, under the usual 0.02 initialisation scale) is 2**-6 * 2**-8 = 6.1e-5, so at 1e-4 and above only
#: weights larger than about 0.026 lose their steps.
MIN_PURE_16BIT_LR = 1e-4


def upcast_trainable_to_fp32(model: torch.nn.Module) -> list[str]:
    """Cast every trainable 16-bit floating parameter of ``model`` to float32 in place (``param.data``: the same
    Parameter objects, so tied weights stay tied), the fp32 master weights of mixed-precision training; frozen
    parameters (a LoRA base, a reference copy) keep their dtype.

    :returns: the names of the parameters cast (empty when every trainable parameter is already fp32).
    """
    import torch  # here, so that validation (pure_16bit_problem) does not import torch

    cast = []
    for name, param in model.named_parameters():
        if param.requires_grad and param.dtype in (torch.bfloat16, torch.float16):
            param.data = param.data.to(torch.float32)
            cast.append(name)
    return cast


def pure_16bit_problem(dtype: str, bf16: bool, lora: bool, learning_rate: float) -> str | None:
    """Why a spec would train 16-bit weights without fp32 master weights and lose its updates, or None.

    :param dtype: ``model.dtype`` (``float32``, ``bfloat16``, ``float16``).
    :param bf16: ``train.bf16`` (mixed precision: fp32 master weights, bf16 compute).
    :param lora: the model trains LoRA adapters (peft keeps them in fp32).
    :param learning_rate: ``train.learning_rate`` (peak).
    :returns: one paragraph naming the fields and the fix, when ``dtype`` is 16-bit, ``bf16`` is off, there is no
        LoRA and ``learning_rate < MIN_PURE_16BIT_LR``.
    """
    if dtype == "float32" or bf16 or lora or learning_rate >= MIN_PURE_16BIT_LR:
        return None
    return (f"model.dtype {dtype} with train.bf16: false trains the {dtype} weights themselves (no fp32 master "
            f"weights): an AdamW step of about the learning rate ({learning_rate:g}) is below half the {dtype} "
            "spacing of most weights and rounds away (10 steps at lr 1e-5 changed 2.7 % of a tiny model's weights, "
            "against 85.9 % with fp32 master weights). Set train.bf16: true (bf16 compute, fp32 master weights), or "
            "model.dtype: float32")
