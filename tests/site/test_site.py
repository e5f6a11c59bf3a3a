"""The course website: its generated pages say where their numbers come from, its check catches
broken links, missing images and outside requests, and the built site (``make site``) passes it."""

from __future__ import annotations

import collections
import importlib.util
import json
import re
import shutil
import sys
from pathlib import Path
from typing import cast

import nbformat
import pytest

from nvtutorial.report import claims
from tests.helpers.paths import ROOT

BUILT = ROOT / "build" / "site"


def load(name: str):
    """A script of ``site/`` (a folder, not a package: ``site`` is also a standard module)."""
    spec = importlib.util.spec_from_file_location(f"site_{name}", ROOT / "site" / f"{name}.py")
    assert spec is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


build_site = load("build_site")
check_site = load("check_site")
executed = build_site.executed  # the module build_site uses (site/executed.py)

GPU_LABEL = "2× NVIDIA H200 · NV18 · NCCL 2.28.9 · torch 2.11.0 · CUDA 13.0"
CPU_LABEL = "CPU, gloo, 2 processes on vm: a simulation, not a GPU measurement"


def notebook_with_outputs(*texts: str) -> nbformat.NotebookNode:
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_markdown_cell("# Title"), nbformat.v4.new_code_cell("print(res.label)")]
    nb.cells[1].outputs = [nbformat.v4.new_output("stream", name="stdout", text=t) for t in texts]
    return nb


def test_run_labels_are_found_in_outputs():
    nb = notebook_with_outputs(
        f"{GPU_LABEL}\n",
        f"start-up: 9.4 s of 11.5 s (82%) on {GPU_LABEL}\n",
        f"{CPU_LABEL}\n",
        "1× NVIDIA H200 · NCCL 2.28.9 · torch 2.11.0 · CUDA 13.0; one process\n",
    )
    labels = build_site.run_labels(nb)
    assert labels[GPU_LABEL] == 2
    assert labels[CPU_LABEL] == 1
    assert labels["1× NVIDIA H200 · NCCL 2.28.9 · torch 2.11.0 · CUDA 13.0"] == 1


def _copy(kind="gpu", **kw):
    base = dict(
        path=ROOT / "reference" / "h200x2" / "03_ddp_training.ipynb",
        kind=kind,
        machine="2× NVIDIA H200 (NV18)",
        profile="full",
        commit="15fcf4b",
        date="2026-11-30",
        duration_s=43.3,
        current=kind == "cpu",
        shared=7,
        cells=53,
    )
    if kind == "cpu":
        base.update(
            path=ROOT / "build" / "executed" / "03_ddp_training.ipynb",
            machine="this machine's CPU",
            profile="ci",
            commit="abc1234",
        )
    return build_site.Copy(**{**base, **kw})


def test_every_notebook_page_says_where_its_outputs_come_from():
    gpu = build_site.provenance_cell(notebook_with_outputs(GPU_LABEL), _copy(current=True), []).source
    assert "2× NVIDIA H200 (NV18)" in gpu and "`15fcf4b`" in gpu and "43 s" in gpu and f"`{GPU_LABEL}`" in gpu
    assert ":class: note" in gpu and "this notebook's text as it is now" in gpu
    older = [
        _copy(),
        _copy(
            path=ROOT / "reference" / "h200x1" / "08_strategy_ladder.ipynb",
            machine="1× NVIDIA H200",
            commit="3800717",
            note="one GPU",
        ),
    ]
    cpu = build_site.provenance_cell(notebook_with_outputs(CPU_LABEL), _copy("cpu"), older).source
    assert ":class: warning" in cpu and "on the CPU" in cpu and "`abc1234`" in cpu and f"`{CPU_LABEL}`" in cpu
    # the GPU runs of older text, each linked (served under gpu-copies/) with its commit and how much still matches
    assert "{download}`h200x2/03_ddp_training.ipynb <../gpu-copies/h200x2/03_ddp_training.ipynb>`" in cpu
    assert "commit `3800717`" in cpu and "7 of the notebook's 53 cells unchanged" in cpu
    alone = build_site.provenance_cell(notebook_with_outputs(CPU_LABEL), _copy("cpu"), []).source
    assert "no GPU run in `reference/` yet" in alone
    failed = build_site.provenance_cell(notebook_with_outputs(GPU_LABEL), _copy(current=True, passed=False), []).source
    assert "it failed there" in failed and ":class: warning" in failed


