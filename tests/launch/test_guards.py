"""The resource guards and the failure diagnosis at their rules, in this process: no run is launched.

``nvtutorial/launch/guards.py`` refuses a run the machine cannot hold (cores, memory, the run folder's disk);
``nvtutorial/launch/diagnosis.py`` turns a failed run's files into one message naming the rank and the cause. Both
are exercised here on both sides of every limit, with the machine's facts replaced (cores, memory,
cgroup files, disk) and run folders written by hand as a launched run writes them. The launcher's own
tests (tests/test_launcher.py, tests/test_faults.py) check the same paths on real runs.
"""

from __future__ import annotations

import json
import os
import signal
import types
from pathlib import Path

import pytest

from nvtutorial.launch import diagnosis, guards
from nvtutorial.results import RunResult
from tests.helpers.launch import made_spec

MB = 1_000_000


# --------------------------------------------------------------------------- cores and memory
@pytest.fixture
def machine(monkeypatch):
    """Set the usable cores and the available memory the guards see."""
    state = {"cores": 2, "memory": 10_000 * MB}
    monkeypatch.setattr(guards, "usable_cores", lambda: state["cores"])
    monkeypatch.setattr(guards, "available_memory", lambda: state["memory"])
    return state


def test_the_limits():
    assert (guards.MAX_RANKS_PER_CORE, guards.RANK_MEMORY_MB, guards.MIN_FREE_MB) == (4, 300, 32)


@pytest.mark.parametrize(
    "cores, ranks, refused", [(2, 8, False), (2, 9, True), (1, 4, False), (1, 5, True), (16, 64, False), (16, 65, True)]
)
def test_ranks_per_core(machine, cores, ranks, refused):
    machine["cores"], machine["memory"] = cores, 10**15
    if not refused:
        assert guards.check_ranks(ranks) == []
        return
    with pytest.raises(guards.Refused) as caught:
        guards.check_ranks(ranks)
    limit = 4 * cores
    message = str(caught.value)
    assert message.startswith(
        f"{ranks} ranks on {cores} CPU core{'s' if cores > 1 else ''}: the limit is {limit} "
        f"(4 per core); use {limit} ranks or fewer"
    )
    assert "\n" not in message and "--oversubscribe" in message


@pytest.mark.parametrize(
    "memory_mb, ranks, refused", [(2400, 8, False), (2399, 8, True), (300, 1, False), (299, 1, True)]
)
def test_memory_per_rank(machine, memory_mb, ranks, refused):
    machine["memory"] = memory_mb * MB
    if not refused:
        assert guards.check_ranks(ranks) == []
        return
    with pytest.raises(guards.Refused) as caught:
        guards.check_ranks(ranks)
    fit = max(1, memory_mb // 300)
    assert str(caught.value) == (
        f"{ranks} ranks need about {ranks * 0.3:.1f} GB of memory (300 MB each) but "
        f"{memory_mb / 1000:.1f} GB is available; use {fit} ranks or fewer (--nproc x "
        "--nnodes), or --oversubscribe (allow_oversubscribe=True) to start them anyway"
    )


def test_the_first_problem_is_named_and_the_fit_is_the_smaller_limit(machine):
    machine["cores"], machine["memory"] = 1, 900 * MB  # 4 by cores, 3 by memory
    with pytest.raises(guards.Refused, match=r"^5 ranks on 1 CPU core: the limit is 4 .*; use 3 ranks or fewer"):
        guards.check_ranks(5)
    machine["memory"] = None  # unknown memory: only the cores limit
    assert guards.check_ranks(4) == []
    with pytest.raises(guards.Refused, match="use 4 ranks or fewer"):
        guards.check_ranks(5)
    machine["cores"], machine["memory"] = 64, 100 * MB  # less than one rank's memory: still "1 rank or fewer"
    with pytest.raises(guards.Refused, match="use 1 ranks or fewer"):
        guards.check_ranks(2)


def test_oversubscribing_turns_refusals_into_warnings(machine):
    machine["cores"], machine["memory"] = 1, 600 * MB
    warnings = guards.check_ranks(5, allow_oversubscribe=True)
    assert warnings == [
        "warning: 5 ranks on 1 CPU core: the limit is 4 (4 per core); starting anyway "
        "(oversubscribed: expect a slow run)",
        "warning: 5 ranks need about 1.5 GB of memory (300 MB each) but 0.6 GB is available; starting anyway "
        "(oversubscribed: expect a slow run)",
    ]
    assert guards.check_ranks(2, allow_oversubscribe=True) == []


def _fake_files(monkeypatch, files: dict[str, str | None]):
    real = Path.read_text

    def read_text(self, *args, **kwargs):
        if str(self) in files:
            if files[str(self)] is None:
                raise OSError("no such file")
            return files[str(self)]
        return real(self, *args, **kwargs)

    monkeypatch.setattr(Path, "read_text", read_text)


@pytest.mark.parametrize(
    "quota, affinity, cores",
    [
        ("max 100000\n", 8, 8),
        ("200000 100000\n", 8, 2),
        ("150000 100000\n", 8, 2),
        ("50000 100000\n", 8, 1),
        ("800000 100000\n", 4, 4),
        (None, 3, 3),
        ("garbage\n", 6, 6),
    ],
)
def test_usable_cores_reads_the_affinity_and_the_cgroup_quota(monkeypatch, quota, affinity, cores):
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(affinity)))
    _fake_files(monkeypatch, {"/sys/fs/cgroup/cpu.max": quota})
    assert guards.usable_cores() == cores


