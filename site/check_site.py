"""Check a built website: every image exists, every internal link resolves, nothing loads from outside, and every
notebook's page shows that notebook's code and headings, in order.

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
    # pages; _static/ holds the theme's template fragments, not pages
    pages = sorted(p for p in root.rglob("*.html") if p.relative_to(root).parts[0] != "_static")
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


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) not in (1, 2):
        print("usage: python site/check_site.py SITE_DIR [NOTEBOOKS_DIR]", file=sys.stderr)
        return 2
    problems = check_site(args[0]) + (check_pages(args[0], args[1]) if len(args) == 2 else [])
    for problem in problems:
        print(problem)
    print(f"{len(problems)} problem(s) in {args[0]}")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
