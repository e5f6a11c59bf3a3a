"""The ``nvtutorial`` command's contract: list, run, its failures and its bad inputs."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest

from nvtutorial import workloads
from tests.helpers.launch import assert_nothing_left


def cli(*args: str, cwd=None, timeout: float = 120) -> tuple[subprocess.CompletedProcess, float]:
    t0 = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-m", "nvtutorial.cli", *args], capture_output=True, text=True, cwd=cwd, timeout=timeout
    )
    return proc, time.monotonic() - t0


def test_list_shows_every_workload_on_one_line():
    proc, _ = cli("list")
    assert proc.returncode == 0
    lines = proc.stdout.strip().splitlines()
    assert [line.split()[0] for line in lines] == workloads.names()
    assert any(line.startswith("selftest ") and "process group" in line for line in lines)


@pytest.fixture(scope="module")
def default_run(tmp_path_factory):
    """`nvtutorial run selftest` without --out, mode=ok (its default) given: (the process, the folder it made)."""
    cwd = tmp_path_factory.mktemp("cwd")
    proc, _ = cli(
        "run", "selftest", "--nproc", "2", "--backend", "gloo", "--set", "steps=2", "--set", "mode=ok", cwd=cwd
    )
    assert proc.returncode == 0, proc.stderr
    (folder,) = (cwd / ".runs").iterdir()
    return proc, folder


def test_run_selftest_writes_result_json_in_a_folder_under_dot_runs(default_run):
    proc, folder = default_run
    assert folder.name.startswith("selftest-")
    assert "selftest: ok" in proc.stdout and "simulation" in proc.stdout
    result = json.loads((folder / "result.json").read_text())
    assert result["env"]["backend"] == "gloo" and result["env"]["world_size"] == 2
    assert len(result["env"]["device_names"]) == 2
    assert result["returncode"] == 0 and result["params"]["steps"] == 2


def test_run_prints_the_parameters_it_changes_and_the_full_command_with_a_flag(default_run, tmp_path):
    short, folder = default_run
    args = ("run", "selftest", "--nproc", "2", "--backend", "gloo", "--set", "steps=2", "--set", "mode=ok")
    full, _ = cli(*args, "--full-command", "--out", str(tmp_path / "full"))
    assert full.returncode == 0, full.stderr
    tail = " -m nvtutorial.workloads.selftest --backend gloo --set steps=2"
    assert f"{tail}\n" in short.stdout, short.stdout  # mode=ok is the default: left out
    assert f"{tail.replace(' --set steps', ' --set mode=ok --set steps')} --set numel=1048576 --set report_env=\n" in (
        full.stdout
    ), full.stdout
    recorded = json.loads((folder / "result.json").read_text())["torchrun"]
    assert recorded.endswith("--set mode=ok --set steps=2 --set numel=1048576 --set report_env="), recorded


def test_crash_exits_nonzero_quickly_naming_rank_and_exception(tmp_path):
    out = tmp_path / "crash"
    proc, elapsed = cli("run", "selftest", "--set", "mode=crash", "--out", str(out))
    assert proc.returncode == 1
    # quickly once the ranks are up (their start-up depends on how busy the machine is)
    assert elapsed - (json.loads((out / "result.json").read_text())["ready_s"] or 0) < 15
    assert "rank 1 failed: RuntimeError" in proc.stderr
    assert "Traceback (most recent call last)" in proc.stderr
    assert_nothing_left(out)


def test_hang_with_timeout_exits_nonzero_within_10_seconds_of_its_deadline(tmp_path):
    out = tmp_path / "hang"
    proc, elapsed = cli("run", "selftest", "--set", "mode=hang", "--timeout", "4", "--out", str(out))
    assert proc.returncode == 1
    ready = json.loads((out / "result.json").read_text())["ready_s"]
    assert ready is not None and 4 <= elapsed - ready < 14  # the deadline counts from when every rank was up
    assert "did not finish within its 4 s deadline" in proc.stderr
    assert_nothing_left(out)


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["run", "nope"], "unknown workload 'nope'; available: "),
        (["run", "selftest", "--nproc", "0"], "nproc=0"),
        (["run", "selftest", "--backend", "nccl"], "backend nccl"),
        (["run", "selftest", "--set", "mode"], "malformed assignment 'mode': write KEY=VALUE"),
        (["run", "selftest", "--set", "speed=3"], "unknown parameter speed; accepted: mode"),
        (["run", "selftest", "--set", "steps=-2"], "steps=-2 must be at least 1"),
        (["run", "selftest", "--env", "=1"], "malformed assignment '=1'"),
        (["run", "selftest", "--timeout", "-3"], "must be a positive number of seconds"),
        (["run", "selftest", "--backend", "mpi"], "invalid choice: 'mpi'"),
        (["frobnicate"], "invalid choice: 'frobnicate'"),
        (["course", "--only", "no-such-notebook", "--profile", "ci"], "no notebook in"),
    ],
)
def test_bad_input_is_one_line_exit_2_and_launches_nothing(args, expected, tmp_path):
    if "--backend" in args and "nccl" in args:
        import torch

        from nvtutorial.machine import hardware

        if torch.version.cuda and hardware.gpu_count() >= 2:
            pytest.skip("this machine has 2 GPUs, so --backend nccl is valid here")
    proc, _ = cli(*args, cwd=tmp_path)
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert expected in lines[0]
    assert not (tmp_path / ".runs").exists() and not os.listdir(tmp_path)
