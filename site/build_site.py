"""Build the course website (Jupyter Book 1): the current notebooks, with the outputs of an executed copy of them.

    make site                  # the same as below, with the pinned toolchain in build/site-env
    python site/build_site.py --jupyter-book build/site-env/bin/jupyter-book --out build/site \
        --executed build/executed

A page per notebook of ``notebooks/``: its text and code as they are now, with the outputs of an executed copy
of that same text. Where a GPU copy under ``reference/`` (listed in ``reference/copies.json``) has exactly the
notebook's cells, the page shows it; otherwise the CPU copy of this checkout in ``--executed`` (the ``ci`` sizes: two
gloo processes; run with Run All in JupyterLab by ``make test``, or executed here with papermill when it is missing
or stale: ``site/executed.py``, the folder ``make test`` writes, so each notebook runs once per CI run), its banner
saying so and linking the GPU
copies of older text with their commit. The build fails when a page's cells differ from its notebook's. Plus the
intro, the claims table (from ``nvtutorial.report.claims``) and where the numbers come from. The widgets' JavaScript
(``require.js`` and ``@jupyter-widgets/html-manager``) is downloaded from the npm registry (checked against its pinned
integrity) and served with the site, so every page, progress bars included, works offline. The build fails on any
Sphinx warning and on a broken internal link or a missing image (``check_site.py``).
"""

from __future__ import annotations

import argparse
import base64
import collections
import dataclasses
import hashlib
import importlib.util
import json
import re
import shutil
import subprocess
import sys
import tarfile
import time
import urllib.request
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import nbformat
import yaml

from nvtutorial.course import PLAN_MIME
from nvtutorial.report.verdict import MIME

ROOT = Path(__file__).resolve().parent.parent
SITE = ROOT / "site"
NOTEBOOKS = ROOT / "notebooks"
REFERENCE = ROOT / "reference"
COPIES = REFERENCE / "copies.json"
EXECUTED = ROOT / "build" / "executed"
GPU_COPIES_DIR = "gpu-copies"
"""Where the book's sources keep the GPU copies a page links (served as downloads)."""
VERDICT_MIME = MIME
"""A verdict's machine-readable output: read by the tests from executed copies, not shown on a page."""
MACHINE_MIMES = (VERDICT_MIME, PLAN_MIME)
"""The machine-readable outputs (a verdict's, a plan's: `nvtutorial course` lists plans in its summary): for the tests
and tools, not a page; MyST-NB warns of a mime type it cannot render, and a warning fails the build."""
PAGES = ("_config.yml", "_toc.yml", "intro.md", "favicon.svg")
"""The committed parts of the book; the rest is generated here."""

NPM_REGISTRY = "https://registry.npmjs.org"
WIDGET_PACKAGES = {
    "requirejs": (
        "requirejs/-/requirejs-2.3.8.tgz",
        "sha512-7/cTSLOdYkNBNJcDMWf+luFvMriVm7eYxp4BcFCsAX0wF421Vyce5SXP17c+Jd5otXKGNehIonFlyQXSowL6Mw==",
    ),
    "html-manager": (
        "@jupyter-widgets/html-manager/-/html-manager-1.0.15.tgz",
        "sha512-5thBIV6ymNgmPVOHvzx+gGy8ZSKmSazhtGw4/c4xJDVzRhG9PTeQsRjF3FUTopvFi//SABeNz1yp47bCrJ3CQA==",
    ),
}
"""The npm packages the saved widgets need in a page: each tarball's path on the npm registry and its ``integrity``
as the registry publishes it (``npm view <name>@<version> dist.integrity``), checked before use: no npm needed."""
WIDGET_JS = (
    ("requirejs", "package/require.js"),
    (None, "widgets-config.js"),
    ("html-manager", "package/dist/embed-amd.js"),
)
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


