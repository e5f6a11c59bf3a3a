"""The Chinese edition of the notebooks, generated from the English ones so that it cannot drift (issue 31, item 1).

    .venv/bin/python scripts/translate_notebooks.py update [--only 00]   # English markdown cells -> the PO catalogs
    .venv/bin/python scripts/translate_notebooks.py build [--only 00] [--allow-missing]   # -> notebooks/zh/
    .venv/bin/python scripts/translate_notebooks.py check [--only 00] [--strict]   # stale, missing, obsolete, drift

English stays the only source. Each notebook ``notebooks/NN_name.ipynb`` has one gettext catalog,
``locale/zh_CN/LC_MESSAGES/NN_name.po``: one entry per markdown cell, ``msgctxt`` the cell's id, ``msgid`` its English
source, ``msgstr`` the translation. ``update`` keeps a translation whose English changed but marks it fuzzy, with the
English it was made from as ``#| msgid``, and drops the entries of cells that no longer exist. ``build`` writes
``notebooks/zh/NN_name.ipynb``: the English notebook with every code cell as it is and every markdown cell replaced by
its current translation; it refuses a notebook with a stale or missing entry (``--allow-missing``: the English text
stays, marked ``<!-- untranslated -->``). ``check`` lists stale, missing and obsolete entries, translations that lost an
inline code span, a link target, LaTeX or an HTML tag of the English, glossary terms not rendered with the glossary's
Chinese (``locale/zh_CN/glossary.tsv``: warnings, errors with ``--strict``) and generated notebooks that differ from
what ``build`` writes now. docs/translation.md describes the workflow. Standard library and Babel only.
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import re
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from babel.messages.catalog import Catalog, Message
from babel.messages.pofile import denormalize, normalize, read_po, write_po

ROOT = Path(__file__).resolve().parent.parent
LOCALE = "zh_CN"
UNTRANSLATED = "<!-- untranslated -->\n"
FORMAT_FLAGS = {"python-format", "python-brace-format"}
"""The mark ``build --allow-missing`` puts before an English cell that has no current translation."""
HEADER = (
    "# Simplified Chinese translation of notebooks/{name}.ipynb (nvtutorial, issue 31).\n"
    "# msgctxt: the cell's id; msgid: its English source. Generated and checked by scripts/translate_notebooks.py\n"
    "# (docs/translation.md); translate msgstr, keep code spans, link targets and HTML as they are.\n#"
)


@dataclass(frozen=True)
class Layout:
    """Where the English notebooks, the catalogs, the glossary and the generated notebooks are, under ``root``."""

    root: Path

    @property
    def notebooks(self) -> Path:
        return self.root / "notebooks"

    @property
    def zh(self) -> Path:
        return self.notebooks / "zh"

    @property
    def catalogs(self) -> Path:
        return self.root / "locale" / LOCALE / "LC_MESSAGES"

    @property
    def glossary(self) -> Path:
        return self.root / "locale" / LOCALE / "glossary.tsv"

    def english(self, only: Sequence[str] = ()) -> list[Path]:
        """The English notebooks ``NN_*.ipynb``, those whose name starts with one of ``only`` if given."""
        paths = sorted(self.notebooks.glob("[0-9][0-9]_*.ipynb"))
        return [p for p in paths if not only or any(p.name.startswith(o) for o in only)]

    def catalog(self, notebook: Path) -> Path:
        return self.catalogs / f"{notebook.stem}.po"

    def generated(self, notebook: Path) -> Path:
        return self.zh / notebook.name


# ---- notebooks ----------------------------------------------------------------------------------------------------


def read_notebook(path: Path) -> dict:
    return json.loads(path.read_text(encoding="utf-8"))


def dumps_notebook(nb: dict) -> str:
    """The notebook's text exactly as the English notebooks are written (nbformat's JSON, as Jupyter Server writes)."""
    return json.dumps(nb, indent=1, sort_keys=True, ensure_ascii=False) + "\n"


def text_of(cell: dict) -> str:
    source = cell.get("source", "")
    return "".join(source) if isinstance(source, list) else source


def markdown_cells(nb: dict) -> list[tuple[str, str]]:
    """``(cell id, English source)`` of every non-empty markdown cell, in order."""
    return [(c["id"], text_of(c)) for c in nb["cells"] if c["cell_type"] == "markdown" and text_of(c)]


# ---- catalogs -----------------------------------------------------------------------------------------------------


def new_catalog(name: str, old: Catalog | None = None) -> Catalog:
    """An empty catalog for notebook ``name``, with ``old``'s header when there is one (so that the header, dates
    included, changes only when a translator changes it)."""
    catalog = Catalog(locale=LOCALE, project="nvtutorial", header_comment=HEADER.format(name=name), fuzzy=False)
    if old is not None:
        catalog.header_comment = old.header_comment
        catalog.mime_headers = old.mime_headers
    return catalog


def restore_previous(message: Message) -> None:
    """Babel writes ``#| msgid`` lines but reads them back as user comments ``| ...``: make them the previous id."""
    previous = [c[1:].strip() for c in message.user_comments if c.startswith("|")]
    if previous:
        message.user_comments = [c for c in message.user_comments if not c.startswith("|")]
        message.previous_id = [denormalize("\n".join([previous[0].removeprefix("msgid").strip(), *previous[1:]]))]


