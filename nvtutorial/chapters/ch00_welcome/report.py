"""What notebook 00 concludes: the first all-reduce gave every rank the sum, a failing rank was named,
a hanging rank was found where the lesson says, and no process was left behind. Each is a ``pass``/``fail``
:class:`~nvtutorial.report.verdict.Verdict` computed from what the runs returned.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from typing import Any

from nvtutorial.i18n import N_
from nvtutorial.report.predict import grade_choice
from nvtutorial.report.verdict import Verdict

_CELL_FRAME = re.compile(r'^\s*File "<ranks cell \d+>", line (\d+), in')


def first_allreduce(values: Sequence[Any], contributions: Sequence[float], where: str) -> Verdict:
    """Every rank's tensor after ``dist.all_reduce`` against the sum of what the ranks put in."""
    expected = float(sum(contributions))
    got = [sorted({float(v) for v in getattr(t, "flatten", lambda t=t: t)().tolist()}) for t in values]
    ok = all(g == [expected] for g in got)
    text = (
        N_(
            "Every rank holds {expected:g} in every element: the sum of the ranks' {contributions}.",
            expected=expected,
            contributions=", ".join(f"{c:g}" for c in contributions),
        )
        if ok
        else N_("Expected {expected:g} everywhere; the ranks hold {held}.", expected=expected, held=got)
    )
    return Verdict(
        N_("first all-reduce"),
        "pass" if ok else "fail",
        text,
        {"expected": expected, "ranks": len(values), "held": got},
        where,
    )


ALL_REDUCE_CHOICES = {
    "a": N_("1: each rank keeps its own value"),
    "b": N_("2: the largest value"),
    "c": N_("3: the sum"),
    "d": N_("1.5: the average"),
}
"""Notebook 00's prediction: what rank 0's tensor holds after ``dist.all_reduce`` when rank r put in r + 1."""


def grade_allreduce(prediction: str | None, values: Sequence[Any], where: str) -> Verdict:
    """Grade the prediction against what rank 0 really held."""
    held = float(values[0].flatten()[0])
    answer = {1.0: "a", 2.0: "b", 3.0: "c", 1.5: "d"}.get(held)
    if answer is None:
        return Verdict(
            "all_reduce",
            "info",
            N_("Rank 0 holds {held:g}: none of the choices (were there {ranks} ranks?).", held=held, ranks=len(values)),
            {"held": held},
            where,
        )
    return grade_choice(
        "all_reduce",
        prediction,
        answer,
        ALL_REDUCE_CHOICES,
        where=where,
        explanation=N_(
            "dist.all_reduce sums by default (op=ReduceOp.SUM) and leaves the result on every rank, in place: "
            "1 + 2 = 3. Other ops include ReduceOp.MAX, MIN, PRODUCT, AVG (NCCL, and gloo since pytorch#149781), "
            "PREMUL_SUM (NCCL, not gloo) and the bitwise BAND, BOR, BXOR (not with NCCL)."
        ),
    )


def crash(error: Any, expected_rank: int = 1, expected_type: str = "RuntimeError", where: str | None = None) -> Verdict:
    """A ``RunFailed`` from a rank that raised: the right rank and exception named, and no process left.
    ``where``: the machine, when the failed run could not say (its ranks died before reporting it)."""
    result = error.result
    left = processes_left(_pids(result.run_dir))
    ok = error.rank == expected_rank and error.exc_type == expected_type and not left
    text = (
        N_(
            "The launcher named rank {rank} and its {exception}, with its traceback, and ended every process of the "
            "run ({left} left).",
            rank=error.rank,
            exception=error.exc_type,
            left=len(left),
        )
        if ok
        else N_(
            "Expected rank {expected_rank} with {expected_type} and no process left; got rank {rank}, {exception}, "
            "{left} process(es) left: {pids}.",
            expected_rank=expected_rank,
            expected_type=expected_type,
            rank=error.rank,
            exception=error.exc_type,
            left=len(left),
            pids=left,
        )
    )
    return Verdict(
        N_("a failing rank"),
        "pass" if ok else "fail",
        text,
        {"rank": error.rank, "exception": error.exc_type, "processes_left": len(left)},
        result.label if result.env is not None else (where or result.label),
    )


def stuck_line(stack: str | None) -> str | None:
    """The innermost line of cell code in a ``%%ranks`` stack: where the rank was waiting."""
    lines = (stack or "").splitlines()
    found = None
    for i, line in enumerate(lines):
        if _CELL_FRAME.match(line) and i + 1 < len(lines):
            found = lines[i + 1].strip()
    return found


def _hang_where(backend: str) -> str:
    """Where notebook 00's hang ran, in words."""
    return N_("GPUs, NCCL") if backend == "nccl" else N_("CPU, gloo: a simulation, not a GPU measurement")