def test_a_page_is_the_notebooks_cells_with_the_copys_outputs(tmp_path):
    plain = notebook_with_outputs()
    executed_copy = notebook_with_outputs(f"{CPU_LABEL}\n")
    injected = nbformat.v4.new_code_cell('profile = "ci"')
    injected.metadata["tags"] = ["injected-parameters"]
    executed_copy.cells.insert(1, injected)
    page = build_site.page(plain, executed_copy, _copy("cpu"), [])
    assert [c.source for c in page.cells][0] == "# Title" and page.cells[1]["id"] == "site-provenance"
    assert [c.source for c in page.cells[2:]] == ["print(res.label)"]  # papermill's injected cell is not shown
    assert page.cells[2].outputs[0].text == f"{CPU_LABEL}\n"
    verdict = notebook_with_outputs()
    verdict.cells[1].outputs = [
        nbformat.v4.new_output(
            "display_data",
            data={build_site.VERDICT_MIME: {"key": "k"}, "text/markdown": "**k · pass**", "text/plain": "k · pass"},
        )
    ]
    verdict.cells[1].outputs.append(
        nbformat.v4.new_output(
            "display_data", data={build_site.PLAN_MIME: {"notebook": "n"}, "text/html": "<p>", "text/plain": "p"}
        )
    )
    shown = build_site.page(plain, verdict, _copy("cpu"), []).cells[2].outputs
    # Sphinx has no renderer for the copies the tests and tools read (a warning there fails the build)
    assert [set(o.data) for o in shown] == [{"text/markdown", "text/plain"}, {"text/html", "text/plain"}]
    crash = notebook_with_outputs(f"rank 0 failed in {ROOT}/nvtutorial/runtime.py\n")
    crash.cells[1].outputs.append(
        nbformat.v4.new_output("error", ename="E", evalue="x", traceback=[f"File {ROOT}/nvtutorial/launch.py"])
    )
    outputs = build_site.page(plain, crash, _copy("cpu"), []).cells[2].outputs
    assert outputs[0].text == "rank 0 failed in $REPO/nvtutorial/runtime.py\n"
    assert outputs[1].traceback == ["File $REPO/nvtutorial/launch.py"]
    nbformat.validate(page)
    changed = notebook_with_outputs()
    changed.cells[1].source = "print(res)"
    with pytest.raises(SystemExit, match="cell 1 .* differs"):
        build_site.page(changed, executed_copy, _copy("cpu"), [])


def _write(folder, name, *sources):
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_markdown_cell(f"# {name}")] + [nbformat.v4.new_code_cell(x) for x in sources]
    folder.mkdir(parents=True, exist_ok=True)
    nbformat.write(nb, folder / name)
    return nb


