"""Every repository path and document section that the code and the docs cite exists.

The checker walks every ``.py`` and ``.md`` file under ``dare/``, ``plugins/``, ``docs/``,
``benchmarks/``, ``examples/`` and ``tests/`` plus ``README.md`` and reports:

* a cited repository path (``docs/...``, ``dare/...``, ``plugins/...``, ``benchmarks/...``,
  ``examples/...``, ``tests/...``, ``templates/...``, ``schemas/...``) that does not exist. Paths are
  resolved from the repository root; inside a plugin distribution (``plugins/<dist>/``) they may also
  be relative to that distribution. ``*`` globs must match something and ``{a,b}`` alternatives are
  expanded; a ``{placeholder}`` without a comma (an f-string or template field) is skipped;
* a section ``§N`` / ``§N.M`` cited right after a Markdown document (``docs/algorithms.md §3.3,
  §3.7``, ``... §9.3-9.4``, ``... §3.6/§4.4``) whose document does not exist or has no heading
  numbered ``N`` / ``N.M``;
* ``algorithms.md`` or ``model-families.md`` cited without the ``docs/`` prefix (the originals they
  were written from are not in the repository). A Markdown link target in a ``.md`` file resolves
  relative to that file, as GitHub renders it.
"""

from __future__ import annotations

import itertools
import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SCAN_DIRS = ("dare", "plugins", "docs", "benchmarks", "examples", "tests")
SCAN_FILES = ("README.md",)
SKIP_DIRS = {".venv", ".git", "__pycache__", "build", "dist", "node_modules", ".pytest_cache"}
# This file holds deliberately broken citations in its unit tests.
SELF = Path(__file__).resolve()

_ROOTS = r"(?:docs|dare|plugins|benchmarks|examples|tests|templates|schemas)"
#: A repository path: a top-level folder, then path characters, ending on a name character, ``/``,
#: ``*`` or ``}`` (so trailing punctuation is not part of it). Not preceded by a path character, so
#: ``verl/trainer/dpo/...`` or ``src/dare/...`` do not match.
PATH_RE = re.compile(rf"(?<![\w./-])({_ROOTS}/[\w.*{{}},/-]*[\w/*}}])")
_SEC = r"\d+(?:\.\d+)*"
#: A Markdown document followed by its sections: ``X.md §a``, then ``, §b`` / ``and §c`` / ``or §c``
#: (``§`` required) or ``/b`` / ``-b`` / ``–b`` (ranges and alternatives, ``§`` optional).
DOC_SECTIONS_RE = re.compile(
    rf"(?<![\w/.-])(?P<doc>(?:[\w.-]+/)*[\w.-]+\.md)`?\s*"
    rf"(?P<refs>§\s?{_SEC}(?:(?:\s*(?:,|and|or)\s*§\s?{_SEC})|(?:\s*[/–-]\s*§?\s?{_SEC}))*)"
)
SECTION_RE = re.compile(rf"§?\s?({_SEC})")
#: The two reference documents named without their folder.
BARE_DOC_RE = re.compile(r"(?<![\w/.-])(algorithms|model-families)\.md")
MD_LINK_TARGET_RE = re.compile(r"\]\(([^)\s#]+)")
HEADING_RE = re.compile(rf"^#{{1,6}}\s+({_SEC})\.?\s", re.MULTILINE)


def scanned_files(repo: Path = REPO) -> list[Path]:
    """The ``.py`` and ``.md`` files the checker reads (sorted), build and cache folders skipped."""
    out = [repo / f for f in SCAN_FILES if (repo / f).is_file()]
    for top in SCAN_DIRS:
        for p in (repo / top).rglob("*"):
            rel = p.relative_to(repo)
            if p.suffix not in (".py", ".md") or not p.is_file():
                continue
            if any(part in SKIP_DIRS or part.endswith(".egg-info") for part in rel.parts):
                continue
            if p.resolve() == SELF:
                continue
            out.append(p)
    return sorted(out)


def _expand_braces(path: str) -> list[str] | None:
    """``a/{b,c}.py`` -> ``[a/b.py, a/c.py]``; None for a placeholder (``{name}``, unbalanced)."""
    parts = re.split(r"(\{[^{}]*\})", path)
    if any(c in part for part in parts[::2] for c in "{}"):
        return None  # unbalanced or nested braces: a template, not a path
    choices = []
    for i, part in enumerate(parts):
        if i % 2:
            if "," not in part:
                return None
            choices.append([c.strip() for c in part[1:-1].split(",")])
        else:
            choices.append([part])
    return ["".join(c) for c in itertools.product(*choices)]


