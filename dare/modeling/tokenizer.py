"""A byte-level tokenizer that DARE builds with the ``tokenizers`` library for fresh models.

256 byte tokens (GPT-2 byte alphabet, no merges, so any text round-trips) plus the family's special
tokens first. Saved as ``tokenizer.json`` + ``tokenizer_config.json`` with the family's chat template
and ``mask_token`` set, so ``AutoTokenizer.from_pretrained`` restores everything offline.
"""

from __future__ import annotations

from tokenizers import Tokenizer, decoders, models, pre_tokenizers

__all__ = ["build_byte_tokenizer"]


def build_byte_tokenizer(special: dict[str, str], extra_special: tuple[str, ...] = (), chat_template: str | None = None,
                         require_mask: bool = True):
    """Build a ``PreTrainedTokenizerFast``.

    :param special: role -> token string, roles among ``bos, eos, pad, mask, eot, unk``; ``mask``
        and ``eos`` are required (``mask`` only with ``require_mask``).
    :param require_mask: False for a family without a mask token (uniform-noise corruption).
    :param extra_special: more special tokens (e.g. chat header tokens).
    :param chat_template: Jinja chat template stored in the tokenizer.
    :returns: tokenizer with ids ``0..k-1`` for the special tokens (in order: bos, eos, pad, mask,
        eot, extras; duplicates once) followed by the 256 byte tokens.
    :raises ValueError: ``mask`` (with ``require_mask``) or ``eos`` missing.
    """
    from transformers import PreTrainedTokenizerFast

    for role in ("mask", "eos") if require_mask else ("eos",):
        if role not in special:
            raise ValueError(f"special tokens need a {role!r} token")
    ordered: list[str] = []
    for role in ("bos", "eos", "pad", "mask", "eot", "unk"):
        tok = special.get(role)
        if tok and tok not in ordered:
            ordered.append(tok)
    for tok in extra_special:
        if tok not in ordered:
            ordered.append(tok)
    vocab = {tok: i for i, tok in enumerate(ordered)}
    for ch in sorted(pre_tokenizers.ByteLevel.alphabet(), key=lambda c: ord(c)):
        vocab[ch] = len(vocab)
    tk = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    tk.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    tk.decoder = decoders.ByteLevel()
    tk.add_special_tokens(ordered)
    kwargs = {}
    for role, key in (("bos", "bos_token"), ("eos", "eos_token"), ("pad", "pad_token"), ("mask", "mask_token"),
                      ("unk", "unk_token")):
        if special.get(role):
            kwargs[key] = special[role]
    extras = [t for t in ordered if t not in kwargs.values()]
    fast = PreTrainedTokenizerFast(tokenizer_object=tk, additional_special_tokens=extras,
                                   clean_up_tokenization_spaces=False, **kwargs)
    if chat_template:
        fast.chat_template = chat_template
    return fast