def test_each_notebook_is_executed_once_and_reused_until_its_text_or_the_code_changes(tmp_path, monkeypatch):
    """The site takes current copies (its own, or `make test`'s) and executes only what is missing or stale."""
    plain, folder = tmp_path / "notebooks", tmp_path / "executed"
    _write(plain, "50_a.ipynb", "print(1)")
    _write(plain, "51_b.ipynb", "print(2)")
    ran = []

    def fake_run(names, out, jobs):
        ran.append(sorted(names))
        for name in names:
            nb = nbformat.read(plain / name, as_version=4)
            nb.cells[1].outputs = [nbformat.v4.new_output("stream", name="stdout", text=CPU_LABEL)]
            nbformat.write(nb, out / name)
        return {name: 1.0 for name in names}

    monkeypatch.setattr(executed, "fingerprint", lambda paths=None: "code-1")
    chosen = build_site.choose(plain, folder, run=fake_run)
    assert ran == [["50_a.ipynb", "51_b.ipynb"]] and {c.kind for c, _ in chosen.values()} == {"cpu"}
    build_site.choose(plain, folder, run=fake_run)
    assert ran[1:] == [], "current copies are reused"
    _write(plain, "51_b.ipynb", "print(3)")  # one notebook's text changed
    build_site.choose(plain, folder, run=fake_run)
    assert ran[1:] == [["51_b.ipynb"]]
    monkeypatch.setattr(executed, "fingerprint", lambda paths=None: "code-2")  # the package changed
    build_site.choose(plain, folder, run=fake_run)
    assert ran[2:] == [["50_a.ipynb", "51_b.ipynb"]]
    build_site.choose(plain, folder, fresh=True, run=fake_run)
    assert ran[3:] == [["50_a.ipynb", "51_b.ipynb"]]
    build_site.choose(plain, folder, run=None)  # executing off: every copy is current, nothing to do
    _write(plain, "50_a.ipynb", "print(4)")
    with pytest.raises(SystemExit, match="no current executed copy of 50_a.ipynb"):
        build_site.choose(plain, folder, run=None)


def test_a_gpu_copy_of_the_current_text_is_shown_instead_of_a_cpu_run(tmp_path, monkeypatch):
    gpu = nbformat.read(ROOT / "reference" / "h200x2" / "00_welcome.ipynb", as_version=4)
    plain = tmp_path / "notebooks"
    plain.mkdir()
    text = cast(nbformat.NotebookNode, nbformat.from_dict(gpu))
    text.cells = [c for c in text.cells if "injected-parameters" not in c.metadata.get("tags", [])]
    for c in text.cells:
        if c.cell_type == "code":
            c.outputs, c.execution_count = [], None
    nbformat.write(text, plain / "00_welcome.ipynb")  # the GPU copy's own text, as if it were the notebook today
    monkeypatch.setattr(executed, "fingerprint", lambda paths=None: "code-1")

    def no_run(names, out, jobs):
        raise AssertionError(f"executed {names}: a current GPU copy needs no CPU run")

    ((shown, older),) = build_site.choose(plain, tmp_path / "executed", run=no_run).values()
    assert shown.kind == "gpu" and shown.current and shown.commit == "15fcf4b"
    assert all(not copy.current for copy in older)  # other GPU runs of 00, of older text, are linked as older


def test_executed_copies_are_pruned_to_what_is_current(tmp_path, monkeypatch):
    plain, folder = tmp_path / "notebooks", tmp_path / "executed"
    a = _write(plain, "50_a.ipynb", "print(1)")
    _write(plain, "51_b.ipynb", "print(2)")
    monkeypatch.setattr(executed, "fingerprint", lambda paths=None: "code-1")
    executed.prune(folder, notebooks=plain)
    nbformat.write(a, folder / "50_a.ipynb")
    _write(folder, "51_b.ipynb", "print(2)  # an older text")
    _write(folder, "49_gone.ipynb", "print(0)")  # a notebook that no longer exists
    assert executed.prune(folder, notebooks=plain) == ["49_gone.ipynb", "51_b.ipynb"]
    assert executed.is_current(folder, "50_a.ipynb", plain) and not (folder / "51_b.ipynb").exists()
    monkeypatch.setattr(executed, "fingerprint", lambda paths=None: "code-2")
    (folder / "runs").mkdir()
    assert executed.prune(folder, notebooks=plain) == ["50_a.ipynb"] and not (folder / "runs").exists()
    assert executed.read_stamp(folder)["fingerprint"] == "code-2"


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


