"""The notebooks as executed in this test run (executed now if nothing executed them yet), for the tests of
tests/notebooks/."""

from __future__ import annotations

import os
from pathlib import Path

import nbformat

from nvtutorial import course
from tests.helpers.paths import ROOT

NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))


def executed(name: str) -> nbformat.NotebookNode:
    """Notebook ``name`` as executed in this test run (executed now if nothing executed it yet)."""
    folder = Path(os.environ["NVTUTORIAL_EXECUTED_DIR"])
    target = folder / name
    if not target.exists():
        summary = course.run_course(out=folder, only=name, profile="ci", notebooks_dir=NOTEBOOKS[0].parent)
        (outcome,) = [n for n in summary.notebooks if n.name == name]
        assert outcome.passed, outcome.error
    return nbformat.read(target, as_version=4)
