"""Examples too long for the model's context.

**Length.** Tokenising a 10 MB string takes minutes and gigabytes, so an example's length is first bounded
from its text alone: a token covers at most :func:`max_token_chars` characters (the longest string in the
vocabulary), so text of more than ``FAR_BEYOND × context × that`` characters is far longer than the model's
context (``max_sequence_length`` / ``max_position_embeddings`` of its config). Such an example is an error naming
the file, the row and the lengths, before anything is tokenised (``dare validate`` checks
``SAMPLE_ROWS`` rows from ``offset``, loading checks every row). With ``train.max_length`` longer examples
are dropped instead and counted on stderr. An example that fits the text bound but has more tokens than the
context trains, with a warning naming the count and the longest row (:class:`LengthCheck`).

Column types are checked by :mod:`dare.data.columns`.
"""

from __future__ import annotations

from typing import Any

from dare.data.rows import sample_rows
from dare.data.templates import Prompter
from dare.errors import DareError, DataError

__all__ = ["context_length", "max_token_chars", "LengthCheck", "sample_length_problems"]

#: text beyond this many times the context (in tokens' worth of characters) is refused without tokenising
FAR_BEYOND = 16

_CONTEXT_KEYS = ("max_sequence_length", "max_position_embeddings", "n_positions", "seq_length")


def context_length(config: Any) -> int | None:
    """The model's context in tokens: the first of ``max_sequence_length``, ``max_position_embeddings``,
    ``n_positions``, ``seq_length`` in ``config`` (a dict or a ``PretrainedConfig``), or None."""
    for key in _CONTEXT_KEYS:
        value = config.get(key) if isinstance(config, dict) else getattr(config, key, None)
        if isinstance(value, int) and value > 0:
            return value
    return None


def max_token_chars(tokenizer) -> int:
    """An upper bound on the characters one token covers: the longest string in ``tokenizer``'s vocabulary
    (byte-level vocabularies spell a byte as one character; a character is at least one byte); 1 for
    ``None`` (DARE's byte tokenizer: one token per byte)."""
    if tokenizer is None:
        return 1
    try:
        vocab = tokenizer.get_vocab()
    except Exception:  # noqa: BLE001 - a tokenizer without a vocabulary listing: a generous bound
        return 256
    return max((len(t) for t in vocab), default=1) or 1


class LengthCheck:
    """Checks (prompt, response) text against the model's context before and after tokenising.

    * text longer than ``FAR_BEYOND × limit × token_chars`` characters is far longer than the limit in any
      tokenisation: an error naming the row (dropped with ``max_length``), decided without tokenising it;
    * more tokens than ``max_length``: dropped (counted by :meth:`report`);
    * more tokens than the context without ``max_length``: kept, and :meth:`report` says how many and which
      row is the longest (the position encodings of DARE's families extend past the configured context, which
      their small presets set below typical example lengths).

    :param context: the model's context in tokens (:func:`context_length`).
    :param max_length: ``train.max_length`` or None.
    :param token_chars: the most characters one token covers (:func:`max_token_chars`).
    :param where: the dataset file, for messages.
    :param loc: the dataset's YAML path, for messages.
    """

    def __init__(self, context: int, max_length: int | None, token_chars: int, where: str, loc: str = "data.train"):
        self.context, self.max_length, self.where, self.loc = context, max_length, where, loc
        self.limit = min(context, max_length) if max_length is not None else context
        self.token_chars = max(1, token_chars)
        self.char_bound = FAR_BEYOND * self.limit * self.token_chars
        self.dropped = 0
        self.over: list[tuple[int, int]] = []  # (tokens, row) of kept examples longer than the context

    def text_fits(self, row: int, prompt: str, response: str) -> bool:
        """False (dropped, with ``max_length``) when the text alone proves the example too long.

        :raises DataError: naming the file, the row and the lengths (without ``max_length``)."""
        chars = len(prompt) + len(response)
        if chars <= self.char_bound:
            return True
        if self.max_length is not None:
            self.dropped += 1
            return False
        raise DataError(f"{self.loc}: row {row} of {self.where} is {chars} characters long, at least "
                        f"{-(-chars // self.token_chars)} tokens (a token of this tokenizer covers at most "
                        f"{self.token_chars} characters), more than {FAR_BEYOND} times the model's context of "
                        f"{self.context} tokens "
                        "(max_sequence_length/max_position_embeddings of its config); it was not tokenised. Shorten "
                        "or remove such rows, or set train.max_length to drop examples longer than that many tokens")

    def tokens_fit(self, row: int, n_tokens: int) -> bool:
        """False (dropped) when ``n_tokens`` exceeds ``max_length``; without it, an example longer than the
        context is kept and counted for :meth:`report`."""
        if n_tokens <= self.limit:
            return True
        if self.max_length is not None:
            self.dropped += 1
            return False
        self.over.append((n_tokens, row))
        return True

    def report(self) -> str | None:
        """One line for stderr when examples were dropped or are longer than the context, else None."""
        parts = []
        if self.dropped:
            parts.append(f"dropped {self.dropped} example(s) of {self.where} longer than {self.limit} tokens "
                         f"(train.max_length={self.max_length}, model context {self.context})")
        if self.over:
            n, row = max(self.over)
            parts.append(f"warning: {len(self.over)} example(s) of {self.where} are longer than the model's context of "
                         f"{self.context} tokens (the longest, row {row}, has {n}): the model trains at positions its "
                         f"config does not declare; set train.max_length: {self.context} to drop them")
        return f"{self.loc}: " + "; ".join(parts) if parts else None


def sample_length_problems(ds, loc: str, model_config: dict | None, tokenizer, with_response: bool
                           ) -> list[tuple[str, str]]:
    """``dare validate``'s length check of dataset ``ds`` (a ``DatasetSpec`` at ``loc``): :data:`SAMPLE_ROWS`
    rows from its ``offset`` against :class:`LengthCheck`'s text bound (nothing without ``model_config``'s
    context). ``tokenizer`` None (``model.new``, hub ids): a token is taken to cover up to 256 characters."""
    context = context_length(model_config or {})
    if context is None:
        return []
    rows = sample_rows(ds.path, ds.offset)
    token_chars = max_token_chars(tokenizer) if tokenizer is not None else 256
    check = LengthCheck(context, None, token_chars, ds.path, loc)
    prompter = Prompter(tokenizer, ds.prompt_template, ds.response_template if with_response else None,
                        ds.chat_template, ds.system_prompt, loc=loc)
    for i, row in enumerate(rows):
        try:
            prompt = "\n".join(str(m.get("content", "")) for m in prompter.messages(row))  # the chat template only adds
            check.text_fits(ds.offset + i, prompt, prompter.response(row) if with_response else "")
        except DataError as exc:
            if "it was not tokenised" in str(exc):
                return [(loc, str(exc).removeprefix(f"{loc}: ") + f" (found in a sample of {len(rows)} rows)")]
            return []  # a template or column problem: the dataset checks report it
        except DareError:
            return []
    return []
