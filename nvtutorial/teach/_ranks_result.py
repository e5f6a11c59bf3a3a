"""What a ``%%ranks`` cell gave on each rank, and the errors a notebook shows for it."""

from __future__ import annotations

import dataclasses
import signal


@dataclasses.dataclass
class RankOutcome:
    """How a cell ended on one rank.

    ``status``: ``ok``; ``error`` (an exception: ``traceback``); ``timeout`` (still running at
    the deadline: ``stack``); ``stopped`` (still running when another rank failed: ``stack``);
    ``interrupted`` (KeyboardInterrupt); ``died`` (the process exited: ``exitcode``); ``skipped``
    (not one of the ranks the cell ran on).
    """

    rank: int
    status: str
    exc_type: str | None = None
    message: str | None = None
    traceback: str | None = None
    stack: str | None = None
    exitcode: int | None = None
    output: str = ""

    @property
    def ok(self) -> bool:
        return self.status in ("ok", "skipped")

    def summary(self) -> str:
        """One line: ``rank 1: error: ZeroDivisionError: division by zero``."""
        detail = {"error": f"{self.exc_type}: {self.message}", "died": exit_text(self.exitcode)}.get(self.status)
        return f"rank {self.rank}: {self.status}" + (f": {detail}" if detail else "")


@dataclasses.dataclass
class CellResult:
    """Every rank's outcome of one cell, and what was done to the group afterwards."""

    outcomes: list[RankOutcome]
    reason: str | None = None  # None, "failure", "timeout", "interrupt", "died"
    recovery: str | None = None  # what happened to the group, in words
    group_kept: bool = True  # the same processes (and variables) serve the next cell
    timeout: float | None = None
    wall_s: float = 0.0

    @property
    def ok(self) -> bool:
        return self.reason is None and all(o.ok for o in self.outcomes)

    @property
    def failed(self) -> list[int]:
        return [o.rank for o in self.outcomes if not o.ok]

    def report(self) -> list[str]:
        """The lines a failed cell shows: a headline, each failed rank's traceback or stack (ranks with
        the same one together), and what was done to the group."""
        bad = [o for o in self.outcomes if not o.ok]
        others = ", ".join(o.summary() for o in self.outcomes if o.ok and o.status != "skipped")
        if self.reason == "timeout":
            stuck = [o.rank for o in bad if o.status == "timeout"]
            head = f"the cell did not finish within its {self.timeout:g} s deadline on rank {rank_list(stuck)}"
        elif self.reason == "interrupt":  # what was running; how each rank was ended is the recovery line
            head = f"stopped while rank {rank_list([o.rank for o in bad if o.status == 'interrupted'])} ran this cell"
        else:
            first = next((o for o in bad if o.status in ("error", "died")), bad[0] if bad else None)
            if first is None:
                head = "the cell failed"
            elif first.status == "died":
                head = f"rank {first.rank} ended ({exit_text(first.exitcode)})"
            else:
                same = [o.rank for o in bad if (o.exc_type, o.message) == (first.exc_type, first.message)]
                head = f"rank {rank_list(same)} failed: {first.exc_type}: {first.message}"
        lines = [head + (f" ({others})" if others else "")]
        sections: dict[tuple[str, str], list[int]] = {}
        for o in bad:
            if o.status == "error":
                key = (o.exc_type or "error", o.traceback or f"{o.exc_type}: {o.message}")
            elif o.status in ("timeout", "stopped"):
                when = "at the deadline" if o.status == "timeout" else "when it was stopped"
                key = (f"still running {when}", o.stack or "(no stack)")
            elif o.status == "interrupted":
                where = _where(o.traceback or "") if o.traceback else (o.stack or "(no stack)").splitlines()[-2:]
                key = ("where it was", "\n".join(where))
            else:  # died
                tail = "\n".join(o.output.rstrip().splitlines()[-15:])
                key = (f"the process ended ({exit_text(o.exitcode)}); its last lines", tail)
            sections.setdefault(key, []).append(o.rank)
        for (title, body), ranks in sections.items():
            lines += [f"--- rank {rank_list(ranks)}: {title} ---", body]
        if self.recovery:
            lines += self.recovery.splitlines()
        return lines


class RanksError(RuntimeError):
    """A problem with the group of ranks; shown in a notebook as its message, without our frames."""

    def _render_traceback_(self) -> list[str]:
        return [f"{type(self).__name__}: {self}"]


class RankFailed(RanksError):
    """A cell failed on at least one rank; ``result`` holds every rank's outcome."""

    def __init__(self, result: CellResult) -> None:
        self.result = result
        super().__init__("\n".join(result.report()))

    def _render_traceback_(self) -> list[str]:
        lines = self.result.report()
        return [f"{type(self).__name__}: {lines[0]}"] + lines[1:]


class RanksTimeout(RankFailed):
    """A cell passed its deadline; each stuck rank's outcome holds its stack."""


class RanksStartInterrupted(KeyboardInterrupt):
    """The kernel was interrupted while the ranks started: every rank was ended, nothing is kept."""

    def __init__(self, nproc: int) -> None:
        super().__init__(f"stopped while {nproc} ranks were starting")
        self.nproc = nproc

    def _render_traceback_(self) -> list[str]:
        return [
            f"KeyboardInterrupt: stopped while {self.nproc} ranks were starting (their processes and process group)",
            "ended: every rank that had started",
            "kept: nothing; the next %%ranks cell starts new ranks",
        ]


class RanksCommandInterrupted(KeyboardInterrupt):
    """The kernel was interrupted while the ranks answered a command (``%ranks pull`` of an expression)."""

    def __init__(self, what: str, ended: str, kept: str) -> None:
        super().__init__(f"stopped while {what}")
        self.lines = [f"stopped while {what}", f"ended: {ended}", f"kept: {kept}"]

    def _render_traceback_(self) -> list[str]:
        return [f"KeyboardInterrupt: {self.lines[0]}", *self.lines[1:]]


class RanksInterrupted(KeyboardInterrupt):
    """The kernel was interrupted during a cell; every rank was stopped (see ``result.recovery``)."""

    def __init__(self, result: CellResult) -> None:
        self.result = result
        super().__init__("\n".join(result.report()))

    def _render_traceback_(self) -> list[str]:
        lines = self.result.report()
        return [f"KeyboardInterrupt: {lines[0]}"] + lines[1:]


def _where(text: str) -> list[str]:
    """The innermost line of cell code in a traceback (with its source line), else its last frame."""
    lines = text.rstrip().splitlines()
    frames = [i for i, ln in enumerate(lines) if ln.startswith('  File "')]
    cell = [i for i in frames if lines[i].startswith('  File "<ranks cell')]
    pick = (cell or frames)[-1:] or []
    out = []
    for i in pick:
        out.append(lines[i].strip())
        if i + 1 < len(lines) and lines[i + 1].startswith("    "):
            out.append("  " + lines[i + 1].strip())
    return out or lines[-1:]


def exit_text(code: int | None) -> str:
    """``exit code 3``, or ``killed by SIGKILL`` for a process ended by a signal."""
    if code is not None and code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            pass
    return f"exit code {code}"


def rank_list(ranks: list[int]) -> str:
    """``0, 1`` (or ``none``)."""
    return ", ".join(map(str, ranks)) if ranks else "none"
