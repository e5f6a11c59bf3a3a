"""Show code from the file that runs: a whole script, one section, one function, or the diff of two versions.

The course never copies code into markdown: a notebook calls :func:`show` on the lesson file (or
on a function of it) and the learner reads exactly what the run executes. Sections are the parts
of a script that start with a ``# %% name`` line (the cell marker of Jupytext and VS Code)::

    show("nvtutorial/chapters/ch03_ddp_training/lessons/ddp_train.py", section="the process group")
    show(ring_all_reduce)                       # a function, from its source file
    show_diff(train_step, train_step_bf16)      # what an optimisation changes

The result displays as highlighted HTML in Jupyter and as a fenced code block in markdown
viewers and the course website, with the file and line numbers it came from.
"""

from __future__ import annotations

import dataclasses
import difflib
import html
import inspect
import os
import re
from pathlib import Path
from typing import Any

SECTION = re.compile(r"^# %%\s*(.*?)\s*$")
"""A section header line: ``# %% name``."""


class ShowError(LookupError):
    """The file, section or object asked for does not exist; the message lists what does."""


@dataclasses.dataclass(frozen=True)
class Code:
    """Lines of code with where they came from; displays itself highlighted."""

    text: str
    origin: str
    first_line: int = 1
    language: str = "python"

    @property
    def lines(self) -> list[str]:
        return self.text.splitlines()

    def __str__(self) -> str:
        return self.text

    def _repr_markdown_(self) -> str:
        return f"`{self.origin}`\n\n```{self.language}\n{self.text}\n```"

    def _repr_html_(self) -> str:
        try:
            from pygments import highlight
            from pygments.formatters import HtmlFormatter
            from pygments.lexers import get_lexer_by_name
        except ImportError:  # plain text, still exact
            body = f"<pre>{html.escape(self.text)}</pre>"
        else:
            numbered = {"linenos": "inline", "linenostart": self.first_line} if self.language != "diff" else {}
            formatter = HtmlFormatter(noclasses=True, **numbered)
            body = highlight(self.text, get_lexer_by_name(self.language), formatter)
        return (
            f'<div class="nvtutorial-code"><div style="font-size:85%;color:#555">{html.escape(self.origin)}</div>'
            f"{body}</div>"
        )


def _display_path(path: Path) -> str:
    """The path as a learner would type it: relative to the repository (or the working folder) if possible."""
    path = path.resolve()
    package_root = Path(__file__).resolve().parent.parent.parent
    for base in (package_root, Path.cwd().resolve()):
        try:
            return os.path.relpath(path, base) if path.is_relative_to(base) else str(path)
        except ValueError:
            continue
    return path.name


def resolve(path: str | os.PathLike[str]) -> Path:
    """A lesson file given relative to the repository root, the working folder, or the package."""
    p = Path(path)
    package_root = Path(__file__).resolve().parent.parent
    for candidate in (p, Path.cwd() / p, package_root.parent / p, package_root / p):
        if candidate.is_file():
            return candidate
    raise ShowError(f"no file {str(path)!r} (looked in the working folder and the repository)")


def sections(path: str | os.PathLike[str]) -> dict[str, tuple[int, int]]:
    """``{name: (first, last)}`` line numbers (1-based, inclusive) of each ``# %% name`` section."""
    lines = resolve(path).read_text().splitlines()
    starts = [(i, m.group(1)) for i, line in enumerate(lines) if (m := SECTION.match(line))]
    out = {}
    for k, (i, name) in enumerate(starts):
        end = starts[k + 1][0] if k + 1 < len(starts) else len(lines)
        while end > i + 1 and not lines[end - 1].strip():
            end -= 1
        out[name] = (i + 1, end)
    return out


def source(
    obj: Any = None,
    *,
    path: str | os.PathLike[str] | None = None,
    section: str | None = None,
    lines: tuple[int, int] | None = None,
) -> Code:
    """The code of a function, class or module ``obj``, or of a file (whole, one section, or a line range)."""
    if obj is not None:
        if isinstance(obj, (str, os.PathLike)):
            return source(path=obj, section=section, lines=lines)
        try:
            text, first = inspect.getsourcelines(obj)
            file = inspect.getsourcefile(obj)
        except (OSError, TypeError) as exc:
            raise ShowError(f"cannot show {obj!r}: {exc}") from None
        origin = f"{_display_path(Path(file))}, line {first}" if file else getattr(obj, "__qualname__", repr(obj))
        return Code("".join(text).rstrip("\n"), origin, first)
    if path is None:
        raise ShowError("show what? pass an object (a function, class or module) or a file path")
    file = resolve(path)
    all_lines = file.read_text().splitlines()
    if section is not None:
        found = sections(file)
        if section not in found:
            names = ", ".join(repr(n) for n in found) or "none (no '# %% name' lines)"
            raise ShowError(f"{file.name} has no section {section!r}; its sections: {names}")
        lines = found[section]
    first, last = lines or (1, len(all_lines))
    if not 1 <= first <= last <= len(all_lines):
        raise ShowError(f"lines {first}-{last} are outside {file.name} (1-{len(all_lines)})")
    shown = "\n".join(all_lines[first - 1 : last])
    where = f"{_display_path(file)}" + (f", lines {first}–{last}" if (first, last) != (1, len(all_lines)) else "")
    return Code(shown, where, first)


def show(
    obj: Any = None,
    *,
    path: str | os.PathLike[str] | None = None,
    section: str | None = None,
    lines: tuple[int, int] | None = None,
) -> Code:
    """Code to display in a notebook cell (return it as the cell's last value); see the module docstring."""
    return source(obj, path=path, section=section, lines=lines)


def show_diff(before: Any, after: Any, *, context: int = 3) -> Code:
    """The unified diff from ``before`` to ``after`` (functions, classes, modules, files or :class:`Code`)."""
    a, b = (x if isinstance(x, Code) else source(x) for x in (before, after))
    a_lines = _dedent_name(a.lines, b.lines)
    diff = list(difflib.unified_diff(a_lines, b.lines, fromfile=a.origin, tofile=b.origin, n=context, lineterm=""))
    if not diff:
        return Code(f"# {a.origin} and {b.origin} are identical", f"{a.origin} → {b.origin}")
    return Code("\n".join(diff), f"{a.origin} → {b.origin}", language="diff")


def _dedent_name(a: list[str], b: list[str]) -> list[str]:
    """Keep a diff about the body: when two functions differ only in their names, show the def line once."""
    heads = ("def ", "async def ", "class ")
    if a and b and a[0].lstrip().startswith(heads) and b[0].lstrip().startswith(heads):
        name_a = re.match(r"\s*(?:async\s+)?(?:def|class)\s+(\w+)", a[0])
        name_b = re.match(r"\s*(?:async\s+)?(?:def|class)\s+(\w+)", b[0])
        if name_a and name_b and a[0].replace(name_a.group(1), name_b.group(1), 1) == b[0]:
            return [b[0], *a[1:]]
    return a
