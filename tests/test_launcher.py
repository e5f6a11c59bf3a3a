"""The launcher: a run that works, a rank that fails, a rank that hangs, an interrupted caller."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

import nvtutorial
from nvtutorial import launch
from nvtutorial.results import RunResult, write_json_atomic

from .conftest import assert_nothing_left, requires_two_gpus, run_pids


def test_ok_run_returns_typed_result(runs_dir):
    res = nvtutorial.run("selftest", nproc=2, backend="gloo", params={"steps": 2, "numel": 1024}, output="none")
    assert res.ok and res.returncode == 0
    assert res.env is not None
    assert res.env.backend == "gloo" and res.env.world_size == 2
    assert len(res.env.device_names) == 2 and all(n.startswith("CPU") for n in res.env.device_names)
    assert "simulation" in res.label
    assert [m["allreduce_sum"] for m in res.ranks] == [3.0, 3.0]
    assert 0 < res.first_output_s < res.wall_s
    assert set(res.log_files) == {0, 1} and all(p.exists() for p in res.log_files.values())
    saved = RunResult.load(res.run_dir / "result.json")
    assert saved.ranks == res.ranks and saved.env == res.env
    assert list(res.to_frame().index) == [0, 1]
    assert_nothing_left(res.run_dir)


def test_crash_names_rank_and_exception_quickly(runs_dir):
    t0 = time.monotonic()
    with pytest.raises(nvtutorial.RunFailed) as info:
        nvtutorial.run("selftest", nproc=2, backend="gloo", params={"mode": "crash"}, timeout=60, output="none")
    elapsed = time.monotonic() - t0
    err = info.value
    assert err.rank == 1 and err.exc_type == "RuntimeError"
    assert "rank 1 failed: RuntimeError: selftest: rank 1 crashed on purpose" in str(err)
    assert "Traceback" in err.traceback and "selftest.py" in err.traceback
    assert err.result.returncode != 0
    assert json.loads((err.result.run_dir / "result.json").read_text())["error"]["rank"] == 1
    assert elapsed < 15, f"a crashed run took {elapsed:.1f} s to report"
    assert_nothing_left(err.result.run_dir)


def test_rank_killed_by_a_signal_is_named_as_the_cause(runs_dir):
    """rank 1 aborts (as NCCL's watchdog does): no traceback, and rank 0's connection error is a consequence."""
    t0 = time.monotonic()
    with pytest.raises(nvtutorial.RunFailed) as info:
        nvtutorial.run("selftest", nproc=2, backend="gloo", params={"mode": "abort"}, timeout=60, output="none")
    err = info.value
    assert err.rank == 1 and err.exc_type == "SIGABRT"
    assert str(err).startswith("rank 1 was killed by SIGABRT")
    assert "rank 1: aborting (mode=abort)" in "\n".join(err.log_tail)
    assert time.monotonic() - t0 < 15
    assert_nothing_left(err.result.run_dir)


def test_hang_is_ended_at_the_deadline_with_every_rank_stack(runs_dir):
    t0 = time.monotonic()
    with pytest.raises(nvtutorial.RunTimedOut) as info:
        nvtutorial.run("selftest", nproc=2, backend="gloo", params={"mode": "hang"}, timeout=6, output="none")
    elapsed = time.monotonic() - t0
    text = str(info.value)
    assert "did not finish within its 6 s deadline" in text
    # faulthandler's dump shows where each rank waits: rank 0 in all_reduce, rank 1 asleep in run()
    rank0, rank1 = text.split("--- rank 1")
    assert "in all_reduce" in rank0
    assert "selftest.py" in rank1 and "in run" in rank1
    assert 6 <= elapsed < 6 + 5 + 2, f"took {elapsed:.1f} s"
    assert_nothing_left(info.value.result.run_dir)


def _hanging_caller(run_dir: Path) -> subprocess.Popen:
    """A Python process that launches a hanging selftest; returned once rank 1 is asleep."""
    script = textwrap.dedent(f"""
        import nvtutorial
        try:
            nvtutorial.run("selftest", nproc=2, backend="gloo", params={{"mode": "hang"}}, timeout=300,
                           out={str(run_dir)!r}, output="none")
        except KeyboardInterrupt:
            raise SystemExit(130)
    """)
    caller = subprocess.Popen([sys.executable, "-c", script])
    deadline = time.monotonic() + 60
    while len(run_pids(run_dir)) < 2 or "sleeping" not in _read(run_dir / "rank1.log"):
        assert time.monotonic() < deadline, "the run did not start"
        assert caller.poll() is None, "the caller exited early"
        time.sleep(0.1)
    return caller


def test_interrupt_ends_the_whole_tree_within_5_seconds(tmp_path):
    caller = _hanging_caller(tmp_path / "run")
    t0 = time.monotonic()
    caller.send_signal(signal.SIGINT)
    assert caller.wait(timeout=10) == 130
    assert time.monotonic() - t0 < 5 + 1
    assert_nothing_left(tmp_path / "run")
    assert json.loads((tmp_path / "run" / "result.json").read_text())["error"]["type"] == "KeyboardInterrupt"


def test_sigterm_to_the_caller_ends_the_tree_first(tmp_path):
    caller = _hanging_caller(tmp_path / "run")
    caller.terminate()
    assert caller.wait(timeout=10) == 128 + signal.SIGTERM
    assert_nothing_left(tmp_path / "run")
    assert json.loads((tmp_path / "run" / "result.json").read_text())["error"]["type"] == "SIGTERM"


def test_workers_end_when_the_caller_is_killed(tmp_path):
    """A kernel restart kills the caller outright: the workers (in sessions of their own) must follow."""
    caller = _hanging_caller(tmp_path / "run")
    caller.kill()
    caller.wait()
    assert_nothing_left(tmp_path / "run", within=8.0)


def _read(path: Path) -> str:
    try:
        return path.read_text()
    except FileNotFoundError:
        return ""


def test_environment_passes_through_with_per_run_overrides(runs_dir, monkeypatch):
    monkeypatch.setenv("NCCL_DEBUG", "WARN")
    monkeypatch.setenv("NVTUTORIAL_TEST_MARK", "from-parent")
    res = nvtutorial.run("selftest", nproc=2, backend="gloo", output="none",
                         params={"steps": 1, "numel": 16, "report_env": "NCCL_DEBUG,NVTUTORIAL_TEST_MARK,NCCL_P2P_DISABLE"},
                         env={"NCCL_P2P_DISABLE": 1, "NCCL_DEBUG": "INFO"})
    for rank in res.ranks:
        assert rank["env"] == {"NCCL_DEBUG": "INFO", "NVTUTORIAL_TEST_MARK": "from-parent", "NCCL_P2P_DISABLE": "1"}
    assert res.overrides == {"NCCL_P2P_DISABLE": "1", "NCCL_DEBUG": "INFO"}
    assert os.environ["NCCL_DEBUG"] == "WARN"  # the parent's own environment is untouched


def test_two_runs_at_once_do_not_collide(runs_dir):
    results, errors = [], []

    def one():
        try:
            results.append(nvtutorial.run("selftest", nproc=2, backend="gloo", params={"steps": 3, "numel": 64},
                                          output="none"))
        except Exception as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=one) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    assert len(results) == 2 and all(r.ok for r in results)
    assert results[0].run_dir != results[1].run_dir


def test_parent_never_touches_cuda(monkeypatch):
    """Resolving the backend and preparing a run must not call into torch.cuda (NVML only)."""
    import torch

    def boom(*args, **kwargs):
        raise AssertionError("the parent process called torch.cuda")

    for name in ("is_available", "device_count", "init", "_lazy_init", "get_device_name", "current_device"):
        monkeypatch.setattr(torch.cuda, name, boom)
    for backend in ("auto", "gloo"):
        spec = launch.prepare("selftest", nproc=2, backend=backend)
        assert spec.backend in ("nccl", "gloo")


@pytest.mark.parametrize(("kwargs", "message"), [
    (dict(workload="nope"), "unknown workload 'nope'; available: "),
    (dict(nproc=0), "nproc=0"),
    (dict(nproc=-1), "nproc=-1"),
    (dict(params={"mode": "explode"}), "mode='explode' is not one of: ok, crash, abort, hang"),
    (dict(params={"colour": "red"}), "unknown parameter colour; accepted: mode"),
    (dict(params={"numel": -5}), "numel=-5 must be at least 1"),
    (dict(params={"steps": "many"}), "steps='many' is not an integer"),
    (dict(timeout=-1), "timeout=-1"),
    (dict(backend="mpi"), "unknown backend 'mpi'"),
])
def test_bad_input_is_rejected_before_launch(kwargs, message, runs_dir):
    args = {"workload": "selftest", **kwargs}
    with pytest.raises(nvtutorial.LaunchError, match=None) as info:
        launch.prepare(args.pop("workload"), **args)
    assert message in str(info.value)
    assert not runs_dir.exists(), "nothing may be created for a rejected run"


def test_nccl_without_enough_gpus_is_a_clear_error(monkeypatch):
    import torch

    monkeypatch.setattr(torch.version, "cuda", None)
    with pytest.raises(nvtutorial.LaunchError, match="CPU-only build"):
        launch.resolve_backend("nccl", 2)
    monkeypatch.setattr(torch.version, "cuda", "13.0")
    monkeypatch.setattr(launch.hardware, "gpu_count", lambda: 1)
    with pytest.raises(nvtutorial.LaunchError, match="needs 2 GPUs, but 1 are visible; use --nproc 1"):
        launch.resolve_backend("nccl", 2)
    assert launch.resolve_backend("auto", 2) == "gloo"
    monkeypatch.setattr(launch.hardware, "gpu_count", lambda: 2)
    assert launch.resolve_backend("auto", 2) == "nccl"


def test_atomic_write_never_leaves_half_a_file(tmp_path):
    target = tmp_path / "result.json"
    write_json_atomic(target, {"ok": 1})
    with pytest.raises(TypeError):
        write_json_atomic(target, {"ok": object()})  # fails half-way through serialising
    assert json.loads(target.read_text()) == {"ok": 1}
    assert [p.name for p in tmp_path.iterdir()] == ["result.json"]


@requires_two_gpus
def test_selftest_on_two_gpus_with_nccl(runs_dir):
    res = nvtutorial.run("selftest", nproc=2, backend="nccl", output="none")
    assert res.env.backend == "nccl" and res.env.world_size == 2
    assert all(m["device"].startswith("cuda:") for m in res.ranks)
    assert res.env.nccl and res.env.link
