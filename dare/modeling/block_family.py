"""The block-diffusion model family base: shared forwards and the KV-cache interface of block decoders.

Block-diffusion LMs (SDAR, arXiv 2510.06303; LLaDA2; both BD3-LM style, arXiv 2503.09573;
docs/algorithms.md §1) cut a
sequence into blocks of ``block_size`` tokens counted from its first real token; attention is
bidirectional inside a block and causal across blocks; position ``i`` scores token ``i``. A family
plugin subclasses :class:`BlockDiffusionFamily` and gives its checkpoint facts, its default block size
and the two KV-cache methods; the base provides

* :meth:`~BlockDiffusionFamily.logits`: inference logits under the block-causal mask;
* :meth:`~BlockDiffusionFamily.denoiser_logits`: the training forward ``[x_t ; x_0]`` under the
  ``M_BD | M_OBC | M_BC`` mask of :mod:`dare.diffusion.block`, returning the noisy half;
* :meth:`~BlockDiffusionFamily.block_size`: ``config.json``'s ``block_size``, else the family default.

Left padding: every forward here first rolls each row left by its padding (so real tokens sit at
``0 .. n-1`` and blocks start at the row's first real token, as in the releases' training and
single-sequence decoding), and rolls the logits back afterwards.

**KV-cache interface** (what the block samplers call; one decoding run owns one cache; the releases'
protocol in docs/model-families.md §3.4 and §5.6):

* ``new_cache(model)`` returns an empty cache object for ``model``;
* ``block_logits(model, input_ids, position_ids, attention_mask, cache, store_kv, logits_to_keep)``
  runs one forward over ``L`` new tokens. With ``cache=None`` the tokens attend to each other only
  (the decoders' recompute path passes the whole prefix). With a cache, the ``Lc`` cached keys/values
  come first and the new tokens attend to ``[cache ; new]``; ``store_kv=True`` then appends the new
  tokens' keys/values to the cache in place (prompt prefill, committing a finished block), and
  ``store_kv=False`` leaves it unchanged (a denoising step of the active block). Keys are cached after
  RoPE, so stored blocks are never re-rotated.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, ClassVar

from dare.components import ModelFamily

if TYPE_CHECKING:  # pragma: no cover - the forwards import torch; the family's facts (validation) need none
    import torch

__all__ = ["BlockDiffusionFamily", "config_value", "block_decoder_problem"]


def config_value(config, key: str) -> Any:
    """``config[key]`` of a ``config.json`` dict, ``getattr(config, key)`` of a config object; None if absent."""
    return config.get(key) if isinstance(config, dict) else getattr(config, key, None)


def _config(model):
    """The ``config`` of ``model``, or of the model a DDP/DeepSpeed wrapper (no ``config`` of its own) holds."""
    from accelerate.utils import extract_model_from_parallel  # accelerate loads only where a model runs

    return extract_model_from_parallel(model).config


class BlockDiffusionFamily(ModelFamily):
    """Base of block-diffusion families (module docstring): block-causal attention, aligned logits,
    responses end at EOS (padding excluded), and a KV-cached block forward for the block decoders.

    Subclasses set :attr:`default_block_size`, the :class:`~dare.components.ModelFamily` checkpoint facts,
    and implement :meth:`new_cache` and :meth:`block_logits`; they override :meth:`forward_logits` only to
    save work (e.g. running the LM head on the needed positions alone).
    """

    attention = "block"
    pad_in_response = False
    #: Block size when ``config.json`` has no ``block_size`` key (the size the release was trained with).
    default_block_size: ClassVar[int] = 0

    # ------------------------------------------------------------------ facts
    def block_size(self, config) -> int:
        """Training block size: ``block_size`` of ``config`` (a ``PretrainedConfig`` or a ``config.json`` dict),
        else :attr:`default_block_size`."""
        value = config_value(config, "block_size")
        return self.default_block_size if value is None else int(value)

    # ------------------------------------------------------------------ plain forwards
    def forward_logits(
        self,
        model,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor,
        position_ids: torch.Tensor | None = None,
        first: int | None = None,
    ) -> torch.Tensor:
        """Logits of one forward without a cache: ``[B, first or L, V]`` (the first ``first`` positions).

        :param input_ids: ``[B, L]`` int64. :param attention_mask: bool ``[B|1, 1, L, L]``, True = may attend.
        :param position_ids: ``[B, L]`` int64 RoPE positions, or None (``0 .. L-1``).
        """
        kwargs = {} if position_ids is None else {"position_ids": position_ids}
        logits = model(input_ids=input_ids, attention_mask=attention_mask, **kwargs).logits
        return logits if first is None else logits[:, :first]

    def logits(self, model, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None) -> torch.Tensor:
        """Inference logits ``[B, L, V]`` (the model's logits dtype) under the block-causal mask of the training
        block size: bidirectional inside a block, causal across blocks, blocks from each row's first real token.

        :param input_ids: ``[B, L]`` int64. :param attention_mask: ``[B, L]`` 1 real / 0 left padding, or None.
        """
        import torch

        from dare.diffusion.block import block_causal_mask, leading_padding, roll_rows

        B, L = input_ids.shape
        shift = leading_padding(attention_mask, B, input_ids.device)
        mask = block_causal_mask(L, self.block_size(_config(model)), device=input_ids.device)[None, None]
        if attention_mask is not None:
            valid = roll_rows(attention_mask, shift).to(torch.bool)
            eye = torch.eye(L, dtype=torch.bool, device=input_ids.device)
            mask = (mask & valid[:, None, None, :]) | (eye & ~valid[:, None, :, None])
        return roll_rows(self.forward_logits(model, roll_rows(input_ids, shift), mask), -shift)

    def denoiser_logits(
        self,
        model,
        noisy_ids: torch.Tensor,
        clean_ids: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        block_anchor: int | None = None,
    ) -> torch.Tensor:
        """Block-diffusion training logits ``[B, L, V]`` of the noisy half (BD3-LM, arXiv 2503.09573 §3; SDAR §3).

        Runs ``[x_t ; x_0]`` (length ``2L``, positions duplicated) under the ``M_BD | M_OBC | M_BC`` mask of
        :func:`dare.diffusion.block.block_diffusion_inputs` with this model's block size, so noisy block ``b``
        sees itself and the clean blocks ``< b``, exactly the state the block decoder sees.

        :param noisy_ids: ``[B, L]`` int64 ``x_t``; :param clean_ids: ``[B, L]`` int64 ``x_0``;
        :param attention_mask: ``[B, L]`` valid tokens (1) vs padding (0), or None.
        :param block_anchor: None = blocks from each row's first real token (DARE); a column index (the padded
            prompt's end, ``P``) = a block starts there in every row, so the completion's blocks are
            ``[P + k b, P + (k + 1) b)`` and the prompt's are counted backwards from ``P`` (the TraceRL SDAR
            release, Gen-Verse/dLLM-RL ``train/rl_sdar.py::make_basic_block_attention``). RoPE positions are
            the same either way (real tokens from 0).
        :raises ValueError: ``block_anchor`` outside ``[0, L]``.
        """
        import torch

        from dare.diffusion.block import block_diffusion_inputs, leading_padding, roll_rows

        B, L = noisy_ids.shape
        shift = leading_padding(attention_mask, B, noisy_ids.device)
        valid = None if attention_mask is None else roll_rows(attention_mask, shift).to(torch.bool)
        offset = None
        if block_anchor is not None:
            if not 0 <= int(block_anchor) <= L:
                raise ValueError(f"block_anchor must be a column in [0, {L}], got {block_anchor}")
            offset = (int(block_anchor) - shift) % self.block_size(_config(model))
        ids, pos, mask = block_diffusion_inputs(
            roll_rows(noisy_ids, shift), roll_rows(clean_ids, shift), self.block_size(_config(model)), valid, offset
        )
        return roll_rows(self.forward_logits(model, ids, mask, pos, first=L), -shift)

    # ------------------------------------------------------------------ packed (padding-free) forwards
    def packed_logits(self, model, input_ids, position_ids, attention_mask, segment_start) -> torch.Tensor:
        """Logits ``[R, T, V]`` of packed rows (:meth:`ModelFamily.packed_logits`): :meth:`forward_logits` with the
        packed rows' positions and block-diagonal mask (position ``i`` scores token ``i``: no shift)."""
        return self.forward_logits(model, input_ids, attention_mask, position_ids)

    # ------------------------------------------------------------------ the KV-cache interface
    def new_cache(self, model) -> Any:
        """An empty KV cache for one decoding run of ``model`` (module docstring).

        :raises NotImplementedError: the family has no KV-cached block forward.
        """
        raise NotImplementedError(f"family {self.name!r} has no KV cache for block decoding")

    def block_logits(
        self,
        model,
        input_ids: torch.Tensor,
        position_ids: torch.Tensor,
        attention_mask: torch.Tensor | None,
        cache: Any = None,
        store_kv: bool = False,
        logits_to_keep: int = 0,
    ) -> torch.Tensor:
        """One block-decoder forward (module docstring).

        :param input_ids: ``[B, L]`` int64, the new tokens (an active block, a prompt prefill, or the whole
            prefix when ``cache`` is None).
        :param position_ids: ``[B, L]`` int64 RoPE positions of the new tokens.
        :param attention_mask: bool broadcastable to ``[B, 1, L, Lc + L]`` (True = query may attend key; keys
            are ``[cache ; new]``), e.g. ``[B, 1, 1, Lc + L]`` key padding; None = every key. A family may also
            accept an additive float mask (LLaDA2).
        :param cache: from :meth:`new_cache`, or None. :param store_kv: append the new keys/values to ``cache``.
        :param logits_to_keep: ``n > 0``: logits of the last ``n`` positions only; 0: all.
        :returns: logits ``[B, n or L, V]`` (float, the model's logits dtype).
        :raises NotImplementedError: the family has no KV-cached block forward.
        """
        raise NotImplementedError(f"family {self.name!r} has no KV-cached block forward")


def block_decoder_problem(family, sampler: str) -> str | None:
    """Why ``sampler`` (a block decoder) cannot decode with ``family``, or None if it can: the family must be a
    :class:`BlockDiffusionFamily` that implements :meth:`~BlockDiffusionFamily.new_cache` and
    :meth:`~BlockDiffusionFamily.block_logits`. The message is a sentence for a spec or sampler error."""
    kind = type(family)
    if isinstance(family, BlockDiffusionFamily) and all(
        getattr(kind, m) is not getattr(BlockDiffusionFamily, m) for m in ("new_cache", "block_logits")
    ):
        return None
    return (
        f"sampler {sampler!r} needs a block-diffusion family with a KV-cached block forward "
        f"(dare.modeling.BlockDiffusionFamily with new_cache/block_logits), which {family.name!r} lacks; "
        f"use {family.default_sampler!r}"
    )
