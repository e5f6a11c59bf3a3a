"""The course in a real browser: headless Chromium (Debian's ``chromium``) driven by Playwright.

- JupyterLab, started as ``make lab`` starts it (``python -m nvtutorial.lab``: as root here, with a
  token, on a free port): notebook 00 opens unmodified, runs all its cells with no error, its
  progress bar renders as a widget and ends green, the notebook is saved with that state (and,
  with ``NVTUTORIAL_EXECUTED_DIR`` set, copied there so that CI executes 00 only once), reopens
  with its bars, and Stop ends a run in flight within 5 s with no process left.
- The website in ``build/site`` (``make site``): every page loads with no console error and no
  request outside the site, every image is visible, every progress bar is in its final state.

Screenshots go to ``build/screenshots/``. Skipped, with the reason, where Chromium or Playwright
is missing (``.ci/run`` installs Chromium: ``apt-get install chromium chromium-driver``).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import psutil
import pytest

from .conftest import assert_nothing_left

ROOT = Path(__file__).resolve().parent.parent
SCREENSHOTS = ROOT / "build" / "screenshots"
SITE = ROOT / "build" / "site"
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
STOP_LIMIT_S = 5.0

playwright_api = pytest.importorskip("playwright.sync_api", reason="Playwright is not installed (pip install playwright)")
pytestmark = [
    pytest.mark.skipif(CHROMIUM is None, reason="no Chromium here: apt-get install chromium chromium-driver "
                       "(what .ci/run does); Playwright's own browser download is not used"),
    pytest.mark.timeout(600),  # notebook 00 runs in full in the first test's setup
]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for(predicate, timeout: float, what: str, interval: float = 0.2):
    end = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > end:
            raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(interval)


@pytest.fixture(scope="module")
def browser():
    with playwright_api.sync_playwright() as p:
        chromium = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        yield chromium
        chromium.close()


def shoot(page, name: str) -> Path:
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    path = SCREENSHOTS / name
    page.screenshot(path=str(path))
    return path


# ----------------------------------------------------------------------------------------------- JupyterLab

class Lab:
    """A JupyterLab server started as ``make lab`` starts it, on a copy of notebook 00."""

    def __init__(self, tmp: Path) -> None:
        self.folder = tmp / "notebooks"
        self.folder.mkdir()
        # the test's own user settings: no autosave (the executed copy stays as the test saved it), no news pop-up
        settings = {"docmanager-extension/plugin": {"autosave": False},
                    "apputils-extension/notification": {"fetchNews": "false"}}
        for name, values in settings.items():
            path = tmp / "user-settings" / "@jupyterlab" / f"{name}.jupyterlab-settings"
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps(values))
        shutil.copy(ROOT / "notebooks" / "00_welcome.ipynb", self.folder)
        self.port, self.token = free_port(), "nvtutorial-test-token"
        env = dict(os.environ, JUPYTERLAB_SETTINGS_DIR=str(tmp / "user-settings"),
                   JUPYTERLAB_WORKSPACES_DIR=str(tmp / "workspaces"), JUPYTER_RUNTIME_DIR=str(tmp / "runtime"),
                   NVTUTORIAL_RUNS_DIR="runs", PYTHONPATH=str(ROOT))
        cmd = [sys.executable, "-m", "nvtutorial.lab", str(self.folder), "--no-browser", "--port", str(self.port),
               "--ServerApp.ip=127.0.0.1", f"--IdentityProvider.token={self.token}",
               "--LabApp.expose_app_in_browser=True"]
        self.log = tmp / "jupyter.log"
        with open(self.log, "w") as log:
            self.server = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT)
        wait_for(self.ready, 180, f"JupyterLab to answer (log: {self.log})", interval=0.5)

    def ready(self) -> bool:
        if self.server.poll() is not None:
            raise AssertionError(f"jupyter lab exited with {self.server.returncode}:\n{self.log.read_text()[-3000:]}")
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{self.port}/api/status?token={self.token}", timeout=2)
            return True
        except OSError:
            return False

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.port}/{path}?token={self.token}"

    def kernels(self) -> list[psutil.Process]:
        return [p for p in psutil.Process(self.server.pid).children() if "ipykernel" in " ".join(p.cmdline())]

    def stop(self) -> None:
        self.server.terminate()
        try:
            self.server.wait(15)
        except subprocess.TimeoutExpired:
            self.server.kill()
            self.server.wait()


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    server = Lab(tmp_path_factory.mktemp("lab"))
    yield server
    server.stop()


@pytest.fixture(scope="module")
def page(lab, browser):
    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    tab = context.new_page()
    tab.errors = []
    tab.on("pageerror", lambda exc: tab.errors.append(str(exc)))
    yield tab
    context.close()


def open_notebook(page, lab: Lab, name: str = "00_welcome.ipynb") -> None:
    page.goto(lab.url(f"lab/tree/{name}"))
    page.wait_for_selector(".jp-Notebook .jp-Cell", timeout=60_000)
    wait_for(lambda: kernel_idle(page), 60, "the kernel to start")


def kernel_idle(page) -> bool:
    return page.evaluate("""() => {
        const panel = window.jupyterapp && window.jupyterapp.shell.currentWidget;
        const kernel = panel && panel.sessionContext && panel.sessionContext.session && panel.sessionContext.session.kernel;
        return !!kernel && kernel.status === 'idle' && panel.sessionContext.isReady;
    }""")


def command(page, name: str, args: dict | None = None, wait: bool = True) -> None:
    """Run a JupyterLab command; with ``wait``, until it is done (run-all: until every cell ran)."""
    script = ("([name, args]) => window.jupyterapp.commands.execute(name, args)" if wait else
              "([name, args]) => { window.jupyterapp.commands.execute(name, args); }")
    page.evaluate(script, [name, args or {}])


def dirty(page) -> bool:
    return "jp-mod-dirty" in (page.locator('li.lm-TabBar-tab[data-type="document-title"].jp-mod-current')
                              .get_attribute("class") or "")


def prompts(page) -> list[str]:
    """The code cells' prompts: ``[3]:`` ran, ``[*]:`` running or queued, ``[ ]:`` never ran."""
    return page.evaluate("() => [...document.querySelectorAll('.jp-CodeCell .jp-InputPrompt')].map(p => p.textContent)")


