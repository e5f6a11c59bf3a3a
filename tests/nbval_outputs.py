"""The notebooks' committed CPU outputs, for nbval: the cells that print a conclusion, compared on every test run.

A code cell whose source has the line ``# NBVAL_CHECK_OUTPUT`` prints a conclusion whose CPU output is
stable (statuses decided on the CPU or from the committed GPU data, never a timing comparison). Its
output from a CPU run of the notebook (``ci`` profile, parameters injected by papermill) is committed in
``tests/nbval/<notebook>.ipynb``, which holds the notebook's code cells only; every other cell there has
no output. ``tests/nbval/sanitize.cfg``
replaces what varies from run to run (numbers, times, paths, the host) on both sides before they are
compared, and the committed outputs are stored sanitized, so regenerating them changes the files only
where a conclusion changed.

- ``make nbval-outputs`` (``python -m tests.nbval_outputs regenerate``) executes the notebooks and
  writes the committed outputs; ``--from DIR`` takes them from notebooks already executed into ``DIR``.
- ``python -m tests.nbval_outputs prepare DIR`` (``scripts/test.sh``) writes each notebook as papermill
  would run it (``--prepare-only``: the parameters cell injected), with the committed outputs of its
  marked cells, into ``DIR``; ``pytest --nbval-lax --nbval-sanitize-with tests/nbval/sanitize.cfg DIR/*.ipynb``
  then executes each once and compares the marked cells. The executed copies are saved for the notebook
  tests by ``tests/conftest.py``.
- Notebook 00 is executed in a real JupyterLab by ``tests/test_browser.py``; its marked cells are compared
  with :func:`compare_executed`, nbval's own comparison applied to that saved copy (no second execution).
"""

from __future__ import annotations

import argparse
import copy
import re
import sys
from pathlib import Path
from typing import Any

import nbformat
import pytest

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = ROOT / "notebooks"
REFERENCE = Path(__file__).resolve().parent / "nbval"
SANITIZE = REFERENCE / "sanitize.cfg"
MARKER = "NBVAL_CHECK_OUTPUT"
VERDICT_MIME = "application/vnd.nvtutorial.verdict+json"
NOT_COMPARED = (VERDICT_MIME, "image/png", "image/jpeg", "application/vnd.jupyter.widget-view+json")
"""Output keys never compared, so never committed: the verdict's machine-readable copy (its status is checked by
tests/test_notebooks.py against the registry; its numbers vary), images, widgets' model ids."""
EXECUTED_BY_THE_BROWSER = ("00_welcome.ipynb",)
PARAMETERS = {"profile": "ci"}


class StaleOutputs(AssertionError):
    """The committed outputs no longer match the notebook's cells."""


def marked(cell: Any) -> bool:
    """Whether nbval compares this cell's output (its ``# NBVAL_CHECK_OUTPUT`` line, as nbval reads it)."""
    return cell.cell_type == "code" and any(line.strip().lstrip("#").strip() == MARKER
                                            for line in cell.source.splitlines() if line.strip().startswith("#"))


def sanitize_patterns() -> list[tuple[str, str]]:
    from nbval.plugin import get_sanitize_patterns

    return get_sanitize_patterns(SANITIZE.read_text())


def sanitize(text: str, patterns: list[tuple[str, str]] | None = None) -> str:
    for regex, replace in patterns if patterns is not None else sanitize_patterns():
        text = re.sub(regex, replace, text)
    return text


def prepared(name: str) -> nbformat.NotebookNode:
    """Notebook ``name`` as papermill runs it in the tests: the parameters injected, nothing executed."""
    import papermill

    return papermill.execute_notebook(str(NOTEBOOKS / name), None, parameters=PARAMETERS, prepare_only=True,
                                      progress_bar=False, log_output=False, kernel_name="python3")


def _committed_outputs(cell: Any, patterns: list[tuple[str, str]]) -> list[Any]:
    """A marked cell's outputs as committed: sanitized, without what is never compared."""
    outs = []
    for output in cell.get("outputs", []):
        o = copy.deepcopy(output)
        if o.output_type == "error":
            raise StaleOutputs(f"a marked cell raised {o.ename}: fix the notebook before committing its outputs")
        o.pop("metadata", None)
        o.pop("execution_count", None)
        if o.output_type == "stream":
            o.text = sanitize(o.text, patterns)
        elif "data" in o:
            o.data = {k: sanitize(v, patterns) if isinstance(v, str) else v for k, v in o.data.items()
                      if k not in NOT_COMPARED}
            if not o.data:
                continue
            o.output_type = "display_data"  # nbval compares display_data and execute_result alike
            o.metadata = {}
        outs.append(o)
    return outs


def _without_marker(source: str) -> str:
    return "\n".join(line for line in source.splitlines() if line.strip().lstrip("#").strip() != MARKER)


