"""Reading the traps of notebook 06 (parent side; never launches, never touches CUDA).

Where each rank waited in a hang (the Python stacks the ranks printed into their logs), how a
run ended at the process group's timeout, the NCCL flight recorder's dumps, and the verdicts of
the traps that do not hang (mismatched collectives, ``set_epoch``, seeds). The verdicts on the
input pipeline and out-of-memory errors are in :mod:`nvtutorial.chapters.ch06_pitfalls.report_measured`.
"""

from __future__ import annotations

import dataclasses
import json
import os
import pickle
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, TypedDict

from nvtutorial.report.verdict import Verdict
from nvtutorial.results import RunResult

if TYPE_CHECKING:
    from nvtutorial.chapters.ch06_pitfalls.lab import TrapRun

# --------------------------------------------------------------------------- stacks

_FRAME = re.compile(r'^\s*File "(?P<file>[^"]+)", line (?P<line>\d+),? in (?P<func>\S+)')
_THREAD = re.compile(r"^(Current thread|Thread) (0x[0-9a-f]+)", re.IGNORECASE)


class Frame(TypedDict):
    """One frame of a faulthandler dump: a dict, as notebook 06 reads it (by key)."""

    file: str
    line: int
    func: str


def _result_of(run: RunResult | TrapRun) -> RunResult:
    """The run's result: the run itself, or the result a trap's run (``TrapRun``) holds."""
    return run if isinstance(run, RunResult) else run.result


def thread_dumps(text: str) -> list[list[Frame]]:
    """Every thread block of the faulthandler dumps in a log, in order; frames innermost first."""
    blocks: list[list[Frame]] = []
    current: list[Frame] | None = None
    for line in text.splitlines():
        if _THREAD.match(line.strip()):
            current = []
            blocks.append(current)
            continue
        m = _FRAME.match(line)
        if m and current is not None:
            current.append({"file": m["file"], "line": int(m["line"]), "func": m["func"]})
        elif current is not None and line.strip() and not line.strip().startswith("<no Python frame>"):
            current = None
    return blocks


def main_stack(text: str, which: int = 0) -> list[Frame]:
    """The main thread's frames in a log's faulthandler dumps (innermost first); empty if none.

    ``which``: 0 the first dump (the stacks taken at the trap's deadline; a later one comes from
    the launcher as it ends the run), -1 the last. The main thread is the block whose outermost
    frames run a module (``<module>``): the other threads start in ``threading``'s ``_bootstrap``.
    """
    mains = [b for b in thread_dumps(text) if any(f["func"] == "<module>" for f in b)]
    return mains[which] if mains else []


def frame_text(f: Frame) -> str:
    return f"{Path(f['file']).name}:{f['line']} {f['func']}"


def _is_torch(f: Frame) -> bool:
    return "/torch/" in f["file"] or f["file"].startswith("<frozen")


def local_line(f: Frame) -> str:
    """The source line of a frame, when its file is here (a run of this checkout); else ""."""
    import linecache

    return linecache.getline(f["file"], f["line"]).strip() if os.path.isfile(f["file"]) else ""


def _activity(func: str) -> str | None:
    """``validating`` or ``training`` for a function whose name says so, else None."""
    name = func.lower()
    if "validat" in name or "evaluat" in name:
        return "validating"
    if "train" in name or "epoch" in name:
        return "training"
    return None


@dataclasses.dataclass(frozen=True)
class WaitingPoint:
    """Where a rank's host thread was (:func:`waiting_point`)."""

    point: str
    """``validating``, ``backward``, ``item`` or ``elsewhere``."""
    frame: str
    """The innermost frame of the rank's own code (:func:`frame_text`)."""
    code: str
    """Its source line when known, else ""."""


