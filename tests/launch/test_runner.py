"""The launcher: a run that works, a rank that fails, a rank that hangs, an interrupted caller;
scripts, emulated nodes, the CPU simulation's hidden GPUs and the resource guards.

Time bounds are counted from the event (a rank's error, the deadline), not from the launch:
other work on the machine may slow start-up down, never the launcher's reaction.
"""

from __future__ import annotations

import dataclasses
import inspect
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
from nvtutorial.launch import guards
from nvtutorial.machine import hardware
from nvtutorial.results import RunResult, write_json_atomic
from tests.helpers.launch import (
    SUBJECT,
    assert_no_process,
    assert_nothing_left,
    in_position,
    requires_two_gpus,
    run_pids,
)


def test_ok_run_returns_typed_result(runs_dir):
    res = nvtutorial.run("selftest", nproc=2, backend="gloo", params={"steps": 2, "numel": 1024}, output="none")
    assert res.ok and res.returncode == 0
    assert res.env is not None
    assert res.env.backend == "gloo" and res.env.world_size == 2
    assert len(res.env.device_names) == 2 and all(n.startswith("CPU") for n in res.env.device_names)
    assert "simulation" in res.label
    assert [m["allreduce_sum"] for m in res.ranks] == [3.0, 3.0]
    assert res.first_output_s is not None
    assert 0 < res.first_output_s < res.wall_s
    assert set(res.log_files) == {0, 1} and all(p.exists() for p in res.log_files.values())
    saved = RunResult.load(res.run_dir / "result.json")
    assert saved.ranks == res.ranks and saved.env == res.env
    assert list(res.to_frame().index) == [0, 1]
    assert res.nnodes == 1 and res.env.nnodes == 1
    assert_nothing_left(res.run_dir)
    assert_no_process(res.run_dir)


def test_crash_names_rank_and_exception_quickly(runs_dir):
    with pytest.raises(nvtutorial.RunFailed) as info:
        nvtutorial.run("selftest", nproc=2, backend="gloo", params={"mode": "crash"}, timeout=60, output="none")
    err = info.value
    elapsed = time.time() - json.loads((err.result.run_dir / "rank1.error.json").read_text())["time"]
    assert err.rank == 1 and err.exc_type == "RuntimeError"
    assert "rank 1 failed: RuntimeError: selftest: rank 1 crashed on purpose" in str(err)
    assert err.traceback is not None
    assert "Traceback" in err.traceback and "selftest.py" in err.traceback
    assert err.result.returncode != 0
    assert json.loads((err.result.run_dir / "result.json").read_text())["error"]["rank"] == 1
    assert elapsed < 15, f"a crashed run took {elapsed:.1f} s to report after the crash"
    assert_nothing_left(err.result.run_dir)


def test_rank_killed_by_a_signal_is_named_as_the_cause(runs_dir):
    """rank 1 aborts (as NCCL's watchdog does): no traceback, and rank 0's connection error is a consequence."""
    with pytest.raises(nvtutorial.RunFailed) as info:
        nvtutorial.run("selftest", nproc=2, backend="gloo", params={"mode": "abort"}, timeout=60, output="none")
    err = info.value
    assert err.rank == 1 and err.exc_type == "SIGABRT"
    assert str(err).startswith("rank 1 was killed by SIGABRT")
    assert "rank 1: aborting (mode=abort)" in "\n".join(err.log_tail)
    assert time.time() - (err.result.run_dir / "rank1.log").stat().st_mtime < 15
    assert_nothing_left(err.result.run_dir)


def hang_until_deadline(
    target: str, timeout: float, ready: str, **kwargs
) -> tuple[nvtutorial.RunTimedOut, float, float]:
    """A run that hangs, ended by its deadline: the error, the deadline, the seconds from it to the return.

    On a machine too busy for the ranks to reach the hang (rank 0 up, ``ready`` in rank 1's log)
    before the deadline, the run is repeated once with a deadline of 60 s, so the check is always made.
    """
    for deadline in (timeout, 60.0):
        t0 = time.monotonic()
        with pytest.raises(nvtutorial.RunTimedOut) as info:
            nvtutorial.run(target, nproc=2, backend="gloo", timeout=deadline, output="none", **kwargs)
        late = (
            time.monotonic() - t0 - deadline - (info.value.result.ready_s or 0.0)
        )  # the deadline starts once all are up
        if in_position(info.value.result.run_dir, ready):
            return info.value, deadline, late
    raise AssertionError(f"the ranks never reached the hang ({ready!r} is not in rank 1's log)")


