"""Multi-node runs on a Slurm cluster: a batch script, its submission, and the run's result.

``nvtutorial slurm WORKLOAD_OR_SCRIPT --nodes N --gpus-per-node G`` writes ``RUN_DIR/job.sbatch``;
``--submit`` hands it to ``sbatch`` and ``--wait`` follows the job to its end. Used in notebook 09,
through the Python API::

    from nvtutorial.launch import slurm
    job = slurm.prepare("selftest", nodes=2, procs_per_node=1, params={"steps": 3})
    print(job.script())                      # the batch script, as it will be submitted
    with slurm.local_cluster():              # a real Slurm on this machine (scripts/slurm-local.sh)
        info = slurm.submit(job.write(), wait=True)
    info.state, info.exit_code, info.result  # COMPLETED, 0, the RunResult from result.json

What the script does, and where each practice comes from:

- one task per node (``--ntasks-per-node=1``) that runs one ``torchrun``, which starts the node's
  ranks; the nodes meet in a c10d rendezvous on the first node of the allocation, found with
  ``scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1``, with ``--rdzv-id $SLURM_JOB_ID``
  (PyTorch's multinode tutorial and its ``pytorch/examples``
  ``distributed/ddp-tutorial-series/slurm/sbatch_run.sh``; ``pytorch/torchtitan``
  ``multinode_trainer.slurm``);
- ``srun --kill-on-bad-exit=1`` so one failed node ends the others instead of leaving them in a
  collective until the process-group timeout; values that differ per node (``$SLURM_NODEID``) are
  expanded by the node at ``srun`` time, never in the batch script (``stas00/ml-engineering``
  ``orchestration/slurm/users.md`` "SLURM_PROCID early interpolation",
  ``launchers/torchrun-launcher.slurm``);
- ``srun --cpus-per-task="$SLURM_CPUS_PER_TASK"``: since Slurm 22.05 a step does not inherit the
  batch job's ``--cpus-per-task`` (``man srun``);
- the job's output and every log in the run folder (``--output=RUN_DIR/slurm-%j.out``, one
  ``nodeN.log`` per node), and a status decided from the step's exit code after ``srun``
  (``huggingface/picotron`` ``template/base_job.slurm``);
- on GPUs, ``NCCL_DEBUG=INFO`` into one file per host and process,
  ``NCCL_DEBUG_FILE=RUN_DIR/nccl-%h-%p.log`` (``stas00/ml-engineering`` ``network/debug``);
  ``PYTHONFAULTHANDLER=1`` (torchtitan);
- the rendezvous port is derived from the job id, so two jobs sharing a node do not collide
  (picotron draws a random one).

After ``srun``, :func:`collect` (``python -m nvtutorial.launch.slurm collect RUN_DIR``) builds
``result.json`` from the ranks' ``rank{R}.json`` with the launcher's own collection
(:func:`nvtutorial.launch.diagnosis.collect` and ``diagnose``), prints one line naming the node and rank
that failed first, and exits with that node's exit code, which becomes the job's.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import re
import secrets
import shlex
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from nvtutorial import launch, workloads
from nvtutorial import params as params_mod
from nvtutorial.launch.environment import NCCL_WATCHDOG, RESTART_STORE
from nvtutorial.launch.slurm_result import SUMMARY_PREFIX, collect
from nvtutorial.launch.slurm_result import _first_failure as _first_failure  # re-exported: the tests call it from here
from nvtutorial.launch.spec import workload_program
from nvtutorial.results import RunResult, write_json_atomic

SLURM_PACKAGES = "slurmctld slurmd slurm-client munge"
TERMINAL_STATES = set(  # the states a job never leaves
    "COMPLETED FAILED CANCELLED TIMEOUT NODE_FAIL OUT_OF_MEMORY PREEMPTED BOOT_FAIL DEADLINE SPECIAL_EXIT "
    "REVOKED".split()
)
SAY_S = 1.5
"""A local Slurm starting or stopping says what it does at least this often (a cell is never silent for 2 s)."""
_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_SBATCH_VALUE = re.compile(r"^[\w.,@:+-]+$")


class SlurmError(ValueError):
    """Bad input for a Slurm job, found before anything was written; or Slurm refused it."""


@dataclasses.dataclass(frozen=True)
class SlurmJob:
    """A validated multi-node run (see :func:`prepare`): render it with :meth:`script`, save it with :meth:`write`."""

    target: str
    """A workload name, or the absolute path of a script."""
    is_script: bool
    params: Any
    script_args: tuple[str, ...]
    nodes: int
    gpus_per_node: int
    procs_per_node: int
    cpus_per_task: int
    time_min: int
    partition: str | None
    account: str | None
    exclusive: bool
    env: Mapping[str, str]
    run_dir: Path
    max_restarts: int
    port: int | None
    python: str

    @property
    def backend(self) -> str:
        return "nccl" if self.gpus_per_node else "gloo"

    @property
    def world_size(self) -> int:
        return self.nodes * self.procs_per_node

    @property
    def name(self) -> str:
        return Path(self.target).stem if self.is_script else self.target

    @property
    def path(self) -> Path:
        """Where :meth:`write` puts the batch script."""
        return self.run_dir / "job.sbatch"

    def program(self) -> list[str]:
        """What torchrun starts on every rank: the workload module and its arguments, or the script."""
        if self.is_script:
            return [self.target, *self.script_args]
        return workload_program(self.target, self.params, "--out", "$RUN_DIR", "--backend", self.backend, "--capture")

    def script(self) -> str:
        """The batch script's text."""
        return _render(self)

    def write(self) -> Path:
        """Write the batch script and ``slurm.json`` (what :func:`collect` reads) into the run folder."""
        self.run_dir.mkdir(parents=True, exist_ok=True)
        for pattern in ("rank*.*", "node*.exit", "node*.log", "result.json"):
            for stale in self.run_dir.glob(pattern):
                stale.unlink(missing_ok=True)
        write_json_atomic(self.run_dir / "slurm.json", self.describe())
        self.path.write_text(self.script())
        self.path.chmod(0o755)
        return self.path

    def describe(self) -> dict[str, Any]:
        return {
            "target": self.target,
            "is_script": self.is_script,
            "script_args": list(self.script_args),
            "params": params_mod.to_strings(self.params) if self.params is not None else {},
            "nodes": self.nodes,
            "gpus_per_node": self.gpus_per_node,
            "procs_per_node": self.procs_per_node,
            "backend": self.backend,
            "env": dict(self.env),
            "run_dir": str(self.run_dir),
        }


