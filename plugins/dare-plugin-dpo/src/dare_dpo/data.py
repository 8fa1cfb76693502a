"""Preference pairs: loading, validation, tokenisation and family-aware collation.

A pairs dataset (parquet, JSONL or a hub dataset id) has the columns

* ``prompt``: chat messages (``[{role, content}, ...]``) or plain text (or use ``prompt_template``);
* ``chosen`` and ``rejected``: the preferred and dispreferred responses, as text or as chat messages
  whose last message is the assistant's reply (TRL's conversational format).

Prompts are rendered like every other DARE dataset (:class:`dare.data.Prompter`: templates, chat
template, system prompt). Each response is tokenised as ``response + EOS``; a batch holds the ``B``
chosen sequences followed by the ``B`` rejected ones, padded by the family's convention
(:class:`dare.data.supervised.SupervisedCollator`), so both halves share one length.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from dare.data.supervised import SupervisedCollator, SupervisedExample, tokenize_example
from dare.errors import DataError

__all__ = [
    "PAIR_COLUMNS",
    "PreferencePair",
    "PairExample",
    "pair_column_problems",
    "response_text",
    "load_pairs",
    "tokenize_pairs",
    "PairCollator",
]

#: Columns a pairs dataset needs besides the prompt.
PAIR_COLUMNS = ("chosen", "rejected")


@dataclass
class PreferencePair:
    """One validated row: the raw ``row`` (for prompt rendering) and its two response texts."""

    row: dict[str, Any]
    chosen: str
    rejected: str


@dataclass
class PairExample:
    """Token ids of one pair; both share the prompt ids."""

    chosen: SupervisedExample
    rejected: SupervisedExample


def pair_column_problems(path: str, loc: str) -> list[tuple[str, str]]:
    """Spec-validation problems for a pairs file lacking ``chosen``/``rejected`` (hub ids: checked at load).

    :param loc: the dataset's YAML path, e.g. ``data.train``.
    """
    from dare.data import dataset_columns

    try:
        cols = dataset_columns(path)
    except DataError:
        return []  # reported by the core dataset check
    if cols is None:
        return []
    return [
        (f"{loc}.path", f"{path} has no column {col!r}; a preference dataset needs the columns prompt, chosen and "
                        f"rejected (its columns are: {', '.join(cols)})")
        for col in PAIR_COLUMNS
        if col not in cols
    ]


def response_text(value: Any, column: str, where: str) -> str:
    """The response of a ``chosen``/``rejected`` cell: a string, or the last message of a chat list.

    :raises DataError: naming ``column`` and the row, for an empty, non-assistant or malformed value.
    """
    if isinstance(value, (list, tuple)):
        if not value or not isinstance(value[-1], dict) or "content" not in value[-1]:
            raise DataError(f"{where}: column {column!r} must be text or chat messages [{{role, content}}, ...]")
        last = value[-1]
        if last.get("role", "assistant") != "assistant":
            raise DataError(f"{where}: the last message of {column!r} has role {last.get('role')!r}; it must be the "
                            "assistant's response")
        value = last["content"]
    if not isinstance(value, str):
        raise DataError(f"{where}: column {column!r} must be text or chat messages, got {type(value).__name__}")
    if not value.strip():
        raise DataError(f"{where}: column {column!r} is empty; every pair needs two non-empty responses")
    return value


def load_pairs(
    path: str, limit: int | None = None, split: str = "train", loc: str = "data.train", offset: int = 0
) -> list[PreferencePair]:
    """Load and validate preference pairs (before any model is loaded): rows ``offset .. offset+limit-1``.

    :param loc: the dataset's YAML path, used in messages.
    :raises DataError: missing file or ``chosen``/``rejected`` column, malformed responses, or a row
        whose chosen and rejected responses are identical.
    """
    from dare.data import load_rows

    try:
        rows = load_rows(path, limit=limit, split=split, columns=list(PAIR_COLUMNS), offset=offset)
    except DataError as exc:
        raise DataError(f"{loc}.path: {exc}; a preference dataset needs the columns prompt, chosen and rejected") from None
    pairs = []
    for i, row in enumerate(rows):
        where = f"{loc}: {path} row {offset + i}"
        chosen = response_text(row.get("chosen"), "chosen", where)
        rejected = response_text(row.get("rejected"), "rejected", where)
        if chosen == rejected:
            raise DataError(f"{where}: 'chosen' and 'rejected' are identical ({chosen[:60]!r}); a preference pair needs "
                            "two different responses: fix or drop the row")
        pairs.append(PreferencePair(row=row, chosen=chosen, rejected=rejected))
    return pairs


def tokenize_pairs(pairs: list[PreferencePair], prompter, tokenizer, tokens, max_length: int | None = None,
                   check=None, offset: int = 0) -> list[PairExample]:
    """Token ids of every pair; pairs with a side longer than ``max_length`` tokens are dropped.

    :param prompter: a :class:`dare.data.Prompter` for the dataset's prompt settings.
    :param check: a :class:`dare.data.checks.LengthCheck`: a side whose text is far beyond the model's context
        is refused (dropped with ``max_length``) before anything tokenises it; pair ``i`` is reported as row
        ``offset + i`` of the file.
    :raises DataError: from ``check``.
    """
    out = []
    for i, pair in enumerate(pairs):
        prompt = prompter.prompt(pair.row)
        row = offset + i
        if check is not None and not (check.text_fits(row, prompt, pair.chosen) and check.text_fits(row, prompt, pair.rejected)):
            continue
        chosen = tokenize_example(tokenizer, prompt, pair.chosen, tokens, max_length)
        rejected = tokenize_example(tokenizer, prompt, pair.rejected, tokens, max_length)
        if chosen is not None and rejected is not None:
            chosen.index, rejected.index = 2 * len(out), 2 * len(out) + 1
            out.append(PairExample(chosen, rejected))
    return out


class PairCollator:
    """Batch ``PairExample``s: rows ``0..B-1`` chosen, ``B..2B-1`` rejected.

    Returns the keys of :class:`~dare.data.supervised.SupervisedCollator` (``input_ids``,
    ``attention_mask``, ``loss_mask``, ``prompt_mask`` ``[2B, L]``; ``response_length`` ``[2B]``; ``index``
    ``[2B]``: ``2 i`` for pair ``i``'s chosen response, ``2 i + 1`` for its rejected one).

    :param inner: the family's :class:`~dare.data.supervised.SupervisedCollator` (padding convention).
    """

    def __init__(self, inner: SupervisedCollator):
        self.inner = inner

    def __call__(self, batch: list[PairExample]) -> dict[str, Any]:
        return self.inner([p.chosen for p in batch] + [p.rejected for p in batch])