@pytest.mark.parametrize(
    "target, how, named, asleep, ended",
    [
        ("selftest", {"params": {"mode": "hang"}}, "", ("selftest.py", "in run"), assert_nothing_left),
        (str(SUBJECT), {"args": ["hang"]}, f"{SUBJECT} ", ("subject.py", "in main"), assert_no_process),
    ],
    ids=["workload", "script"],
)
def test_hang_is_ended_at_the_deadline_with_every_rank_stack(runs_dir, target, how, named, asleep, ended):
    err, deadline, late = hang_until_deadline(target, 6, "sleeping", **how)
    text = str(err)
    assert f"{named}did not finish within its {deadline:g} s deadline" in text
    # faulthandler's dump shows where each rank waits: rank 0 in all_reduce, rank 1 asleep in its code
    rank0, rank1 = text.split("--- rank 1")
    assert "in all_reduce" in rank0
    assert asleep[0] in rank1 and asleep[1] in rank1
    assert 0 <= late < 5 + 2, f"ended {late:.1f} s after the deadline"
    ended(err.result.run_dir)


def test_run_takes_every_option_of_prepare_and_check():
    """``run`` writes ``prepare``'s options out again, as a learner's ``help(nvtutorial.run)`` shows them; they agree:
    the same names in the same order, the same defaults and types, and ``check`` besides."""
    run = inspect.signature(launch.run).parameters
    prepare = inspect.signature(launch.prepare).parameters
    assert [name for name in run if name != "check"] == list(prepare)
    assert [(p.kind, p.default, p.annotation) for p in prepare.values()] == [
        (run[name].kind, run[name].default, run[name].annotation) for name in prepare
    ]


def _hanging_caller(run_dir: Path) -> subprocess.Popen:
    """A Python process that launches a hanging selftest; returned once rank 1 is asleep."""
    # SIGINT as in a terminal, whatever the test runner inherited: a Python started with SIGINT ignored (a shell's
    # background job without job control) keeps it ignored, and no Stop reaches it
    script = textwrap.dedent(f"""
        import signal
        signal.signal(signal.SIGINT, signal.default_int_handler)
        import nvtutorial
        try:
            nvtutorial.run("selftest", nproc=2, backend="gloo", params={{"mode": "hang"}}, timeout=300,
                           out={str(run_dir)!r}, output="none")
        except KeyboardInterrupt as exc:
            print("RENDERED:" + "|".join(exc._render_traceback_()), flush=True)
            raise SystemExit(130)
    """)
    caller = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
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
    # what a notebook shows for Stop: three plain lines, no frames of the launcher: what ran, what ended, what is kept
    shown = next(line for line in caller.stdout.read().splitlines() if line.startswith("RENDERED:"))
    lines = shown[len("RENDERED:") :].split("|")
    assert len(lines) == 3 and lines[0].startswith("KeyboardInterrupt: stopped while selftest ran on 2 ranks (ready")
    assert lines[1].startswith("ended: every process of the run") and lines[2].startswith(
        f"kept: its folder {tmp_path / 'run'}"
    )


def test_sigterm_to_the_caller_ends_the_tree_first(tmp_path):
    caller = _hanging_caller(tmp_path / "run")
    caller.terminate()
    assert caller.wait(timeout=10) == 128 + signal.SIGTERM
    assert_nothing_left(tmp_path / "run")
    assert json.loads((tmp_path / "run" / "result.json").read_text())["error"]["type"] == "SIGTERM"
    said = caller.stderr.read()  # the Stop lines, with the signal that ended the run in the first
    assert "terminated (SIGTERM) while selftest ran on 2 ranks (" in said and "stopped while" not in said, said


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
    res = nvtutorial.run(
        "selftest",
        nproc=2,
        backend="gloo",
        output="none",
        params={"steps": 1, "numel": 16, "report_env": "NCCL_DEBUG,NVTUTORIAL_TEST_MARK,NCCL_P2P_DISABLE"},
        env={"NCCL_P2P_DISABLE": 1, "NCCL_DEBUG": "INFO"},
    )
    for rank in res.ranks:
        assert rank["env"] == {"NCCL_DEBUG": "INFO", "NVTUTORIAL_TEST_MARK": "from-parent", "NCCL_P2P_DISABLE": "1"}
    assert res.overrides == {"NCCL_P2P_DISABLE": "1", "NCCL_DEBUG": "INFO"}
    assert os.environ["NCCL_DEBUG"] == "WARN"  # the parent's own environment is untouched


