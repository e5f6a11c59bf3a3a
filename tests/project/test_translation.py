"""The Chinese edition's generator and check (scripts/translate_notebooks.py, issue 31): code cells kept byte for byte,
markdown cells from the catalog, a changed English cell made stale and caught, markup that a translation must keep,
and the committed notebooks/zh/ current. On a synthetic notebook in a temporary folder, but for the last check, which
reads this repository."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest

from tests.helpers.paths import ROOT

SCRIPT = ROOT / "scripts" / "translate_notebooks.py"


def load_script():
    spec = importlib.util.spec_from_file_location("translate_notebooks", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look the module up by name
    spec.loader.exec_module(module)
    return module


tn = load_script()

CELLS = [
    (
        "md-title",
        "markdown",
        "# A title\n\nCall `dist.all_reduce` on every rank, see [the docs](https://pytorch.org/docs).",
    ),
    ("code-one", "code", "import torch\nt = torch.ones(4)  # a comment: ünïcode, 中文\n"),
    ("md-text", "markdown", "Every rank calls the collective.\n\n    nvtutorial run selftest --nproc 2"),
    ("code-two", "code", "%%ranks\nprint(rank)"),
]
ZH = {
    "md-title": "# 标题\n\n在每个 rank 上调用 `dist.all_reduce`，参见[文档](https://pytorch.org/docs)。",
    "md-text": "每个 rank 都调用这个集合通信。\n\n    nvtutorial run selftest --nproc 2",
}


def notebook() -> dict:
    cells = []
    for cell_id, kind, text in CELLS:
        cell = {"cell_type": kind, "id": cell_id, "metadata": {"tags": ["x"]} if kind == "code" else {}}
        cell["source"] = text.splitlines(keepends=True)
        cells.append(cell | ({"execution_count": None, "outputs": []} if kind == "code" else {}))
    return {"cells": cells, "metadata": {"kernelspec": {"name": "python3"}}, "nbformat": 4, "nbformat_minor": 5}


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    """A repository with one English notebook, its catalog fully translated, and the Chinese notebook built."""
    (tmp_path / "notebooks").mkdir()
    (tmp_path / "notebooks" / "00_tiny.ipynb").write_text(tn.dumps_notebook(notebook()), encoding="utf-8")
    assert run(tmp_path, "update") == 0
    translate(tmp_path, ZH)
    assert run(tmp_path, "build") == 0
    return tmp_path


def run(root: Path, *args: str) -> int:
    return tn.main([*args, "--root", str(root)])


def po(root: Path) -> Path:
    return root / "locale" / "zh_CN" / "LC_MESSAGES" / "00_tiny.po"


def translate(root: Path, strings: dict[str, str]) -> None:
    """Set translations as a translator would: the string in, the fuzzy flag and the previous English out."""
    catalog = tn.load_catalog(po(root))
    for message in catalog:
        if message.context in strings:
            message.string = strings[message.context]
            message.flags.discard("fuzzy")
            message.previous_id = []
    tn.save_catalog(catalog, po(root))


def cells(path: Path) -> dict[str, dict]:
    return {c["id"]: c for c in json.loads(path.read_text(encoding="utf-8"))["cells"]}


def edit_english(root: Path, cell_id: str, text: str) -> None:
    path = root / "notebooks" / "00_tiny.ipynb"
    nb = json.loads(path.read_text(encoding="utf-8"))
    for cell in nb["cells"]:
        if cell["id"] == cell_id:
            cell["source"] = text.splitlines(keepends=True)
    path.write_text(tn.dumps_notebook(nb), encoding="utf-8")


def test_build_keeps_code_cells_and_replaces_markdown(repo: Path):
    english, chinese = cells(repo / "notebooks" / "00_tiny.ipynb"), cells(repo / "notebooks" / "zh" / "00_tiny.ipynb")
    assert list(chinese) == list(english)
    for cell_id in ("code-one", "code-two"):
        assert json.dumps(chinese[cell_id], sort_keys=True) == json.dumps(english[cell_id], sort_keys=True)
    for cell_id, text in ZH.items():
        assert "".join(chinese[cell_id]["source"]) == text
    text = (repo / "notebooks" / "zh" / "00_tiny.ipynb").read_text(encoding="utf-8")
    assert text == json.dumps(json.loads(text), indent=1, sort_keys=True, ensure_ascii=False) + "\n"
    assert run(repo, "check") == 0


def test_changed_english_cell_is_stale_and_refused(repo: Path, capsys):
    edit_english(repo, "md-text", "Every rank calls the same collective.\n\n    nvtutorial run selftest --nproc 2")
    assert run(repo, "update") == 0
    message = tn.entries(tn.load_catalog(po(repo)))["md-text"]
    assert message.fuzzy and message.string == ZH["md-text"]
    assert tn.previous_of(message).startswith("Every rank calls the collective.")
    capsys.readouterr()
    assert run(repo, "check") == 1
    assert "stale (English changed since translated) (1): md-text" in capsys.readouterr().out
    before = (repo / "notebooks" / "zh" / "00_tiny.ipynb").read_text(encoding="utf-8")
    assert run(repo, "build") == 1
    assert "refused" in capsys.readouterr().out
    assert (repo / "notebooks" / "zh" / "00_tiny.ipynb").read_text(encoding="utf-8") == before
    translate(repo, {"md-text": "每个 rank 都调用同一个集合通信。\n\n    nvtutorial run selftest --nproc 2"})
    assert run(repo, "build") == 0 and run(repo, "check") == 0


def test_stale_before_update_is_caught_too(repo: Path, capsys):
    edit_english(repo, "md-title", "# Another title")
    assert run(repo, "check") == 1
    out = capsys.readouterr().out
    assert "md-title" in out and "not what build writes now" in out


@pytest.mark.parametrize(
    "translation, lost",
    [
        ("# 标题\n\n在每个 rank 上调用 dist.all_reduce，参见[文档](https://pytorch.org/docs)。", "`dist.all_reduce`"),
        (
            "# 标题\n\n在每个 rank 上调用 `dist.all_reduce`，参见[文档](https://pytorch.org/zh)。",
            "](https://pytorch.org/docs)",
        ),
    ],
)
def test_translation_that_drops_markup_fails_check(repo: Path, capsys, translation: str, lost: str):
    translate(repo, {"md-title": translation})
    assert run(repo, "build") == 0  # complete and current: build writes it; check names what it lost
    capsys.readouterr()
    assert run(repo, "check") == 1
    assert f"markup lost in md-title: {lost!r} missing" in capsys.readouterr().out


def test_missing_entry_fails_check_and_build(repo: Path, capsys):
    translate(repo, {"md-text": ""})
    capsys.readouterr()
    assert run(repo, "check") == 1
    assert "missing (1): md-text" in capsys.readouterr().out
    assert run(repo, "build") == 1
    assert run(repo, "build", "--allow-missing") == 0
    text = "".join(cells(repo / "notebooks" / "zh" / "00_tiny.ipynb")["md-text"]["source"])
    assert text.startswith(tn.UNTRANSLATED) and text.endswith(CELLS[2][2])


def test_removed_cell_is_obsolete_then_dropped(repo: Path, capsys):
    path = repo / "notebooks" / "00_tiny.ipynb"
    nb = json.loads(path.read_text(encoding="utf-8"))
    nb["cells"] = [c for c in nb["cells"] if c["id"] != "md-text"]
    path.write_text(tn.dumps_notebook(nb), encoding="utf-8")
    capsys.readouterr()
    assert run(repo, "check") == 1
    assert "obsolete (no markdown cell has this id) (1): md-text" in capsys.readouterr().out
    assert run(repo, "update") == 0 and "md-text" not in tn.entries(tn.load_catalog(po(repo)))


def test_update_is_idempotent(repo: Path):
    text = po(repo).read_text(encoding="utf-8")
    assert run(repo, "update") == 0
    assert po(repo).read_text(encoding="utf-8") == text


def test_glossary_misses_warn_and_fail_only_when_strict(repo: Path, capsys):
    glossary = repo / "locale" / "zh_CN" / "glossary.tsv"
    glossary.write_text("# terms\nen\tzh\tnote\ncollective\t聚合\t\n", encoding="utf-8")
    capsys.readouterr()
    assert run(repo, "check") == 0
    assert "glossary: md-text: 'collective' -> expected 聚合" in capsys.readouterr().out
    assert run(repo, "check", "--strict") == 1


def test_the_committed_chinese_edition_is_complete_and_current(capsys):
    """Every notebooks/zh/NN_*.ipynb is what `build` writes from today's English and catalogs, every catalog is
    complete, no translation lost a code span or link, and the glossary's terms are used (--strict): after an English
    change, `make zh-update`, translate the stale and missing entries, `make zh-build` (docs/translation.md)."""
    assert tn.main(["check", "--strict"]) == 0, capsys.readouterr().out
    said = capsys.readouterr().out
    assert said.count(", 0 stale, 0 missing, 0 obsolete") == len(list((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb")))


def test_cell_pasted_with_a_new_id_keeps_its_translation(repo: Path):
    path = repo / "notebooks" / "00_tiny.ipynb"
    nb = json.loads(path.read_text(encoding="utf-8"))
    nb["cells"][2]["id"] = "md-pasted"
    path.write_text(tn.dumps_notebook(nb), encoding="utf-8")
    assert run(repo, "update") == 0
    found = tn.entries(tn.load_catalog(po(repo)))
    assert "md-text" not in found and found["md-pasted"].string == ZH["md-text"] and not found["md-pasted"].fuzzy
