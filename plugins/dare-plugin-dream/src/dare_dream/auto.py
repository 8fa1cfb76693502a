"""transformers Auto-class registration of ``dare_dream``.

Importing this module registers ``DreamConfig``/``DreamModel`` with transformers' ``AutoConfig``,
``AutoModel``, ``AutoModelForCausalLM`` and ``AutoModelForMaskedLM`` for ``model_type: Dream``, and
``DreamTokenizer`` with ``AutoTokenizer``, so ``AutoModel.from_pretrained(dir)`` and
``AutoTokenizer.from_pretrained(dir)`` work without ``trust_remote_code`` (also for a released
directory whose ``config.json``/``tokenizer_config.json`` carry an ``auto_map``).

The plugin's ``register_auto_classes`` hook (:mod:`dare_dream.plugin`) imports this module when DARE
first reads or creates a checkpoint, and so does importing one of these classes from ``dare_dream``.
"""

from transformers import AutoConfig, AutoModel, AutoModelForCausalLM, AutoModelForMaskedLM, AutoTokenizer

from dare_dream.configuration_dream import DreamConfig
from dare_dream.modeling_dream import DreamModel
from dare_dream.tokenization_dream import DreamTokenizer

__all__ = ["DreamConfig", "DreamModel", "DreamTokenizer"]

AutoConfig.register("Dream", DreamConfig, exist_ok=True)
for _auto in (AutoModel, AutoModelForCausalLM, AutoModelForMaskedLM):
    _auto.register(DreamConfig, DreamModel, exist_ok=True)
AutoTokenizer.register(DreamConfig, tokenizer_class=DreamTokenizer, exist_ok=True)