def test_two_runs_at_once_do_not_collide(runs_dir):
    results, errors = [], []

    def one():
        try:
            results.append(
                nvtutorial.run("selftest", nproc=2, backend="gloo", params={"steps": 3, "numel": 64}, output="none")
            )
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


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"workload": "nope"}, "unknown workload 'nope'; available: "),
        ({"nproc": 0}, "nproc=0"),
        ({"nproc": -1}, "nproc=-1"),
        ({"params": {"mode": "explode"}}, "mode='explode' is not one of: ok, crash, abort, hang"),
        ({"params": {"colour": "red"}}, "unknown parameter colour; accepted: mode"),
        ({"params": {"numel": -5}}, "numel=-5 must be at least 1"),
        ({"params": {"steps": "many"}}, "steps='many' is not an integer"),
        ({"timeout": -1}, "timeout=-1"),
        ({"backend": "mpi"}, "unknown backend 'mpi'"),
        ({"nnodes": 0}, "nnodes=0: the number of emulated nodes must be a whole number of at least 1"),
        ({"timeout": float("nan")}, "timeout=nan: give a positive number of seconds"),
        ({"args": ["--lr", "1"]}, "arguments are for scripts; workload selftest takes params"),
        ({"nproc": 10_000}, "10000 ranks on "),
        ({"env": {"NCCL_DEBUG": "IN\0FO"}}, "contains a NUL character"),
    ],
)
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
    monkeypatch.setattr(hardware, "gpu_count", lambda: 1)
    with pytest.raises(nvtutorial.LaunchError, match="needs 2 GPUs, but 1 are visible; use --nproc 1"):
        launch.resolve_backend("nccl", 2)
    assert launch.resolve_backend("auto", 2) == "gloo"
    monkeypatch.setattr(hardware, "gpu_count", lambda: 2)
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


# --- scripts ------------------------------------------------------------------------------------


def test_script_runs_with_its_args_and_saved_metrics_on_ranks_without_gpus(runs_dir, monkeypatch):
    """A plain torchrun script, named by a relative path; under gloo its ranks see no GPU."""
    monkeypatch.chdir(SUBJECT.parents[2])
    relative = str(SUBJECT.relative_to(SUBJECT.parents[2]))
    res = nvtutorial.run(relative, nproc=2, backend="gloo", args=["ok", "--rank", "0"], output="none")
    assert res.ok and res.workload == relative
    assert res.params == {"args": ["ok", "--rank", "0"]}
    assert [m["allreduce_sum"] for m in res.ranks] == [3.0, 3.0]
    assert all(m["args"] == ["ok", "--rank", "0"] for m in res.ranks)
    assert [(m["cuda_available"], m["cuda_visible_devices"]) for m in res.ranks] == [(False, "")] * 2
    assert res.env.backend == "gloo" and res.env.world_size == 2 and res.env.device_names[0].startswith("CPU")
    assert res.run_dir.name.startswith("subject-") and "simulation" in res.label
    assert_no_process(res.run_dir)


def test_script_crash_names_rank_and_shows_the_script_traceback(runs_dir):
    with pytest.raises(nvtutorial.RunFailed) as info:
        nvtutorial.run(SUBJECT, nproc=2, backend="gloo", args=["crash"], timeout=60, output="none")
    err = info.value
    assert err.rank == 1 and err.exc_type == "RuntimeError"
    assert str(err).startswith("rank 1 failed: RuntimeError: subject: rank 1 crashed on purpose")
    assert err.traceback is not None
    frames = [line for line in err.traceback.splitlines() if line.strip().startswith("File ")]
    assert frames and all("subject.py" in f for f in frames[:2]) and "runpy" not in err.traceback
    assert json.loads((err.result.run_dir / "result.json").read_text())["error"]["rank"] == 1
    assert_no_process(err.result.run_dir)


