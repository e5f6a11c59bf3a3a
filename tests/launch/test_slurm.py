"""`nvtutorial slurm`: the batch script it writes, and real 2-node jobs on a real local Slurm.

The jobs run on munge + slurmctld + two `slurmd -N` nodes started by scripts/slurm-local.sh once
per session (CI installs the packages in .ci/run); where Slurm is not installed they are skipped
with the reason. The script-rendering and bad-input tests need no Slurm.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import psutil
import pytest

from nvtutorial import cli
from nvtutorial import params as params_mod
from nvtutorial.launch import slurm
from nvtutorial.results import RunResult, read_json
from nvtutorial.workloads import selftest
from tests.helpers.launch import assert_nothing_left

NO_LOCAL_SLURM = slurm.local_unavailable()
needs_slurm = pytest.mark.skipif(NO_LOCAL_SLURM is not None, reason=f"skipped: needs a local Slurm: {NO_LOCAL_SLURM}")
JOB_TIMEOUT = 240.0

SCRIPT = textwrap.dedent('''\
    """Each rank all-reduces rank+1 and writes what it saw to OUT/script-rank{R}.json; with a
    second argument `fail`, rank 1 then exits with code 3 (the other rank succeeds)."""
    import json, os, sys
    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo")
    rank = dist.get_rank()
    x = torch.tensor([float(rank + 1)])
    dist.all_reduce(x)
    with open(os.path.join(sys.argv[1], f"script-rank{rank}.json"), "w") as fh:
        json.dump({"rank": rank, "world_size": dist.get_world_size(), "sum": x.item(),
                   "node": os.environ["SLURMD_NODENAME"], "node_id": os.environ["SLURM_NODEID"]}, fh)
    if sys.argv[2:] == ["fail"] and rank == 1:
        dist.destroy_process_group()  # without it gloo's threads can abort the exit (SIGABRT, not 3)
        sys.exit(3)
    dist.destroy_process_group()
''')


# --- the batch script (no Slurm needed) ----------------------------------------------------------


def _torchrun_words(script: str, **env: str) -> list[str]:
    """The batch script's TORCHRUN=(...) array as bash expands it, with the Slurm variables given."""
    block = script[script.index("TORCHRUN=(") :]
    block = block[: block.index("\n)\n") + 3]
    assigns = "".join(f"{k}={v}\n" for k, v in env.items())
    out = subprocess.run(
        ["bash", "-c", assigns + block + 'printf "%s\\0" "${TORCHRUN[@]}"'], check=True, capture_output=True, text=True
    ).stdout
    return out.split("\0")[:-1]


def test_cpu_script_follows_the_practice_and_writes_nothing(tmp_path):
    job = slurm.prepare(
        "selftest", nodes=3, procs_per_node=2, params={"steps": 2, "mode": "crash"}, out=tmp_path / "run", time_min=90
    )
    text = job.script()
    assert not (tmp_path / "run").exists()
    sbatch = dict(re.findall(r"^#SBATCH --([\w-]+)=(\S+)", text, re.MULTILINE))
    assert sbatch == {
        "job-name": "nvt-selftest",
        "nodes": "3",
        "ntasks-per-node": "1",
        "cpus-per-task": "2",
        "time": "01:30:00",
        "output": f"{tmp_path / 'run'}/slurm-%j.out",
    }
    assert "--kill-on-bad-exit=1" in text and 'scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1' in text
    assert "NCCL_DEBUG" not in text and "TORCH_" not in text  # no restarts, no GPU: nothing for them
    subprocess.run(["bash", "-n"], input=text, text=True, check=True)
    # every node imports this checkout's package, and the local cluster is started by this checkout's script
    pythonpath = re.search(r"^export PYTHONPATH=(\S+?)\$\{PYTHONPATH", text, re.MULTILINE).group(1)
    assert (Path(pythonpath) / "nvtutorial" / "__init__.py").is_file(), pythonpath
    assert slurm.LOCAL_SCRIPT.is_file(), slurm.LOCAL_SCRIPT

    from torch.distributed.run import get_args_parser

    words = _torchrun_words(
        text, PYTHON="python", RUN_DIR="/runs/x", RDZV_ENDPOINT="n7:21234", SLURM_NNODES="3", SLURM_JOB_ID="1234"
    )
    assert words[:3] == ["python", "-m", "torch.distributed.run"]
    args = get_args_parser().parse_args(words[3:])
    assert (
        args.nnodes,
        args.nproc_per_node,
        args.rdzv_backend,
        args.rdzv_endpoint,
        args.rdzv_id,
        args.max_restarts,
        args.module,
    ) == ("3", "2", "c10d", "n7:21234", "1234", 0, True)
    assert args.log_dir == "/runs/x/torchelastic"  # torchrun's own files in the run's folder, not in /tmp
    assert args.training_script == "nvtutorial.workloads.selftest"
    rest = args.training_script_args
    assert rest[rest.index("--out") + 1] == "/runs/x" and rest[rest.index("--backend") + 1] == "gloo"
    sets = [rest[i + 1] for i, w in enumerate(rest) if w == "--set"]
    assert params_mod.build(selftest.Params, params_mod.parse_assignments(sets)) == job.params


