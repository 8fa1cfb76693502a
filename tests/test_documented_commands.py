"""Every ``dare`` command that README.md, docs/*.md (fenced code blocks) and the CLI's ``--help`` texts show runs
as written, in a temporary working directory that holds the repository's examples/.

:data:`COMMANDS` maps each documented command (comments and ``\\`` line breaks removed) to how the test runs it;
a documented command missing from it (or an entry no document shows any more) fails
:func:`test_every_documented_command_is_mapped`. Placeholders (``SPEC.yaml``, ``DIR``, ``NAME``) become concrete
tiny files of the working directory (:func:`workdir`): ``tiny.yaml`` is a 2-step SFT run of a tiny LLaDA model
with a 2-puzzle evaluation; ``runs/quickstart/checkpoints/checkpoint-250`` (the SFT checkpoint that
examples/quickstart-rl.yaml starts from) is a tiny random LLaDA model.

Tiers: every command is parsed (click) and its spec validated (``dare validate``, or the command itself with
``--dry-run``) in :func:`test_documented_command_parses_and_validates`; the commands that train or generate run
for real in :func:`test_documented_commands_run` with a few steps (10-45 s on 2 cores). Commands that need
GPUs, a cluster or several nodes are only parsed and validated; the reason is in their entry.
"""

from __future__ import annotations

import os
import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import yaml

from dare.testing import repo_root, shared_path

ROOT = repo_root()

#: the tiny SFT spec that ``SPEC.yaml`` stands for (2 steps, checkpoint at step 2, 2 evaluation puzzles)
TINY = {
    "model": {"new": {"family": "llada", "preset": "tiny", "tokenizer": "byte", "seed": 0}},
    "data": {"train": {"path": "dare://sudoku/train.parquet", "limit": 8, "chat_template": False,
                       "prompt_template": "{{ extra_info.puzzle }}",
                       "response_template": "{{ reward_model.ground_truth }}"}},
    "algorithm": {"name": "sft"},
    "sampler": {"name": "llada", "params": {"gen_length": 4, "block_length": 4, "steps": 2}},
    "train": {"learning_rate": 1.0e-3, "max_steps": 2, "per_device_batch_size": 2, "save_steps": 2,
              "logging_steps": 1, "num_threads": 1},
    "eval": {"benchmarks": [{"name": "sudoku", "limit": 2, "chat_template": False,
                             "prompt_template": "{{ extra_info.puzzle }}",
                             "reward": {"name": "sudoku", "params": {"require_answer_tags": False}}}]},
    "output": {"dir": "runs/tiny"},
}
RL_START = "runs/quickstart/checkpoints/checkpoint-250"
CARD = "path/to/LLaDA-8B-Instruct-card"
#: a quickstart run shrunk to seconds (run by test_documented_commands_run): 2 steps, small batches, 2 evaluation puzzles
FEW_STEPS = ["--set", "train.max_steps=2", "--set", "train.per_device_batch_size=2", "--set", "train.num_threads=1",
             "--set", "data.train.limit=8", "--set", "eval.benchmarks.0.limit=2"]


@dataclass
class Doc:
    """How one documented command is run. ``argv``: the command as run (placeholders instantiated, after
    ``dare``); ``check``: what the fast tier runs instead (None: ``argv`` itself, which must then be quick);
    ``why``: for a command only parsed, why it cannot run here; ``slow``: it trains or generates, run by
    :func:`test_documented_commands_run` (in :data:`COMMANDS` order: later commands read earlier runs)."""

    argv: list[str]
    check: list[str] | None = None
    why: str = ""
    slow: bool = False
    needs_card: bool = False
    extra: list[str] = field(default_factory=list)


def _v(*args: str) -> list[str]:
    return ["validate", *args]