def test_script_exit_code_is_a_failure(runs_dir):
    with pytest.raises(nvtutorial.RunFailed) as info:
        nvtutorial.run(SUBJECT, nproc=2, backend="gloo", args=["exit3", "--rank", "0"], timeout=60, output="none")
    assert info.value.rank == 0 and info.value.exc_type == "SystemExit"
    assert str(info.value).startswith("rank 0 failed: SystemExit: the script exited with code 3")
    assert_no_process(info.value.result.run_dir)


def test_bad_script_targets_are_refused_before_launch(tmp_path, runs_dir):
    (tmp_path / "notes.txt").write_text("not python")
    cases = [
        (tmp_path / "missing.py", "no such script: "),
        (tmp_path, "is a folder; give the path of a .py file"),
        (tmp_path / "notes.txt", "is not a Python file"),
    ]
    for target, message in cases:
        with pytest.raises(nvtutorial.LaunchError, match=message):
            launch.prepare(str(target))
    with pytest.raises(nvtutorial.LaunchError, match="a script takes args"):
        launch.prepare(SUBJECT, params={"mode": "ok"})
    with pytest.raises(nvtutorial.LaunchError, match="list of strings"):
        launch.prepare(SUBJECT, args="ok")
    assert not runs_dir.exists()


def test_save_metrics_merges_under_the_launcher_and_is_silent_outside(monkeypatch):
    from nvtutorial import runtime

    assert runtime._metrics is None
    assert runtime.save_metrics({"loss": 1.0}) is None  # outside the launcher: nothing happens
    monkeypatch.setattr(runtime, "_metrics", {})
    runtime.save_metrics({"loss": 1.0, "steps": 3})
    runtime.save_metrics({"loss": 0.5})
    assert runtime.rank_payload("x.py", 0, 1.0, {}, {}, None)["metrics"] == {"loss": 0.5, "steps": 3}
    with pytest.raises(TypeError):
        runtime.save_metrics({"model": object()})


# --- emulated nodes -----------------------------------------------------------------------------


def test_emulated_nodes_commands_and_gpus(runs_dir):
    spec = launch.prepare("selftest", nproc=2, nnodes=2, backend="gloo", params={"steps": 3})
    lines = spec.cluster_commands()
    assert len(lines) == 2
    assert lines[0].startswith(
        "torchrun --nnodes 2 --nproc-per-node 2 --rdzv-backend c10d "
        "--rdzv-endpoint $HEAD_NODE:29400 --rdzv-id nvtutorial -m nvtutorial.workloads.selftest "
    )
    assert "--set steps=3" in lines[0] and "--out" not in lines[0]
    script = launch.prepare(SUBJECT, nproc=1, nnodes=2, backend="gloo", args=["ok", "--rank", "0"])
    assert script.cluster_commands("10.0.0.1:29400")[1].endswith(f"--rdzv-id nvtutorial {SUBJECT} ok --rank 0")
    emulated = " ".join(spec.command(1, port=4321))
    assert "--rdzv-endpoint 127.0.0.1:4321" in emulated and "is_host=0" in emulated and "--standalone" not in emulated
    # on GPUs each node is its own NCCL host; nodes share GPUs only when there are too few
    gpu = dataclasses.replace(spec, backend="nccl", nproc=1)
    envs = [launch.node_environment(gpu, node, ["GPU-a"]) for node in (0, 1)]
    assert envs[0]["NCCL_HOSTID"] != envs[1]["NCCL_HOSTID"]
    assert envs[0]["CUDA_VISIBLE_DEVICES"] == envs[1]["CUDA_VISIBLE_DEVICES"] == "GPU-a"
    assert launch.node_devices(1, 2, ["a", "b"]) == [["a"], ["b"]]
    assert launch.node_devices(2, 2, ["a", "b"]) == [["a", "b"], ["a", "b"]]
    assert launch.node_environment(gpu, 0, ["a", "b"])["NVTUTORIAL_NODE"] == "0"
    mine = dataclasses.replace(gpu, env={"NCCL_HOSTID": "mine", "CUDA_VISIBLE_DEVICES": "1"})
    assert launch.node_environment(mine, 1, ["a"])["NCCL_HOSTID"] == "mine"
    assert launch.node_environment(mine, 1, ["a"])["CUDA_VISIBLE_DEVICES"] == "1"


