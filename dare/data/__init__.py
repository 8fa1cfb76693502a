"""Dataset rows and prompt rendering: reading rows (parquet, JSONL, the hub), checking their columns, rendering
prompts with chat templates and collating supervised batches.

Rows follow the format of DARE's data files: ``data_source``, ``prompt`` (a list of chat messages
``{role, content}``), ``reward_model`` (``{ground_truth, style}``) and ``extra_info`` (a dict). Files
are parquet or JSONL, a packaged asset (``dare://...``), or a hub dataset id (loaded with
``datasets``). Templates are Jinja2 over the row's fields (``{{ extra_info.puzzle }}``).
"""

from dare.data.rows import dataset_columns, load_rows
from dare.data.templates import Prompter, render, template_fields

__all__ = ["load_rows", "dataset_columns", "render", "template_fields", "Prompter"]
