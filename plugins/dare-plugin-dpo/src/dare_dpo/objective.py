"""The ``dpo`` and ``vrpo`` objectives: preference optimisation on ``data.train`` pairs.

Both train :class:`dare_dpo.trainer.DPOTrainer`; they differ in their defaults:

| objective | estimator (``estimator``) | reference corruptions (``share_corruptions``) | beta |
|---|---|---|---|
| ``dpo`` (default) | ``mc-elbo``: 1 i.i.d. Bernoulli-``t`` corruption | drawn independently | 0.1 |
| ``vrpo`` (LLaDA 1.5, arXiv 2505.19223 §3) | ``mc-elbo``: 4 stratified mask counts over ``[1, L]``, one mask each | shared with the policy (antithetic) | 0.2 |

(``vrpo``'s defaults are DARE's recipe, docs/algorithms.md §3.3.) Any sequence-level estimator listed by
``dare plugins`` can be chosen, e.g. ``estimator: {name: mc-elbo, params: {mc_num: 8, scheme: uniform}}``
or ``{name: complementary-elbo}``. ``data.eval`` pairs, when given, are scored before and after
training (held-out reward accuracy) and every ``train.eval_steps``.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from dare.components import Params
from dare.diffusion.estimators.choice import EstimatorChoice, build_estimator, estimator_problems
from dare.trainers.objective import TrainerObjective
from dare.trainers.supervised import supervised_collator

__all__ = ["DPO", "VRPO", "DPOParams", "VRPOParams"]

_BETA = "KL coefficient beta: scale of the implicit reward beta * (ELBO_theta - ELBO_ref)."
_EST = "Sequence-level ELBO estimator and its params (see `dare plugins`): its passes score each sequence."
_SHARE = "Score the reference policy on the policy's corruptions (antithetic sampling, VRPO)."
_NORM = "'length': ELBO / response length (DARE's /R); 'none': the ELBO in nats (the paper's score)."


class DPOParams(Params):
    beta: float = Field(0.1, gt=0.0, description=_BETA)
    estimator: EstimatorChoice = Field(
        default_factory=lambda: EstimatorChoice(name="mc-elbo", params={"mc_num": 1, "scheme": "bernoulli"}),
        description=_EST)
    share_corruptions: bool = Field(False, description=_SHARE)
    elbo_normalizer: Literal["length", "none"] = Field("length", description=_NORM)


class VRPOParams(DPOParams):
    beta: float = Field(0.2, gt=0.0, description=_BETA)
    estimator: EstimatorChoice = Field(
        default_factory=lambda: EstimatorChoice(name="mc-elbo", params={"mc_num": 4, "scheme": "stratified"}),
        description=_EST + " VRPO spends the whole budget on timesteps, one mask each.")
    share_corruptions: bool = Field(True, description=_SHARE)


class DPO(TrainerObjective):
    """ELBO-based DPO for diffusion LMs (arXiv 2305.18290 with Monte-Carlo ELBO scores)."""

    name = "dpo"
    Params = DPOParams
    stage = "preference"

    def check(self, ctx, loc):
        from dare_dpo.data import pair_column_problems

        problems = super().check(ctx, loc) + estimator_problems(self.params.estimator, "sequence", f"{loc}.params.estimator")
        data = ctx.spec.data
        for split in ("train", "eval"):
            ds = getattr(data, split) if data is not None else None
            if ds is None:
                continue
            problems.extend(pair_column_problems(ds.path, f"data.{split}"))
            if ds.response_template is not None:
                problems.append((f"data.{split}.response_template", f"{self.name} reads responses from the chosen and "
                                 "rejected columns; remove response_template"))
        return problems

    def make_estimator(self, family, model_config):
        """The chosen sequence-level estimator, bound to the run (``dare.components.Estimator.bind``)."""
        return build_estimator(self.params.estimator, family, model_config, level="sequence")

    def trainer_class(self) -> type:
        from dare_dpo.trainer import DPOTrainer  # the trainer stack loads only when training

        return DPOTrainer

    def build_datasets(self, run) -> dict[str, Any]:
        from dare_dpo.data import load_pairs, tokenize_pairs
        from dare.data.checks import LengthCheck, context_length, max_token_chars
        from dare.errors import DataError

        out = {}
        for split in ("train", "eval"):
            ds = self.dataset_spec(run, split)
            if ds is None:
                continue
            pairs = load_pairs(ds.path, ds.limit, ds.split, f"data.{split}", ds.offset)
            context = context_length(run.resolved.model_config or {})
            check = (LengthCheck(context, run.spec.train.max_length, max_token_chars(run.tokenizer), ds.path, f"data.{split}")
                     if context else None)
            out[split] = tokenize_pairs(pairs, self.prompter(run, split), run.tokenizer, run.tokens, run.spec.train.max_length,
                                        check, ds.offset)
            if not out[split]:
                raise DataError(f"data.{split}: no pair of {ds.path} fits train.max_length={run.spec.train.max_length}; "
                                "raise train.max_length or remove it")
        return out

    def data_collator(self, run, datasets):
        from dare_dpo.data import PairCollator

        longest = max(len(s.prompt_ids) + len(s.response_ids) for split in datasets.values() for p in split
                      for s in (p.chosen, p.rejected))
        return PairCollator(supervised_collator(run, longest))

    def config_overrides(self, run) -> dict[str, Any]:
        return {"per_device_eval_batch_size": run.spec.train.per_device_batch_size}

    def trainer_kwargs(self, run, datasets) -> dict[str, Any]:
        return {"estimator": self.make_estimator(run.family, run.model.config), "eval_pairs": datasets.get("eval"),
                "eval_seed": run.spec.train.seed}

    def before_training(self, trainer, datasets) -> dict[str, float]:
        held_out = datasets.get("eval")
        return {f"heldout/{k}/before": v for k, v in trainer.preference_metrics(held_out).items()} if held_out else {}

    def after_training(self, trainer, datasets) -> dict[str, float]:
        held_out = datasets.get("eval")
        return {f"heldout/{k}/after": v for k, v in trainer.preference_metrics(held_out).items()} if held_out else {}


class VRPO(DPO):
    """VRPO (LLaDA 1.5, arXiv 2505.19223): DPO with stratified, antithetic ELBO estimates."""

    name = "vrpo"
    Params = VRPOParams
