"""The reference policy synced to the policy every N optimizer steps (``RLParams.sync_ref_model``).

TRL's rule (``GRPOConfig.sync_ref_model``, ``ref_model_sync_steps``, ``ref_model_mixup_alpha``;
``SyncRefModelCallback``, huggingface/trl@1bca49515ecd5b85d16e68c42c76670e252e19f1 ``trl/trainer/callbacks.py:125-131``,
the TRL commit apple/ml-diffucoder pins; TR-DPO, arXiv 2404.09656): at the end of every optimizer step ``s`` with
``s % ref_model_sync_steps == 0`` (``s`` counts from 1, so never before the first update),
``ref <- alpha * policy + (1 - alpha) * ref`` for every parameter
(:meth:`dare.modeling.lora.ReferencePolicy.mix_in`). With a LoRA policy nothing is mixed: the reference is the base
with the adapters disabled, and TRL keeps no reference copy under PEFT, so its callback does nothing either. Like TRL,
the mixed reference is not checkpointed: a resumed run restarts it from the initial weights.
"""

from __future__ import annotations

import logging

from transformers import TrainerCallback

__all__ = ["ReferenceSync", "reference_sync"]

log = logging.getLogger("dare.rl")


class ReferenceSync(TrainerCallback):
    """Mixes the policy into ``reference`` (a :class:`dare.modeling.lora.ReferencePolicy`) every ``steps`` optimizer
    steps with weight ``alpha`` (module docstring). Every process mixes its own identical copy."""

    def __init__(self, reference, steps: int, alpha: float):
        self.reference = reference
        self.steps = int(steps)
        self.alpha = float(alpha)
        if reference.shares_weights:
            log.warning("sync_ref_model: the policy is a LoRA model, whose reference is the base with the adapters "
                        "disabled; nothing is mixed (as TRL under PEFT)")

    def on_step_end(self, args, state, control, **kwargs):
        if state.global_step > 0 and state.global_step % self.steps == 0:
            self.reference.mix_in(self.alpha)
        return control


def reference_sync(reference, params) -> ReferenceSync | None:
    """The callback for ``params.sync_ref_model`` (an :class:`~dare.rl.losses.RLParams`), or None when it is off or
    there is no reference policy to sync (``reference`` None: ``beta = 0``, or a KL against the rollout policy), which
    is logged, as TRL's callback does nothing without a reference model."""
    if not params.sync_ref_model:
        return None
    if reference is None:
        log.warning("sync_ref_model: there is no reference policy (beta = 0 or a KL against the rollout policy); "
                    "nothing to sync")
        return None
    return ReferenceSync(reference, params.ref_model_sync_steps, params.ref_model_mixup_alpha)
