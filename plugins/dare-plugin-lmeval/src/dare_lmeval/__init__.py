"""DARE models in lm-evaluation-harness (``lm_eval run --model dare --model_args model=DIR,...``).

The model class is :class:`dare_lmeval.model.DareLM`; it is registered with lm-eval without any import
by the user (entry point ``lm_eval.models``, and :mod:`dare_lmeval._startup` for lm-eval versions that do
not read that group). This package's ``__init__`` stays import-free: Python imports it at start-up.
"""

__version__ = "0.1.0"
