"""Build the course website (Jupyter Book 1) from the executed GPU reference notebooks.

    make site                  # the same as below, with the pinned toolchain in build/site-env
    python site/build_site.py --jupyter-book build/site-env/bin/jupyter-book --out build/site

A page per notebook: the executed copy from ``reference/h200x2/`` (outputs as they ran there,
never re-executed), or the plain notebook without outputs where there is no GPU copy yet, each
headed by where its numbers come from. Plus the intro, the claims table (from
``nvtutorial.report.claims``) and the reference machine. The widgets' JavaScript
(``require.js`` and ``@jupyter-widgets/html-manager``) is fetched with ``npm pack`` and served
with the site, so every page, progress bars included, works offline. The build fails on any
Sphinx warning and on a broken internal link or a missing image (``check_site.py``).
"""

from __future__ import annotations

import argparse
import collections
import importlib.util
import json
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import nbformat
import yaml

ROOT = Path(__file__).resolve().parent.parent
SITE = ROOT / "site"
NOTEBOOKS = ROOT / "notebooks"
REFERENCE = ROOT / "reference" / "h200x2"
PAGES = ("_config.yml", "_toc.yml", "intro.md", "favicon.svg")
"""The committed parts of the book; the rest is generated here."""

WIDGET_PACKAGES = {"requirejs": "requirejs@2.3.8", "html-manager": "@jupyter-widgets/html-manager@1.0.15"}
"""The npm packages the saved widgets need in a page, fetched with ``npm pack``."""
WIDGET_JS = (("requirejs", "package/require.js"), (None, "widgets-config.js"), ("html-manager", "package/dist/embed-amd.js"))
"""The scripts of a page with widgets, in loading order: (package, file in its tarball) or (None, file in site/)."""
WIDGET_FONTS = re.compile(r"package/dist/[0-9a-f]+\.(woff2?|ttf|eot|svg)$")
"""html-manager's icon fonts, which it loads from ``html-manager/`` beside its script (``widgets-config.js``)."""

LABEL = re.compile(
    r"\d+× [^·\n\"<]+?(?: \+ \d+× [^·\n\"<]+?)?(?: · NV\d+| · [A-Za-z][^·\n\"<]*?)?(?: · NCCL [\d.]+)? · torch [\w.+]+"
    r"(?: · CUDA [\d.]+)?(?=$|[^\w.])"
    r"|CPU, \w+, \d+ processes on [^:\n\"<]+: a simulation, not a GPU measurement"
)
"""``RunResult.label``: a GPU run's hardware and versions, or the CPU simulation notice."""


def run_labels(nb: nbformat.NotebookNode) -> collections.Counter[str]:
    """The ``RunResult.label`` strings printed in a notebook's outputs, with how often each appears."""
    found: collections.Counter[str] = collections.Counter()
    for cell in nb.cells:
        for out in cell.get("outputs", []):
            texts = [out.get("text", "")] + [v for k, v in out.get("data", {}).items() if k.startswith("text/")]
            for text in texts:
                found.update(LABEL.findall(text if isinstance(text, str) else "".join(text)))
    return found


def reference_runs(folder: Path = REFERENCE) -> dict[str, dict]:
    """What the reference folder says about each executed notebook: passed, duration, commit, profile."""
    runs: dict[str, dict] = {}
    summary_path = folder / "summary.json"
    summary = json.loads(summary_path.read_text()) if summary_path.exists() else {"notebooks": []}
    for entry in summary.get("notebooks", []):
        runs[Path(entry["name"]).stem] = {"passed": entry.get("passed"), "duration_s": entry.get("duration_s"),
                                           "where": summary.get("where"), "commit": None}
    readme = folder / "README.md"
    table_row = re.compile(r"^\| \[(\w+)\]\([^)]*\) \| \w+ \| [^|]+ \| ([0-9a-f]{7,40}) \|", re.MULTILINE)
    rows = table_row.findall(readme.read_text()) if readme.exists() else []
    for name, commit in rows:
        runs.setdefault(name, {"where": summary.get("where")})["commit"] = commit
    for name, info in runs.items():
        path = folder / f"{name}.ipynb"
        if path.exists():
            nb = nbformat.read(path, as_version=4)
            info["profile"] = nb.metadata.get("papermill", {}).get("parameters", {}).get("profile")
    return runs