#: documented command -> how it runs. Order matters for test_documented_commands_run (run before eval, generate --run, export).
COMMANDS: dict[str, Doc] = {
    # README.md, "CLI"
    "dare validate SPEC.yaml": Doc(["validate", "tiny.yaml"]),
    "dare run SPEC.yaml": Doc(["run", "tiny.yaml"], _v("tiny.yaml", "--command", "run"), slow=True),
    "dare train SPEC.yaml": Doc(["train", "tiny.yaml", "--set", "output.dir=runs/tiny-train"],
                                _v("tiny.yaml", "--command", "train", "--set", "output.dir=runs/tiny-train"),
                                slow=True),
    "dare eval SPEC.yaml": Doc(["eval", "tiny.yaml"], _v("tiny.yaml", "--command", "eval"), slow=True),
    'dare generate --run DIR --prompt "..."': Doc(["generate", "--run", "runs/tiny", "--prompt", "1234"], [],
                                                  slow=True),
    'dare generate --model DIR --prompt "..." [--sampler NAME --param k=v ...]': Doc(
        ["generate", "--model", RL_START, "--prompt", "1234", "--sampler", "llada", "--param", "gen_length=4",
         "--param", "steps=2", "--param", "block_length=4"], [], slow=True),
    "dare plugins": Doc(["plugins"]),
    "dare plugins NAME": Doc(["plugins", "d1"]),
    "dare schema [-o FILE]": Doc(["schema", "-o", "schema.json"]),
    "dare profile SPEC.yaml [--steps N] [--json]": Doc(["profile", "tiny.yaml", "--steps", "2", "--json"],
                                                       _v("tiny.yaml"), slow=True),
    "dare export SRC OUT": Doc(["export", "runs/tiny/checkpoints/checkpoint-2", "exported"], [], slow=True),
    "dare compare -o DIR LABEL=RUN_DIR[:before|:after] ... [--power EFFECT]": Doc(["compare", "-o", "cmp", "tiny=runs/tiny:after"], [],
                                                                 slow=True),
    "dare sweep SPEC.yaml --grid KEY=V1,V2 --seeds 0,1,2 -o DIR [--launcher local|slurm] [--power EFFECT]": Doc(
        ["sweep", "tiny.yaml", "--grid", "train.learning_rate=1e-3,2e-3", "--seeds", "0,1,2", "-o", "sweep",
         "--launcher", "local", "--dry-run"]),
    "dare create-model FAMILY DIR --preset tiny": Doc(["create-model", "llada", "created", "--preset", "tiny"]),
    "dare new-plugin NAME --kind objective|rl-objective|model|sampler|evaluator|reward": Doc(
        ["new-plugin", "my-rl", "--kind", "rl-objective"]),
    # docs/recipes.md: an 8B model on 8 GPUs; the real model card (config and weight index, no weights) stands in
    "accelerate launch --config_file examples/accelerate/zero2.yaml $(which dare) run "
    "examples/recipes/d1-llada-8b-gsm8k.yaml": Doc(
        ["run", "examples/recipes/d1-llada-8b-gsm8k.yaml"],
        _v("examples/recipes/d1-llada-8b-gsm8k.yaml", "--config-only", "--set", f"model.path={CARD}"),
        why="8 GPUs and LLaDA-8B-Instruct's weights", needs_card=True),
    "dare validate examples/recipes/d1-llada-8b-gsm8k.yaml --config-only --set "
    "model.path=path/to/LLaDA-8B-Instruct-card": Doc(
        ["validate", "examples/recipes/d1-llada-8b-gsm8k.yaml", "--config-only", "--set", f"model.path={CARD}"],
        needs_card=True),
    "dare profile examples/recipes/d1-llada-8b-gsm8k.yaml --estimate --set "
    "model.path=path/to/LLaDA-8B-Instruct-card": Doc(
        ["profile", "examples/recipes/d1-llada-8b-gsm8k.yaml", "--estimate", "--set", f"model.path={CARD}"],
        needs_card=True),
    # docs/rl-quickstart.md: the quickstart's two stages, a few steps each in the slow tier
    "dare run examples/quickstart-sft-short.yaml": Doc(
        ["run", "examples/quickstart-sft-short.yaml", *FEW_STEPS],
        _v("examples/quickstart-sft-short.yaml", "--command", "run"), slow=True),
    "dare run examples/quickstart-rl.yaml --set train.seed=1 --set output.dir=runs/rl-tracerl-s1": Doc(
        ["run", "examples/quickstart-rl.yaml", "--set", "train.seed=1", "--set", "output.dir=runs/rl-tracerl-s1",
         *FEW_STEPS, "--set", "algorithm.params.group_size=2", "--set", "eval.validation.limit=2",
         "--set", "train.eval_steps=1",
         "--set", "sampler.params.gen_length=4", "--set", "sampler.params.block_length=4",
         "--set", "sampler.params.steps=2"],
        _v("examples/quickstart-rl.yaml", "--command", "run", "--set", "train.seed=1", "--set",
           "output.dir=runs/rl-tracerl-s1"), slow=True),
    # docs/scaling.md
    "torchrun --nnodes 2 --nproc_per_node 8 --rdzv_backend c10d --rdzv_endpoint NODE0:29500 --rdzv_id dare-run-1 "
    "--no-python dare run SPEC.yaml": Doc(["run", "tiny.yaml"], _v("tiny.yaml", "--command", "run"),
                                          why="two nodes of 8 GPUs"),
    "accelerate launch --config_file examples/accelerate/fsdp2.yaml --num_machines 2 --num_processes 16 "
    "--machine_rank 0 --main_process_ip NODE0 --main_process_port 29500 $(which dare) run SPEC.yaml": Doc(
        ["run", "tiny.yaml"], _v("tiny.yaml", "--command", "run"), why="two nodes of 8 GPUs"),
    "dare sweep examples/quickstart-rl.yaml --grid algorithm.name=d1,tracerl --seeds 0,1,2 -o runs/rl-sweep": Doc(
        ["sweep", "examples/quickstart-rl.yaml", "--grid", "algorithm.name=d1,tracerl", "--seeds", "0,1,2", "-o",
         "runs/rl-sweep", "--dry-run"]),
    "dare sweep examples/recipes/d1-llada-8b-gsm8k.yaml --seeds 0,1,2 --launcher slurm --slurm-partition gpu "
    "--slurm-account proj --slurm-mem 512G --slurm-array-parallelism 4": Doc(
        ["sweep", "examples/recipes/d1-llada-8b-gsm8k.yaml", "--seeds", "0,1,2", "--launcher", "slurm"],
        _v("examples/recipes/d1-llada-8b-gsm8k.yaml", "--config-only", "--set", f"model.path={CARD}"),
        why="a SLURM cluster of 8-GPU nodes and LLaDA-8B-Instruct's weights", needs_card=True),
    "dare sweep examples/recipes/d1-llada-8b-gsm8k.yaml --seeds 0-4 -o /shared/runs/d1-seeds --launcher slurm "
    "--slurm-partition gpu --slurm-account proj --slurm-qos normal --slurm-mem 512G --cpus-per-run 64 "
    "--slurm-timeout-min 720 --slurm-save-window-s 900 --slurm-array-parallelism 4": Doc(
        ["sweep", "examples/recipes/d1-llada-8b-gsm8k.yaml", "--seeds", "0-4", "--launcher", "slurm"],
        _v("examples/recipes/d1-llada-8b-gsm8k.yaml", "--config-only", "--set", f"model.path={CARD}"),
        why="a SLURM cluster of 8-GPU nodes and LLaDA-8B-Instruct's weights", needs_card=True),
    # `dare sweep --help`
    "dare sweep examples/quickstart-rl.yaml --grid algorithm.name=d1,tracerl --seeds 0,1,2 -o runs/sweep": Doc(
        ["sweep", "examples/quickstart-rl.yaml", "--grid", "algorithm.name=d1,tracerl", "--seeds", "0,1,2", "-o",
         "runs/sweep", "--dry-run"]),
    "dare sweep SPEC --grid train.learning_rate=1e-4,3e-4 --seeds 0-4 --parallel 2": Doc(
        ["sweep", "tiny.yaml", "--grid", "train.learning_rate=1e-4,3e-4", "--seeds", "0-4", "--parallel", "2",
         "--dry-run"]),
    "dare compare pilot=runs/pilot -o runs/pilot-power --power 0.02": Doc(
        ["compare", "pilot=runs/tiny", "-o", "runs/pilot-power", "--power", "0.02"], [], slow=True),
    "dare compare untrained=runs/quickstart:before sft=runs/quickstart:after -o runs/compare": Doc(
        ["compare", "untrained=runs/tiny:after", "sft=runs/tiny:after", "-o", "runs/compare"], [], slow=True),
}

