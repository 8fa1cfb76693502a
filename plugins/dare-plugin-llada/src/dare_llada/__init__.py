"""DARE plugin: the LLaDA model family (native PyTorch) and LLaDA's official sampler.

Importing this package registers ``LLaDAConfig``/``LLaDAModelLM`` with transformers' ``AutoConfig``,
``AutoModel``, ``AutoModelForCausalLM`` and ``AutoModelForMaskedLM`` for ``model_type: llada``, so
``AutoModel.from_pretrained(dir)`` works without ``trust_remote_code``.
"""

from transformers import AutoConfig, AutoModel, AutoModelForCausalLM, AutoModelForMaskedLM

from dare_llada.configuration_llada import LLaDAConfig
from dare_llada.modeling_llada import LLaDAModelLM

__all__ = ["LLaDAConfig", "LLaDAModelLM"]

AutoConfig.register("llada", LLaDAConfig, exist_ok=True)
for _auto in (AutoModel, AutoModelForCausalLM, AutoModelForMaskedLM):
    _auto.register(LLaDAConfig, LLaDAModelLM, exist_ok=True)
