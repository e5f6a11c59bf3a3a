"""The course website in a real browser: headless Chromium (Debian's ``chromium``) driven by Playwright.

The website in ``build/site`` (``make site``): every page loads with no console error and no request outside the
site, every image is visible, every progress bar is in its final state; the search finds a lesson offline. The
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
    return sorted(
        p.relative_to(SITE).as_posix() for p in SITE.rglob("*.html") if not p.relative_to(SITE).parts[0].startswith("_")
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
        if path in ("intro.html", "notebooks/00_welcome.html", "claims.html"):
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