def test_usable_cores_without_affinity(monkeypatch):
    def missing(pid):
        raise AttributeError("macOS")

    monkeypatch.setattr(os, "sched_getaffinity", missing)
    monkeypatch.setattr(os, "cpu_count", lambda: 6)
    _fake_files(monkeypatch, {"/sys/fs/cgroup/cpu.max": None})
    assert guards.usable_cores() == 6
    monkeypatch.setattr(os, "cpu_count", lambda: None)
    assert guards.usable_cores() == 1


MEMINFO = "MemTotal:       16000000 kB\nMemAvailable:    8000000 kB\nSwap: 0 kB\n"


@pytest.mark.parametrize(
    "limit, current, expected",
    [
        (None, None, 8_192_000_000),  # no cgroup files: MemAvailable
        ("max\n", "100\n", 8_192_000_000),
        ("4000000000\n", "1000000000\n", 3_000_000_000),  # the cgroup's room is smaller
        ("20000000000\n", "1000000000\n", 8_192_000_000),
        ("1000\n", "5000\n", 0),  # over its limit: nothing left, never negative
    ],
)
def test_available_memory_within_a_cgroup(monkeypatch, limit, current, expected):
    _fake_files(
        monkeypatch,
        {"/proc/meminfo": MEMINFO, "/sys/fs/cgroup/memory.max": limit, "/sys/fs/cgroup/memory.current": current},
    )
    assert guards.available_memory() == expected


def test_available_memory_without_meminfo(monkeypatch):
    import psutil

    _fake_files(
        monkeypatch,
        {"/proc/meminfo": None, "/sys/fs/cgroup/memory.max": "2000\n", "/sys/fs/cgroup/memory.current": "500\n"},
    )
    monkeypatch.setattr(psutil, "virtual_memory", lambda: types.SimpleNamespace(available=10_000))
    assert guards.available_memory() == 1500
    _fake_files(monkeypatch, {"/proc/meminfo": "MemTotal: 1 kB\n", "/sys/fs/cgroup/memory.max": None})
    assert guards.available_memory() is None  # no MemAvailable line, no cgroup: unknown


# --------------------------------------------------------------------------- the run folder
def test_nearest_existing(tmp_path):
    assert guards.nearest_existing(tmp_path / "a" / "b") == tmp_path
    assert guards.nearest_existing(tmp_path) == tmp_path
    assert guards.nearest_existing(Path("/definitely/not/here")) == Path("/")


def test_a_run_folder_that_can_be_made(tmp_path):
    assert guards.check_run_dir(tmp_path / "runs" / "x") is None