def cells_running(page) -> int:
    return sum("*" in p for p in prompts(page))


@pytest.fixture(scope="module")
def executed(page, lab):
    """Notebook 00 opened, checked unmodified, run in full and saved; the saved file's JSON."""
    open_notebook(page, lab)
    time.sleep(1.0)  # JupyterLab writes the kernel's metadata into the model once it is connected
    was_dirty = dirty(page)
    command(page, "notebook:run-all-cells", wait=False)
    wait_for(lambda: all(any(ch.isdigit() for ch in p) for p in prompts(page)) and kernel_idle(page), 600,
             "every cell of notebook 00 to run", interval=0.5)
    page.locator(".widget-hprogress").first.scroll_into_view_if_needed()
    shoot(page, "jupyterlab-00-run-all.png")
    command(page, "docmanager:save")
    wait_for(lambda: not dirty(page), 30, "the notebook to be saved")
    saved = lab.folder / "00_welcome.ipynb"
    target = os.environ.get("NVTUTORIAL_EXECUTED_DIR")
    if target:
        Path(target).mkdir(parents=True, exist_ok=True)
        shutil.copy(saved, Path(target) / "00_welcome.ipynb")
    return {"was_dirty": was_dirty, "nb": json.loads(saved.read_text())}


def test_notebook_00_opens_unmodified(executed):
    assert not executed["was_dirty"], "JupyterLab marked notebook 00 modified as soon as it opened it"


def test_notebook_00_runs_with_no_error_and_a_green_bar(executed, page):
    errors = page.locator('[data-mime-type="application/vnd.jupyter.error"]')
    assert errors.count() == 0, f"a cell shows an error: {errors.first.inner_text()[:2000]}"
    assert not page.get_by_text("Error displaying widget").count()
    bars = page.locator(".widget-hprogress .progress-bar")
    assert bars.count() >= 1, "no progress bar was rendered as a widget"
    first = bars.first
    assert "progress-bar-success" in (first.get_attribute("class") or ""), "the first run's bar did not end green"
    assert first.evaluate("e => e.style.width") == "100%"
    outputs = [o for c in executed["nb"]["cells"] for o in c.get("outputs", [])]
    assert not [o for o in outputs if o["output_type"] == "error"]
    assert not page.errors, f"JavaScript errors in JupyterLab: {page.errors}"


def test_the_saved_notebook_keeps_the_bars_final_state(executed):
    nb = executed["nb"]
    state = nb["metadata"].get("widgets", {}).get("application/vnd.jupyter.widget-state+json", {}).get("state", {})
    views = [o["data"] for c in nb["cells"] for o in c.get("outputs", [])
             if "application/vnd.jupyter.widget-view+json" in o.get("data", {})]
    assert views, "the saved notebook has no progress bar"
    assert state, "JupyterLab saved no widget state (the saveState setting of make lab is missing)"
    for data in views:
        box = state[data["application/vnd.jupyter.widget-view+json"]["model_id"]]["state"]
        bar = state[box["children"][1].removeprefix("IPY_MODEL_")]["state"]
        text = "".join(data["text/plain"])
        assert (bar["value"], bar["bar_style"]) == (bar["max"], "success"), text
        assert f"{int(bar['max'])}/{int(bar['max'])}" in text, f"the text form is not the final state: {text}"