_LAUNCHED = re.compile(r"^(?:\S+=\S+ )*(?:torchrun|accelerate launch)\b.*(?:\$\(which dare\)|--no-python dare) run\b")


def _logical_lines(block: str) -> list[str]:
    """The lines of a code block with ``\\`` continuations joined."""
    out, cur = [], ""
    for line in block.splitlines():
        if line.rstrip().endswith("\\"):
            cur += line.rstrip()[:-1].strip() + " "
            continue
        out.append((cur + line.strip()).strip())
        cur = ""
    return out


def _key(line: str) -> str | None:
    """The documented command of ``line`` (``$ `` prompt, comment and extra spaces removed), or None when the
    line is not a ``dare`` command (a ``dare run`` under torchrun or accelerate launch is one)."""
    line = re.sub(r"^\$ ", "", line.strip())
    if not (re.match(r"^dare [a-z]", line) or _LAUNCHED.match(line)):
        return None
    code = re.split(r"\s+#\s", line, maxsplit=1)[0]
    return " ".join(code.split())


def documented() -> dict[str, list[str]]:
    """``{command: [where it is documented]}`` over README.md, docs/*.md and every ``dare ... --help``."""
    from click.testing import CliRunner

    from dare.cli import cli

    found: dict[str, list[str]] = {}
    for path in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        for block in re.findall(r"^```[^\n]*\n(.*?)^```", path.read_text(), flags=re.M | re.S):
            for line in _logical_lines(block):
                key = _key(line)
                if key is not None:
                    found.setdefault(key, []).append(path.relative_to(ROOT).as_posix())
    for name in [None, *cli.commands]:
        out = CliRunner().invoke(cli, [*([name] if name else []), "--help"], terminal_width=200).output
        for line in _logical_lines(out):
            key = _key(line)
            if key is not None:
                found.setdefault(key, []).append(f"dare {name or ''} --help".replace("  ", " "))
    return found