def test_cpu_simulation_hides_the_gpus_from_ranks_only(runs_dir):
    from nvtutorial.machine import hardware

    before = (os.environ.get("CUDA_VISIBLE_DEVICES"), hardware.gpu_count())
    spec = launch.prepare("selftest", nproc=2, backend="gloo")
    assert launch.child_environment(spec)["CUDA_VISIBLE_DEVICES"] == ""
    chosen = launch.prepare("selftest", nproc=2, backend="gloo", env={"CUDA_VISIBLE_DEVICES": "0"})
    assert launch.child_environment(chosen)["CUDA_VISIBLE_DEVICES"] == "0"  # the caller's explicit choice wins
    assert (os.environ.get("CUDA_VISIBLE_DEVICES"), hardware.gpu_count()) == before


# --- resource guards ----------------------------------------------------------------------------


def test_guards_refuse_ranks_the_machine_cannot_hold(runs_dir, monkeypatch):
    monkeypatch.setattr(guards, "usable_cores", lambda: 2)
    monkeypatch.setattr(guards, "available_memory", lambda: 24 * 10**9)
    with pytest.raises(nvtutorial.LaunchError) as info:
        launch.prepare("selftest", nproc=99, backend="gloo")
    assert str(info.value) == (
        "99 ranks on 2 CPU cores: the limit is 8 (4 per core); use 8 ranks or fewer "
        "(--nproc x --nnodes), or --oversubscribe (allow_oversubscribe=True) to start them anyway"
    )
    for nproc, nnodes in ((2, 1), (1, 2), (2, 2), (4, 1), (1, 8)):  # every use of the course, and 8 at once
        assert launch.prepare("selftest", nproc=nproc, nnodes=nnodes, backend="gloo").warnings == ()
    with pytest.raises(nvtutorial.LaunchError, match="the limit is 8"):
        launch.prepare("selftest", nproc=3, nnodes=3, backend="gloo")
    monkeypatch.setattr(guards, "available_memory", lambda: 10**9)
    with pytest.raises(nvtutorial.LaunchError, match=r"4 ranks need about 1.2 GB of memory \(300 MB each\) but 1.0 GB"):
        launch.prepare("selftest", nproc=4, backend="gloo")
    spec = launch.prepare("selftest", nproc=99, backend="gloo", allow_oversubscribe=True)
    assert len(spec.warnings) == 2 and all(w.startswith("warning: ") for w in spec.warnings)
    assert not runs_dir.exists()


def test_guards_refuse_a_run_folder_that_cannot_be_written(tmp_path, monkeypatch):
    (tmp_path / "file").write_text("")
    with pytest.raises(nvtutorial.LaunchError, match="is a file, not a folder; use --out with a folder you can write"):
        launch.prepare("selftest", backend="gloo", out=tmp_path / "file" / "run")
    monkeypatch.setattr(guards.shutil, "disk_usage", lambda path: shutil_usage(free=10**6))
    with pytest.raises(nvtutorial.LaunchError, match="only 1.0 MB free on the disk holding .*: a run needs 32 MB"):
        launch.prepare("selftest", backend="gloo", out=tmp_path / "run")
    monkeypatch.undo()
    monkeypatch.setattr(guards.os, "access", lambda path, mode: False)
    with pytest.raises(nvtutorial.LaunchError, match=f"{tmp_path} is not writable"):
        launch.prepare("selftest", backend="gloo", out=tmp_path / "run")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["file"]


def shutil_usage(free: int):
    import collections

    return collections.namedtuple("usage", "total used free")(free * 2, free, free)


