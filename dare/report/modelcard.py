"""The Hugging Face model card (``model/README.md``) of a trained model.

Every model ``dare run``/``dare train`` saves gets a card, written with the weights into the staged directory that is
renamed into place (:meth:`dare.trainers.saving.CheckpointSaving.save_final`); the evaluation after training rewrites
it (atomically) with the scores. The YAML front matter is ``huggingface_hub.ModelCardData``'s: ``library_name``,
``base_model`` (the starting model when it is a hub id), ``tags``, ``datasets`` (the training and benchmark data that
are hub ids), ``model-index`` (one ``EvalResult`` per benchmark and metric, the sampler in ``metric_args``) and
``pipeline_tag``; the body says how the model was trained and evaluated, and how to load and upload it.
Card metadata reference: https://huggingface.co/docs/hub/model-cards (huggingface_hub ``repocard_data.py``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

__all__ = ["model_card", "write_model_card", "export_card", "CARD_NAME"]

#: the card's file name in a model directory (the Hub reads README.md)
CARD_NAME = "README.md"


def _hub_id(path: str | None) -> str | None:
    from dare.io import looks_local

    return path if isinstance(path, str) and path and not looks_local(path) else None


def _component(c) -> dict[str, Any] | None:
    """``{"name", "params"}`` of a component or of a spec's ``ComponentSpec`` (None for None)."""
    if c is None:
        return None
    params = c.params.model_dump(mode="json") if hasattr(c.params, "model_dump") else dict(c.params)
    return {"name": c.name, "params": params}


def model_card(spec, results: list[dict[str, Any]] | None = None, sampler=None, objective=None,
               family: str | None = None):
    """The card of a model trained from ``spec``.

    :param spec: the run's :class:`dare.runspec.models.RunSpec`.
    :param results: the evaluation after training, ``eval/after.json``'s results (``name``, ``n``, ``accuracy``,
        ``mean_reward``); None before it ran (no ``model-index``).
    :param sampler: the evaluation's sampler (a component, or the spec's ``sampler:``); ``objective``: the training
        objective (a component, or the spec's ``algorithm:``); ``family``: the model family name.
    :returns: a ``huggingface_hub.ModelCard`` (``str(card)`` is the README text; ``ModelCard.load`` parses it).
    """
    from huggingface_hub import EvalResult, ModelCard, ModelCardData

    samp = _component(sampler if sampler is not None else spec.sampler)
    obj = _component(objective if objective is not None else spec.algorithm)
    base = _hub_id(spec.model.path)
    train_data = spec.data.train if spec.data is not None else None
    benches = [b for b in (spec.eval.benchmarks if spec.eval is not None else []) if not isinstance(b, str)]
    datasets = list(dict.fromkeys(d for d in [_hub_id(train_data.path) if train_data is not None else None,
                                              *(_hub_id(b.path) for b in benches)] if d))
    tags = ["dare", "diffusion-llm", "masked-diffusion"] + [t for t in (family, obj and obj["name"]) if t]
    evals = []
    # the YAML drops null values: the sampler's unset parameters are left out of metric_args
    samp_args = None
    if samp:
        samp_args = {"name": samp["name"], "params": {k: v for k, v in samp["params"].items() if v is not None}}
    for r in results or []:
        name = r.get("name", "?")
        for metric in ("accuracy", "mean_reward"):
            if isinstance(r.get(metric), (int, float)):
                evals.append(EvalResult(task_type="text-generation", dataset_type=name, dataset_name=name,
                                        metric_type=metric, metric_value=float(r[metric]),
                                        metric_name=metric.replace("_", " "),
                                        metric_args={"sampler": samp_args, "rows": r.get("n")} if samp
                                        else {"rows": r.get("n")}))
    name = Path(spec.output.dir).name or "model"
    data = ModelCardData(library_name="transformers", base_model=base, tags=tags, datasets=datasets or None,
                         pipeline_tag="text-generation", model_name=name, eval_results=evals or None)
    body = [f"# {name}", "", "A diffusion language model post-trained with DARE (dLLM Alignment and Reinforcement "
            "Executor).", "", "## Training", ""]
    start = spec.model.path or (f"a new {spec.model.new.family} model ({spec.model.new.preset} preset, seed "
                                f"{spec.model.new.seed})" if spec.model.new is not None else "?")
    body.append(f"- starting model: `{start}`" + (" (LoRA)" if spec.model.lora is not None else ""))
    if obj is not None:
        body.append(f"- objective: `{obj['name']}` with `{obj['params']}`")
    if spec.train is not None:
        t = spec.train
        body.append(f"- {t.max_steps} optimizer steps, learning rate {t.learning_rate:g}, {t.per_device_batch_size} "
                    f"per device x {t.gradient_accumulation_steps} accumulation, seed {t.seed}")
    if train_data is not None:
        rows = f", rows {train_data.offset}..{train_data.offset + train_data.limit - 1}" if train_data.limit else ""
        body.append(f"- training data: `{train_data.path}`{rows}")
    body += ["", "## Evaluation", ""]
    if samp is not None:
        body.append(f"Sampler: `{samp['name']}` with `{samp['params']}`.")
        body.append("")
    if results:
        body += ["| benchmark | rows | accuracy | mean reward |", "|---|---:|---:|---:|"]
        body += [f"| {r.get('name')} | {r.get('n')} | {r.get('accuracy', float('nan')):.4f} | "
                 f"{r.get('mean_reward', float('nan')):.4f} |" for r in results]
    else:
        body.append("Not evaluated after training (the run has no evaluation after training, or it has not run yet).")
    model_dir = f"{spec.output.dir.rstrip('/')}/model"
    body += ["", "## Use", "", "```bash", "pip install dare-dllm   # and the model family's plugin",
             f"dare generate --model {model_dir} --prompt \"...\"", "# upload the weights, tokenizer and this card",
             f"hf upload YOUR_NAME/{name} {model_dir}", "```", ""]
    return ModelCard.from_template(data, template_str="---\n{{ card_data }}\n---\n\n" + "\n".join(body))


