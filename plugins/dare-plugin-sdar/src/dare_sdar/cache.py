"""The KV cache of SDAR's block decoder: committed blocks only.

Semantics of the official ``store_kv`` flag (JetAstra/SDAR ``generate.py`` with the release's
``modeling_sdar.py``; docs/model-families.md §3.4), one operation each:

* :meth:`SDARCache.append` (``store_kv=True``): append this call's keys/values to the layer's cache and
  attend over the whole cache; used for the prompt prefill and to commit a finished block;
* :meth:`SDARCache.extend` (``store_kv=False``): attend over ``[cache ; this call]`` without storing
  ("peek and concat"); used at every denoising step of the active block.

Keys are stored after QK-norm and RoPE, so a stored block never needs re-rotation. A plain per-layer list
replaces ``transformers.DynamicCache`` (whose internals changed across transformers 4.x/5.x).
"""

from __future__ import annotations

import torch

__all__ = ["SDARCache"]


class SDARCache:
    """Per-layer keys and values ``[B, nkv, T, hd]`` (model dtype) of the committed tokens."""

    def __init__(self) -> None:
        self.keys: list[torch.Tensor] = []
        self.values: list[torch.Tensor] = []

    def __len__(self) -> int:
        """Number of layers holding entries."""
        return len(self.keys)

    def seq_length(self) -> int:
        """Cached positions ``T`` (0 when empty)."""
        return self.keys[0].shape[-2] if self.keys else 0

    def append(self, layer_idx: int, key: torch.Tensor, value: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Store ``key``/``value`` ``[B, nkv, L, hd]`` after the layer's cache; return the full cache.

        :raises IndexError: ``layer_idx`` skips a layer (layers must be filled in order).
        """
        if layer_idx == len(self.keys):
            self.keys.append(key)
            self.values.append(value)
        elif layer_idx < len(self.keys):
            self.keys[layer_idx] = torch.cat([self.keys[layer_idx], key], dim=-2)
            self.values[layer_idx] = torch.cat([self.values[layer_idx], value], dim=-2)
        else:
            raise IndexError(f"cache has {len(self.keys)} layers; cannot append to layer {layer_idx}")
        return self.keys[layer_idx], self.values[layer_idx]

    def extend(self, layer_idx: int, key: torch.Tensor, value: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``[cache ; key]`` and ``[cache ; value]`` for this call only (the cache is unchanged)."""
        if layer_idx >= len(self.keys):
            return key, value
        return torch.cat([self.keys[layer_idx], key], dim=-2), torch.cat([self.values[layer_idx], value], dim=-2)