def previous_of(message: Message) -> str:
    """The English a fuzzy entry was translated from (Babel keeps it as a list: one item, or two with a plural)."""
    return str(message.previous_id[0]) if message.previous_id else ""


def load_catalog(path: Path) -> Catalog | None:
    if not path.exists():
        return None
    with path.open("rb") as f:
        catalog = read_po(f, locale=LOCALE, abort_invalid=True)
    for message in catalog:
        restore_previous(message)
    return catalog


def previous_lines(message: Message) -> str:
    """The ``#| msgid`` block of a fuzzy entry, in GNU gettext's form (Babel's own wraps multi-line ids lossily)."""
    return f"#| msgid {normalize(previous_of(message), prefix='#| ', width=0)}\n"


def dumps_catalog(catalog: Catalog) -> str:
    """The PO text: one PO line per source line (no wrapping, so a diff shows the lines that changed)."""
    for message in catalog:
        message.flags -= FORMAT_FLAGS  # Babel's guess from a `%` in the text: markdown is no format string
    buffer = io.BytesIO()
    write_po(buffer, catalog, width=0, no_location=True, ignore_obsolete=True)
    text = buffer.getvalue().decode("utf-8")
    for message in catalog:
        if message.id and message.previous_id:
            start = f"msgctxt {normalize(str(message.context), width=0)}\n"
            text = text.replace(f"\n{start}", f"\n{previous_lines(message)}{start}", 1)
    return text


def save_catalog(catalog: Catalog, path: Path) -> bool:
    """Write the catalog; ``False`` when the file already holds exactly this text."""
    text = dumps_catalog(catalog)
    if path.exists() and path.read_text(encoding="utf-8") == text:
        return False
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return True


def entries(catalog: Catalog | None) -> dict[str, Message]:
    """The catalog's entries by cell id (msgctxt); the header left out."""
    return {str(m.context): m for m in catalog or () if m.id and m.context}


def carried(old: Message, english: str) -> tuple[str, bool, str]:
    """``(translation, fuzzy, previous English)`` for cell text ``english`` from the old entry of the same cell: an
    unchanged cell keeps its state; a changed one keeps its translation, fuzzy, and the English it was made from."""
    string = str(old.string or "")
    if old.id == english:
        return string, old.fuzzy, previous_of(old) if old.fuzzy else ""
    if not string:
        return "", False, ""
    return string, True, previous_of(old) if old.fuzzy else str(old.id)


def merge(old: Catalog | None, cells: list[tuple[str, str]], name: str) -> tuple[Catalog, list[str]]:
    """The catalog for the notebook's current markdown ``cells``, carrying ``old``'s translations over; also the ids
    of the old entries dropped (their cells are gone). A new cell whose English equals a dropped entry's (a cell cut
    and pasted gets a new id) takes that translation."""
    by_id = entries(old)
    ids = {cell_id for cell_id, _ in cells}
    orphans = {str(m.id): m for cell_id, m in by_id.items() if cell_id not in ids and m.string and not m.fuzzy}
    catalog = new_catalog(name, old)
    for cell_id, english in cells:
        found = by_id.get(cell_id) or orphans.get(english)
        string, fuzzy, previous = carried(found, english) if found else ("", False, "")
        catalog.add(english, string, flags=["fuzzy"] if fuzzy else [], previous_id=previous or (), context=cell_id)
    return catalog, sorted(set(by_id) - ids)


# ---- what a translation must keep --------------------------------------------------------------------------------

FENCE = re.compile(r"^(```|~~~).*?^\1[ \t]*$", re.M | re.S)
CODE_SPAN = re.compile(r"(`+)(?!`)(.+?)(?<!`)\1(?!`)", re.S)
LINK_TARGET = re.compile(r"\]\(([^()\s]*(?:\([^()\s]*\)[^()\s]*)*(?:\s+\"[^\"]*\")?)\)")
MATH = re.compile(r"\$\$.+?\$\$|\$[^$\n]+\$", re.S)
HTML_TAG = re.compile(r"</?[A-Za-z][^<>\n]*>|<!--.*?-->", re.S)
LIST_OR_CONTINUATION = re.compile(r"^(\s+|[-*+] |\d+[.)] )")


