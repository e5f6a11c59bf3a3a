"""The notebooks' committed CPU outputs, for nbval: the cells that print a conclusion, compared on every test run.

A code cell whose source has the line ``# NBVAL_CHECK_OUTPUT`` prints a conclusion whose CPU output is
stable (statuses decided on the CPU or from the committed GPU data, never a timing comparison). Its
output from a CPU run of the notebook (``ci`` profile, parameters injected by papermill) is committed in
``tests/nbval/<notebook>.ipynb``, which holds the notebook's code cells only; every other cell there has
no output. ``tests/nbval/sanitize.cfg``
replaces what varies from run to run (numbers, times, paths, the host) on both sides before they are
compared, and the committed outputs are stored sanitized, so regenerating them changes the files only
where a conclusion changed.

- ``make nbval-outputs`` (``python -m tests.helpers.nbval_outputs regenerate``) executes the notebooks and
  writes the committed outputs; ``--from DIR`` takes them from notebooks already executed into ``DIR``.
- ``tests/test_notebooks.py`` compares the marked cells of each notebook's one executed copy of the test run
  (Run All in JupyterLab, ``tests/test_jupyterlab.py``; papermill where Chromium is missing) with
  :func:`compare_executed`: nbval's own comparison (``IPyNbCell.compare_outputs`` with the sanitize file) on that
  copy, so no notebook is executed a second time for nbval.
"""

from __future__ import annotations

import argparse
import copy
import re
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import nbformat

from tests.helpers.paths import ROOT, TESTS

NOTEBOOKS = ROOT / "notebooks"
REFERENCE = TESTS / "nbval"
SANITIZE = REFERENCE / "sanitize.cfg"
MARKER = "NBVAL_CHECK_OUTPUT"
VERDICT_MIME = "application/vnd.nvtutorial.verdict+json"
NOT_COMPARED = (VERDICT_MIME, "image/png", "image/jpeg", "application/vnd.jupyter.widget-view+json")
"""Output keys never compared, so never committed: the verdict's machine-readable copy (its status is checked by
tests/test_notebooks.py against the registry; its numbers vary), images, widgets' model ids."""
PARAMETERS = {"profile": "ci"}


TIMING_LINES = re.compile(
    r"^(?:\[nvtutorial\] waiting for the warm interpreter to import torch|\[nvtutorial\] still importing "
    r"|\[(?:lab|run|check) +[\d.]+ s\] (?:now: |still waiting \()).*\n?",
    re.M,
)
"""Lines whose presence depends on timing, not on a conclusion: printed when a kernel's first run starts before its
warm interpreter finished importing torch, while a first import goes on, or while a run says what it is doing now
or that it still waits (notebook 09's lab, every 1.5 s: a loaded CI machine printed one in a marked cell). Taken out
of the stream outputs of both sides before they are compared."""


def _without_timing_lines(outputs: list[Any]) -> list[Any]:
    kept = []
    for o in copy.deepcopy(outputs):
        if o.get("output_type") == "stream":
            text = "".join(o["text"]) if isinstance(o["text"], list) else o["text"]
            o["text"] = TIMING_LINES.sub("", text)
            if not o["text"]:
                continue
        kept.append(o)
    return kept


class StaleOutputs(AssertionError):
    """The committed outputs no longer match the notebook's cells."""


def marked(cell: Any) -> bool:
    """Whether nbval compares this cell's output (its ``# NBVAL_CHECK_OUTPUT`` line, as nbval reads it)."""
    return cell.cell_type == "code" and any(
        line.strip().lstrip("#").strip() == MARKER for line in cell.source.splitlines() if line.strip().startswith("#")
    )


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

    return papermill.execute_notebook(
        str(NOTEBOOKS / name),
        None,
        parameters=PARAMETERS,
        prepare_only=True,
        progress_bar=False,
        log_output=False,
        kernel_name="python3",
    )


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
            o.text = sanitize(TIMING_LINES.sub("", o.text), patterns)
            if not o.text:
                continue
        elif "data" in o:
            o.data = {
                k: sanitize(v, patterns) if isinstance(v, str) else v
                for k, v in o.data.items()
                if k not in NOT_COMPARED
            }
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
        problems.append(
            f"{name}: code cell {changed} differs from the committed copy's ({len(here)} against "
            f"{len(there)} code cells)"
        )
    for cell in committed.cells:
        if cell.cell_type == "code" and marked(cell) != bool(cell.outputs or cell.execution_count):
            problems.append(
                f"{name}: cell {cell.source.splitlines()[0][:60]!r} is "
                + ("marked but has no committed output" if marked(cell) else "unmarked but has outputs")
            )
    return problems


def notebook_names() -> list[str]:
    return sorted(p.name for p in NOTEBOOKS.glob("*.ipynb"))


# --------------------------------------------------------------------------- a copy executed elsewhere
class _Cell:
    """What nbval's comparison needs of one of its cells (nbval 0.11: ``IPyNbCell.compare_outputs``)."""

    # IPyNbCell's own functions, called with this stand-in as their ``self``
    _compare: Callable[..., bool]
    _sanitize: Callable[..., Any]
    _format: Callable[..., None]
    comparison_traceback: list[str]  # set by ``IPyNbCell.compare_outputs`` where the outputs differ

    def __init__(self, patterns: list[tuple[str, str]]):
        from nbval.plugin import IPyNbCell, nocolors

        self.parent = type(
            "File",
            (),
            {
                "sanitize_patterns": dict(patterns),
                "skip_compare": ("metadata", "traceback", "prompt_number", "output_type", "name", "execution_count")
                + NOT_COMPARED,
            },
        )()
        self.colors = nocolors
        self.config = None
        self.ihook = type("Hooks", (), {"pytest_assertrepr_compare": staticmethod(lambda **kwargs: [])})()
        self._compare, self._sanitize, self._format = (
            IPyNbCell.compare_outputs,
            IPyNbCell.sanitize,
            IPyNbCell.format_output_compare,
        )

    def sanitize(self, s: Any) -> Any:
        return self._sanitize(self, s)

    def format_output_compare(self, key: str, left: Any, right: Any) -> None:
        self._format(self, key, left, right)

    def compare(self, test: list[Any], ref: list[Any]) -> list[str]:
        from nbval.plugin import coalesce_streams

        ok = self._compare(
            self, coalesce_streams(_without_timing_lines(test)), coalesce_streams(_without_timing_lines(ref))
        )
        return [] if ok else self.comparison_traceback


def compare_executed(name: str, executed: nbformat.NotebookNode) -> list[str]:
    """nbval's comparison of a copy executed elsewhere (in JupyterLab, or by papermill) with the committed outputs,
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
            problems.append(
                f"{name}, the cell {first[:60]!r}: its output differs from the committed one "
                "(`make nbval-outputs` if the change is meant):\n" + "\n".join(str(line) for line in diff)
            )
    return problems


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    regen = sub.add_parser("regenerate", help="write tests/nbval/*.ipynb from a CPU run of the notebooks")
    regen.add_argument(
        "--from",
        dest="source",
        type=Path,
        help="notebooks already executed into this folder "
        "(`nvtutorial course --profile ci --out DIR`); default: execute them now",
    )
    regen.add_argument("--only", nargs="*", default=[], help="notebook names (default: every notebook)")
    args = parser.parse_args(argv)
    names = [n for n in notebook_names() if not args.only or any(o in n for o in args.only)]
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


if __name__ == "__main__":
    sys.exit(main())