def test_gpu_script_asks_for_gpus_and_logs_nccl_per_node(tmp_path):
    job = slurm.prepare(
        "selftest",
        nodes=2,
        gpus_per_node=8,
        partition="h200",
        account="proj-1",
        exclusive=True,
        env={"NCCL_SOCKET_IFNAME": "ib0,eth", "MSG": "two words"},
        max_restarts=2,
        out=tmp_path,
    )
    text = job.script()
    for line in (
        "#SBATCH --gpus-per-node=8",
        "#SBATCH --cpus-per-task=32",
        "#SBATCH --partition=h200",
        "#SBATCH --account=proj-1",
        "#SBATCH --exclusive",
        "export NCCL_DEBUG=INFO",
        'export NCCL_DEBUG_FILE="$RUN_DIR/nccl-%h-%p.log"',
        "export MSG='two words'",
        "export TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1   # each attempt's ranks on a store of their own (on a port "
        "rendezvous rank 0's agent got from the OS and released: a rare EADDRINUSE, which costs a restart)",
        "export TORCH_NCCL_WAIT_TIMEOUT_DUMP_MILSEC=1000   # after an NCCL error the watchdog sleeps 4 × this before "
        "ending the rank (torch's default 15000: a minute)",
        "export TORCH_NCCL_DUMP_ON_TIMEOUT=0   # skip the flight-recorder dump (to debug hangs keep it, with "
        "TORCH_NCCL_TRACE_BUFFER_SIZE>0 and a larger wait above: the dump gets that long)",
    ):
        assert line in text, line
    subprocess.run(["bash", "-n"], input=text, text=True, check=True)
    words = _torchrun_words(
        text, PYTHON="python", RUN_DIR="/r", RDZV_ENDPOINT="h:1", SLURM_NNODES="2", SLURM_JOB_ID="9"
    )
    from torch.distributed.run import get_args_parser

    args = get_args_parser().parse_args(words[3:])
    assert (args.nproc_per_node, args.max_restarts) == ("8", 2)
    assert args.training_script_args[args.training_script_args.index("--backend") + 1] == "nccl"