def indented_code(text: str) -> list[str]:
    """The lines of indented code blocks: indented 4 spaces or more, after a blank line that does not continue a list
    item (the last line of prose before it starts with neither a list marker nor spaces)."""
    found, previous, prose, inside = [], "", "", False
    for line in text.split("\n"):
        opens = not previous.strip() and not LIST_OR_CONTINUATION.match(prose)
        if line.startswith("    ") and line.strip() and (inside or opens):
            found.append(line.strip())
            inside = True
        elif line.strip():
            inside, prose = False, line
        previous = line
    return found


def markup(text: str) -> list[str]:
    """What a translation must keep verbatim: fenced and indented code, inline code spans, link targets, LaTeX and
    HTML tags (each found outside code, code inside code)."""
    fences = [m.group(0) for m in FENCE.finditer(text)]
    prose = FENCE.sub("", text)
    spans = [m.group(0) for m in CODE_SPAN.finditer(prose)]
    prose = CODE_SPAN.sub("", prose)
    found = [*fences, *spans, *indented_code(prose)]
    found += [f"]({t})" for t in LINK_TARGET.findall(prose)]
    return found + MATH.findall(prose) + HTML_TAG.findall(prose)


def lost_markup(english: str, translation: str) -> list[str]:
    """The code, link targets, LaTeX and HTML of ``english`` that ``translation`` lacks (each distinct one once)."""
    kept = markup(translation)
    return [token for token in dict.fromkeys(markup(english)) if token not in kept]


# ---- glossary -----------------------------------------------------------------------------------------------------


def load_glossary(path: Path) -> list[tuple[str, str]]:
    """``(English term, Chinese term)`` rows of the TSV (header ``en zh note``; ``#`` lines are comments), longest
    English term first, so that a longer term claims its words before a shorter one inside it is looked for."""
    if not path.exists():
        return []
    lines = [line for line in path.read_text(encoding="utf-8").splitlines() if line and not line.startswith("#")]
    rows = [(row["en"].strip(), row["zh"].strip()) for row in csv.DictReader(lines, delimiter="\t")]
    return sorted(rows, key=lambda row: -len(row[0]))


def term_pattern(term: str) -> re.Pattern[str]:
    return re.compile(rf"(?<![\w-]){re.escape(term)}(?:s|es)?(?![\w-])", re.I)


def glossary_misses(english: str, translation: str, glossary: list[tuple[str, str]]) -> list[tuple[str, str]]:
    """The glossary terms in ``english``'s prose (code left out) whose Chinese form ``translation`` lacks."""
    prose = CODE_SPAN.sub(" ", FENCE.sub(" ", english))
    misses = []
    for en, zh in glossary:
        pattern = term_pattern(en)
        if pattern.search(prose):
            prose = pattern.sub(" ", prose)
            if zh.lower() not in translation.lower():
                misses.append((en, zh))
    return misses


# ---- building -----------------------------------------------------------------------------------------------------


@dataclass
class Report:
    """What ``check`` (and ``build``) found for one notebook."""

    name: str
    entries: int = 0
    translated: int = 0
    stale: list[str] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)
    obsolete: list[str] = field(default_factory=list)
    markup: list[str] = field(default_factory=list)
    glossary: list[str] = field(default_factory=list)
    drift: list[str] = field(default_factory=list)

    def problems(self, strict: bool = False) -> bool:
        found = self.stale or self.missing or self.obsolete or self.markup or self.drift
        return bool(found or (strict and self.glossary))


def state(message: Message | None, english: str) -> str:
    """``ok``, ``missing`` (no entry, or an empty translation) or ``stale`` (fuzzy, or made for other English)."""
    if message is None or not message.string:
        return "missing"
    return "stale" if message.fuzzy or message.id != english else "ok"


def render(nb: dict, catalog: Catalog | None, report: Report) -> dict:
    """The Chinese notebook: a copy of ``nb`` whose markdown cells hold their current translation, the English text
    marked untranslated where there is none (noted in ``report``); every other cell untouched."""
    found = entries(catalog)
    cells = []
    for cell in nb["cells"]:
        english = text_of(cell)
        if cell["cell_type"] != "markdown" or not english:
            cells.append(cell)
            continue
        message, report.entries = found.get(cell["id"]), report.entries + 1
        verdict = state(message, english)
        getattr(report, verdict, []).append(cell["id"])
        report.translated += verdict == "ok"
        text = str(message.string) if message is not None and verdict == "ok" else UNTRANSLATED + english
        cells.append({**cell, "source": text.splitlines(keepends=True)})
    return {**nb, "cells": cells}