def _whole(name: str, value: Any, least: int) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < least:
        raise SlurmError(f"{name}={value!r}: give a whole number of at least {least}")
    return value


def _target(
    target: str, params: Mapping[str, Any] | None, script_args: tuple[str, ...] | list[str]
) -> tuple[str, bool, Any]:
    """The job's target, checked: (a workload's name or a script's absolute path, whether it is a script, the
    workload's ``Params``)."""
    is_script = target.endswith(".py") or os.sep in target
    if is_script:
        path = Path(target).expanduser().resolve()
        if not path.is_file():
            raise SlurmError(f"no script at {target}: give a workload name (nvtutorial list) or an existing .py file")
        if params:
            raise SlurmError("--set is for workloads; pass a script's own arguments after --")
        return str(path), True, None
    if script_args:
        raise SlurmError(f"{target} is a workload: give its parameters with --set KEY=VALUE, not after --")
    try:
        return target, False, params_mod.build(workloads.load(target).Params, dict(params or {}))
    except workloads.UnknownWorkload as exc:
        raise SlurmError(str(exc)) from None
    except params_mod.ParamError as exc:
        raise SlurmError(f"{target}: {exc}") from None


def prepare(
    target: str,
    *,
    nodes: int = 2,
    gpus_per_node: int = 0,
    procs_per_node: int | None = None,
    params: Mapping[str, Any] | None = None,
    env: Mapping[str, Any] | None = None,
    time_min: int = 10,
    partition: str | None = None,
    account: str | None = None,
    exclusive: bool = False,
    out: str | os.PathLike[str] | None = None,
    cpus_per_task: int | None = None,
    max_restarts: int = 0,
    port: int | None = None,
    script_args: tuple[str, ...] | list[str] = (),
    python: str | None = None,
) -> SlurmJob:
    """Check a multi-node run; raises :class:`SlurmError` naming the bad value and the fix.

    ``target``: a workload (``nvtutorial list``) or a Python script path (anything ending in
    ``.py`` or containing ``/``). ``procs_per_node``: ranks per node on CPU (default 1); on GPUs it
    is ``gpus_per_node``. ``cpus_per_task``: cores per node (default 4 per GPU, else 1 per rank).
    """
    _whole("nodes", nodes, 1)
    _whole("gpus_per_node", gpus_per_node, 0)
    _whole("time_min", time_min, 1)
    _whole("max_restarts", max_restarts, 0)
    if gpus_per_node:
        if procs_per_node not in (None, gpus_per_node):
            raise SlurmError(
                f"procs_per_node={procs_per_node} with gpus_per_node={gpus_per_node}: on GPUs every "
                "GPU gets one rank; leave --procs-per-node out"
            )
        procs = gpus_per_node
    else:
        procs = _whole("procs_per_node", 1 if procs_per_node is None else procs_per_node, 1)
    default_cpus = 4 * gpus_per_node if gpus_per_node else procs
    cpus = _whole("cpus_per_task", default_cpus if cpus_per_task is None else cpus_per_task, 1)
    if port is not None and (_whole("port", port, 1024) > 65535):
        raise SlurmError(f"port={port}: use a port between 1024 and 65535")
    for name, value in (("partition", partition), ("account", account)):
        if value is not None and not _SBATCH_VALUE.match(value):
            raise SlurmError(f"{name}={value!r}: use the name as sinfo/sacctmgr show it (letters, digits, . , _ -)")
    overrides = {}
    for key, value in (env or {}).items():
        if not _NAME.match(str(key)):
            raise SlurmError(f"bad environment variable name {key!r}: use letters, digits and _")
        overrides[str(key)] = str(value)
    target, is_script, parsed = _target(target, params, script_args)
    if out is None:
        stamp = time.strftime("%Y%m%d-%H%M%S")
        name = Path(target).stem if is_script else target
        out = launch.runs_root() / f"slurm-{name}-{stamp}-{secrets.token_hex(3)}"
    return SlurmJob(
        target=target,
        is_script=is_script,
        params=parsed,
        script_args=tuple(map(str, script_args)),
        nodes=nodes,
        gpus_per_node=gpus_per_node,
        procs_per_node=procs,
        cpus_per_task=cpus,
        time_min=time_min,
        partition=partition,
        account=account,
        exclusive=exclusive,
        env=overrides,
        run_dir=Path(out).expanduser().resolve(),
        max_restarts=max_restarts,
        port=port,
        python=python or sys.executable,
    )


