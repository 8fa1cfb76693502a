"""transformers Auto-class registration of ``dare_llada``.

Importing this module registers ``LLaDAConfig``/``LLaDAModelLM`` with transformers' ``AutoConfig``,
``AutoModel``, ``AutoModelForCausalLM`` and ``AutoModelForMaskedLM`` for ``model_type: llada``, so
``AutoModel.from_pretrained(dir)`` works without ``trust_remote_code``.

The plugin's ``register_auto_classes`` hook (:mod:`dare_llada.plugin`) imports this module when DARE
first reads or creates a checkpoint, and so does importing one of these classes from ``dare_llada``.
"""

from transformers import AutoConfig, AutoModel, AutoModelForCausalLM, AutoModelForMaskedLM

from dare_llada.configuration_llada import LLaDAConfig
from dare_llada.modeling_llada import LLaDAModelLM

__all__ = ["LLaDAConfig", "LLaDAModelLM"]

AutoConfig.register("llada", LLaDAConfig, exist_ok=True)
for _auto in (AutoModel, AutoModelForCausalLM, AutoModelForMaskedLM):
    _auto.register(LLaDAConfig, LLaDAModelLM, exist_ok=True)