def test_run_folders_refused_with_the_cause(tmp_path, monkeypatch):
    (tmp_path / "file").write_text("x")
    with pytest.raises(guards.Refused, match=r"contains a NUL character; use --out"):
        guards.check_run_dir(Path(str(tmp_path) + "\0x"))
    with pytest.raises(
        guards.Refused, match=rf"cannot make the run folder .*: {tmp_path / 'file'} is a file, not a folder"
    ):
        guards.check_run_dir(tmp_path / "file" / "run")
    monkeypatch.setattr(os, "access", lambda path, mode: False)
    with pytest.raises(guards.Refused, match="is not writable; use --out"):
        guards.check_run_dir(tmp_path / "run")


def test_a_read_only_or_full_disk(tmp_path, monkeypatch):
    real = os.statvfs
    monkeypatch.setattr(os, "statvfs", lambda p: types.SimpleNamespace(f_flag=real(p).f_flag | os.ST_RDONLY))
    with pytest.raises(guards.Refused, match="is on a read-only file system"):
        guards.check_run_dir(tmp_path / "run")
    monkeypatch.setattr(os, "statvfs", real)
    import shutil

    for free, refused in ((32 * MB, False), (32 * MB - 1, True)):
        monkeypatch.setattr(shutil, "disk_usage", lambda p, free=free: types.SimpleNamespace(free=free))
        if refused:
            with pytest.raises(guards.Refused, match=r"only 32\.0 MB free on the disk holding .*: a run needs 32 MB"):
                guards.check_run_dir(tmp_path / "run")
        else:
            guards.check_run_dir(tmp_path / "run")

    def fails(p):
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(shutil, "disk_usage", fails)
    with pytest.raises(guards.Refused, match="cannot use .* as the run folder: Permission denied; use --out"):
        guards.check_run_dir(tmp_path / "run")


# --------------------------------------------------------------------------- diagnosis: reading the run's files
def test_tail_reads_only_the_end(tmp_path, monkeypatch):
    log = tmp_path / "rank0.log"
    log.write_text("".join(f"line {i}\n" for i in range(100)))
    assert diagnosis.tail(log, 3) == ["line 97", "line 98", "line 99"]
    assert diagnosis.tail(log) == [f"line {i}" for i in range(70, 100)]
    assert diagnosis.tail(tmp_path / "missing.log") == [] and diagnosis.tail(log / "x") == []
    monkeypatch.setattr(diagnosis, "_TAIL_BYTES", 20)
    assert diagnosis.tail(log, 100) == ["line 98", "line 99"]  # the first, cut line is dropped
    short = tmp_path / "short.log"
    short.write_text("a\nb\n")
    assert diagnosis.tail(short, 100) == ["a", "b"]  # small enough: nothing dropped


STACKS = """\
rank log line 1
rank log line 2
Thread 0x00007f01 (most recent call first):
  File "/x/threading.py", line 10 in wait

Current thread 0x00007f02 (most recent call first):
  File "/x/work.py", line 5 in all_reduce
  File "/x/work.py", line 9 in <module>
"""


def test_stack_section_from_before_the_dump(tmp_path):
    log = tmp_path / "rank0.log"
    log.write_text("\n".join(f"early {i}" for i in range(10)) + "\n" + STACKS)
    section = diagnosis.stack_section(log, before=2)
    assert section[0] == "rank log line 1" and section[2].startswith("Thread 0x00007f01")
    assert section[-1] == '  File "/x/work.py", line 9 in <module>'
    assert diagnosis.stack_section(log, before=0)[0].startswith("Thread 0x00007f01")
    assert len(diagnosis.stack_section(log, before=2, limit=3)) == 3
    # an earlier dump separated from the last one by other output is not part of it
    log.write_text(STACKS + "later output\n" + STACKS.split("\n", 2)[2])
    assert diagnosis.stack_section(log, before=1)[0] == "later output"
    plain = tmp_path / "plain.log"
    plain.write_text("".join(f"{i}\n" for i in range(20)))
    assert diagnosis.stack_section(plain) == [str(i) for i in range(8, 20)]  # no dump: the last 12 lines