def waiting_point(frames: Sequence[Frame], line_of: Callable[[Frame], str] = local_line) -> WaitingPoint:
    """Where a rank's host thread was: ``point`` is ``validating`` (the innermost named activity of
    its own code is a validation), ``backward`` (blocked inside ``loss.backward()``), ``item``
    (blocked at ``.item()``: a synchronisation with the device) or ``elsewhere``; ``frame`` is the
    innermost frame of the rank's own code, ``code`` its source line when known."""
    own = [f for f in frames if not _is_torch(f) and f["func"] != "<module>"]
    frame = frame_text(own[0]) if own else (frame_text(frames[0]) if frames else "?")
    code = line_of(own[0]) if own else ""
    named, activity = next(((f, a) for f, a in ((f, _activity(f["func"])) for f in own) if a), (None, None))
    if activity == "validating" and named is not None:
        point, frame, code = "validating", frame_text(named), line_of(named)
    elif any(_is_torch(f) and f["func"] in ("_engine_run_backward", "backward") for f in frames):
        point = "backward"
    elif own and own[0] is frames[0] and ".item()" in code:
        point = "item"
    else:
        point = "elsewhere"
    return WaitingPoint(point, frame, code)


def rank_stacks(run: RunResult | TrapRun) -> dict[int, list[Frame]]:
    """Each rank's main-thread stack from the first dump in its log."""
    result = _result_of(run)
    out = {}
    for rank, path in sorted(result.log_files.items()):
        try:
            out[int(rank)] = main_stack(Path(path).read_text(errors="replace"), 0)
        except OSError:
            out[int(rank)] = []
    return out


HANG_CHOICES = {
    "a": "rank 0 inside the validation; rank 1 inside loss.backward(), where DDP all-reduces the gradients",
    "b": "rank 0 inside the validation; rank 1 at loss.item(), the first line that waits for the device",
    "c": "rank 0 inside the validation; rank 1 in the DataLoader, waiting for its next batch",
    "d": "both ranks inside dist.all_reduce",
}
"""The prediction asked before the headline trap of notebook 06."""
EXPECTED_POINT = {"gloo": "backward", "nccl": "item"}
"""Where the waiting rank's host thread blocks, per backend (the lesson's mental model)."""


def hang_verdict(
    stacks: Mapping[int, Sequence[Frame]], backend: str, where: str, line_of: Callable[[Frame], str] = local_line
) -> Verdict:
    """Where each rank was when the stacks of the rank-0-validation trap were taken, against the mental model:
    rank 0 validating; the other ranks blocked in backward (gloo) or at ``.item()`` (NCCL)."""
    points = {r: waiting_point(f, line_of) for r, f in sorted(stacks.items())}
    expected = EXPECTED_POINT.get(backend, "?")
    others = [r for r in points if r != 0]
    ok = (
        bool(stacks)
        and 0 in points
        and points[0].point == "validating"
        and all(points[r].point == expected for r in others)
        and bool(others)
    )
    lines = [f"rank {r}: {p.point} ({p.frame}{': ' + p.code if p.code else ''})" for r, p in points.items()]
    if backend == "nccl":
        model = (
            "NCCL only queues the all-reduce on the GPU: backward and the optimizer step return, and the host "
            "blocks at the first call that waits for the GPU (.item() here; .cpu(), torch.cuda.synchronize() "
            "or the NCCL watchdog's timeout elsewhere)"
        )
    else:
        model = (
            "gloo runs the all-reduce on the CPU and DDP waits for it at the end of backward: the host is "
            "blocked inside loss.backward()"
        )
    text = (
        "; ".join(lines)
        + ". "
        + (
            f"As expected: {model}."
            if ok
            else f"Not what the lesson expects ({expected} on {backend}): see the stacks."
        )
    )
    return Verdict(
        "where ranks wait",
        "pass" if ok else "fail",
        text,
        {
            "backend": backend,
            "expected": expected,
            **{f"rank{r}": p.point for r, p in points.items()},
            **{f"rank{r}_frame": p.frame for r, p in points.items()},
        },
        where,
    )


