"""DARE_PROGRESS / DARE_PROGRESS_INTERVAL are checked up front; piped tables are wide; `dare train --help`."""
import pytest
from click.testing import CliRunner

from dare.cli import cli, main


@pytest.mark.parametrize("var,value,needle", [
    ("DARE_PROGRESS", "bogus", "DARE_PROGRESS='bogus' is not one of rich, plain, off"),
    ("DARE_PROGRESS_INTERVAL", "abc", "DARE_PROGRESS_INTERVAL='abc' must be a number of seconds >= 0"),
    ("DARE_PROGRESS_INTERVAL", "-5", "DARE_PROGRESS_INTERVAL='-5' must be a number"),
])
def test_bad_progress_environment_is_refused(monkeypatch, capsys, var, value, needle):
    monkeypatch.setenv(var, value)
    with pytest.raises(SystemExit) as exc:
        main(["plugins"])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and needle in err and err.count("\n") == 1


def test_good_progress_environment_is_accepted(monkeypatch):
    from dare.progress import check_environment

    for style in ("rich", "plain", "off", "PLAIN", ""):
        monkeypatch.setenv("DARE_PROGRESS", style)
        monkeypatch.setenv("DARE_PROGRESS_INTERVAL", "2.5")
        check_environment()


def test_piped_console_is_wide(monkeypatch):
    from dare.cli.helptext import wide_console

    monkeypatch.delenv("COLUMNS", raising=False)
    assert wide_console().width == 200  # pytest's stdout is not a terminal
    monkeypatch.setenv("COLUMNS", "90")
    assert wide_console().width == 90  # the user's COLUMNS wins
    monkeypatch.setenv("COLUMNS", "wide")
    assert wide_console().width == 200


def test_train_help_says_in_training_eval_still_runs():
    out = CliRunner().invoke(cli, ["train", "--help"]).output
    assert "no evaluation" not in out
    assert "skips the before/after evaluations" in out and "train.eval_steps" in out


# ---------------------------------------------------------------- spec messages (missing run model, --set, missing file)
def test_missing_run_model_suggests_running_its_spec(tmp_path, monkeypatch):
    from pathlib import Path

    from dare.modeling.locate import run_first_hint

    monkeypatch.chdir(Path(__file__).resolve().parents[1])
    assert run_first_hint("runs/quickstart-sft-short/model").endswith(
        "or run the spec that produces it first (e.g. dare run examples/quickstart-sft-short.yaml)")
    assert run_first_hint("runs/quickstart/checkpoints/checkpoint-250").endswith(
        "or run the spec that produces it first (e.g. dare run examples/quickstart.yaml)")
    assert run_first_hint("runs/some-run/model") == " or run the spec whose output.dir is 'runs/some-run' first"
    assert run_first_hint("./typo-dir") == ""


def test_set_typo_names_the_override():
    from dare.errors import SpecError
    from dare.runspec import load_spec

    from pathlib import Path

    with pytest.raises(SpecError) as exc:
        load_spec(Path(__file__).resolve().parents[1] / "examples/quickstart.yaml", ["train.max_stepz=3"], check=False)
    assert "train.max_stepz: unknown key" in str(exc.value)
    assert str(exc.value).endswith("(set by --set train.max_stepz=3)")


def test_missing_spec_file_has_no_root_prefix(tmp_path):
    from dare.errors import SpecError
    from dare.runspec import load_spec

    with pytest.raises(SpecError) as exc:
        load_spec(tmp_path / "nonexist.yaml")
    assert str(exc.value) == f"invalid run spec: spec file {str(tmp_path / 'nonexist.yaml')!r} does not exist"


def test_semantic_problem_of_a_set_value_names_the_override(tmp_path):
    from pathlib import Path

    from dare.errors import SpecError
    from dare.run import Run

    spec = Path(__file__).resolve().parents[1] / "examples/quickstart-rl.yaml"
    with pytest.raises(SpecError) as exc:
        Run.from_file(str(spec), [f"model.path={tmp_path}/gone/model", f"output.dir={tmp_path}/out"])
    assert f"(set by --set model.path={tmp_path}/gone/model)" in str(exc.value)
    assert f"or run the spec whose output.dir is '{tmp_path}/gone' first" in str(exc.value)
