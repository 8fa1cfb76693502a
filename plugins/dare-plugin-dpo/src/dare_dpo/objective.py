"""The ``dpo`` and ``vrpo`` objectives: preference optimisation on ``data.train`` pairs.

Both train :class:`dare_dpo.trainer.DPOTrainer`; they differ only in the ELBO estimator:

| objective | corruptions per sequence | mask counts | reference corruptions | beta |
|---|---|---|---|---|
| ``dpo`` (default) | ``mc_num`` = 1 | i.i.d. Bernoulli-``t`` | drawn independently | 0.1 |
| ``vrpo`` (LLaDA 1.5, arXiv 2505.19223 §3) | ``mc_num`` = 4 | stratified over ``[1, L]``, one mask each | shared with the policy | 0.2 |

(``vrpo``'s defaults are DARE's recipe, docs/algorithms.md §3.3.) ``data.eval`` pairs, when given, are scored
before and after training (held-out reward accuracy) and every ``train.eval_steps``.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from dare.components import Objective, Params

__all__ = ["DPO", "VRPO", "DPOParams", "VRPOParams"]

_BETA = "KL coefficient beta: scale of the implicit reward beta * (ELBO_theta - ELBO_ref)."
_MC = "Monte-Carlo corruptions per sequence (forward passes per sequence and model)."
_NORM = "'length': ELBO / response length (DARE's /R); 'none': the ELBO in nats (the paper's score)."


class DPOParams(Params):
    beta: float = Field(0.1, gt=0.0, description=_BETA)
    mc_num: int = Field(1, ge=1, description=_MC)
    mask_scheme: Literal["bernoulli", "uniform", "stratified"] = Field(
        "bernoulli", description="How corruptions are drawn: i.i.d. ratio t, i.i.d. mask counts, or stratified counts."
    )
    share_corruptions: bool = Field(False, description="Score the reference with the policy's corruptions (antithetic).")
    elbo_normalizer: Literal["length", "none"] = Field("length", description=_NORM)
    mask_eps: float = Field(1e-3, ge=0.0, lt=1.0, description="Smallest mask ratio t (bernoulli scheme).")


class VRPOParams(Params):
    beta: float = Field(0.2, gt=0.0, description=_BETA)
    mc_num: int = Field(4, ge=1, description=_MC + " VRPO spends all of it on timesteps, one mask each.")
    elbo_normalizer: Literal["length", "none"] = Field("length", description=_NORM)


class DPO(Objective):
    """ELBO-based DPO for diffusion LMs (arXiv 2305.18290 with Monte-Carlo ELBO scores)."""

    name = "dpo"
    Params = DPOParams
    stage = "preference"

    def estimator(self) -> dict:
        """DPOConfig fields of this objective's ELBO estimator and loss."""
        p = self.params
        return dict(beta=p.beta, mc_num=p.mc_num, mask_scheme=p.mask_scheme, share_corruptions=p.share_corruptions,
                    elbo_normalizer=p.elbo_normalizer, mask_eps=p.mask_eps)

    def check(self, ctx, loc):
        from dare_dpo.data import pair_column_problems

        problems = super().check(ctx, loc)
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

    def train(self, run) -> dict[str, float]:
        from dare.data import Prompter
        from dare.errors import DataError
        from dare.io import atomic_dir
        from dare.trainers import config_from_spec
        from dare_dpo.data import PairCollator, load_pairs, tokenize_pairs
        from dare_dpo.trainer import DPOConfig, DPOTrainer

        spec = run.spec
        splits = {"train": spec.data.train, "eval": spec.data.eval}
        pairs = {k: load_pairs(ds.path, ds.limit, ds.split, f"data.{k}", ds.offset) for k, ds in splits.items() if ds is not None}
        examples = {}
        for split, rows in pairs.items():
            ds = splits[split]
            prompter = Prompter(run.tokenizer, ds.prompt_template, None, ds.chat_template, ds.system_prompt)
            examples[split] = tokenize_pairs(rows, prompter, run.tokenizer, run.tokens, spec.train.max_length)
            if not examples[split]:
                raise DataError(f"data.{split}: no pair of {ds.path} fits train.max_length={spec.train.max_length}")
        block = run.family.block_size(run.model.config)
        config = config_from_spec(
            spec.train,
            str(run.checkpoint_dir),
            DPOConfig,
            per_device_eval_batch_size=spec.train.per_device_batch_size,
            metrics_file=str(run.dir / "metrics.jsonl"),
            tensorboard_dir=str(run.dir / "tensorboard"),
            **self.estimator(),
        )
        trainer = DPOTrainer(
            model=run.model,
            args=config,
            train_dataset=examples["train"],
            data_collator=PairCollator(run.tokens, run.family.pad_in_response, pad_to_multiple_of=block),
            processing_class=run.tokenizer,
            family=run.family,
            tokens=run.tokens,
            eval_fn=run.training_eval_fn(),
            eval_pairs=examples.get("eval"),
            eval_seed=spec.train.seed,
        )
        held_out = examples.get("eval")
        before = trainer.preference_metrics(held_out) if held_out else {}
        out = trainer.train_or_resume(resume=spec.train.resume)
        after = trainer.preference_metrics(held_out) if held_out else {}
        with atomic_dir(run.model_dir, overwrite=True) as tmp:
            trainer.save_model(str(tmp))
        metrics = {"train_loss": float(out.training_loss), "global_step": int(out.global_step), "pairs": len(examples["train"])}
        metrics |= {f"heldout/{k}/before": v for k, v in before.items()}
        metrics |= {f"heldout/{k}/after": v for k, v in after.items()}
        return metrics


class VRPO(DPO):
    """VRPO (LLaDA 1.5, arXiv 2505.19223): DPO with stratified, antithetic ELBO estimates."""

    name = "vrpo"
    Params = VRPOParams

    def estimator(self) -> dict:
        p = self.params
        return dict(beta=p.beta, mc_num=p.mc_num, mask_scheme="stratified", share_corruptions=True,
                    elbo_normalizer=p.elbo_normalizer, mask_eps=0.0)