def reference(name: str, executed: nbformat.NotebookNode) -> nbformat.NotebookNode:
    """The committed file for notebook ``name``: its prepared cells, with the sanitized outputs of the marked
    ones taken from ``executed`` (a run of the same cells; marker lines aside, the sources must agree)."""
    nb = prepared(name)
    patterns = sanitize_patterns()
    run = [c for c in executed.cells if c.cell_type == "code"]
    code = [c for c in nb.cells if c.cell_type == "code"]
    if [_without_marker(c.source) for c in run] != [_without_marker(c.source) for c in code]:
        raise StaleOutputs(f"{name}: the executed copy was not made from this version of the notebook")
    for count, (cell, ran) in enumerate(zip(code, run), start=1):
        cell.outputs = _committed_outputs(ran, patterns) if marked(cell) else []
        cell.execution_count = count if marked(cell) else None
        cell.metadata = {k: v for k, v in cell.metadata.items() if k == "tags"}
    nb.cells = code  # the prose is not compared, and stays in notebooks/ only
    nb.metadata = {k: v for k, v in nb.metadata.items() if k in ("kernelspec", "language_info")}
    nb.metadata.get("language_info", {}).pop("version", None)
    return nb


def stale(name: str) -> list[str]:
    """Why the committed outputs of notebook ``name`` no longer match its cells (empty: they match)."""
    path = REFERENCE / name
    nb = nbformat.read(NOTEBOOKS / name, as_version=4)
    want = [c for c in nb.cells if marked(c)]
    if not path.exists():
        return [f"no committed outputs for {name}"] if want else []
    committed = nbformat.read(path, as_version=4)
    here = [c.source for c in prepared(name).cells if c.cell_type == "code"]
    there = [c.source for c in committed.cells if c.cell_type == "code"]
    problems = []
    if here != there:
        changed = next((i for i, (a, b) in enumerate(zip(here, there)) if a != b), min(len(here), len(there)))
        problems.append(f"{name}: code cell {changed} differs from the committed copy's ({len(here)} against "
                        f"{len(there)} code cells)")
    for cell in committed.cells:
        if cell.cell_type == "code" and marked(cell) != bool(cell.outputs or cell.execution_count):
            problems.append(f"{name}: cell {cell.source.splitlines()[0][:60]!r} is "
                            + ("marked but has no committed output" if marked(cell) else "unmarked but has outputs"))
    return problems


def merged(name: str) -> nbformat.NotebookNode:
    """The prepared notebook with the committed outputs of its marked cells: what nbval executes and compares."""
    problems = stale(name)
    if problems:
        raise StaleOutputs("; ".join(problems) + ": regenerate them with `make nbval-outputs`")
    nb = prepared(name)
    path = REFERENCE / name
    if path.exists():
        committed = [c for c in nbformat.read(path, as_version=4).cells if c.cell_type == "code"]
        for cell, ref in zip([c for c in nb.cells if c.cell_type == "code"], committed):
            cell.outputs, cell.execution_count = ref.outputs, ref.execution_count
    return nb


def prepare(folder: Path, names: list[str]) -> list[Path]:
    folder.mkdir(parents=True, exist_ok=True)
    written = []
    for name in names:
        nbformat.write(merged(name), folder / name)
        written.append(folder / name)
    return written


def notebook_names() -> list[str]:
    return sorted(p.name for p in NOTEBOOKS.glob("*.ipynb"))


# --------------------------------------------------------------------------- a copy executed elsewhere
class _Cell:
    """What nbval's comparison needs of one of its cells (nbval 0.11: ``IPyNbCell.compare_outputs``)."""

    def __init__(self, patterns: list[tuple[str, str]]):
        from nbval.plugin import IPyNbCell, nocolors

        self.parent = type("File", (), {"sanitize_patterns": dict(patterns),
                                        "skip_compare": ("metadata", "traceback", "prompt_number", "output_type",
                                                         "name", "execution_count") + NOT_COMPARED})()
        self.colors = nocolors
        self.config = None
        self.ihook = type("Hooks", (), {"pytest_assertrepr_compare": staticmethod(lambda **kwargs: [])})()
        self._compare, self._sanitize, self._format = (IPyNbCell.compare_outputs, IPyNbCell.sanitize,
                                                       IPyNbCell.format_output_compare)

    def sanitize(self, s: Any) -> Any:
        return self._sanitize(self, s)

    def format_output_compare(self, key: str, left: Any, right: Any) -> None:
        self._format(self, key, left, right)

    def compare(self, test: list[Any], ref: list[Any]) -> list[str]:
        from nbval.plugin import coalesce_streams

        ok = self._compare(self, coalesce_streams(copy.deepcopy(test)), coalesce_streams(copy.deepcopy(ref)))
        return [] if ok else self.comparison_traceback


