"""Driving JupyterLab and the website in headless Chromium (Debian's ``chromium``) with Playwright.

Shared by ``tests/test_browser.py`` (the website) and ``tests/test_jupyterlab.py`` (the course in JupyterLab).
JupyterLab is started as ``make lab`` starts it (``python -m nvtutorial.lab``: as root here, with a token, on a
free port), on a copy of the notebooks, with a system temp folder of its own (``TMPDIR``) so that a test can
see what a notebook leaves there.

A notebook's kernel messages are recorded in the page (:data:`RECORDER`): each message's type, its parent
request and the kernel's own clock, so a test can tell when each cell started, when it first showed
something and when it ended, from the kernel's timestamps rather than the browser's.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import os
import shutil
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

import psutil
import pytest

from nvtutorial.runtime import free_port as free_port  # the course's one helper, for the tests too
from tests.helpers.paths import ROOT

SCREENSHOTS = ROOT / "build" / "screenshots"
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


def browser_module(timeout_s: float) -> list[Any]:
    """The ``pytestmark`` of a test file that drives the system's Chromium with Playwright: the whole file is skipped
    where Playwright is not installed (here, as the file is imported) or there is no Chromium; and its tests'
    timeout."""
    pytest.importorskip("playwright.sync_api", reason="Playwright is not installed (pip install playwright)")
    return [
        pytest.mark.skipif(
            CHROMIUM is None,
            reason="no Chromium here: apt-get install chromium chromium-driver "
            "(what .ci/run does); Playwright's own browser download is not used",
        ),
        pytest.mark.timeout(timeout_s),
    ]


@contextlib.contextmanager
def chromium():
    """The system's Chromium, through Playwright (a test module's ``browser`` fixture)."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        yield browser
        browser.close()


def wait_for(predicate, timeout: float, what: str, interval: float = 0.2):
    end = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > end:
            raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(interval)


def shoot(page, name: str, **kwargs: Any) -> Path:
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    path = SCREENSHOTS / name
    page.screenshot(path=str(path), **kwargs)
    return path


class Lab:
    """A JupyterLab server started as ``make lab`` starts it, on copies of ``notebooks`` in ``tmp/notebooks``.

    ``tmp/tmp`` is the server's (and so every kernel's and rank's) system temp folder. ``env`` adds variables.
    """

    def __init__(self, tmp: Path, notebooks: list[Path], env: dict[str, str] | None = None) -> None:
        self.folder = tmp / "notebooks"
        self.folder.mkdir()
        self.tmpdir = tmp / "tmp"
        self.tmpdir.mkdir()
        # the test's own user settings: no autosave (an executed copy stays as the test saved it), no news pop-up
        settings = {
            "docmanager-extension/plugin": {"autosave": False},
            "apputils-extension/notification": {"fetchNews": "false"},
        }
        for name, values in settings.items():
            path = tmp / "user-settings" / "@jupyterlab" / f"{name}.jupyterlab-settings"
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps(values))
        for nb in notebooks:
            shutil.copy(nb, self.folder)
        self.port, self.token = free_port(), "nvtutorial-test-token"
        full_env = dict(
            os.environ,
            JUPYTERLAB_SETTINGS_DIR=str(tmp / "user-settings"),
            JUPYTERLAB_WORKSPACES_DIR=str(tmp / "workspaces"),
            JUPYTER_RUNTIME_DIR=str(tmp / "runtime"),
            PYTHONPATH=str(ROOT),
            TMPDIR=str(self.tmpdir),
            **(env or {}),
        )
        full_env.pop("NVTUTORIAL_RUNS_DIR", None)  # runs go where a learner's go: .runs beside the notebooks
        full_env.update(env or {})
        cmd = [
            sys.executable,
            "-m",
            "nvtutorial.lab",
            str(self.folder),
            "--no-browser",
            "--port",
            str(self.port),
            "--ServerApp.ip=127.0.0.1",
            f"--IdentityProvider.token={self.token}",
            "--LabApp.expose_app_in_browser=True",
        ]
        self.log = tmp / "jupyter.log"
        with open(self.log, "w") as log:
            self.server = subprocess.Popen(cmd, env=full_env, stdout=log, stderr=subprocess.STDOUT, cwd=self.folder)
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
        """The server's live kernel processes (a child that ended meanwhile, a zombie included, is none)."""
        found = []
        for p in psutil.Process(self.server.pid).children():
            try:
                if "ipykernel" in " ".join(p.cmdline()):
                    found.append(p)
            except (psutil.NoSuchProcess, psutil.ZombieProcess):
                continue
        return found

    def stop(self) -> None:
        self.server.terminate()
        try:
            self.server.wait(15)
        except subprocess.TimeoutExpired:
            self.server.kill()
            self.server.wait()


