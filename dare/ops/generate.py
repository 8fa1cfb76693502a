"""``dare generate``: prompt in, text out, with a model and a sampler, or with everything a run used.

``dare generate --run DIR`` answers the way the run's own evaluation did: the run's trained ``model/``
(else its starting model), its sampler with the run's params, dtype and evaluation seed, and its
evaluation's prompt format (chat template on or off, system prompt; from ``eval.benchmarks[0]``, else
``data.train``). A prompt is the user message, i.e. what the run's ``prompt_template`` renders from a row,
so for the same prompts the completions equal the run's ``samples/`` (for greedy samplers: a sampler
that draws noise draws it from ``--seed`` here, not from the run's per-row keys). ``--sampler``, ``--param``,
``--chat/--no-chat``, ``--dtype`` and ``--seed`` override the run's settings.

``dare generate --model DIR`` with a model a DARE run wrote (its ``model/``, ``init-model/``, or a checkpoint under
``checkpoints/``: the run directory's ``run.json`` is found next to it) formats prompts as that run's evaluation
did (:func:`model_settings`); a model from elsewhere gets the tokenizer's chat template. Either way the command
prints on stderr which prompt format it used and why (:func:`prompt_format_line`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dare.errors import DareError
from dare.run.rundir import RunDir, is_run_record
from dare.trainers.checkpoints import checkpoint_step, last_complete_checkpoint

__all__ = ["GenerateSettings", "run_settings", "model_settings", "run_of_model", "prompt_format_line", "render_prompts",
           "generate", "check_generate_options"]


@dataclass
class GenerateSettings:
    """What ``dare generate`` uses: model directory (or hub id), sampler name (None: the family's default) and
    params, prompt format, dtype and seed; ``origin`` says where each came from (printed on stderr)."""

    model: str
    sampler: str | None = None
    params: dict[str, Any] = field(default_factory=dict)
    chat_template: bool = True
    system_prompt: str | None = None
    dtype: str = "float32"
    seed: int = 0
    origin: str = ""
    #: why the prompt format is what it is (see :func:`prompt_format_line`)
    format_from: str = "the default for a model that did not come from a DARE run"


def run_settings(run_dir: str | Path) -> GenerateSettings:
    """The generation settings of the run in ``run_dir`` (from its ``run.json``): its trained ``model/``; for a run
    that has not finished, its last complete checkpoint (the message says which step); only a run that has saved
    neither uses its starting model.

    :raises DareError: ``run_dir`` is not a run directory, or holds no model to load yet.
    """
    run_dir = Path(run_dir)
    rundir = RunDir(run_dir)
    try:
        spec = json.loads(rundir.record.read_text())["spec"]
    except (OSError, json.JSONDecodeError, KeyError, TypeError):
        raise DareError(f"--run {run_dir}: not a DARE run directory (no readable run.json with the run's spec); give "
                        f"the output.dir of a `dare run`/`dare train`") from None
    model = spec.get("model") or {}
    ckpt = last_complete_checkpoint(rundir.checkpoints) if rundir.checkpoints.is_dir() else None
    if rundir.has_model():
        path, which = rundir.model, "its trained model"
    elif ckpt is not None and (Path(ckpt) / "config.json").is_file():
        # an unfinished run: its newest weights, not the untrained start
        path, which = Path(ckpt), (f"its last checkpoint (step {checkpoint_step(ckpt)}; the run has not finished, so "
                                   "there is no model/ yet)")
    elif model.get("new") and rundir.has_init_model():
        path, which = rundir.init_model, "its starting model (no trained model/ yet)"
    elif model.get("path"):
        path, which = Path(model["path"]), "its starting model.path (no trained model/ yet)"
    else:
        raise DareError(f"--run {run_dir}: the run has no model to load yet (no model/ nor init-model/); run it first")
    fmt, where = _prompt_format(spec)
    sampler = spec.get("sampler") or {}
    ev = spec.get("eval") or {}
    return GenerateSettings(
        model=str(path), sampler=sampler.get("name"), params=dict(sampler.get("params") or {}),
        chat_template=fmt.get("chat_template", True), system_prompt=fmt.get("system_prompt"),
        dtype=model.get("dtype", "float32"), seed=int(ev.get("seed", 0) or 0),
        format_from=f"the run's {where}",
        origin=(f"{run_dir}: {which} {path}, sampler {sampler.get('name') or '(family default)'} with the run's "
                f"params, prompts formatted as {where} (chat template "
                f"{'on' if fmt.get('chat_template', True) else 'off'}"
                f"{', system prompt' if fmt.get('system_prompt') else ''})"),
    )


def run_of_model(model_path: str | Path) -> Path | None:
    """The run directory that wrote the model directory ``model_path``: its parent (``model/``, ``init-model/``) or
    grandparent (``checkpoints/checkpoint-N``, ``checkpoints/best``) holding a ``run.json`` run record; else None."""
    path = Path(model_path)
    if not path.is_dir():
        return None
    for cand in (path.parent, path.parent.parent):
        try:
            record = json.loads(RunDir(cand).record.read_text())
        except (OSError, json.JSONDecodeError, UnicodeDecodeError):
            continue
        if is_run_record(record):
            return cand
    return None


def model_settings(model_path: str) -> GenerateSettings:
    """``dare generate --model``'s settings: when a DARE run wrote the model (:func:`run_of_model`), that run's prompt
    format (chat template on or off, system prompt; as :func:`run_settings`); else the tokenizer's chat template."""
    run_dir = run_of_model(model_path)
    if run_dir is None:
        return GenerateSettings(model=model_path)
    spec = json.loads(RunDir(run_dir).record.read_text())["spec"]
    fmt, where = _prompt_format(spec)
    return GenerateSettings(model=model_path, chat_template=fmt.get("chat_template", True),
                            system_prompt=fmt.get("system_prompt"), format_from=f"the {where} of the run in {run_dir}")


def prompt_format_line(settings: GenerateSettings, used_chat: bool) -> str:
    """The stderr line naming the prompt format used: ``"prompt format: plain text, no chat template (the run's
    data.train; --chat/--no-chat choose)"``. ``used_chat``: the chat template was applied (a tokenizer without
    one falls back to plain text)."""
    what = "the tokenizer's chat template" if used_chat else "plain text, no chat template"
    if settings.system_prompt:
        what += ", with the system prompt"
    why = settings.format_from
    if settings.chat_template and not used_chat:
        why += "; the tokenizer has no chat template"
    return f"prompt format: {what} ({why}; --chat/--no-chat choose)"


def _prompt_format(spec: dict[str, Any]) -> tuple[dict[str, Any], str]:
    """The prompt format (``chat_template``, ``system_prompt``) of the run's first eval benchmark, else
    ``data.train``."""
    benches = (spec.get("eval") or {}).get("benchmarks") or []
    if benches:
        b = benches[0]
        return ({} if isinstance(b, str) else b), "eval.benchmarks[0]"
    train = (spec.get("data") or {}).get("train")
    if train:
        return train, "data.train"
    return {}, "the defaults"


def render_prompts(tokenizer, texts: list[str], chat_template: bool, system_prompt: str | None,
                   strict: bool) -> list[str]:
    """Prompt texts as the model sees them: each text is the user message (with ``system_prompt``), through the
    tokenizer's chat template when ``chat_template``.

    :param strict: a tokenizer without a chat template is an error (the run used one); otherwise the text is used as-is.
    :raises DareError: ``strict`` and the tokenizer has no chat template.
    """
    from dare.data import Prompter

    if chat_template and not getattr(tokenizer, "chat_template", None):
        if strict:
            raise DareError("--chat: the model's tokenizer has no chat template; pass --no-chat")
        chat_template = False
    prompter = Prompter(tokenizer, None, None, chat_template, system_prompt)
    return [prompter.prompt({"prompt": t}) for t in texts]


def generate(settings: GenerateSettings, sampler, texts: list[str], strict_chat: bool = False) -> dict[str, Any]:
    """Load ``settings.model`` and answer ``texts`` in one batch with ``sampler`` (a built sampler component).

    :returns: ``{"completions": [str], "nfe": int, "unmask_step": [[int]], "chat_template": bool}`` (the last: whether
        the prompts went through the tokenizer's chat template).
    """
    import torch

    from dare.scaling import distributed
    from dare.modeling import load_model
    from dare.sampling.text import decode_completions, encode_prompts

    lm = load_model(settings.model, dtype=settings.dtype)
    device = distributed.device()
    lm.model.to(device)
    rendered = render_prompts(lm.tokenizer, texts, settings.chat_template, settings.system_prompt, strict_chat)
    ids, attn = encode_prompts(lm.tokenizer, rendered, lm.tokens.pad_id, device)
    gen = torch.Generator(device=device).manual_seed(settings.seed)
    lm.model.eval()
    out = sampler.generate(lm.model, lm.family, lm.tokens, ids, attn, generator=gen)
    return {"completions": decode_completions(lm.tokenizer, out.completions, lm.tokens), "nfe": out.nfe,
            "unmask_step": out.unmask_step.tolist(),
            "chat_template": settings.chat_template and bool(getattr(lm.tokenizer, "chat_template", None))}


def check_generate_options(model_path: str, sampler: str | None, params: dict):
    """``dare generate``'s input checks (:func:`dare.runspec.resolve_generate`), problems named by the options.

    :returns: the sampler component. :raises DareError: naming ``--model``, ``--sampler``, ``--param KEY``.
    """
    from dare.runspec import resolve_generate

    ctx = resolve_generate(model_path, sampler, params)
    if not ctx.problems:
        return ctx.sampler
    names = {"model.path": "--model", "sampler.name": "--sampler", "sampler": "--sampler", "sampler.params": "--param"}
    out = []
    for loc, msg in ctx.problems:
        if loc.startswith("sampler.params."):
            loc = f"--param {loc[len('sampler.params.'):]}"
        out.append(f"{names.get(loc, loc)}: {msg.replace('model.path', '--model')}")
    raise DareError("; ".join(out))
