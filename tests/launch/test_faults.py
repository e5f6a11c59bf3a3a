"""The fault campaign: what the launcher does when things go wrong, each outcome asserted.

Every case checks the outcome, the message the user sees, how long the launcher took to end
the run after the fault (a generous bound counted from the fault, not from the launch), that no
process of the run is left (agents included) and that no result file is half-written. Each
passing case records a row; the last test checks that the README's table ("What goes wrong, and
what you see") is the one these rows make, and writes them to ``build/fault-campaign.json``,
from which ``python scripts/fault_table.py`` rewrites the README's table.
"""

from __future__ import annotations

import contextlib
import importlib.util
import io
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import textwrap
import threading
import time
import warnings
from pathlib import Path

import psutil
import pytest

import nvtutorial
from nvtutorial import cli, launch
from nvtutorial.launch import guards, runner
from tests.helpers.launch import (
    SUBJECT,
    assert_files_whole,
    assert_no_process,
    in_position,
    processes_of,
    read,
    wait_for,
)
from tests.helpers.paths import DATA, ROOT

REPO = ROOT
REPORT = REPO / "build" / "fault-campaign.json"
AFTER_FAULT_S = 15.0
"""Every run ends within this long after its fault (a kill, a deadline, a deletion)."""

_spec = importlib.util.spec_from_file_location("fault_table", REPO / "scripts" / "fault_table.py")
assert _spec is not None
fault_table = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(fault_table)

ROWS: dict[str, dict[str, str]] = {}


def record(case: str, fault: str, how: str, outcome: str, sees: str, within: str) -> None:
    """A row of the README's table, recorded once the case's assertions have passed."""
    assert case in fault_table.CASES, f"add {case!r} to CASES in scripts/fault_table.py"
    ROWS[case] = {"fault": fault, "how": how, "outcome": outcome, "sees": sees, "within": within}


def subject(*args: str, **kwargs) -> nvtutorial.RunResult:
    kwargs = {"nproc": 2, "backend": "gloo", "output": "none", "timeout": 120, **kwargs}
    return nvtutorial.run(SUBJECT, args=list(args), **kwargs)


def ended_cleanly(run_dir: Path) -> None:
    assert_no_process(run_dir, within=3.0)
    assert_files_whole(run_dir)


# --- ranks that misbehave -----------------------------------------------------------------------


def test_rank_killed_with_sigkill(runs_dir):
    with pytest.raises(nvtutorial.RunFailed) as info:
        subject("kill")
    returned = time.time()
    err = info.value
    sees = "rank 1 was killed by SIGKILL from outside the run (the kernel's out-of-memory killer does this"
    assert str(err).startswith(sees), str(err)
    assert err.rank == 1 and err.exc_type == "SIGKILL" and err.result.returncode != 0
    assert "rank 1: SIGKILL" in "\n".join(err.log_tail)
    assert returned - (err.result.run_dir / "rank1.log").stat().st_mtime < AFTER_FAULT_S
    assert json.loads((err.result.run_dir / "result.json").read_text())["error"]["type"] == "SIGKILL"
    ended_cleanly(err.result.run_dir)
    record(
        "sigkill",
        "a rank killed with SIGKILL (as the out-of-memory killer does)",
        "subject.py kill",
        "RunFailed, exit 1",
        f"`{sees} …)`, then its last log lines",
        f"{AFTER_FAULT_S:g} s after the kill",
    )


def run_until_deadline(args: list[str], ready: str, timeout: float = 8.0) -> tuple[nvtutorial.RunTimedOut, float]:
    """A run that cannot finish, ended by its deadline; repeated with 60 s if rank 1 never got ready (a busy
    machine)."""
    for deadline in (timeout, 60.0):
        t0 = time.monotonic()
        with pytest.raises(nvtutorial.RunTimedOut) as info:
            subject(*args, timeout=deadline)
        late = (
            time.monotonic() - t0 - deadline - (info.value.result.ready_s or 0.0)
        )  # the deadline starts once all are up
        if in_position(info.value.result.run_dir, ready):
            return info.value, late
    raise AssertionError(f"rank 1 never got to {ready!r}")


