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
from typing import cast

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
PAGES = ("_config.yml", "_toc.yml", "intro.md", "favicon.svg", "_templates/lang-switch.html")
"""The committed parts of the book; the rest is generated here."""
ZH = "zh"
"""The Chinese book: its sources beside the English ones (``build/site-src-zh``), its HTML in the site's ``zh/``."""
ZH_NOTEBOOKS = NOTEBOOKS / ZH
"""The Chinese notebooks (``scripts/translate_notebooks.py``): the English code cells, byte for byte, same cell ids."""
ZH_INTRO = SITE / "intro.zh.md"
CLAIMS_ZH = SITE / "claims.zh.yml"
"""The claims table's Chinese words: the source blog's own wording of each claim and the translated findings."""
README_ZH = ROOT / "README.zh-CN.md"
ZH_TITLE = "nvtutorial：在 PyTorch 中用好两块 NVLink 互连的 GPU"
ZH_CAPTIONS = {"The course": "课程", "The audit": "审查"}
"""The Chinese book's table of contents: ``_toc.yml`` with these captions."""

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


TEXT = {
    "en": {
        "no_label": "No run on this page prints where it ran.",
        "labels": "Where the runs on this page say they ran:",
        "label": lambda label, n: f"- `{label}` ({n} time{'s' if n > 1 else ''})",
        "profile": lambda p: f"{p} profile",
        "commit": lambda c: f"commit `{c}`",
        "shared": lambda shared, cells: f"{shared} of the notebook's {cells} cells unchanged in it",
        "with_profile": lambda p: f"with the `{p}` profile",
        "from_commit": lambda c: f"from commit `{c}`",
        "in_s": lambda s: f"in {s:.0f} s",
        "gpu_title": "GPU outputs of this very text",
        "gpu_head": lambda machine, facts, note, failed: (
            f"Executed on **{machine}** {facts}"
            + (f" ({note})" if note else "")
            + (": **it failed there**" if failed else "")
            + ". Its cells are this notebook's text as it is now; the outputs are as they ran there."
        ),
        "cpu_title": "CPU outputs: a simulation, not a GPU measurement",
        "cpu_head": lambda facts, failed: (
            "This text has no GPU run yet. The outputs below were made **on the CPU** (two `gloo` processes "
            f"standing in for the GPUs, small sizes) {facts}, from exactly the text shown: correctness, "
            "counts and code paths are real, timings are not GPU timings. Paths in them name the checkout "
            f"`{REPO}`." + (" **It failed there.**" if failed else "")
        ),
        "older": "GPU runs of an older text of this notebook (their numbers are real, some of their text has "
        "changed since):",
        "no_gpu": "This notebook has no GPU run in `reference/` yet.",
        "sep": ", ",
    },
    "zh": {
        "no_label": "本页没有一次运行打印出它在哪里运行。",
        "labels": "本页各次运行自述的运行位置：",
        "label": lambda label, n: f"- `{label}`（{n} 次）",
        "profile": lambda p: f"`{p}` 配置",
        "commit": lambda c: f"提交 `{c}`",
        "shared": lambda shared, cells: f"本 notebook 现有的 {cells} 个单元格中，有 {shared} 个在这份副本中未变",
        "with_profile": lambda p: f"使用 `{p}` 配置",
        "from_commit": lambda c: f"来自提交 `{c}`",
        "in_s": lambda s: f"用时 {s:.0f} 秒",
        "gpu_title": "本页正文的 GPU 输出",
        "gpu_head": lambda machine, facts, note, failed: (
            f"在 **{machine}** 上执行（{facts}"
            + (f"；{note}" if note else "")
            + "）"
            + ("：**它在那里失败了**" if failed else "")
            + "。它的单元格就是本 notebook 现在的正文；输出保持它在那里运行时的原样。"
        ),
        "cpu_title": "CPU 输出：这是模拟，不是 GPU 测量",
        "cpu_head": lambda facts, failed: (
            "这段正文还没有 GPU 运行。下面的输出是**在 CPU 上**得到的（两个 `gloo` 进程代替两块 GPU，小规模；"
            f"{facts}），执行的正是页面所示的正文：正确性、计数和代码路径是真实的，计时不是 GPU 计时。输出中的路径以 "
            f"`{REPO}` 指代执行它的仓库检出目录。" + ("**它在那里失败了。**" if failed else "")
        ),
        "older": "本 notebook 旧版正文的 GPU 运行（其中的数字是真实的，但部分正文此后已有改动）：",
        "no_gpu": "本 notebook 在 `reference/` 中还没有 GPU 运行。",
        "sep": "，",
    },
}
"""The words the site adds to a page (its provenance note), in each language of the site."""