WAITS_AT = {"gloo": "dist.all_reduce(", "nccl": ".item()"}
"""Where rank 0 of notebook 00's hang waits: inside ``all_reduce`` with gloo, whose collectives block the
caller; with NCCL ``all_reduce`` only queues the work, so the rank waits at the first line that needs the
result (a ``.item()``)."""


def hang(cell: Any, backend: str, stuck_rank: int = 0) -> Verdict:
    """A ``%%ranks`` cell that hung (``ranks.run_code`` result): the deadline fired, ``stuck_rank`` was waiting
    where :data:`WAITS_AT` says for ``backend``, and every other rank had left the cell."""
    outcomes = {o.rank: o for o in cell.outcomes}
    stuck = outcomes.get(stuck_rank)
    line = stuck_line(stuck.stack) if stuck is not None else None
    others = {r: o.status for r, o in outcomes.items() if r != stuck_rank}
    expected = WAITS_AT[backend]
    ok = (
        cell.reason == "timeout"
        and stuck is not None
        and stuck.status == "timeout"
        and line is not None
        and expected in line
        and all(s == "ok" for s in others.values())
        and cell.group_kept
    )
    where = _hang_where(backend)
    numbers = {
        "reason": cell.reason,
        "stuck_rank": stuck_rank,
        "stuck_line": line,
        "expected": expected,
        "others": others,
        "group_kept": cell.group_kept,
        "deadline_s": cell.timeout,
    }
    if ok and line is not None:  # (ok implies a line)
        code = line.split("#")[0].strip()
        return Verdict(
            N_("a hanging rank"),
            "pass",
            N_(
                "At the {deadline:g} s deadline rank {rank} was waiting at `{code}` for a partner that never came, "
                "every other rank had left the cell, and the group was freed and kept.",
                deadline=cell.timeout,
                rank=stuck_rank,
                code=code,
            ),
            numbers,
            where,
        )
    return Verdict(
        N_("a hanging rank"),
        "fail",
        N_(
            "Expected rank {rank} stuck at a line with `{expected}` and the others done; got reason {reason}, "
            "line {line!r}, others {others}.",
            rank=stuck_rank,
            expected=expected,
            reason=cell.reason,
            line=line,
            others=others,
        ),
        numbers,
        where,
    )


HANG_CHOICES = {
    "a": N_("inside dist.all_reduce"),
    "b": N_("at the .item() that needs the result"),
    "c": N_("nowhere: the cell does not hang"),
}
"""Notebook 00's prediction for the hang: where rank 0 waits when rank 1 never calls the collective."""


def grade_hang(prediction: str | None, cell: Any, backend: str, stuck_rank: int = 0) -> Verdict:
    """Grade where the learner said rank 0 would wait against the line its stack showed at the deadline."""
    stuck = {o.rank: o for o in cell.outcomes}.get(stuck_rank)
    line = stuck_line(stuck.stack) if stuck is not None else None
    where = _hang_where(backend)
    if cell.reason != "timeout":
        answer = "c"
    elif line is not None and "all_reduce(" in line:
        answer = "a"
    elif line is not None and ".item()" in line:
        answer = "b"
    else:
        return Verdict(
            "where rank 0 waits",
            "info",
            N_("Rank {rank} waited at {line!r}: none of the choices.", rank=stuck_rank, line=line),
            {"stuck_line": line},
            where,
        )
    return grade_choice(
        "where rank 0 waits",
        prediction,
        answer,
        HANG_CHOICES,
        where=where,
        explanation=N_(
            "With gloo a collective blocks its caller until it is done. With NCCL dist.all_reduce only queues the "
            "work on the GPU and returns; the rank then waits at the first line that needs the result on the host."
        ),
    )


def _pids(run_dir: Any) -> list[int]:
    from pathlib import Path

    out = []
    for path in Path(run_dir).glob("rank*.pid"):
        try:
            out.append(int(path.read_text().strip()))
        except (OSError, ValueError):
            continue
    return out


def processes_left(pids: Iterable[int]) -> list[int]:
    """The pids of ``pids`` that still run (zombies waiting to be reaped count as gone)."""
    import psutil

    alive = []
    for pid in pids:
        try:
            if psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
                alive.append(pid)
        except psutil.NoSuchProcess:
            continue
    return alive


def nothing_left(pids: Sequence[int], what: str) -> Verdict:
    """After stopping ``what``, none of its processes runs."""
    left = processes_left(pids)
    text = (
        N_(
            "{what}: {processes} process(es) were running, {left} still are: {pids}",
            what=what,
            processes=len(pids),
            left=len(left),
            pids=left,
        )
        if left
        else N_(
            "{what}: {processes} process(es) were running, {left} still are.", what=what, processes=len(pids), left=0
        )
    )
    return Verdict(
        N_("nothing left running"),
        "fail" if left else "pass",
        text,
        {"processes": len(pids), "left": len(left)},
        N_("this machine"),
    )