# ---------------------------------------------------------------------------------------------- one notebook

RECORDER = """() => {
    const panel = window.jupyterapp.shell.currentWidget;
    if (panel.__nvtRecorder) { return; }
    panel.__nvtRecorder = true;
    window.__nvt = window.__nvt || {};
    const log = window.__nvt[panel.context.path] = [];
    const text = (d) => (d && d['text/plain'] ? [].concat(d['text/plain']).join('') : '').slice(0, 400);
    const hook = (kernel) => {
        if (!kernel) { return; }
        kernel.anyMessage.connect((_, args) => {
            const m = args.msg, c = m.content || {};
            const rec = {dir: args.direction, channel: m.channel, type: m.header.msg_type, id: m.header.msg_id,
                         parent: (m.parent_header || {}).msg_id || null, date: m.header.date, seen: Date.now()};
            if (rec.type === 'execute_request') { rec.code = c.code; }
            if (rec.type === 'status') { rec.state = c.execution_state; }
            if (rec.type === 'stream') { rec.text = (c.text || '').slice(0, 400); }
            if (rec.type === 'error') { rec.text = c.ename + ': ' + c.evalue; }
            if (['display_data', 'execute_result', 'update_display_data'].includes(rec.type)) {
                rec.mimes = Object.keys(c.data || {}); rec.text = text(c.data);
            }
            if (rec.type === 'comm_msg') { rec.text = JSON.stringify(c.data || {}).slice(0, 200); }
            log.push(rec);
        });
    };
    hook(panel.sessionContext.session && panel.sessionContext.session.kernel);
    panel.sessionContext.kernelChanged.connect((_, change) => hook(change.newValue));
}"""


def open_notebook(page, lab: Lab, name: str) -> None:
    """Open notebook ``name`` (a page of its own, so no other notebook's cells are in it) with its kernel idle,
    recording its kernel's messages."""
    page.goto(lab.url(f"lab/tree/{name}") + "&reset")  # reset: the workspace reopens no earlier notebook
    page.wait_for_function(
        """(name) => {
        const panel = window.jupyterapp && window.jupyterapp.shell.currentWidget;
        return !!panel && panel.context && panel.context.path === name && panel.content.widgets.length > 0;
    }""",
        arg=name,
        timeout=90_000,
    )
    wait_for(lambda: kernel_idle(page), 90, "the kernel to start")
    page.evaluate(RECORDER)


def kernel_idle(page) -> bool:
    return page.evaluate("""() => {
        const panel = window.jupyterapp && window.jupyterapp.shell.currentWidget;
        const kernel = panel && panel.sessionContext && panel.sessionContext.session
            && panel.sessionContext.session.kernel;
        return !!kernel && kernel.status === 'idle' && panel.sessionContext.isReady;
    }""")


def command(page, name: str, args: dict | None = None, wait: bool = True) -> None:
    """Run a JupyterLab command; with ``wait``, until it is done (run-all: until every cell ran)."""
    script = (
        "([name, args]) => window.jupyterapp.commands.execute(name, args)"
        if wait
        else "([name, args]) => { window.jupyterapp.commands.execute(name, args); }"
    )
    page.evaluate(script, [name, args or {}])


def dirty(page) -> bool:
    return "jp-mod-dirty" in (
        page.locator('li.lm-TabBar-tab[data-type="document-title"].jp-mod-current').get_attribute("class") or ""
    )


def prompts(page) -> list[str]:
    """The code cells' prompts: ``[3]:`` ran, ``[*]:`` running or queued, ``[ ]:`` never ran."""
    return page.evaluate("() => [...document.querySelectorAll('.jp-CodeCell .jp-InputPrompt')].map(p => p.textContent)")


def cells_running(page) -> int:
    return sum("*" in p for p in prompts(page))


def messages(page, name: str) -> list[dict[str, Any]]:
    """The kernel messages recorded for notebook ``name`` since it was opened."""
    return page.evaluate("(name) => (window.__nvt || {})[name] || []", name)