def _label_lines(labels: collections.Counter[str], lang: str = "en") -> str:
    t = TEXT[lang]
    if not labels:
        return t["no_label"]
    lines = [t["label"](label, n) for label, n in labels.most_common()]
    return t["labels"] + "\n\n" + "\n".join(lines)


def _download(c: Copy, prefix: str) -> str:
    """A MyST link that downloads the GPU copy (Sphinx serves it under ``_downloads/``)."""
    return f"{{download}}`{c.relpath} <{prefix}{GPU_COPIES_DIR}/{c.relpath}>`"


def _gpu_link(c: Copy, lang: str = "en") -> str:
    t = TEXT[lang]
    facts = [t["profile"](c.profile), t["commit"](c.commit)] + ([c.date] if c.date else [])
    if lang == "zh":
        return (
            f"{_download(c, '../')}（{c.machine}，{'，'.join(facts)}"
            + (f"；{c.note}" if c.note else "")
            + f"；{t['shared'](c.shared, c.cells)}）"
        )
    return (
        f"{_download(c, '../')} ({c.machine}, {', '.join(facts)}"
        + (f"; {c.note}" if c.note else "")
        + f"; {t['shared'](c.shared, c.cells)})"
    )


def provenance_cell(
    nb: nbformat.NotebookNode, shown: Copy, older: list[Copy], lang: str = "en"
) -> nbformat.NotebookNode:
    """The note heading a notebook's page: which executed copy its outputs come from, where that ran, and (for a
    CPU copy) the GPU copies of older text, linked with their commit; in the page's language (``en``, ``zh``)."""
    t = TEXT[lang]
    labels = run_labels(nb)
    failed = shown.passed is False
    facts = [t["with_profile"](shown.profile), t["from_commit"](shown.commit)]
    if shown.duration_s:
        facts.append(t["in_s"](shown.duration_s))
    if shown.kind == "gpu":
        title, cls = t["gpu_title"], "warning" if failed else "note"
        head = t["gpu_head"](shown.machine, t["sep"].join(facts), shown.note, failed)
    else:
        title, cls = t["cpu_title"], "warning"
        head = t["cpu_head"](t["sep"].join(facts), failed)
    text = f"```{{admonition}} {title}\n:class: {cls}\n{head}\n\n{_label_lines(labels, lang)}"
    if older:
        text += "\n\n" + t["older"] + "\n\n" + "\n".join(f"- {_gpu_link(c, lang)}" for c in older)
    elif shown.kind == "cpu":
        text += "\n\n" + t["no_gpu"]
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


def translated(
    en_page: nbformat.NotebookNode,
    plain: nbformat.NotebookNode,
    zh: nbformat.NotebookNode,
    provenance: nbformat.NotebookNode,
    name: str = "",
) -> nbformat.NotebookNode:
    """The Chinese page of a notebook: the English page (:func:`page`: the same executed copy, its outputs as they
    are) with each markdown cell replaced by the Chinese notebook's cell of the same id, and ``provenance`` (the note
    in Chinese) at the top. Nothing is executed again: a Chinese notebook's code cells are the English ones, byte for
    byte, with the same ids; the build fails when they are not (the Chinese notebook is not current)."""
    body = [c for c in en_page.cells if c.get("id") != executed.SITE_CELL]
    fix = f"notebooks/zh/{name}.ipynb is not the translation of today's notebook: run `make zh-update zh-build`"
    if len(body) != len(plain.cells) or len(zh.cells) != len(plain.cells):
        raise SystemExit(f"site: {fix} ({len(zh.cells)} cells, the English notebook has {len(plain.cells)})")
    by_id = {c.get("id"): c for c in zh.cells}
    nb = cast(nbformat.NotebookNode, nbformat.from_dict(en_page))
    cells = [c for c in nb.cells if c.get("id") != executed.SITE_CELL]
    for shown, en in zip(cells, plain.cells, strict=True):
        zh_cell = by_id.get(en.get("id"))
        if (
            zh_cell is None
            or zh_cell.cell_type != en.cell_type
            or (en.cell_type == "code" and zh_cell.source != en.source)
        ):
            raise SystemExit(f"site: {fix} (cell {en.get('id')})")
        shown["id"] = en["id"]
        if en.cell_type != "code":
            shown.source = zh_cell.source
            if "attachments" in zh_cell:
                shown["attachments"] = zh_cell["attachments"]
    provenance["id"] = executed.SITE_CELL
    nb.cells = [cells[0], provenance, *cells[1:]]
    return nb