def _load(name: str):
    """A script of ``site/`` as a module (``site`` is a folder, not a package)."""
    spec = importlib.util.spec_from_file_location(f"site_{name}", SITE / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    assert spec.loader is not None
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


executed = _load("executed")


@dataclasses.dataclass
class Copy:
    """An executed copy of a notebook: a GPU copy from ``reference/`` or the CPU copy of this checkout."""

    path: Path
    kind: str  # "gpu" | "cpu"
    machine: str
    profile: str
    commit: str
    date: str = ""
    note: str = ""
    passed: bool | None = None
    duration_s: float | None = None
    current: bool = False
    shared: int = 0
    cells: int = 0

    @property
    def relpath(self) -> str:
        return self.path.relative_to(REFERENCE).as_posix() if self.kind == "gpu" else self.path.name


def gpu_copies(name: str, plain: nbformat.NotebookNode, index: Path = COPIES) -> list[Copy]:
    """Every GPU copy of notebook ``name`` that ``reference/copies.json`` lists, newest first, each with whether its
    cells are the notebook's (``current``) and how many of the notebook's cells it still has (``shared``)."""
    entries = json.loads(index.read_text())["copies"] if index.exists() else []
    found = []
    for e in entries:
        if e["notebook"] != name:
            continue
        path = REFERENCE / e["path"]
        if not path.is_file():
            raise SystemExit(f"site: {index} lists {e['path']}, which is not there")
        nb = nbformat.read(path, as_version=4)
        run = _summary_entry(REFERENCE / e["summary"], name) if e.get("summary") else {}
        found.append(
            Copy(
                path,
                "gpu",
                e["machine"],
                e["profile"],
                e["commit"],
                e.get("date", ""),
                e.get("note", ""),
                run.get("passed"),
                run.get("duration_s"),
                current=not executed.differences(nb, plain),
                shared=executed.shared(nb, plain),
                cells=len(executed.cells(plain)),
            )
        )
    return sorted(found, key=lambda c: c.date, reverse=True)


def _summary_entry(path: Path, name: str) -> dict:
    if not path.is_file():
        return {}
    summary = json.loads(path.read_text())
    return next((n for n in summary.get("notebooks", []) if Path(n["name"]).stem == name), {})


def _label_lines(labels: collections.Counter[str]) -> str:
    if not labels:
        return "No run on this page prints where it ran."
    lines = [f"- `{label}` ({n} time{'s' if n > 1 else ''})" for label, n in labels.most_common()]
    return "Where the runs on this page say they ran:\n\n" + "\n".join(lines)


def _download(c: Copy, prefix: str) -> str:
    """A MyST link that downloads the GPU copy (Sphinx serves it under ``_downloads/``)."""
    return f"{{download}}`{c.relpath} <{prefix}{GPU_COPIES_DIR}/{c.relpath}>`"


def _gpu_link(c: Copy) -> str:
    facts = [f"{c.profile} profile", f"commit `{c.commit}`"] + ([c.date] if c.date else [])
    return (
        f"{_download(c, '../')} ({c.machine}, {', '.join(facts)}"
        + (f"; {c.note}" if c.note else "")
        + f"; {c.shared} of the notebook's {c.cells} cells unchanged in it)"
    )


def provenance_cell(nb: nbformat.NotebookNode, shown: Copy, older: list[Copy]) -> nbformat.NotebookNode:
    """The note heading a notebook's page: which executed copy its outputs come from, where that ran, and (for a
    CPU copy) the GPU copies of older text, linked with their commit."""
    labels = run_labels(nb)
    failed = shown.passed is False
    facts = [f"with the `{shown.profile}` profile", f"from commit `{shown.commit}`"]
    if shown.duration_s:
        facts.append(f"in {shown.duration_s:.0f} s")
    if shown.kind == "gpu":
        title, cls = "GPU outputs of this very text", "warning" if failed else "note"
        head = (
            f"Executed on **{shown.machine}** {', '.join(facts)}"
            + (f" ({shown.note})" if shown.note else "")
            + (": **it failed there**" if failed else "")
            + ". "
            "Its cells are this notebook's text as it is now; the outputs are as they ran there."
        )
    else:
        title, cls = "CPU outputs: a simulation, not a GPU measurement", "warning"
        head = (
            f"This text has no GPU run yet. The outputs below were made **on the CPU** (two `gloo` processes "
            f"standing in for the GPUs, small sizes) {', '.join(facts)}, from exactly the text shown: correctness, "
            f"counts and code paths are real, timings are not GPU timings. Paths in them name the checkout "
            f"`{REPO}`." + (" **It failed there.**" if failed else "")
        )
    text = f"```{{admonition}} {title}\n:class: {cls}\n{head}\n\n{_label_lines(labels)}"
    if older:
        text += (
            "\n\nGPU runs of an older text of this notebook (their numbers are real, some of their text has "
            "changed since):\n\n" + "\n".join(f"- {_gpu_link(c)}" for c in older)
        )
    elif shown.kind == "cpu":
        text += "\n\nThis notebook has no GPU run in `reference/` yet."
    return nbformat.v4.new_markdown_cell(text + "\n```")


REPO = "$REPO"
"""What the pages write for the folder of the checkout that executed them (tracebacks, scripts, run folders)."""


def _without_root(out: nbformat.NotebookNode) -> None:
    """Replace this checkout's absolute path in an output's text with :data:`REPO`."""
    root = str(ROOT)

    def clean(value):
        if isinstance(value, str):
            return value.replace(root, REPO)
        if isinstance(value, list):
            return [clean(v) for v in value]
        return value

    for key in ("text", "traceback", "evalue"):
        if key in out:
            out[key] = clean(out[key])
    for mime in ("text/plain", "text/markdown", "text/html"):
        if mime in out.get("data", {}):
            out["data"][mime] = clean(out["data"][mime])


def page(
    plain: nbformat.NotebookNode, copy_nb: nbformat.NotebookNode, shown: Copy, older: list[Copy]
) -> nbformat.NotebookNode:
    """The notebook as the site shows it: the executed copy's cells (which are the notebook's), without papermill's
    injected parameters (the banner names the profile), headed by where its outputs come from."""
    problems = executed.differences(copy_nb, plain)
    if problems:
        raise SystemExit(f"site: the copy {shown.path} is not the notebook's text: {'; '.join(problems)}")
    nb = nbformat.from_dict(copy_nb)
    nb.cells = [c for c in nb.cells if executed.INJECTED not in c.get("metadata", {}).get("tags", [])]
    for c in nb.cells:
        for out in c.get("outputs", []):
            for mime in MACHINE_MIMES:  # the machine-readable copies are for the tests and tools
                out.get("data", {}).pop(mime, None)
            _without_root(out)
    cell = provenance_cell(nb, shown, older)
    cell["id"] = executed.SITE_CELL
    nb.cells.insert(1, cell)
    return nb


def learning_path(readme: Path = ROOT / "README.md") -> str:
    """The README's learning-path table, each notebook name linked to its page."""
    match = re.search(r"^## Learning path\n\n(\|.*?)\n\n", readme.read_text(), re.MULTILINE | re.DOTALL)
    if not match:
        raise SystemExit(f"site: {readme} has no '## Learning path' table to show on the intro page")
    return re.sub(
        r"^\| `(\d\d_\w+)` \|",
        lambda m: f"| [{m.group(1)}](notebooks/{m.group(1)}.ipynb) |",
        match.group(1),
        flags=re.MULTILINE,
    )


def claims_page() -> str:
    """The claims page: the registry's markdown table, each notebook linked to its page."""
    from nvtutorial.report import claims

    counts = collections.Counter(c.status for c in claims.CLAIMS)
    table = claims.markdown_table(link=lambda c: f"[{c.notebook}](notebooks/{c.notebook}.ipynb)")
    tally = ", ".join(f"{n} {status}" for status, n in counts.most_common())
    return (
        f"# The source's {len(claims.CLAIMS)} claims\n\n"
        "The course follows a Chinese blog tutorial on dual-GPU training with NVLink, and audits each of its "
        f"claims by measurement or from a primary source. Verdicts: {tally}. The evidence column says how "
        "each was settled; the notebook named shows it.\n\n" + table + "\n"
    )


def hardware_page(
    shown: dict[str, Copy], older: dict[str, list[Copy]], labels: dict[str, collections.Counter[str]]
) -> str:
    """Where the site's numbers come from: per page, the copy it shows and the GPU copies of older text; then the
    reference machines as they described themselves."""
    rows = [
        "| page | outputs | from commit | where its runs say they ran | GPU runs of an older text |",
        "| --- | --- | --- | --- | --- |",
    ]
    for name, c in shown.items():
        outputs = (
            f"GPU copy `reference/{c.relpath}` ({c.machine}, {c.profile} profile)"
            if c.kind == "gpu"
            else f"CPU, executed by this build ({c.profile} profile)"
        )
        where = "; ".join(f"`{label}` ×{n}" for label, n in labels[name].most_common()) or "none printed"
        old = "; ".join(f"{_download(o, '')} (`{o.commit}`, {o.shared}/{o.cells} cells)" for o in older[name]) or "none"
        rows.append(f"| [{name}](notebooks/{name}.ipynb) | {outputs} | `{c.commit}` | {where} | {old} |")
    machines = []
    for folder, title in (("h200x2", "2× NVIDIA H200"), ("h200x1", "1× NVIDIA H200")):
        machine = REFERENCE / folder / "machine.txt"
        if machine.exists():
            text = re.sub(r"\x1b\[[0-9;]*m", "", machine.read_text()).rstrip()
            machines.append(f"### {title} (`reference/{folder}/`)\n\n```text\n{text}\n```\n")
    return (
        "# Where the numbers come from\n\n"
        "Every page shows the notebook's text as it is now, with the outputs of an executed copy of exactly that "
        "text: a GPU copy from `reference/` where one exists, else the CPU simulation executed by this build (two "
        "`gloo` processes, small sizes: real code paths and counts, no GPU timings). Every run prints where it ran "
        "(`RunResult.label`), and no CPU number is offered as a GPU lesson. GPU runs of an older text are linked "
        "from each page with the commit they ran from.\n\n## Each page\n\n" + "\n".join(rows) + "\n\n"
        "## The reference machines, as they described themselves\n\n" + "\n".join(machines)
    )


def npm_tarball(path: str, integrity: str, cache: Path) -> Path:
    """The registry's tarball at ``path``, downloaded once into ``cache`` and checked against ``integrity``."""
    cache.mkdir(parents=True, exist_ok=True)
    tarball = cache / path.rsplit("/", 1)[1]
    if not tarball.exists():
        url = f"{NPM_REGISTRY}/{path}"
        try:
            with urllib.request.urlopen(url, timeout=60) as response:
                data = response.read()
        except OSError as e:
            raise SystemExit(f"site: could not fetch the widgets' JavaScript from {url}: {e}") from e
        algorithm, digest = integrity.split("-", 1)
        if base64.b64encode(hashlib.new(algorithm, data).digest()).decode() != digest:
            raise SystemExit(f"site: {url} is not the tarball its integrity ({integrity}) names")
        tarball.write_bytes(data)
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
    tarballs = {key: npm_tarball(path, integrity, cache) for key, (path, integrity) in WIDGET_PACKAGES.items()}
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


def execute(names: list[str], folder: Path, jobs: int = 2) -> dict[str, float]:
    """Execute the notebooks ``names`` on the CPU with the ``ci`` profile into ``folder`` (``nvtutorial course``,
    ``jobs`` at a time: each keeps about one core busy); the seconds each took. Fails the build, with the
    notebook's error, when one does not run through."""

    def one(name: str) -> tuple[str, float, subprocess.CompletedProcess]:
        t0 = time.perf_counter()
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "nvtutorial.cli",
                "course",
                "--only",
                Path(name).stem,
                "--profile",
                "ci",
                "--out",
                str(folder),
            ],
            cwd=ROOT,
            capture_output=True,
            text=True,
            check=False,
        )
        return name, time.perf_counter() - t0, done

    took = {}
    print(
        f"site: executing {len(names)} notebook(s) on the CPU into {folder} ({jobs} at a time): {', '.join(names)}",
        flush=True,
    )
    with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        for name, seconds, done in pool.map(one, names):
            print(f"site:   {name}: {'passed' if done.returncode == 0 else 'FAILED'} in {seconds:.0f} s", flush=True)
            if done.returncode != 0:
                raise SystemExit(
                    f"site: {name} failed to execute; its copy is {folder / name}\n{done.stdout[-3000:]}"
                    f"{done.stderr[-2000:]}"
                )
            took[name] = seconds
    return took


