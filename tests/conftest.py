"""Shared test helpers."""

from __future__ import annotations

import os
import time
from pathlib import Path

import psutil
import pytest

from nvtutorial.machine import hardware


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


@pytest.fixture
def runs_dir(tmp_path, monkeypatch):
    """Send run folders to a temporary directory."""
    folder = tmp_path / "runs"
    monkeypatch.setenv("NVTUTORIAL_RUNS_DIR", str(folder))
    return folder


def pytest_configure(config):
    """One folder per test run where executed notebooks land (see tests/test_notebooks.py)."""
    import os
    import tempfile

    if not os.environ.get("NVTUTORIAL_EXECUTED_DIR"):
        config._nvtutorial_executed = os.environ["NVTUTORIAL_EXECUTED_DIR"] = tempfile.mkdtemp(
            prefix="nvtutorial-executed-"
        )


def pytest_unconfigure(config):
    """The folder pytest_configure made goes when the run ends (`make test` names its own, build/executed, and keeps
    it); a direct pytest run left one in /tmp every time."""
    import shutil

    folder = getattr(config, "_nvtutorial_executed", None)
    if folder:
        shutil.rmtree(folder, ignore_errors=True)
        os.environ.pop("NVTUTORIAL_EXECUTED_DIR", None)


def pytest_terminal_summary(terminalreporter):
    """CPU time this pytest and the processes it waited for used, beside its wall time: on a 2-core CI machine, what
    the two test streams (scripts/test.sh) compete for."""
    t = os.times()
    terminalreporter.write_line(
        f"CPU: {t.user + t.system:.0f} s in pytest, {t.children_user + t.children_system:.0f} s in the processes it "
        f"waited for, over {time.time() - psutil.Process().create_time():.0f} s of wall time"
    )
