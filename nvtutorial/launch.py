"""Launch a workload as a real multi-process run and get a typed result back.

Used from every notebook and by ``nvtutorial run``. The run is
``python -m torch.distributed.run --standalone --nproc-per-node N -m nvtutorial.workloads.X``
in a subprocess this module owns: no fork of the notebook kernel, no pickling of cell code,
and the kernel never initialises CUDA. Rank output streams into the cell while the run goes
on; rank 0's progress lines drive one ``tqdm.auto`` bar.

When a rank fails, when the deadline passes, or when the caller is interrupted, every process
of the run (the torchrun agent, its workers, which torchrun puts in sessions of their own, and
their children) is ended within a few seconds, and the caller gets an error that names the
failed rank, its exception and the last lines of its log.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import secrets
import signal
import subprocess
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

import psutil

from . import nvml, params as params_mod, workloads
from .machine import hardware
from .progress import RunProgress
from .results import EnvInfo, RunResult, read_json
from .runtime import PROGRESS_PREFIX

Backend = Literal["auto", "nccl", "gloo"]
Output = Literal["rank0", "all", "none"]

KILL_GRACE_S = 3.0
"""After SIGTERM, survivors get this long before SIGKILL (the whole tree ends within 5 s)."""
FAILURE_GRACE_S = 1.5
"""After a rank reports an error, torchrun gets this long to stop the others itself."""
LOG_TAIL_LINES = 30


class LaunchError(ValueError):
    """Bad input, found before anything was launched. The message names the accepted values."""


class RunFailed(RuntimeError):
    """A run ended badly. ``rank``, ``exc_type`` and ``log_tail`` say where and why."""

    def __init__(self, message: str, result: RunResult, rank: int | None = None,
                 exc_type: str | None = None, traceback: str | None = None) -> None:
        super().__init__(message)
        self.result = result
        self.rank = rank
        self.exc_type = exc_type
        self.traceback = traceback

    @property
    def log_tail(self) -> list[str]:
        return self.result.log_tail


class RunTimedOut(RunFailed):
    """The deadline passed; the log tails hold every rank's Python stack at that moment."""


@dataclasses.dataclass(frozen=True)
class LaunchSpec:
    """A validated run, ready to start (see :func:`prepare`)."""

    workload: str
    params: Any
    nproc: int
    backend: Literal["nccl", "gloo"]
    timeout: float | None
    env: Mapping[str, str]
    run_dir: Path
    output: Output
    pg_timeout: float | None

    def command(self) -> list[str]:
        cmd = [
            sys.executable, "-m", "torch.distributed.run", "--standalone",
            "--nproc-per-node", str(self.nproc), "--monitor-interval", "0.2",
            "-m", f"nvtutorial.workloads.{self.workload}",
            "--out", str(self.run_dir), "--backend", self.backend, "--capture",
        ]
        if self.pg_timeout is not None:
            cmd += ["--pg-timeout", str(self.pg_timeout)]
        for key, value in params_mod.to_strings(self.params).items():
            cmd += ["--set", f"{key}={value}"]
        return cmd


def runs_root() -> Path:
    """Where run folders go: ``$NVTUTORIAL_RUNS_DIR`` or ``./runs``."""
    return Path(os.environ.get("NVTUTORIAL_RUNS_DIR", "runs"))


def resolve_backend(backend: str, nproc: int) -> Literal["nccl", "gloo"]:
    """``auto`` is nccl when ``nproc`` GPUs are visible and torch has CUDA, else gloo on CPU."""
    if backend not in ("auto", "nccl", "gloo"):
        raise LaunchError(f"unknown backend {backend!r}; use auto, nccl or gloo")
    if backend == "gloo":
        return "gloo"
    import torch  # importing torch does not initialise CUDA

    usable = hardware.gpu_count() if torch.version.cuda else 0
    if backend == "auto":
        return "nccl" if usable >= nproc else "gloo"
    if usable == 0:
        why = "this torch is a CPU-only build" if not torch.version.cuda else "no GPU is visible (NVML sees none)"
        raise LaunchError(f"backend nccl needs GPUs, but {why}; use --backend gloo or auto")
    if usable < nproc:
        raise LaunchError(f"backend nccl with {nproc} processes needs {nproc} GPUs, but {usable} are visible; "
                          f"use --nproc {usable} or --backend gloo")
    return "nccl"