def choose(
    plain_dir: Path,
    folder: Path,
    fresh: bool = False,
    jobs: int = 2,
    run: Callable[[list[str], Path, int], dict[str, float]] | None = execute,
) -> dict[str, tuple[Copy, list[Copy]]]:
    """For each notebook: the copy its page shows (a current GPU copy, else this checkout's CPU copy in ``folder``,
    executed now if missing or stale; with ``run=None`` a missing copy fails the build) and the GPU copies of older
    text."""
    plains = {p.stem: nbformat.read(p, as_version=4) for p in sorted(plain_dir.glob("*.ipynb"))}
    if not plains:
        raise SystemExit(f"site: no notebooks in {plain_dir}")
    gpu = {name: gpu_copies(name, nb) for name, nb in plains.items()}
    executed.prune(folder, everything=fresh, notebooks=plain_dir)
    need = [name for name in plains if not any(c.current for c in gpu[name])]
    missing = [f"{name}.ipynb" for name in need if not executed.is_current(folder, f"{name}.ipynb", plain_dir)]
    if missing and run is None:
        raise SystemExit(
            f"site: no current executed copy of {', '.join(missing)} in {folder}, and executing is off "
            "(--no-execute): run `make test` first, or build without --no-execute"
        )
    took = run(missing, folder, jobs) if missing else {}
    stamp = executed.read_stamp(folder)
    commit = f"{stamp.get('commit', '?')}{' with local changes' if stamp.get('dirty') else ''}"
    out = {}
    for name, nb in plains.items():
        current = [c for c in gpu[name] if c.current]
        if current:
            out[name] = (current[0], [c for c in gpu[name] if not c.current])
            continue
        path = folder / f"{name}.ipynb"
        cpu = Copy(
            path,
            "cpu",
            "this machine's CPU",
            "ci",
            commit,
            passed=True,
            duration_s=took.get(path.name),
            current=True,
            shared=len(executed.cells(nb)),
            cells=len(executed.cells(nb)),
        )
        out[name] = (cpu, gpu[name])
    return out


