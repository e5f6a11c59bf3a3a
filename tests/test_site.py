"""The course website: its generated pages say where their numbers come from, its check catches
broken links, missing images and outside requests, and the built site (``make site``) passes it."""

from __future__ import annotations

import importlib.util
import re
import shutil
from pathlib import Path

import nbformat
import pytest

from nvtutorial.report import claims

ROOT = Path(__file__).resolve().parent.parent
BUILT = ROOT / "build" / "site"


def load(name: str):
    """A script of ``site/`` (a folder, not a package: ``site`` is also a standard module)."""
    spec = importlib.util.spec_from_file_location(name, ROOT / "site" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


build_site = load("build_site")
check_site = load("check_site")

GPU_LABEL = "2× NVIDIA H200 · NV18 · NCCL 2.28.9 · torch 2.11.0 · CUDA 13.0"
CPU_LABEL = "CPU, gloo, 2 processes on vm: a simulation, not a GPU measurement"


def notebook_with_outputs(*texts: str) -> nbformat.NotebookNode:
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_markdown_cell("# Title"), nbformat.v4.new_code_cell("print(res.label)")]
    nb.cells[1].outputs = [nbformat.v4.new_output("stream", name="stdout", text=t) for t in texts]
    return nb


def test_run_labels_are_found_in_outputs():
    nb = notebook_with_outputs(f"{GPU_LABEL}\n", f"start-up: 9.4 s of 11.5 s (82%) on {GPU_LABEL}\n",
                               f"{CPU_LABEL}\n", "1× NVIDIA H200 · NCCL 2.28.9 · torch 2.11.0 · CUDA 13.0; one process\n")
    labels = build_site.run_labels(nb)
    assert labels[GPU_LABEL] == 2
    assert labels[CPU_LABEL] == 1
    assert labels["1× NVIDIA H200 · NCCL 2.28.9 · torch 2.11.0 · CUDA 13.0"] == 1


def test_every_notebook_page_says_where_its_outputs_come_from():
    info = {"where": "2× NVIDIA H200 (NV18)", "profile": "full", "commit": "15fcf4b", "duration_s": 43.3}
    gpu = build_site.provenance_cell(notebook_with_outputs(GPU_LABEL), info).source
    assert "2× NVIDIA H200 (NV18)" in gpu and "`15fcf4b`" in gpu and "43 s" in gpu and f"`{GPU_LABEL}`" in gpu
    assert ":class: note" in gpu
    cpu = build_site.provenance_cell(notebook_with_outputs(CPU_LABEL), info).source
    assert ":class: warning" in cpu, "a page whose runs were CPU simulations must stand out"
    none = build_site.provenance_cell(None, None).source
    assert "without outputs" in none and ":class: warning" in none
    failed = build_site.provenance_cell(notebook_with_outputs(GPU_LABEL), dict(info, passed=False)).source
    assert "it failed there" in failed and ":class: warning" in failed


def test_a_notebook_without_a_gpu_copy_is_shown_without_outputs(tmp_path):
    plain = tmp_path / "08_new.ipynb"
    nbformat.write(notebook_with_outputs(), plain)
    staged = build_site.stage_notebook(plain, None, None)
    assert staged.cells[0].source == "# Title" and "No GPU run" in staged.cells[1].source
    nbformat.validate(staged)


def test_the_reference_runs_are_read_from_the_reference_folder():
    runs = build_site.reference_runs()
    for path in sorted((ROOT / "reference" / "h200x2").glob("*.ipynb")):
        info = runs[path.stem]
        assert info["passed"] is True and info["duration_s"] > 0 and info["profile"] == "full"
        assert re.fullmatch(r"[0-9a-f]{7,40}", info["commit"]), f"{path.stem}: no commit in the reference README"


def test_the_claims_page_is_the_registry_with_each_notebook_linked():
    page = build_site.claims_page()
    rows = [line for line in page.splitlines() if re.match(r"^\| C\d+ \|", line)]
    assert [r.split("|")[1].strip() for r in rows] == [c.id for c in claims.CLAIMS]
    notebooks = {p.stem for p in (ROOT / "notebooks").glob("*.ipynb")}
    for claim, row in zip(claims.CLAIMS, rows, strict=True):
        assert f"**{claim.status}**" in row
        assert f"[{claim.notebook}](notebooks/{claim.notebook}.ipynb)" in row
        assert claim.notebook in notebooks, f"{claim.id} names {claim.notebook}, which is not a notebook"


def test_the_intro_links_every_notebook_of_the_learning_path():
    table = build_site.learning_path()
    for path in sorted((ROOT / "notebooks").glob("*.ipynb")):
        assert f"[{path.stem}](notebooks/{path.stem}.ipynb)" in table