def test_the_hardware_page_names_each_pages_outputs_and_older_gpu_runs():
    labels = {"03_ddp_training": collections.Counter({CPU_LABEL: 3}), "08_strategy_ladder": collections.Counter()}
    page = build_site.hardware_page(
        {"03_ddp_training": _copy("cpu"), "08_strategy_ladder": _copy(current=True)},
        {"03_ddp_training": [_copy()], "08_strategy_ladder": []},
        labels,
    )
    assert "NVIDIA H200, 143771 MiB" in page and "NV18" in page  # machine.txt, as the machine printed it
    assert "\x1b[" not in page  # nvidia-smi's terminal colours are dropped
    assert "[03_ddp_training](notebooks/03_ddp_training.ipynb) | CPU, executed by this build" in page
    assert (
        "{download}`h200x2/03_ddp_training.ipynb <gpu-copies/h200x2/03_ddp_training.ipynb>` (`15fcf4b`, 7/53 cells)"
        in page
    )
    assert f"`{CPU_LABEL}` ×3" in page


def test_the_index_of_gpu_copies_lists_every_copy_with_its_readmes_commit():
    index = json.loads((ROOT / "reference" / "copies.json").read_text())["copies"]
    listed = {e["path"] for e in index}
    assert listed == {p.relative_to(ROOT / "reference").as_posix() for p in (ROOT / "reference").rglob("*.ipynb")}
    readme = (ROOT / "reference" / "h200x2" / "README.md").read_text()
    for e in index:
        assert e["notebook"] in {p.stem for p in (ROOT / "notebooks").glob("*.ipynb")}
        assert re.fullmatch(r"[0-9a-f]{7,40}", e["commit"]) and (ROOT / "reference" / e["summary"]).is_file()
        if e["path"].startswith("h200x2/") and e["path"].count("/") == 1:
            assert f"| [{e['notebook']}]({e['notebook']}.ipynb) | yes |" in readme
            assert re.search(rf"\| \[{e['notebook']}\][^\n]* \| {e['commit']} \|", readme), e


# ----------------------------------------------------------------------------------------------- the check


def write(root: Path, name: str, html: str) -> None:
    path = root / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"<html><body>{html}</body></html>")


@pytest.fixture
def sound_site(tmp_path):
    write(tmp_path, "index.html", '<a href="intro.html">intro</a>')
    write(
        tmp_path,
        "intro.html",
        '<h1 id="top">Intro</h1><a href="notebooks/a.html#run">a</a>'
        '<a href="https://pytorch.org/docs">docs</a><img src="_images/fig.png">'
        '<script src="_static/widgets/require.js"></script>',
    )
    write(
        tmp_path,
        "notebooks/a.html",
        '<section id="run"><a href="../intro.html#top">back</a><img src="data:image/png;base64,AAAA"></section>',
    )
    (tmp_path / "_images").mkdir()
    (tmp_path / "_images" / "fig.png").write_bytes(b"\x89PNG")
    (tmp_path / "_static" / "widgets").mkdir(parents=True)
    (tmp_path / "_static" / "widgets" / "require.js").write_text("")
    return tmp_path


def test_a_sound_site_passes_the_check(sound_site):
    assert check_site.check_site(sound_site) == []


@pytest.mark.parametrize(
    "html, expected",
    [
        ('<img src="_images/missing.png">', "_images/missing.png does not exist"),
        ('<a href="notebooks/b.html">b</a>', "link notebooks/b.html leads nowhere"),
        ('<a href="notebooks/a.html#nowhere">a</a>', "no #nowhere in notebooks/a.html"),
        ('<script src="https://cdn.jsdelivr.net/npm/x.js"></script>', "from outside the site"),
        ('<link rel="stylesheet" href="//fonts.example.org/a.css">', "from outside the site"),
    ],
)
def test_the_check_catches_each_defect(sound_site, html, expected):
    write(sound_site, "extra.html", html)
    problems = check_site.check_site(sound_site)
    assert len(problems) == 1 and expected in problems[0] and problems[0].startswith("extra.html")