def _label_lines(labels: collections.Counter[str]) -> str:
    if not labels:
        return "No run on this page prints where it ran."
    lines = [f"- `{label}` ({n} time{'s' if n > 1 else ''})" for label, n in labels.most_common()]
    return "Where the runs on this page say they ran:\n\n" + "\n".join(lines)


def provenance_cell(nb: nbformat.NotebookNode | None, info: dict | None) -> nbformat.NotebookNode:
    """The note heading a notebook's page: where its outputs were produced, or that it has none."""
    if nb is None:
        text = ("```{admonition} No GPU run of this notebook yet\n:class: warning\n"
                "This page shows the notebook **without outputs**: the reference folder (`reference/h200x2/`) "
                "has no executed copy of it yet. Run it yourself with `make course`, or open it with `make lab`.\n```")
        return nbformat.v4.new_markdown_cell(text)
    info = info or {}
    where = info.get("where") or "the reference machine"
    facts = []
    if info.get("profile"):
        facts.append(f"with the `{info['profile']}` profile")
    if info.get("commit"):
        facts.append(f"from commit `{info['commit']}`")
    if info.get("duration_s"):
        facts.append(f"in {info['duration_s']:.0f} s")
    labels = run_labels(nb)
    cpu = any(label.startswith("CPU,") for label in labels)
    failed = info.get("passed") is False
    text = (f"```{{admonition}} Where these outputs come from\n:class: {'warning' if cpu or failed else 'note'}\n"
            f"Executed on **{where}** ([the reference machine](../hardware.md)) {', '.join(facts)}"
            f"{': **it failed there**' if failed else ''}. "
            "The outputs are as they ran there: this site never re-executes a notebook.\n\n"
            f"{_label_lines(labels)}\n```")
    return nbformat.v4.new_markdown_cell(text)


def stage_notebook(plain: Path, reference: Path | None, info: dict | None) -> nbformat.NotebookNode:
    """The notebook as the site shows it: the executed reference copy if there is one, with its provenance."""
    nb = nbformat.read(reference if reference else plain, as_version=4)
    cell = provenance_cell(nb if reference else None, info)
    cell["id"] = "site-provenance"
    nb.cells.insert(1, cell)
    return nb


def learning_path(readme: Path = ROOT / "README.md") -> str:
    """The README's learning-path table, each notebook name linked to its page."""
    match = re.search(r"^## Learning path\n\n(\|.*?)\n\n", readme.read_text(), re.MULTILINE | re.DOTALL)
    if not match:
        raise SystemExit(f"site: {readme} has no '## Learning path' table to show on the intro page")
    return re.sub(r"^\| `(\d\d_\w+)` \|", lambda m: f"| [{m.group(1)}](notebooks/{m.group(1)}.ipynb) |",
                  match.group(1), flags=re.MULTILINE)


def claims_page() -> str:
    """The claims page: the registry's markdown table, each notebook linked to its page."""
    from nvtutorial.report import claims

    counts = collections.Counter(c.status for c in claims.CLAIMS)
    table = claims.markdown_table(link=lambda c: f"[{c.notebook}](notebooks/{c.notebook}.ipynb)")
    tally = ", ".join(f"{n} {status}" for status, n in counts.most_common())
    return (f"# The source's {len(claims.CLAIMS)} claims\n\n"
            "The course follows a Chinese blog tutorial on dual-GPU training with NVLink, and audits each of its "
            f"claims by measurement or from a primary source. Verdicts: {tally}. The evidence column says how "
            "each was settled; the notebook named shows it.\n\n" + table + "\n")