def prepare(workload: str, *, nproc: int = 2, backend: Backend = "auto", params: Any = None,
            timeout: float | None = 600.0, env: Mapping[str, Any] | None = None, out: str | os.PathLike[str] | None = None,
            output: Output = "rank0", pg_timeout: float | None = None) -> LaunchSpec:
    """Check everything about a run before it starts; raises :class:`LaunchError` on bad input."""
    try:
        module = workloads.load(workload)
        parsed = params_mod.build(module.Params, params)
    except (workloads.UnknownWorkload, params_mod.ParamError) as exc:
        raise LaunchError(f"{workload}: {exc}" if isinstance(exc, params_mod.ParamError) else str(exc)) from None
    if not isinstance(nproc, int) or isinstance(nproc, bool) or nproc < 1:
        raise LaunchError(f"nproc={nproc!r}: the number of processes must be a whole number of at least 1")
    if timeout is not None and timeout <= 0:
        raise LaunchError(f"timeout={timeout!r}: give a positive number of seconds, or None for no deadline")
    if pg_timeout is not None and pg_timeout <= 0:
        raise LaunchError(f"pg_timeout={pg_timeout!r}: give a positive number of seconds")
    if output not in ("rank0", "all", "none"):
        raise LaunchError(f"output={output!r}: use rank0, all or none")
    overrides = {}
    for key, value in (env or {}).items():
        if not key or "=" in key:
            raise LaunchError(f"bad environment variable name {key!r}")
        overrides[str(key)] = str(value)
    resolved = resolve_backend(backend, nproc)
    if out is None:
        stamp = time.strftime("%Y%m%d-%H%M%S")
        run_dir = runs_root() / f"{workload}-{stamp}-{secrets.token_hex(3)}"
    else:
        run_dir = Path(out)
    return LaunchSpec(workload=workload, params=parsed, nproc=nproc, backend=resolved, timeout=timeout,
                      env=overrides, run_dir=run_dir, output=output, pg_timeout=pg_timeout)


def run(workload: str, *, nproc: int = 2, backend: Backend = "auto", params: Any = None,
        timeout: float | None = 600.0, env: Mapping[str, Any] | None = None, out: str | os.PathLike[str] | None = None,
        output: Output = "rank0", pg_timeout: float | None = None, check: bool = True) -> RunResult:
    """Run ``workload`` on ``nproc`` processes and return its :class:`RunResult`.

    ``params``: a dict (or the workload's ``Params``); ``env``: variables set for this run only
    (the rest of the environment passes through); ``output``: which ranks' lines to show;
    ``pg_timeout``: the process group's collective timeout in seconds. With ``check`` (the
    default) a failed run raises :class:`RunFailed`; otherwise the result carries the error.
    """
    spec = prepare(workload, nproc=nproc, backend=backend, params=params, timeout=timeout, env=env,
                   out=out, output=output, pg_timeout=pg_timeout)
    return execute(spec, check=check)