def test_the_check_refuses_a_folder_that_is_not_a_site(tmp_path):
    assert "no index.html" in check_site.check_site(tmp_path)[0]


NOTEBOOK = {
    "cells": [
        {"cell_type": "markdown", "source": "# 03 · DDP\n\ntext"},
        {"cell_type": "code", "source": ["x = 1\n", "print(x)"]},
        {"cell_type": "markdown", "source": "## 2. `enable_flash_sdp` and [a link](https://x.org)"},
        {"cell_type": "code", "source": "%%ranks\nprint(rank)"},
    ]
}


def _page(inputs, headings):
    body = "".join(f'<h{level}>{text}<a class="headerlink" href="#x">#</a></h{level}>' for level, text in headings)
    body += "".join(
        f'<div class="cell docutils container"><div class="cell_input docutils container">'
        f'<div class="highlight"><pre><span>{src}</span></pre></div></div>'
        f'<div class="cell_output"><pre>output</pre></div></div>'
        for src in inputs
    )
    return f"<html><body>{body}</body></html>"


HEADINGS = [(1, "03 · DDP"), (2, "2. <code>enable_flash_sdp</code> and a link")]


def test_a_page_that_shows_the_notebook_passes_and_every_other_fails():
    assert check_site.page_differences(_page(["x = 1\nprint(x)", "%%ranks\nprint(rank)"], HEADINGS), NOTEBOOK) == []
    changed = check_site.page_differences(_page(["x = 2\nprint(x)", "%%ranks\nprint(rank)"], HEADINGS), NOTEBOOK)
    assert changed and "code cell 0" in changed[0]
    extra = check_site.page_differences(_page(["x = 1\nprint(x)", "%%ranks\nprint(rank)", "y"], HEADINGS), NOTEBOOK)
    assert extra == ["3 code cells on the page, 2 in the notebook"]
    old_heading = check_site.page_differences(
        _page(["x = 1\nprint(x)", "%%ranks\nprint(rank)"], [(1, "03 · DDP"), (2, "2. the old title")]), NOTEBOOK
    )
    assert len(old_heading) == 1 and "enable_flash_sdp and a link" in old_heading[0]
    swapped = check_site.page_differences(_page(["x = 1\nprint(x)", "%%ranks\nprint(rank)"], HEADINGS[::-1]), NOTEBOOK)
    assert swapped and "order" in swapped[0]


# ----------------------------------------------------------------------------------------------- the built site


@pytest.fixture(scope="module")
def built():
    if not (BUILT / "index.html").exists():
        pytest.skip("no website in build/site: run `make site` first (.ci/run does)")
    sources = [
        *(ROOT / "site").iterdir(),
        *(ROOT / "reference").rglob("*.ipynb"),
        ROOT / "reference" / "copies.json",
        *(ROOT / "notebooks").glob("*.ipynb"),
        *(ROOT / "notebooks" / "zh").glob("*.ipynb"),  # the Chinese book's text
        *(ROOT / "site" / "_templates").iterdir(),
        ROOT / "README.zh-CN.md",  # the Chinese intro's learning path
        ROOT / "nvtutorial" / "report" / "claims.py",
    ]
    newest = max(p.stat().st_mtime for p in sources if p.is_file())
    if (BUILT / "index.html").stat().st_mtime < newest:
        pytest.skip("build/site is older than its sources: run `make site` again")
    return BUILT


def test_the_built_site_passes_the_check(built):
    assert check_site.check_site(built) == []


def test_every_page_shows_its_notebooks_current_text(built):
    """The page of each notebook has the notebook's code cells and headings, in order (the built HTML), and the book
    source it was built from has exactly the notebook's cells (plus the site's note at the top)."""
    assert check_site.check_pages(built, ROOT / "notebooks") == []
    for path in sorted((ROOT / "notebooks").glob("*.ipynb")):
        source = nbformat.read(ROOT / "build" / "site-src" / "notebooks" / path.name, as_version=4)
        assert executed.differences(source, nbformat.read(path, as_version=4)) == [], path.name
        assert source.cells[1]["id"] == "site-provenance"