def cell_outputs(page, index: int) -> list[dict[str, Any]]:
    """The outputs of the current notebook's cell ``index`` as nbformat JSON."""
    return page.evaluate(
        """(i) => {
        const cell = window.jupyterapp.shell.currentWidget.content.model.cells.get(i);
        return cell.type === 'code' ? cell.outputs.toJSON() : [];
    }""",
        index,
    )


def shoot_output(page, index: int, name: str, what: str = "img") -> Path | None:
    """A screenshot of the first element matching the CSS selector ``what`` in cell ``index``'s outputs (default:
    a figure as the notebook shows it), or None when there is none."""
    page.evaluate(
        """async (i) => {
        const nb = window.jupyterapp.shell.currentWidget.content;
        nb.activeCellIndex = i;
        await nb.scrollToItem(i, 'start');
    }""",
        index,
    )
    image = page.locator(
        f'.jp-Notebook .jp-Cell[data-windowed-list-index="{index}"] .jp-OutputArea-output {what}'
    ).first
    try:
        image.wait_for(timeout=10_000)
    except Exception:  # noqa: BLE001 - no figure in this cell
        return None
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    path = SCREENSHOTS / name
    image.scroll_into_view_if_needed()
    image.screenshot(path=str(path))
    return path


def set_source(page, index: int, source: str) -> None:
    page.evaluate(
        "([i, s]) => window.jupyterapp.shell.currentWidget.content.model.cells.get(i).sharedModel.setSource(s)",
        [index, source],
    )


def run_cell(page, index: int, timeout: float = 600) -> None:
    """Run cell ``index`` of the current notebook and wait until it and the kernel are done."""
    page.evaluate(
        """(i) => {
        const nb = window.jupyterapp.shell.currentWidget.content;
        nb.activeCellIndex = i;
        nb.deselectAll();
    }""",
        index,
    )
    command(page, "notebook:run-cell", wait=False)
    time.sleep(0.3)
    wait_for(lambda: cells_running(page) == 0 and kernel_idle(page), timeout, f"cell {index} to run", interval=0.3)


# ---------------------------------------------------------------------------------------------- what the cells did


def _when(date: str) -> float:
    return dt.datetime.fromisoformat(date.replace("Z", "+00:00")).timestamp()


SHOWS = ("stream", "display_data", "execute_result", "update_display_data", "error", "clear_output")
"""Messages that change what a cell shows (a widget's first view arrives as display_data)."""


def executions(log: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One entry per execute request: its code, when the kernel began and ended it, and when each output came,
    in seconds on the kernel's clock from its start; ``first`` is the delay to the first output (None: none)."""
    requests = [m for m in log if m["dir"] == "send" and m["type"] == "execute_request"]
    by_parent: dict[str, list[dict[str, Any]]] = {}
    for m in log:
        if m["dir"] == "recv" and m.get("parent"):
            by_parent.setdefault(m["parent"], []).append(m)
    out = []
    for req in requests:
        replies = by_parent.get(req["id"], [])
        busy = [m for m in replies if m["type"] == "status" and m.get("state") == "busy"]
        idle = [m for m in replies if m["type"] == "status" and m.get("state") == "idle"]
        if not busy:
            continue
        t0 = _when(busy[0]["date"])
        shown = sorted(_when(m["date"]) - t0 for m in replies if m["type"] in SHOWS)
        comms = sorted(_when(m["date"]) - t0 for m in replies if m["type"] == "comm_msg")
        end = _when(idle[-1]["date"]) - t0 if idle else None
        errors = [m.get("text", "") for m in replies if m["type"] == "error"]
        out.append(
            {
                "code": req.get("code", ""),
                "duration": end,
                "first": shown[0] if shown else None,
                "shown": shown,
                "comms": comms,
                "errors": errors,
            }
        )
    return out


def longest_silence(ex: dict[str, Any]) -> float:
    """The longest stretch of a finished cell with nothing new shown: from its start to its first output,
    between outputs (a live bar's updates count), and from its last output to its end."""
    marks = sorted([0.0, *ex["shown"], *ex["comms"], ex["duration"] or 0.0])
    return max((b - a for a, b in zip(marks, marks[1:])), default=0.0)


@contextlib.contextmanager
def browser_context(browser, **kwargs: Any):
    context = browser.new_context(**kwargs)
    try:
        yield context
    finally:
        context.close()