def learning_path(readme: Path = ROOT / "README.md", heading: str = "Learning path") -> str:
    """The README's learning-path table (``README.zh-CN.md``'s for the Chinese intro), each notebook name linked to
    its page."""
    text = readme.read_text()
    match = re.search(rf"^## {re.escape(heading)}\n(?:<!--.*?-->\n)?\n(\|.*?)\n\n", text, re.MULTILINE | re.DOTALL)
    if not match:
        raise SystemExit(f"site: {readme} has no '## {heading}' table to show on the intro page")
    return re.sub(
        r"^\| `(\d\d_\w+)` \|",
        lambda m: f"| [{m.group(1)}](notebooks/{m.group(1)}.ipynb) |",
        match.group(1),
        flags=re.MULTILINE,
    )


def _table_cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


STATUS_ZH = {"holds": "成立", "partly": "部分成立", "wrong": "错误", "unverifiable": "无法验证"}
"""The verdicts in Chinese (locale/zh_CN/glossary.tsv); the table keeps the English word beside, as printed."""
EVIDENCE_ZH = {
    "2× H200 run": "2× H200 运行",
    "CPU run": "CPU 运行",
    "primary source": "一手资料",
    "vendor data": "厂商数据",
    "pending a 2× H200 run": "待 2× H200 运行",
}


def claims_zh(path: Path = CLAIMS_ZH) -> dict[str, dict]:
    """The Chinese words of each claim (``site/claims.zh.yml``), checked against the registry: an entry whose English
    differs from ``claims.py``'s (stale), a claim with no entry (missing) or an entry of no claim fails the build."""
    from nvtutorial.report import claims

    entries = yaml.safe_load(path.read_text()) or {}
    problems = [f"{c.id} has no entry" for c in claims.CLAIMS if c.id not in entries]
    problems += [f"{key} is no claim of claims.py" for key in entries if key not in claims.BY_ID]
    for c in claims.CLAIMS:
        e = entries.get(c.id)
        if e is None:
            continue
        for field in ("source", "finding"):
            if e.get(field) != getattr(c, field):
                problems.append(
                    f"{c.id}: its {field} changed in claims.py (now {getattr(c, field)!r}): revise {field}_zh, "
                    f"then copy the new English into {field}"
                )
        if not e.get("source_zh") or not e.get("finding_zh") or not isinstance(e.get("quoted"), bool):
            problems.append(f"{c.id}: source_zh, finding_zh and quoted (true/false) are needed")
    if problems:
        raise SystemExit(f"site: {path.name} is not current:\n" + "\n".join(f"  {p}" for p in problems))
    return entries


def claims_table_zh(link: Callable | None = None) -> str:
    """The claims table in Chinese (the site's claims page, and ``README.zh-CN.md`` between its markers);
    ``link(claim)`` may turn the notebook name into a link."""
    from nvtutorial.report import claims

    zh = claims_zh()
    rows = ["| # | 原文 | 判定 | 事实是什么 | 证据 | 见于 |", "| --- | --- | --- | --- | --- | --- |"]
    for c in claims.CLAIMS:
        e = zh[c.id]
        said = _table_cell(e["source_zh"]) + ("" if e["quoted"] else "（译自英文概述）")
        rows.append(
            f"| {c.id} | {said} | **{STATUS_ZH[c.status]}**（{c.status}） | {_table_cell(e['finding_zh'])} | "
            f"{EVIDENCE_ZH[c.evidence]} | {link(c) if link else f'`{c.notebook}`'} |"
        )
    return "\n".join(rows)


