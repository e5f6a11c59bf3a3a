"""Resource guards: a run the machine cannot hold is refused before anything starts.

Each rank is a Python process that imports torch (about 300 MB of memory before any work),
so ``nvtutorial run selftest --nproc 99`` on a 2-core laptop would take the machine down
rather than fail. Before a launch the launcher checks, and refuses with one line naming the
limit and the fix:

- ranks (``nproc`` x ``nnodes``) at most :data:`MAX_RANKS_PER_CORE` per usable CPU core;
- ranks x :data:`RANK_MEMORY_MB` below the memory available now;
- (with NCCL) ranks per node at most the visible GPUs (in :func:`nvtutorial.launch.resolve_backend`);
- a run folder that can be created and written, on a disk with :data:`MIN_FREE_MB` free.

The first two can be overridden (``allow_oversubscribe=True``, ``--oversubscribe``): the run
then starts with a warning.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

MAX_RANKS_PER_CORE = 4
"""Ranks per usable CPU core: 8 on a 2-core CI machine (the course uses at most 4)."""
RANK_MEMORY_MB = 300
"""Memory one rank needs before any work (the interpreter and torch), in MB."""
MIN_FREE_MB = 32
"""Free space the run folder's disk must have for the ranks' logs and results, in MB."""

_MB = 1_000_000


class Refused(ValueError):
    """A run the machine cannot hold. The message names the limit and the fix, on one line."""


def usable_cores() -> int:
    """CPU cores this process may run on (its affinity, and a cgroup CPU quota where there is one)."""
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # macOS
        cores = os.cpu_count() or 1
    try:
        quota, period = Path("/sys/fs/cgroup/cpu.max").read_text().split()[:2]
        if quota != "max":
            cores = min(cores, max(1, -(-int(quota) // int(period))))
    except (OSError, ValueError):
        pass
    return max(1, cores)


def available_memory() -> int | None:
    """Bytes of memory available to new processes now (``MemAvailable``, within a cgroup limit); None if unknown."""
    available = None
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                available = int(line.split()[1]) * 1024
                break
    except (OSError, ValueError):
        try:
            import psutil

            available = int(psutil.virtual_memory().available)
        except ImportError:
            return None
    try:
        limit = Path("/sys/fs/cgroup/memory.max").read_text().strip()
        if limit != "max":
            used = int(Path("/sys/fs/cgroup/memory.current").read_text())
            left = max(0, int(limit) - used)
            available = left if available is None else min(available, left)
    except (OSError, ValueError):
        pass
    return available


def check_ranks(ranks: int, allow_oversubscribe: bool = False) -> list[str]:
    """Refuse more ranks than the cores and the memory can hold; with the override, warnings instead."""
    problems = []
    cores = usable_cores()
    limit = MAX_RANKS_PER_CORE * cores
    if ranks > limit:
        problems.append(
            f"{ranks} ranks on {cores} CPU core{'s' if cores > 1 else ''}: the limit is {limit} "
            f"({MAX_RANKS_PER_CORE} per core)"
        )
    memory = available_memory()
    if memory is not None and ranks * RANK_MEMORY_MB * _MB > memory:
        problems.append(
            f"{ranks} ranks need about {ranks * RANK_MEMORY_MB / 1000:.1f} GB of memory "
            f"({RANK_MEMORY_MB} MB each) but {memory / 1e9:.1f} GB is available"
        )
    if not problems:
        return []
    if allow_oversubscribe:
        return [f"warning: {p}; starting anyway (oversubscribed: expect a slow run)" for p in problems]
    fit = min(limit, max(1, int((memory or limit * RANK_MEMORY_MB * _MB) // (RANK_MEMORY_MB * _MB))))
    raise Refused(
        f"{problems[0]}; use {fit} ranks or fewer (--nproc x --nnodes), "
        f"or --oversubscribe (allow_oversubscribe=True) to start them anyway"
    )


def nearest_existing(path: Path) -> Path:
    """``path`` itself or its closest ancestor that exists."""
    path = Path(os.path.abspath(path))
    while not path.exists() and path != path.parent:
        path = path.parent
    return path


def check_run_dir(run_dir: Path) -> None:
    """Refuse a run folder that cannot be created or written, or whose disk is (nearly) full."""
    fix = "use --out with a folder you can write (or set NVTUTORIAL_RUNS_DIR)"
    if "\0" in str(run_dir):
        raise Refused(f"the run folder {str(run_dir)!r} contains a NUL character; {fix}")
    try:
        base = nearest_existing(run_dir)
        if not base.is_dir():
            raise Refused(f"cannot make the run folder {run_dir}: {base} is a file, not a folder; {fix}")
        read_only = bool(os.statvfs(base).f_flag & os.ST_RDONLY)
        if read_only or not os.access(base, os.W_OK | os.X_OK):
            why = "is on a read-only file system" if read_only else "is not writable"
            raise Refused(f"cannot make the run folder {run_dir}: {base} {why}; {fix}")
        free = shutil.disk_usage(base).free
    except OSError as exc:
        raise Refused(f"cannot use {run_dir} as the run folder: {exc.strerror or exc}; {fix}") from None
    if free < MIN_FREE_MB * _MB:
        raise Refused(
            f"only {free / _MB:.1f} MB free on the disk holding {run_dir}: a run needs {MIN_FREE_MB} MB "
            f"for its logs and results; free some space, or use --out on another disk"
        )