def hang_answer(verdict: Verdict) -> str:
    """The right choice of :data:`HANG_CHOICES` for what the run showed."""
    return {"backward": "a", "item": "b"}.get(
        str(verdict.numbers.get("rank1")), "a" if verdict.numbers.get("backend") == "gloo" else "b"
    )


# --------------------------------------------------------------------------- the process group's timeout


def log_lines(
    path: str | os.PathLike[str],
    patterns: Iterable[str] = (
        "Watchdog caught",
        "Timed out",
        "timed out",
        "Error",
        "Detected mismatch",
        "Fatal Python error",
    ),
) -> list[str]:
    """The lines of a rank's log that say what went wrong (case-sensitive substrings)."""
    try:
        text = Path(path).read_text(errors="replace")
    except OSError:
        return []
    pats = tuple(patterns)
    return [line for line in text.splitlines() if any(p in line for p in pats)]


def signature_lines(run: RunResult | TrapRun, limit: int = 4) -> dict[int, list[str]]:
    """Per rank, the log lines that name the failure."""
    result = _result_of(run)
    return {
        int(r): [line[:300] for line in log_lines(p)[:limit]] or ["(nothing in this rank's log names an error)"]
        for r, p in sorted(result.log_files.items())
    }


def timeout_verdict(run: RunResult | TrapRun, backend: str, pg_timeout: float, where: str) -> Verdict:
    """How the trap ended with a short process-group timeout: the run must fail soon after it,
    with the timeout named (gloo: rank 1's backward raises; NCCL: the watchdog's report)."""
    result = _result_of(run)
    error = result.error or {}
    lines = [line for lines in signature_lines(result, limit=20).values() for line in lines]
    named = any("Timed out" in line or "timed out" in line or "Watchdog caught" in line for line in lines)
    ok = (not result.ok) and named
    who = f"rank {error.get('rank')}" if error.get("rank") is not None else "a rank"
    text = (
        f"the run failed after {result.wall_s:.1f} s with a {pg_timeout:g} s process-group timeout: {who} "
        f"ended with {error.get('type', '?')}"
        + (", and its log names the timed-out collective" if named else ", but no log line names a timeout")
    )
    return Verdict(
        "process-group timeout",
        "pass" if ok else "fail",
        text,
        {
            "failed": not result.ok,
            "timeout_named": named,
            "wall_s": result.wall_s,
            "failed_rank": error.get("rank"),
            "error_type": error.get("type"),
            "backend": backend,
        },
        where,
    )


@dataclasses.dataclass(frozen=True)
class Collective:
    """One entry of a flight-recorder dump: its sequence number, operation, state and input sizes."""

    seq: int | None
    op: str | None
    state: str | None
    sizes: object


@dataclasses.dataclass(frozen=True)
class FlightDump:
    """One rank's flight-recorder dump: its last collectives, the last one completed and those not completed; or,
    where it could not be read, why (``error``)."""

    file: str
    entries: tuple[Collective, ...] = ()
    last_completed_seq: int | None = None
    pending: tuple[Collective, ...] = ()
    error: str | None = None


def flight_recorder(run_dir: str | os.PathLike[str], last: int = 3) -> dict[int, FlightDump]:
    """The NCCL flight recorder's dumps of a run (``TORCH_FR_BUFFER_SIZE`` > 0 and
    ``TORCH_NCCL_DUMP_ON_TIMEOUT=1``; the file prefix ``TORCH_FR_DUMP_TEMP_FILE`` set into the run
    folder): per rank, the last collectives and their states."""
    found: dict[int, FlightDump] = {}
    for path in sorted(Path(run_dir).glob("nccl_trace_rank_*")):
        m = re.search(r"(\d+)$", path.name)
        if not m:
            continue
        try:
            raw = path.read_bytes()
            try:
                data = pickle.loads(raw)  # written by this run's own ranks
            except Exception:
                data = json.loads(raw)
        except Exception as exc:
            found[int(m.group(1))] = FlightDump(str(path), error=f"{type(exc).__name__}: {exc}")
            continue
        entries = data.get("entries", []) if isinstance(data, dict) else []
        rows = [
            Collective(e.get("collective_seq_id"), e.get("profiling_name"), e.get("state"), e.get("input_sizes"))
            for e in entries
        ]
        completed = [r.seq for r in rows if r.state == "completed" and r.seq is not None]
        found[int(m.group(1))] = FlightDump(
            str(path),
            entries=tuple(rows[-last:]),
            last_completed_seq=max(completed) if completed else None,
            pending=tuple(r for r in rows if r.state in ("scheduled", "started")),
        )
    return found


