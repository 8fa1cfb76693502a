"""Prompts as a training dataset, and the order in which rollout batches visit them.

The trainer's dataloader yields batches of *prompts* (``per_device_train_batch_size`` each); the
rollout happens inside the training step. :class:`RepeatChunkSampler` yields each rollout batch
(``batch_size * gradient_accumulation_steps`` prompts) ``num_iterations`` times in a row, so the
``mu`` inner iterations (one optimizer step each) see the same prompts, as TRL's ``RepeatSampler``.
The order is a function of ``(seed, epoch)`` only, so a resumed run skips to exactly the same batches.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import torch
from torch.utils.data import Sampler

from dare.errors import DataError

__all__ = ["PromptDataset", "RepeatChunkSampler", "collate_prompts"]


@dataclass
class PromptDataset:
    """Rendered prompts with their source rows (``dare.data`` row format).

    Items are dicts ``{"index": int, "prompt": str, "row": dict}``; ``row`` is what rewards score.
    """

    prompts: list[str]
    rows: list[dict[str, Any]]

    @classmethod
    def from_rows(cls, rows, prompter, tokenizer, max_length: int | None, gen_length: int, context: int | None = None,
                  where: str = "data.train", offset: int = 0) -> PromptDataset:
        """Render prompts with a ``dare.data.Prompter``; drop those with ``len(prompt) + gen_length > max_length``.

        With the model's ``context`` (tokens), a prompt whose text is far beyond it is refused before anything
        tokenises it (:class:`dare.data.checks.LengthCheck`; dropped with ``max_length``); ``where`` (the file)
        and ``offset`` (of ``rows[0]``) name its row.

        :raises DataError: such a prompt, without ``max_length``.
        """
        from dare.data.checks import LengthCheck, max_token_chars

        check = LengthCheck(context, max_length, max_token_chars(tokenizer), where) if context else None
        keep_p, keep_r = [], []
        for i, row in enumerate(rows):
            text = prompter.prompt(row)
            if check is not None and not check.text_fits(offset + i, text, ""):
                continue
            if max_length is not None:
                n = len(tokenizer(text, add_special_tokens=False)["input_ids"])
                if n + gen_length > max_length:
                    continue
            keep_p.append(text)
            keep_r.append(row)
        return cls(keep_p, keep_r)

    def __len__(self) -> int:
        return len(self.prompts)

    def __getitem__(self, i: int) -> dict[str, Any]:
        return {"index": i, "prompt": self.prompts[i], "row": self.rows[i]}


def collate_prompts(items: list[dict[str, Any]]) -> dict[str, list]:
    """``{"index": [...], "prompt": [...], "row": [...]}`` (no tensors: the rollout tokenises)."""
    return {key: [it[key] for it in items] for key in ("index", "prompt", "row")}


class RepeatChunkSampler(Sampler[int]):
    """Shuffled indices, cut into chunks of ``chunk_size``, each chunk repeated ``repeats`` times.

    An incomplete last chunk is dropped. ``set_epoch`` (called by the trainer) reshuffles with
    ``seed + epoch``.

    :raises ValueError: ``chunk_size`` or ``repeats`` below 1.
    :raises dare.errors.DataError: fewer items than one chunk.
    """

    def __init__(self, num_items: int, chunk_size: int, repeats: int, seed: int = 0):
        if chunk_size < 1 or repeats < 1:
            raise ValueError(f"chunk_size and repeats must be >= 1, got {chunk_size} and {repeats}")
        if num_items < chunk_size:
            raise DataError(f"{num_items} training prompts cannot fill one rollout batch of {chunk_size} prompts "
                            "(train.per_device_batch_size x gradient_accumulation_steps); add prompts or lower the "
                            "batch size")
        self.num_items, self.chunk_size, self.repeats, self.seed = num_items, chunk_size, repeats, seed
        self.epoch = 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def __len__(self) -> int:
        return (self.num_items // self.chunk_size) * self.chunk_size * self.repeats

    def __iter__(self) -> Iterator[int]:
        g = torch.Generator().manual_seed(self.seed + self.epoch)
        order = torch.randperm(self.num_items, generator=g).tolist()
        for start in range(0, len(order) - self.chunk_size + 1, self.chunk_size):
            chunk = order[start : start + self.chunk_size]
            for _ in range(self.repeats):
                yield from chunk