OLD_TEXT = (
    "whl/cu122",
    "WARN (default",
    "far more than 3–5×",
    "gradients are dense",
    "rebuild buckets in the order",
    "harmful for augmentation",
)
"""Statements the notebooks have corrected that the pages of the old site still taught (issue 22)."""


def test_no_page_teaches_the_corrected_statements(built):
    for page in sorted((built / "notebooks").glob("*.html")):
        text = page.read_text()
        found = [s for s in OLD_TEXT if s in text]
        assert not found, f"{page.name} still says {found}"


def test_pages_03_and_08_say_where_their_outputs_come_from(built):
    for name in ("03_ddp_training", "08_strategy_ladder"):
        html = (built / "notebooks" / f"{name}.html").read_text()
        assert ("CPU outputs: a simulation, not a GPU measurement" in html) != ("GPU outputs of this very text" in html)
        if "CPU outputs" in html:  # then the GPU runs of its older text are linked, and served with the site
            links = re.findall(r'href="\.\./(_downloads/[^"]+\.ipynb)"', html)
            assert links and all((built / link).is_file() for link in links), links


def test_the_built_site_has_a_page_per_notebook_and_serves_the_widget_js(built):
    for path in sorted((ROOT / "notebooks").glob("*.ipynb")):
        page = built / "notebooks" / f"{path.stem}.html"
        assert page.exists(), f"no page for {path.name}"
        html = page.read_text()
        assert "CPU outputs: a simulation, not a GPU measurement" in html or "GPU outputs of this very text" in html
        if "application/vnd.jupyter.widget-view+json" in html:
            assert "_static/widgets/require.js" in html and "_static/widgets/embed-amd.js" in html
            assert html.index("widgets/require.js") < html.index("widgets-config.js") < html.index("embed-amd.js")
    for name in ("require.js", "widgets-config.js", "embed-amd.js"):
        assert (built / "_static" / "widgets" / name).stat().st_size > 0
    assert list((built / "_static" / "widgets" / "html-manager").glob("*.woff2"))
    assert (built / "claims.html").exists() and (built / "hardware.html").exists()
    assert (built / "searchindex.js").exists() and (built / "search.html").exists()


def test_the_site_check_runs_as_a_command(built, tmp_path, capsys):
    assert check_site.main([str(built), str(ROOT / "notebooks")]) == 0
    broken = tmp_path / "site"
    shutil.copytree(built, broken)
    (broken / "claims.html").unlink()
    assert check_site.main([str(broken)]) == 1
    assert "claims.html leads nowhere" in capsys.readouterr().out


# ----------------------------------------------------------------------------------------------- the Chinese book


def test_a_chinese_page_is_the_english_page_with_the_chinese_text_and_the_same_outputs():
    """Nothing executes again: the Chinese page takes the English page's outputs, cell by cell by id."""
    plain = notebook_with_outputs()
    plain.cells.append(nbformat.v4.new_markdown_cell("## Summary"))
    executed_copy = notebook_with_outputs(f"{CPU_LABEL}\n")
    executed_copy.cells.append(nbformat.v4.new_markdown_cell("## Summary"))
    for mine, theirs in zip(executed_copy.cells, plain.cells, strict=True):
        mine["id"] = "copy-" + theirs["id"]  # an executed copy may carry other ids: the notebook's are kept
    zh = cast(nbformat.NotebookNode, nbformat.from_dict(plain))
    zh.cells[0].source, zh.cells[2].source = "# 标题", "## 小结"
    en_page = build_site.page(plain, executed_copy, _copy("cpu"), [])
    note = build_site.provenance_cell(en_page, _copy("cpu"), [], "zh")
    page = build_site.translated(en_page, plain, zh, note, "50_a")
    assert [c.source for c in page.cells[:1] + page.cells[2:]] == ["# 标题", "print(res.label)", "## 小结"]
    assert page.cells[1]["id"] == "site-provenance" and "CPU 输出：这是模拟，不是 GPU 测量" in page.cells[1].source
    assert page.cells[2].outputs == en_page.cells[2].outputs and page.cells[2]["id"] == plain.cells[1]["id"]
    assert en_page.cells[0].source == "# Title", "the English page is left as it was"
    nbformat.validate(page)
    stale = cast(nbformat.NotebookNode, nbformat.from_dict(zh))
    stale.cells[1].source = "print(res)"  # an older generated notebook: its code is not today's
    with pytest.raises(SystemExit, match=r"notebooks/zh/50_a.ipynb is not the translation .*make zh-update zh-build"):
        build_site.translated(en_page, plain, stale, note, "50_a")


