"""Supervised (prompt, response) examples: tokenisation and family-aware padding.

Padding follows the model family's convention (``ModelFamily.pad_in_response``):

* LLaDA/Dream (True): responses end with EOS and the batch is right-padded with **EOS** tokens that
  are attended to and count as response tokens (they are learnable; the response length includes
  them), as in LLaDA's SFT (arXiv 2502.09992 §2.3, Appendix B.1).
* block families (False): right-padded with the pad id, attention mask 0, excluded from the loss.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from dare.components import SpecialTokens

__all__ = ["SupervisedExample", "tokenize_example", "SupervisedCollator"]


@dataclass
class SupervisedExample:
    """Token ids of one (prompt, response + EOS) pair; ``index`` is its position in the dataset (the key of
    its per-example random draws; -1 when unknown)."""

    prompt_ids: list[int]
    response_ids: list[int]
    index: int = -1


def tokenize_example(tokenizer, prompt: str, response: str, tokens: SpecialTokens,
                     max_length: int | None = None) -> SupervisedExample | None:
    """Token ids of ``prompt`` and ``response + EOS`` (no extra special tokens; chat templates add theirs).

    :returns: None when ``max_length`` is set and the pair is longer (callers drop it).
    """
    p = tokenizer(prompt, add_special_tokens=False)["input_ids"]
    r = tokenizer(response, add_special_tokens=False)["input_ids"] + [tokens.eos_id]
    if max_length is not None and len(p) + len(r) > max_length:
        return None
    return SupervisedExample(p, r)


class SupervisedCollator:
    """Batch ``SupervisedExample``s as ``[prompt ; response ; padding]`` rows.

    Returns ``input_ids`` ``[B, L]`` int64, ``attention_mask`` ``[B, L]`` int64, ``prompt_mask``
    ``[B, L]`` bool, ``loss_mask`` ``[B, L]`` bool (response positions, padding included iff
    ``pad_in_response``), ``response_length`` ``[B]`` int64 (= ``loss_mask.sum(1)``) and ``index``
    ``[B]`` int64 (the examples' ``index``).
    ``pad_to_multiple_of`` rounds ``L`` up (block families need whole blocks). ``pad_to_length`` pads every
    batch to at least that length: with EOS padding counted as response, an example's loss depends on the
    padded length, so DARE pads such families to the dataset's longest example (the loss of an example is
    then the same in any batch, on any number of processes).
    """

    def __init__(self, tokens: SpecialTokens, pad_in_response: bool, pad_to_multiple_of: int | None = None,
                 pad_to_length: int | None = None):
        self.tokens = tokens
        self.pad_in_response = pad_in_response
        self.multiple = pad_to_multiple_of
        self.length = pad_to_length

    def __call__(self, batch: list[SupervisedExample]) -> dict[str, Any]:
        import torch  # here, not at module level: supervised objectives are imported to validate a spec

        L = max([len(e.prompt_ids) + len(e.response_ids) for e in batch] + [self.length or 0])
        if self.multiple:
            L = -(-L // self.multiple) * self.multiple
        B = len(batch)
        fill = self.tokens.eos_id if self.pad_in_response else self.tokens.pad_id
        ids = torch.full((B, L), fill, dtype=torch.long)
        attn = torch.zeros((B, L), dtype=torch.long)
        prompt_mask = torch.zeros((B, L), dtype=torch.bool)
        loss_mask = torch.zeros((B, L), dtype=torch.bool)
        for i, e in enumerate(batch):
            lp, n = len(e.prompt_ids), len(e.prompt_ids) + len(e.response_ids)
            ids[i, :lp] = torch.tensor(e.prompt_ids, dtype=torch.long)
            ids[i, lp:n] = torch.tensor(e.response_ids, dtype=torch.long)
            prompt_mask[i, :lp] = True
            if self.pad_in_response:
                attn[i] = 1
                loss_mask[i, lp:] = True
            else:
                attn[i, :n] = 1
                loss_mask[i, lp:n] = True
        return {
            "input_ids": ids,
            "attention_mask": attn,
            "prompt_mask": prompt_mask,
            "loss_mask": loss_mask,
            "response_length": loss_mask.sum(dim=1),
            "index": torch.tensor([e.index for e in batch], dtype=torch.long),
        }
