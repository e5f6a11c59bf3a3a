"""The executed copies of the notebooks that ``make site`` and ``make test`` share: one execution per notebook.

    python site/executed.py prune build/executed [--all]     # what `make test` runs first
    python site/executed.py status build/executed            # which copies are current

A copy is **current** when its cells (type and text, papermill's injected-parameters cell left out) are those
of ``notebooks/`` now, and the folder's stamp (``stamp.json``) was made from the same code: a fingerprint of
the package (``nvtutorial/``) and ``pyproject.toml``. ``prune`` removes every copy that is not
current (all of them, and the runs beside them, when the code changed or with ``--all``) and writes the stamp
for what runs next. Whoever needs a copy that is missing executes it into the folder: ``make test``
(``tests/notebooks/test_jupyterlab.py`` runs every notebook with Run All in a real JupyterLab and saves it there;
without Chromium, ``tests/notebooks/test_notebooks.py`` executes what is missing with papermill) or ``make site``
(``build_site.py``, papermill, the ``ci`` profile). In CI ``make test`` runs first and ``make site SITE_EXECUTE=0``
builds from its copies; run the other way round, the tests take the site's copies, except that the JupyterLab test
always runs every notebook (that run is what it tests). Either way no notebook runs twice in CI.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import shutil
import subprocess
import sys
from pathlib import Path

import nbformat

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = ROOT / "notebooks"
STAMP = "stamp.json"
INJECTED = "injected-parameters"
"""The tag papermill gives the cell it inserts after the ``parameters`` cell."""
SITE_CELL = "site-provenance"
"""The id of the note the website puts at the top of a page."""
CODE = (ROOT / "nvtutorial", ROOT / "pyproject.toml")
"""What an executed copy's outputs depend on besides its own text: the code it runs."""


def cells(nb: nbformat.NotebookNode) -> list[tuple[str, str]]:
    """A notebook's cells as ``(type, source)``, without papermill's injected parameters and the site's note."""
    return [
        (c.cell_type, c.source)
        for c in nb.cells
        if INJECTED not in c.get("metadata", {}).get("tags", []) and c.get("id") != SITE_CELL
    ]


def differences(copy: nbformat.NotebookNode, plain: nbformat.NotebookNode, limit: int = 3) -> list[str]:
    """How ``copy``'s cells differ from ``plain``'s: empty when they are the same text, else up to ``limit`` lines."""
    a, b = cells(copy), cells(plain)
    out = []
    if len(a) != len(b):
        out.append(f"{len(a)} cells against the notebook's {len(b)}")
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            first = (y[1].splitlines() or [""])[0][:80]
            out.append(f"cell {i} ({y[0]}, starting {first!r}) differs")
            if len(out) >= limit:
                break
    return out


def shared(copy: nbformat.NotebookNode, plain: nbformat.NotebookNode) -> int:
    """How many of the notebook's cells appear, unchanged, somewhere in ``copy``."""
    theirs = set(cells(copy))
    return sum(1 for c in cells(plain) if c in theirs)


def fingerprint(paths: tuple[Path, ...] = CODE) -> str:
    """A hash of every file under ``paths`` (names and contents; caches left out)."""
    h = hashlib.sha256()
    files = []
    for p in paths:
        files += [p] if p.is_file() else sorted(f for f in p.rglob("*") if f.is_file())
    for f in files:
        if "__pycache__" in f.parts or f.suffix == ".pyc" or ".ipynb_checkpoints" in f.parts:
            continue
        h.update(str(f.relative_to(ROOT)).encode() + b"\0" + f.read_bytes() + b"\0")
    return h.hexdigest()[:16]


def commit() -> dict[str, object]:
    """The commit of this checkout (short hash) and whether the notebooks or the package differ from it."""

    def git(*args: str) -> str:
        done = subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, check=False)
        return done.stdout.strip() if done.returncode == 0 else ""

    head = git("rev-parse", "--short", "HEAD") or "unknown"
    dirty = bool(git("status", "--porcelain", "--", "notebooks", "nvtutorial", "pyproject.toml"))
    return {"commit": head, "dirty": dirty}


def read_stamp(folder: Path) -> dict[str, object]:
    try:
        return json.loads((folder / STAMP).read_text())
    except (OSError, ValueError):
        return {}


def notebook_names(notebooks: Path = NOTEBOOKS) -> list[str]:
    return sorted(p.name for p in notebooks.glob("*.ipynb"))


def is_current(folder: Path, name: str, notebooks: Path = NOTEBOOKS) -> bool:
    """Whether ``folder/name`` exists and has exactly the cells of ``notebooks/name`` (the stamp is checked by
    :func:`prune`)."""
    path = folder / name
    if not path.is_file():
        return False
    try:
        copy = nbformat.read(path, as_version=4)
    except Exception:  # noqa: BLE001 - a half-written or broken copy is not current
        return False
    return not differences(copy, nbformat.read(notebooks / name, as_version=4))


def prune(folder: Path, everything: bool = False, notebooks: Path = NOTEBOOKS) -> list[str]:
    """Remove the copies in ``folder`` that are not current; all of them (and their runs) when the code changed
    since the stamp or with ``everything``. Writes the stamp of the code as it is now. Returns what it removed."""
    folder.mkdir(parents=True, exist_ok=True)
    now = {"fingerprint": fingerprint(), **commit()}
    stale_code = read_stamp(folder).get("fingerprint") != now["fingerprint"]
    removed = []
    for path in sorted(folder.glob("*.ipynb")):
        if (
            everything
            or stale_code
            or path.name not in notebook_names(notebooks)
            or not is_current(folder, path.name, notebooks)
        ):
            path.unlink()
            removed.append(path.name)
    if (everything or stale_code) and (folder / "runs").is_dir():
        shutil.rmtree(folder / "runs")
    (folder / STAMP).write_text(json.dumps(now, indent=1) + "\n")
    return removed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("action", choices=("prune", "status"))
    parser.add_argument("folder", type=Path)
    parser.add_argument("--all", action="store_true", help="prune: remove every copy (execute everything again)")
    args = parser.parse_args(argv)
    if args.action == "prune":
        removed = prune(args.folder, args.all)
        kept = [n for n in notebook_names() if (args.folder / n).is_file()]
        print(
            f"executed copies in {args.folder}: {len(kept)} current kept"
            + (f" ({', '.join(n[:2] for n in kept)})" if kept else "")
            + (f", {len(removed)} removed" if removed else "")
            + "; the others run when a test or the site needs them"
        )
        return 0
    stamp = read_stamp(args.folder)
    same_code = stamp.get("fingerprint") == fingerprint()
    for name in notebook_names():
        state = "current" if same_code and is_current(args.folder, name) else "missing or stale"
        print(f"{name}: {state}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
