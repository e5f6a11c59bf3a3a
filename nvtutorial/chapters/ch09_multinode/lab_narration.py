"""What a run of notebook 09's lesson is doing now, in words: read from the files each rank's runtime writes (its pid
and ready files) and from rank 0's log (the lesson's lines on its start, then its steps). The lab
(:mod:`nvtutorial.chapters.ch09_multinode.lab`) says it whenever it has said nothing for :data:`SAY_S`, so that a cell
never goes quiet while torchrun starts, restarts or waits.
"""

from __future__ import annotations

import contextlib
import contextvars
import os
import re
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from nvtutorial.chapters.ch09_multinode.report import STEP_LINE as STEP_LINE  # rank 0's loss line

SAY_S = 1.5
"""A run that has said nothing for this long says what it is doing now (a cell is never silent for 2 s); the lab says
a line once, then only ``still waiting (N s)`` while it holds (review R6-5)."""
PHASE_LINE = re.compile(r"^rank 0 of \d+: ((?:joined the process group|built the DDP model).*)")
"""Rank 0's lines on its start before its first step (the lesson's ``say``): the process group, then the DDP model."""


def rank_states(run_dir: str | os.PathLike[str], world_size: int, since_wall: float) -> list[str]:
    """What each rank of the attempt that began at ``since_wall`` (the wall clock) is doing, from the files its
    runtime writes: ``"none"`` (no process of this attempt yet: no pid file, or one left by an earlier process),
    ``"starting"`` (a new process: Python and ``import torch``) or ``"up"`` (past its imports, ``rank{R}.ready``)."""
    states = []
    for rank in range(world_size):
        try:
            born = (Path(run_dir) / f"rank{rank}.pid").stat().st_mtime
        except OSError:
            born = None
        if born is None or born < since_wall:
            states.append("none")
            continue
        try:
            up = (Path(run_dir) / f"rank{rank}.ready").stat().st_mtime >= born
        except OSError:
            up = False
        states.append("up" if up else "starting")
    return states


def doing(
    states: Sequence[str],
    backend: str,
    after: str | None = None,
    step: tuple[int, int] | None = None,
    phase: str | None = None,
    fresh: bool = True,
) -> str:
    """One line on what a run is doing now: ``states`` from :func:`rank_states`; ``after``: what ended the attempt
    before this one (None: this is the first); ``step``: rank 0's last step of this attempt and the steps in all;
    ``phase``: rank 0's last line on this attempt's start (:data:`PHASE_LINE`); ``fresh``: the ranks are new
    processes, as torchrun starts them (a rank forked from the warm interpreter has imported torch and
    ``torch._dynamo`` already)."""
    if step is not None and step[0] >= step[1]:
        return f"trained all {step[1]} steps: the ranks write their results and exit, then the agents"
    if step is not None:
        return f"training: rank 0 has done step {step[0]} of {step[1]}"
    if phase is not None and phase.startswith("built"):
        return f"rank 0 {phase}: reading the last checkpoint"
    if phase is not None:
        dynamo = " (its constructor imports torch._dynamo: seconds in a new process)" if fresh else ""
        return f"rank 0 {phase}: building the DDP model{dynamo}"
    starting, up = ([r for r, s in enumerate(states) if s == want] for want in ("starting", "up"))
    if not starting and not up:
        return after or "the torchrun agents meet at the rendezvous; no rank has started yet"
    if starting:
        one = len(starting) == 1
        said = f"{_ranks(starting)} {'is a new process' if one else 'are new processes'}, importing torch"
        waits = f"; {_ranks(up)} wait{'s' * (len(up) == 1)} for {'it' if one else 'them'} in the process group"
        return said + (waits if up else "")
    if len(up) == len(states):
        return f"every rank is up: joining the process group ({backend})"
    return "the agents are starting the ranks"


def after_rank_kill(rank: int, nproc: int, nnodes: int, backend: str) -> str:
    """What happens after global rank ``rank`` was killed, true whichever way it goes (review R6-1): its agent
    restarts; every other rank either fails in its next all-reduce or is stopped by its agent."""
    if nnodes == 1:
        return f"rank {rank} was killed: the agent stops the other ranks and starts them all again"
    node = rank // nproc
    watchdog = " (raising an NCCL error, or ended by NCCL's watchdog)" if backend == "nccl" else ""
    return (
        f"rank {rank} was killed: node {node}'s agent restarts its worker group and waits at the rendezvous; the "
        f"other nodes' ranks either fail in their next all-reduce{watchdog} or are stopped by their agents once "
        f"node {node}'s agent is waiting; then all meet again"
    )


def _ranks(ranks: Sequence[int]) -> str:
    return f"rank{'s' * (len(ranks) > 1)} {', '.join(map(str, ranks))}"


def _tail(log: str | os.PathLike[str]) -> list[str]:
    """The lines of a rank's log's last 4 kB (none before it exists)."""
    try:
        with open(log, "rb") as fh:
            fh.seek(max(0, fh.seek(0, os.SEEK_END) - 4096))
            return fh.read().decode(errors="replace").splitlines()
    except OSError:
        return []


def last_step(log: str | os.PathLike[str]) -> tuple[int, int] | None:
    """The last ``step k/N`` line of a rank's log (its last 4 kB), as (k, N); None before the first."""
    found = [m for line in _tail(log) if (m := STEP_LINE.match(line))]
    return (int(found[-1].group(1)), int(found[-1].group(2))) if found else None


def last_phase(log: str | os.PathLike[str]) -> str | None:
    """What rank 0 last said of its start (:data:`PHASE_LINE`, in its log's last 4 kB); None before it said any."""
    found = [m.group(1) for line in _tail(log) if (m := PHASE_LINE.match(line))]
    return found[-1] if found else None


@contextlib.contextmanager
def telling(what: Any, name: str = "run"):
    """While the block runs (in this thread), a thread prints ``what()`` every :data:`SAY_S`: what it is doing now, or
    ``still waiting (N s)`` while that has not changed."""
    stop, t0 = threading.Event(), time.perf_counter()

    def tell() -> None:
        said, since = "", 0.0
        while not stop.wait(SAY_S):
            t, now = time.perf_counter() - t0, what()
            if now != said:
                said, since = now, t
                print(f"[{name} {t:6.2f} s] now: {now}", flush=True)
            else:
                print(f"[{name} {t:6.2f} s] still waiting ({t - since:.0f} s)", flush=True)

    # the thread runs in a copy of this context: a notebook kernel's output goes to the cell that runs the block
    thread = threading.Thread(target=contextvars.copy_context().run, args=(tell,), daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()
