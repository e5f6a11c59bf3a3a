"""Rewrite the course notebooks in the form JupyterLab saves them, so that opening one changes nothing.

    .venv/bin/python scripts/normalize_notebooks.py            # rewrite notebooks/*.ipynb in place
    .venv/bin/python scripts/normalize_notebooks.py --check    # exit 1 and name the files that would change

JupyterLab marks a notebook modified as soon as it opens it when the notebook's ``kernelspec`` or
``language_info`` differ from what the kernel reports (the committed notebooks had a bare
``{"name": "python"}`` and another display name), and when it has to add cell ids or upgrade the
format. The normal form: nbformat 4.5, every cell with an id, no outputs, the course kernel's
``kernelspec`` (as ``make install`` registers it) and the ``language_info`` an IPython kernel
reports, written as Jupyter Server writes (nbformat's JSON, sorted keys, one-space indent). The
Python version in ``language_info`` is kept when a notebook has one (a notebook cannot match every
Python; ``make lab`` serves each notebook with the running kernel's values, see
``nvtutorial/lab.py``), else this interpreter's. Safe to re-run after merges: it only rewrites
what is not yet in normal form.
"""

from __future__ import annotations

import argparse
import copy
import re
import sys
from pathlib import Path

import nbformat
from nbformat.corpus.words import generate_corpus_id

ROOT = Path(__file__).resolve().parent.parent
KERNELSPEC = {"display_name": "Python 3 (nvtutorial)", "language": "python", "name": "python3"}
"""The kernel ``make install`` registers (``ipykernel install --name python3 --display-name ...``)."""
VERSION = re.compile(r"^\d+\.\d+\.\d+$")


def language_info(version: str | None = None) -> dict:
    """What an IPython kernel reports as ``language_info`` (ipykernel's ``IPythonKernel.language_info``)."""
    return {
        "codemirror_mode": {"name": "ipython", "version": 3},
        "file_extension": ".py",
        "mimetype": "text/x-python",
        "name": "python",
        "nbconvert_exporter": "python",
        "pygments_lexer": "ipython3",
        "version": version or sys.version.split()[0],
    }


def normal_form(nb: nbformat.NotebookNode) -> nbformat.NotebookNode:
    """A copy of ``nb`` in the normal form (see the module docstring)."""
    nb = copy.deepcopy(nb)
    if (nb.nbformat, nb.nbformat_minor) < (4, 5):
        nb = nbformat.convert(nb, 4)
        nb.nbformat_minor = 5
    old_version = str((nb.metadata.get("language_info") or {}).get("version", ""))
    nb.metadata["kernelspec"] = dict(KERNELSPEC)
    nb.metadata["language_info"] = language_info(old_version if VERSION.match(old_version) else None)
    for cell in nb.cells:
        if cell.cell_type == "code":
            cell.outputs = []
            cell.execution_count = None
        cell.metadata.pop("execution", None)  # JupyterLab's recordTiming stamps, papermill's timings
        cell.metadata.pop("papermill", None)
    nb.metadata.pop("papermill", None)
    nb.metadata.pop("widgets", None)
    existing = {cell.get("id") for cell in nb.cells}
    seen: set[str] = set()
    for cell in nb.cells:
        if not cell.get("id") or cell.id in seen:  # missing or duplicate: a new one, as JupyterLab would
            cell.id = next(i for i in iter(generate_corpus_id, None) if i not in existing | seen)
        seen.add(cell.id)
    nbformat.validate(nb)
    return nb


def normal_text(path: Path) -> str:
    """The file's text in normal form, as Jupyter Server would write it."""
    nb = nbformat.read(path, as_version=nbformat.NO_CONVERT)
    text = nbformat.writes(normal_form(nb), version=nbformat.NO_CONVERT)
    return text if text.endswith("\n") else text + "\n"  # as nbformat.write (Jupyter Server) ends a file


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("paths", nargs="*", type=Path, help="notebooks (default: notebooks/*.ipynb)")
    parser.add_argument(
        "--check", action="store_true", help="change nothing; exit 1 if a notebook is not in normal form"
    )
    args = parser.parse_args(argv)
    paths = args.paths or sorted((ROOT / "notebooks").glob("*.ipynb"))
    changed = []
    for path in paths:
        text = normal_text(path)
        if path.read_text(encoding="utf-8") != text:
            changed.append(path)
            if not args.check:
                path.write_text(text, encoding="utf-8")
    verb = "not in normal form" if args.check else "rewritten"
    for path in changed:
        print(f"{verb}: {path}")
    print(f"{len(changed)} of {len(paths)} notebooks {verb}")
    return 1 if args.check and changed else 0


if __name__ == "__main__":
    sys.exit(main())
