"""transformers Auto-class registration of ``dare_sdar``.

Importing this module registers ``SDARConfig``/``SDARForCausalLM`` (``model_type: sdar``) and
``SDARMoeConfig``/``SDARMoeForCausalLM`` (``model_type: sdar_moe``) with transformers' ``AutoConfig``,
``AutoModel`` and ``AutoModelForCausalLM``, so ``AutoModel.from_pretrained(dir)`` loads a release (or a
DARE checkpoint) without ``trust_remote_code``, also when ``config.json`` carries the release's
``auto_map`` (a registered local class wins over remote code).

The plugin's ``register_auto_classes`` hook (:mod:`dare_sdar.plugin`) imports this module when DARE
first reads or creates a checkpoint, and so does importing one of these classes from ``dare_sdar``.
"""

from transformers import AutoConfig, AutoModel, AutoModelForCausalLM

from dare_sdar.cache import SDARCache
from dare_sdar.configuration_sdar import SDARConfig
from dare_sdar.configuration_sdar_moe import SDARMoeConfig
from dare_sdar.modeling_sdar import SDARForCausalLM
from dare_sdar.modeling_sdar_moe import SDARMoeForCausalLM

__all__ = ["SDARCache", "SDARConfig", "SDARMoeConfig", "SDARForCausalLM", "SDARMoeForCausalLM"]

for _cfg, _model in ((SDARConfig, SDARForCausalLM), (SDARMoeConfig, SDARMoeForCausalLM)):
    AutoConfig.register(_cfg.model_type, _cfg, exist_ok=True)
    for _auto in (AutoModel, AutoModelForCausalLM):
        _auto.register(_cfg, _model, exist_ok=True)