@pytest.fixture
def tripwire_sbatch(tmp_path, monkeypatch):
    """sbatch and scontrol that only record that they were called (bad input must never get there)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    marker = tmp_path / "called"
    for name in ("sbatch", "scontrol"):
        (bin_dir / name).write_text(f"#!/bin/sh\necho {name} >> {marker}\nexit 1\n")
        (bin_dir / name).chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    return marker


@pytest.mark.parametrize(
    "argv, cause",
    [
        (["no_such_workload"], "unknown workload"),
        (["selftest", "--set", "steps=0"], "steps=0"),
        (["selftest", "--set", "nosuch=1"], "nosuch"),
        (["selftest", "--set", "steps"], "KEY=VALUE"),
        (["selftest", "--nodes", "0"], "nodes=0"),
        (["selftest", "--gpus-per-node", "2", "--procs-per-node", "3"], "procs_per_node=3"),
        (["selftest", "--env", "BAD-NAME=1"], "BAD-NAME"),
        (["selftest", "--wait"], "--submit"),
        (["selftest", "--", "--lr", "1"], "--set"),
        (["missing/train.py"], "no script"),
    ],
)
def test_bad_input_exits_2_before_anything_is_written_or_submitted(tmp_path, tripwire_sbatch, capsys, argv, cause):
    out = tmp_path / "run"
    submit = [] if "--wait" in argv else ["--submit"]  # --wait alone is the bad input there
    assert cli.main(["slurm", argv[0], "--out", str(out), *submit, *argv[1:]]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("nvtutorial slurm: error:") and cause in err and "\n" not in err
    assert not out.exists()
    assert not tripwire_sbatch.exists()


# --- real jobs on a real local Slurm ------------------------------------------------------------------


@pytest.fixture(scope="session")
def local_slurm(tmp_path_factory):
    """A real 2-node Slurm for the session; afterwards no daemon of it is left."""
    state = tmp_path_factory.mktemp("slurm")
    with slurm.local_cluster(state) as conf:
        daemons = [int(p.read_text()) for p in (state / "pids").glob("*.pid")]
        assert len(daemons) == 4  # munged, slurmctld, 2 slurmd
        yield conf
    alive = [pid for pid in daemons if psutil.pid_exists(pid) and psutil.Process(pid).status() != psutil.STATUS_ZOMBIE]
    assert not alive, f"Slurm daemons still running after stop: {alive}"


def _job_processes(job_id: int, conf: str) -> list[psutil.Process]:
    """Processes of a job of this cluster still alive: its slurmstepd, or anything started for it."""
    state = str(Path(conf).parent)
    found = []
    for proc in psutil.process_iter(["cmdline"]):
        try:
            if proc.status() == psutil.STATUS_ZOMBIE:
                continue
            if " ".join(proc.info["cmdline"] or []).startswith(f"slurmstepd: [{job_id}."):
                fds = Path(f"/proc/{proc.pid}/fd")
                if any(os.readlink(fd).startswith(state) for fd in fds.iterdir()):  # its spool socket
                    found.append(proc)
            elif (env := proc.environ()).get("SLURM_JOB_ID") == str(job_id) and env.get("SLURM_CONF") == conf:
                found.append(proc)
        except (psutil.Error, OSError):
            continue
    return found


def _assert_job_gone(job_id: int, conf: str, within: float = 10.0) -> None:
    end = time.monotonic() + within
    while (left := _job_processes(job_id, conf)) and time.monotonic() < end:
        time.sleep(0.2)
    assert not left, f"job {job_id} left processes: {[(p.pid, p.name()) for p in left]}"


@pytest.fixture(scope="module")
def jobs(local_slurm, tmp_path_factory):
    """Four 2-node CPU jobs submitted at once (the nodes run them side by side): selftest, and
    selftest with a crashing rank, through the command with --submit --wait; a plain script, and
    one whose rank 1 exits 3 while the other node succeeds, through the Python API."""
    root = tmp_path_factory.mktemp("slurm-jobs")
    cmd = [
        sys.executable,
        "-m",
        "nvtutorial.cli",
        "slurm",
        "selftest",
        "--nodes",
        "2",
        "--set",
        "numel=64",
        "--set",
        "steps=3",
        "--submit",
        "--wait",
    ]
    procs = {
        "ok": subprocess.Popen(
            [*cmd, "--set", "report_env=SLURMD_NODENAME,SLURM_NODEID", "--out", str(root / "ok")],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        ),
        "crash": subprocess.Popen(
            [*cmd, "--set", "mode=crash", "--out", str(root / "crash")],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        ),
    }
    (root / "allreduce.py").write_text(SCRIPT)
    submitted = {}
    for name, extra in (("script", []), ("script_fail", ["fail"])):
        job = slurm.prepare(
            str(root / "allreduce.py"), nodes=2, out=root / name, script_args=[str(root / name), *extra]
        )
        submitted[name] = slurm.submit(job.write(), wait=False)
    yield {"root": root, "procs": procs, "conf": local_slurm, **submitted}
    for proc in procs.values():
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def _finished(proc: subprocess.Popen) -> tuple[int, str]:
    out, err = proc.communicate(timeout=JOB_TIMEOUT)
    return proc.returncode, out + err


def _by_command(jobs: dict, name: str, rc: int, state: str) -> tuple[str, int, int, Path, RunResult, dict]:
    """Job ``name``, submitted by ``nvtutorial slurm --submit --wait``, once that command ended with ``rc`` and
    said the job ended in ``state``: its output, the job's id and exit code, its run folder, result and slurm.json."""
    code, output = _finished(jobs["procs"][name])
    assert code == rc, output
    job_id, exit_code = map(int, re.search(rf"job (\d+): {state}, exit code (\d+)", output).groups())
    run_dir = jobs["root"] / name
    result, meta = RunResult.load(run_dir / "result.json"), read_json(run_dir / "slurm.json")
    return output, job_id, exit_code, run_dir, result, meta


@needs_slurm
@pytest.mark.slurm
def test_selftest_runs_on_two_nodes(jobs):
    _, job_id, code, run_dir, result, meta = _by_command(jobs, "ok", 0, "COMPLETED")
    assert code == 0
    assert result.ok and result.env.world_size == 2 and len(result.ranks) == 2
    assert all(r["allreduce_ok"] and r["allreduce_sum"] == 3.0 for r in result.ranks)
    assert {r["env"]["SLURMD_NODENAME"] for r in result.ranks} == {"n1", "n2"}
    assert {r["env"]["SLURM_NODEID"] for r in result.ranks} == {"0", "1"}
    assert "2 Slurm nodes" in result.label and result.label.startswith("CPU, gloo")
    assert meta["job_id"] == str(job_id) and meta["exit_code"] == 0
    assert [(o["nodename"], o["exit_code"]) for o in meta["node_outcomes"]] == [("n1", 0), ("n2", 0)]
    assert_nothing_left(run_dir)
    _assert_job_gone(job_id, jobs["conf"])