def test_run_folders_are_hidden_bounded_and_cleaned(tmp_path, monkeypatch, capsys):
    """The runs root keeps the newest finished runs; a run in flight or touched recently is never removed."""
    from nvtutorial import cli
    from nvtutorial.launch import spec as spec_mod

    monkeypatch.delenv("NVTUTORIAL_RUNS_DIR", raising=False)
    monkeypatch.chdir(tmp_path)
    assert spec_mod.runs_root() == Path(".runs")
    old = time.time() - 3600
    for i in range(4):
        folder = Path(".runs") / f"selftest-20260101-00000{i}-abcdef"
        folder.mkdir(parents=True)
        (folder / "result.json").write_text("{}")
        os.utime(folder / "result.json", (old + i, old + i))
        os.utime(folder, (old + i, old + i))
    in_flight = Path(".runs") / "selftest-20260101-000009-abcdef"  # no result.json yet
    in_flight.mkdir()
    os.utime(in_flight, (old, old))
    mine = Path(".runs") / "notes"  # not a folder the launcher named
    mine.mkdir()
    assert spec_mod.prune_runs(keep=2) == (2, 4)
    left = sorted(p.name for p in Path(".runs").iterdir())
    assert left == [
        "notes",
        "selftest-20260101-000002-abcdef",
        "selftest-20260101-000003-abcdef",
        "selftest-20260101-000009-abcdef",
    ]
    os.utime(Path(".runs") / "selftest-20260101-000003-abcdef")  # touched just now: stays
    assert cli.main(["clean"]) == 0
    assert "removed 1 finished run folder" in capsys.readouterr().out
    assert sorted(p.name for p in Path(".runs").iterdir()) == [
        "notes",
        "selftest-20260101-000003-abcdef",
        "selftest-20260101-000009-abcdef",
    ]


def _age(folder: Path, seconds_ago: float) -> None:
    """Date the folder and everything in it ``seconds_ago``."""
    t = time.time() - seconds_ago
    for p in [*folder.rglob("*"), folder]:
        os.utime(p, (t, t))


def test_folders_of_a_runs_files_are_pruned_as_finished_runs(tmp_path, monkeypatch):
    """Notebook 09's checkpoint folders hold no result.json: their marker makes them finished runs, removed beyond
    the newest ``keep`` once nothing in them has been written for QUIET_S; a folder with neither stays (in flight)."""
    from nvtutorial.chapters.ch09_multinode import lab
    from nvtutorial.launch import spec as spec_mod

    monkeypatch.setenv("NVTUTORIAL_RUNS_DIR", str(tmp_path / "runs"))
    ckpt = lab.checkpoint_dir("two-nodes")
    assert ckpt.parent == tmp_path / "runs" and spec_mod.RUN_NAME.match(ckpt.name)
    assert [p.name for p in ckpt.iterdir()] == [spec_mod.FILES_MARKER]
    (ckpt / "last.pt").write_bytes(b"x" * 1000)
    assert spec_mod.finished_runs() == [ckpt]
    quiet = spec_mod.QUIET_S
    _age(ckpt, quiet + 5)
    in_use = launch.files_folder("rank-then-node")
    (in_use / "run").mkdir()
    (in_use / "run" / "rank0.log").write_text("step 3")
    _age(in_use, quiet + 10)  # older than ckpt by its folder's time ...
    just = time.time() - quiet + 5
    os.utime(in_use / "run" / "rank0.log", (just, just))  # ... but a file inside was just written
    in_flight = spec_mod.run_folder("selftest")  # the launcher's, no result.json yet
    in_flight.mkdir()
    _age(in_flight, 10 * quiet)
    assert spec_mod.finished_runs() == [in_use, ckpt]
    size = 1000 + (ckpt / spec_mod.FILES_MARKER).stat().st_size
    assert spec_mod.prune_runs(keep=0) == (1, size)
    assert sorted(p.name for p in (tmp_path / "runs").iterdir()) == sorted([in_use.name, in_flight.name])
    _age(in_use, quiet + 1)  # nothing written for QUIET_S: it goes
    assert spec_mod.prune_runs(keep=1) == (0, 0)  # the newest finished one is kept
    assert spec_mod.prune_runs(keep=0)[0] == 1 and [p.name for p in (tmp_path / "runs").iterdir()] == [in_flight.name]