def describe_flight_recorder(run: RunResult | TrapRun, backend: str) -> list[str]:
    """The flight recorder's dumps, one line per rank, or why there are none."""
    result = _result_of(run)
    if backend != "nccl":
        return ["no flight-recorder dump: it records NCCL's collectives on GPUs; this run used gloo on the CPU"]
    fr = flight_recorder(result.run_dir)
    if not fr:
        return [
            "no flight-recorder dump found (TORCH_FR_BUFFER_SIZE > 0 and TORCH_NCCL_DUMP_ON_TIMEOUT=1 make the NCCL "
            "watchdog write one when a collective times out)"
        ]
    lines = []
    for rank, d in sorted(fr.items()):
        if d.error is not None:
            lines.append(f"rank {rank}: unreadable dump ({d.error})")
            continue
        pending = ", ".join(f"#{e.seq} {e.op} ({e.state})" for e in d.pending) or "none"
        lines.append(f"rank {rank}: last completed collective #{d.last_completed_seq}; not completed: {pending}")
    return lines


def processes_left(run: RunResult | TrapRun) -> list[int]:
    """Worker pids of a run (its ``rank{R}.pid`` files) still alive: should be none."""
    import psutil

    result = _result_of(run)
    alive = []
    for pid_file in Path(result.run_dir).glob("rank*.pid"):
        try:
            proc = psutil.Process(int(pid_file.read_text().strip()))
            if proc.status() != psutil.STATUS_ZOMBIE:
                alive.append(proc.pid)
        except (psutil.Error, ValueError, OSError):
            continue
    return alive


# --------------------------------------------------------------------------- the fix, and claim C18


def fixed_validation_verdict(
    values: Sequence[float | None], single_process: float, where: str, rtol: float = 1e-6
) -> Verdict:
    """The fixed validation: every rank's loss equal, and equal to one process over the whole set (None: a rank
    returned no loss)."""
    numbers = {"values": list(values), "single_process": single_process}
    losses = [v for v in values if isinstance(v, (int, float))]
    if len(losses) < len(values):
        return Verdict("validation on every rank", "fail", f"a rank returned no loss: {list(values)}", numbers, where)
    spread = max(losses) - min(losses)
    off = abs(losses[0] - single_process)
    ok = spread <= rtol * abs(single_process) and off <= rtol * abs(single_process)
    text = (
        f"every rank gets {losses[0]:.6f}; one process over the whole set: {single_process:.6f} "
        f"({'the same' if ok else 'NOT the same'}, to {rtol:g} relative)"
    )
    return Verdict(
        "validation on every rank", "pass" if ok else "fail", text, {**numbers, "spread": spread, "off": off}, where
    )


