"""Run chosen code cells of a notebook in a namespace of the test's making, as the kernel would run them: the
decisions a notebook makes in its own cells (its plan: which part runs where, at which sizes) are tested on the CPU
for any machine, by patching what the cells read (``course.Machine.here``). IPython's magics (``%load_ext``) are left
out; ``display`` records what the cells show."""

from __future__ import annotations

import ast
from typing import Any

import nbformat

from tests.helpers.paths import ROOT

NOTEBOOKS = ROOT / "notebooks"


def cells(notebook: str) -> dict[str, Any]:
    """The notebook's code cells by id."""
    nb = nbformat.read(NOTEBOOKS / f"{notebook}.ipynb", as_version=4)
    return {c.id: c for c in nb.cells if c.cell_type == "code"}


def parameters(notebook: str) -> dict[str, Any]:
    """The literals of the notebook's ``parameters`` cell."""
    cell = next(c for c in cells(notebook).values() if "parameters" in c.metadata.get("tags", []))
    return {n.targets[0].id: ast.literal_eval(n.value) for n in ast.parse(cell.source).body}  # type: ignore[attr-defined]


def run(notebook: str, ids: list[str], **values: Any) -> dict[str, Any]:
    """Run the cells ``ids`` in order, after the parameters cell, with ``values`` overriding its literals; the
    namespace after them (``shown``: what ``display`` was given)."""
    found = cells(notebook)
    shown: list[Any] = []
    namespace: dict[str, Any] = {"display": shown.append, "shown": shown, **parameters(notebook), **values}
    for cell_id in ids:
        source = "\n".join(line for line in found[cell_id].source.splitlines() if not line.lstrip().startswith("%"))
        exec(compile(source, f"{notebook}:{cell_id}", "exec"), namespace)  # noqa: S102 - the notebook's own code
        namespace["display"] = shown.append  # a cell that imports IPython's display gets the recorder back
    return namespace