def test_agent_logs(tmp_path):
    assert diagnosis.agent_logs(made_spec(tmp_path)) == [tmp_path / "run" / "agent.log"]
    two = made_spec(tmp_path, world=4, nnodes=2)
    assert diagnosis.agent_logs(two) == [
        tmp_path / "run" / "node0" / "agent.log",
        tmp_path / "run" / "node1" / "agent.log",
    ]


def write_rank(s, rank, metrics=None, env=None, log="", error=None):
    if metrics is not None:
        (s.run_dir / f"rank{rank}.json").write_text(json.dumps({"metrics": metrics, "env": env or {}}))
    (s.run_dir / f"rank{rank}.log").write_text(log)
    if error is not None:
        (s.run_dir / f"rank{rank}.error.json").write_text(json.dumps({"rank": rank, **error}))


ENV = {
    "host": "h",
    "backend": "gloo",
    "world_size": 2,
    "device": "cpu",
    "torch": "2.13.0",
    "python": "3.11",
    "cuda": None,
    "nccl": None,
}


def test_collect_gathers_every_ranks_files(tmp_path):
    s = made_spec(tmp_path)
    write_rank(s, 0, {"loss": 1.0}, ENV, "a\nb\n")
    write_rank(s, 1, {"loss": 2.0}, {**ENV, "device": "cpu"}, "c\n")
    r = diagnosis.collect(s, 0, 1.5, 0.2)
    assert r.ranks == [{"loss": 1.0}, {"loss": 2.0}] and r.returncode == 0 and r.wall_s == 1.5
    assert r.first_output_s == 0.2 and r.params == {"args": ["--x"]} and r.nnodes == 1
    assert r.env.device_names == ("cpu", "cpu") and r.env.nnodes == 1 and r.env.world_size == 2
    assert r.log_tail == ["[rank0] a", "[rank0] b", "[rank1] c"]
    assert r.log_files == {0: s.run_dir / "rank0.log", 1: s.run_dir / "rank1.log"}
    (s.run_dir / "rank1.json").write_text("{not json")
    r = diagnosis.collect(s, 1, 1.0, None)
    assert r.ranks == [] and r.env is None  # not every rank reported: no per-rank results, no environment
    params = types.SimpleNamespace(steps=3)
    import dataclasses

    @dataclasses.dataclass
    class P:
        steps: int = 3

    s = dataclasses.replace(s, params=P())
    assert diagnosis.collect(s, 1, 1.0, None).params == {"steps": 3} and params.steps == 3


def _result(s, returncode=1, ranks=None):
    return RunResult(
        workload=s.workload,
        params={},
        returncode=returncode,
        wall_s=1.0,
        first_output_s=None,
        env=None,
        ranks=ranks or [],
        run_dir=s.run_dir,
        log_files={r: s.run_dir / f"rank{r}.log" for r in range(s.world_size)},
        log_tail=[],
    )


def test_a_run_that_succeeded_needs_no_diagnosis(tmp_path):
    s = made_spec(tmp_path)
    assert diagnosis.diagnose(s, _result(s, 0, [{}, {}]), diagnosis.Observed()) is None


def test_the_first_rank_that_raised_is_named(tmp_path, monkeypatch):
    monkeypatch.setattr(diagnosis, "disk_full", lambda s: None)
    s = made_spec(tmp_path)
    write_rank(s, 0, log="r0 line\n", error={"type": "ValueError", "message": "late", "traceback": "tb0", "time": 2.0})
    write_rank(
        s, 1, log="r1 line\n", error={"type": "RuntimeError", "message": "first", "traceback": "tb1", "time": 1.0}
    )
    result = _result(s)
    f = diagnosis.diagnose(s, result, diagnosis.Observed())
    assert f.rank == 1 and f.exc_type == "RuntimeError" and f.traceback == "tb1" and not f.timed_out
    assert f.message.startswith("rank 1 failed: RuntimeError: first\n--- last lines of rank 1's log")
    assert f.message.endswith("r1 line") and result.log_tail == ["r1 line"]
    assert result.error == {"rank": 1, "type": "RuntimeError", "message": "first", "traceback": "tb1"}