def _time_limit(minutes: int) -> str:
    days, rest = divmod(minutes, 24 * 60)
    return (f"{days}-" if days else "") + f"{rest // 60:02d}:{rest % 60:02d}:00"


def _sbatch_header(job: SlurmJob) -> list[str]:
    """The batch script's first lines: what it runs, then its ``#SBATCH`` options."""
    where = (
        f"{job.gpus_per_node} GPU(s) per node, nccl"
        if job.gpus_per_node
        else f"{job.procs_per_node} CPU rank(s) per node, gloo"
    )
    lines = [
        "#!/bin/bash",
        f"# nvtutorial slurm: {job.name} on {job.nodes} nodes ({where}; world size {job.world_size}).",
        f"# Submit with: sbatch {shlex.quote(str(job.path))}    Results: {job.run_dir}/result.json",
        "#SBATCH --job-name=" + f"nvt-{re.sub(r'[^A-Za-z0-9_.-]', '_', job.name)}",
        f"#SBATCH --nodes={job.nodes}",
        "#SBATCH --ntasks-per-node=1                # one torchrun per node; it starts the node's ranks",
    ]
    if job.gpus_per_node:
        lines.append(f"#SBATCH --gpus-per-node={job.gpus_per_node}")
    lines += [
        f"#SBATCH --cpus-per-task={job.cpus_per_task}",
        f"#SBATCH --time={_time_limit(job.time_min)}",
        f"#SBATCH --output={job.run_dir}/slurm-%j.out",
    ]
    if job.partition:
        lines.append(f"#SBATCH --partition={job.partition}")
    if job.account:
        lines.append(f"#SBATCH --account={job.account}")
    if job.exclusive:
        lines.append("#SBATCH --exclusive                        # no other job on these nodes while measuring")
    return lines