def test_the_chinese_provenance_note_says_the_same_as_the_english():
    gpu = build_site.provenance_cell(notebook_with_outputs(GPU_LABEL), _copy(current=True), [], "zh").source
    assert "本页正文的 GPU 输出" in gpu and "2× NVIDIA H200 (NV18)" in gpu and "`15fcf4b`" in gpu and "43 秒" in gpu
    assert f"`{GPU_LABEL}`（1 次）" in gpu and ":class: note" in gpu
    cpu = build_site.provenance_cell(notebook_with_outputs(CPU_LABEL), _copy("cpu"), [_copy()], "zh").source
    assert "**在 CPU 上**" in cpu and ":class: warning" in cpu and "`$REPO`" in cpu
    assert "{download}`h200x2/03_ddp_training.ipynb <../gpu-copies/h200x2/03_ddp_training.ipynb>`" in cpu
    assert "本 notebook 现有的 53 个单元格中，有 7 个在这份副本中未变" in cpu
    failed = build_site.provenance_cell(notebook_with_outputs(GPU_LABEL), _copy(current=True, passed=False), [], "zh")
    assert "它在那里失败了" in failed.source and ":class: warning" in failed.source


def test_the_chinese_claims_page_quotes_the_source_and_links_every_notebook():
    page = build_site.claims_page("zh")
    rows = [line for line in page.splitlines() if re.match(r"^\| C\d+ \|", line)]
    assert [r.split("|")[1].strip() for r in rows] == [c.id for c in claims.CLAIMS]
    entries = build_site.claims_zh()
    for claim, row in zip(claims.CLAIMS, rows, strict=True):
        assert f"**{build_site.STATUS_ZH[claim.status]}**（{claim.status}）" in row
        assert f"[{claim.notebook}](notebooks/{claim.notebook}.ipynb)" in row
        assert build_site.EVIDENCE_ZH[claim.evidence] in row
        assert entries[claim.id]["source_zh"].replace("|", "\\|") in row
    assert "原博客的原话" in page and "那是原文" in page


def test_a_stale_chinese_claim_fails_the_build(tmp_path):
    import yaml

    entries = yaml.safe_load(build_site.CLAIMS_ZH.read_text())
    entries["C5"]["finding"] = "an older English finding"
    del entries["C7"]
    entries["C99"] = entries["C1"]
    path = tmp_path / "claims.zh.yml"
    path.write_text(yaml.safe_dump(entries, allow_unicode=True))
    with pytest.raises(SystemExit) as failed:
        build_site.claims_zh(path)
    message = str(failed.value)
    assert "C5: its finding changed in claims.py" in message and "C7 has no entry" in message
    assert "C99 is no claim" in message