def hardware_page(runs: dict[str, dict], staged: dict[str, nbformat.NotebookNode | None]) -> str:
    """Where the site's numbers come from: the reference machine and, per page, its run and labels."""
    readme = (REFERENCE / "README.md").read_text() if (REFERENCE / "README.md").exists() else ""
    intro = readme.split("\n\n")[1].strip() if readme.count("\n\n") >= 1 else ""
    machine = (REFERENCE / "machine.txt").read_text() if (REFERENCE / "machine.txt").exists() else "(no machine.txt)"
    machine = re.sub(r"\x1b\[[0-9;]*m", "", machine).rstrip()
    rows = ["| page | outputs | passed | duration | commit | labels in its outputs |", "| --- | --- | --- | --- | --- | --- |"]
    for name, nb in staged.items():
        info = runs.get(name, {})
        if nb is None:
            rows.append(f"| [{name}](notebooks/{name}.ipynb) | none (no GPU copy yet) | | | | |")
            continue
        labels = "; ".join(f"`{label}` ×{n}" for label, n in run_labels(nb).most_common()) or "none"
        passed = {True: "yes", False: "no"}.get(info.get("passed"), "?")
        duration = f"{info['duration_s']:.0f} s" if info.get("duration_s") else "?"
        rows.append(f"| [{name}](notebooks/{name}.ipynb) | {info.get('profile') or '?'} profile | {passed} | {duration} "
                    f"| `{info.get('commit') or '?'}` | {labels} |")
    changed = ""
    match = re.search(r"^## What changed in the code after these runs\n(.*?)(?=^## |\Z)", readme, re.MULTILINE | re.DOTALL)
    if match:
        changed = "## What changed in the code after these runs\n" + match.group(1).strip() + "\n"
    return ("# Where the numbers come from\n\n"
            "Every executed page of this site was run on one kind of machine, and every run in it says where it "
            "ran (`RunResult.label`). A number measured on the CPU simulation is labelled as such and is never a GPU "
            "lesson.\n\n"
            f"{intro}\n\n## The machine, as it described itself\n\n```text\n{machine}\n```\n\n"
            "## Each page\n\n" + "\n".join(rows) + "\n\n" + changed)


def npm_pack(package: str, cache: Path) -> Path:
    """The tarball of ``package`` (``name@version``), fetched with ``npm pack`` once and kept in ``cache``."""
    cache.mkdir(parents=True, exist_ok=True)
    tarball = cache / (package.lstrip("@").replace("/", "-").replace("@", "-") + ".tgz")
    if not tarball.exists():
        if shutil.which("npm") is None:
            raise SystemExit("site: npm is needed to fetch the widgets' JavaScript (apt-get install npm)")
        with tempfile.TemporaryDirectory() as tmp:
            subprocess.run(["npm", "pack", package, "--pack-destination", tmp, "--silent"], check=True,
                           stdout=subprocess.DEVNULL)
            (packed,) = Path(tmp).glob("*.tgz")
            shutil.move(packed, tarball)
    return tarball


def _members(tarball: Path, wanted: Callable[[str], bool]) -> dict[str, bytes]:
    """The contents of the tarball's files whose names ``wanted`` accepts."""
    with tarfile.open(tarball) as tar:
        found = {}
        for member in tar.getmembers():
            if member.isfile() and wanted(member.name):
                data = tar.extractfile(member)
                assert data is not None
                found[member.name] = data.read()
        return found


def fetch_widget_js(cache: Path, dest: Path) -> list[str]:
    """Put the widgets' scripts and fonts in ``dest``; the scripts' paths under ``_static``, in loading order."""
    (dest / "html-manager").mkdir(parents=True, exist_ok=True)
    tarballs = {key: npm_pack(package, cache) for key, package in WIDGET_PACKAGES.items()}
    paths = []
    for key, member in WIDGET_JS:
        name = Path(member).name
        if key is None:
            shutil.copy(SITE / member, dest / name)
        else:
            found = _members(tarballs[key], lambda n, member=member: n == member)
            if member not in found:
                raise SystemExit(f"site: {member} is missing from {WIDGET_PACKAGES[key]}")
            (dest / name).write_bytes(found[member])
        paths.append(f"widgets/{name}")
    for member, data in _members(tarballs["html-manager"], WIDGET_FONTS.match).items():
        (dest / "html-manager" / Path(member).name).write_bytes(data)
    return paths


def write_favicon(path: Path) -> None:
    """The site's icon (two GPUs and their link, as favicon.svg draws it) as an .ico file."""
    from PIL import Image, ImageDraw

    image = Image.new("RGBA", (32, 32), (0, 0, 0, 0))
    draw = ImageDraw.Draw(image)
    draw.rounded_rectangle((0, 0, 31, 31), radius=6, fill="#76b900")
    for x in (6, 18):
        draw.rectangle((x, 9, x + 7, 22), fill="white")
    draw.rectangle((13, 14, 18, 17), fill="white")
    path.parent.mkdir(parents=True, exist_ok=True)
    image.save(path, sizes=[(32, 32)])