def _restart_env(job: SlurmJob) -> list[tuple[str, str]]:
    """What a job that restarts its ranks needs (notebook 09, reviews RR5-1 and RR9-7): each attempt's ranks on a store
    of their own; on GPUs, NCCL's watchdog ending a rank after 4 s, not a minute."""
    if job.max_restarts == 0:
        return []
    say = {
        "TORCH_DISABLE_SHARE_RDZV_TCP_STORE": "each attempt's ranks on a store of their own (on a port rendezvous rank "
        "0's agent got from the OS and released: a rare EADDRINUSE, which costs a restart)",
        "TORCH_NCCL_WAIT_TIMEOUT_DUMP_MILSEC": "after an NCCL error the watchdog sleeps 4 × this before ending the "
        "rank (torch's default 15000: a minute)",
        "TORCH_NCCL_DUMP_ON_TIMEOUT": "skip the flight-recorder dump (to debug hangs keep it, with "
        "TORCH_NCCL_TRACE_BUFFER_SIZE>0 and a larger wait above: the dump gets that long)",
    }
    env = {**RESTART_STORE, **(NCCL_WATCHDOG if job.gpus_per_node else {})}
    return [(key, f"export {key}={value}   # {say[key]}") for key, value in env.items()]


def _render(job: SlurmJob) -> str:
    q = shlex.quote
    package_root = Path(__file__).resolve().parents[2]
    lines = [
        *_sbatch_header(job),
        "",
        "set -uo pipefail    # no -e: when a node fails, the lines after srun still say which one",
        "",
        f"export RUN_DIR={q(str(job.run_dir))}            # on a filesystem every node sees",
        f"PYTHON=${{NVTUTORIAL_PYTHON:-{q(job.python)}}}   # a Python with torch and nvtutorial on every node",
        f"export PYTHONPATH={q(str(package_root))}${{PYTHONPATH:+:$PYTHONPATH}}",
        "export PYTHONUNBUFFERED=1 PYTHONFAULTHANDLER=1",
        f"export OMP_NUM_THREADS={max(1, job.cpus_per_task // job.procs_per_node)}",
    ]
    if job.gpus_per_node:
        lines += [
            "export NCCL_DEBUG=INFO",
            'export NCCL_DEBUG_FILE="$RUN_DIR/nccl-%h-%p.log"   # one NCCL log per host (%h) and process (%p)',
        ]
    lines += [line for key, line in _restart_env(job) if key not in job.env]
    lines += [f"export {key}={q(value)}" for key, value in job.env.items()]
    port = str(job.port) if job.port else "$((20000 + SLURM_JOB_ID % 20000))"
    lines += [
        "",
        "# The rendezvous: every node's torchrun meets on the first node of the allocation.",
        'HEAD_NODE=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)',
        "HEAD_ADDR=$(scontrol show node \"$HEAD_NODE\" | sed -n 's/.*NodeAddr=\\([^ ]*\\).*/\\1/p')",
        f'RDZV_ENDPOINT="${{HEAD_ADDR:-$HEAD_NODE}}:{port}"',
        'echo "job $SLURM_JOB_ID: $SLURM_NNODES nodes ($SLURM_JOB_NODELIST), rendezvous at $RDZV_ENDPOINT"',
        "",
        "TORCHRUN=(",
        '    "$PYTHON" -m torch.distributed.run       # = torchrun',
        f'    --nnodes "$SLURM_NNODES" --nproc-per-node {job.procs_per_node}',
        '    --rdzv-backend c10d --rdzv-endpoint "$RDZV_ENDPOINT" --rdzv-id "$SLURM_JOB_ID"',
        f"    --max-restarts {job.max_restarts}",
        '    --log-dir "$RUN_DIR/torchelastic"       # its own files in the run\'s folder, not in /tmp for good',
        *_program_lines(job),
        ")",
        "",
        "# One task per node. --kill-on-bad-exit=1: when one node's torchrun fails, Slurm ends the others",
        "# (SIGTERM, then SIGKILL). Each node records its exit code; the single quotes keep $SLURM_NODEID",
        "# for the node, and the shell stays (passing SIGTERM on) until torchrun has ended.",
        'rm -f "$RUN_DIR"/node*.exit "$RUN_DIR"/rank*.* "$RUN_DIR"/result.json    # a resubmission starts clean',
        "START=$(date +%s.%N)",
        'srun --ntasks-per-node=1 --cpus-per-task="$SLURM_CPUS_PER_TASK" --kill-on-bad-exit=1 \\',
        '    --output="$RUN_DIR/node%n.log" bash -c \'',
        '        "$@" & child=$!',
        '        trap "kill -TERM $child 2>/dev/null" TERM',
        "        wait $child; rc=$?",
        "        while kill -0 $child 2>/dev/null; do wait $child; rc=$?; done",
        '        echo "$rc $(date +%s.%N) $SLURMD_NODENAME $(hostname)" >"$RUN_DIR/node$SLURM_NODEID.exit"',
        '        exit $rc\' node "${TORCHRUN[@]}"',
        "STEP_RC=$?",
        "",
        "# result.json from the ranks' files; one line naming the node and rank that failed first;",
        "# the job exits with that node's exit code.",
        '"$PYTHON" -m nvtutorial.launch.slurm collect "$RUN_DIR" --step-rc "$STEP_RC" --started "$START"',
        "",
    ]
    return "\n".join(lines)


