"""The ``sft`` objective: masked-diffusion supervised fine-tuning on ``data.train``."""

from __future__ import annotations

from pydantic import Field

from dare.components import Objective, Params
from dare.errors import DataError

__all__ = ["SFT", "SFTParams"]


class SFTParams(Params):
    mask_eps: float = Field(1e-3, ge=0.0, lt=1.0, description="Smallest mask ratio: t = (1 - eps) u + eps.")


class SFT(Objective):
    """Masked-diffusion SFT (LLaDA, arXiv 2502.09992): CE/t on masked response tokens / response length."""

    name = "sft"
    Params = SFTParams
    stage = "supervised"

    def check(self, ctx, loc):
        problems = super().check(ctx, loc)
        ds = ctx.spec.data.train if ctx.spec.data else None
        if ds is not None and ds.response_template is None:
            from dare.data import dataset_columns

            try:
                cols = dataset_columns(ds.path) or []
            except Exception:  # noqa: BLE001 - reported by the data check
                cols = ["response"]
            if not any(c in cols for c in ("response", "completion", "answer")):
                problems.append(
                    ("data.train.response_template", "sft needs responses: set response_template (e.g. "
                     "'{{ reward_model.ground_truth }}') or use a file with a 'response' column")
                )
        return problems

    def train(self, run) -> dict[str, float]:
        from dare.data import Prompter, load_rows
        from dare.data.supervised import SupervisedCollator, tokenize_example
        from dare.io import atomic_dir
        from dare.trainers import config_from_spec
        from dare_sft.trainer import SFTConfig, SFTTrainer

        spec = run.spec
        ds = spec.data.train
        rows = load_rows(ds.path, limit=ds.limit, split=ds.split, offset=ds.offset)
        prompter = Prompter(run.tokenizer, ds.prompt_template, ds.response_template, ds.chat_template, ds.system_prompt)
        examples = []
        for row in rows:
            ex = tokenize_example(run.tokenizer, prompter.prompt(row), prompter.response(row), run.tokens, spec.train.max_length)
            if ex is not None:
                examples.append(ex)
        if not examples:
            raise DataError(f"no training example of {ds.path} fits train.max_length={spec.train.max_length}")
        block = run.family.block_size(run.model.config)
        collator = SupervisedCollator(run.tokens, run.family.pad_in_response, pad_to_multiple_of=block)
        config = config_from_spec(
            spec.train,
            str(run.checkpoint_dir),
            SFTConfig,
            mask_eps=self.params.mask_eps,
            metrics_file=str(run.dir / "metrics.jsonl"),
            tensorboard_dir=str(run.dir / "tensorboard"),
        )
        trainer = SFTTrainer(
            model=run.model,
            args=config,
            train_dataset=examples,
            data_collator=collator,
            processing_class=run.tokenizer,
            family=run.family,
            tokens=run.tokens,
            eval_fn=run.training_eval_fn(),
        )
        out = trainer.train_or_resume(resume=spec.train.resume)
        with atomic_dir(run.model_dir, overwrite=True) as tmp:
            trainer.save_model(str(tmp))
        return {"train_loss": float(out.training_loss), "global_step": int(out.global_step), "examples": len(examples)}
