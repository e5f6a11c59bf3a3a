"""Every file or folder of this repository that a notebook's text names in a code span exists (the Chinese edition's
review found notebook 08 naming `nvtutorial/workloads/ladder.py` and `tests/test_ladder.py` a week after both moved).

A path counts when it starts with one of the repository's top folders (``../`` prefixes dropped, since a notebook
runs in ``notebooks/``) and holds no placeholder (``<machine>``, ``{R}``, ``*``). A span the text wraps over two
lines is joined first. What an earlier run was called (a path in the past tense) is worth a rewording, not an
exception: write the path it has now.
"""

from __future__ import annotations

import re
from pathlib import Path

import nbformat
import pytest

from tests.helpers.paths import ROOT

TOP = ("nvtutorial/", "tests/", "scripts/", "reference/", "notebooks/", "docs/", "site/", "benchmarks/", "locale/")
SPAN = re.compile(r"`([^`]+)`")
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))


def named_paths(markdown: str) -> list[str]:
    """The repository paths a cell's text names in code spans, a span wrapped over lines joined."""
    found = []
    for span in SPAN.findall(markdown):
        path = re.sub(r"\s*\n\s*", "", span).strip()
        while path.startswith("../"):
            path = path[3:]
        if path.startswith(TOP) and not re.search(r"[<>{}*\s]", path):
            found.append(path)
    return found


def missing(markdown: str, root: Path = ROOT) -> list[str]:
    return [p for p in named_paths(markdown) if not (root / p).exists()]


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.name for p in NOTEBOOKS])
def test_every_path_a_notebook_names_exists(path: Path):
    nb = nbformat.read(path, as_version=4)
    gone = {c.get("id"): missing(c.source) for c in nb.cells if c.cell_type == "markdown"}
    assert not {cell: paths for cell, paths in gone.items() if paths}


def test_the_notebooks_name_paths_at_all():
    named = [p for nb in NOTEBOOKS for c in nbformat.read(nb, as_version=4).cells for p in named_paths(c.source)]
    assert len(named) > 20 and "nvtutorial/chapters/ch08_ladder/workload.py" in named


def test_a_moved_file_a_wrapped_span_and_a_placeholder(tmp_path: Path):
    (tmp_path / "nvtutorial" / "chapters").mkdir(parents=True)
    (tmp_path / "nvtutorial" / "chapters" / "here.py").write_text("")
    text = (
        "See `nvtutorial/workloads/\nladder.py`, `../nvtutorial/chapters/here.py`, `nvtutorial/chapters/`,\n"
        "`reference/<machine>/runs-11/`, `trace_rank{R}.json`, `tests/test_ladder.py` and `torch.compile`."
    )
    assert named_paths(text) == [
        "nvtutorial/workloads/ladder.py",
        "nvtutorial/chapters/here.py",
        "nvtutorial/chapters/",
        "tests/test_ladder.py",
    ]
    assert missing(text, tmp_path) == ["nvtutorial/workloads/ladder.py", "tests/test_ladder.py"]
