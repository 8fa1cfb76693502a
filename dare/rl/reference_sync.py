"""The reference policy synced to the policy every N optimizer steps (``RLParams.sync_ref_model``).

TRL's rule (``GRPOConfig.sync_ref_model``, ``ref_model_sync_steps``, ``ref_model_mixup_alpha``;
``SyncRefModelCallback``, huggingface/trl@1bca49515ecd5b85d16e68c42c76670e252e19f1 ``trl/trainer/callbacks.py:125-131``,
the TRL commit apple/ml-diffucoder pins; TR-DPO, arXiv 2404.09656): at the end of every optimizer step ``s`` with
``s % ref_model_sync_steps == 0`` (``s`` counts from 1, so never before the first update),
``ref <- alpha * policy + (1 - alpha) * ref`` for every parameter
(:meth:`dare.modeling.lora.ReferencePolicy.mix_in`). With a LoRA policy nothing is mixed: the reference is the base
with the adapters disabled, and TRL keeps no reference copy under PEFT, so its callback does nothing either. Unlike
TRL, the mixed reference is checkpointed (``reference_policy.safetensors`` in each checkpoint), so a resumed run
equals the uninterrupted one.
"""

from __future__ import annotations

import logging
import os

from transformers import TrainerCallback

__all__ = ["ReferenceSync", "reference_sync", "REFERENCE_FILE"]

#: the mixed reference policy's weights in a checkpoint directory
REFERENCE_FILE = "reference_policy.safetensors"

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

    def save(self, output_dir: str) -> None:
        """Write the mixed reference copy into the staged checkpoint ``output_dir`` (safetensors, main process)."""
        from safetensors.torch import save_file

        from dare.scaling import distributed

        copy = self.reference._copy
        if copy is not None and distributed.is_main():
            state = {k: v.detach().contiguous().cpu() for k, v in copy.state_dict().items()}
            save_file(state, os.path.join(output_dir, REFERENCE_FILE))

    def load(self, checkpoint: str) -> None:
        """Read the mixed reference copy back from ``checkpoint`` (a checkpoint written before it existed keeps the
        initial reference, as TRL)."""
        from safetensors.torch import load_file

        path = os.path.join(checkpoint, REFERENCE_FILE)
        copy = self.reference._copy
        if copy is not None and os.path.isfile(path):
            copy.load_state_dict(load_file(path), strict=True)

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