def stage(src: Path, cache: Path) -> dict[str, nbformat.NotebookNode | None]:
    """Write the book's sources into ``src``; return each notebook's executed copy (None: none yet)."""
    if src.exists():
        shutil.rmtree(src)
    (src / "notebooks").mkdir(parents=True)
    for page in PAGES:
        shutil.copy(SITE / page, src / page)
    intro = (src / "intro.md").read_text()
    (src / "intro.md").write_text(intro.replace("<!-- learning-path -->", learning_path()))
    runs = reference_runs()
    staged: dict[str, nbformat.NotebookNode | None] = {}
    plain_notebooks = sorted(NOTEBOOKS.glob("*.ipynb"))
    if not plain_notebooks:
        raise SystemExit(f"site: no notebooks in {NOTEBOOKS}")
    for plain in plain_notebooks:
        reference = REFERENCE / plain.name
        nb = stage_notebook(plain, reference if reference.exists() else None, runs.get(plain.stem))
        nbformat.write(nb, src / "notebooks" / plain.name)
        staged[plain.stem] = nbformat.read(reference, as_version=4) if reference.exists() else None
    (src / "claims.md").write_text(claims_page())
    (src / "hardware.md").write_text(hardware_page(runs, staged))
    write_favicon(src / "_extra" / "favicon.ico")
    js = fetch_widget_js(cache, src / "_widget_js" / "widgets")
    # the widgets' JavaScript, served by the site itself (html_static_path), in the order it must load
    config = yaml.safe_load((src / "_config.yml").read_text())
    config["sphinx"]["config"]["nb_ipywidgets_js"] = {path: {} for path in js}
    (src / "_config.yml").write_text(yaml.safe_dump(config, sort_keys=False, allow_unicode=True))
    return staged


def build(jupyter_book: str, src: Path, out: Path) -> None:
    """``jupyter-book build`` with warnings as errors, then the site check; the HTML lands in ``out``."""
    work = src / "_output"
    cmd = [jupyter_book, "build", str(src), "--builder", "html", "--path-output", str(work),
           "--warningiserror", "--nitpick", "--keep-going", "--quiet"]
    done = subprocess.run(cmd, check=False)
    if done.returncode != 0:
        raise SystemExit(f"site: jupyter-book failed (exit {done.returncode}); its warnings are above")
    html = work / "_build" / "html"
    if out.exists():
        shutil.rmtree(out)
    shutil.copytree(html, out)
    checker = _load_checker()
    problems = checker.check_site(out)
    if problems:
        raise SystemExit("site: the built site has problems:\n" + "\n".join(f"  {p}" for p in problems))


def _load_checker():
    spec = importlib.util.spec_from_file_location("check_site", SITE / "check_site.py")
    module = importlib.util.module_from_spec(spec)
    assert spec.loader is not None
    spec.loader.exec_module(module)
    return module


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jupyter-book", default=str(ROOT / "build" / "site-env" / "bin" / "jupyter-book"),
                        help="the jupyter-book (1.x) executable (make site installs it into build/site-env)")
    parser.add_argument("--out", default=str(ROOT / "build" / "site"), help="where the HTML goes")
    parser.add_argument("--src", default=str(ROOT / "build" / "site-src"), help="where the book's sources are staged")
    parser.add_argument("--cache", default=str(ROOT / "build" / "site-cache"), help="npm tarballs, kept between builds")
    args = parser.parse_args(argv)
    if not Path(args.jupyter_book).exists() and shutil.which(args.jupyter_book) is None:
        print(f"site: no jupyter-book at {args.jupyter_book}; run `make site`, which installs site/requirements.txt",
              file=sys.stderr)
        return 2
    t0 = time.perf_counter()
    staged = stage(Path(args.src), Path(args.cache))
    build(args.jupyter_book, Path(args.src), Path(args.out))
    missing = [name for name, nb in staged.items() if nb is None]
    print(f"site: {len(staged)} notebook pages ({len(staged) - len(missing)} with GPU outputs"
          + (f"; without outputs: {', '.join(missing)}" if missing else "") + f") built into {args.out} "
          f"in {time.perf_counter() - t0:.1f} s; open {Path(args.out) / 'index.html'} or run `make site-serve`")
    return 0


if __name__ == "__main__":
    sys.exit(main())
