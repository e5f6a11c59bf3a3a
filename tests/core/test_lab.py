"""Opening the course in JupyterLab: notebooks committed in the form JupyterLab saves, served with
their kernel's metadata, ``--allow-root`` only for root, widget state not saved with notebooks, and kernels that
warn of nothing."""

from __future__ import annotations

import asyncio
import importlib.util
import json
import sys

import nbformat
import pytest
from jupyter_client.kernelspec import KernelSpecManager

from nvtutorial import lab
from tests.helpers.paths import ROOT

NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))
spec = importlib.util.spec_from_file_location("normalize_notebooks", ROOT / "scripts" / "normalize_notebooks.py")
assert spec is not None
normalize = importlib.util.module_from_spec(spec)
spec.loader.exec_module(normalize)


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_committed_notebooks_are_in_the_form_jupyterlab_saves(path):
    text = path.read_text(encoding="utf-8")
    nb = json.loads(text)
    assert (nb["nbformat"], nb["nbformat_minor"]) == (4, 5), "JupyterLab upgrades older formats on open"
    ids = [c.get("id") for c in nb["cells"]]
    assert all(ids) and len(set(ids)) == len(ids), "every cell needs a unique id (JupyterLab adds missing ones)"
    assert nb["metadata"]["kernelspec"] == normalize.KERNELSPEC
    info = nb["metadata"]["language_info"]
    assert set(info) == set(lab.python_language_info()), "language_info must be complete, as the kernel reports it"
    assert {k: v for k, v in info.items() if k != "version"} == {
        k: v for k, v in lab.python_language_info().items() if k != "version"
    }
    assert text == normalize.normal_text(path), "not in normal form: run scripts/normalize_notebooks.py"


def test_the_normaliser_fixes_what_made_jupyterlab_mark_notebooks_modified(tmp_path):
    nb = nbformat.v4.new_notebook()
    nb.nbformat_minor = 4
    nb.cells = [nbformat.v4.new_markdown_cell("# T"), nbformat.v4.new_code_cell("1 + 1")]
    for cell in nb.cells:
        cell.pop("id", None)
    nb.cells[1].outputs = [nbformat.v4.new_output("execute_result", {"text/plain": "2"}, execution_count=1)]
    nb.metadata = {
        "kernelspec": {"display_name": "Python 3", "language": "python", "name": "python3"},
        "language_info": {"name": "python"},
    }
    path = tmp_path / "old.ipynb"
    path.write_text(json.dumps(nb))
    assert normalize.main(["--check", str(path)]) == 1
    assert normalize.main([str(path)]) == 0
    fixed = json.loads(path.read_text())
    assert fixed["nbformat_minor"] == 5 and all(c.get("id") for c in fixed["cells"])
    assert fixed["cells"][1]["outputs"] == [] and fixed["cells"][1]["execution_count"] is None
    assert fixed["metadata"]["language_info"]["version"] == sys.version.split()[0]
    assert normalize.main(["--check", str(path)]) == 0  # idempotent
    fixed["metadata"]["language_info"]["version"] = "3.12.3"  # a version set before is kept
    path.write_text(json.dumps(fixed))
    normalize.main([str(path)])
    assert json.loads(path.read_text())["metadata"]["language_info"]["version"] == "3.12.3"


def test_allow_root_only_for_root():
    assert "--allow-root" in lab.command("notebooks", is_root=True)
    assert "--allow-root" not in lab.command("notebooks", is_root=False)
    cmd = lab.command("notebooks", port=8899, no_browser=True, extra=["--ServerApp.token=abc"], is_root=False)
    assert cmd[1] == "lab" and "--port=8899" in cmd and "--no-browser" in cmd and cmd[-1] == "--ServerApp.token=abc"
    assert "--ServerApp.contents_manager_class=nvtutorial.lab.CourseContentsManager" in cmd