def test_known_harmless_lines_of_torch_are_not_shown_but_stay_in_the_log(tmp_path, runs_dir, capsys):
    """Review N10: DDP's four-line "Grad strides" warning on a CPU rank and Kineto's lines on a rank whose GPUs the
    launcher hid are left out where a rank's output is relayed; the rank's log keeps them; any other line, one that
    looks like a continuation included, is shown."""
    lines = [
        "/x/torch/autograd/graph.py:869: UserWarning: Grad strides do not match bucket view strides. This may...",
        "grad.sizes() = [4, 8, 1, 1], strides() = [8, 1, 8, 8]",
        "bucket_view.sizes() = [4, 8, 1, 1], strides() = [8, 1, 1, 1] (Triggered internally at reducer.cpp:332.)",
        "  return Variable._execution_engine.run_backward(  # Calls into the C++ engine to run the backward pass",
        "ERROR:2026-12-02 00:23:23 2495:2495 DeviceProperties.cpp:48] gpuGetDeviceCount failed with code 100",
        "USDT:2026-12-07 01:33:08 19887:19887 SyncActivityProfilerHandler.cpp:52] profiler_start",
        "grad.sizes() = [1]: a line of the script's own, not a continuation of the warning",
        "ERROR:2026-12-02 00:23:23 2495:2495 DeviceProperties.cpp:48] gpuGetDeviceCount failed with code 35",
        "rank 0: done",
    ]
    script = tmp_path / "noise.py"
    script.write_text("".join(f"print({line!r})\n" for line in lines))
    result = nvtutorial.run(str(script), nproc=1, backend="gloo", timeout=120)
    shown = [s.removeprefix("[rank0] ") for s in capsys.readouterr().out.splitlines() if s.startswith("[rank0] ")]
    assert shown == lines[6:]
    log = Path(result.log_files[0]).read_text().splitlines()
    assert all(line in log for line in lines)
    left_out, more = launch.runner.harmless(lines[0], None)
    assert left_out and more is not None and launch.runner.harmless("rank 0: done", more) == (False, None)


# ------------------------------------------------------------------------------------- the command line a run prints


def test_a_run_prints_only_the_parameters_it_changes_and_records_every_one(runs_dir, capfd):
    """Issue 28: each run printed its whole parameter set (920 characters in notebook 10). The printed line names
    what differs from the workload's defaults, and still runs the same run (tests/test_warm.py types it);
    result.json records every parameter."""
    res = nvtutorial.run(
        "selftest", nproc=2, backend="gloo", output="none", params={"mode": "ok", "steps": 1, "numel": 64}
    )
    (line,) = [x for x in capfd.readouterr().out.splitlines() if x.startswith("[nvtutorial] ranks forked warm, as:")]
    assert line.endswith(" -m nvtutorial.workloads.selftest --backend gloo --set steps=1 --set numel=64"), line
    assert res.torchrun.endswith(
        " -m nvtutorial.workloads.selftest --backend gloo --set mode=ok --set steps=1 --set numel=64 --set report_env="
    ), res.torchrun
    assert json.loads((res.run_dir / "result.json").read_text())["torchrun"] == res.torchrun


def test_the_parameters_a_line_names():
    from nvtutorial.launch.spec import given_params
    from nvtutorial.workloads import selftest

    assert given_params(selftest.Params()) == {}
    assert given_params(selftest.Params(steps=5, numel=3, report_env=())) == {"numel": "3"}  # 5 and () are defaults
    assert given_params(selftest.Params(report_env=("A", "B"), mode="hang")) == {"mode": "hang", "report_env": "A,B"}

    @dataclasses.dataclass(frozen=True)
    class Required:
        name: str
        sizes: tuple[int, ...] = (1, 2)
        ratio: float = 0.5

    # a value without a default is always named; a default from a factory or a float compares by value
    assert given_params(Required("x", (1, 2), 0.5)) == {"name": "x"}
    assert given_params(Required("x", (2, 1), 0.25)) == {"name": "x", "sizes": "2,1", "ratio": "0.25"}


@pytest.mark.parametrize("in_notebook", [True, False])
def test_in_a_notebook_the_full_command_is_one_click_away(monkeypatch, capsys, in_notebook):
    from IPython import display as ipython_display

    from nvtutorial.launch import runner

    shown: list[dict] = []
    monkeypatch.setattr(runner, "in_notebook", lambda: in_notebook)
    monkeypatch.setattr(ipython_display, "display", lambda bundle, raw: shown.append(bundle))
    runner._announce("started with", "torchrun x --set a=1", "torchrun x --set a=1 --set b=<2>")
    assert capsys.readouterr().out == "[nvtutorial] started with: torchrun x --set a=1\n"
    if in_notebook:
        (bundle,) = shown
        assert bundle["text/html"].startswith('<details class="nvtutorial-command"><summary>the full command')
        assert "torchrun x --set a=1 --set b=&lt;2&gt;</pre></details>" in bundle["text/html"]
        assert bundle["text/plain"] == "[nvtutorial] the full command: torchrun x --set a=1 --set b=<2>"
    else:
        assert shown == []
    runner._announce("started with", "torchrun x", "torchrun x")  # nothing left out: nothing to unfold
    assert shown == ([bundle] if in_notebook else []) and capsys.readouterr().out.endswith(": torchrun x\n")


