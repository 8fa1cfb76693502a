"""Supervised objectives: (prompt, response) examples from ``data.train`` and their collation.

:class:`SupervisedObjective` is the base of objectives that train on responses (masked-diffusion SFT,
and what ``dare new-plugin NAME --kind objective`` renders): it renders each row of ``data.train`` into
a prompt and a response (``response_template`` or a ``response``/``completion``/``answer`` column),
tokenises them (``response + EOS``), refuses an example longer than the model's context (or, with
``train.max_length``, drops pairs longer than it: :mod:`dare.data.checks`), and batches them with
the family's padding convention (:class:`dare.data.supervised.SupervisedCollator`; block families pad to
whole blocks). A subclass provides :meth:`~dare.trainers.objective.TrainerObjective.trainer_class`,
whose ``compute_loss`` reads batches with the keys ``input_ids``, ``attention_mask``, ``prompt_mask``,
``loss_mask``, ``response_length`` and ``index`` (the examples' dataset indices).
"""

from __future__ import annotations

import sys
from typing import Any

from dare.data import dataset_columns
from dare.data.checks import LengthCheck, context_length, max_token_chars
from dare.data.columns import column_type_problems
from dare.data.rows import sample_rows
from dare.data.supervised import SupervisedCollator, tokenize_example
from dare.errors import DareError, DataError
from dare.trainers.objective import TrainerObjective

__all__ = ["SupervisedObjective", "supervised_collator"]

#: Columns a supervised dataset may hold its responses in (without a response_template).
RESPONSE_COLUMNS = ("response", "completion", "answer")


def supervised_collator(run, longest: int | None) -> SupervisedCollator:
    """The family's collator for ``run``: whole blocks for block families; for families whose EOS padding is
    part of the response (LLaDA, Dream), every batch padded to ``longest`` (the dataset's longest example),
    so an example's loss does not depend on the batch it lands in (``SupervisedCollator``).

    With ``train.packing`` every family's padding is excluded (attention mask 0, not in the loss): each response
    ends at its own EOS and the packed forward drops the padding (dare.diffusion.packing); for LLaDA/Dream this
    trains without the EOS padding to the longest example (docs/run-spec.md, ``train.packing``)."""
    family = run.family
    pad_in_response = family.pad_in_response and not run.spec.train.packing
    return SupervisedCollator(run.tokens, pad_in_response, pad_to_multiple_of=family.block_size(run.model.config),
                              pad_to_length=longest if pad_in_response else None)


class SupervisedObjective(TrainerObjective):
    """Trains on ``data.train`` (prompt, response) examples (module docstring)."""

    stage = "supervised"
    length_sample_with_response = True

    def check(self, ctx, loc: str) -> list[tuple[str, str]]:
        problems = super().check(ctx, loc)
        ds = ctx.spec.data.train if ctx.spec.data else None
        if ds is not None and ds.response_template is None:
            try:
                cols = dataset_columns(ds.path) or list(RESPONSE_COLUMNS)
            except DareError:  # reported by the data check
                cols = list(RESPONSE_COLUMNS)
            if not any(c in cols for c in RESPONSE_COLUMNS):
                problems.append(
                    ("data.train.response_template", f"{self.name} needs responses: set response_template (e.g. "
                     "'{{ reward_model.ground_truth }}') or use a file with a 'response' column")
                )
            else:
                column = next(c for c in RESPONSE_COLUMNS if c in cols)
                for col, msg in column_type_problems(ds.path, [column], sample_rows(ds.path, ds.offset)):
                    problems.append(("data.train.path", f"{msg}; or set data.train.response_template"))
        return problems

    def build_datasets(self, run) -> dict[str, Any]:
        rows = self.rows(run, "train")  # before the tokenizer (and the model) loads: bad data fails first
        prompter = self.prompter(run, "train", with_response=True)
        max_length = run.spec.train.max_length
        ds = run.spec.data.train
        context = context_length(run.resolved.model_config or {})  # config.json: the model is not loaded yet
        check = LengthCheck(context, max_length, max_token_chars(run.tokenizer), ds.path) if context else None
        examples = []
        for i, row in enumerate(rows):
            prompt, response = prompter.prompt(row), prompter.response(row)
            if check is not None and not check.text_fits(ds.offset + i, prompt, response):
                continue  # proven too long without tokenising it (a 10 MB string would take minutes)
            ex = tokenize_example(run.tokenizer, prompt, response, run.tokens, None)
            n = len(ex.prompt_ids) + len(ex.response_ids)
            if (check is not None and not check.tokens_fit(ds.offset + i, n)) \
                    or (max_length is not None and n > max_length):
                continue
            ex.index = len(examples)
            examples.append(ex)
        if check is not None and (line := check.report()) is not None:
            from dare.scaling import distributed

            if distributed.is_main():
                print(line, file=sys.stderr)
        if not examples:
            raise DataError(f"data.train: no example of {ds.path} fits train.max_length={max_length}; raise "
                            "train.max_length or remove it")
        return {"train": examples}

    def data_collator(self, run, datasets):
        return supervised_collator(run, max(len(e.prompt_ids) + len(e.response_ids) for e in datasets["train"]))