@needs_slurm
@pytest.mark.slurm
def test_a_script_runs_on_two_nodes_through_the_python_api(jobs):
    info = slurm.follow(jobs["script"], timeout=JOB_TIMEOUT)
    assert info.ok, (info, info.output.read_text() if info.output.exists() else "no output")
    seen = [read_json(jobs["root"] / "script" / f"script-rank{r}.json") for r in range(2)]
    assert [s["world_size"] for s in seen] == [2, 2] and [s["sum"] for s in seen] == [3.0, 3.0]
    assert {s["node"] for s in seen} == {"n1", "n2"} and {s["node_id"] for s in seen} == {"0", "1"}
    assert info.result is not None and info.result.returncode == 0
    assert info.summary.startswith(f"nvtutorial slurm: job {info.job_id} COMPLETED")
    _assert_job_gone(info.job_id, jobs["conf"])


@needs_slurm
@pytest.mark.slurm
def test_a_failing_rank_fails_the_job_and_is_named(jobs):
    output, job_id, code, run_dir, result, meta = _by_command(jobs, "crash", 1, "FAILED")
    summary = next(line for line in output.splitlines() if line.startswith("nvtutorial slurm: job"))
    assert "rank 1: RuntimeError: selftest: rank 1 crashed on purpose" in summary
    assert result.returncode == code != 0
    assert result.error["rank"] == 1 and result.error["type"] == "RuntimeError"
    assert "crashed on purpose" in result.error["traceback"]
    # the job's exit code is that of the node that hosted rank 1, which the summary names
    failed = meta["node_outcomes"][result.error["node"]]
    assert any(rank == 1 for rank, _ in failed["failed_ranks"])
    assert failed["exit_code"] == code and f"node {failed['node']} ({failed['nodename']})" in summary
    assert_nothing_left(run_dir)
    _assert_job_gone(job_id, jobs["conf"])


@needs_slurm
@pytest.mark.slurm
def test_a_failed_node_ends_the_job_on_the_other_nodes(jobs):
    """Rank 1's node fails while the other node's torchrun waits for it: --kill-on-bad-exit ends it."""
    info = slurm.follow(jobs["script_fail"], timeout=JOB_TIMEOUT)
    assert info.state == "FAILED" and info.exit_code == 1, info
    assert info.summary is not None, info
    assert re.search(
        rf"job {info.job_id} FAILED: node \d \(n\d\) exited 1 first; rank 1 exited with code 3", info.summary
    )
    assert info.result.returncode == 1 and info.result.error["type"] == "NodeFailed"
    _assert_job_gone(info.job_id, jobs["conf"])


def _outcome(node: int, exit_code: int | None, at: float | None, failed_ranks=()) -> dict:
    return {
        "node": node,
        "exit_code": exit_code,
        "time": at,
        "nodename": f"n{node + 1}",
        "host": "h",
        "failed_ranks": list(failed_ranks),
    }


def test_the_first_failure_is_the_cause_not_its_consequences():
    # rank 1 died of SIGABRT on node 0; rank 0 then raised on node 1, which exited first
    outcomes = [_outcome(0, 1, 2.0, [(1, -6)]), _outcome(1, 1, 1.0, [(0, 1)])]
    node, signalled = slurm._first_failure(outcomes, error_ranks={0}, first_error_rank=0)
    assert (node["node"], signalled) == (0, (1, -6))
    # no signal: the node hosting the first rank that raised, even if another node exited earlier
    outcomes = [_outcome(0, 1, 1.0, [(0, 1)]), _outcome(1, 1, 2.0, [(1, 1)])]
    assert slurm._first_failure(outcomes, error_ranks={0, 1}, first_error_rank=1) == (outcomes[1], None)
    # a script (no error files): the earliest non-zero exit; a node Slurm ended has no exit record
    outcomes = [_outcome(0, None, None), _outcome(1, 3, 5.0, [(1, 3)]), _outcome(2, 143, 6.0)]
    assert slurm._first_failure(outcomes, error_ranks=set(), first_error_rank=None) == (outcomes[1], None)
    assert slurm._first_failure([_outcome(0, 0, 1.0)], set(), None) == (None, None)