def _program_lines(job: SlurmJob) -> list[str]:
    """The program part of the torchrun command, one ``--set`` per line."""
    words = ['"$RUN_DIR"' if arg == "$RUN_DIR" else shlex.quote(arg) for arg in job.program()]
    lines, current = [], []
    for word in words:
        if word == "--set" and current:
            lines.append("    " + " ".join(current))
            current = []
        current.append(word)
    return lines + ["    " + " ".join(current)]


# After srun, on the first node, the result: collect() in nvtutorial/launch/slurm_result.py (imported above).


# --- submitting and following a job ------------------------------------------------------------------


@dataclasses.dataclass
class JobInfo:
    """A submitted job as Slurm reports it, with the run's result once it has ended."""

    job_id: int
    state: str
    exit_code: int | None
    signal: int | None
    script: Path
    run_dir: Path
    result: RunResult | None = None
    summary: str | None = None
    """The job's one-line ``nvtutorial slurm: ...`` summary (from its output)."""

    @property
    def ok(self) -> bool:
        return self.state == "COMPLETED" and self.exit_code == 0

    @property
    def output(self) -> Path:
        return self.run_dir / f"slurm-{self.job_id}.out"


def available() -> str | None:
    """Why jobs cannot be submitted from here (``sbatch`` missing), or None."""
    missing = [c for c in ("sbatch", "scontrol") if shutil.which(c) is None]
    if missing:
        return f"Slurm's client commands are not installed here ({', '.join(missing)} missing)"
    return None


def job_state(job_id: int) -> dict[str, str] | None:
    """``scontrol show job -o ID`` as a dict (``JobState``, ``ExitCode``, ...), or None once Slurm forgot it."""
    proc = subprocess.run(["scontrol", "show", "job", "-o", str(job_id)], check=False, capture_output=True, text=True)
    if proc.returncode != 0 or "JobId=" not in proc.stdout:
        return None
    return dict(item.split("=", 1) for item in proc.stdout.split() if "=" in item)