README_BLOCKS = {
    "claims-table-zh": (
        "<!-- claims-table-zh: start (generated by `python site/build_site.py --readme-zh`; do not edit) -->",
        "<!-- claims-table-zh: end -->",
    ),
    "fault-table": (
        "<!-- fault-table: start (generated by scripts/fault_table.py from tests/launch/test_faults.py; "
        "do not edit) -->",
        "<!-- fault-table: end -->",
    ),
}
"""The generated blocks of ``README.zh-CN.md``: the claims table in Chinese, and the fault table as README.md has
it (the launcher's messages are English until they go through a message catalog)."""


def _block(text: str, name: str) -> str:
    start, end = README_BLOCKS[name]
    head = start.split(" (")[0]
    if head not in text or end not in text:
        raise SystemExit(f"site: no {name} markers ({start!r} ... {end!r})")
    return text[text.index(head) : text.index(end) + len(end)]


def readme_zh_blocks(readme: Path = ROOT / "README.md") -> dict[str, str]:
    """What ``README.zh-CN.md``'s generated blocks must be now, markers included."""
    start, end = README_BLOCKS["claims-table-zh"]
    return {
        "claims-table-zh": f"{start}\n{claims_table_zh()}\n{end}",
        "fault-table": _block(readme.read_text(), "fault-table"),
    }


def update_readme_zh(path: Path = README_ZH) -> bool:
    """Write :func:`readme_zh_blocks` into ``README.zh-CN.md``; True when it changed."""
    text = path.read_text()
    new = text
    for name, block in readme_zh_blocks().items():
        new = new.replace(_block(new, name), block)
    if new != text:
        path.write_text(new)
    return new != text


def claims_page(lang: str = "en") -> str:
    """The claims page: the registry's markdown table, each notebook linked to its page; in Chinese, the source's
    own words (``site/claims.zh.yml``) and the translated findings."""
    from nvtutorial.report import claims

    counts = collections.Counter(c.status for c in claims.CLAIMS)
    link = lambda c: f"[{c.notebook}](notebooks/{c.notebook}.ipynb)"  # noqa: E731
    if lang == "zh":
        rows = claims_table_zh(link)
        tally = "，".join(f"{n} 条{STATUS_ZH[status]}" for status, n in counts.most_common())
        return (
            f"# 原文的 {len(claims.CLAIMS)} 条论断\n\n"
            "本课程依循一篇关于用 NVLink 进行双卡训练的中文博客教程，通过测量或一手资料逐一审查它的论断。"
            f"判定：{tally}。“证据”一栏说明每条是如何判定的；“见于”一栏的 notebook 展示判定它的运行或资料。\n\n"
            "“原文”一栏引用的是中文原博客的原话：那是原文，英文版网站同一栏的英文是它的概述（原博客的文字在提取时丢失了"
            "大部分标点，这里补回；“……”表示略去了与该论断无关的原文）。标注“译自英文概述”的条目在原博客中"
            "没有对应的原话。“事实是什么”一栏译自课程的英文版；判定在表中保留英文原词（notebook 打印的就是它）。\n\n"
            + rows
            + "\n"
        )
    table = claims.markdown_table(link=link)
    tally = ", ".join(f"{n} {status}" for status, n in counts.most_common())
    return (
        f"# The source's {len(claims.CLAIMS)} claims\n\n"
        "The course follows a Chinese blog tutorial on dual-GPU training with NVLink, and audits each of its "
        f"claims by measurement or from a primary source. Verdicts: {tally}. The evidence column says how "
        "each was settled; the notebook named shows it.\n\n" + table + "\n"
    )


