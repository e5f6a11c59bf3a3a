"""pytest's hooks and fixtures for every test (shared helpers are in tests/helpers/)."""

from __future__ import annotations

import datetime
import os
import socket
import time

import psutil
import pytest

from nvtutorial import runtime


@pytest.fixture
def utc(monkeypatch):
    """The local time zone set to UTC for the test: the one-GPU runs' logs stamp local times (dmon's HH:MM:SS,
    c10's), and were made where that was UTC."""
    monkeypatch.setenv("TZ", "UTC")
    time.tzset()
    yield
    monkeypatch.undo()
    time.tzset()


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


@pytest.fixture
def one_rank(tmp_path):
    """A gloo world of one rank in this process, as a workload's context."""
    import torch
    import torch.distributed as dist

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    dist.init_process_group(
        "gloo", init_method=f"tcp://127.0.0.1:{port}", rank=0, world_size=1, timeout=datetime.timedelta(seconds=30)
    )
    yield runtime.Context(
        rank=0, local_rank=0, world_size=1, backend="gloo", device=torch.device("cpu"), run_dir=tmp_path
    )
    dist.destroy_process_group()