def child_environment(spec: LaunchSpec) -> dict[str, str]:
    """The parent's environment, the run's overrides, and what the workers need to import us."""
    env = dict(os.environ)
    package_root = str(Path(__file__).resolve().parent.parent)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (package_root, env.get("PYTHONPATH", "")) if p)
    env["PYTHONUNBUFFERED"] = "1"
    env["NVTUTORIAL_LAUNCHER_PID"] = str(os.getpid())  # workers end themselves if we die
    env.setdefault("OMP_NUM_THREADS", str(max(1, (os.cpu_count() or 1) // spec.nproc)))
    env.update(spec.env)
    return env


class _LogTail:
    """Follows ``rank{R}.log`` files as they grow and yields complete lines."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.offset = 0
        self.partial = ""

    def read(self) -> list[str]:
        try:
            with open(self.path, errors="replace") as fh:
                fh.seek(self.offset)
                data = fh.read()
                self.offset = fh.tell()
        except FileNotFoundError:
            return []
        data = self.partial + data
        lines = data.split("\n")
        self.partial = lines.pop()
        return lines


def _worker_processes(spec: LaunchSpec, started_at: float) -> list[psutil.Process]:
    """Workers that wrote a pid file, checked to be the processes this run started."""
    procs = []
    for pid_file in spec.run_dir.glob("rank*.pid"):
        try:
            proc = psutil.Process(int(pid_file.read_text().strip()))
            if proc.create_time() >= started_at - 1:
                procs.append(proc)
        except (ValueError, psutil.Error, OSError):
            continue
    return procs


def _tree(agent: psutil.Process | None, workers: list[psutil.Process]) -> list[psutil.Process]:
    found: dict[int, psutil.Process] = {}
    for root in ([agent] if agent else []) + workers:
        try:
            for p in [root, *root.children(recursive=True)]:
                found[p.pid] = p
        except psutil.Error:
            continue
    return list(found.values())


def _end_tree(procs: list[psutil.Process]) -> None:
    """SIGTERM every process, SIGKILL those alive after :data:`KILL_GRACE_S`."""
    for p in procs:
        try:
            p.terminate()
        except psutil.Error:
            pass
    _, alive = psutil.wait_procs(procs, timeout=KILL_GRACE_S)
    for p in alive:
        try:
            p.kill()
        except psutil.Error:
            pass
    psutil.wait_procs(alive, timeout=1.0)


def execute(spec: LaunchSpec, check: bool = True) -> RunResult:
    """Start a prepared run, follow it to the end, collect and save its result."""
    spec.run_dir.mkdir(parents=True, exist_ok=True)
    for stale in list(spec.run_dir.glob("rank*.*")) + [spec.run_dir / "result.json"]:
        stale.unlink(missing_ok=True)
    agent_log_path = spec.run_dir / "agent.log"
    t0 = time.perf_counter()
    started_at = time.time()
    deadline = None if spec.timeout is None else t0 + spec.timeout
    tails = {r: _LogTail(spec.run_dir / f"rank{r}.log") for r in range(spec.nproc)}
    shown = set(range(spec.nproc)) if spec.output == "all" else ({0} if spec.output == "rank0" else set())
    progress = RunProgress()
    first_output: float | None = None
    failure_seen: float | None = None
    timed_out = interrupted = terminated = False
    procs: list[psutil.Process] = []

    with open(agent_log_path, "w") as agent_log:
        proc = subprocess.Popen(spec.command(), stdout=agent_log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                env=child_environment(spec), start_new_session=True)
    try:
        agent = psutil.Process(proc.pid)
    except psutil.Error:
        agent = None
    previous_sigterm = _raise_on_sigterm()

    def pump() -> None:
        nonlocal first_output
        for rank, tail in tails.items():
            for line in tail.read():
                if first_output is None:
                    first_output = time.perf_counter() - t0
                if line.startswith(PROGRESS_PREFIX):
                    try:
                        progress.update(json.loads(line[len(PROGRESS_PREFIX):]))
                    except (ValueError, TypeError):
                        pass
                elif rank in shown:
                    print(f"[rank{rank}] {line}", flush=True)

    try:
        while proc.poll() is None:
            pump()
            procs = _tree(agent, _worker_processes(spec, started_at)) or procs
            now = time.perf_counter()
            if failure_seen is None and any(spec.run_dir.glob("rank*.error.json")):
                failure_seen = now
            if failure_seen is not None and now - failure_seen > FAILURE_GRACE_S:
                _dump_stacks(spec, started_at)  # where the surviving ranks were when one failed
                break
            if deadline is not None and now > deadline:
                timed_out = True
                _dump_stacks(spec, started_at)
                break
            time.sleep(0.05)
    except KeyboardInterrupt:
        interrupted = True
    except _Terminated:
        interrupted = terminated = True
    finally:
        if proc.poll() is None or interrupted or timed_out or failure_seen is not None:
            _end_tree(_tree(agent, _worker_processes(spec, started_at)) + [p for p in procs if p.is_running()])
        proc.wait()
        if previous_sigterm is not None:
            signal.signal(signal.SIGTERM, previous_sigterm)
        pump()
        failed = timed_out or failure_seen is not None or proc.returncode != 0
        progress.close("interrupted" if interrupted else "failed" if failed else "done")
    wall = time.perf_counter() - t0
    result = _collect(spec, proc.returncode, wall, first_output)
    if interrupted:
        result.error = {"type": "SIGTERM" if terminated else "KeyboardInterrupt",
                        "message": "interrupted by the caller; every process of the run was ended"}
        result.save()
        print(f"interrupted: every process of {spec.workload} was ended ({spec.run_dir})", file=sys.stderr)
        if terminated:
            raise SystemExit(128 + signal.SIGTERM)
        raise KeyboardInterrupt
    failure = _diagnose(spec, result, timed_out)
    result.save()
    if failure is not None and check:
        raise failure
    return result


class _Terminated(BaseException):
    """SIGTERM arrived while a run was in flight (a job scheduler, ``timeout``, ``kill``)."""


def _raise_on_sigterm() -> Any:
    """While a run is in flight, turn SIGTERM into an exception so the process tree is ended first."""
    import threading

    if threading.current_thread() is not threading.main_thread():
        return None

    def handler(signum: int, frame: Any) -> None:
        raise _Terminated()

    return signal.signal(signal.SIGTERM, handler)


def _dump_stacks(spec: LaunchSpec, started_at: float) -> None:
    """Ask every worker to print its Python stacks into its log (faulthandler on SIGUSR1)."""
    workers = _worker_processes(spec, started_at)
    for p in workers:
        try:
            p.send_signal(signal.SIGUSR1)
        except psutil.Error:
            pass
    if workers:
        time.sleep(0.5)


def _tail(path: Path, n: int = LOG_TAIL_LINES) -> list[str]:
    try:
        return path.read_text(errors="replace").splitlines()[-n:]
    except FileNotFoundError:
        return []


_STACK_HEADER = re.compile(r"^(Current thread|Thread) 0x[0-9a-f]+ ")


def _stack_section(path: Path, before: int = 4, limit: int = 80) -> list[str]:
    """A log's last lines from just before faulthandler's stack dump (every thread) to the end."""
    lines = _tail(path, 400)
    starts = [i for i, line in enumerate(lines) if _STACK_HEADER.match(line)]
    if not starts:
        return lines[-12:]
    # the dump is the log's end: its first thread header is the first of the last run of headers
    first = starts[-1]
    for i in reversed(starts[:-1]):
        if all(not ln or ln.startswith("  File ") or _STACK_HEADER.match(ln) for ln in lines[i:first]):
            first = i
        else:
            break
    return lines[max(0, first - before):][:limit]


def _collect(spec: LaunchSpec, returncode: int, wall: float, first_output: float | None) -> RunResult:
    ranks: list[dict[str, Any]] = []
    envs: list[dict[str, Any]] = []
    for r in range(spec.nproc):
        path = spec.run_dir / f"rank{r}.json"
        if path.exists():
            data = read_json(path)
            ranks.append(data.get("metrics", {}))
            envs.append(data.get("env", {}))
    env = None
    if envs and len(envs) == spec.nproc:
        block = dict(envs[0])
        block["device_names"] = tuple(e.get("device", "?") for e in envs)
        if spec.backend == "nccl":
            block["driver"] = hardware.driver_version()
            block["link"] = nvml.link_label() if spec.nproc > 1 else None
        env = EnvInfo.from_dict(block)
    log_files = {r: spec.run_dir / f"rank{r}.log" for r in range(spec.nproc)}
    tail = []
    for r in range(spec.nproc):
        tail += [f"[rank{r}] {line}" for line in _tail(log_files[r], 10)]
    return RunResult(
        workload=spec.workload, params=dataclasses.asdict(spec.params), returncode=returncode, wall_s=wall,
        first_output_s=first_output, env=env, ranks=ranks if len(ranks) == spec.nproc else [], run_dir=spec.run_dir,
        log_files=log_files, log_tail=tail, overrides=dict(spec.env),
    )


def _first_error(spec: LaunchSpec) -> dict[str, Any] | None:
    errors = []
    for path in spec.run_dir.glob("rank*.error.json"):
        try:
            errors.append(read_json(path))
        except (OSError, ValueError):
            continue
    return min(errors, key=lambda e: e.get("time", 0.0)) if errors else None


CRASH_SIGNALS = {signal.SIGABRT, signal.SIGSEGV, signal.SIGBUS, signal.SIGFPE, signal.SIGILL}
"""Signals that end a rank on their own (native crash, NCCL's watchdog); SIGTERM/SIGKILL are cleanup."""
_AGENT_FAILURE = re.compile(r"^\s*rank\s*:\s*(\d+) \(local_rank: \d+\)\s*\n\s*exitcode\s*:\s*(-?\d+)", re.M)


def _signalled_ranks(spec: LaunchSpec) -> list[tuple[int, signal.Signals]]:
    """Ranks that torchrun reports as killed by a crash signal, from its failure summary."""
    try:
        text = (spec.run_dir / "agent.log").read_text(errors="replace")
    except FileNotFoundError:
        return []
    found = {}
    for rank, code in _AGENT_FAILURE.findall(text):
        if int(code) < 0 and -int(code) in {int(s) for s in CRASH_SIGNALS}:
            found[int(rank)] = signal.Signals(-int(code))
    return sorted(found.items())


def _diagnose(spec: LaunchSpec, result: RunResult, timed_out: bool) -> RunFailed | None:
    """Turn a failed run into an error naming the rank, its exception and its last log lines."""
    if timed_out:
        result.returncode = result.returncode or -int(signal.SIGKILL)
        lines = [f"{spec.workload} did not finish within its {spec.timeout:g} s deadline; every process of the run was ended.",
                 "Each rank's last lines (a Python stack shows where it was waiting):"]
        for r, path in result.log_files.items():
            lines.append(f"--- rank {r} ({path}) ---")
            lines += _stack_section(path) or ["(no output)"]
        result.log_tail = lines[2:]
        result.error = {"type": "Timeout", "message": lines[0]}
        return RunTimedOut("\n".join(lines), result)
    error = _first_error(spec)
    if error is None and result.returncode == 0 and result.ranks:
        return None
    reported = {int(p.name[4:].split(".")[0]) for p in spec.run_dir.glob("rank*.error.json")}
    signalled = [(rank, sig) for rank, sig in _signalled_ranks(spec) if rank not in reported]
    if signalled:
        # A rank that died of a signal wrote no traceback; the others' errors are its consequence.
        rank, sig = signalled[0]
        log = result.log_files.get(rank)
        tail = _tail(log) if log else []
        after = f"\n(then rank {error['rank']} failed: {error['type']}: {error['message'][:200]})" if error else ""
        message = (f"rank {rank} was killed by {sig.name} (no Python exception: a crash in native code, "
                   f"or NCCL's watchdog ending the process){after}\n"
                   f"--- last lines of rank {rank}'s log ({log}) ---\n" + "\n".join(tail))
        result.log_tail = tail
        result.error = {"rank": rank, "type": sig.name, "message": message.splitlines()[0]}
        result.returncode = result.returncode or 1
        return RunFailed(message, result, rank=rank, exc_type=sig.name)
    if error is not None:
        rank = int(error["rank"])
        log = result.log_files.get(rank)
        tail = _tail(log) if log else []
        message = (f"rank {rank} failed: {error['type']}: {error['message']}\n"
                   f"--- last lines of rank {rank}'s log ({log}) ---\n" + "\n".join(tail))
        result.log_tail = tail
        result.error = {"rank": rank, "type": error["type"], "message": error["message"], "traceback": error["traceback"]}
        if result.returncode == 0:
            result.returncode = 1
        return RunFailed(message, result, rank=rank, exc_type=error["type"], traceback=error["traceback"])
    agent_tail = _tail(spec.run_dir / "agent.log")
    message = (f"{spec.workload} exited with code {result.returncode} and no rank reported an error "
               f"(a crash before the workload started, or a rank killed by a signal).\n"
               f"--- last lines of torchrun's output ({spec.run_dir / 'agent.log'}) ---\n" + "\n".join(agent_tail))
    result.log_tail = agent_tail
    result.error = {"type": "ExitCode", "message": message.splitlines()[0]}
    if result.returncode == 0:
        result.returncode = 1
    return RunFailed(message, result)
