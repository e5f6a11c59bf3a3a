"""Helpers for the launcher's tests: the test subject script, leftover processes, whole files."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path

import psutil
import pytest

from nvtutorial.launch.spec import LaunchSpec
from nvtutorial.machine import hardware
from tests.helpers.paths import SCRIPTS

SUBJECT = SCRIPTS / "subject.py"
"""A plain torchrun script whose ranks all-reduce and where one may misbehave (see its docstring)."""


def processes_of(run_dir: Path) -> list[psutil.Process]:
    """Live processes whose command line names ``run_dir``: the agents, the workers and their children."""
    marker = str(run_dir)
    found = []
    for proc in psutil.process_iter(["cmdline", "status"]):
        try:
            if proc.info["status"] != psutil.STATUS_ZOMBIE and any(marker in arg for arg in proc.info["cmdline"] or ()):
                found.append(proc)
        except psutil.Error:
            continue
    return found


def assert_no_process(run_dir: Path, within: float = 2.0) -> None:
    """Within ``within`` seconds, no process of the run is alive (agents included, not only ranks)."""
    end = time.monotonic() + within
    while (left := processes_of(run_dir)) and time.monotonic() < end:
        time.sleep(0.1)
    assert not left, f"processes of the run still alive: {[(p.pid, p.info['cmdline'][:4]) for p in left]}"


def assert_files_whole(run_dir: Path) -> None:
    """No half-written file: no temporary file of an atomic write is left, and every JSON file parses."""
    run_dir = Path(run_dir)
    if not run_dir.exists():
        return
    leftovers = [p.name for p in run_dir.rglob(".*.tmp")]
    assert not leftovers, f"temporary files left: {leftovers}"
    for path in run_dir.rglob("*.json"):
        json.loads(path.read_text())


def wait_for(condition: Callable[[], bool], timeout: float, what: str) -> None:
    end = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < end, f"timed out waiting for {what}"
        time.sleep(0.05)


def read(path: Path) -> str:
    try:
        return Path(path).read_text(errors="replace")
    except (FileNotFoundError, NotADirectoryError):
        return ""


def in_position(run_dir: Path, ready: str) -> bool:
    """Whether, before the stacks were dumped, rank 0 was up and rank 1 had printed ``ready``.

    A run ended by its deadline on a machine too busy for its ranks to get there shows
    stacks from start-up instead of from the hang under test.
    """

    def before_dump(rank: int, marker: str) -> bool:
        text = read(Path(run_dir) / f"rank{rank}.log")
        cut = min((i for i in (text.find("Current thread 0x"), text.find("Thread 0x")) if i >= 0), default=len(text))
        return marker in text[:cut]

    return before_dump(0, "rank 0/2 up") and before_dump(1, ready)


def run_pids(run_dir: Path) -> list[int]:
    """Worker pids a run recorded (rank{R}.pid)."""
    return [int(p.read_text()) for p in Path(run_dir).glob("rank*.pid")]


def assert_nothing_left(run_dir: Path, extra_pids: tuple[int, ...] = (), within: float = 1.0) -> None:
    """No worker of the run (nor any pid in ``extra_pids``) is still alive."""
    pids = run_pids(run_dir) + list(extra_pids)
    assert pids, f"the run in {run_dir} recorded no worker pids"
    end = time.monotonic() + within
    while True:
        alive = [pid for pid in pids if psutil.pid_exists(pid) and psutil.Process(pid).status() != psutil.STATUS_ZOMBIE]
        if not alive or time.monotonic() > end:
            break
        time.sleep(0.05)
    assert not alive, f"processes of the run still alive: {alive}"


def _two_gpus() -> bool:
    import torch

    return bool(torch.version.cuda) and hardware.gpu_count() >= 2


requires_two_gpus = pytest.mark.skipif(not _two_gpus(), reason="needs 2 GPUs with a CUDA build of torch (none here)")


def made_spec(tmp_path: Path, world: int = 2, nnodes: int = 1, workload: str = "selftest") -> LaunchSpec:
    """A checked run's spec as prepare() would give it, for the tests of what reads one (diagnosis, guards): gloo,
    ``world`` ranks over ``nnodes`` nodes, its folder ``tmp_path/run`` (made)."""
    run_dir = tmp_path / "run"
    run_dir.mkdir(exist_ok=True)
    return LaunchSpec(
        workload=workload,
        params=None,
        nproc=world // nnodes,
        nnodes=nnodes,
        backend="gloo",
        timeout=30.0,
        env={},
        run_dir=run_dir,
        output="none",
        pg_timeout=None,
        args=("--x",),
        startup_timeout=20.0,
    )
