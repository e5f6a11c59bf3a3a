"""The launcher's progress bars: one per phase of a run, each ending in a state that tells the truth.

Rank 0 of a workload prints ``{"n": ..., "total": ..., "desc": ..., **info}`` events
(:meth:`nvtutorial.runtime.Context.progress`); :class:`RunProgress` turns them into bars, in a
notebook as one HTML output each, rewritten in place, and elsewhere as ``tqdm`` text bars.

- A new phase (another total, a count that starts again, or another description at the same count)
  gets a new bar, so each bar keeps the name of the phase it counted. A description that changes
  while the count moves on (``"trap oom"`` at 2/3 after ``"trap seeds"`` at 1/3) is one phase
  walking through named steps: it keeps its bar and renames it.
- A phase that ended because the next one began, or because the run succeeded, ends complete
  and green, even when the workload's last report came before its total.
- Only a failed or interrupted run leaves a bar red; its text says ``failed`` or ``interrupted``.
- In a notebook a bar is plain HTML (and its text form), not a widget: a saved notebook holds each bar as it
  ended, and a reopened one shows it so, with no kernel behind it. An ``ipywidgets`` bar cannot: JupyterLab draws
  a widget whose model it restored from the notebook with a red broken-link icon (no kernel holds that model any
  more), and with widget state saved it marks the notebook modified for every model it restores.
"""

from __future__ import annotations

import dataclasses
import re
import sys
import time
from collections.abc import Callable
from html import escape
from typing import Any, Literal, Protocol

from nvtutorial.i18n import _, tr

Status = Literal["running", "done", "failed", "interrupted"]
Outcome = Literal["done", "failed", "interrupted"]


@dataclasses.dataclass
class Phase:
    """One bar's worth of a run: what rank 0 reported last, and how the phase ended."""

    desc: str
    total: int | None
    n: int = 0
    info: dict[str, Any] = dataclasses.field(default_factory=dict)
    status: Status = "running"

    def continues_with(self, desc: str, total: int | None, n: int) -> bool:
        """Whether an event with these values belongs to this phase rather than starting a new one."""
        if total != self.total or n < self.n:
            return False
        if desc == self.desc:
            return True
        complete = bool(self.total) and self.n >= self.total
        return not complete and n > self.n  # renamed as its count moves on; a new name at the same count is a new phase

    def text(self) -> str:
        """The bar's postfix: the workload's extra values, then the outcome if it is not success."""
        parts = [f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}" for k, v in self.info.items()]
        if self.status == "failed":
            parts.append(_("failed"))
        elif self.status == "interrupted":
            parts.append(_("interrupted"))
        return ", ".join(parts)

    def name(self) -> str:
        """The phase's name as the bar shows it: in the learner's language where the catalog has it."""
        return tr(self.desc)


class Bar(Protocol):
    """What :class:`RunProgress` draws with: one bar per phase."""

    def show(self, phase: Phase) -> None: ...

    def end(self, phase: Phase) -> None: ...


class TextBar:
    """A ``tqdm`` text bar on stdout (a terminal, ``nvtutorial run``, a log)."""

    def __init__(self, phase: Phase) -> None:
        from tqdm import tqdm

        self.bar = tqdm(total=phase.total, desc=phase.name(), leave=True, file=sys.stdout)

    def show(self, phase: Phase, refresh: bool = True) -> None:
        self.bar.n = phase.n
        self.bar.set_description(phase.name(), refresh=False)
        self.bar.set_postfix_str(phase.text(), refresh=False)
        if refresh:
            self.bar.refresh()

    def end(self, phase: Phase) -> None:
        self.show(phase, refresh=False)
        self.bar.close()  # draws the final state once


COLOURS = {"running": "#1976d2", "done": "#388e3c", "failed": "#d32f2f", "interrupted": "#d32f2f"}
"""A bar's colour by its phase's status (JupyterLab's brand, success and error colours)."""