def _bases(source: Path, repo: Path) -> list[Path]:
    """Folders a cited path may be relative to: the repository root, and a plugin's own root."""
    bases = [repo]
    try:
        rel = source.resolve().relative_to(repo.resolve())
    except ValueError:
        return bases
    if len(rel.parts) > 2 and rel.parts[0] == "plugins":
        bases.append(repo / "plugins" / rel.parts[1])
    return bases


def _exists(path: str, bases: list[Path]) -> bool:
    clean = path.rstrip("/")
    for base in bases:
        if any(c in clean for c in "*?["):
            if next(iter(base.glob(clean)), None) is not None:
                return True
        elif (base / clean).exists():
            return True
    return False


def _sections(doc: Path, cache: dict[Path, set[str]]) -> set[str]:
    if doc not in cache:
        cache[doc] = set(HEADING_RE.findall(doc.read_text(encoding="utf-8")))
    return cache[doc]


def check_text(text: str, source: Path, repo: Path = REPO, cache: dict[Path, set[str]] | None = None) -> list[str]:
    """Problems with the citations in ``text`` (the content of ``source``), as ``file:line: message``."""
    cache = {} if cache is None else cache
    bases = _bases(source, repo)
    try:
        where = source.resolve().relative_to(repo.resolve()).as_posix()
    except ValueError:
        where = str(source)
    problems: list[str] = []

    def report(pos: int, message: str) -> None:
        problems.append(f"{where}:{text.count(chr(10), 0, pos) + 1}: {message}")

    link_spans = []
    if source.suffix == ".md":
        for m in MD_LINK_TARGET_RE.finditer(text):
            link_spans.append(m.span(1))
            target = m.group(1)
            if "://" in target or target.startswith("mailto:"):
                continue
            if not (source.parent / target).exists() and not _exists(target, bases):
                report(m.start(1), f"link target '{target}' does not exist")

    def in_link(pos: int) -> bool:
        return any(a <= pos < b for a, b in link_spans)

    for m in PATH_RE.finditer(text):
        if in_link(m.start(1)):
            continue
        expanded = _expand_braces(m.group(1))
        for path in expanded or []:
            if not _exists(path, bases):
                report(m.start(1), f"cited path '{path}' does not exist")

    for m in BARE_DOC_RE.finditer(text):
        if in_link(m.start()):
            continue
        report(m.start(), f"'{m.group(0)}' cited without its folder: write 'docs/{m.group(0)}'")

    for m in DOC_SECTIONS_RE.finditer(text):
        doc_name = m.group("doc")
        if BARE_DOC_RE.fullmatch(doc_name):
            continue  # reported above
        # A path with a folder is a repository path; a bare name may also be a sibling file.
        where_to_look = bases if "/" in doc_name else [source.parent, *bases]
        doc = next((b / doc_name for b in where_to_look if (b / doc_name).is_file()), None)
        if doc is None:
            report(m.start(), f"'{doc_name}' (cited with {m.group('refs').strip()}) does not exist")
            continue
        have = _sections(doc, cache)
        for sec in SECTION_RE.findall(m.group("refs")):
            if sec not in have:
                report(m.start(), f"{doc_name} has no section §{sec} (headings: {', '.join(sorted(have)) or 'none'})")
    return problems


def check_repository(repo: Path = REPO) -> list[str]:
    cache: dict[Path, set[str]] = {}
    problems: list[str] = []
    for f in scanned_files(repo):
        problems += check_text(f.read_text(encoding="utf-8"), f, repo, cache)
    return problems


# --- the repository ------------------------------------------------------------------------------


def test_every_cited_path_and_section_exists():
    problems = check_repository()
    assert not problems, "broken citations:\n" + "\n".join(problems)


def test_the_scan_covers_the_citing_files():
    files = {f.relative_to(REPO).as_posix() for f in scanned_files()}
    assert "README.md" in files
    assert "dare/components/__init__.py" in files
    assert "docs/architecture.md" in files
    assert "plugins/dare-plugin-grpo/src/dare_grpo/objectives/d1.py" in files
    assert not any(".venv" in f or ".egg-info" in f for f in files)


def test_reference_documents_have_the_cited_numbering():
    """The two documents keep the numbering of the notes they were written from."""
    cache: dict[Path, set[str]] = {}
    alg = _sections(REPO / "docs/algorithms.md", cache)
    fam = _sections(REPO / "docs/model-families.md", cache)
    assert {str(n) for n in range(10)} <= alg and {str(n) for n in range(10)} <= fam
    assert {f"3.{i}" for i in range(1, 13)} <= alg
    assert {f"9.{i}" for i in range(1, 9)} <= alg
    assert {"2.5", "4.1", "4.4", "5.6", "8.3"} <= alg
    assert {f"5.{i}" for i in range(1, 9)} <= fam and {f"3.{i}" for i in range(1, 8)} <= fam


