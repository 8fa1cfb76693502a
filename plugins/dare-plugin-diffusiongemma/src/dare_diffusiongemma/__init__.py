"""DARE plugin: DiffusionGemma (google/diffusiongemma-*), built on ``transformers``' own
``DiffusionGemmaForBlockDiffusion`` (no copied modeling code).

A causal encoder reads the prompt into a KV cache; a decoder denoises a canvas of ``canvas_length`` tokens with
bidirectional self-attention and cross-attention to that cache, self-conditioned on the previous step's soft
embeddings. Corruption replaces tokens with uniformly random vocabulary tokens (no [MASK]); docs/model-families.md
§7 describes the family.
"""
