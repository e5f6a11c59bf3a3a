"""Check a built website: every image exists, every internal link resolves, nothing loads from outside.

    python site/check_site.py build/site

Run by ``build_site.py`` after every build (and by ``tests/test_site.py``). A problem is one line
naming the page and what is wrong; the exit status is 1 when there is any.
"""

from __future__ import annotations

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


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python site/check_site.py SITE_DIR", file=sys.stderr)
        return 2
    problems = check_site(args[0])
    for problem in problems:
        print(problem)
    print(f"{len(problems)} problem(s) in {args[0]}")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