def submit(
    path: str | os.PathLike[str],
    *,
    wait: bool = True,
    timeout: float | None = None,
    poll_s: float = 0.2,
    progress: bool = False,
) -> JobInfo:
    """``sbatch`` a written batch script; with ``wait``, follow the job until it ends (see :func:`follow`;
    it polls ``scontrol``, faster than ``sbatch --wait``). ``progress`` prints the job's id once submitted and each
    state it enters (PENDING, RUNNING, COMPLETED...), with the seconds since."""
    path = Path(path).resolve()
    reason = available()
    if reason:
        raise SlurmError(f"{reason}: install them, or copy {path} to a cluster and run sbatch there")
    proc = subprocess.run(["sbatch", "--parsable", str(path)], check=False, capture_output=True, text=True)
    if proc.returncode != 0:
        raise SlurmError(f"sbatch refused {path}: {proc.stderr.strip() or proc.stdout.strip()}")
    job_id = int(proc.stdout.strip().split(";")[0])
    info = JobInfo(job_id=job_id, state="PENDING", exit_code=None, signal=None, script=path, run_dir=path.parent)
    if progress:
        print(f"sbatch: submitted batch job {job_id}", flush=True)
    return follow(info, timeout=timeout, poll_s=poll_s, progress=progress) if wait else info


def latest_line(run_dir: str | os.PathLike[str]) -> str:
    """What a running job said last: the last line of the node log written last (``node0.log: step 12/30 ...``)."""
    logs = sorted(Path(run_dir).glob("node*.log"), key=lambda p: p.stat().st_mtime)
    for log in reversed(logs):
        lines = [ln.strip() for ln in log.read_text(errors="replace").splitlines()[-20:] if ln.strip()]
        if lines:
            return f"{log.name}: {lines[-1][:160]}"
    return "no output yet: the agents meet at the rendezvous, then start their ranks (new processes: import torch)"


def follow(
    info: JobInfo, *, timeout: float | None = None, poll_s: float = 0.2, progress: bool = False, say_s: float = SAY_S
) -> JobInfo:
    """Follow a submitted job until it ends; fill in its state, exit code, result and summary; with ``progress``,
    print each state the job enters, and while it has not ended, at least every ``say_s``, what it is doing.

    A job still running after ``timeout`` seconds is cancelled and :class:`SlurmError` raised.
    """
    start = time.monotonic()
    deadline = None if timeout is None else start + timeout
    seen, said = None, start
    while True:
        fields = job_state(info.job_id)
        if fields is None:
            info.state = "UNKNOWN"  # ended and forgotten (MinJobAge) before we looked
            break
        info.state = fields.get("JobState", "UNKNOWN")
        now = time.monotonic()
        if progress and info.state != seen:
            print(f"job {info.job_id}: {info.state} ({now - start:.1f} s)", flush=True)
            seen, said = info.state, now
        elif progress and info.state not in TERMINAL_STATES and now - said >= say_s:
            what = latest_line(info.run_dir) if info.state == "RUNNING" else "waiting for its nodes"
            print(f"job {info.job_id}: {info.state} ({now - start:.1f} s): {what}", flush=True)
            said = now
        if info.state in TERMINAL_STATES:
            code, _, sig = fields.get("ExitCode", "").partition(":")
            info.exit_code = int(code) if code.isdigit() else None
            info.signal = int(sig) if sig.isdigit() else None
            break
        if deadline is not None and time.monotonic() > deadline:
            subprocess.run(["scancel", str(info.job_id)], check=False, capture_output=True)
            raise SlurmError(f"job {info.job_id} was still {info.state} after {timeout:g} s; it was cancelled")
        time.sleep(poll_s)
    with contextlib.suppress(OSError, ValueError, KeyError, TypeError):
        info.result = RunResult.load(info.run_dir / "result.json")
    with contextlib.suppress(OSError):
        lines = [ln for ln in info.output.read_text(errors="replace").splitlines() if ln.startswith(SUMMARY_PREFIX)]
        info.summary = lines[-1] if lines else None
    return info


# --- a real Slurm on this machine (scripts/slurm-local.sh) ---------------------------------------------