def test_a_rank_that_finished_early_is_noted(tmp_path, monkeypatch):
    monkeypatch.setattr(diagnosis, "disk_full", lambda s: None)
    s = made_spec(tmp_path, world=3)
    write_rank(s, 0, {"ok": 1}, ENV)
    write_rank(s, 1, error={"type": "RuntimeError", "message": "gloo: connection closed", "traceback": "tb"})
    write_rank(s, 2)
    f = diagnosis.diagnose(s, _result(s), diagnosis.Observed())
    assert "\nnote: rank 0 finished (exit 0) while the others still ran" in f.message
    assert diagnosis._early_note(s, {1}).startswith("\nnote: rank 0 finished")
    write_rank(s, 2, {"ok": 1}, ENV)
    assert "note: ranks 0, 2 finished" in diagnosis._early_note(s, {1})
    write_rank(s, 1, {"ok": 1}, ENV)
    assert diagnosis._early_note(s, set()) == ""  # every rank finished: nobody left early


AGENT = """\
[E] failures:
  time      : 2026-12-01_10:00:00
  host      : vm
  rank      : {rank} (local_rank: {rank})
  exitcode  : {code} (pid: 1234)
"""


@pytest.mark.parametrize(
    "code, kind, words",
    [
        (-9, "SIGKILL", "killed by SIGKILL from outside the run"),
        (-6, "SIGABRT", "killed by SIGABRT (no Python exception"),
        (-11, "SIGSEGV", "killed by SIGSEGV"),
    ],
)
def test_a_rank_killed_by_a_signal(tmp_path, monkeypatch, code, kind, words):
    monkeypatch.setattr(diagnosis, "disk_full", lambda s: None)
    s = made_spec(tmp_path)
    (s.run_dir / "agent.log").write_text(AGENT.format(rank=1, code=code))
    write_rank(s, 0, error={"type": "RuntimeError", "message": "peer gone", "traceback": "tb"})
    write_rank(s, 1, log="last words\n")
    result = _result(s, returncode=0)
    f = diagnosis.diagnose(s, result, diagnosis.Observed())
    assert f.rank == 1 and f.exc_type == kind and words in f.message
    assert "(then rank 0 failed: RuntimeError: peer gone)" in f.message and result.returncode == 1
    assert result.error == {"rank": 1, "type": kind, "message": f.message.split("\n")[0]}


def test_signals_that_are_not_a_crash_and_ranks_that_reported(tmp_path):
    s = made_spec(tmp_path)
    (s.run_dir / "agent.log").write_text(
        AGENT.format(rank=0, code=-15) + AGENT.format(rank=1, code=1) + AGENT.format(rank=1, code=-9)
    )
    assert diagnosis._signalled_ranks(s) == [(1, signal.SIGKILL)]  # SIGTERM is clean-up, exit 1 no signal
    assert diagnosis._signalled_ranks(made_spec(tmp_path, world=4, nnodes=2)) == []  # no node logs
    two = made_spec(tmp_path, world=4, nnodes=2)
    (two.run_dir / "node1").mkdir()
    (two.run_dir / "node1" / "agent.log").write_text(AGENT.format(rank=3, code=-11))
    assert diagnosis._signalled_ranks(two) == [(3, signal.SIGSEGV)]


def test_a_rank_that_vanished(tmp_path, monkeypatch):
    monkeypatch.setattr(diagnosis, "disk_full", lambda s: None)
    s = made_spec(tmp_path)
    write_rank(s, 0)
    write_rank(s, 1)
    f = diagnosis.diagnose(s, _result(s), diagnosis.Observed(vanished={1: 5.0, 0: 7.0}))
    assert f.rank == 1 and f.exc_type == "ExitWithoutResult"
    assert f.message.startswith("rank 1 ended without a result or a Python exception")
    # a vanished rank that raised is not "vanished": its error is the cause
    write_rank(s, 1, error={"type": "KeyError", "message": "x", "traceback": "tb"})
    f = diagnosis.diagnose(s, _result(s), diagnosis.Observed(vanished={1: 5.0}))
    assert f.exc_type == "KeyError" and f.rank == 1


