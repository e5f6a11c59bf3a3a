"""The course website in a real browser: headless Chromium (Debian's ``chromium``) driven by Playwright.

The website in ``build/site`` (``make site``): every page of both books (English, and Chinese in ``zh/``) loads with no
console error and no request outside the site, every image is visible, every progress bar is in its final state; the
search finds a lesson offline, in both; every Chinese page is Chinese, shows the outputs its English page shows, and its
language switch leads to the English page and back. The
course in JupyterLab (every notebook with Run All, Stop, the bars of a reopened notebook) is
``tests/test_jupyterlab.py``.

Screenshots go to ``build/screenshots/``. Skipped, with the reason, where Chromium or Playwright is missing
(``.ci/run`` installs Chromium: ``apt-get install chromium chromium-driver``), or where no website was built
(``make site``; ``.ci/run`` builds it, then runs these with ``make test-site``).
"""

from __future__ import annotations

import contextlib
import subprocess
import sys
import urllib.request

import pytest

from tests.helpers.jupyterlab import ROOT, browser_module, chromium, free_port, shoot, wait_for

SITE = ROOT / "build" / "site"

pytestmark = browser_module(600)


@pytest.fixture(scope="module")
def browser():
    with chromium() as browser:
        yield browser


# ----------------------------------------------------------------------------------------------- the website


def site_pages() -> list[str]:
    """Every page of both books (the Chinese one in zh/), not the theme's fragments in _static/ or zh/_static/."""
    return sorted(
        p.relative_to(SITE).as_posix()
        for p in SITE.rglob("*.html")
        if not any(part.startswith("_") for part in p.relative_to(SITE).parts)
    )


