"""``DreamTokenizer``: the name the release's ``tokenizer_config.json`` asks for, served by Qwen2's tokenizer.

The release ships ``tokenization_dream.py`` (remote code): Qwen2's byte-level BPE (``vocab.json`` +
``merges.txt``, Qwen2 pre-tokenisation) with Dream's added tokens (``<|mask|>`` 151666,
``<|beginoftext|>`` 151665) read from ``tokenizer_config.json``. transformers' own ``Qwen2Tokenizer``
reads the same files, so registering it under this name lets ``AutoTokenizer.from_pretrained`` load a
released Dream/DiffuCoder directory without ``trust_remote_code``.
"""

from __future__ import annotations

from transformers import Qwen2Tokenizer

__all__ = ["DreamTokenizer"]


class DreamTokenizer(Qwen2Tokenizer):
    """Qwen2 byte-level BPE tokenizer under the release's class name (no behaviour of its own)."""