def test_frozen_rank_sigstop(runs_dir):
    err, late = run_until_deadline(["stop"], "rank 1: SIGSTOP")
    text = str(err)
    sees = "rank 1 had been stopped (SIGSTOP or Ctrl-Z): a frozen rank holds up every collective of the others"
    assert sees in text.splitlines()[1]
    assert "(stopped: a frozen process cannot print its stack)" in text
    assert "in all_reduce" in text.split("--- rank 1")[0]  # rank 0's stack: waiting for rank 1
    assert late < AFTER_FAULT_S, f"ended {late:.1f} s after the deadline"
    ended_cleanly(err.result.run_dir)
    record(
        "sigstop",
        "a frozen rank (SIGSTOP)",
        "subject.py stop",
        "RunTimedOut at the deadline, exit 1",
        "`SCRIPT did not finish within its N s deadline (counted from when every rank was up); "
        "every process of the run was ended.` / `" + sees + "`, then rank 0's stack (in all_reduce)",
        f"the deadline + {AFTER_FAULT_S:g} s",
    )


def test_rank_that_exits_0_early(runs_dir):
    with pytest.raises(nvtutorial.RunFailed) as info:
        subject("exit0")
    returned = time.time()
    err = info.value
    note = (
        "note: rank 1 finished (exit 0) while the others still ran; a rank that leaves early breaks "
        "the collectives its peers still wait in"
    )
    assert str(err).startswith("rank 0 failed: ") and err.rank == 0, str(err)
    assert note in str(err)
    assert returned - (err.result.run_dir / "rank1.json").stat().st_mtime < AFTER_FAULT_S
    ended_cleanly(err.result.run_dir)
    record(
        "exit0",
        "a rank that exits 0 early",
        "subject.py exit0",
        "RunFailed, exit 1",
        f"`rank 0 failed: …` (its all-reduce lost its peer), then `{note}`",
        f"{AFTER_FAULT_S:g} s after the exit",
    )


def test_caller_killed(tmp_path):
    """A notebook kernel killed outright: the agents and ranks (in sessions of their own) end by themselves."""
    run_dir = tmp_path / "run"
    code = textwrap.dedent(f"""
        import nvtutorial
        nvtutorial.run({str(SUBJECT)!r}, args=["hang"], nproc=2, backend="gloo", timeout=300,
                       out={str(run_dir)!r}, output="none")
    """)
    caller = subprocess.Popen([sys.executable, "-c", code])
    try:
        wait_for(lambda: "sleeping" in read(run_dir / "rank1.log"), 90, "rank 1 to hang")
        assert len(processes_of(run_dir)) >= 3  # the run's store (or torchrun's agent) and two ranks
        warm = [p for p in psutil.Process(caller.pid).children() if "launch._zygote" in " ".join(p.cmdline())]
        assert warm, "the caller started no warm interpreter"
        caller.kill()
        caller.wait()
        killed = time.monotonic()
        assert_no_process(run_dir, within=AFTER_FAULT_S)
        _, alive = psutil.wait_procs(warm, timeout=AFTER_FAULT_S)
        assert not alive, "the warm interpreter outlived the caller"
        took = time.monotonic() - killed
    finally:
        caller.kill()
    assert took < AFTER_FAULT_S
    assert_files_whole(run_dir)
    record(
        "caller",
        "the caller killed (a kernel restart, `kill -9`)",
        "SIGKILL to the Python process that called run()",
        "the ranks, the run's store and the warm interpreter end by themselves (they watch the caller)",
        "nothing: no process of the run is left",
        f"{AFTER_FAULT_S:g} s after the kill",
    )


# --- the machine around the run -----------------------------------------------------------------


@pytest.fixture
def small_disk(tmp_path):
    """A 40 MB tmpfs (just above the guard's 32 MB); skipped where mounting is not allowed."""
    mount_point = tmp_path / "small"
    mount_point.mkdir()
    proc = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=40m", "tmpfs", str(mount_point)],
        capture_output=True,
        text=True,
        check=False,
    )
    if proc.returncode != 0:
        pytest.skip(
            f"cannot mount a small tmpfs here ({proc.stderr.strip() or proc.returncode}): the disk-full "
            f"case needs root and a mount namespace that allows it"
        )
    try:
        yield mount_point
    finally:
        for p in processes_of(mount_point):
            with contextlib.suppress(Exception):
                p.kill()
        subprocess.run(["umount", "-l", str(mount_point)], check=False)


