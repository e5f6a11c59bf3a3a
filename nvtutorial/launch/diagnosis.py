"""Why a run failed, in words: the rank that failed first, its traceback, and what the others did.

The launcher (:mod:`nvtutorial.launch`) gathers a finished run's files into a
:class:`~nvtutorial.results.RunResult` with :func:`collect`, then :func:`diagnose` names the
cause: the first rank that raised (from its ``rank{R}.error.json``), a rank killed by a signal
(from torchrun's failure summary: a native crash, NCCL's watchdog, the out-of-memory killer),
a rank frozen by SIGSTOP, the Python stack of every rank of a run that hung, a rank that left
early, and a disk that filled up.
"""

from __future__ import annotations

import dataclasses
import re
import shutil
import signal
from pathlib import Path
from typing import TYPE_CHECKING, Any

from nvtutorial.results import EnvInfo, RunResult, read_json

if TYPE_CHECKING:
    from nvtutorial.launch.spec import LaunchSpec

LOG_TAIL_LINES = 30
_TAIL_BYTES = 256 * 1024

CRASH_SIGNALS = {signal.SIGABRT, signal.SIGSEGV, signal.SIGBUS, signal.SIGFPE, signal.SIGILL}
"""Signals that end a rank on their own (native crash, NCCL's watchdog); SIGTERM is clean-up."""
_AGENT_FAILURE = re.compile(r"^\s*rank\s*:\s*(\d+) \(local_rank: \d+\)\s*\n\s*exitcode\s*:\s*(-?\d+)", re.MULTILINE)
_STACK_HEADER = re.compile(r"^(Current thread|Thread) 0x[0-9a-f]+ ")
_NO_SPACE = ("No space left on device", "ENOSPC")


@dataclasses.dataclass
class Failure:
    """A failed run, diagnosed: the message to show and where it points."""

    message: str
    rank: int | None = None
    exc_type: str | None = None
    traceback: str | None = None
    timed_out: bool = False


@dataclasses.dataclass
class Observed:
    """What the launcher saw while the run went on (see :class:`nvtutorial.launch._Run`)."""

    timed_out: bool = False
    stopped: set[int] = dataclasses.field(default_factory=set)
    """Ranks found frozen (SIGSTOP, Ctrl-Z) when their stacks were asked for."""
    vanished: dict[int, float] = dataclasses.field(default_factory=dict)
    """Ranks whose process ended without a result or an error file, and when (time.time())."""
    startup: bool = False
    """The ranks were not all up within the start-up limit (``LaunchSpec.startup_timeout``)."""
    started: str = "torchrun"
    """How the ranks started: ``warm`` (forked, their exit statuses known) or ``torchrun``."""
    exits: dict[int, int] = dataclasses.field(default_factory=dict)
    """Warm ranks' exit codes (negative: the signal), as seen before the launcher ended the others."""


def tail(path: Path, n: int = LOG_TAIL_LINES) -> list[str]:
    """The last ``n`` lines of a log (reading only its end: a log may hold 100 MB of prints)."""
    try:
        with open(path, "rb") as fh:
            fh.seek(0, 2)
            size = fh.tell()
            fh.seek(max(0, size - _TAIL_BYTES))
            data = fh.read()
    except (FileNotFoundError, NotADirectoryError):
        return []
    lines = data.decode("utf-8", errors="replace").splitlines()
    if size > _TAIL_BYTES and lines:
        lines = lines[1:]  # the first line read is probably cut
    return lines[-n:]


def stack_section(path: Path, before: int = 4, limit: int = 80) -> list[str]:
    """A log's last lines from just before faulthandler's stack dump (every thread) to the end."""
    lines = tail(path, 400)
    starts = [i for i, line in enumerate(lines) if _STACK_HEADER.match(line)]
    if not starts:
        return lines[-12:]
    # the dump is the log's end: its first thread header is the first of the last run of headers
    first = starts[-1]
    for i in reversed(starts[:-1]):
        if all(not ln or ln.startswith("  File ") or _STACK_HEADER.match(ln) for ln in lines[i:first]):
            first = i
        else:
            break
    return lines[max(0, first - before) :][:limit]


def agent_logs(spec: LaunchSpec) -> list[Path]:
    """torchrun's own output: ``agent.log``, or ``node{i}/agent.log`` per emulated node."""
    if spec.nnodes == 1:
        return [spec.run_dir / "agent.log"]
    return [spec.run_dir / f"node{i}" / "agent.log" for i in range(spec.nnodes)]