def hardware_page(
    shown: dict[str, Copy],
    older: dict[str, list[Copy]],
    labels: dict[str, collections.Counter[str]],
    lang: str = "en",
) -> str:
    """Where the site's numbers come from: per page, the copy it shows and the GPU copies of older text; then the
    reference machines as they described themselves (in English or, ``lang="zh"``, in Chinese)."""
    zh = lang == "zh"
    rows = [
        "| 页面 | 输出 | 来自提交 | 其运行自述的运行位置 | 旧版正文的 GPU 运行 |"
        if zh
        else "| page | outputs | from commit | where its runs say they ran | GPU runs of an older text |",
        "| --- | --- | --- | --- | --- |",
    ]
    for name, c in shown.items():
        if zh:
            outputs = (
                f"GPU 副本 `reference/{c.relpath}`（{c.machine}，`{c.profile}` 配置）"
                if c.kind == "gpu"
                else f"CPU，由本次构建执行（`{c.profile}` 配置）"
            )
            where = "；".join(f"`{label}` ×{n}" for label, n in labels[name].most_common()) or "没有打印"
            old = (
                "；".join(f"{_download(o, '')}（`{o.commit}`，{o.shared}/{o.cells} 个单元格）" for o in older[name])
                or "无"
            )
        else:
            outputs = (
                f"GPU copy `reference/{c.relpath}` ({c.machine}, {c.profile} profile)"
                if c.kind == "gpu"
                else f"CPU, executed by this build ({c.profile} profile)"
            )
            where = "; ".join(f"`{label}` ×{n}" for label, n in labels[name].most_common()) or "none printed"
            old = (
                "; ".join(f"{_download(o, '')} (`{o.commit}`, {o.shared}/{o.cells} cells)" for o in older[name])
                or "none"
            )
        rows.append(f"| [{name}](notebooks/{name}.ipynb) | {outputs} | `{c.commit}` | {where} | {old} |")
    machines = []
    for folder, title in (("h200x2", "2× NVIDIA H200"), ("h200x1", "1× NVIDIA H200")):
        machine = REFERENCE / folder / "machine.txt"
        if machine.exists():
            text = re.sub(r"\x1b\[[0-9;]*m", "", machine.read_text()).rstrip()
            where = f"（`reference/{folder}/`）" if zh else f" (`reference/{folder}/`)"
            machines.append(f"### {title}{where}\n\n```text\n{text}\n```\n")
    if zh:
        return (
            "# 数字从何而来\n\n"
            "每个页面都是 notebook 现在的正文，配上一份执行副本的输出（执行的正是这段正文）："
            "有 `reference/` 中的 GPU 副本时用它，否则用本次构建执行的 CPU 模拟"
            "（两个 `gloo` 进程，小规模：代码路径和计数是真实的，没有 GPU 计时）。每次运行"
            "都打印它在哪里运行（`RunResult.label`），任何 CPU 上的数字都不会被当作关于 GPU 的结论。"
            "旧版正文的 GPU 运行从各页面链接，并注明其运行所用的提交。"
            "中文页面与英文页面用的是同一份执行副本的输出（中文 notebook 的代码单元格"
            "与英文的逐字节相同），不会再次执行。\n\n## 各页面\n\n" + "\n".join(rows) + "\n\n"
            "## 参考机器的自述\n\n" + "\n".join(machines)
        )
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


def zh_src(src: Path) -> Path:
    """Where the Chinese book's sources are staged, beside the English book's ``src``."""
    return src.with_name(f"{src.name}-{ZH}")