def test_a_free_port_comes_from_below_the_ephemeral_range_and_leaves_the_global_generator_alone(monkeypatch):
    """A port the OS picks comes from the range outgoing connections use, which can take it before the agent binds it
    (09's store-loss lab on one H200: EADDRINUSE, then a two-minute wait); where none below is free, the OS's pick."""
    import random
    import socket

    from nvtutorial import runtime

    monkeypatch.setattr(runtime, "_below_ephemeral", lambda: list(range(*runtime.PORTS)))  # any host's range
    random.seed(7)
    state = random.getstate()
    ports = {runtime.free_port() for _ in range(5)}
    assert all(runtime.PORTS[0] <= p < runtime.PORTS[1] for p in ports) and random.getstate() == state
    real_bind = socket.socket.bind

    def bind(self, address):  # every port below the range taken: only the OS's pick is left
        if address[1] != 0:
            raise OSError(98, "Address already in use")
        return real_bind(self, address)

    monkeypatch.setattr(socket.socket, "bind", bind)
    assert runtime.free_port() not in range(*runtime.PORTS)


def test_free_ports_stay_below_this_hosts_ephemeral_range_and_skip_reserved_ones(tmp_path):
    """A host that widened its ephemeral range (1024–65535 is common) or reserves ports: look below it, never in it."""
    from nvtutorial import runtime

    def proc(port_range: str, reserved: str = "") -> list[int]:
        (tmp_path / "ip_local_port_range").write_text(port_range + "\n")
        (tmp_path / "ip_local_reserved_ports").write_text(reserved + "\n")
        return runtime._below_ephemeral(tmp_path)

    assert proc("32768\t60999") == list(range(20000, 32768))
    assert proc("40000\t60999") == list(range(20000, 32768))  # a higher range: PORTS as it is
    assert proc("10000\t65535") == list(range(5904, 10000))  # a lower one: the 4096 ports under it
    assert proc("2000\t65535") == list(range(1024, 2000))  # never the privileged ports
    assert proc("1024\t65535") == []  # nothing below: the OS's pick (free_port's fallback)
    assert proc("32768\t60999", "20000-29999,30001") == [30000, *range(30002, 32768)]
    assert runtime._below_ephemeral(tmp_path / "absent") == list(range(*runtime.PORTS))  # not Linux


def test_a_free_port_is_free_on_ipv6_too(monkeypatch):
    """The agent's TCPStore binds every address, IPv6 included: a port held by an IPv6-only listener is not free."""
    import socket

    from nvtutorial import runtime

    try:
        held = socket.socket(socket.AF_INET6)
    except OSError:
        pytest.skip("this host has no IPv6: nothing for the probe to miss")
    held.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
    held.bind(("::1", 0))
    held.listen()
    port = held.getsockname()[1]
    with held:
        with pytest.raises(OSError):
            runtime._bind_any(port)
        monkeypatch.setattr(runtime, "_below_ephemeral", lambda: [port])
        assert runtime.free_port() != port  # the only candidate is taken: the OS's pick


def test_a_free_port_is_free_on_ipv4_loopback_too():
    """Review RR11-9: a listener on 127.0.0.1 only (the launcher's own stores) makes the port unusable: refused."""
    import socket

    from nvtutorial import runtime

    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        with pytest.raises(OSError):
            runtime._bind_any(held.getsockname()[1])


def test_a_host_whose_ipv6_cannot_bind_falls_back_to_ipv4(monkeypatch):
    """Review RR11-6: an IPv6 socket that opens but cannot bind (IPv6 switched off) is no reason to reject a port."""
    import errno
    import socket

    from nvtutorial import runtime

    real_bind = socket.socket.bind

    def bind(self, address):
        if self.family == socket.AF_INET6:
            raise OSError(errno.EADDRNOTAVAIL, "Cannot assign requested address")
        return real_bind(self, address)

    monkeypatch.setattr(socket.socket, "bind", bind)
    port = runtime._bind_any(0)
    assert 0 < port < 65536
    monkeypatch.setattr(runtime, "_below_ephemeral", lambda: list(range(*runtime.PORTS)))
    assert runtime.PORTS[0] <= runtime.free_port() < runtime.PORTS[1]