def _heading(doc: Path, sec: str) -> str:
    m = re.search(rf"^#{{1,6}}\s+{re.escape(sec)}\.?\s+(.*)$", doc.read_text(encoding="utf-8"), re.MULTILINE)
    assert m, f"{doc.name} has no section {sec}"
    return m.group(1)


def test_each_rl_objective_cites_its_own_algorithm_section():
    """A topic check: the §3.x an objective's module docstring cites is the section about it."""
    doc = REPO / "docs/algorithms.md"
    root = REPO / "plugins/dare-plugin-grpo/src/dare_grpo/objectives"
    objectives = sorted(root.glob("*.py")) + sorted(root.glob("*/objective.py"))  # modules, then packages
    checked = 0
    for f in objectives:
        text = f.read_text(encoding="utf-8")
        names = re.findall(r'^class \w+\((?:OnlineRLObjective|\w+)\):\n(?:\s+""".*?"""\n)?\n?\s+name\s*=\s*"([^"]+)"',
                           text, re.MULTILINE | re.DOTALL)
        names = [n for n in names if "elbo" not in n]  # an objective module may also define an estimator
        cited = re.search(r"docs/algorithms\.md §(3\.\d+)", text)
        if len(names) != 1 or cited is None:
            continue
        heading = re.sub(r"[^a-z0-9]", "", _heading(doc, cited.group(1)).lower())
        assert re.sub(r"[^a-z0-9]", "", names[0]) in heading, (f.name, cited.group(1), heading)
        checked += 1
    assert checked >= 11


# --- the checker itself, on synthetic text -------------------------------------------------------

SRC = REPO / "dare" / "example.py"
PLUGIN_SRC = REPO / "plugins" / "dare-plugin-grpo" / "src" / "dare_grpo" / "example.py"


def _problems(text: str, source: Path = SRC) -> list[str]:
    return check_text(text, source)


def test_checker_accepts_correct_citations():
    text = (
        '"""Stratified counts (docs/algorithms.md §3.3, §3.7); d1 (docs/algorithms.md §3.1).\n'
        "Shift (docs/model-families.md §2.3 and §7); presets of docs/model-families.md §3.6/§4.4;\n"
        "estimators (docs/algorithms.md §3, §9.3-9.4); see docs/architecture.md, dare/io.py,\n"
        "plugins/dare-plugin-*/, plugins/dare-plugin-{llada,dream}/, dare/templates/plugin, `dare/diffusion/`.\n"
        'An f-string path f"tests/test_{name}.py" is a template, not a citation."""\n'
    )
    assert _problems(text) == []


def test_checker_reports_a_missing_section():
    (problem,) = _problems("see docs/algorithms.md §3.99 for the loss")
    assert "no section §3.99" in problem and problem.startswith("dare/example.py:1:")


def test_checker_reports_each_wrong_section_of_a_list_and_a_range():
    problems = _problems("x\n(docs/algorithms.md §3.1, §12, §9.3-9.9; docs/model-families.md §2.2/2.9)")
    assert len(problems) == 3
    assert all(p.startswith("dare/example.py:2:") for p in problems)
    assert {re.search(r"§(\S+) ", p).group(1) for p in problems} == {"12", "9.9", "2.9"}


def test_checker_reports_a_section_that_exists_in_the_other_document():
    # model-families.md has §5.7 (LLaDA2 tiny config); algorithms.md does not.
    assert _problems("docs/model-families.md §5.7") == []
    (problem,) = _problems("docs/algorithms.md §5.7")
    assert "docs/algorithms.md has no section §5.7" in problem


def test_checker_reports_bare_and_misplaced_reference_documents():
    (bare,) = _problems("(algorithms.md §3.1)")
    assert "write 'docs/algorithms.md'" in bare
    (bare_no_section,) = _problems("the notes in model-families.md")
    assert "write 'docs/model-families.md'" in bare_no_section
    (elsewhere,) = _problems("(reference/model-families.md §5.6)")
    assert "'reference/model-families.md'" in elsewhere and "does not exist" in elsewhere


def test_checker_reports_missing_paths():
    problems = _problems("see docs/design.md and dare/no_such_module.py, plugins/dare-plugin-nope-*/")
    assert [p.split(": ", 1)[1] for p in problems] == [
        "cited path 'docs/design.md' does not exist",
        "cited path 'dare/no_such_module.py' does not exist",
        "cited path 'plugins/dare-plugin-nope-*/' does not exist",
    ]