def collect(spec: LaunchSpec, returncode: int, wall: float, first_output: float | None) -> RunResult:
    """The run's files gathered into a :class:`RunResult` (``ranks`` empty unless every rank reported)."""
    from nvtutorial import nvml
    from nvtutorial.machine import hardware

    ranks: list[dict[str, Any]] = []
    envs: list[dict[str, Any]] = []
    for r in range(spec.world_size):
        try:
            data = read_json(spec.run_dir / f"rank{r}.json")
        except (OSError, ValueError):
            continue
        ranks.append(data.get("metrics", {}))
        envs.append(data.get("env", {}))
    env = None
    if envs and len(envs) == spec.world_size:
        block = dict(envs[0])
        block["device_names"] = tuple(e.get("device", "?") for e in envs)
        block["device_ids"] = tuple(e.get("device_uuid") or "" for e in envs)  # ranks sharing a GPU share one
        block.setdefault("nnodes", spec.nnodes)
        if spec.backend == "nccl":
            block["driver"] = hardware.driver_version()
            if spec.nnodes > 1:
                block["link"] = f"{spec.nnodes} emulated nodes (NCCL's network transport between them)"
            else:
                block["link"] = nvml.link_label() if spec.nproc > 1 else None
        env = EnvInfo.from_dict(block)
    log_files = {r: spec.run_dir / f"rank{r}.log" for r in range(spec.world_size)}
    lines = []
    for r in range(spec.world_size):
        lines += [f"[rank{r}] {line}" for line in tail(log_files[r], 10)]
    params = dataclasses.asdict(spec.params) if spec.params is not None else {"args": list(spec.args)}
    return RunResult(
        workload=spec.workload,
        params=params,
        returncode=returncode,
        wall_s=wall,
        first_output_s=first_output,
        env=env,
        ranks=ranks if len(ranks) == spec.world_size else [],
        run_dir=spec.run_dir,
        log_files=log_files,
        log_tail=lines,
        overrides=dict(spec.env),
        nnodes=spec.nnodes,
    )


def _errors(spec: LaunchSpec) -> list[dict[str, Any]]:
    errors = []
    for path in spec.run_dir.glob("rank*.error.json"):
        try:
            errors.append(read_json(path))
        except (OSError, ValueError):
            continue
    return sorted(errors, key=lambda e: e.get("time", 0.0))


def _signalled_ranks(spec: LaunchSpec, seen: Observed | None = None) -> list[tuple[int, signal.Signals]]:
    """Ranks killed by a crash signal or by SIGKILL: warm ranks' exit statuses, or torchrun's report.

    Both list only the ranks that had already ended when the first failure was noticed, before the
    others were ended, so a SIGKILL listed there came from outside the run (the out-of-memory
    killer, a ``kill -9``), even when torchrun names a peer as the root cause: a peer that lost its
    connection to the killed rank often exits first.
    """
    fatal = {int(s) for s in CRASH_SIGNALS} | {int(signal.SIGKILL)}
    if seen is not None and seen.started == "warm":
        return sorted((r, signal.Signals(-c)) for r, c in seen.exits.items() if c < 0 and -c in fatal)
    found = {}
    for log in agent_logs(spec):
        try:
            text = log.read_text(errors="replace")[-_TAIL_BYTES:]
        except (FileNotFoundError, NotADirectoryError):
            continue
        for rank, code in _AGENT_FAILURE.findall(text):
            if int(code) < 0 and -int(code) in fatal:
                found[int(rank)] = signal.Signals(-int(code))
    return sorted(found.items())


def disk_full(spec: LaunchSpec) -> str | None:
    """A sentence when the run folder's disk is full (nothing could be written), else None."""
    from nvtutorial.launch.guards import MIN_FREE_MB, nearest_existing

    try:
        free = shutil.disk_usage(nearest_existing(spec.run_dir)).free
    except OSError:
        return None
    logs = [spec.run_dir / f"rank{r}.log" for r in range(spec.world_size)] + agent_logs(spec)
    said = any(any(mark in line for mark in _NO_SPACE for line in tail(p, 60)) for p in logs)
    if free >= MIN_FREE_MB * 1_000_000 and not said:
        return None
    return (
        f"the disk holding {spec.run_dir} is full ({free / 1e6:.1f} MB free): the ranks could not write "
        f"their logs and results; free some space, or use --out on another disk"
    )


def _early_note(spec: LaunchSpec, failed: set[int]) -> str:
    """A note on ranks that finished while the others still ran: they leave their peers' collectives."""
    done = [r for r in range(spec.world_size) if r not in failed and (spec.run_dir / f"rank{r}.json").exists()]
    if not done or len(done) == spec.world_size:
        return ""
    who = ", ".join(map(str, done))
    return (
        f"\nnote: rank{'s' if len(done) > 1 else ''} {who} finished (exit 0) while the others still ran; "
        f"a rank that leaves early breaks the collectives its peers still wait in"
    )