def test_disk_full_while_results_are_written(small_disk):
    run_dir = small_disk / "run"
    filler = small_disk / "filler"
    with pytest.raises(nvtutorial.RunFailed) as info:
        subject("fill", "--rank", "0", "--fill", str(filler), out=run_dir)
    returned = time.time()
    err = info.value
    sees = f"the disk holding {run_dir} is full"
    assert str(err).startswith(sees), str(err)
    assert "the result was not saved" in str(err)
    assert returned - filler.stat().st_mtime < AFTER_FAULT_S
    assert not (run_dir / "result.json").exists()
    ended_cleanly(run_dir)
    record(
        "disk_full",
        "the disk full while results are written",
        "a 40 MB tmpfs, filled by rank 0 after its all-reduce",
        "RunFailed, exit 1; no half-written file",
        "`the disk holding RUN_DIR is full (N MB free): the ranks could "
        "not write their logs and results; free some space, or use --out on another disk` / `(the result was not "
        "saved)`",
        f"{AFTER_FAULT_S:g} s after the disk filled",
    )


def _at_once(count: int, **kwargs) -> list[nvtutorial.RunResult]:
    results, errors = [], []

    def one() -> None:
        try:
            results.append(
                nvtutorial.run(
                    "selftest", backend="gloo", output="none", timeout=120, params={"steps": 2, "numel": 64}, **kwargs
                )
            )
        except Exception as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=one) for _ in range(count)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    return results


@pytest.mark.parametrize(("count", "nproc"), [(2, 2), (8, 1)])
def test_runs_at_once(runs_dir, count, nproc):
    results = _at_once(count, nproc=nproc)
    assert len(results) == count and all(r.ok for r in results)
    assert len({r.run_dir for r in results}) == count
    assert all(m["allreduce_sum"] == nproc * (nproc + 1) / 2 for r in results for m in r.ranks)
    for r in results:
        ended_cleanly(r.run_dir)
    record(
        f"at_once_{count}",
        f"{'two' if count == 2 else 'eight'} runs at once",
        f"{count} threads each calling run() ({nproc} rank{'s' if nproc > 1 else ''} each)",
        "every run succeeds, each in its own folder",
        "each run's own output and result",
        "the 120 s deadline each had",
    )


def test_rendezvous_port_already_taken(runs_dir, monkeypatch, capsys):
    """Emulated nodes meet on a free port; if another process takes it first, another is tried."""
    squatter = socket.socket()
    squatter.bind(("127.0.0.1", 0))
    squatter.listen()
    taken = squatter.getsockname()[1]
    ports = iter([taken])
    real = runner.free_port
    monkeypatch.setattr(runner, "free_port", lambda: next(ports, None) or real())
    try:
        res = nvtutorial.run(
            "selftest", nproc=1, nnodes=2, backend="gloo", output="none", timeout=120, params={"steps": 1, "numel": 64}
        )
    finally:
        squatter.close()
    sees = f"[nvtutorial] the rendezvous port {taken} was taken by another process: trying another"
    assert sees in capsys.readouterr().err
    assert res.ok and [m["allreduce_sum"] for m in res.ranks] == [3.0, 3.0]
    ended_cleanly(res.run_dir)
    record(
        "port",
        "the rendezvous port already taken",
        "a socket listening on the port picked for 2 emulated nodes",
        "the run succeeds on another port",
        "`[nvtutorial] the rendezvous port N was taken by another process: trying another`",
        "the 120 s deadline it had",
    )


