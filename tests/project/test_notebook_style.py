"""A notebook reaches its chapter's files only through the chapter (issue 30, F4): ``ch.report.knob_frame(...)``,
never a second name for ``ch.report`` (``report, plots = ch.report, ch.plots``) nor an import of a chapter's file
(``from nvtutorial.chapters.ch03_ddp_training import report``). One name per file, the same in every notebook, so
``report`` cannot mean four different modules in four notebooks. A chapter other than the notebook's own is imported
the same way (``from nvtutorial.chapters import ch01_hardware as ch01``, then ``ch01.lab``).

The lesson code a learner reads is imported by name and stays so
(``from nvtutorial.chapters.ch06_pitfalls.lessons import validation as lesson``): it is the taught code, not the
chapter's machinery.

Every code cell is read with ``ast`` (IPython's magic lines left out). ``NVTUTORIAL_STYLE_NOTEBOOKS`` names another
folder of notebooks to check (``/work/main/notebooks``, say); the notebooks of this checkout otherwise.
"""

from __future__ import annotations

import ast
import os
from collections.abc import Iterable
from pathlib import Path

import nbformat
import pytest

from nvtutorial.chapters import HERE as CHAPTERS
from tests.helpers.paths import ROOT

FOLDER = Path(os.environ.get("NVTUTORIAL_STYLE_NOTEBOOKS") or ROOT / "notebooks")
NOTEBOOKS = sorted(FOLDER.glob("*.ipynb"))
PACKAGE = "nvtutorial.chapters"
LESSONS = "lessons"
"""A chapter's lesson code (``chNN_topic/lessons/``): imported by name, as the learner reads it."""


def parse(source: str) -> ast.Module:
    """A code cell's Python: its IPython magic lines (``%load_ext``, ``%%ranks``, ``!ls``) blanked, so that the line
    numbers stay the cell's own."""
    lines = ["" if line.lstrip().startswith(("%", "!")) else line for line in source.splitlines()]
    return ast.parse("\n".join(lines))


def is_chapter(name: str) -> bool:
    """``ch03_ddp_training``: a chapter's folder."""
    return (CHAPTERS / name / "__init__.py").exists() and name[:2] == "ch" and name[2:4].isdigit()


def is_module(folder: Path, name: str) -> bool:
    """``name`` is a file (module or package) of the chapter folder ``folder``."""
    return (folder / f"{name}.py").exists() or (folder / name / "__init__.py").exists()


def chapters_bound(trees: Iterable[ast.Module]) -> dict[str, str]:
    """``local name -> chapter folder`` of every import of a chapter package in the cells
    (``from nvtutorial.chapters import ch06_pitfalls as ch``, ``import nvtutorial.chapters.ch06_pitfalls as ch``)."""
    bound: dict[str, str] = {}
    for tree in trees:
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module == PACKAGE and not node.level:
                bound |= {a.asname or a.name: a.name for a in node.names if is_chapter(a.name)}
            elif isinstance(node, ast.Import):
                for a in node.names:
                    parts = a.name.split(".")
                    if a.asname and len(parts) == 3 and a.name.startswith(f"{PACKAGE}.") and is_chapter(parts[2]):
                        bound[a.asname] = parts[2]
    return bound


def chapter_file(node: ast.expr, bound: dict[str, str]) -> str | None:
    """``ch.report`` (or ``ch.lessons.validation``), a chapter's file reached through its chapter: its dotted name;
    ``None`` for anything else (``ch.report.knob_frame``, a call, a number)."""
    attrs: list[str] = []
    while isinstance(node, ast.Attribute):
        attrs.insert(0, node.attr)
        node = node.value
    if not (attrs and isinstance(node, ast.Name) and node.id in bound):
        return None
    folder = CHAPTERS / bound[node.id]
    for attr in attrs:
        if not is_module(folder, attr):
            return None
        folder = folder / attr
    return ".".join([node.id, *attrs])