def verdict_c18(hang: Verdict, timeout: Verdict, fixed: Verdict, source: Verdict | None = None) -> Verdict:
    """Claim C18, decided by the runs: what rank-0-only validation does, whether the remedy works, and (from
    notebook 03, ``source``: its C18 verdict on the source's own ``all_reduce(val_loss)``) whether the
    source's code as written gives the loss.

    The premise is shown when the other ranks were found waiting in their next collective (``hang``) and the
    process group's timeout ended the job (``timeout``), and refuted when neither happened; the remedy works
    when every rank validating and all-reducing sums and counts gave one process's value (``fixed``).
    ``holds``: premise and remedy shown, and the source's code gives the loss; ``partly``: premise and remedy
    shown, but the source's code does not (it never divides: 03), or 03's run is not given; ``wrong``: the
    premise refuted; ``unverifiable``: a check that decided nothing, or a course fix that failed.
    """
    statuses = (hang.status, timeout.status, fixed.status)
    numbers: dict[str, str | None] = {
        "hang": hang.status,
        "timeout": timeout.status,
        "fixed": fixed.status,
        "source": source.status if source is not None else None,
    }
    where = fixed.where or hang.where
    if any(s not in ("pass", "fail") for s in statuses) or fixed.status == "fail" or hang.status != timeout.status:
        return Verdict(
            "C18",
            "unverifiable",
            "The runs did not show what the lesson expects; see the verdicts above.",
            numbers,
            where,
        )
    if hang.status == "fail":
        return Verdict(
            "C18",
            "wrong",
            "Rank 0 validated alone and the other ranks neither waited in their next "
            "collective nor failed at the process group's timeout: here that broke nothing.",
            numbers,
            where,
        )
    literal = source.status == "holds" if source is not None and source.status in ("holds", "partly") else None
    text = (
        "'Breaks the parallelism' understates it and misses why: while rank 0 validates alone the other ranks "
        "wait in their next collective (DDP's gradient all-reduce), and once that wait outlasts the process "
        "group's timeout (by default 10 minutes with NCCL, 30 with gloo) the job dies. The source's fix is right "
        "in spirit: every rank validates its share and one all_reduce adds the sums (of losses and counts, then "
        "one division)"
    )
    if literal:
        return Verdict(
            "C18", "holds", text + "; and the source's all_reduce of the loss gave the loss here.", numbers, where
        )
    return Verdict(
        "C18",
        "partly",
        text
        + (
            ". Its own all_reduce(val_loss) never divides (notebook 03 runs it)."
            if literal is None
            else ": its own all_reduce(val_loss) does not give the loss (notebook 03)."
        ),
        numbers,
        where,
    )


# --------------------------------------------------------------------------- mismatched collectives


def mismatch_difference(message: str) -> str:
    """The "Collectives differ in the following aspects" part of a DETAIL mismatch report."""
    m = re.search(r"differ in the following aspects:\s*(.*)", message, re.DOTALL)
    return " ".join(m.group(1).split()) if m else ""


def mismatch_verdict(name: str, errors: Sequence[str | None], fixed_ok: bool, where: str) -> Verdict:
    """A mismatch trap under the DETAIL check: every rank must raise a report naming the difference,
    and the fixed version must give the right result."""
    differences = [mismatch_difference(e or "") for e in errors]
    caught = all(d for d in differences)
    ok = caught and fixed_ok
    text = (
        "every rank raised before the collective itself ran: "
        + "; ".join(f"rank {r}: {d or 'no report'}" for r, d in enumerate(differences))
        + (
            ". The fix gives the right result on every rank."
            if fixed_ok
            else ". The fix did NOT give the right result."
        )
    )
    return Verdict(
        name, "pass" if ok else "fail", text, {"reported": [bool(d) for d in differences], "fixed_ok": fixed_ok}, where
    )


# --------------------------------------------------------------------------- set_epoch and seeds


