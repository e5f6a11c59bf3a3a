"""Check a built website: every image exists, every internal link resolves, nothing loads from outside, and every
notebook's page shows that notebook's code and headings, in order; in the Chinese book (``zh/``) too, each page
Chinese, with its twin's outputs and a language switch to its twin and back.

    python site/check_site.py build/site [NOTEBOOKS_DIR]

Run by ``build_site.py`` after every build (and by ``tests/site/test_site.py``). A problem is one line
naming the page and what is wrong; the exit status is 1 when there is any.
"""

from __future__ import annotations

import json
import re
import sys
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import unquote, urlsplit


class _Page(HTMLParser):
    """The ids, links and resources of one HTML page."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.ids: set[str] = set()
        self.links: list[str] = []
        self.resources: list[tuple[str, str]] = []  # (tag, url) that the browser fetches on load
        self.images: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = {k: v or "" for k, v in attrs}
        for key in ("id", "name") if tag in ("a", "span", "div", "section") else ("id",):
            if a.get(key):
                self.ids.add(a[key])
        if tag == "a" and "href" in a:
            self.links.append(a["href"])
        elif tag == "img" and "src" in a:
            self.images.append(a["src"])
            self.resources.append((tag, a["src"]))
        elif tag == "script" and a.get("src"):
            self.resources.append((tag, a["src"]))
        elif tag == "link" and a.get("href") and a.get("rel", "") in ("stylesheet", "icon", "preload", "modulepreload"):
            self.resources.append((tag, a["href"]))
        elif tag in ("source", "iframe", "embed", "video", "audio") and a.get("src"):
            self.resources.append((tag, a["src"]))


def _external(url: str) -> bool:
    return urlsplit(url).scheme in ("http", "https") or url.startswith("//")


def _target(page: Path, url: str) -> Path:
    path = unquote(urlsplit(url).path)
    target = (page.parent / path).resolve() if path else page.resolve()
    return target / "index.html" if target.is_dir() else target


def check_site(root: str | Path) -> list[str]:
    """Every problem of the site under ``root``, one line each (empty: the site is sound)."""
    root = Path(root).resolve()
    # pages; _static/ (the site's and the Chinese book's zh/_static/) holds the theme's template fragments, not pages
    pages = sorted(p for p in root.rglob("*.html") if "_static" not in p.relative_to(root).parts)
    if not (root / "index.html").exists():
        return [f"{root}: no index.html (not a built site)"]
    parsed: dict[Path, _Page] = {}
    for page in pages:
        parser = _Page()
        parser.feed(page.read_text(errors="replace"))
        parsed[page.resolve()] = parser
    problems = []
    for page, info in parsed.items():
        name = page.relative_to(root)
        for tag, url in info.resources:
            if url.startswith("data:"):
                continue
            if _external(url):
                problems.append(f"{name}: <{tag}> loads {url} from outside the site (the site must work offline)")
            elif not _target(page, url).is_file():
                problems.append(f"{name}: <{tag}> {url} does not exist")
        for url in info.links:
            parts = urlsplit(url)
            if parts.scheme or url.startswith(("//", "mailto:")):
                continue
            target = _target(page, url)
            if not target.exists():
                problems.append(f"{name}: link {url} leads nowhere")
                continue
            if parts.fragment and target.suffix == ".html":
                ids = parsed[target].ids if target in parsed else set()
                if unquote(parts.fragment) not in ids:
                    problems.append(f"{name}: link {url}: no #{parts.fragment} in {target.relative_to(root)}")
    return problems


class _Cells(HTMLParser):
    """The code inputs (``div.cell_input``'s text) and the headings' text of a notebook page, in page order."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.inputs: list[str] = []
        self.headings: list[str] = []
        self._stack: list[str | None] = []  # per open div: "input" when it is a cell's input, else None
        self._in_input = 0
        self._heading: list[str] | None = None
        self._skip = 0  # inside a heading's permalink

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        classes = (dict(attrs).get("class") or "").split()
        if tag == "div":
            mark = "input" if "cell_input" in classes else None
            self._stack.append(mark)
            if mark:
                self._in_input += 1
                self.inputs.append("")
        elif tag in ("h1", "h2", "h3", "h4", "h5", "h6"):
            self._heading = []
        elif tag == "a" and self._heading is not None and "headerlink" in classes:
            self._skip += 1

    def handle_endtag(self, tag: str) -> None:
        if tag == "div" and self._stack:
            if self._stack.pop():
                self._in_input -= 1
        elif tag in ("h1", "h2", "h3", "h4", "h5", "h6") and self._heading is not None:
            self.headings.append("".join(self._heading))
            self._heading = None
        elif tag == "a" and self._skip:
            self._skip -= 1

    def handle_data(self, data: str) -> None:
        if self._in_input:
            self.inputs[-1] += data
        if self._heading is not None and not self._skip:
            self._heading.append(data)


def _squash(text: str) -> str:
    return " ".join(text.split())


SMART = str.maketrans({"\u2019": "'", "\u2018": "'", "\u201c": '"', "\u201d": '"'})
"""Sphinx's smart quotes, back to the plain ones a notebook's text holds."""


def _heading_text(markdown_heading: str) -> str:
    """A markdown heading as its HTML shows it: no #s, no code backticks or emphasis, links as their text."""
    text = markdown_heading.lstrip("#").strip()
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", text)
    return _squash(text.replace("`", "").replace("**", "").replace("*", "")).translate(SMART)


def page_differences(html: str, notebook: dict) -> list[str]:
    """How a page's code inputs and headings differ from the notebook's (JSON as ``dict``): empty when the page shows
    exactly the notebook's code cells, in order, and each of its markdown headings, in order."""
    parsed = _Cells()
    parsed.feed(html)
    code = [
        _squash("".join(c["source"]) if isinstance(c["source"], list) else c["source"])
        for c in notebook["cells"]
        if c["cell_type"] == "code"
    ]
    shown = [_squash(x) for x in parsed.inputs]
    problems = []
    if len(shown) != len(code):
        problems.append(f"{len(shown)} code cells on the page, {len(code)} in the notebook")
    for i, (a, b) in enumerate(zip(shown, code)):
        if a != b:
            problems.append(f"code cell {i}: the page shows {a[:60]!r}, the notebook has {b[:60]!r}")
            break
    wanted = []
    for c in notebook["cells"]:
        if c["cell_type"] == "markdown":
            source = "".join(c["source"]) if isinstance(c["source"], list) else c["source"]
            wanted += [_heading_text(line) for line in source.splitlines() if re.match(r"^#{1,6} ", line)]
    headings = iter(_squash(h).translate(SMART).replace("\u2026", "...") for h in parsed.headings)
    for h in wanted:
        if not any(h == got for got in headings):
            problems.append(f"the heading {h!r} is not on the page (or not in the notebook's order)")
            break
    return problems


def check_pages(root: str | Path, notebooks: str | Path) -> list[str]:
    """For every notebook of ``notebooks``: its page exists under ``root/notebooks/`` and shows its code and
    headings."""
    root, problems = Path(root), []
    for path in sorted(Path(notebooks).glob("*.ipynb")):
        page = root / "notebooks" / f"{path.stem}.html"
        if not page.is_file():
            problems.append(f"notebooks/{page.name}: no page for {path.name}")
            continue
        problems += [
            f"notebooks/{page.name}: {p}"
            for p in page_differences(page.read_text(errors="replace"), json.loads(path.read_text()))
        ]
    return problems


ZH = "zh"
"""The Chinese book's folder in the site (``site/build_site.py``)."""
CJK = re.compile(r"[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]")
LATIN = re.compile(r"[A-Za-z]")
MIN_CJK_SHARE = 0.5
"""The least share of CJK characters among the letters of a Chinese page's prose (code, outputs and the theme's
words left out): the built pages have 0.6–0.8 (identifiers and API names stay as they are), an English page 0."""


class _Prose(HTMLParser):
    """A page's prose (the text of its ``<article>`` without code, cell inputs and outputs), its cell outputs and the
    language switch's link."""

    SKIP = ("pre", "code", "script", "style", "kbd", "samp")

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.text: list[str] = []
        self.outputs = 0
        self.switch: str | None = None
        self._article = 0
        self._divs: list[bool] = []  # per open div: whether it is a cell's input or output (skipped)
        self._skipped = 0
        self._tags = 0

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        classes = (a.get("class") or "").split()
        if tag == "article":
            self._article += 1
        elif tag == "div":
            skip = "cell_output" in classes or "cell_input" in classes
            self.outputs += "cell_output" in classes
            self._divs.append(skip)
            self._skipped += skip
        elif tag in self.SKIP:
            self._tags += 1
        elif tag == "a" and "nvtutorial-lang-switch" in classes:
            self.switch = a.get("href")

    def handle_endtag(self, tag: str) -> None:
        if tag == "article" and self._article:
            self._article -= 1
        elif tag == "div" and self._divs:
            self._skipped -= self._divs.pop()
        elif tag in self.SKIP and self._tags:
            self._tags -= 1

    def handle_data(self, data: str) -> None:
        if self._article and not self._skipped and not self._tags:
            self.text.append(data)


def prose(html: str) -> _Prose:
    parsed = _Prose()
    parsed.feed(html)
    return parsed


def cjk_share(text: str) -> float:
    """The share of CJK characters among the letters (CJK and Latin) of ``text``."""
    cjk, latin = len(CJK.findall(text)), len(LATIN.findall(text))
    return cjk / (cjk + latin) if cjk + latin else 0.0


def check_languages(root: str | Path, notebooks: str | Path) -> list[str]:
    """The two books of the site (English at ``root``, Chinese in ``root/zh``): every page of one has its twin in the
    other, and a language switch that leads to it; every Chinese page is Chinese (a CJK share of its prose of at
    least :data:`MIN_CJK_SHARE`); every notebook's Chinese page has as many cell outputs as its English page."""
    root, problems = Path(root).resolve(), []
    if not (root / ZH / "index.html").is_file():
        return [f"{ZH}/index.html: no Chinese book in the site"]
    for lang_root, other_root in ((root, root / ZH), (root / ZH, root)):
        for page in sorted(lang_root.rglob("*.html")):
            rel = page.relative_to(lang_root)
            if "_static" in rel.parts or (lang_root == root and rel.parts[0] == ZH):
                continue
            name = page.relative_to(root).as_posix()
            twin = other_root / rel
            if not twin.is_file():
                problems.append(f"{name}: no page {twin.relative_to(root).as_posix()} in the other language")
                continue
            info = prose(page.read_text(errors="replace"))
            if rel.as_posix() == "index.html" and info.switch is None:
                continue  # Jupyter Book's redirect to the intro, not a page
            if info.switch is None:
                problems.append(f"{name}: no language switch")
            elif _target(page, info.switch) != twin.resolve():
                problems.append(f"{name}: the language switch leads to {info.switch}, not to its twin")
            if lang_root != root and rel.name not in ("genindex.html", "search.html"):
                share = cjk_share(" ".join(info.text))
                if share < MIN_CJK_SHARE:
                    problems.append(f"{name}: not Chinese ({share:.0%} of its prose's letters are CJK)")
    for path in sorted(Path(notebooks).glob("*.ipynb")):
        en, zh = root / "notebooks" / f"{path.stem}.html", root / ZH / "notebooks" / f"{path.stem}.html"
        if en.is_file() and zh.is_file():
            a, b = prose(en.read_text(errors="replace")).outputs, prose(zh.read_text(errors="replace")).outputs
            if a != b:
                problems.append(f"{ZH}/notebooks/{zh.name}: {b} cell outputs, its English page has {a}")
    return problems


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) not in (1, 2):
        print("usage: python site/check_site.py SITE_DIR [NOTEBOOKS_DIR]", file=sys.stderr)
        return 2
    problems = check_site(args[0])
    if len(args) == 2:
        problems += check_pages(args[0], args[1])
        if (Path(args[0]) / ZH).is_dir():  # the Chinese book: its notebooks are NOTEBOOKS_DIR/zh
            problems += check_pages(Path(args[0]) / ZH, Path(args[1]) / ZH) + check_languages(args[0], args[1])
    for problem in problems:
        print(problem)
    print(f"{len(problems)} problem(s) in {args[0]}")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