LOCAL_SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "slurm-local.sh"
LOCAL_LIMIT_S = 120.0  # seconds scripts/slurm-local.sh may take to start, or to stop, the local Slurm


def local_unavailable() -> str | None:
    """Why :func:`local_cluster` cannot start a Slurm here, or None."""
    missing = [c for c in ("munged", "slurmctld", "slurmd", "sbatch", "srun", "scontrol") if shutil.which(c) is None]
    if missing:
        return (
            f"Slurm is not installed here ({', '.join(missing)} missing); on Debian or Ubuntu: "
            f"apt-get install -y --no-install-recommends {SLURM_PACKAGES}"
        )
    if not LOCAL_SCRIPT.is_file():
        return f"{LOCAL_SCRIPT} is missing: local_cluster() needs a checkout of the repository"
    return None


def _local_script(action: str, state_dir: str | os.PathLike[str] | None, doing: str | None) -> tuple[int, str, str]:
    """``slurm-local.sh ACTION [STATE_DIR]`` -> (code, stdout, stderr); ``doing`` is said every SAY_S while it runs."""
    cmd = ["bash", str(LOCAL_SCRIPT), action, *([str(state_dir)] if state_dir else [])]
    proc = subprocess.Popen(  # its own process group: a kill reaches a hanging child of the script too
        cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True
    )
    start = time.monotonic()
    while True:
        try:
            out, err = proc.communicate(timeout=SAY_S)
            return proc.returncode, out, err
        except subprocess.TimeoutExpired:
            if time.monotonic() - start > LOCAL_LIMIT_S:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                out, err = proc.communicate()
                return proc.returncode, out, err + f"\n{LOCAL_SCRIPT.name} {action}: killed after {LOCAL_LIMIT_S:g} s"
            if doing:
                print(f"[slurm {time.monotonic() - start:5.1f} s] {doing}", flush=True)


@contextlib.contextmanager
def local_cluster(state_dir: str | os.PathLike[str] | None = None, progress: bool = False) -> Iterator[str]:
    """A real two-node Slurm on this machine for the ``with`` block; yields its ``SLURM_CONF``.

    ``SLURM_CONF`` is set in ``os.environ`` inside the block (sbatch, srun and the jobs read it); every job and daemon
    is stopped at the end, whatever happens in the block. ``progress``: say what it does while it starts and stops.
    """
    reason = local_unavailable()
    if reason:
        raise SlurmError(reason)
    starting = "starting munged, slurmctld and two slurmd; waiting until both nodes are idle" if progress else None
    code, out, err = _local_script("start", state_dir, starting)
    conf = next((ln.split("=", 1)[1] for ln in out.splitlines() if ln.startswith("export SLURM_CONF=")), None)
    stopping = "stopping the local Slurm: its jobs, then its daemons" if progress else None
    if code != 0 or conf is None:
        _local_script("stop", state_dir, stopping)
        raise SlurmError(f"the local Slurm did not start:\n{err.strip()}")
    previous = os.environ.get("SLURM_CONF")
    os.environ["SLURM_CONF"] = conf
    try:
        yield conf
    finally:
        _local_script("stop", state_dir, stopping)
        if previous is None:
            os.environ.pop("SLURM_CONF", None)
        else:
            os.environ["SLURM_CONF"] = previous


# --- the command -------------------------------------------------------------------------------------


def cmd_slurm(args: Any) -> int:
    extra = list(args.args)
    try:
        if args.wait and not args.submit:
            raise SlurmError("--wait follows a submitted job: add --submit")
        if args.submit and available():
            raise SlurmError(f"{available()}: leave out --submit and copy the script to the cluster")
        same = ("nodes", "gpus_per_node", "procs_per_node", "partition", "account", "exclusive", "out", "port")
        job = prepare(
            args.target,
            **{name: getattr(args, name) for name in (*same, "cpus_per_task", "max_restarts")},
            params=params_mod.parse_assignments(args.set),
            env=params_mod.parse_assignments(args.env),
            time_min=args.time,
            script_args=extra,
        )
    except (SlurmError, params_mod.ParamError) as exc:
        print(f"nvtutorial slurm: error: {exc}", file=sys.stderr)
        return 2
    path = job.write()
    print(f"batch script: {path}")
    if not args.submit:
        print(f"submit with:  sbatch {shlex.quote(str(path))}")
        return 0
    try:
        info = submit(path, wait=args.wait)
    except SlurmError as exc:
        print(f"nvtutorial slurm: error: {exc}", file=sys.stderr)
        return 1
    print(f"job {info.job_id} submitted; output: {info.output}")
    if not args.wait:
        return 0
    print(f"job {info.job_id}: {info.state}, exit code {info.exit_code}")
    print(info.summary or f"no summary in {info.output} (the job ended before its last step: {info.state})")
    return 0 if info.ok else 1