def test_the_hardware_page_has_the_machine_and_every_page():
    staged = {p.stem: nbformat.read(p, as_version=4) for p in sorted((ROOT / "reference" / "h200x2").glob("*.ipynb"))}
    staged["08_new"] = None
    page = build_site.hardware_page(build_site.reference_runs(), staged)
    assert "NVIDIA H200, 143771 MiB" in page and "NV18" in page  # machine.txt, as the machine printed it
    assert "\x1b[" not in page  # nvidia-smi's terminal colours are dropped
    for name in staged:
        assert f"[{name}](notebooks/{name}.ipynb)" in page
    assert "none (no GPU copy yet)" in page


# ----------------------------------------------------------------------------------------------- the check

def write(root: Path, name: str, html: str) -> None:
    path = root / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"<html><body>{html}</body></html>")


@pytest.fixture
def sound_site(tmp_path):
    write(tmp_path, "index.html", '<a href="intro.html">intro</a>')
    write(tmp_path, "intro.html", '<h1 id="top">Intro</h1><a href="notebooks/a.html#run">a</a>'
          '<a href="https://pytorch.org/docs">docs</a><img src="_images/fig.png">'
          '<script src="_static/widgets/require.js"></script>')
    write(tmp_path, "notebooks/a.html", '<section id="run"><a href="../intro.html#top">back</a>'
          '<img src="data:image/png;base64,AAAA"></section>')
    (tmp_path / "_images").mkdir()
    (tmp_path / "_images" / "fig.png").write_bytes(b"\x89PNG")
    (tmp_path / "_static" / "widgets").mkdir(parents=True)
    (tmp_path / "_static" / "widgets" / "require.js").write_text("")
    return tmp_path


def test_a_sound_site_passes_the_check(sound_site):
    assert check_site.check_site(sound_site) == []


@pytest.mark.parametrize("html, expected", [
    ('<img src="_images/missing.png">', "_images/missing.png does not exist"),
    ('<a href="notebooks/b.html">b</a>', "link notebooks/b.html leads nowhere"),
    ('<a href="notebooks/a.html#nowhere">a</a>', "no #nowhere in notebooks/a.html"),
    ('<script src="https://cdn.jsdelivr.net/npm/x.js"></script>', "from outside the site"),
    ('<link rel="stylesheet" href="//fonts.example.org/a.css">', "from outside the site"),
])
def test_the_check_catches_each_defect(sound_site, html, expected):
    write(sound_site, "extra.html", html)
    problems = check_site.check_site(sound_site)
    assert len(problems) == 1 and expected in problems[0] and problems[0].startswith("extra.html")


def test_the_check_refuses_a_folder_that_is_not_a_site(tmp_path):
    assert "no index.html" in check_site.check_site(tmp_path)[0]


# ----------------------------------------------------------------------------------------------- the built site

@pytest.fixture(scope="module")
def built():
    if not (BUILT / "index.html").exists():
        pytest.skip("no website in build/site: run `make site` first (.ci/run does)")
    sources = [*(ROOT / "site").iterdir(), *(ROOT / "reference" / "h200x2").glob("*.ipynb"),
               *(ROOT / "notebooks").glob("*.ipynb"), ROOT / "nvtutorial" / "report" / "claims.py"]
    newest = max(p.stat().st_mtime for p in sources if p.is_file())
    if (BUILT / "index.html").stat().st_mtime < newest:
        pytest.skip("build/site is older than its sources: run `make site` again")
    return BUILT


def test_the_built_site_passes_the_check(built):
    assert check_site.check_site(built) == []


def test_the_built_site_has_a_page_per_notebook_and_serves_the_widget_js(built):
    for path in sorted((ROOT / "notebooks").glob("*.ipynb")):
        page = built / "notebooks" / f"{path.stem}.html"
        assert page.exists(), f"no page for {path.name}"
        html = page.read_text()
        assert "Where these outputs come from" in html or "No GPU run of this notebook yet" in html
        if "application/vnd.jupyter.widget-view+json" in html:
            assert "_static/widgets/require.js" in html and "_static/widgets/embed-amd.js" in html
            assert html.index("widgets/require.js") < html.index("widgets-config.js") < html.index("embed-amd.js")
    for name in ("require.js", "widgets-config.js", "embed-amd.js"):
        assert (built / "_static" / "widgets" / name).stat().st_size > 0
    assert list((built / "_static" / "widgets" / "html-manager").glob("*.woff2"))
    assert (built / "claims.html").exists() and (built / "hardware.html").exists()
    assert (built / "searchindex.js").exists() and (built / "search.html").exists()


def test_the_site_check_runs_as_a_command(built, tmp_path, capsys):
    assert check_site.main([str(built)]) == 0
    broken = tmp_path / "site"
    shutil.copytree(built, broken)
    (broken / "claims.html").unlink()
    assert check_site.main([str(broken)]) == 1
    assert "claims.html leads nowhere" in capsys.readouterr().out