def test_a_reopened_notebook_shows_its_bars(executed, page, lab):
    command(page, "kernelmenu:shutdown")
    wait_for(lambda: not lab.kernels(), 30, "the kernel to shut down")
    page.reload()
    page.wait_for_selector(".jp-Notebook .jp-Cell", timeout=60_000)
    page.wait_for_selector(".widget-hprogress", timeout=30_000)
    page.locator(".widget-hprogress").first.scroll_into_view_if_needed()
    shoot(page, "jupyterlab-00-reopened.png")
    assert not page.get_by_text("Error displaying widget").count(), "a reopened bar shows 'model not found'"
    assert "progress-bar-success" in (page.locator(".widget-hprogress .progress-bar").first.get_attribute("class") or "")


HANG = ('import nvtutorial\n'
        'nvtutorial.run("selftest", nproc=2, params={"mode": "hang"}, timeout=600, out="runs/stop-test")')


def test_stop_ends_a_run_in_flight_within_5_s_and_leaves_nothing(executed, page, lab, record_property):
    open_notebook(page, lab)
    page.evaluate("""() => {
        const nb = window.jupyterapp.shell.currentWidget.content;
        nb.activeCellIndex = nb.widgets.length - 1;
    }""")
    command(page, "notebook:insert-cell-below")
    page.evaluate("(code) => window.jupyterapp.shell.currentWidget.content.activeCell.model.sharedModel.setSource(code)",
                  HANG)
    command(page, "notebook:run-cell", wait=False)
    run_dir = lab.folder / "runs" / "stop-test"
    wait_for(lambda: len(list(run_dir.glob("rank*.pid"))) == 2 and "sleeping instead of joining"
             in (run_dir / "rank1.log").read_text(errors="replace") if (run_dir / "rank1.log").exists() else False,
             120, "the hanging run to start both ranks")
    (kernel,) = lab.kernels()
    tree = kernel.children(recursive=True)
    assert tree, "the run started no process under the kernel"
    shoot(page, "jupyterlab-stop-before.png")
    stop = page.locator('.jp-NotebookPanel-toolbar [data-command="notebook:interrupt-kernel"]')
    t0 = time.monotonic()
    if stop.count():
        stop.first.click()
    else:
        command(page, "notebook:interrupt-kernel")
    wait_for(lambda: cells_running(page) == 0 and kernel_idle(page), 30, "the interrupted cell to end", interval=0.05)
    took = time.monotonic() - t0
    record_property("stop_s", round(took, 2))
    print(f"Stop ended the run in {took:.2f} s")
    shoot(page, "jupyterlab-stop-after.png")
    assert "KeyboardInterrupt" in page.locator(".jp-Cell").last.inner_text()
    assert_nothing_left(run_dir, extra_pids=tuple(p.pid for p in tree), within=1.0)
    assert not kernel.children(recursive=True), "processes left under the kernel"
    assert took < STOP_LIMIT_S, f"Stop took {took:.1f} s to end the run"


# ----------------------------------------------------------------------------------------------- the website

def site_pages() -> list[str]:
    return sorted(p.relative_to(SITE).as_posix() for p in SITE.rglob("*.html")
                  if not p.relative_to(SITE).parts[0].startswith("_"))


@pytest.fixture(scope="module")
def site_server():
    if not (SITE / "index.html").exists():
        pytest.skip("no website in build/site: run `make site` first (.ci/run does)")
    port = free_port()
    server = subprocess.Popen([sys.executable, "-m", "http.server", "--bind", "127.0.0.1", str(port),
                               "--directory", str(SITE)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
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
    page.on("request", lambda r: outside.append(r.url)
            if not r.url.startswith(site_server) and not r.url.startswith("data:") else None)
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
        bars = page.eval_on_selector_all(".widget-hprogress .progress-bar",
                                         "els => els.map(e => [e.className, e.style.width])")
        problems += [f"{path}: request outside the site: {u}" for u in outside]
        problems += [f"{path}: console error: {e}" for e in errors]
        problems += [f"{path}: image not shown: {src}" for src, width in images if not width]
        if len(bars) < views:
            problems.append(f"{path}: {views} saved progress bars, {len(bars)} rendered")
        # a final state: complete and green, or red (a run that failed); never a bar still "running"
        problems += [f"{path}: a progress bar in no final state ({cls}, {width})" for cls, width in bars
                     if "progress-bar-success" not in cls and "progress-bar-danger" not in cls]
        problems += [f"{path}: a green bar short of its total ({width})" for cls, width in bars
                     if "progress-bar-success" in cls and width != "100%"]
        bars_seen += len(bars)
        if path in ("intro.html", "notebooks/00_welcome.html", "claims.html"):
            if path.startswith("notebooks/") and bars:
                page.locator(".widget-hprogress").first.scroll_into_view_if_needed()
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