class NotebookBar:
    """A bar drawn as HTML in one output of the cell (a display id), rewritten in place at each event."""

    def __init__(self, phase: Phase) -> None:
        from IPython.display import display

        self.t0 = time.monotonic()
        self.bundle = self.draw(phase)
        self.handle = display(self.bundle, raw=True, display_id=True)

    def draw(self, phase: Phase) -> dict[str, str]:
        """The bar's outputs: ``text/html`` (the bar, coloured by status) and ``text/plain`` (tqdm's text bar)."""
        from tqdm import tqdm

        elapsed = time.monotonic() - self.t0
        meter = {
            "n": phase.n,
            "total": phase.total,
            "elapsed": elapsed,
            "prefix": phase.name(),
            "postfix": phase.text(),
        }
        text = tqdm.format_meter(**meter, bar_format="{l_bar}<bar/>{r_bar}")
        left, right = re.split(r"\|?<bar/>\|?", text, maxsplit=1)
        fraction = min(phase.n / phase.total, 1.0) if phase.total else float(phase.status != "running")
        html = (
            f'<div class="nvtutorial-bar nvtutorial-bar-{phase.status}" '
            'style="font-family: monospace; white-space: pre">'
            f"{escape(left)} "
            '<span style="display: inline-block; width: 20em; height: 1em; vertical-align: middle; '
            'background: #e0e0e0">'
            f'<span style="display: inline-block; width: {fraction:.1%}; height: 100%; '
            f'background: {COLOURS[phase.status]}"></span></span> {escape(right)}</div>'
        )
        return {"text/plain": tqdm.format_meter(**meter, ascii=True), "text/html": html}

    def show(self, phase: Phase) -> None:
        self.bundle = self.draw(phase)
        if self.handle is not None:
            self.handle.update(self.bundle, raw=True)

    def end(self, phase: Phase) -> None:
        self.show(phase)


def in_notebook() -> bool:
    """Whether this process is a Jupyter kernel (what it displays goes into a notebook)."""
    ipython = sys.modules.get("IPython")
    shell = ipython.get_ipython() if ipython is not None else None
    return getattr(shell, "kernel", None) is not None


class RunProgress:
    """The bars of one run, fed by rank 0's progress events; :meth:`close` says how the run ended."""

    def __init__(self, bar: Callable[[Phase], Bar] | None = None) -> None:
        self.bar_type = bar
        self.phases: list[Phase] = []
        self._bar: Bar | None = None

    @property
    def current(self) -> Phase | None:
        return self.phases[-1] if self.phases and self.phases[-1].status == "running" else None

    def update(self, event: dict[str, Any]) -> None:
        """Show one event; a new phase first completes the previous one (its bar ends green)."""
        total, n, desc = event.get("total"), int(event.get("n", 0)), str(event.get("desc", ""))
        total = int(total) if total else None
        info = {k: v for k, v in event.items() if k not in ("event", "n", "total", "desc")}
        phase = self.current
        if phase is None or not phase.continues_with(desc, total, n):
            self._end("done")
            if self.bar_type is None:
                self.bar_type = NotebookBar if in_notebook() else TextBar
            phase = Phase(desc=desc, total=total)
            self.phases.append(phase)
            self._bar = self.bar_type(phase)
        phase.desc, phase.n, phase.info = desc, n, info
        assert self._bar is not None
        self._bar.show(phase)

    def close(self, outcome: Outcome = "done") -> None:
        """End the current bar: complete and green for ``done``, red for ``failed`` or ``interrupted``."""
        if outcome not in ("done", "failed", "interrupted"):
            raise ValueError(f"outcome={outcome!r}: use done, failed or interrupted")
        self._end(outcome)

    def _end(self, outcome: Outcome) -> None:
        phase = self.current
        if phase is None or self._bar is None:
            return
        phase.status = outcome
        if outcome == "done" and phase.total:
            phase.n = max(phase.n, phase.total)
        self._bar.end(phase)
        self._bar = None
