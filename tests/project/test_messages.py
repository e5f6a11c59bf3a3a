"""What the course's code prints goes through one catalog (issue 31, item 2; docs/translation.md, "Printed messages").

The messages are the ``_("...")`` and ``N_("...")`` literals of ``nvtutorial/`` (``babel.cfg``), read here with
Babel's extractor as ``pybabel extract`` reads them; the catalog is ``locale/zh_CN/LC_MESSAGES/nvtutorial.po`` and its
compilation ``nvtutorial.mo``, which :mod:`nvtutorial.i18n` reads.
"""

from __future__ import annotations

import io
import string

import pytest
from babel.messages.extract import extract_from_dir
from babel.messages.frontend import parse_mapping_cfg
from babel.messages.mofile import write_mo
from babel.messages.pofile import read_po

from nvtutorial import i18n
from nvtutorial.report.verdict import Verdict
from tests.helpers.paths import ROOT

KEYWORDS = {"_": None, "N_": None}


def extracted() -> dict[str, str]:
    """Every message of the package: its English -> where it is (file:line)."""
    with (ROOT / "babel.cfg").open() as cfg:
        method_map, options_map = parse_mapping_cfg(cfg)
    found: dict[str, str] = {}
    for path, line, message, _comments, _context in extract_from_dir(
        ROOT, method_map, options_map, keywords=KEYWORDS, strip_comment_tags=True
    ):
        assert isinstance(message, str), f"{path}:{line}: a message is one string literal, got {message!r}"
        found.setdefault(message, f"{path}:{line}")
    return found


def catalog():
    with i18n.CATALOG.open("rb") as fp:
        return read_po(fp, locale="zh_CN")


def placeholders(text: str) -> list[tuple[str, str, str]]:
    """The ``str.format`` fields of ``text``: (name, conversion, format spec), sorted."""
    return sorted((name, conv or "", spec or "") for _, name, spec, conv in string.Formatter().parse(text) if name)


def test_every_message_is_in_the_catalog_and_every_entry_is_a_message():
    messages, entries = extracted(), {str(m.id) for m in catalog() if m.id}
    assert len(messages) >= 60, f"only {len(messages)} messages found: is babel.cfg's mapping right?"
    missing = sorted(f"{where}: {m!r}" for m, where in messages.items() if m not in entries)
    assert not missing, "not in the catalog (pybabel extract, then update: babel.cfg):\n" + "\n".join(missing)
    obsolete = sorted(entries - set(messages))
    assert not obsolete, f"entries no code prints any more: {obsolete}"


def test_every_entry_is_translated_and_current():
    bad = [m.id for m in catalog() if m.id and (not m.string or m.fuzzy)]
    assert not bad, f"empty or fuzzy entries: {bad}"


def test_placeholders_match_and_both_languages_format():
    for message in catalog():
        if not message.id:
            continue
        english, chinese = str(message.id), str(message.string)
        assert placeholders(chinese) == placeholders(english), f"{english!r}: the translation's fields differ"
        fields = {name: 0.25 if spec else "x" for name, _conv, spec in placeholders(english)}
        assert english.format(**fields) and chinese.format(**fields)


def test_the_compiled_catalog_is_current():
    compiled = io.BytesIO()
    write_mo(compiled, catalog())
    assert i18n.COMPILED.read_bytes() == compiled.getvalue(), (
        "locale/zh_CN/LC_MESSAGES/nvtutorial.mo is not the .po's: pybabel compile -d locale -D nvtutorial -l zh_CN"
    )


CLAIM = Verdict("C14", "holds", "NVLink is faster", {"ratio": 1.5}, "2× H100 · NV18")
GRADE = Verdict("03.scaling", "close", "1.9 x", {"prediction": 1.5}, "2× H100 · NV18", "2 GPUs over 1")


def test_a_verdict_in_english_is_what_it_always_was(monkeypatch):
    monkeypatch.setenv(i18n.ENV, "en")
    assert str(CLAIM) == "C14 · holds: NVLink is faster [2× H100 · NV18]"
    assert CLAIM._repr_mimebundle_()["text/markdown"] == (
        "**C14 · holds**: NVLink is faster  \n<small>measured on: 2× H100 · NV18</small>"
    )
    assert str(GRADE) == "≈ close · 2 GPUs over 1: 1.9 x [2× H100 · NV18]"
    assert GRADE._repr_mimebundle_()["text/html"] == (
        '<div class="nvtutorial-grade nvtutorial-grade-close" style="border-left: 4px solid #9a6700; '
        'padding: 2px 0 2px 10px; margin: 4px 0"><span style="background: #9a6700; color: #fff; font-weight: bold; '
        'border-radius: 3px; padding: 1px 7px; margin-right: 6px">≈ close</span><b>2 GPUs over 1</b><br>1.9 x'
        '<br><small style="opacity: 0.75">measured on: 2× H100 · NV18</small></div>'
    )


def test_a_verdict_in_chinese_has_chinese_frame_words(monkeypatch):
    monkeypatch.setenv(i18n.ENV, "zh_CN")
    assert str(CLAIM) == "C14 · 成立: NVLink is faster [2× H100 · NV18]"
    bundle = CLAIM._repr_mimebundle_()
    assert bundle["text/markdown"] == "**C14 · 成立**: NVLink is faster  \n<small>测量环境：2× H100 · NV18</small>"
    assert (
        bundle[  # the machine-readable copy stays English: tests and the course summary read it
            "application/vnd.nvtutorial.verdict+json"
        ]["status"]
        == "holds"
    )
    assert str(GRADE) == "≈ 接近 · 2 GPUs over 1: 1.9 x [2× H100 · NV18]"
    html = GRADE._repr_mimebundle_()["text/html"]
    assert "≈ 接近</span>" in html and "测量环境：2× H100 · NV18</small>" in html


def test_the_language_is_chinese_in_the_chinese_notebooks_folder(tmp_path, monkeypatch):
    monkeypatch.delenv(i18n.ENV, raising=False)
    (tmp_path / "notebooks" / "zh").mkdir(parents=True)
    monkeypatch.chdir(tmp_path / "notebooks" / "zh")
    assert i18n.language() == "zh"
    assert i18n._("holds") == "成立"
    monkeypatch.setenv(i18n.ENV, "en")  # the environment wins
    assert i18n.language() == "en"
    monkeypatch.delenv(i18n.ENV)
    for elsewhere in (tmp_path / "notebooks", tmp_path):
        monkeypatch.chdir(elsewhere)
        assert i18n.language() == "en"
        assert i18n._("holds") == "holds"
    monkeypatch.setenv(i18n.ENV, "zh")
    assert i18n.language() == "zh"


@pytest.mark.parametrize("value", ["fr", "english"])
def test_an_unknown_language_warns_and_prints_english(monkeypatch, value):
    monkeypatch.setenv(i18n.ENV, value)
    i18n._unknown.cache_clear()
    with pytest.warns(UserWarning, match="not a language of the course"):
        assert i18n.language() == "en"


def test_a_message_is_its_english_until_shown(monkeypatch):
    monkeypatch.setenv(i18n.ENV, "zh")
    text = i18n.N_("rank {rank}: {reason}", rank=1, reason=i18n.N_("no reason given"))
    assert text == "rank 1: no reason given"  # stored and saved in English
    assert i18n.tr(text) == "rank 1：未给出原因"  # translated, fields that are messages too
    assert i18n.tr("no such message") == "no such message"
