"""The families x online-RL objectives table (``dare.plugins.matrix``, ``dare plugins --matrix``): regenerated from the
registry and compared with docs/algorithms.md §11, and checked on pairs whose status is known by construction."""

from __future__ import annotations

from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
BEGIN, END = "<!-- matrix:begin (dare plugins --matrix) -->\n", "<!-- matrix:end -->"


@pytest.fixture(scope="module")
def matrix():
    from dare.plugins.matrix import objective_family_matrix
    from dare.plugins.manager import first_party, get_registry

    return objective_family_matrix(get_registry().restricted(first_party()))  # a user's own plugins add no row


def test_the_docs_table_is_the_generated_one(matrix):
    from dare.plugins.matrix import matrix_markdown

    text = (REPO / "docs/algorithms.md").read_text(encoding="utf-8")
    assert BEGIN in text and END in text, "docs/algorithms.md §11 lost its generated-table markers"
    documented = text[text.index(BEGIN) + len(BEGIN):text.index(END)]
    assert documented == matrix_markdown(matrix=matrix), ("docs/algorithms.md §11 is stale: regenerate it with "
                                             "`dare plugins --matrix` and paste it between the markers")


def test_every_family_and_online_rl_objective_has_a_cell(matrix):
    families, objectives, cells = matrix
    assert {"llada", "dream", "sdar", "llada2"} <= set(families)
    assert {"d1", "tracerl", "gdpo", "dipo", "lightningrl", "justgrpo"} <= set(objectives)
    assert "sft" not in objectives and "dpo" not in objectives
    assert set(cells) == {(f, o) for f in families for o in objectives}


def test_known_statuses(matrix):
    _, _, cells = matrix
    # the releases' own families
    assert cells[("llada", "d1")].status == "official"
    assert cells[("sdar", "dipo")].status == "official"
    assert cells[("sdar", "lightningrl")].status == "official"
    assert cells[("llada", "gdpo")].status == "official"
    # runs on a first-party family the release did not train
    assert cells[("dream", "gdpo")].status == "supported"
    # block-only objectives refuse full-attention families, naming the reason
    for fam in ("llada", "dream"):
        for obj in ("dipo", "lightningrl"):
            c = cells[(fam, obj)]
            assert c.status == "refused" and "block-diffusion" in c.reason, c
    # JustGRPO needs left-to-right decoding: the default sampler is rejected, not the pair
    assert cells[("llada", "justgrpo")].status == "sampler"
    # a uniform-noise family (no mask token): d1 and TraceRL run on it (docs/algorithms.md §3.16); every other RL
    # objective is refused at validation, naming the family
    _, objectives, _ = matrix
    for obj in ("d1", "tracerl"):
        assert cells[("diffusiongemma", obj)].status == "supported"
    for obj in set(objectives) - {"d1", "tracerl"}:
        c = cells[("diffusiongemma", obj)]
        assert c.status == "refused" and "diffusiongemma" in c.reason, c


def test_the_cli_prints_the_table(monkeypatch):
    from click.testing import CliRunner

    import dare.plugins.matrix
    from dare.cli import cli

    monkeypatch.setattr(dare.plugins.matrix, "matrix_markdown", lambda registry=None, matrix=None: "| objective |\n")
    result = CliRunner().invoke(cli, ["plugins", "--matrix"])
    assert result.exit_code == 0, result.output
    assert result.output == "| objective |\n"
