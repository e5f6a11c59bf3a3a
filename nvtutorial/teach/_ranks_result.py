"""What a ``%%ranks`` cell gave on each rank, and the errors a notebook shows for it."""

from __future__ import annotations

import dataclasses
import signal

from nvtutorial.i18n import N_, _, tr


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
        status = outcome_word(self.status)
        if self.status == "error":
            return N_(
                "rank {rank}: {status}: {exception}: {message}",
                rank=self.rank,
                status=status,
                exception=self.exc_type,
                message=self.message,
            )
        if self.status == "died":
            return N_("rank {rank}: {status}: {exit}", rank=self.rank, status=status, exit=exit_text(self.exitcode))
        return N_("rank {rank}: {status}", rank=self.rank, status=status)


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
        others = ", ".join(tr(o.summary()) for o in self.outcomes if o.ok and o.status != "skipped")
        if self.reason == "timeout":
            stuck = [o.rank for o in bad if o.status == "timeout"]
            head = _(
                "the cell did not finish within its {deadline:g} s deadline on rank {ranks}",
                deadline=self.timeout,
                ranks=tr(rank_list(stuck)),
            )
        elif self.reason == "interrupt":  # what was running; how each rank was ended is the recovery line
            running = rank_list([o.rank for o in bad if o.status == "interrupted"])
            head = _("stopped while rank {ranks} ran this cell", ranks=tr(running))
        else:
            first = next((o for o in bad if o.status in ("error", "died")), bad[0] if bad else None)
            if first is None:
                head = _("the cell failed")
            elif first.status == "died":
                head = _("rank {rank} ended ({exit})", rank=first.rank, exit=tr(exit_text(first.exitcode)))
            else:
                same = [o.rank for o in bad if (o.exc_type, o.message) == (first.exc_type, first.message)]
                head = _(
                    "rank {ranks} failed: {exception}: {message}",
                    ranks=tr(rank_list(same)),
                    exception=first.exc_type,
                    message=first.message,
                )
        lines = [head + (f" ({others})" if others else "")]
        sections: dict[tuple[str, str], list[int]] = {}
        no_stack = _("(no stack)")
        for o in bad:
            if o.status == "error":
                key = (o.exc_type or _("error"), o.traceback or f"{o.exc_type}: {o.message}")
            elif o.status == "timeout":
                key = (_("still running at the deadline"), o.stack or no_stack)
            elif o.status == "stopped":
                key = (_("still running when it was stopped"), o.stack or no_stack)
            elif o.status == "interrupted":
                where = _where(o.traceback or "") if o.traceback else (o.stack or no_stack).splitlines()[-2:]
                key = (_("where it was"), "\n".join(where))
            else:  # died
                tail = "\n".join(o.output.rstrip().splitlines()[-15:])
                key = (_("the process ended ({exit}); its last lines", exit=tr(exit_text(o.exitcode))), tail)
            sections.setdefault(key, []).append(o.rank)
        for (title, body), ranks in sections.items():
            lines += [_("--- rank {ranks}: {title} ---", ranks=tr(rank_list(ranks)), title=title), body]
        if self.recovery:
            lines += tr(self.recovery).splitlines()
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
        super().__init__(_("stopped while {nproc} ranks were starting", nproc=nproc))
        self.nproc = nproc

    def _render_traceback_(self) -> list[str]:
        return [
            "KeyboardInterrupt: "
            + _(
                "stopped while {nproc} ranks were starting (their processes and process group)",
                nproc=self.nproc,
            ),
            _("ended: every rank that had started"),
            _("kept: nothing; the next %%ranks cell starts new ranks"),
        ]


class RanksCommandInterrupted(KeyboardInterrupt):
    """The kernel was interrupted while the ranks answered a command (``%ranks pull`` of an expression)."""

    def __init__(self, what: str, ended: str, kept: str) -> None:
        """``what``, ``ended`` and ``kept``: English (:func:`~nvtutorial.i18n.N_` messages), translated here."""
        stopped = _("stopped while {what}", what=tr(what))
        super().__init__(stopped)
        self.lines = [stopped, _("ended: {ended}", ended=tr(ended)), _("kept: {kept}", kept=tr(kept))]

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
    """``exit code 3``, or ``killed by SIGKILL`` for a process ended by a signal (English, translated where it is
    shown: :func:`~nvtutorial.i18n.tr`)."""
    if code is not None and code < 0:
        try:
            return N_("killed by {signal}", signal=signal.Signals(-code).name)
        except ValueError:
            pass
    return N_("exit code {code}", code=code)


def rank_list(ranks: list[int]) -> str:
    """``0, 1`` (or ``none``, translated where it is shown)."""
    return ", ".join(map(str, ranks)) if ranks else N_("none")


def outcome_word(status: str) -> str:
    """A rank's outcome (:attr:`RankOutcome.status`) as the reader sees it: English, translated where it is shown."""
    words = {
        "ok": N_("ok"),
        "error": N_("error"),
        "timeout": N_("timeout"),
        "stopped": N_("stopped"),
        "interrupted": N_("interrupted"),
        "died": N_("died"),
        "skipped": N_("skipped"),
    }
    return words.get(status, status)
