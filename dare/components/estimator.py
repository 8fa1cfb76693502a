"""The likelihood-estimator component: which corrupted copies of a completion score it.

Every estimator DARE implements scores a completion as a weighted sum of per-token log-probabilities
of the clean tokens under a few corrupted inputs (:mod:`dare.diffusion.estimators`): :meth:`Estimator.draw`
returns ``Pass`` es (``mask [K, N, S]`` bool, ``weight [K, N, G]`` float32) and
:func:`dare.diffusion.estimators.score_pass` turns a pass into scores from the family's aligned logits.
The same passes score the current, old and reference policies (antithetic across policies). Objectives
that allow several estimators take one by name in their params (``estimator: {name, params}``); the
installed estimators are listed by ``dare plugins``.
"""

from __future__ import annotations

from typing import Any, ClassVar, Literal

from dare.components.base import Component

__all__ = ["Estimator"]


class Estimator(Component):
    """A likelihood estimator (module docstring). Subclasses set ``name``, ``level``, ``Params`` and ``draw``.

    ``level`` says how the estimate is meant to be used: ``"token"`` (per-token log-likelihood
    surrogates, for token-level ratios) or ``"sequence"`` (a sequence log-likelihood / ELBO: the sum of
    a pass's token scores, averaged over passes).
    """

    kind = "estimator"
    level: ClassVar[Literal["token", "sequence"]] = "token"

    def bind(self, family, model_config, sampler) -> Estimator:
        """This estimator with the settings that depend on the run filled in (e.g. a block length from the
        family's config or the rollout sampler); the default returns ``self`` unchanged.

        :param family: the run's ``ModelFamily``; :param model_config: the model's config (object with
            attributes); :param sampler: the rollout ``Sampler`` or None.
        """
        return self

    def draw(self, batch, generator=None) -> list[Any]:
        """The passes of one estimate of ``batch`` (a ``ScoringBatch``), all randomness from ``generator``
        (a ``torch.Generator``, per-row generators, or None for the global RNG).

        :returns: a list of ``dare.diffusion.estimators.Pass``.
        """
        raise NotImplementedError