def test_every_documented_command_is_mapped():
    docs = documented()
    missing = sorted(set(docs) - set(COMMANDS))
    assert not missing, f"documented commands without an entry in COMMANDS: {missing}"
    stale = sorted(set(COMMANDS) - set(docs))
    assert not stale, f"COMMANDS entries no document shows any more: {stale}"
    assert len(docs) >= 25
    # a command that neither runs as written nor runs in test_documented_commands_run says why it cannot
    assert all(doc.why for doc in COMMANDS.values() if doc.check is not None and not doc.slow)
    assert "README.md" in docs["dare run SPEC.yaml"] and "docs/plugins.md" in docs["dare plugins"]
    assert "dare sweep --help" in docs["dare sweep SPEC --grid train.learning_rate=1e-4,3e-4 --seeds 0-4 --parallel 2"]


def _shared(*parts: str) -> Path | None:
    """A shared reference file (:func:`dare.testing.shared_path`), None when absent."""
    try:
        return shared_path(*parts)
    except pytest.skip.Exception:
        return None


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    """The working directory of the documented commands: examples/ (the repository's), tiny.yaml, the tiny
    RL start checkpoint; data/ and the LLaDA-8B model card from the shared reference files when present."""
    from dare.testing import tiny_model

    d = tmp_path_factory.mktemp("documented")
    (d / "examples").symlink_to(ROOT / "examples", target_is_directory=True)
    (d / "tiny.yaml").write_text(yaml.safe_dump(TINY, sort_keys=False))
    tiny_model("llada", d / RL_START, seed=0)
    card, data = _shared("model-cards", "LLaDA-8B-Instruct"), _shared("data")
    if card is not None and data is not None and (card / "config.json").is_file():
        (d / CARD).parent.mkdir(parents=True)
        (d / CARD).symlink_to(card, target_is_directory=True)
        (d / "data").symlink_to(data, target_is_directory=True)
    return d