def compare_executed(name: str, executed: nbformat.NotebookNode) -> list[str]:
    """nbval's comparison of a copy executed elsewhere (notebook 00, in JupyterLab) with the committed outputs,
    cell by cell, matching cells by their source: one problem per marked cell whose output differs."""
    committed = [c for c in nbformat.read(REFERENCE / name, as_version=4).cells if marked(c)]
    by_source = {c.source: c for c in executed.cells if c.cell_type == "code"}
    checker = _Cell(sanitize_patterns())
    problems = []
    for ref in committed:
        ran = by_source.get(ref.source)
        first = next((line for line in _without_marker(ref.source).splitlines() if line.strip()), "")
        if ran is None:
            problems.append(f"{name}: no executed cell has the source of the marked cell {first[:60]!r}")
            continue
        diff = checker.compare(list(ran.outputs), list(ref.outputs))
        if diff:
            problems.append(f"{name}, the cell {first[:60]!r}: its output differs from the committed one "
                            "(`make nbval-outputs` if the change is meant):\n" + "\n".join(str(line) for line in diff))
    return problems


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    regen = sub.add_parser("regenerate", help="write tests/nbval/*.ipynb from a CPU run of the notebooks")
    regen.add_argument("--from", dest="source", type=Path, help="notebooks already executed into this folder "
                       "(`nvtutorial course --profile ci --out DIR`); default: execute them now")
    regen.add_argument("--only", nargs="*", default=[], help="notebook names (default: every notebook)")
    prep = sub.add_parser("prepare", help="write the notebooks nbval executes, with the committed outputs")
    prep.add_argument("folder", type=Path)
    prep.add_argument("--only", nargs="*", default=[])
    prep.add_argument("--skip", nargs="*", default=list(EXECUTED_BY_THE_BROWSER))
    args = parser.parse_args(argv)
    names = [n for n in notebook_names() if not args.only or any(o in n for o in args.only)]
    if args.command == "prepare":
        for path in prepare(args.folder, [n for n in names if n not in args.skip]):
            print(path)
        return 0
    source = args.source
    if source is None:
        from nvtutorial import course

        source = ROOT / "build" / "nbval-outputs"
        summary = course.run_course(out=source, only=names, profile="ci", notebooks_dir=NOTEBOOKS)
        failed = [n.name for n in summary.notebooks if not n.passed]
        if failed:
            print(course.format_summary(summary), file=sys.stderr)
            return 1
    REFERENCE.mkdir(exist_ok=True)
    for name in names:
        nb = reference(name, nbformat.read(source / name, as_version=4))
        count = sum(1 for c in nb.cells if marked(c))
        if count:
            nbformat.write(nb, REFERENCE / name)
        elif (REFERENCE / name).exists():
            (REFERENCE / name).unlink()
        print(f"{name}: {count} marked cell(s)")
    return 0


# --------------------------------------------------------------------------- the pytest plugin (-p tests.nbval_outputs)
# Loaded by scripts/test.sh with nbval: a plugin rather than conftest hooks, since conftest hooks only reach items
# under tests/ and nbval's items are the notebooks prepared in build/nbval/. Each notebook is executed once per test
# run, by nbval: the executed copy is saved where the notebook tests read it (NVTUTORIAL_EXECUTED_DIR), and the runs
# it launches land beside it, named relative to the kernel's folder.
_executed_by_nbval: dict[str, Any] = {}


def _is_nbval_cell(item: Any) -> bool:
    return type(item).__name__ == "IPyNbCell"


def pytest_collection_modifyitems(session: Any, config: Any, items: list[Any]) -> None:
    """nbval compares the text a verdict shows, not its machine-readable copy (raw numbers; its status is checked
    against the registry by tests/test_notebooks.py), nor images and widget ids."""
    for parent in {id(item.parent): item.parent for item in items if _is_nbval_cell(item)}.values():
        parent.skip_compare = tuple(dict.fromkeys(parent.skip_compare + NOT_COMPARED))


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_setup(item: Any) -> Any:
    """nbval starts a notebook's kernel while its first cell is set up: with the runs folder in its environment
    (and only there: the tests that follow in this process launch runs relative to another folder)."""
    import os

    if not _is_nbval_cell(item) or "NVTUTORIAL_RUNS_DIR" in os.environ:
        yield
        return
    runs = Path(os.environ["NVTUTORIAL_EXECUTED_DIR"]) / "runs"
    os.environ["NVTUTORIAL_RUNS_DIR"] = os.path.relpath(runs.resolve(), Path(str(item.fspath)).parent.resolve())
    try:
        yield
    finally:
        os.environ.pop("NVTUTORIAL_RUNS_DIR", None)



def pytest_runtest_makereport(item: Any, call: Any) -> None:
    """After nbval ran a cell: its outputs into the notebook's executed copy, written at once."""
    if call.when != "call" or not _is_nbval_cell(item):
        return
    import os

    nb = _executed_by_nbval.get(item.parent.nodeid)
    if nb is None:
        nb = copy.deepcopy(item.parent.nb)
        for cell in nb.cells:
            if cell.cell_type == "code":
                cell.outputs, cell.execution_count = [], None
        _executed_by_nbval[item.parent.nodeid] = nb
    code = [c for c in nb.cells if c.cell_type == "code"]
    code[item.cell_num].outputs = list(item.test_outputs or [])
    code[item.cell_num].execution_count = item.cell_num + 1
    folder = Path(os.environ["NVTUTORIAL_EXECUTED_DIR"])
    folder.mkdir(parents=True, exist_ok=True)
    nbformat.write(nb, folder / Path(str(item.fspath)).name)


if __name__ == "__main__":
    sys.exit(main())
