"""transformers Auto-class registration of ``dare_llada2``.

Importing this module registers ``LLaDA2MoeConfig``/``LLaDA2MoeModelLM`` with transformers'
``AutoConfig``, ``AutoModel``, ``AutoModelForCausalLM`` and ``AutoModelForMaskedLM`` for
``model_type: llada2_moe``, so ``AutoModel.from_pretrained(dir)`` works without ``trust_remote_code``,
also for a release ``config.json`` that carries an ``auto_map``. ``AutoModel`` returns the model with
its LM head (DARE always wants logits), not the release's bare backbone.

The plugin's ``register_auto_classes`` hook (:mod:`dare_llada2.plugin`) imports this module when DARE
first reads or creates a checkpoint, and so does importing one of these classes from ``dare_llada2``.
"""

from transformers import AutoConfig, AutoModel, AutoModelForCausalLM, AutoModelForMaskedLM

from dare_llada2.configuration_llada2_moe import LLaDA2MoeConfig
from dare_llada2.modeling_llada2_moe import LLaDA2MoeModelLM

__all__ = ["LLaDA2MoeConfig", "LLaDA2MoeModelLM"]

AutoConfig.register("llada2_moe", LLaDA2MoeConfig, exist_ok=True)
for _auto in (AutoModel, AutoModelForCausalLM, AutoModelForMaskedLM):
    _auto.register(LLaDA2MoeConfig, LLaDA2MoeModelLM, exist_ok=True)
