"""Command-line overrides of a spec: `--unset KEY` removes a key (or list item) after every `--set`."""

from __future__ import annotations

import shutil

import pytest
import yaml

from dare.cli import main
from dare.errors import SpecError
from dare.runspec.overrides import read_spec_file

ROOT = __import__("pathlib").Path(__file__).resolve().parents[1]


def test_unset_removes_keys_and_list_items_after_every_set(tmp_path):
    f = tmp_path / "s.yaml"
    f.write_text(yaml.safe_dump({"algorithm": {"name": "tracerl", "params": {"group_size": 8, "shrink": 2}},
                                 "eval": {"benchmarks": ["sudoku", "gsm8k"]}}))
    raw = read_spec_file(f, ["algorithm.name=d1", "algorithm.params.shrink=4"],
                         ["algorithm.params.shrink", "eval.benchmarks[0]"])
    assert raw == {"algorithm": {"name": "d1", "params": {"group_size": 8}}, "eval": {"benchmarks": ["gsm8k"]}}
    with pytest.raises(SpecError) as err:
        read_spec_file(f, [], ["algorithm.params.shrnk"])
    assert err.value.problems == [("--unset algorithm.params.shrnk", "algorithm.params has no 'shrnk' to remove (it has "
                                                                     "group_size, shrink); nothing was changed")]
    with pytest.raises(SpecError, match=r"eval.benchmarks has no '2' to remove \(it has 2 item\(s\)\)"):
        read_spec_file(f, [], ["eval.benchmarks.2"])


def test_switching_tracerl_to_d1_on_the_command_line(tmp_path, tiny_llada_dir, capsys):
    spec = tmp_path / "rl.yaml"
    shutil.copy(ROOT / "examples" / "quickstart-rl.yaml", spec)
    args = ["validate", str(spec), "--set", f"model.path={tiny_llada_dir}", "--set", "algorithm.name=d1"]
    with pytest.raises(SystemExit) as exit_:
        main(args)
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert "algorithm.params.shrink: unknown key" in err and "(or remove it on the command line: --unset algorithm.params.shrink)" in err
    tracerl_only = [a for k in ("shrink", "transition_grouping", "normaliser") for a in ("--unset", f"algorithm.params.{k}")]
    main(args + tracerl_only)  # the quickstart states TraceRL's own settings: each is removed
    assert capsys.readouterr().out == f"{spec}: valid\n"
    # a removed key the spec needs is named as removed on the command line, not looked for in the file
    with pytest.raises(SystemExit):
        main(args + tracerl_only + ["--unset", "output.dir"])
    assert "(removed by --unset output.dir)" in capsys.readouterr().err
