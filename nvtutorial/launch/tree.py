"""The one supervisor of a process tree: which processes belong to a run, and how they end.

Every process the course starts (a run's ranks, forked warm or started by ``torchrun``; torchrun's
agents; ``%%ranks`` workers; an ``nsys`` run; the recovery lab's agents) is a root of a
:class:`ProcessTree`. The tree knows its roots (:class:`subprocess.Popen` or a warm
:class:`~nvtutorial.launch.warm.Forked`), the processes found through pid files (torchrun's workers,
which it starts in sessions of their own) and everything under them, and ends them all:
:func:`end_tree` sends SIGTERM (and SIGCONT to a stopped process, which acts on nothing until it
runs), then SIGKILL to what is left after :data:`KILL_GRACE_S`.
"""

from __future__ import annotations

import contextlib
import signal
import time
from collections.abc import Iterable, Sequence
from typing import Any

import psutil

KILL_GRACE_S = 3.0
"""After SIGTERM, survivors get this long before SIGKILL (the whole tree ends within 5 s)."""
SCAN_EVERY_S = 2.0
"""How often a tree's descendants are looked up again while it runs (a scan of the process table)."""


def alive(proc: psutil.Process) -> bool:
    """Whether ``proc`` runs (a zombie does not)."""
    try:
        return proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def end_tree(procs: Iterable[psutil.Process], grace: float = KILL_GRACE_S) -> list[psutil.Process]:
    """SIGTERM every process (and SIGCONT a stopped one), SIGKILL those alive after ``grace``; those signalled."""
    procs = [p for p in procs if alive(p)]
    for p in procs:
        with contextlib.suppress(psutil.Error):
            p.terminate()
            p.resume()  # a stopped (SIGSTOP) process acts on SIGTERM only once continued
    _, left = psutil.wait_procs(procs, timeout=grace)
    for p in left:
        with contextlib.suppress(psutil.Error):
            p.kill()
    psutil.wait_procs(left, timeout=1.0)
    return procs


def kill_now(procs: Sequence[psutil.Process]) -> list[int]:
    """SIGKILL every process given (no grace), without waiting for them to end; the pids signalled."""
    killed = []
    for p in procs:
        try:
            p.kill()
            killed.append(p.pid)
        except psutil.Error:
            pass
    return killed


def as_process(pid: int, born_after: float | None = None) -> psutil.Process | None:
    """Process ``pid``, if it runs (and started after ``born_after``, a ``time.time()``: not a reused pid)."""
    try:
        proc = psutil.Process(pid)
        if born_after is not None and proc.create_time() < born_after - 1:
            return None
        return proc if alive(proc) else None
    except (psutil.Error, ValueError):
        return None


class ProcessTree:
    """The processes of one run: its roots, the processes adopted by pid, and everything under them."""

    def __init__(self) -> None:
        self.roots: list[Any] = []
        """What was started (Popen or Forked): ``poll()``, ``wait()``, ``pid``."""
        self.adopted: dict[int, psutil.Process] = {}
        self._seen: dict[int, psutil.Process] = {}
        self._scanned = 0.0

    def add(self, handle: Any) -> Any:
        self.roots.append(handle)
        with contextlib.suppress(psutil.Error):
            self._seen[handle.pid] = psutil.Process(handle.pid)
        return handle

    def adopt(self, proc: psutil.Process) -> None:
        self.adopted[proc.pid] = proc
        self._seen[proc.pid] = proc

    def running(self) -> bool:
        """Whether a root still runs."""
        return any(h.poll() is None for h in self.roots)

    def processes(self) -> list[psutil.Process]:
        """Every live process of the tree now (a scan of the process table)."""
        found: dict[int, psutil.Process] = {}
        starts = [h.pid for h in self.roots if h.poll() is None] + list(self.adopted)
        for pid in starts:
            if pid in found:
                continue
            try:
                root = self._seen.get(pid) or psutil.Process(pid)
                if not alive(root):
                    continue
                for proc in [root, *root.children(recursive=True)]:
                    found[proc.pid] = proc
            except psutil.Error:
                continue
        return list(found.values())

    def scan(self, every: float = SCAN_EVERY_S) -> None:
        """Remember the tree's processes (at most every ``every`` s): a process whose parent died is
        re-parented to init, and only this memory still finds it when the tree ends."""
        if time.monotonic() - self._scanned < every:
            return
        self._scanned = time.monotonic()
        for proc in self.processes():
            self._seen.setdefault(proc.pid, proc)

    def end(self, grace: float = KILL_GRACE_S) -> list[psutil.Process]:
        """End every process of the tree, those remembered included; wait for the roots. Those signalled."""
        left = {p.pid: p for p in self.processes()}
        for pid, proc in self._seen.items():
            if pid not in left and alive(proc):
                left[pid] = proc
        ended = end_tree(left.values(), grace) if left else []
        for handle in self.roots:
            with contextlib.suppress(Exception):
                handle.wait(timeout=grace + 2.0)
        return ended

    def signal(self, procs: Iterable[psutil.Process], sig: int = signal.SIGUSR1) -> list[int]:
        """Send ``sig`` to each of ``procs`` that runs (not stopped); the pids it went to."""
        sent = []
        for p in procs:
            try:
                if p.status() == psutil.STATUS_STOPPED:
                    continue
                p.send_signal(sig)
                sent.append(p.pid)
            except psutil.Error:
                pass
        return sent
