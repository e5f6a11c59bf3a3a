"""The notebooks: reviewable as committed, executed once per test run, and their conclusions checked.

Each notebook is executed once, by papermill with the ``ci`` profile, the first time a test asks for
it (``executed``). Notebook 00 is executed by the JupyterLab browser test when a browser is
installed (it saves the notebook into ``$NVTUTORIAL_EXECUTED_DIR``); then it is read from there
instead of being run again. The executed copies are kept in that folder for inspection.
"""

from __future__ import annotations

import ast
import os
import re
from pathlib import Path

import nbformat
import pytest

from nvtutorial import course
from nvtutorial.report import claims
from nvtutorial.report.verdict import verdicts_in_notebook

NOTEBOOKS = sorted((Path(__file__).resolve().parent.parent / "notebooks").glob("*.ipynb"))
ABSOLUTE_PATH = re.compile(r"(?<![\w.])(/(home|Users|root|work|tmp|mnt)/|[A-Z]:\\\\)")
DISTRIBUTED_CALL = re.compile(r"\bdist\.\w+\(|torch\.distributed\.\w+\(|DistributedDataParallel\(|\bDDP\(|fully_shard\(")


def executed(name: str) -> nbformat.NotebookNode:
    """Notebook ``name`` as executed in this test run (executed now if nothing executed it yet)."""
    folder = Path(os.environ["NVTUTORIAL_EXECUTED_DIR"])
    target = folder / name
    if not target.exists():
        summary = course.run_course(out=folder, only=name, profile="ci",
                                    notebooks_dir=NOTEBOOKS[0].parent)
        (outcome,) = [n for n in summary.notebooks if n.name == name]
        assert outcome.passed, outcome.error
    return nbformat.read(target, as_version=4)


def test_there_are_notebooks():
    assert NOTEBOOKS and NOTEBOOKS[0].name.startswith("00_")


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_is_clean_and_follows_the_skeleton(path):
    nb = nbformat.read(path, as_version=4)
    nbformat.validate(nb)
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert all(not c.outputs and c.execution_count is None for c in code), "commit notebooks without outputs"
    assert nb.cells[0].cell_type == "markdown" and nb.cells[0].source.startswith("# "), "first cell: the title"
    params = [c for c in code if "parameters" in c.metadata.get("tags", [])]
    assert len(params) == 1, "exactly one cell tagged `parameters`"
    tree = ast.parse(params[0].source)
    assert all(isinstance(node, ast.Assign) for node in tree.body), "the parameters cell only assigns"
    for node in tree.body:
        ast.literal_eval(node.value)  # literals only: papermill cannot update derived values
    assert "profile" in {t.id for node in tree.body for t in node.targets}
    headings = [line for c in nb.cells if c.cell_type == "markdown" for line in c.source.splitlines()]
    assert "## Summary" in headings and "## Exercises" in headings
    text = "\n".join(c.source for c in nb.cells)
    assert not ABSOLUTE_PATH.search(text), f"absolute path in {path.name}: {ABSOLUTE_PATH.search(text).group(0)}"
    assert "plt.show()" not in text


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_no_distributed_code_is_copied_into_markdown(path):
    """Code the course teaches is shown from the file that runs (teach.show), never copied into markdown."""
    nb = nbformat.read(path, as_version=4)
    for i, cell in enumerate(nb.cells):
        if cell.cell_type != "markdown":
            continue
        for block in re.findall(r"```(?:python|py)?\n(.*?)```", cell.source, re.S):
            calls = DISTRIBUTED_CALL.findall(block)
            assert len(block.splitlines()) <= 3 or not calls, (
                f"{path.name}, markdown cell {i}: {len(block.splitlines())} lines of distributed code in markdown "
                f"({', '.join(calls[:3])}); show it from its file with nvtutorial.teach.show")


@pytest.mark.notebooks
@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_runs_and_its_checks_hold(path):
    nb = executed(path.name)
    errors = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs if o.output_type == "error"]
    assert not errors, f"{path.name}: {errors[0].get('ename')}: {errors[0].get('evalue')}"
    verdicts = verdicts_in_notebook(nb)
    failed = [v for v in verdicts if v.status == "fail"]
    assert not failed, f"{path.name}: a check failed: {failed[0]}"
    # Claims that the CPU settles reach the registered verdict when the notebook runs on the CPU.
    for v in verdicts:
        if v.key in claims.BY_ID and claims.BY_ID[v.key].evidence in ("CPU run", "primary source", "vendor data"):
            assert v.status == claims.BY_ID[v.key].status, f"{path.name}: {v} (registered: {claims.BY_ID[v.key].status})"


@pytest.mark.notebooks
@pytest.mark.parametrize("path", [p for p in NOTEBOOKS if p.name[:2] in {"03", "04", "05", "06", "07", "08", "09"}],
                         ids=lambda p: p.stem)
def test_lesson_runs_distributed_code_from_a_cell(path):
    """Issue 10: every lesson from 03 on runs at least one cell that calls torch.distributed or DDP directly
    (through %%ranks), or runs a lesson file that it shows (nvtutorial.run on a path under lessons/)."""
    nb = executed(path.name)
    code = [c.source for c in nb.cells if c.cell_type == "code"]
    ranks_cells = [s for s in code if s.lstrip().startswith("%%ranks") and DISTRIBUTED_CALL.search(s)]
    shown_and_run = [s for s in code if re.search(r"nvtutorial\.run\(\s*[\w.]*(lesson|LESSON|path|PATH|script)", s)
                     or re.search(r"\.run\(\s*[\"']nvtutorial/chapters/ch\d\d_\w+/lessons/", s)]
    assert ranks_cells or shown_and_run, f"{path.name} runs no distributed code the learner can read"
