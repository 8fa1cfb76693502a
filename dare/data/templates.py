"""Prompt/response templates (Jinja2) and chat formatting."""

from __future__ import annotations

from functools import lru_cache
from typing import Any

import jinja2
from jinja2 import meta, nodes

from dare.data.columns import value_type_problem
from dare.errors import DataError

__all__ = ["render", "template_fields", "Prompter"]

_env = jinja2.Environment(undefined=jinja2.StrictUndefined, keep_trailing_newline=True, autoescape=False)


@lru_cache(maxsize=256)
def _compile(template: str) -> jinja2.Template:
    try:
        return _env.from_string(template)
    except jinja2.TemplateSyntaxError as exc:
        raise DataError(f"template {template!r} is not valid Jinja2: {exc}") from None


def template_fields(template: str) -> set[str]:
    """Top-level row fields a template reads (``{{ extra_info.puzzle }}`` -> ``{'extra_info'}``)."""
    try:
        ast = _env.parse(template)
    except jinja2.TemplateSyntaxError as exc:
        raise DataError(f"template {template!r} is not valid Jinja2: {exc}") from None
    return set(meta.find_undeclared_variables(ast))


def render(template: str, row: dict[str, Any]) -> str:
    """Render a template over a row.

    :raises DataError: a field the template reads is missing from the row.
    """
    try:
        return _compile(template).render(**row)
    except jinja2.UndefinedError as exc:
        path = _missing_field(template, row)
        what = f"the row has no field {path!r} ({exc.message})" if path else exc.message
        raise DataError(f"template {template!r}: {what}; row keys: {', '.join(row)}") from None


def _missing_field(template: str, row: dict[str, Any]) -> str | None:
    """The first dotted field (``extra_info.puzle``) the template reads that ``row`` lacks, or None."""
    ast = _env.parse(template)
    fields = meta.find_undeclared_variables(ast)  # not loop variables or {% set %} names
    for node in ast.find_all((nodes.Getattr, nodes.Getitem, nodes.Name)):
        keys, n = [], node
        while isinstance(n, (nodes.Getattr, nodes.Getitem)) and (isinstance(n, nodes.Getattr)
                                                                 or isinstance(n.arg, nodes.Const)):
            keys.append(n.attr if isinstance(n, nodes.Getattr) else n.arg.value)
            n = n.node
        if not isinstance(n, nodes.Name) or n.name not in fields:
            continue
        if n.name not in row:
            return n.name
        value, path = row[n.name], n.name
        for k in reversed(keys):
            path += f".{k}" if isinstance(k, str) else f"[{k!r}]"
            try:
                value = value[k]
            except (KeyError, IndexError, TypeError):
                return path
    return None


class Prompter:
    """Turns rows into prompt text (and response text) for one dataset.

    * With ``prompt_template``: the rendered text is the user message; otherwise the row's
      ``prompt`` column (chat messages or a string).
    * With ``chat_template``: messages go through the tokenizer's chat template with
      ``add_generation_prompt=True``; otherwise the user message text is used as-is.
    """

    def __init__(
        self,
        tokenizer,
        prompt_template: str | None = None,
        response_template: str | None = None,
        chat_template: bool = True,
        system_prompt: str | None = None,
        loc: str | None = None,
    ):
        """``loc``: the spec section of these templates (e.g. ``data.train``), named by render errors."""
        self.loc = loc
        self.tokenizer = tokenizer
        self.prompt_template = prompt_template
        self.response_template = response_template
        self.chat_template = chat_template
        self.system_prompt = system_prompt

    def _render(self, field: str, row: dict[str, Any]) -> str:
        try:
            return render(getattr(self, field), row)
        except DataError as exc:
            if self.loc is None:
                raise
            raise DataError(f"{self.loc}.{field}: {exc}") from None

    def messages(self, row: dict[str, Any]) -> list[dict[str, str]]:
        if self.prompt_template is not None:
            msgs = [{"role": "user", "content": self._render("prompt_template", row)}]
        else:
            if "prompt" not in row:
                raise DataError(f"row has no 'prompt' column and no prompt_template is set (keys: {', '.join(row)})")
            p = row["prompt"]
            if (why := value_type_problem("prompt", p)) is not None:
                raise DataError(f"{self.loc + ': ' if self.loc else ''}{why}; or set a prompt_template")
            msgs = [{"role": "user", "content": p}] if isinstance(p, str) else [dict(m) for m in p]
        if self.system_prompt and not any(m["role"] == "system" for m in msgs):
            msgs = [{"role": "system", "content": self.system_prompt}] + msgs
        return msgs

    def prompt(self, row: dict[str, Any]) -> str:
        """The prompt text the model conditions on."""
        msgs = self.messages(row)
        if not self.chat_template:
            return "\n".join(m["content"] for m in msgs)
        if not getattr(self.tokenizer, "chat_template", None):
            raise DataError("the tokenizer has no chat template; set chat_template: false in the dataset spec")
        return self.tokenizer.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True)

    def response(self, row: dict[str, Any]) -> str:
        """The target response text (supervised data)."""
        if self.response_template is not None:
            return self._render("response_template", row)
        for key in ("response", "completion", "answer"):
            if key in row and (why := value_type_problem(key, row[key])) is not None:
                raise DataError(f"{self.loc + ': ' if self.loc else ''}{why}; or set a response_template")
            if key in row:
                return row[key]
        raise DataError(
            "no response_template is set and the row has no 'response'/'completion'/'answer' column; "
            "set data.train.response_template, e.g. '{{ reward_model.ground_truth }}'"
        )
