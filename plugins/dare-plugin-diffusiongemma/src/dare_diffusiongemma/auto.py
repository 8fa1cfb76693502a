"""transformers Auto-class registration of ``dare_diffusiongemma``.

``transformers`` maps ``model_type: diffusion_gemma`` to ``DiffusionGemmaModel`` (no LM head) under ``AutoModel``;
DARE loads and creates checkpoints with ``AutoModel``, so importing this module maps the config to
``DiffusionGemmaForBlockDiffusion``, the class whose ``save_pretrained`` writes the official checkpoint
(``model.*`` tensors, ``lm_head`` tied to the embedding).
"""

from transformers import AutoModel, DiffusionGemmaConfig, DiffusionGemmaForBlockDiffusion

__all__ = ["DiffusionGemmaConfig", "DiffusionGemmaForBlockDiffusion"]

AutoModel.register(DiffusionGemmaConfig, DiffusionGemmaForBlockDiffusion, exist_ok=True)
