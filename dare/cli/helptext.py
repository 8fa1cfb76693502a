"""What the CLI prints to help: the environment variables and docs (top-level help), the installed model
families and presets (``dare create-model --help``), a component's params (``dare plugins NAME``)."""

from __future__ import annotations

import json

import click

from dare.errors import DareError

__all__ = ["EPILOG", "CreateModelCommand", "list_components", "print_params", "show_component"]

EPILOG = """\b
Documentation (in the repository): README.md (quickstart),
docs/run-spec.md (every spec field), docs/usage.md (run output,
faster decoding, checkpoints), docs/evaluation.md (dare eval,
lm-evaluation-harness, OpenCompass), docs/scaling.md (several GPUs
or nodes), docs/plugins.md (writing a plugin, RL objectives),
docs/architecture.md. `dare COMMAND --help` for one command;
`dare plugins NAME` for a component's params.

\b
Environment variables:
  DARE_DATA_DIR           folder of the benchmarks' default data files
                          (rl/test/<name>_1.parquet)
  DARE_LOAD_PLUGINS       comma-separated plugins to load: entry-point or
                          distribution names (myplugin, dare-plugin-myplugin)
                          (default: every installed plugin)
  DARE_TRACE_PLUGINS      1: print every plugin hook call
  DARE_PROGRESS           rich | plain | off (default: rich on a
                          terminal, plain lines otherwise)
  DARE_PROGRESS_INTERVAL  seconds between plain progress lines (30)
  DARE_CPU_SHARDING       1: apply the launch's FSDP2/ZeRO sharding on CPU
                          processes too (gloo; DeepSpeed's CPU accelerator)
  DARE_SHARED_DIR         the project's shared reference files, for
                          tests (default ../shared)
  DARE_SLOW               1: also run the tests marked slow
"""


class CreateModelCommand(click.Command):
    """``dare create-model --help`` ends with the installed families and their presets (loaded at help time)."""

    def format_epilog(self, ctx, formatter):
        super().format_epilog(ctx, formatter)
        with formatter.section("Families and presets (--preset)"):
            formatter.write_dl(_family_presets())


def _family_presets() -> list[tuple[str, str]]:
    """``(family, "preset (d_model 64, 2 layers), ...")`` for every installed model family."""
    try:
        from dare.plugins.manager import get_registry

        reg = get_registry()
        out = []
        for name in reg.names("model_family"):
            presets = reg.get("model_family", name).create().presets()
            out.append((name, "; ".join(f"{p} ({_preset_summary(cfg)})" if _preset_summary(cfg) else p
                                        for p, cfg in presets.items()) or "(no presets)"))
        return out or [("(none)", "no model family is installed")]
    except DareError as exc:
        return [("(unavailable)", f"the plugins did not load: {exc}")]


def _preset_summary(cfg: dict) -> str:
    keys = (("d_model", "d_model"), ("hidden_size", "hidden"), ("n_layers", "layers"), ("num_hidden_layers", "layers"),
            ("n_heads", "heads"), ("num_attention_heads", "heads"), ("num_experts", "experts"))
    return ", ".join(f"{label} {cfg[k]}" for k, label in keys if k in cfg)


def print_params(con, entry) -> None:
    """A component's params as a table (:func:`dare.plugins.paramdocs.param_rows`)."""
    from rich.table import Table

    from dare.plugins.paramdocs import official_by_family, official_note, param_rows

    rows = param_rows(entry.cls.Params)
    by_family = official_by_family(entry.cls.Params)
    heads = tuple(f"official {fam}".strip() for fam in by_family)  # one column per family the release trains
    t = Table(title=f"{entry.kind} {entry.name} ({entry.distribution}): {entry.cls.description()}",
              title_justify="left", caption=official_note(entry.cls.Params) or None, caption_justify="left")
    for col in ("param", "type", "default") + heads + ("description",):
        t.add_column(col, overflow="fold")
    for r in rows:  # –: no official value recorded
        t.add_row(*r[:3], *(fam["values"].get(r[0], "–") for fam in by_family.values()), r[3])
    if rows:
        con.print(t)
    else:
        con.print(f"{entry.kind} {entry.name} ({entry.distribution}): {entry.cls.description()} - no params")


