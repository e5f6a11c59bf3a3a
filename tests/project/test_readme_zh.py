"""README.zh-CN.md, the Chinese twin of README.md (issue 31), kept in step with it: each links the other at the top;
the same ``## `` sections in the same order (each Chinese heading followed by ``<!-- en: ... -->``, the English
heading it translates); the same fenced code blocks, byte for byte; its generated blocks current (the claims table
in Chinese, ``site/claims.zh.yml``; README.md's fault table); its learning path the same notebooks; its prose
Chinese."""

from __future__ import annotations

import importlib.util
import re
import sys

from tests.helpers.paths import ROOT

EN = ROOT / "README.md"
ZH = ROOT / "README.zh-CN.md"
FENCE = re.compile(r"^```.*?^```$", re.MULTILINE | re.DOTALL)
HEADING = re.compile(r"^## (.+)$", re.MULTILINE)
MAPPED = re.compile(r"^## (.+)\n<!-- en: (.+) -->$", re.MULTILINE)
CJK = re.compile(r"[\u4e00-\u9fff]")
LATIN = re.compile(r"[A-Za-z]")


def _load(name: str):
    spec = importlib.util.spec_from_file_location(f"site_{name}", ROOT / "site" / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def test_each_readme_links_the_other_at_the_top():
    assert "(README.zh-CN.md)" in "\n".join(EN.read_text().splitlines()[:4])
    assert "(README.md)" in "\n".join(ZH.read_text().splitlines()[:4])


def test_the_same_sections_in_the_same_order():
    en, zh = EN.read_text(), ZH.read_text()
    en_headings = HEADING.findall(FENCE.sub("", en))
    zh_headings = HEADING.findall(FENCE.sub("", zh))
    assert len(zh_headings) == len(en_headings), (zh_headings, en_headings)
    mapped = MAPPED.findall(zh)
    assert [h for h, _ in mapped] == zh_headings, "every Chinese `## ` heading is followed by <!-- en: ... -->"
    assert [e for _, e in mapped] == en_headings, "the Chinese sections translate the English ones, in order"


def test_the_same_code_blocks_byte_for_byte():
    en, zh = FENCE.findall(EN.read_text()), FENCE.findall(ZH.read_text())
    assert en and zh == en


def test_the_generated_blocks_are_current():
    """`python site/build_site.py --readme-zh` writes them: the claims table in Chinese, README.md's fault table."""
    text = ZH.read_text()
    for name, block in _load("build_site").readme_zh_blocks().items():
        assert block in text, f"README.zh-CN.md's {name} is not current: run `python site/build_site.py --readme-zh`"


def test_the_learning_path_lists_the_same_notebooks():
    build_site = _load("build_site")
    en = re.findall(r"\[(\d\d_\w+)\]", build_site.learning_path(EN))
    zh = re.findall(r"\[(\d\d_\w+)\]", build_site.learning_path(ZH, "学习路线"))
    assert zh == en == sorted(p.stem for p in (ROOT / "notebooks").glob("*.ipynb"))


def test_the_prose_is_chinese():
    """Code, code spans, links' targets and the generated fault table (the launcher's English messages) left out."""
    text = FENCE.sub("", ZH.read_text())
    text = re.sub(r"<!-- fault-table: start.*?<!-- fault-table: end -->", "", text, flags=re.DOTALL)
    text = re.sub(r"`[^`\n]*`|\]\([^)]*\)|<!--.*?-->", "", text)
    cjk, latin = len(CJK.findall(text)), len(LATIN.findall(text))
    assert cjk / (cjk + latin) > 0.6, f"{cjk} CJK characters, {latin} Latin letters"