def diagnose(spec: LaunchSpec, result: RunResult, seen: Observed) -> Failure | None:
    """Turn a failed run into a :class:`Failure` naming the rank, its exception and its last log lines.

    Also fills ``result.error`` and ``result.log_tail``; returns None for a run that succeeded.
    """
    if seen.timed_out:
        return _timed_out(spec, result, seen)
    errors = _errors(spec)
    error = errors[0] if errors else None
    if error is None and result.returncode == 0 and result.ranks:
        return None
    reported = {int(e["rank"]) for e in errors if "rank" in e}
    full = disk_full(spec)
    signalled = [(r, s) for r, s in _signalled_ranks(spec, seen) if r not in reported]
    vanished = [r for r, _ in sorted(seen.vanished.items(), key=lambda item: item[1]) if r not in reported]
    if result.returncode == 0:
        result.returncode = 1
    if full is None and (signalled or (vanished and error is None)):
        # A rank that died of a signal wrote no traceback; the others' errors are its consequence.
        rank, sig = signalled[0] if signalled else (vanished[0], None)
        if sig is None:
            cause = f"rank {rank} ended without a result or a Python exception (killed by a signal, or os._exit)"
        elif sig == signal.SIGKILL:
            cause = (
                f"rank {rank} was killed by SIGKILL from outside the run (the kernel's out-of-memory "
                f"killer does this: see `dmesg`; or a `kill -9`)"
            )
        else:
            cause = (
                f"rank {rank} was killed by {sig.name} (no Python exception: a crash in native code, "
                f"or NCCL's watchdog ending the process)"
            )
        after = f"\n(then rank {error['rank']} failed: {error['type']}: {error['message'][:200]})" if error else ""
        kind = sig.name if sig else "ExitWithoutResult"
        result.error = {"rank": rank, "type": kind, "message": cause}
        return _failure(result, rank, cause + after, kind)
    if error is not None:
        rank = int(error["rank"])
        head = f"rank {rank} failed: {error['type']}: {error['message']}"
        if full:
            head = f"{full}\n(rank {rank} failed: {error['type']}: {error['message'][:200]})"
        result.error = {
            "rank": rank,
            "type": error["type"],
            "message": error["message"],
            "traceback": error["traceback"],
        }
        return _failure(result, rank, head + _early_note(spec, reported), error["type"], error["traceback"])
    warm = seen.started == "warm"
    logs = list(result.log_files.values()) if warm else agent_logs(spec)
    agent_tail = [line for log in logs for line in tail(log)][-LOG_TAIL_LINES:]
    first = full or (
        f"{spec.workload} exited with code {result.returncode} and no rank reported an error "
        f"(a crash before the workload started, or a rank killed by a signal)"
    )
    kind = "DiskFull" if full else "ExitCode"
    result.log_tail = agent_tail
    result.error = {"type": kind, "message": first}
    whose = "the ranks' logs" if warm else "torchrun's output"
    message = f"{first}\n--- last lines of {whose} ({', '.join(map(str, logs))}) ---\n" + "\n".join(agent_tail)
    return Failure(message, exc_type=kind)


def _failure(result: RunResult, rank: int, head: str, kind: str, trace: str | None = None) -> Failure:
    """A failure pointing at ``rank``: ``head``, then the last lines of that rank's log."""
    log = result.log_files.get(rank)
    lines = tail(log) if log else []
    result.log_tail = lines
    message = f"{head}\n--- last lines of rank {rank}'s log ({log}) ---\n" + "\n".join(lines)
    return Failure(message, rank=rank, exc_type=kind, traceback=trace)


def _timed_out(spec: LaunchSpec, result: RunResult, seen: Observed) -> Failure:
    result.returncode = result.returncode or -int(signal.SIGKILL)
    if seen.startup:
        first = (
            f"{spec.workload}: the ranks were not all up within {spec.startup_timeout:g} s of start-up "
            f"(interpreters, imports, rendezvous); every process of the run was ended."
        )
    else:
        first = (
            f"{spec.workload} did not finish within its {spec.timeout:g} s deadline (counted from when every "
            f"rank was up); every process of the run was ended."
        )
    lines = [first]
    if seen.stopped:
        who = ", ".join(map(str, sorted(seen.stopped)))
        lines.append(
            f"rank{'s' if len(seen.stopped) > 1 else ''} {who} had been stopped (SIGSTOP or Ctrl-Z): "
            f"a frozen rank holds up every collective of the others"
        )
    lines.append("Each rank's last lines (a Python stack shows where it was waiting):")
    head = len(lines)
    for r, path in result.log_files.items():
        lines.append(f"--- rank {r} ({path}) ---")
        if r in seen.stopped:
            lines.append("(stopped: a frozen process cannot print its stack)")
        lines += stack_section(path) or ["(no output)"]
    note = _early_note(spec, set())
    if note:
        lines.insert(1, note.strip())
        head += 1
    result.log_tail = lines[head:]
    result.error = {"type": "Timeout", "message": first}
    return Failure("\n".join(lines), exc_type="Timeout", timed_out=True)