def test_the_chinese_intro_and_hardware_page():
    assert "<!-- learning-path -->" in (ROOT / "site" / "intro.zh.md").read_text()
    table = build_site.learning_path(build_site.README_ZH, "学习路线")
    for path in sorted((ROOT / "notebooks").glob("*.ipynb")):
        assert f"[{path.stem}](notebooks/{path.stem}.ipynb)" in table
    page = build_site.hardware_page(
        {"03_ddp_training": _copy("cpu")},
        {"03_ddp_training": [_copy()]},
        {"03_ddp_training": collections.Counter()},
        "zh",
    )
    assert (
        page.startswith("# 数字从何而来") and "CPU，由本次构建执行" in page and "（`15fcf4b`，7/53 个单元格）" in page
    )


def _twin_site(root: Path, zh_text: str = "这是中文的页面，讲的是两块 GPU。", outputs: int = 1) -> Path:
    out = '<div class="cell_output"><pre>x</pre></div>'
    write(root, "index.html", "")
    write(root, "zh/index.html", "")
    write(
        root,
        "notebooks/a.html",
        f'<a class="nvtutorial-lang-switch" href="../zh/notebooks/a.html">中文</a><article><p>English text</p>{out}'
        "</article>",
    )
    write(
        root,
        "zh/notebooks/a.html",
        f'<a class="nvtutorial-lang-switch" href="../../notebooks/a.html">English</a><article><p>{zh_text}</p>'
        f"<pre>print(x)</pre>{out * outputs}</article>",
    )
    (root / "nb").mkdir(exist_ok=True)
    (root / "nb" / "a.ipynb").write_text("{}")
    return root


def test_the_language_check_passes_twins_and_catches_each_defect(tmp_path):
    assert check_site.check_languages(_twin_site(tmp_path / "ok"), tmp_path / "ok" / "nb") == []
    english = _twin_site(tmp_path / "english", zh_text="This page was not translated at all.")
    assert "not Chinese" in check_site.check_languages(english, english / "nb")[0]
    fewer = _twin_site(tmp_path / "fewer", outputs=0)
    assert check_site.check_languages(fewer, fewer / "nb") == [
        "zh/notebooks/a.html: 0 cell outputs, its English page has 1"
    ]
    lone = _twin_site(tmp_path / "lone")
    write(lone, "claims.html", '<a class="nvtutorial-lang-switch" href="zh/claims.html">中文</a>')
    assert check_site.check_languages(lone, lone / "nb") == [
        "claims.html: no page zh/claims.html in the other language"
    ]
    wrong = _twin_site(tmp_path / "wrong")
    write(wrong, "zh/notebooks/a.html", '<a class="nvtutorial-lang-switch" href="../../index.html">English</a>')
    problems = check_site.check_languages(wrong, wrong / "nb")
    assert any("the language switch leads to ../../index.html, not to its twin" in p for p in problems), problems


def test_the_built_chinese_book_is_every_notebook_in_chinese_with_the_english_outputs(built):
    assert check_site.check_pages(built / "zh", ROOT / "notebooks" / "zh") == []
    assert check_site.check_languages(built, ROOT / "notebooks") == []
    for path in sorted((ROOT / "notebooks").glob("*.ipynb")):
        en = nbformat.read(ROOT / "build" / "site-src" / "notebooks" / path.name, as_version=4)
        zh = nbformat.read(ROOT / "build" / "site-src-zh" / "notebooks" / path.name, as_version=4)
        assert [c.get("outputs") for c in zh.cells[2:]] == [c.get("outputs") for c in en.cells[2:]], path.name
        assert (
            zh.cells[1]["id"] == "site-provenance"
            and "```{admonition} 本页正文的 GPU 输出" in zh.cells[1].source
            or "CPU 输出" in zh.cells[1].source
        )
        html = (built / "zh" / "notebooks" / f"{path.stem}.html").read_text()
        assert "CPU 输出：这是模拟，不是 GPU 测量" in html or "本页正文的 GPU 输出" in html
        assert '<html lang="zh-CN"' in html
    for name in ("claims.html", "hardware.html", "intro.html", "search.html"):
        assert (built / "zh" / name).is_file()
    assert (built / "zh" / "_static" / "widgets" / "require.js").stat().st_size > 0