@pytest.fixture(scope="module")
def site_server():
    if not (SITE / "index.html").exists():
        pytest.skip("no website in build/site: run `make site` first (.ci/run does)")
    port = free_port()
    server = subprocess.Popen(
        [sys.executable, "-m", "http.server", "--bind", "127.0.0.1", str(port), "--directory", str(SITE)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    base = f"http://127.0.0.1:{port}/"

    def up() -> bool:
        with contextlib.suppress(OSError):
            urllib.request.urlopen(base, timeout=2)
            return True
        return False

    wait_for(up, 20, "the site's server")
    yield base
    server.terminate()
    server.wait()


def test_every_page_of_the_website_loads_offline_with_its_figures_and_bars(site_server, browser):
    pages = site_pages()
    assert any(p.startswith("notebooks/") for p in pages) and "claims.html" in pages
    assert any(p.startswith("zh/notebooks/") for p in pages) and "zh/claims.html" in pages
    context = browser.new_context(viewport={"width": 1300, "height": 900})
    page = context.new_page()
    outside, errors = [], []
    page.on(
        "request",
        lambda r: (
            outside.append(r.url) if not r.url.startswith(site_server) and not r.url.startswith("data:") else None
        ),
    )
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda e: errors.append(str(e)))
    problems, bars_seen = [], 0
    for path in pages:
        outside.clear()
        errors.clear()
        page.goto(site_server + path, wait_until="load")
        views = page.locator('script[type="application/vnd.jupyter.widget-view+json"]').count()
        if views:
            page.wait_for_function(f"document.querySelectorAll('.widget-hprogress').length >= {views}", timeout=20_000)
            page.wait_for_load_state("networkidle")  # what the widgets load once rendered (their fonts)
        page.wait_for_function("[...document.images].every(i => i.complete)", timeout=20_000)
        images = page.eval_on_selector_all("img", "els => els.map(e => [e.getAttribute('src'), e.naturalWidth])")
        bars = page.eval_on_selector_all(
            ".widget-hprogress .progress-bar", "els => els.map(e => [e.className, e.style.width])"
        )
        problems += [f"{path}: request outside the site: {u}" for u in outside]
        problems += [f"{path}: console error: {e}" for e in errors]
        problems += [f"{path}: image not shown: {src}" for src, width in images if not width]
        if len(bars) < views:
            problems.append(f"{path}: {views} saved progress bars, {len(bars)} rendered")
        # a final state: complete and green, or red (a run that failed); never a bar still "running"
        problems += [
            f"{path}: a progress bar in no final state ({cls}, {width})"
            for cls, width in bars
            if "progress-bar-success" not in cls and "progress-bar-danger" not in cls
        ]
        problems += [
            f"{path}: a green bar short of its total ({width})"
            for cls, width in bars
            if "progress-bar-success" in cls and width != "100%"
        ]
        # the course's own bars are HTML (nvtutorial.launch.progress); the committed GPU copies may still hold widget
        # bars
        html_bars = page.eval_on_selector_all(".nvtutorial-bar", "els => els.map(e => e.className)")
        problems += [
            f"{path}: a progress bar in no final state ({cls})" for cls in html_bars if cls.endswith("-running")
        ]
        bars_seen += len(bars) + len(html_bars)
        if path in ("intro.html", "notebooks/00_welcome.html", "claims.html", "zh/intro.html", "zh/claims.html"):
            if path.startswith("notebooks/") and (bars or html_bars):
                page.locator(".widget-hprogress, .nvtutorial-bar").first.scroll_into_view_if_needed()
            shoot(page, "site-" + path.replace("/", "-").replace(".html", ".png"))
    context.close()
    assert not problems, "\n".join(problems)
    assert bars_seen > 0, "no page rendered a progress bar"


def test_the_website_search_finds_a_lesson_offline(site_server, browser):
    page = browser.new_page()
    page.goto(site_server + "search.html?q=all_reduce", wait_until="networkidle")
    results = page.locator("#search-results li")
    page.wait_for_function("document.querySelectorAll('#search-results li').length > 0", timeout=30_000)
    found = results.all_inner_texts()
    page.close()
    assert any("DDP" in text or "collective" in text.lower() or "Welcome" in text for text in found), found


PROSE = """() => {
    const article = document.querySelector('article') || document.body;
    const copy = article.cloneNode(true);
    copy.querySelectorAll('pre, code, script, style, .cell_output, .cell_input').forEach(e => e.remove());
    const text = copy.innerText;
    const cjk = (text.match(/[\\u4e00-\\u9fff]/g) || []).length, latin = (text.match(/[A-Za-z]/g) || []).length;
    return {share: cjk / Math.max(1, cjk + latin), outputs: article.querySelectorAll('.cell_output').length,
            lang: document.documentElement.lang, font: getComputedStyle(document.body).fontFamily};
}"""
"""A page's prose (its article without code, cell inputs and outputs): the share of CJK characters among its letters,
its cell outputs, the page's language and the font family its body is set in."""


def test_every_chinese_page_is_chinese_with_the_english_outputs_and_its_switch_goes_there_and_back(
    site_server, browser
):
    pages = [p for p in site_pages() if p.startswith("zh/") and p not in ("zh/index.html", "zh/search.html")]
    pages = [p for p in pages if p != "zh/genindex.html"]
    assert any(p.startswith("zh/notebooks/") for p in pages) and "zh/intro.html" in pages
    page = browser.new_page()
    problems = []
    for zh in pages:
        en = zh.removeprefix("zh/")
        page.goto(site_server + en, wait_until="load")
        english = page.evaluate(PROSE)
        page.click("a.nvtutorial-lang-switch")  # 中文
        page.wait_for_load_state("load")
        if page.url != site_server + zh:
            problems.append(f"{en}: its switch led to {page.url}")
            continue
        chinese = page.evaluate(PROSE)
        if not chinese["lang"].startswith("zh") or chinese["share"] < 0.5:
            problems.append(f"{zh}: not Chinese (lang {chinese['lang']!r}, {chinese['share']:.0%} CJK)")
        if chinese["outputs"] != english["outputs"]:
            problems.append(f"{zh}: {chinese['outputs']} outputs, its English page {english['outputs']}")
        # the system's fonts show Chinese: the theme sets no Latin-only font (a generic family ends the list)
        if not chinese["font"].rstrip().endswith(("sans-serif", "serif")) and "sans-serif" not in chinese["font"]:
            problems.append(f"{zh}: the body's font {chinese['font']!r} has no generic family to fall back on")
        if page.locator("a.nvtutorial-lang-switch").inner_text().strip() != "English":
            problems.append(f"{zh}: the switch does not say English")
        page.click("a.nvtutorial-lang-switch")  # English
        page.wait_for_load_state("load")
        if page.url != site_server + en:
            problems.append(f"{zh}: its switch led back to {page.url}, not {en}")
    page.close()
    assert not problems, "\n".join(problems)


def test_the_chinese_website_search_finds_a_lesson_offline(site_server, browser):
    """Sphinx's Chinese search splits Latin terms (Chinese words need jieba, not installed): API names are found."""
    page = browser.new_page()
    page.goto(site_server + "zh/search.html?q=all_reduce", wait_until="networkidle")
    page.wait_for_function("document.querySelectorAll('#search-results li').length > 0", timeout=30_000)
    found = page.locator("#search-results li").all_inner_texts()
    page.close()
    assert any("notebooks/" in t or "0" in t for t in found) and found, found