def values(node: ast.expr) -> list[ast.expr]:
    """The expressions an assignment's value binds: each element of a tuple or list (``a, b = ch.plots, ch.report``)
    and of a starred one, else the value itself."""
    if isinstance(node, ast.Tuple | ast.List):
        return [v for element in node.elts for v in values(element)]
    if isinstance(node, ast.Starred):
        return values(node.value)
    return [node]


def is_lessons(module: str) -> bool:
    """``nvtutorial.chapters.chNN_topic.lessons`` or below it."""
    parts = module.split(".")
    return len(parts) >= 4 and parts[3] == LESSONS


def cell_violations(tree: ast.Module, bound: dict[str, str]) -> list[str]:
    """What in one cell reaches a chapter's file other than through its chapter, each as ``line N: ...``."""
    out = []
    for node in ast.walk(tree):
        value = None
        if isinstance(node, ast.Assign | ast.AnnAssign | ast.AugAssign | ast.NamedExpr):
            value = node.value
        files = [name for v in values(value) if (name := chapter_file(v, bound))] if value is not None else []
        if files:
            assert isinstance(node, ast.stmt | ast.expr)  # an assignment: only those have a value
            out.append(
                f"line {node.lineno}: `{ast.unparse(node)}` re-aliases {', '.join(files)}: write those where used"
            )
        if isinstance(node, ast.ImportFrom) and node.module and not node.level:
            parts = node.module.split(".")
            if node.module.startswith(f"{PACKAGE}.") and len(parts) >= 3 and is_chapter(parts[2]):
                if is_lessons(node.module):
                    continue
                if len(parts) == 3 and all(a.name == LESSONS for a in node.names):
                    continue
                names = ", ".join(a.name for a in node.names)
                out.append(
                    f"line {node.lineno}: imports {names} from {node.module}: "
                    f"import the chapter (from {PACKAGE} import {parts[2]} as ...) and use its files through it"
                )
        elif isinstance(node, ast.Import):
            for a in node.names:
                parts = a.name.split(".")
                if a.name.startswith(f"{PACKAGE}.") and len(parts) >= 4 and is_chapter(parts[2]):
                    if not is_lessons(a.name):
                        out.append(
                            f"line {node.lineno}: imports {a.name}: "
                            f"import the chapter (from {PACKAGE} import {parts[2]} as ...) and use its files through it"
                        )
    return out


def violations(sources: list[str], names: list[str] | None = None) -> list[str]:
    """A notebook's code cells (in order, named by ``names``, else by their index) checked together: a chapter
    imported in one cell is the same chapter in every other."""
    trees = [parse(source) for source in sources]
    bound = chapters_bound(trees)
    names = names or [str(i) for i in range(len(trees))]
    return [f"cell {name} {v}" for name, tree in zip(names, trees) for v in cell_violations(tree, bound)]


def notebook_violations(path: Path) -> list[str]:
    """``violations`` of a notebook file, each cell named by its id."""
    cells = [c for c in nbformat.read(path, as_version=4).cells if c.cell_type == "code"]
    return [f"{path.name} {v}" for v in violations([c.source for c in cells], [c.id for c in cells])]


# --------------------------------------------------------------------------- the notebooks


def test_the_notebooks_are_found():
    assert len(NOTEBOOKS) >= 12, f"no notebooks in {FOLDER}"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.name for p in NOTEBOOKS])
def test_a_notebook_reaches_its_chapters_files_only_through_the_chapter(path):
    found = notebook_violations(path)
    assert found == [], "\n".join(["chapter files re-aliased or imported one by one:", *found])


# --------------------------------------------------------------------------- the check itself, both sides

SETUP = "from nvtutorial.chapters import ch06_pitfalls as ch  # this notebook's chapter\n"