def examine(layout: Layout, notebook: Path, glossary: list[tuple[str, str]]) -> tuple[Report, str]:
    """The notebook's report and the text ``build`` would write for it."""
    nb, catalog = read_notebook(notebook), load_catalog(layout.catalog(notebook))
    report = Report(notebook.stem)
    text = dumps_notebook(render(nb, catalog, report))
    cells = dict(markdown_cells(nb))
    report.obsolete = sorted(set(entries(catalog)) - set(cells))
    for cell_id, message in entries(catalog).items():
        if cell_id in cells and state(message, cells[cell_id]) == "ok":
            report.markup += [f"{cell_id}: {t!r} missing" for t in lost_markup(cells[cell_id], str(message.string))]
            misses = glossary_misses(cells[cell_id], str(message.string), glossary)
            report.glossary += [f"{cell_id}: {en!r} -> expected {zh}" for en, zh in misses]
    return report, text


# ---- commands -----------------------------------------------------------------------------------------------------


def update(layout: Layout, only: Sequence[str]) -> int:
    for notebook in layout.english(only):
        path = layout.catalog(notebook)
        old = load_catalog(path)
        catalog, dropped = merge(old, markdown_cells(read_notebook(notebook)), notebook.stem)
        changed = save_catalog(catalog, path)
        fuzzy = sum(1 for m in catalog if m.id and m.fuzzy)
        empty = sum(1 for m in catalog if m.id and not m.string)
        counts = f"{len(catalog)} entries, {fuzzy} fuzzy, {empty} untranslated, {len(dropped)} dropped"
        print(f"{path.relative_to(layout.root)}: {'written' if changed else 'unchanged'} ({counts})")
    return 0


def build(layout: Layout, only: Sequence[str], allow_missing: bool) -> int:
    """Write each notebook's Chinese copy; a notebook with a stale or missing entry is refused (not written) unless
    ``allow_missing``."""
    refused = 0
    for notebook in layout.english(only):
        report, text = examine(layout, notebook, [])
        target = layout.generated(notebook)
        if (report.stale or report.missing) and not allow_missing:
            refused += 1
            print(f"{notebook.stem}: refused, {len(report.stale)} stale and {len(report.missing)} missing entries:")
            print_ids("  stale", report.stale)
            print_ids("  missing", report.missing)
            continue
        target.parent.mkdir(parents=True, exist_ok=True)
        unchanged = target.exists() and target.read_text(encoding="utf-8") == text
        target.write_text(text, encoding="utf-8")
        done = f"{report.translated}/{report.entries} translated"
        print(f"{target.relative_to(layout.root)}: {'unchanged' if unchanged else 'written'} ({done})")
    return 1 if refused else 0


def print_ids(label: str, ids: Iterable[str]) -> None:
    ids = list(ids)
    if ids:
        print(f"{label} ({len(ids)}): {' '.join(ids)}")


def check_one(layout: Layout, notebook: Path, glossary: list[tuple[str, str]]) -> Report:
    report, text = examine(layout, notebook, glossary)
    target = layout.generated(notebook)
    if target.exists() and target.read_text(encoding="utf-8") != text:
        report.drift.append(f"{target.relative_to(layout.root)} is not what build writes now (run build)")
    return report


def print_report(report: Report) -> None:
    counts = f"{report.entries} entries, {report.translated} translated, {len(report.stale)} stale"
    print(f"{report.name}: {counts}, {len(report.missing)} missing, {len(report.obsolete)} obsolete")
    print_ids("  stale (English changed since translated)", report.stale)
    print_ids("  missing", report.missing)
    print_ids("  obsolete (no markdown cell has this id)", report.obsolete)
    for line in report.markup:
        print(f"  markup lost in {line}")
    for line in report.drift:
        print(f"  {line}")
    for line in report.glossary:
        print(f"  glossary: {line}")


def check(layout: Layout, only: Sequence[str], strict: bool) -> int:
    glossary = load_glossary(layout.glossary)
    english = layout.english(only)
    reports = [check_one(layout, notebook, glossary) for notebook in english]
    for report in reports:
        print_report(report)
    names = {p.name for p in layout.english()}
    orphans = [p for p in sorted(layout.zh.glob("*.ipynb")) if p.name not in names and not only]
    for path in orphans:
        print(f"{path.relative_to(layout.root)}: no English notebook of this name")
    return 1 if orphans or any(r.problems(strict) for r in reports) else 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("command", choices=["update", "build", "check"])
    parser.add_argument("--only", action="append", default=[], metavar="NN", help="these notebooks (repeatable)")
    parser.add_argument("--allow-missing", action="store_true", help="build: keep the English of untranslated cells")
    parser.add_argument("--strict", action="store_true", help="check: glossary misses are errors too")
    parser.add_argument("--root", type=Path, default=ROOT, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    layout = Layout(args.root)
    if args.command == "update":
        return update(layout, args.only)
    if args.command == "build":
        return build(layout, args.only, args.allow_missing)
    return check(layout, args.only, args.strict)


if __name__ == "__main__":
    sys.exit(main())