def test_no_rank_reported_anything(tmp_path, monkeypatch):
    monkeypatch.setattr(diagnosis, "disk_full", lambda s: None)
    s = made_spec(tmp_path)
    (s.run_dir / "agent.log").write_text("torchrun: error: unrecognized arguments\n")
    result = _result(s, returncode=2)
    f = diagnosis.diagnose(s, result, diagnosis.Observed())
    assert f.rank is None and f.exc_type == "ExitCode"
    assert f.message.startswith("selftest exited with code 2 and no rank reported an error")
    assert result.log_tail == ["torchrun: error: unrecognized arguments"] and result.error["type"] == "ExitCode"
    assert diagnosis.diagnose(s, _result(s, returncode=0), diagnosis.Observed()).message.startswith(
        "selftest exited with code 1"
    )  # exit 0 without results is a failure too


def test_a_full_disk(tmp_path, monkeypatch):
    import shutil

    s = made_spec(tmp_path)
    write_rank(s, 0, log="OSError: [Errno 28] No space left on device\n")
    write_rank(s, 1)
    message = diagnosis.disk_full(s)
    assert message is not None
    assert message.startswith(f"the disk holding {s.run_dir} is full (") and "free some space" in message
    write_rank(s, 0, log="fine\n")
    assert diagnosis.disk_full(s) is None
    monkeypatch.setattr(shutil, "disk_usage", lambda p: types.SimpleNamespace(free=32 * MB - 1))
    assert diagnosis.disk_full(s) is not None
    monkeypatch.setattr(shutil, "disk_usage", lambda p: types.SimpleNamespace(free=32 * MB))
    assert diagnosis.disk_full(s) is None

    def broken(p):
        raise OSError("gone")

    monkeypatch.setattr(shutil, "disk_usage", broken)
    assert diagnosis.disk_full(s) is None
    monkeypatch.setattr(shutil, "disk_usage", lambda p: types.SimpleNamespace(free=0))
    f = diagnosis.diagnose(s, _result(s), diagnosis.Observed())
    assert f.exc_type == "DiskFull" and f.message.startswith("the disk holding")
    write_rank(s, 1, error={"type": "OSError", "message": "No space left on device", "traceback": "tb"})
    (s.run_dir / "agent.log").write_text(AGENT.format(rank=0, code=-9))
    f = diagnosis.diagnose(s, _result(s), diagnosis.Observed())  # a full disk explains the rest: named first
    assert (
        f.exc_type == "OSError" and f.message.startswith("the disk holding") and "(rank 1 failed: OSError" in f.message
    )


def test_a_run_past_its_deadline(tmp_path):
    s = made_spec(tmp_path)
    write_rank(s, 0, log=STACKS)
    write_rank(s, 1, log="")
    result = _result(s, returncode=0)
    f = diagnosis.diagnose(s, result, diagnosis.Observed(timed_out=True, stopped={1}))
    assert f.timed_out and f.exc_type == "Timeout" and result.returncode == -9
    lines = f.message.splitlines()
    assert (
        lines[0] == "selftest did not finish within its 30 s deadline (counted from when every rank was up); every "
        "process of the run was ended."
    )
    assert (
        lines[1] == "rank 1 had been stopped (SIGSTOP or Ctrl-Z): a frozen rank holds up every collective of the others"
    )
    assert "(stopped: a frozen process cannot print its stack)" in lines and "(no output)" in lines
    assert result.error == {"type": "Timeout", "message": lines[0]}
    assert result.log_tail[0] == f"--- rank 0 ({s.run_dir / 'rank0.log'}) ---"
    start = diagnosis.diagnose(s, _result(s, returncode=-15), diagnosis.Observed(timed_out=True, startup=True))
    assert start.message.startswith("selftest: the ranks were not all up within 20 s of start-up")
    write_rank(s, 1, {"ok": 1}, ENV)
    late = _result(s)
    f = diagnosis.diagnose(s, late, diagnosis.Observed(timed_out=True, stopped={0, 1}))
    assert f.message.splitlines()[1].startswith("note: rank 1 finished") and "ranks 0, 1 had been stopped" in f.message
    assert late.log_tail[0].startswith("--- rank 0") and late.returncode == 1