def test_run_folder_deleted_while_running(runs_dir):
    run_dir = runs_dir / "doomed"
    deleted: list[float] = []

    def delete_when_hanging() -> None:
        wait_for(lambda: "sleeping" in read(run_dir / "rank1.log"), 90, "rank 1 to hang")
        shutil.rmtree(run_dir)
        deleted.append(time.monotonic())

    thread = threading.Thread(target=delete_when_hanging)
    thread.start()
    try:
        with pytest.raises(nvtutorial.RunFailed) as info:
            subject("hang", out=run_dir)
        returned = time.monotonic()
    finally:
        thread.join()
    sees = (
        f"the run folder {run_dir} was deleted (or replaced) while the run was in flight; "
        "every process of the run was ended"
    )
    assert str(info.value).startswith(sees)
    assert returned - deleted[0] < AFTER_FAULT_S
    ended_cleanly(run_dir)
    record(
        "folder_deleted",
        "the run folder deleted while running",
        "`rm -rf` of the run folder while rank 1 hangs",
        "RunFailed, exit 1",
        "`the run folder RUN_DIR was deleted (or replaced) while the run was in flight; every "
        "process of the run was ended and its logs are lost. …`",
        f"{AFTER_FAULT_S:g} s after the deletion",
    )


def test_output_flood(runs_dir, capsys):
    """100 MB of prints: shown up to 1 MiB, the rest kept in the log; the run is not slowed to a crawl."""
    res = subject("flood", "--rank", "0", "--mb", "100", output="rank0")
    shown = capsys.readouterr().out
    sees = f"[nvtutorial] 1 MiB of output shown: the rest is only in {res.run_dir / 'rank*.log'}"
    assert res.ok and sees in shown
    assert len(shown.encode()) < launch.MAX_SHOWN_BYTES + 4096
    assert (res.run_dir / "rank0.log").stat().st_size >= 100 * 10**6
    ended_cleanly(res.run_dir)
    record(
        "flood",
        "a workload that floods its output",
        "subject.py flood: rank 0 prints 100 MB",
        "the run succeeds; the log keeps everything",
        "the first 1 MiB of lines, then `[nvtutorial] 1 MiB of output shown: the rest is only in RUN_DIR/rank*.log`",
        "the 120 s deadline it had",
    )


# --- bad input ----------------------------------------------------------------------------------


class _Launched(Exception):
    """Raised in place of execute(): the input was accepted."""


