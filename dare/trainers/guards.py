"""Non-finite guards: a NaN/Inf loss or gradient skips the optimizer step; non-finite weights are never saved.

:class:`NonFiniteGuard` wraps the optimizer's ``step``: when the step's loss or any gradient is not finite
the update is skipped (the gradients are dropped, the learning-rate schedule advances, as mixed-precision
loss scaling does), the skip is counted (``nonfinite_steps`` in the logs), and after
``train.max_nonfinite_steps`` skips in a row training stops with :class:`NonFiniteError`. Under
data-parallel training the gradients are already all-reduced, so every process skips the same steps.
:func:`first_nonfinite_parameter` guards every save.
"""

from __future__ import annotations

import torch

from dare.errors import DareError

__all__ = ["NonFiniteError", "first_nonfinite_parameter", "NonFiniteGuard"]

_CAUSES = ("a learning rate too high for this model (train.learning_rate), a starting model with NaN/Inf weights, "
           "an overflow in bf16/fp16 (try train.bf16: false), or a reward/advantage that is NaN")


class NonFiniteError(DareError):
    """Training produced, or was about to save, NaN/Inf values."""


def first_nonfinite_parameter(model: torch.nn.Module) -> str | None:
    """The name of the first parameter holding a NaN or Inf, or None when every value is finite."""
    for name, p in model.named_parameters():
        if not bool(torch.isfinite(p.detach()).all()):
            return name
    return None


class NonFiniteGuard:
    """Decides, before each optimizer step, whether the step is finite (module docstring).

    :param max_consecutive: skips in a row that stop training (``train.max_nonfinite_steps``).
    """

    def __init__(self, max_consecutive: int):
        self.max_consecutive = max_consecutive
        self.total = 0
        self.consecutive = 0
        self.loss_finite = True

    def observe_loss(self, loss: torch.Tensor | float) -> None:
        """Record one micro-batch loss of the current step."""
        if not bool(torch.isfinite(torch.as_tensor(loss)).all()):
            self.loss_finite = False

    def step_is_finite(self, parameters) -> bool:
        """Whether the pending step may be applied: finite losses and finite gradients."""
        finite = self.loss_finite and all(bool(torch.isfinite(p.grad).all()) for p in parameters if p.grad is not None)
        self.loss_finite = True
        return finite

    def skipped(self, step: int, learning_rate: float | None) -> None:
        """Count a skipped step; raise after ``max_consecutive`` in a row.

        :raises NonFiniteError: naming the step, the learning rate and the likely causes.
        """
        self.total += 1
        self.consecutive += 1
        if self.consecutive >= self.max_consecutive:
            lr = f" (learning rate {learning_rate:g})" if learning_rate is not None else ""
            raise NonFiniteError(
                f"step {step}: the loss or the gradients were NaN/Inf for {self.consecutive} optimizer steps in a row"
                f"{lr}, so those updates were skipped and training stopped; no non-finite weights were saved (the last "
                f"checkpoint, if any, is intact). Likely causes: {_CAUSES}. Fix the cause and re-run the same command "
                f"to resume from the last checkpoint, or raise train.max_nonfinite_steps to tolerate more skips")

    def applied(self) -> None:
        """A finite step was applied: the run of skips is over."""
        self.consecutive = 0

    def refuse_to_save(self, model: torch.nn.Module, what: str) -> None:
        """:raises NonFiniteError: ``model`` holds a NaN/Inf weight (naming it); nothing is written."""
        bad = first_nonfinite_parameter(model)
        if bad is not None:
            raise NonFiniteError(f"not saving {what}: weight {bad!r} holds NaN/Inf values. Likely causes: {_CAUSES}. "
                                 "The previous checkpoint (if any) is intact")
