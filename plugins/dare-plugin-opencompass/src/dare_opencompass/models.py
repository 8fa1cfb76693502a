"""``DareModel``: an OpenCompass model backed by a DARE model directory (or run directory) and a DARE sampler.

An OpenCompass config names it like any model::

    from dare_opencompass import DareModel
    models = [dict(type=DareModel, abbr="my-dllm", path="runs/quickstart",
                   sampler=dict(name="llada", params=dict(gen_length=17, block_length=17, steps=17)),
                   max_out_len=17, batch_size=50, seed=0, run_cfg=dict(num_gpus=0, num_procs=1))]

* ``generate(inputs, max_out_len)`` decodes with the sampler (:meth:`dare_opencompass.engine.DareEngine.generate`;
  ``max_out_len`` -> ``gen_length`` by :meth:`~dare_opencompass.engine.DareEngine.gen_length_for`), cut at
  ``stopping_criteria`` strings when the dataset's inferencer gives them;
* ``get_ppl(inputs, mask_length)`` is the Monte-Carlo ELBO bound on the per-token NLL of each input (or of the
  part after its first ``mask_length`` tokens), so PPL-style multiple-choice datasets pick the choice with the
  highest ELBO (:meth:`~dare_opencompass.engine.DareEngine.nll_per_token`);
* ``get_token_len(prompt)`` counts tokens as ``generate`` tokenises them.

Prompts are used as OpenCompass renders them (no meta template = the string itself); ``chat_template=True``
wraps each one as a user message through the tokenizer's chat template, as ``dare eval`` does.
"""

from __future__ import annotations

from typing import Any

from opencompass.models.base import BaseModel

from dare_opencompass.engine import DareEngine

__all__ = ["DareModel"]


class DareModel(BaseModel):
    """A DARE dLLM (any installed family) decoding with any DARE sampler, for OpenCompass (module docstring).

    :param path: model directory, LoRA adapter directory or DARE run directory.
    :param sampler: sampler name or ``dict(name=..., params={...})`` (default: the family's own sampler);
        ``sampler_params`` are merged over ``sampler['params']`` and validated by the sampler's ``Params`` model.
    :param max_seq_len: OpenCompass's prompt budget (prompts are not truncated; it is informational).
    :param sampler_batch_size: prompts per sampler call; None (default): each ``generate`` call's prompts at once,
        i.e. the model config's ``batch_size`` (which OpenCompass's inferencer batches by). :param seed: seeds the sampling generator and the ELBO's corruptions.
    :param dtype, device, chat_template, system_prompt, mc_samples: see :class:`~dare_opencompass.engine.DareEngine`.
    :param max_out_len, run_cfg, generation_kwargs: accepted for OpenCompass (its runners read them).
    :raises dare.errors.DareError: the model cannot be loaded or the sampler settings are invalid (the message
        names the setting).
    """

    def __init__(
        self,
        path: str,
        sampler: str | dict[str, Any] | None = None,
        sampler_params: dict[str, Any] | None = None,
        max_seq_len: int = 4096,
        sampler_batch_size: int | None = None,
        seed: int = 0,
        dtype: str = "float32",
        device: str | None = None,
        chat_template: bool = False,
        system_prompt: str | None = None,
        mc_samples: int = 32,
        meta_template: dict | None = None,
        tokenizer_only: bool = False,
        generation_kwargs: dict | None = None,
        **kwargs: Any,
    ):
        for key in ("max_out_len", "batch_size", "run_cfg", "abbr"):  # OpenCompass's own keys
            kwargs.pop(key, None)
        if kwargs:
            from dare_opencompass.engine import DareHarnessError

            raise DareHarnessError(
                f"DareModel got unknown settings {', '.join(sorted(kwargs))}; sampler settings go in "
                "sampler=dict(name=..., params={...}) (or sampler_params)"
            )
        super().__init__(path=path, max_seq_len=max_seq_len, tokenizer_only=tokenizer_only, meta_template=meta_template,
                         generation_kwargs=generation_kwargs or {})
        self.engine = DareEngine(path, sampler, sampler_params, dtype=dtype, device=device, batch_size=sampler_batch_size,
                                 seed=seed, chat_template=chat_template, system_prompt=system_prompt,
                                 mc_samples=mc_samples)
        self.model = self.engine.lm.model
        self.tokenizer = self.engine.lm.tokenizer

    def generate(self, inputs: list[str], max_out_len: int, stopping_criteria: list[str] | None = None,
                 **kwargs: Any) -> list[str]:
        """Completions of ``inputs`` (see the module docstring); other OpenCompass generation kwargs are refused
        by name, since a DARE sampler's settings live in the model's ``sampler`` params.

        :raises dare_opencompass.engine.DareHarnessError: ``max_out_len`` the sampler cannot honour, or an unknown
            generation kwarg.
        """
        kwargs = {k: v for k, v in kwargs.items() if v is not None}
        if kwargs:
            from dare_opencompass.engine import DareHarnessError

            raise DareHarnessError(
                f"DareModel.generate got {', '.join(sorted(kwargs))}; set decoding options in the model config's "
                "sampler params instead"
            )
        return self.engine.generate([str(p) for p in inputs], max_out_len, stop=stopping_criteria)

    def get_ppl(self, inputs: list[str], mask_length: list[int] | None = None) -> list[float]:
        """Per-input ``-ELBO / L`` (nats per scored token; lower = more likely), see the module docstring."""
        return self.engine.nll_per_token([str(p) for p in inputs], mask_length)

    def get_token_len(self, prompt: str) -> int:
        """Tokens of ``prompt`` as :meth:`generate` feeds it to the model."""
        return self.engine.token_len(str(prompt))

    def encode(self, prompt: str):
        import torch

        return torch.tensor([self.engine._ids(prompt)])

    def decode(self, tokens) -> str:
        return self.tokenizer.decode(tokens[0].tolist() if hasattr(tokens, "dim") and tokens.dim() == 2 else tokens)