def run_cli(argv: list[str]) -> tuple[int | str, str, str]:
    """``nvtutorial`` in this process with execute() stubbed: (exit code or "launched", stdout, stderr)."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code: int | str = cli.main(argv)
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else 1
        except _Launched:
            code = "launched"
    return code, out.getvalue(), err.getvalue()


@pytest.fixture
def no_launch(monkeypatch, tmp_path):
    def execute(spec, check=True, full_command=False):
        assert isinstance(spec, launch.LaunchSpec)
        raise _Launched

    monkeypatch.setattr(launch, "execute", execute)
    monkeypatch.setattr(guards, "usable_cores", lambda: 2)  # the machine: 2 cores, 24 GB
    monkeypatch.setattr(guards, "available_memory", lambda: 24 * 10**9)
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("NVTUTORIAL_RUNS_DIR", raising=False)
    return tmp_path


def test_too_many_ranks_for_the_machine(no_launch):
    code, _, err = run_cli(["run", "selftest", "--nproc", "99"])
    sees = (
        "nvtutorial run: error: 99 ranks on 2 CPU cores: the limit is 8 (4 per core); use 8 ranks or fewer "
        "(--nproc x --nnodes), or --oversubscribe (allow_oversubscribe=True) to start them anyway"
    )
    assert code == 2 and err.strip() == sees
    assert run_cli(["run", "selftest", "--nproc", "99", "--oversubscribe"])[0] == "launched"
    assert run_cli(["run", "selftest", "--nproc", "1", "--nnodes", "8"])[0] == "launched"
    assert os.listdir(no_launch) == []
    record(
        "nproc99",
        "`nvtutorial run selftest --nproc 99` on 2 cores, 24 GB",
        "the command line",
        "exit 2, nothing starts",
        f"`{sees}`",
        "before anything starts",
    )


def _read_only_folder(base: Path) -> Path | None:
    folder = base / "ro"
    folder.mkdir()
    proc = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "ro,size=1m", "tmpfs", str(folder)], capture_output=True, check=False
    )
    return folder if proc.returncode == 0 else None


def test_unwritable_out(no_launch, tmp_path_factory):
    elsewhere = tmp_path_factory.mktemp("out")
    (elsewhere / "file").write_text("")
    code, _, err = run_cli(["run", "selftest", "--out", str(elsewhere / "file" / "run")])
    sees = (
        f"nvtutorial run: error: cannot make the run folder {elsewhere / 'file' / 'run'}: "
        f"{elsewhere / 'file'} is a file"
    )
    assert code == 2 and err.startswith(sees) and err.count("\n") == 1
    code, _, err = run_cli(["run", "selftest", "--out", "/proc/nvtutorial-run"])
    assert code == 2 and err.startswith("nvtutorial run: error: ") and err.count("\n") == 1
    read_only = _read_only_folder(elsewhere)
    if read_only is not None:
        try:
            code, _, err = run_cli(["run", "selftest", "--out", str(read_only / "run")])
            assert code == 2 and f"{read_only} is on a read-only file system" in err and err.count("\n") == 1
        finally:
            subprocess.run(["umount", "-l", str(read_only)], check=False)
    assert os.listdir(no_launch) == []
    record(
        "out",
        "`--out` somewhere unwritable (under a file, read-only, /proc)",
        "the command line",
        "exit 2, nothing starts",
        "`nvtutorial run: error: cannot make the run folder OUT: PATH is a file, not a "
        "folder` (or `is on a read-only file system`, `is not writable`); `use --out with a folder you can write`",
        "before anything starts",
    )


def test_bad_script_target(no_launch):
    (no_launch / "notes.txt").write_text("")
    cases = {
        "missing.py": "no such script: missing.py",
        ".": ". is a folder",
        "notes.txt": "notes.txt is not a Python file",
    }
    for target, message in cases.items():
        code, _, err = run_cli(["run", target])
        assert code == 2 and err.startswith(f"nvtutorial run: error: {message}") and err.count("\n") == 1, err
    code, _, err = run_cli(["run", "selftest", "--", "--lr", "1"])
    assert code == 2 and "arguments are for scripts; workload selftest takes params (--set KEY=VALUE)" in err
    assert sorted(os.listdir(no_launch)) == ["notes.txt"]
    record(
        "script",
        "a missing script, a folder, a non-.py file",
        "the command line",
        "exit 2, nothing starts",
        "`no such script: PATH`, `PATH is a folder; give the path of a .py file in it`, `PATH is not a Python file: …`",
        "before anything starts",
    )


def test_random_command_lines(no_launch):
    """Property-based: any `nvtutorial run` command line ends in a launch or one line on stderr with exit 2."""
    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st

    number = st.one_of(
        st.integers(-3, 100_000).map(str),
        st.sampled_from(["nan", "inf", "-inf", "1e309", "0x10", "2.5", "", " 3"]),
        st.text(max_size=6),
    )
    path = st.one_of(
        st.sampled_from(["out", "a/b/c", "/proc/x", "/dev/null/x", ".", "", "\0", "x" * 300, str(SUBJECT)]),
        st.text(max_size=12),
    )
    assignment = st.one_of(
        st.sampled_from(["steps=1", "mode=crash", "mode", "=1", "numel=-1", "report_env=A,B", "steps=1e9", "a=b=c"]),
        st.text(max_size=12),
    )
    option = st.one_of(
        st.tuples(st.sampled_from(["--nproc", "--nnodes", "--timeout"]), number),
        st.tuples(st.just("--backend"), st.sampled_from(["auto", "gloo", "nccl", "mpi", ""])),
        st.tuples(st.sampled_from(["--set", "--env"]), assignment),
        st.tuples(st.just("--out"), path),
        st.tuples(st.just("--output"), st.sampled_from(["rank0", "all", "none", "some"])),
        st.just(("--oversubscribe",)),
        st.tuples(st.text(max_size=8).filter(lambda t: not t.startswith("-h") and not t.startswith("--h"))),
    )
    target = st.one_of(st.sampled_from(["selftest", "nope", "", str(SUBJECT), "subject.py", "/", "x.py"]), path)
    tail = st.lists(st.text(max_size=8), max_size=3)

    # the same examples on every run (CI stays reproducible); NVTUTORIAL_HYPOTHESIS_EXAMPLES=5000 looks further
    examples = int(os.environ.get("NVTUTORIAL_HYPOTHESIS_EXAMPLES", "300"))

    @settings(
        max_examples=examples,
        derandomize=True,
        deadline=None,
        database=None,
        suppress_health_check=[HealthCheck.too_slow],
    )
    @given(target, st.lists(option, max_size=6), st.booleans(), tail)
    def check(target, options, dashes, script_args):
        argv = ["run", target, *[word for opt in options for word in opt]]
        if dashes:
            argv += ["--", *script_args]
        code, out, err = run_cli(argv)
        assert code in (2, "launched") or (code == 0 and "usage:" in out), (argv, code, err)
        if code == 2:
            lines = err.strip().splitlines()
            assert len(lines) == 1 and re.match(r"nvtutorial( run)?: error: ", lines[0]), (argv, err)
            assert "Traceback" not in err
        made = [name for name in os.listdir(no_launch) if name != ".hypothesis"]  # hypothesis's own cache
        assert made == [], (argv, made)

    check()
    record(
        "hypothesis",
        "random command lines",
        "hypothesis: 300 generated `nvtutorial run` lines (targets, numbers, "
        "NaN, paths, NUL bytes, KEY=VALUE, `--` script arguments)",
        "exit 2, nothing starts (or a valid launch)",
        "one line: `nvtutorial run: error: …` naming the value and the fix; never a traceback",
        "before anything starts",
    )


# --- the README's table -------------------------------------------------------------------------


def test_readme_fault_table_matches_the_campaign():
    """Runs last: the README's table is the one the campaign's rows make (rewrite it with scripts/fault_table.py)."""
    actual = fault_table.section((REPO / "README.md").read_text())
    assert ROWS, "no case of the campaign ran"
    stale = [case for case, line in zip(ROWS, fault_table.render(ROWS).splitlines()[2:]) if line not in actual]
    missing = [case for case in fault_table.CASES if case not in ROWS]
    if not missing:
        REPORT.parent.mkdir(exist_ok=True)
        REPORT.write_text(json.dumps({"rows": ROWS}, indent=2, ensure_ascii=False) + "\n")
        assert actual == fault_table.render(ROWS), "the README's fault table is out of date: run scripts/fault_table.py"
    assert not stale, f"the README's rows for {stale} are out of date: run the campaign, then scripts/fault_table.py"
    if missing:
        warnings.warn(f"the README's rows for {missing} were not checked: those cases did not run here", stacklevel=1)


def test_a_sigkilled_rank_is_the_cause_when_its_peer_exits_first(tmp_path):
    """The race CI once lost: rank 1 was SIGKILLed, rank 0 saw 'Connection reset by peer' and exited
    first, so torchrun named rank 0 as its root cause. torchrun's report lists only ranks that had
    already ended before it cleaned up, so rank 1's SIGKILL came from outside: it is the cause."""
    from nvtutorial import launch
    from nvtutorial.launch import diagnosis

    spec = launch.prepare(SUBJECT, nproc=2, backend="gloo", out=tmp_path / "run", args=["kill"])
    spec.run_dir.mkdir()
    (spec.run_dir / "agent.log").write_text((DATA / "agent-sigkill-peer-first.log").read_text())
    (spec.run_dir / "rank0.error.json").write_text(
        json.dumps(
            {
                "rank": 0,
                "type": "RuntimeError",
                "time": 1.0,
                "traceback": "...",
                "message": "[gloo/transport/tcp/pair.cc:537] Read error [127.0.0.1]:6071: Connection reset by peer.",
            }
        )
    )
    for r in range(2):
        (spec.run_dir / f"rank{r}.log").write_text(f"rank {r}/2 up: kill\n")
    result = diagnosis.collect(spec, 1, 1.0, None)
    failure = diagnosis.diagnose(spec, result, diagnosis.Observed())
    assert failure is not None and failure.rank == 1 and failure.exc_type == "SIGKILL", str(failure)
    assert "then rank 0 failed: RuntimeError" in str(failure)
