"""The notebooks: reviewable as committed, and executed by papermill with the CI profile.

``pytest --nbval-lax notebooks/`` (part of ``make test``) executes them a second time, with their
own default parameters, as a learner would.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import nbformat
import pytest

from nvtutorial import course

NOTEBOOKS = sorted((Path(__file__).resolve().parent.parent / "notebooks").glob("*.ipynb"))
ABSOLUTE_PATH = re.compile(r"(?<![\w.])(/(home|Users|root|work|tmp|mnt)/|[A-Z]:\\\\)")


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


@pytest.mark.notebooks
@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_runs_with_the_ci_profile(path, tmp_path):
    summary = course.run_course(out=tmp_path, only=path.name, profile="ci", notebooks_dir=path.parent)
    (outcome,) = summary.notebooks
    assert outcome.passed, outcome.error
    executed = nbformat.read(tmp_path / path.name, as_version=4)
    errors = [o for c in executed.cells if c.cell_type == "code" for o in c.outputs if o.output_type == "error"]
    assert not errors
    assert (tmp_path / "summary.json").exists()
