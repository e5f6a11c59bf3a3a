"""What the course prints, in the learner's language: one message catalog, English as the key (issue 31, item 2).

A message is written in English where it is shown, marked for the catalog (``pybabel extract``, ``babel.cfg``)::

    print(_("measured on: {where}", where=label))      # translated now, with its fields filled in
    text = N_("{n} ranks", n=4)                          # English now ("4 ranks"); translated where it is shown

:func:`_` translates at once: for what is printed or rendered on the spot. :func:`N_` keeps the English (a
:class:`Message`, a ``str``) and remembers its template and fields, so that a value made in one place and shown in
another (a verdict's text, a plan's row) is stored and saved in English and translated only when it is displayed,
by :func:`tr`. Fields are ``str.format`` named fields; a translation keeps exactly its English's fields
(tests/project/test_messages.py).

The language (:func:`language`) is read when a message is shown, never at import: ``NVTUTORIAL_LANG`` (``zh``,
``zh_CN`` or ``en``) when set; else Chinese in the Chinese notebooks' folder (``notebooks/zh``: a Jupyter kernel
runs in its notebook's folder, and the Chinese notebooks' code cells are the English ones byte for byte); else
English. In English every message is its key, byte for byte.

The catalog: ``locale/zh_CN/LC_MESSAGES/nvtutorial.po``, compiled to ``nvtutorial.mo`` beside it (read here with
the standard library's :class:`gettext.GNUTranslations`; ``pybabel compile -d locale -D nvtutorial -l zh_CN``
writes it, and a test fails when it is not the compilation of the ``.po``). An entry that is missing, empty or
fuzzy is not compiled: its English shows.
"""

from __future__ import annotations

import functools
import gettext
import os
import warnings
from pathlib import Path
from typing import Any, Literal

Language = Literal["zh", "en"]

ENV = "NVTUTORIAL_LANG"
"""The environment variable that chooses the language of what the course prints: ``zh`` (or ``zh_CN``) or ``en``."""
DOMAIN = "nvtutorial"
LOCALE_DIR = Path(__file__).resolve().parent.parent / "locale"
CATALOG = LOCALE_DIR / "zh_CN" / "LC_MESSAGES" / f"{DOMAIN}.po"
"""The Chinese catalog, the one that is edited (a PO file: Poedit, Lokalize or a text editor)."""
COMPILED = CATALOG.with_suffix(".mo")
"""Its compilation, what :func:`_` reads (``pybabel compile -d locale -D nvtutorial -l zh_CN``)."""
_NAMES: dict[str, Language] = {"zh": "zh", "zh_cn": "zh", "en": "en"}


def language() -> Language:
    """``"zh"`` or ``"en"``: ``NVTUTORIAL_LANG`` when set; else ``"zh"`` when the working folder is ``notebooks/zh``
    (where a Chinese notebook's kernel runs); else ``"en"``."""
    value = os.environ.get(ENV, "").strip()
    if value:
        chosen = _NAMES.get(value.lower().replace("-", "_"))
        if chosen is None:
            _unknown(value)
            return "en"
        return chosen
    try:
        here = Path.cwd()
    except OSError:  # the working folder was deleted
        return "en"
    return "zh" if here.parts[-2:] == ("notebooks", "zh") else "en"


@functools.cache
def _unknown(value: str) -> None:
    warnings.warn(f"{ENV}={value!r} is not a language of the course (zh, zh_CN or en): English", stacklevel=3)


@functools.cache
def translations() -> gettext.NullTranslations:
    """The Chinese catalog, read once; without its compilation, none (every message shows in English)."""
    try:
        with COMPILED.open("rb") as fp:
            return gettext.GNUTranslations(fp)
    except OSError:
        return gettext.NullTranslations()


def _(message: str, /, **fields: Any) -> str:
    """``message`` in the learner's language, then ``.format(**fields)`` when fields are given."""
    text = translations().gettext(message) if language() == "zh" else message
    return text.format(**fields) if fields else text


class Message(str):
    """A message kept in English (the ``str`` itself), with its template and fields, for :func:`tr` to translate
    where it is shown. Saved (JSON, a notebook's output) it is its English text."""

    template: str
    fields: dict[str, Any]

    def __new__(cls, template: str, /, **fields: Any) -> Message:
        self = super().__new__(cls, template.format(**fields) if fields else template)
        self.template, self.fields = template, fields
        return self


def N_(message: str, /, **fields: Any) -> Message:  # noqa: N802 - gettext's name for "translate later"
    """``message`` with its fields, in English now; :func:`tr` translates it where it is shown."""
    return Message(message, **fields)


def tr(text: str) -> str:
    """``text`` in the learner's language: a :class:`Message` from its template (and its fields that are messages
    themselves), a plain string as a catalog key (its English where the catalog has none)."""
    if language() == "en":
        return str(text)
    if isinstance(text, Message):
        fields = {k: tr(v) if isinstance(v, Message) else v for k, v in text.fields.items()}
        return _(text.template, **fields) if fields else _(text.template)
    return _(text)