def set_epoch_verdict(
    broken: Sequence[Sequence[Sequence[int]]], fixed: Sequence[Sequence[Sequence[int]]], where: str
) -> Verdict:
    """``broken``/``fixed``: per rank, the sample order of each epoch. Without set_epoch every epoch
    repeats; with it the order changes; in both the ranks' samples never overlap."""
    repeats = all(all(o == orders[0] for o in orders) for orders in broken)
    changes = all(len({tuple(o) for o in orders}) == len(orders) for orders in fixed)
    disjoint = all(
        not set(a[e]) & set(b[e])
        for runs in (broken, fixed)
        for i, a in enumerate(runs)
        for b in runs[i + 1 :]
        for e in range(len(a))
    )
    ok = repeats and changes and disjoint
    text = (
        f"without set_epoch every epoch {'repeats' if repeats else 'does NOT repeat'} the order of epoch 0; with "
        f"it every epoch {'has its own order' if changes else 'does NOT change'}; the ranks' shares "
        f"{'never overlap' if disjoint else 'OVERLAP'}"
    )
    return Verdict(
        "set_epoch",
        "pass" if ok else "fail",
        text,
        {"repeats_without": repeats, "changes_with": changes, "disjoint": disjoint},
        where,
    )


def _same_crops(crops: Sequence[Sequence[Sequence[int]]]) -> tuple[int, int]:
    """How many of rank 0's (sample, x, y) rows had the same (x, y) on every other rank, of how many."""
    first = crops[0]
    same = sum(all(other[k][1:] == first[k][1:] for other in crops[1:]) for k in range(len(first)))
    return same, len(first)


def verdict_c21(
    weights: Sequence[Sequence[float]],
    crops_same_seed: Sequence[Sequence[Sequence[int]]],
    crops_seed_plus_rank: Sequence[Sequence[Sequence[int]]],
    where: str,
) -> Verdict:
    """Claim C21 from the randomness lesson: ``weights`` per rank ``(before DDP, after)`` with
    ``seed + rank``; the crops each rank drew with the same seed and with ``seed + rank``.

    A common seed is *needed* when DDP left the ranks' weights different, and *harmful* when one seed made
    every rank draw the same crops while ``seed + rank`` did not. ``holds``: needed and harmless; ``partly``:
    not needed (DDP copies rank 0's weights) or harmful; ``unverifiable`` when the ranks built equal weights
    before DDP (nothing shows what DDP does) or drew no crops.
    """
    before = {round(w[0], 6) for w in weights}
    after = {round(w[1], 6) for w in weights}
    same, n = _same_crops(crops_same_seed)
    plus, _ = _same_crops(crops_seed_plus_rank)
    needed = len(after) > 1
    harmful = n > 0 and same == n and plus < n
    numbers = {
        "weight_sums_before": len(before),
        "weight_sums_after": len(after),
        "same_crops_same_seed": same,
        "same_crops_seed_plus_rank": plus,
        "crops": n,
        "seed_needed": needed,
        "one_seed_harms": harmful,
    }
    text = (
        f"with seed + rank the ranks built different weights ({len(before)} different sums) and DDP(model) made "
        f"them {'equal' if not needed else 'NOT equal'} ({len(after)} after). With the same seed on every rank, "
        f"{same} of {n} random crops were the same on every rank (on different images); with seed + rank, {plus}. "
    )
    if len(before) < 2 or n == 0:
        return Verdict("C21", "unverifiable", text + "Not what the lesson expects: see the numbers.", numbers, where)
    if needed and not harmful:
        return Verdict(
            "C21",
            "holds",
            text + "Verdict: holds here: DDP did not equalise the weights, so the ranks need "
            "the same seed, and one seed did not repeat the random draws.",
            numbers,
            where,
        )
    return Verdict(
        "C21",
        "partly",
        text
        + (
            "Verdict: partly right: a common seed is harmless for the weights (DDP copies rank 0's anyway) and makes "
            "every rank draw the same augmentation and dropout numbers, so the global batch repeats each random "
            "draw on every rank; seed each rank with seed + rank (the sampler keeps its own, common seed)."
            if not needed
            else "Verdict: partly right: DDP did not equalise the weights, so a common seed is needed for "
            "them, but it repeats the random draws on every rank: seed the model once, the augmentation with "
            "seed + rank."
            if harmful
            else "Verdict: partly right: the model needs no common seed (DDP copies rank 0's weights), and "
            "here one seed did not repeat the random draws either."
        ),
        numbers,
        where,
    )