def test_checker_resolves_plugin_relative_paths_only_inside_that_plugin():
    text = "smoke tests are in tests/test_grpo_smoke_extra.py"
    assert _problems(text, PLUGIN_SRC) == []
    (problem,) = _problems(text, SRC)
    assert "tests/test_grpo_smoke_extra.py" in problem


def test_checker_resolves_markdown_links_relative_to_the_file():
    doc = REPO / "docs" / "example.md"
    assert check_text("[notes](algorithms.md) and [arch](architecture.md)", doc) == []
    (problem,) = check_text("[notes](missing.md)", doc)
    assert "link target 'missing.md' does not exist" in problem


#: An official value's source: ``owner/repo@commit:file`` (7+ hex digits) or a paper section (``arXiv N §S``).
OFFICIAL_SOURCE_RE = re.compile(r"[\w.-]+/[\w.-]+@[0-9a-f]{7,40}:\S+|arXiv \d{4}\.\d{4,5} §\d")


def official_rows(text: str) -> list[tuple[int, str]]:
    """``(line number, row)`` of every table row in docs/algorithms.md §10 whose official column is given."""
    start = text.index("\n## 10.")
    rows = []
    for n, line in enumerate(text[start:].splitlines(), text[:start].count("\n") + 2):
        if line.startswith("## ") and not line.startswith("## 10."):
            break
        cells = [c.strip() for c in line.replace("\\|", "/").strip().strip("|").split("|")]
        if line.startswith("|") and len(cells) >= 3 and cells[0] not in ("param",) and not set(cells[0]) <= {"-"}:
            if cells[1] not in ("–", "-", ""):
                rows.append((n, line))
    return rows


def test_every_official_value_cites_code_or_a_paper_section():
    text = (REPO / "docs" / "algorithms.md").read_text(encoding="utf-8")
    rows = official_rows(text)
    assert len(rows) >= 25  # d1, coupled-GRPO and SPG tables
    missing = [f"docs/algorithms.md:{n}: {row}" for n, row in rows if not OFFICIAL_SOURCE_RE.search(row)]
    assert not missing, "official values without a citation:\n" + "\n".join(missing)


def test_official_row_check_rejects_an_uncited_value():
    text = "# x\n\n## 10. T\n\n| param | official | source |\n|---|---|---|\n| a | 1 | the repo |\n| b | 2 | o/r@abcdef1:f.py:3 |\n"
    rows = official_rows(text)
    assert [bool(OFFICIAL_SOURCE_RE.search(r)) for _, r in rows] == [False, True]


def test_every_objective_official_table_entry_is_in_the_docs():
    """Each ``OfficialSetting`` of an objective's ``Params`` appears in docs/algorithms.md §10 with its source."""
    from dare_grpo.objectives.bgpo import BGPOParams
    from dare_grpo.objectives.cj_grpo import CJGRPOParams
    from dare_grpo.objectives.coupled_grpo import CoupledGRPOParams
    from dare_grpo.objectives.d1 import D1Params
    from dare_grpo.objectives.dtreerpo import DTreeRPOParams
    from dare_grpo.objectives.dipo import DiPOParams
    from dare_grpo.objectives.ebpo import EBPOParams
    from dare_grpo.objectives.espo import ESPOParams
    from dare_grpo.objectives.gdpo import GDPOParams
    from dare_grpo.objectives.justgrpo import JustGRPOParams
    from dare_grpo.objectives.lightningrl import LightningRLParams
    from dare_grpo.objectives.mdpo import MDPOParams
    from dare_grpo.objectives.spg import SPGParams
    from dare_grpo.objectives.tracerl import TraceRLParams
    from dare_grpo.objectives.tracerl.objective import ValueModelParams

    text = (REPO / "docs" / "algorithms.md").read_text(encoding="utf-8")
    section = text[text.index("\n## 10."):]
    for cls in (D1Params, CoupledGRPOParams, SPGParams, JustGRPOParams, CJGRPOParams, DTreeRPOParams, ESPOParams,
                TraceRLParams, ValueModelParams, MDPOParams, BGPOParams, EBPOParams, GDPOParams, DiPOParams,
                LightningRLParams):
        for s in cls.official:
            repo, rest = s.source.split("@", 1)
            commit = rest.split(":", 1)[0]
            assert f"{repo}@{commit[:7]}" in section, (cls.__name__, s.param)
            name = f"value_model.{s.param}" if cls is ValueModelParams else s.param  # a nested settings object
            assert any(f"{sep} {name}" in section for sep in ("|", "/")), (cls.__name__, s.param)
