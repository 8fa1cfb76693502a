"""OpenCompass config: a DARE model on real 4x4 Sudoku test puzzles (DARE's packaged test set).

Same model, sampler, prompts and scoring as ``dare eval examples/opencompass/sudoku.yaml`` (docs/evaluation.md,
"OpenCompass"); benchmarks/opencompass_check.sh runs both and compares them puzzle by puzzle.

    DARE_OC_MODEL=runs/quickstart opencompass examples/opencompass/eval_sudoku.py -w runs/opencompass

Environment: ``DARE_OC_MODEL`` model or run directory (default ``runs/quickstart``), ``DARE_OC_LIMIT`` puzzles
(default 50).
"""

import os

from opencompass.openicl.icl_inferencer import GenInferencer
from opencompass.openicl.icl_prompt_template import PromptTemplate
from opencompass.openicl.icl_retriever import ZeroRetriever

from dare_opencompass import DareBenchmarkDataset, DareModel, DareRewardEvaluator

LIMIT = int(os.environ.get("DARE_OC_LIMIT", "50"))

datasets = [
    dict(
        abbr=f"dare-sudoku-{LIMIT}",
        type=DareBenchmarkDataset,
        benchmark="sudoku",  # its default data: dare://sudoku/test.parquet (500 real test puzzles)
        limit=LIMIT,
        prompt_template="{{ extra_info.puzzle }}",  # the 16 puzzle digits, as the quickstart spec
        reader_cfg=dict(input_columns=["prompt"], output_column="row"),
        infer_cfg=dict(
            prompt_template=dict(type=PromptTemplate, template="{prompt}"),
            retriever=dict(type=ZeroRetriever),
            inferencer=dict(type=GenInferencer, max_out_len=17),
        ),
        eval_cfg=dict(
            evaluator=dict(type=DareRewardEvaluator, benchmark="sudoku",
                           reward=dict(name="sudoku", params=dict(require_answer_tags=False))),
        ),
    )
]

models = [
    dict(
        type=DareModel,
        abbr="dare-sudoku-model",
        path=os.environ.get("DARE_OC_MODEL", "runs/quickstart"),
        sampler=dict(name="llada", params=dict(gen_length=17, block_length=17, steps=17, temperature=0.0,
                                               remasking="low_confidence")),
        seed=0,
        max_out_len=17,
        batch_size=LIMIT,  # one sampler call for all puzzles, as `dare eval` with eval.batch_size >= LIMIT
        run_cfg=dict(num_gpus=0, num_procs=1),
    )
]

del os  # OpenCompass dumps every top-level name of a config; a module cannot be dumped