def stage(
    src: Path,
    cache: Path,
    folder: Path = EXECUTED,
    fresh: bool = False,
    jobs: int = 2,
    run: Callable[[list[str], Path, int], dict[str, float]] | None = execute,
) -> dict[str, Copy]:
    """Write the book's sources into ``src``; return the copy each notebook's page shows."""
    if src.exists():
        shutil.rmtree(src)
    (src / "notebooks").mkdir(parents=True)
    for name in PAGES:
        shutil.copy(SITE / name, src / name)
    intro = (src / "intro.md").read_text()
    (src / "intro.md").write_text(intro.replace("<!-- learning-path -->", learning_path()))
    chosen = choose(NOTEBOOKS, folder, fresh, jobs, run)
    labels = {}
    for name, (shown, older) in chosen.items():
        nb = page(
            nbformat.read(NOTEBOOKS / f"{name}.ipynb", as_version=4),
            nbformat.read(shown.path, as_version=4),
            shown,
            older,
        )
        labels[name] = run_labels(nb)
        nbformat.write(nb, src / "notebooks" / f"{name}.ipynb")
        for c in older:  # served as files, for the banner's links
            target = src / GPU_COPIES_DIR / c.relpath  # a download (only the toc's files are pages)
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(c.path, target)
    (src / "claims.md").write_text(claims_page())
    (src / "hardware.md").write_text(
        hardware_page({n: s for n, (s, _) in chosen.items()}, {n: o for n, (_, o) in chosen.items()}, labels)
    )
    write_favicon(src / "_extra" / "favicon.ico")
    js = fetch_widget_js(cache, src / "_widget_js" / "widgets")
    # the widgets' JavaScript, served by the site itself (html_static_path), in the order it must load
    config = yaml.safe_load((src / "_config.yml").read_text())
    config["sphinx"]["config"]["nb_ipywidgets_js"] = {path: {} for path in js}
    (src / "_config.yml").write_text(yaml.safe_dump(config, sort_keys=False, allow_unicode=True))
    return {n: s for n, (s, _) in chosen.items()}