def test_the_contents_manager_serves_the_running_kernels_metadata(tmp_path):
    """A notebook saved on another Python (or with another display name) opens unmodified."""
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell("1 + 1")]
    nb.metadata = {
        "kernelspec": {"display_name": "Python 3 (elsewhere)", "language": "python", "name": "python3"},
        "language_info": dict(lab.python_language_info(), version="3.0.1"),
    }
    nbformat.write(nb, tmp_path / "a.ipynb")
    nb.metadata["kernelspec"]["name"] = "no-such-kernel"
    nbformat.write(nb, tmp_path / "b.ipynb")
    manager = lab.CourseContentsManager(root_dir=str(tmp_path))
    served = asyncio.run(manager.get("a.ipynb"))["content"]["metadata"]
    installed = KernelSpecManager().get_kernel_spec("python3")
    assert served["kernelspec"] == {"display_name": installed.display_name, "language": "python", "name": "python3"}
    assert served["language_info"] == lab.python_language_info()
    other = asyncio.run(manager.get("b.ipynb"))["content"]["metadata"]
    assert other["language_info"]["version"] == "3.0.1", "a notebook of another kernel is served as it is"
    on_disk = json.loads((tmp_path / "a.ipynb").read_text())
    assert on_disk["metadata"]["language_info"]["version"] == "3.0.1", "opening must not write the file"


def test_widget_state_is_not_saved_with_notebooks_and_an_earlier_override_is_replaced(tmp_path, capsys):
    """Saved widget state makes JupyterLab mark a reopened notebook modified (tests/test_jupyterlab.py reopens one);
    the bars are HTML and need none. An earlier `make lab` wrote saveState: true: the same file now says false."""
    earlier = tmp_path / "overrides.d" / "nvtutorial.json"
    earlier.parent.mkdir()
    earlier.write_text(json.dumps({"@jupyter-widgets/jupyterlab-manager:plugin": {"saveState": True}}))
    target = lab.install_settings(tmp_path)
    assert target == earlier
    assert json.loads(target.read_text()) == {"@jupyter-widgets/jupyterlab-manager:plugin": {"saveState": False}}
    blocked = tmp_path / "blocked"
    blocked.mkdir()
    (blocked / "overrides.d").write_text("a file where the folder should be")  # unwritable, even for root
    assert lab.install_settings(blocked) is None
    assert "marks a notebook with widgets modified" in capsys.readouterr().err


def test_the_subshell_messages_are_untracked_so_the_status_bar_reads_busy():
    """JupyterLab's widget manager asks for a kernel subshell while a cell runs; the answer's idle status must not
    be taken for the kernel's (tests/test_jupyterlab.py watches the status bar itself)."""
    (flag,) = [a for a in lab.command("notebooks", is_root=False) if a.startswith("--MappingKernelManager.")]
    listed = json.loads(flag.split("=", 1)[1])
    assert set(lab.SUBSHELL_MESSAGES) <= set(listed)
    assert {"debug_request", "kernel_info_request", "status"} <= set(listed), "Jupyter Server's own list is kept"


@pytest.mark.timeout(180)
def test_a_kernel_the_lab_starts_prints_no_plain_text_transport_warning(tmp_path):
    """`make lab`'s command gives each kernel CurveZMQ keys: no "[IPKernelApp] WARNING | Kernel is running over TCP
    without encryption" line, which a learner cannot act on, in the server's terminal."""
    import time
    import urllib.request

    from tests.helpers.jupyterlab import Lab, wait_for

    server = Lab(tmp_path, [])
    try:
        request = urllib.request.Request(server.url("api/kernels"), data=b'{"name": "python3"}', method="POST")
        urllib.request.urlopen(request, timeout=30).read()

        def listening() -> bool:  # ipykernel binds its five sockets right after it would have warned
            kernels = server.kernels()
            return bool(kernels) and sum(c.status == "LISTEN" for c in kernels[0].net_connections("tcp")) >= 5

        wait_for(listening, 120, "the kernel to bind its sockets")
        time.sleep(0.5)  # the server relays the kernel's stderr into its log
    finally:
        server.stop()
    log = server.log.read_text()
    assert "Kernel started" in log, log[-2000:]
    assert "without encryption" not in log, log[-2000:]


def test_lang_zh_sets_jupyterlabs_locale_and_english_sets_it_back(tmp_path):
    """`make lab LANG=zh`: JupyterLab's translation extension set to zh_CN (the language pack's locale); the next
    `make lab` writes the file again without it, so JupyterLab is English again."""
    target = lab.install_settings(tmp_path, lang="zh")
    assert target is not None
    written = json.loads(target.read_text())
    assert written["@jupyterlab/translation-extension:plugin"] == {"locale": "zh_CN"}
    assert written["@jupyter-widgets/jupyterlab-manager:plugin"] == {"saveState": False}
    lab.install_settings(tmp_path)
    assert json.loads(target.read_text()) == lab.WIDGET_SETTINGS
    assert lab.FOLDERS["zh"] == "notebooks/zh" and lab.LANGUAGE_PACKS["zh"] == "jupyterlab_language_pack_zh_CN"
