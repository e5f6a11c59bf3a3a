"""The launcher's progress bars: one per phase of a run, each ending in a state that tells the truth.

Rank 0 of a workload prints ``{"n": ..., "total": ..., "desc": ..., **info}`` events
(:meth:`nvtutorial.runtime.Context.progress`); :class:`RunProgress` turns them into bars, in a
notebook as ``tqdm`` widgets and elsewhere as text bars.

- A new phase (another total, a count that starts again, or another description at the same count)
  gets a new bar, so each bar keeps the name of the phase it counted. A description that changes
  while the count moves on (``"trap oom"`` at 2/3 after ``"trap seeds"`` at 1/3) is one phase
  walking through named steps: it keeps its bar and renames it.
- A phase that ended because the next one began, or because the run succeeded, ends complete
  and green, even when the workload's last report came before its total.
- Only a failed or interrupted run leaves a bar red; its text says ``failed`` or ``interrupted``.
- In a notebook, a bar's text form is rewritten when it ends, so a saved notebook shows the final
  count (``7/7``) to a viewer that does not render widgets, not the ``0/7`` it started with.
"""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Callable
from typing import Any, Literal, Protocol

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
        if self.status in ("failed", "interrupted"):
            parts.append(self.status)
        return ", ".join(parts)


class Bar(Protocol):
    """What :class:`RunProgress` draws with: one bar per phase."""

    def show(self, phase: Phase) -> None: ...

    def end(self, phase: Phase) -> None: ...


class TextBar:
    """A ``tqdm`` text bar on stdout (a terminal, ``nvtutorial run``, a log)."""

    def __init__(self, phase: Phase) -> None:
        from tqdm import tqdm

        self.bar = tqdm(total=phase.total, desc=phase.desc, leave=True, file=sys.stdout)

    def show(self, phase: Phase, refresh: bool = True) -> None:
        self.bar.n = phase.n
        self.bar.set_description(phase.desc, refresh=False)
        self.bar.set_postfix_str(phase.text(), refresh=False)
        if refresh:
            self.bar.refresh()

    def end(self, phase: Phase) -> None:
        self.show(phase, refresh=False)
        self.bar.close()  # draws the final state once


class NotebookBar:
    """A ``tqdm`` widget, displayed with a display id so that its text form can be rewritten when it ends."""

    def __init__(self, phase: Phase) -> None:
        from IPython.display import display
        from tqdm.notebook import tqdm_notebook

        self.bar = tqdm_notebook(total=phase.total, desc=phase.desc, leave=True, file=sys.stdout, display=False)
        self.handle = display(self.bar.container, display_id=True)

    @property
    def style(self) -> str:
        """The widget's bar style: ``""`` while running, ``"success"`` (green) or ``"danger"`` (red)."""
        return self.bar.container.children[1].bar_style

    def show(self, phase: Phase) -> None:
        self.bar.n = phase.n
        self.bar.set_description(phase.desc, refresh=False)
        self.bar.set_postfix_str(phase.text(), refresh=False)
        self.bar.refresh()

    def end(self, phase: Phase) -> None:
        self.show(phase)
        if phase.status != "done":
            self.bar.disp(bar_style="danger", check_delay=False)  # close() keeps a bar that is already red
        self.bar.close()  # green when n reached total (or no total), red otherwise
        if self.handle is not None:
            self.handle.update(self.bar.container)  # the saved text form: the final count


def in_notebook() -> bool:
    """Whether ``tqdm.auto`` picks widgets here (a Jupyter kernel with ipywidgets)."""
    from tqdm.auto import tqdm
    from tqdm.notebook import tqdm_notebook

    return issubclass(tqdm, tqdm_notebook)


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