def build(jupyter_book: str, src: Path, out: Path) -> None:
    """``jupyter-book build`` with warnings as errors, then the site check; the HTML lands in ``out``."""
    work = src / "_output"
    cmd = [
        jupyter_book,
        "build",
        str(src),
        "--builder",
        "html",
        "--path-output",
        str(work),
        "--warningiserror",
        "--nitpick",
        "--keep-going",
        "--quiet",
    ]
    done = subprocess.run(cmd, check=False)
    if done.returncode != 0:
        raise SystemExit(f"site: jupyter-book failed (exit {done.returncode}); its warnings are above")
    html = work / "_build" / "html"
    if out.exists():
        shutil.rmtree(out)
    shutil.copytree(html, out)
    checker = _load("check_site")
    problems = checker.check_site(out) + checker.check_pages(out, NOTEBOOKS)
    if problems:
        raise SystemExit("site: the built site has problems:\n" + "\n".join(f"  {p}" for p in problems))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--jupyter-book",
        default=str(ROOT / "build" / "site-env" / "bin" / "jupyter-book"),
        help="the jupyter-book (1.x) executable (make site installs it into build/site-env)",
    )
    parser.add_argument("--out", default=str(ROOT / "build" / "site"), help="where the HTML goes")
    parser.add_argument("--src", default=str(ROOT / "build" / "site-src"), help="where the book's sources are staged")
    parser.add_argument(
        "--cache", default=str(ROOT / "build" / "site-cache"), help="the widgets' npm tarballs, kept between builds"
    )
    parser.add_argument(
        "--executed",
        default=str(EXECUTED),
        help="the executed copies shared with `make test` (site/executed.py); missing or stale ones "
        "are executed into it",
    )
    parser.add_argument("--fresh", action="store_true", help="execute every notebook again (no copy is reused)")
    parser.add_argument("--jobs", type=int, default=2, help="notebooks executed at once (default 2)")
    parser.add_argument(
        "--no-execute",
        action="store_true",
        help="execute nothing: every page needs a current copy already (e.g. `make test`'s)",
    )
    args = parser.parse_args(argv)
    if not Path(args.jupyter_book).exists() and shutil.which(args.jupyter_book) is None:
        print(
            f"site: no jupyter-book at {args.jupyter_book}; run `make site`, which installs site/requirements.txt",
            file=sys.stderr,
        )
        return 2
    t0 = time.perf_counter()
    shown = stage(
        Path(args.src),
        Path(args.cache),
        Path(args.executed),
        args.fresh,
        args.jobs,
        None if args.no_execute else execute,
    )
    built = time.perf_counter()
    build(args.jupyter_book, Path(args.src), Path(args.out))
    gpu = [n for n, c in shown.items() if c.kind == "gpu"]
    cpu = [n for n, c in shown.items() if c.kind == "cpu"]
    print(
        f"site: {len(shown)} notebook pages ({len(gpu)} with GPU outputs of the current text"
        + (f": {', '.join(gpu)}" if gpu else "")
        + f"; {len(cpu)} with CPU outputs of this checkout) built into "
        f"{args.out} in {time.perf_counter() - t0:.0f} s ({built - t0:.0f} s of it staging, executions included); "
        f"open {Path(args.out) / 'index.html'} or run `make site-serve`"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
