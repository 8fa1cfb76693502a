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


def test_piped_console_is_wide():
    from dare.cli_help import wide_console

    assert wide_console().width == 200  # pytest's stdout is not a terminal


def test_train_help_says_in_training_eval_still_runs():
    out = CliRunner().invoke(cli, ["train", "--help"]).output
    assert "no evaluation" not in out
    assert "skips the before/after evaluations" in out and "train.eval_steps" in out