def _parse(argv: list[str]) -> None:
    """Parse ``dare ARGV`` with click (options, choices, paths) without running it."""
    from dare.cli import cli

    cmd = cli.commands[argv[0]]
    cmd.make_context(argv[0], list(argv[1:])).close()


@pytest.mark.parametrize("key", list(COMMANDS))
def test_documented_command_parses_and_validates(key, workdir, run_cli, monkeypatch):
    doc = COMMANDS[key]
    if doc.needs_card and not (workdir / CARD).exists():
        pytest.skip("the LLaDA-8B-Instruct model card and data/ are not available (shared reference files)")
    monkeypatch.chdir(workdir)
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    _parse(doc.argv)
    check = doc.argv if doc.check is None else doc.check
    if not check:  # it reads what an earlier command wrote: parsed here, run in the slow tier
        return
    code, out, err = run_cli(*check)
    assert code == 0, f"{key}\n  ran: dare {shlex.join(check)}\n{out}{err}"
    if check[0] == "validate":
        assert "valid" in out, out
    if "--dry-run" in check:
        assert "(dry run: nothing started)" in out, out


def test_the_sweep_over_objectives_drops_the_other_objectives_params(workdir, run_cli, monkeypatch):
    """The documented sweep of examples/quickstart-rl.yaml: the d1 runs drop TraceRL's own params (and keep the
    shared ones); the TraceRL runs keep the spec as it is."""
    from dare.sweep import plan_runs

    monkeypatch.chdir(workdir)
    runs = plan_runs("examples/quickstart-rl.yaml", [("algorithm.name", ["d1", "tracerl"])], [0], workdir / "sw")
    by = {r.settings["algorithm.name"]: r for r in runs}
    assert by["d1"].unset == ["algorithm.params.transition_grouping", "algorithm.params.normaliser",
                              "algorithm.params.shrink"]
    assert by["tracerl"].unset == []
    from dare.sweep.launchers import run_command

    cmd = run_command("examples/quickstart-rl.yaml", by["d1"])
    assert cmd[-6:] == ["--unset", "algorithm.params.transition_grouping", "--unset", "algorithm.params.normaliser",
                        "--unset", "algorithm.params.shrink"]
    code, out, err = run_cli("sweep", "examples/quickstart-rl.yaml", "--grid", "algorithm.name=d1,tracerl", "-o", "sw",
                             "--dry-run")
    assert code == 0 and "algorithm.name=d1: --unset algorithm.params.transition_grouping --unset " in err, err
    assert "algorithm.name=tracerl:" not in err


def test_documented_commands_run(workdir, run_cli, monkeypatch):
    """The commands that train or generate, run with a few steps, in order (eval, generate --run, export and
    compare read the run of `dare run SPEC.yaml`)."""
    monkeypatch.chdir(workdir)
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    for key, doc in COMMANDS.items():
        if not doc.slow:
            continue
        code, out, err = run_cli(*doc.argv)
        assert code == 0, f"{key}\n  ran: dare {shlex.join(doc.argv)}\n{out}{err[-3000:]}"
    assert (workdir / "runs" / "tiny" / "report.json").is_file()
    assert (workdir / "exported" / "config.json").is_file()
    assert (workdir / "cmp" / "comparison.md").is_file() or any((workdir / "cmp").glob("*.md"))
    assert os.path.isdir(workdir / "runs" / "rl-tracerl-s1" / "model")


def test_the_run_spec_reference_switches_tracerl_to_d1_as_written(workdir, run_cli, monkeypatch):
    """docs/run-spec.md's inline `--unset` example (TraceRL's quickstart switched to d1) is a complete command."""
    text = (ROOT / "docs" / "run-spec.md").read_text()
    m = re.search("`(" + re.escape("dare run examples/quickstart-rl.yaml --set") + r"\s+algorithm\.name=d1[^`]*)`", text)
    assert m is not None, "docs/run-spec.md lost its --unset example"
    argv = shlex.split(" ".join(m.group(1).split()))[1:]
    monkeypatch.chdir(workdir)
    code, out, err = run_cli("validate", *argv[1:], "--command", "run")
    assert code == 0 and "valid" in out, err