def _book(src: Path, cache: Path, intro: str, lang: str) -> None:
    """The parts of a book that are not its notebook pages: the committed files, the intro, the favicon, the widgets'
    JavaScript (served by the site itself, html_static_path, in the order it must load) and, for the Chinese book,
    its title, language and captions."""
    if src.exists():
        shutil.rmtree(src)
    (src / "notebooks").mkdir(parents=True)
    for name in PAGES:
        (src / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(SITE / name, src / name)
    (src / "intro.md").write_text(intro)
    write_favicon(src / "_extra" / "favicon.ico")
    js = fetch_widget_js(cache, src / "_widget_js" / "widgets")
    config = yaml.safe_load((src / "_config.yml").read_text())
    config["sphinx"]["config"]["nb_ipywidgets_js"] = {path: {} for path in js}
    if lang == ZH:
        config["title"] = ZH_TITLE
        config["sphinx"]["config"]["language"] = "zh_CN"  # the theme's own words (search, contents...) in Chinese
        toc = yaml.safe_load((src / "_toc.yml").read_text())
        for part in toc["parts"]:
            part["caption"] = ZH_CAPTIONS[part["caption"]]
        (src / "_toc.yml").write_text(yaml.safe_dump(toc, sort_keys=False, allow_unicode=True))
    (src / "_config.yml").write_text(yaml.safe_dump(config, sort_keys=False, allow_unicode=True))


def stage(
    src: Path,
    cache: Path,
    folder: Path = EXECUTED,
    fresh: bool = False,
    jobs: int = 2,
    run: Callable[[list[str], Path, int], dict[str, float]] | None = execute,
) -> dict[str, Copy]:
    """Write the English book's sources into ``src`` and the Chinese book's into :func:`zh_src`; return the copy each
    notebook's page shows (both languages show the same copy)."""
    zsrc = zh_src(src)
    intro = SITE.joinpath("intro.md").read_text().replace("<!-- learning-path -->", learning_path())
    _book(src, cache, intro, "en")
    intro_zh = ZH_INTRO.read_text().replace("<!-- learning-path -->", learning_path(README_ZH, "学习路线"))
    _book(zsrc, cache, intro_zh, ZH)
    chosen = choose(NOTEBOOKS, folder, fresh, jobs, run)
    labels = {}
    for name, (shown, older) in chosen.items():
        plain = nbformat.read(NOTEBOOKS / f"{name}.ipynb", as_version=4)
        nb = page(plain, nbformat.read(shown.path, as_version=4), shown, older)
        labels[name] = run_labels(nb)
        nbformat.write(nb, src / "notebooks" / f"{name}.ipynb")
        zh = translated(
            nb,
            plain,
            nbformat.read(ZH_NOTEBOOKS / f"{name}.ipynb", as_version=4),
            provenance_cell(nb, shown, older, ZH),
            name,
        )
        nbformat.write(zh, zsrc / "notebooks" / f"{name}.ipynb")
        for c in older:  # served as files, for the banner's links
            for book in (src, zsrc):
                target = book / GPU_COPIES_DIR / c.relpath  # a download (only the toc's files are pages)
                target.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy(c.path, target)
    shown_by = {n: s for n, (s, _) in chosen.items()}
    older_by = {n: o for n, (_, o) in chosen.items()}
    for book, lang in ((src, "en"), (zsrc, ZH)):
        (book / "claims.md").write_text(claims_page(lang))
        (book / "hardware.md").write_text(hardware_page(shown_by, older_by, labels, lang))
    return shown_by


def build(jupyter_book: str, src: Path, out: Path) -> None:
    """``jupyter-book build`` of both books at once, with warnings as errors, then the site check; the English HTML
    lands in ``out``, the Chinese in ``out/zh``."""
    books = {src: out, zh_src(src): out / ZH}
    running = {}
    for book in books:
        cmd = [
            jupyter_book,
            "build",
            str(book),
            "--builder",
            "html",
            "--path-output",
            str(book / "_output"),
            "--warningiserror",
            "--nitpick",
            "--keep-going",
            "--quiet",
        ]
        running[book] = subprocess.Popen(cmd)
    failed = [f"{book.name} (exit {p.wait()})" for book, p in running.items() if p.wait() != 0]
    if failed:
        raise SystemExit(f"site: jupyter-book failed for {', '.join(failed)}; its warnings are above")
    if out.exists():
        shutil.rmtree(out)
    for book, target in books.items():
        shutil.copytree(book / "_output" / "_build" / "html", target)
    checker = _load("check_site")
    problems = (
        checker.check_site(out)
        + checker.check_pages(out, NOTEBOOKS)
        + checker.check_pages(out / ZH, ZH_NOTEBOOKS)
        + checker.check_languages(out, NOTEBOOKS)
    )
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
    parser.add_argument(
        "--readme-zh",
        action="store_true",
        help="only write README.zh-CN.md's generated blocks (the claims table in Chinese, README.md's fault table)",
    )
    args = parser.parse_args(argv)
    if args.readme_zh:
        print(f"{README_ZH.name} {'updated' if update_readme_zh() else 'already up to date'}")
        return 0
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
        f"site: {len(shown)} notebook pages in English and in Chinese ({len(gpu)} with GPU outputs of the current text"
        + (f": {', '.join(gpu)}" if gpu else "")
        + f"; {len(cpu)} with CPU outputs of this checkout) built into "
        f"{args.out} (the Chinese book in {Path(args.out) / ZH}) in {time.perf_counter() - t0:.0f} s "
        f"({built - t0:.0f} s of it staging, executions included); "
        f"open {Path(args.out) / 'index.html'} or run `make site-serve`"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