@pytest.mark.parametrize(
    "cell",
    [
        "report = ch.report",
        "traps, pp, rp, rm = ch.lab, ch.plots, ch.report, ch.report_measured",
        "traps, (pp, rp) = ch.lab, (ch.plots, ch.report)",
        "plots: object = ch.plots",
        "if (r := ch.report_measured):\n    pass",
        "lesson = ch.lessons.validation",
        "from nvtutorial.chapters.ch06_pitfalls import report",
        "from nvtutorial.chapters.ch06_pitfalls import report as rp, lessons",
        "from nvtutorial.chapters.ch03_ddp_training import report as treport",
        "from nvtutorial.chapters.ch06_pitfalls.report import knob_frame",
        "import nvtutorial.chapters.ch06_pitfalls.report as rp",
        "import nvtutorial.chapters.ch06_pitfalls.report",
        "def f():\n    rp = ch.report\n    return rp",
    ],
)
def test_a_re_alias_or_a_files_import_is_refused(cell):
    found = violations([SETUP, "x = 1\n" + cell])
    assert len(found) == 1 and found[0].startswith("cell 1 line "), found


def test_another_chapters_file_re_aliased_is_refused():
    cells = [SETUP + "from nvtutorial.chapters import ch01_hardware as ch01\n", "bw_lab = ch01.lab\n"]
    assert violations(cells) == ["cell 1 line 1: `bw_lab = ch01.lab` re-aliases ch01.lab: write those where used"]


def test_the_refusal_says_what_to_write():
    assert violations([SETUP, "%load_ext nvtutorial.teach.ranks\ntplots, report = ch.plots, ch.report\n"]) == [
        "cell 1 line 2: `tplots, report = (ch.plots, ch.report)` re-aliases ch.plots, ch.report: write those where used"
    ]


@pytest.mark.parametrize(
    "cell",
    [
        "ch.report.knob_frame(runs)",
        "frame = ch.report.knob_frame(runs)",
        "knob_frame = ch.report.knob_frame",  # a function, not a file: a name of its own is fine
        "n = len(ch.FILES)",
        "display(ch.plots.figure(ch.report.rows(results)))",
        "from nvtutorial.chapters.ch06_pitfalls.lessons import validation as lesson",
        "%%ranks\nfrom nvtutorial.chapters.ch06_pitfalls.lessons import collectives as lesson\nlesson.main()",
        "from nvtutorial.chapters.ch07_collectives.lessons.collectives import ring_all_reduce as course_ring",
        "import nvtutorial.chapters.ch06_pitfalls.lessons.validation as lesson",
        "from nvtutorial.chapters.ch06_pitfalls import lessons",
        "from nvtutorial.chapters import ch01_hardware as ch01\nch01.lab.run()",
        "from nvtutorial.teach import check\nfrom nvtutorial import course",
        "report = other.report",  # not a chapter
        "pp = ch.report_measured.PARTS",  # an attribute of a file, not a file
    ],
)
def test_the_chapter_used_through_ch_and_a_lesson_import_are_accepted(cell):
    assert violations([SETUP, cell]) == []


def test_the_notebooks_own_chapter_import_is_accepted():
    assert violations([SETUP + "%load_ext nvtutorial.teach.ranks\n"]) == []
    assert chapters_bound([parse(SETUP)]) == {"ch": "ch06_pitfalls"}


def test_a_notebook_file_is_read_and_its_cells_named_by_id(tmp_path):
    nb = nbformat.v4.new_notebook()
    nb.cells = [
        nbformat.v4.new_markdown_cell("`report.knob_frame` in prose is not code"),
        nbformat.v4.new_code_cell(SETUP + "rp = ch.report\n", id="setup"),
        nbformat.v4.new_code_cell("ch.report.knob_frame(1)\n", id="fine"),
    ]
    path = tmp_path / "99_bad.ipynb"
    nbformat.write(nb, path)
    assert notebook_violations(path) == [
        "99_bad.ipynb cell setup line 2: `rp = ch.report` re-aliases ch.report: write those where used"
    ]