def show_component(reg, name: str, as_json: bool) -> None:
    """``dare plugins NAME``: every component called NAME, with its params.

    :raises PluginError: no component has that name (with the closest names).
    """
    import difflib

    from dare.errors import PluginError
    from dare.plugins.paramdocs import official_by_family, official_values, param_rows

    found = [e for e in reg.all() if e.name == name]
    if not found:
        names = sorted({e.name for e in reg.all()})
        close = difflib.get_close_matches(name, names, n=3)
        hint = f"; did you mean {', '.join(close)}?" if close else ""
        raise PluginError(f"no installed component is called {name!r}" + hint + " (`dare plugins` lists them all)")
    if as_json:
        click.echo(json.dumps([{"kind": e.kind, "name": e.name, "distribution": e.distribution,
                                "description": e.cls.description(), "params": e.cls.Params.model_json_schema(),
                                "rows": [dict(zip(("param", "type", "default", "description"), r))
                                         for r in param_rows(e.cls.Params)],
                                "official": official_values(e.cls.Params),
                                "official_by_family": official_by_family(e.cls.Params)} for e in found], indent=2))
        return
    con = wide_console()
    for e in found:
        print_params(con, e)


def list_components(reg, as_json: bool, with_params: bool, check: bool, console) -> None:
    """``dare plugins`` without NAME: every component (kind, name, distribution, version), failures and
    conflicts, as a table or JSON (``--params``: with each component's params).

    :param reg: the plugin registry; :param console: a callable returning a rich console.
    :raises PluginError: two plugins register the same name.
    """
    from dare.errors import PluginError

    conflicts = list(reg.conflicts)
    if check or with_params:
        reg.load_all()  # components whose module fails to import become failures
    broken = {f.component for f in reg.failures if f.component}
    rows = [
        {"kind": e.kind, "name": e.name, "distribution": e.distribution, "version": e.version, "plugin": e.plugin,
         "description": e.description,
         **({"params": e.cls.Params.model_json_schema()} if with_params and f"{e.kind} {e.name}" not in broken else {})}
        for e in reg.all()
    ]
    failures = [{"plugin": f.plugin, "distribution": f.distribution, "error": f.error,
                 **({"component": f.component} if f.component else {})} for f in reg.failures]
    if as_json:
        click.echo(json.dumps({"components": rows, "failed": failures, "conflicts": conflicts}, indent=2))
    else:
        from rich.markup import escape
        from rich.table import Table

        t = Table(title="DARE components")
        for col in ("kind", "name", "distribution", "version"):
            t.add_column(col)
        for r in rows:
            t.add_row(r["kind"], r["name"], r["distribution"], r["version"])
        con = console()
        con.print(t)
        if with_params:
            from dare.cli.helptext import print_params

            for e in reg.all():
                print_params(con, e)
        else:
            con.print("params of a component: `dare plugins NAME` (all: `dare plugins --params`)")
        for f in failures:
            what = f"component {f['component']} of plugin" if "component" in f else "plugin"
            con.print(f"[red]failed to load {what} {f['plugin']} ({f['distribution']}): {escape(f['error'])}[/red]")
        for c in conflicts:
            con.print(f"[red]conflict: {c}[/red]")
    if conflicts:
        raise PluginError("; ".join(conflicts))


def wide_console():
    """A rich console for stdout; when stdout is not a terminal, ``$COLUMNS`` wide if set, else 200 columns, so
    piped tables keep names whole instead of wrapping at rich's default 80."""
    import sys

    from rich.console import Console

    try:
        tty = sys.stdout.isatty()
    except (AttributeError, ValueError):
        tty = False
    if tty:
        return Console()
    import os

    columns = os.environ.get("COLUMNS", "")
    return Console(width=int(columns) if columns.isdigit() and int(columns) > 0 else 200)  # COLUMNS wins