def add_command(sub: Any) -> None:
    """``nvtutorial slurm TARGET --nodes N --gpus-per-node G ...``: write (and submit) a batch script."""
    p = sub.add_parser(
        "slurm",
        help="write a multi-node Slurm batch script for a workload or script; --submit it",
        description=(__doc__ or "").splitlines()[0],
    )
    p.add_argument("target", metavar="WORKLOAD_OR_SCRIPT", help="a workload (nvtutorial list) or a .py script")
    p.add_argument("--nodes", type=int, default=2, help="nodes (default 2)")
    p.add_argument("--gpus-per-node", type=int, default=0, help="GPUs per node, one rank each (default 0: CPU, gloo)")
    p.add_argument("--procs-per-node", type=int, default=None, help="ranks per node on CPU (default 1)")
    p.add_argument("--cpus-per-task", type=int, default=None, help="cores per node (default 4 per GPU, or 1 per rank)")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="a workload parameter")
    p.add_argument(
        "--env", action="append", default=[], metavar="KEY=VALUE", help="an environment variable for the ranks"
    )
    p.add_argument("--time", type=int, default=10, metavar="MIN", help="time limit in minutes (default 10)")
    p.add_argument("--partition", help="the Slurm partition (default: the cluster's default)")
    p.add_argument("--account", help="the Slurm account to charge")
    p.add_argument("--exclusive", action="store_true", help="no other job on the nodes (for measurements)")
    p.add_argument("--max-restarts", type=int, default=0, help="torchrun restarts after a failure (default 0)")
    p.add_argument("--port", type=int, default=None, help="rendezvous port (default: derived from the job id)")
    p.add_argument("--out", type=Path, help="run folder (default: a new folder under runs/)")
    p.add_argument("--submit", action="store_true", help="submit the script with sbatch")
    p.add_argument("--wait", action="store_true", help="with --submit: wait for the job and print its summary")
    p.set_defaults(func=cmd_slurm, args=[])
    p.epilog = "A script's own arguments go after --: nvtutorial slurm train.py --nodes 2 -- --lr 0.1"

    class _WithScriptArgs(type(p)):
        """Everything after the first ``--`` is the script's (argparse alone would refuse it)."""

        def parse_known_args(self, args=None, namespace=None):
            args = list(sys.argv[1:] if args is None else args)
            rest = args[args.index("--") + 1 :] if "--" in args else []
            known, unknown = super().parse_known_args(
                args[: len(args) - len(rest) - (1 if "--" in args else 0)], namespace
            )
            known.args = rest
            return known, unknown

    p.__class__ = _WithScriptArgs


def _main(argv: list[str] | None = None) -> int:
    """``python -m nvtutorial.launch.slurm collect RUN_DIR --step-rc N --started T``: the job's last step."""
    import argparse

    parser = argparse.ArgumentParser(prog="python -m nvtutorial.launch.slurm")
    sub = parser.add_subparsers(dest="command", required=True)
    c = sub.add_parser("collect", help="result.json and a one-line summary for a finished job")
    c.add_argument("run_dir", type=Path)
    c.add_argument("--step-rc", type=int, default=0)
    c.add_argument("--started", type=float, default=None)
    args = parser.parse_args(argv)
    return collect(args.run_dir, args.step_rc, args.started)[2]


if __name__ == "__main__":
    sys.exit(_main())