def write_model_card(model_dir: str | Path, spec, **kwargs) -> Path:
    """Write :func:`model_card` to ``model_dir/README.md`` atomically (a temporary file renamed).

    :param kwargs: :func:`model_card`'s ``results``, ``sampler``, ``objective``, ``family``.
    :returns: the card's path.
    """
    from dare.io import atomic_write_text

    path = Path(model_dir) / CARD_NAME
    atomic_write_text(path, str(model_card(spec, **kwargs)))
    return path


def export_card(src: str | Path, base: str | None, family: str | None, kind: str) -> str:
    """The card of a model ``dare export`` wrote from ``src``: the DARE card of the run it comes from (``src``'s own,
    the one above a ``model/adapter``, or a ``checkpoints/checkpoint-N``'s run's ``model/README.md``), else a short card
    with ``library_name``, ``base_model`` (``base`` when it is a hub id), ``tags`` and what was exported.

    :param kind: ``"adapter"`` (merged into ``base``) or ``"checkpoint"``.
    """
    from huggingface_hub import ModelCard, ModelCardData

    src = Path(src)
    from dare.run.rundir import RunDir

    for cand in (src / CARD_NAME, src.parent / CARD_NAME, RunDir(src.parent.parent).model / CARD_NAME):
        try:  # a DARE card (a run's model/, above its adapter/ or its checkpoints/checkpoint-N); not peft's
            # adapter card
            card = ModelCard.load(cand) if cand.is_file() else None
        except Exception:  # noqa: BLE001 - not a card: write our own
            card = None
        if card is not None and "dare" in (card.data.tags or []):
            return str(card)
    data = ModelCardData(library_name="transformers", base_model=_hub_id(base),
                         tags=["dare", "diffusion-llm", "masked-diffusion"] + ([family] if family else []),
                         pipeline_tag="text-generation")
    what = (f"a LoRA adapter (`{src}`) merged into `{base}`" if kind == "adapter"
            else f"the trainer checkpoint `{src}`, converted to the official format")
    body = f"# {src.name}\n\nA diffusion language model exported with DARE (`dare export`) from {what}.\n"
    return str(ModelCard.from_template(data, template_str="---\n{{ card_data }}\n---\n\n" + body))
