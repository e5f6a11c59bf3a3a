"""The worker side of every workload: process group, device, the one timer, progress lines and result files.

A workload module defines a frozen dataclass ``Params`` and ``run(ctx, params) -> dict`` and
ends with ``if __name__ == "__main__": runtime.main(run, Params)``. It then runs under the
launcher (:mod:`nvtutorial.launch`) or straight from a terminal or a cluster job::

    torchrun --standalone --nproc-per-node 2 -m nvtutorial.workloads.selftest --set mode=ok

Each rank writes ``rank{R}.json`` (its metrics and environment) to the run folder; a rank
that raises writes ``rank{R}.error.json`` with its traceback instead, then exits non-zero.
A plain script gets the same through :mod:`nvtutorial.launch.runtime_script`; any code on a rank
adds to its metrics with :func:`save_metrics`, which does nothing outside the launcher.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import datetime
import errno
import faulthandler
import json
import os
import platform
import signal
import socket
import sys
import threading
import time
import traceback
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, NoReturn

from nvtutorial import params as params_mod
from nvtutorial.results import SCHEMA_VERSION, _json_default, write_json_atomic

PROGRESS_PREFIX = "@@nvtutorial "
"""Rank 0 prints ``@@nvtutorial {json}`` lines; the launcher turns them into one progress bar."""


@dataclasses.dataclass
class Context:
    """What a workload's ``run`` gets besides its parameters."""

    rank: int
    local_rank: int
    world_size: int
    backend: str
    device: Any  # torch.device
    run_dir: Path

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @property
    def is_gpu(self) -> bool:
        return self.device.type == "cuda"

    def progress(self, n: int, total: int, desc: str = "", **info: Any) -> None:
        """Report progress (rank 0 only); ``info`` values appear next to the bar."""
        if self.rank != 0:
            return
        event = {"event": "progress", "n": n, "total": total, "desc": desc, **info}
        print(PROGRESS_PREFIX + json.dumps(event, default=str), flush=True)

    def sync(self) -> None:
        """Wait for queued GPU work (no-op on CPU): call before reading a host clock."""
        if self.is_gpu:
            import torch

            torch.cuda.synchronize(self.device)

    def timer(self, host: bool = False) -> Timer:
        """A :class:`Timer` on this rank's device (``host=True``: the host clock, synchronised)."""
        return Timer(self.device, host=host)

    def time_calls(self, op: Callable[[], Any], iters: int = 1) -> float:
        """Seconds per call of ``op`` over ``iters`` back-to-back calls: CUDA events around them on a
        GPU (queued work before is not counted), the host clock on the CPU."""
        return time_calls(op, iters, device=self.device)

    def barrier(self) -> None:
        import torch.distributed as dist

        if self.is_gpu:
            dist.barrier(device_ids=[self.device.index])
        else:
            dist.barrier()


class Timer:
    """Intervals timed on one clock: the course's one timing primitive, for every workload.

    On a GPU (``device`` of type ``cuda``, or a ``stream``) each interval is a pair of CUDA events
    recorded on the stream: what the GPU spent between :meth:`start` and :meth:`stop`, work
    queued before ``start`` not counted, nothing synchronised until :meth:`seconds`. Otherwise
    the host clock (``time.perf_counter``); with ``host=True`` on a GPU the device is synchronised
    before reading it at both ends (a wall-clock time that includes the queued work's completion).
    With ``device=None`` the host clock is read as it is, nothing synchronised::

        timer = ctx.timer()
        for _ in range(steps):
            with timer:
                step()
        median_s = statistics.median(timer.seconds())
    """

    def __init__(self, device: Any = None, *, host: bool = False, stream: Any = None) -> None:
        self.device = device
        self.stream = stream
        self.events = stream is not None or (not host and getattr(device, "type", None) == "cuda")
        self.pairs: list[list[Any]] = []

    def _sync(self) -> None:
        if getattr(self.device, "type", None) == "cuda":
            import torch

            torch.cuda.synchronize(self.device)

    def _mark(self) -> Any:
        if self.events:
            import torch

            event = torch.cuda.Event(enable_timing=True)
            event.record(self.stream)
            return event
        self._sync()
        return time.perf_counter()

    def start(self) -> None:
        self.pairs.append([self._mark(), None])

    def stop(self) -> None:
        self.pairs[-1][1] = self._mark()

    def __enter__(self) -> Timer:
        self.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    def seconds(self) -> list[float]:
        """Every interval so far, in seconds (on a GPU this waits for the last one to end)."""
        if self.events:
            for _, end in self.pairs:
                end.synchronize()
            return [start.elapsed_time(end) / 1e3 for start, end in self.pairs]
        return [end - start for start, end in self.pairs]


def time_calls(op: Callable[[], Any], iters: int = 1, *, device: Any = None, stream: Any = None) -> float:
    """Seconds per call of ``op`` over ``iters`` back-to-back calls, timed by one :class:`Timer`
    interval (CUDA events on a GPU device or a stream, the host clock otherwise)."""
    timer = Timer(device, stream=stream)
    with timer:
        for _ in range(iters):
            op()
    return timer.seconds()[0] / iters


def environment(ctx: Context) -> dict[str, Any]:
    """This rank's environment block (host, backend, versions, device name, nodes)."""
    return environment_block(ctx.backend, ctx.world_size, ctx.device if ctx.is_gpu else None)


def environment_block(backend: str, world_size: int, gpu: Any = None) -> dict[str, Any]:
    """The environment block of ``rank{R}.json``; ``gpu`` is this rank's CUDA device, or None on the CPU."""
    import torch
    import torch.cuda.nccl  # loaded by torch already; named so that torch.cuda.nccl is known

    nccl = None
    if gpu is not None:
        with_version = torch.cuda.nccl.version()
        nccl = ".".join(map(str, with_version)) if isinstance(with_version, tuple) else str(with_version)
    return {
        "host": socket.gethostname(),
        "backend": backend,
        "world_size": world_size,
        "nnodes": int(os.environ.get("GROUP_WORLD_SIZE", "1")),  # torchrun's number of agents (nodes)
        "device": torch.cuda.get_device_name(gpu)
        if gpu is not None
        else f"CPU ({platform.processor() or platform.machine()})",
        "device_uuid": str(getattr(torch.cuda.get_device_properties(gpu), "uuid", "") or "") if gpu is not None else "",
        "torch": torch.__version__.split("+")[0],
        "cuda": torch.version.cuda,
        "nccl": nccl,
        "python": platform.python_version(),
    }


def _parser(name: str, params_cls: type) -> argparse.ArgumentParser:
    lines = [
        f"  {n} ({t}, default {d if d is not dataclasses.MISSING else 'required'})"
        for n, t, d in params_mod.describe(params_cls)
    ]
    parser = argparse.ArgumentParser(
        prog=f"torchrun --standalone --nproc-per-node N -m {name}",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="parameters:\n" + "\n".join(lines),
    )
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="a workload parameter")
    parser.add_argument("--out", type=Path, help="folder for rank{R}.json (default: runs/<workload>-<run id>)")
    parser.add_argument("--backend", choices=("auto", "nccl", "gloo"), default="auto")
    parser.add_argument("--pg-timeout", type=float, default=None, help="process-group timeout in seconds")
    parser.add_argument(
        "--capture", action="store_true", help="write this rank's output to RUN_DIR/rank{R}.log (the launcher sets it)"
    )
    return parser


def _capture_output(path: Path) -> None:
    """Send this process's stdout and stderr (file descriptors included) to ``path``."""
    sys.stdout.flush()
    sys.stderr.flush()
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)
    sys.stdout.reconfigure(line_buffering=True)  # type: ignore[union-attr]
    sys.stderr.reconfigure(line_buffering=True)  # type: ignore[union-attr]


def _workload_name(run: Callable[..., Any]) -> str:
    declared = getattr(sys.modules.get(run.__module__), "NAME", None)  # a chapter's workload declares its name
    if isinstance(declared, str):
        return declared
    module = run.__module__
    if module == "__main__":
        spec = getattr(sys.modules["__main__"], "__spec__", None)
        module = spec.name if spec else Path(sys.argv[0]).stem
    return module


_writing = threading.Lock()
"""Held while this rank writes a result file: the launcher watch waits for it before ending the process."""

_metrics: dict[str, Any] | None = None
"""What :func:`save_metrics` collected on this rank; None where nothing will write ``rank{R}.json``."""


def save_metrics(metrics: Mapping[str, Any]) -> None:
    """Add ``metrics`` to this rank's results (``rank{R}.json``, then ``RunResult.ranks[R]``).

    Under the launcher (a workload, or a script run with ``nvtutorial run my_script.py``) the
    values merge into this rank's metrics, later calls winning; anywhere else (a plain
    ``torchrun my_script.py``) it does nothing, so a lesson file runs with or without the course.
    """
    if _metrics is None:
        return
    if not isinstance(metrics, Mapping):
        raise TypeError(f"save_metrics takes a dict, not {type(metrics).__qualname__}")
    json.dumps(dict(metrics), default=_json_default)  # a value JSON cannot hold fails here, at the call
    _metrics.update(metrics)


def progress(n: int, total: int, desc: str = "", **info: Any) -> None:
    """Say how far a plain script has got (call it on one rank): under the launcher a progress event, which a
    notebook draws as a bar named ``desc`` with ``info`` beside it; anywhere else (a plain ``torchrun``) one
    readable line, ``desc n/total: key=value, ...``."""
    if _metrics is not None:
        event = {"event": "progress", "n": n, "total": total, "desc": desc, **info}
        print(PROGRESS_PREFIX + json.dumps(event, default=_json_default), flush=True)
        return
    values = ", ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}" for k, v in info.items())
    print(f"{desc} {n}/{total}" + (f": {values}" if values else ""), flush=True)


def start_worker(run_dir: Path, rank: int, capture: bool) -> None:
    """Set this rank up for the launcher: log capture, stack dumps on SIGUSR1, pid file, the launcher watch."""
    global _metrics
    run_dir.mkdir(parents=True, exist_ok=True)
    if capture:
        _capture_output(run_dir / f"rank{rank}.log")
    # `kill -USR1 <pid>` prints every thread's Python stack into the log: how the launcher
    # shows where a hanging rank is stuck.
    faulthandler.register(signal.SIGUSR1, all_threads=True)
    # whole or absent (a temp file renamed): the launcher, the labs and the tests read it while the run goes on
    partial = run_dir / f".rank{rank}.pid.tmp"
    partial.write_text(str(os.getpid()))
    partial.replace(run_dir / f"rank{rank}.pid")
    if os.environ.get("NVTUTORIAL_LAUNCHER_PID"):
        _exit_with_launcher(int(os.environ["NVTUTORIAL_LAUNCHER_PID"]))
    _metrics = {}


def mark_ready(run_dir: Path, rank: int) -> None:
    """Tell the launcher this rank is up (imports done, about to run): its deadline counts from here."""
    (run_dir / f"rank{rank}.ready").touch()


def write_result(path: Path, data: Any) -> None:
    """Write one of this rank's result files atomically, never cut short by the launcher watch or SIGTERM.

    torchrun ends the other ranks with SIGTERM as soon as one fails: a SIGTERM that arrives
    while the file is written takes effect once it is complete.
    """
    pending: list[int] = []
    deferring = threading.current_thread() is threading.main_thread()
    if deferring:
        previous = signal.signal(signal.SIGTERM, lambda signum, frame: pending.append(signum))
    try:
        with _writing:
            write_json_atomic(path, data)
    finally:
        if deferring:
            signal.signal(signal.SIGTERM, signal.SIG_DFL if previous is None else previous)
            if pending:
                os.kill(os.getpid(), signal.SIGTERM)


def rank_payload(
    workload: str,
    rank: int,
    wall_s: float,
    params: dict[str, Any],
    env: dict[str, Any],
    metrics: Mapping[str, Any] | None,
) -> dict[str, Any]:
    """The content of ``rank{R}.json``: what :func:`save_metrics` collected, then ``metrics`` over it."""
    node = os.environ.get("NVTUTORIAL_NODE")
    return {
        "schema_version": SCHEMA_VERSION,
        "workload": workload,
        "rank": rank,
        "node": int(node) if node else None,
        "pid": os.getpid(),
        "wall_s": wall_s,
        "params": params,
        "env": env,
        "metrics": {**(_metrics or {}), **(metrics or {})},
    }


def report_failure(run_dir: Path, rank: int, exc: BaseException, trace: str | None = None) -> NoReturn:
    """Write ``rank{R}.error.json`` (type, message, traceback; the rank's latest failure) and
    ``failures/pid{P}.json`` (the same, with the attempt, kept for each process: torchrun's agents name a failed rank
    by its pid), print the traceback and end the process."""
    trace = trace or "".join(traceback.format_exception(exc))
    path = run_dir / f"rank{rank}.error.json"
    record = {
        "schema_version": SCHEMA_VERSION,
        "rank": rank,
        "pid": os.getpid(),
        "restart": int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")),
        "time": time.time(),
        "type": type(exc).__qualname__,
        "message": str(exc),
        "traceback": trace,
    }
    try:
        write_result(path, record)
        (run_dir / "failures").mkdir(exist_ok=True)
        write_result(run_dir / "failures" / f"pid{os.getpid()}.json", record)
    except OSError as write_error:  # a full disk or a deleted run folder: the log is all that is left
        trace += f"\n(could not write {path}: {write_error})\n"
    with contextlib.suppress(OSError, ValueError):
        sys.stderr.write(trace)
        sys.stdout.flush()
        sys.stderr.flush()
    # Skip interpreter teardown: a process group whose peer died can hang in its destructor.
    os._exit(1)


def main(run: Callable[[Context, Any], Any], params_cls: type, argv: list[str] | None = None) -> None:
    """Entry point of a workload process: parse, set up, ``run``, write results, tear down."""
    name = _workload_name(run)
    args = _parser(name, params_cls).parse_args(argv)
    rank = int(os.environ.get("RANK", "0"))
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    world_size = int(os.environ.get("WORLD_SIZE", "1"))
    run_id = os.environ.get("TORCHELASTIC_RUN_ID", datetime.datetime.now().strftime("%Y%m%d-%H%M%S"))
    run_dir = args.out or Path("runs") / f"{name.rsplit('.', 1)[-1]}-{run_id}"
    start_worker(run_dir, rank, args.capture)

    started = time.perf_counter()
    try:
        params = params_mod.build(params_cls, params_mod.parse_assignments(args.set))
        ctx = _init(rank, local_rank, world_size, args.backend, args.pg_timeout, run_dir)
        mark_ready(run_dir, rank)
        returned = run(ctx, params)
        if returned is None or isinstance(returned, Mapping):
            metrics: Mapping[str, Any] = returned or {}
        elif dataclasses.is_dataclass(returned) and not isinstance(returned, type):  # a typed result (its Rank)
            metrics = dataclasses.asdict(returned)
        else:
            raise TypeError(f"{name}'s run() returned a {type(returned).__qualname__}: return its schema's Rank")
        payload = rank_payload(
            name, rank, time.perf_counter() - started, dataclasses.asdict(params), environment(ctx), metrics
        )
        write_result(run_dir / f"rank{rank}.json", payload)
        ctx.barrier()
        import torch.distributed as dist

        dist.destroy_process_group()
    except BaseException as exc:  # report every failure, KeyboardInterrupt and SystemExit included
        if isinstance(exc, SystemExit) and not exc.code:
            raise
        report_failure(run_dir, rank, exc)
    if rank == 0 and not args.capture:
        print(f"results in {run_dir}/rank*.json")


def _exit_with_launcher(pid: int, interval: float = 1.0) -> None:
    """End this worker when the launching process is gone (a notebook kernel restarted or killed).

    torchrun puts workers in sessions of their own, so nothing else would stop them.
    """
    born = _start_time(pid)

    def gone() -> bool:
        # a dead launcher may linger as a zombie where nothing reaps orphans: that counts as gone;
        # so does a new process that got the launcher's pid
        return born is None or _start_time(pid) != born

    def watch() -> None:
        while not gone():
            time.sleep(interval)
        _writing.acquire(timeout=10)  # let a result file being written be finished first
        with contextlib.suppress(OSError, ValueError):
            print(f"the launcher (pid {pid}) is gone: ending this worker", file=sys.stderr, flush=True)
        os._exit(1)

    threading.Thread(target=watch, name="nvtutorial-launcher-watch", daemon=True).start()


def _start_time(pid: int) -> str | None:
    """When process ``pid`` started (an opaque token), or None when it is gone or a zombie."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            fields = fh.read().rsplit(")", 1)[1].split()
        return None if fields[0] == "Z" else fields[19]  # state, then starttime (field 22 of stat)
    except FileNotFoundError:
        return None
    except OSError:  # no /proc (macOS): ask psutil
        import psutil

        try:
            proc = psutil.Process(pid)
            return None if proc.status() == psutil.STATUS_ZOMBIE else str(proc.create_time())
        except psutil.NoSuchProcess:
            return None


def _init(
    rank: int, local_rank: int, world_size: int, backend: str, pg_timeout: float | None, run_dir: Path
) -> Context:
    import torch
    import torch.distributed as dist

    if backend == "auto":
        backend = "nccl" if torch.cuda.is_available() and torch.cuda.device_count() > local_rank else "gloo"
    if backend == "nccl":
        if not torch.cuda.is_available():
            raise RuntimeError("backend nccl needs a GPU, and this process sees none: use --backend gloo")
        device = torch.device("cuda", local_rank)
        torch.cuda.set_device(device)
    else:
        device = torch.device("cpu")
    kwargs: dict[str, Any] = {"backend": backend, "rank": rank, "world_size": world_size}
    if pg_timeout is not None:
        kwargs["timeout"] = datetime.timedelta(seconds=pg_timeout)
    if backend == "nccl":
        kwargs["device_id"] = device
    if "MASTER_ADDR" not in os.environ:  # plain `python -m ...` without torchrun: a world of one
        os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()))
    dist.init_process_group(**kwargs)
    return Context(
        rank=rank, local_rank=local_rank, world_size=world_size, backend=backend, device=device, run_dir=run_dir
    )


PORTS = (20000, 32768)
"""Where :func:`free_port` looks first: below Linux's default ephemeral range (``ip_local_port_range``, 32768–60999),
whose ports the system hands to every bind to port 0 and every outgoing connection. A port picked so (bind to 0, as
torch's ``get_free_port`` and this function once did) and released can be taken by another process's bind to port 0
or, more rarely, by an outgoing connection before the real bind: on one H200 (2026-12-07) notebook 09's rendezvous
port was taken (its agent failed with EADDRINUSE and the other waited two minutes)."""


def _below_ephemeral(proc: Path = Path("/proc/sys/net/ipv4")) -> list[int]:
    """Ports below this host's ephemeral range and not reserved (``ip_local_reserved_ports``): :data:`PORTS` where the
    range starts at 32768 or above, else the 4096 ports under its start (1024 at the least); :data:`PORTS` where /proc
    does not say (not Linux)."""
    try:
        low = int((proc / "ip_local_port_range").read_text().split()[0])
        reserved = (proc / "ip_local_reserved_ports").read_text().strip()
    except (OSError, ValueError, IndexError):
        return list(range(*PORTS))
    top = min(PORTS[1], low)
    ports = set(range(max(1024, min(PORTS[0], top - 4096)), top))
    for part in filter(None, reserved.split(",")):
        first, _, last = part.partition("-")
        ports -= set(range(int(first), int(last or first) + 1))
    return sorted(ports)


def _bind_any(port: int) -> int:
    """Bind ``port`` (0: the OS's pick) on every local address, IPv6 and IPv4 together where the host has IPv6, else
    IPv4, and return it: at least as strict as the agent's TCPStore bind (which adds SO_REUSEADDR and retries IPv4),
    so a port that passes is one it can bind now. EADDRINUSE is raised; another failure of IPv6 tries IPv4."""
    for family, address in ((socket.AF_INET6, "::"), (socket.AF_INET, "")):
        try:
            s = socket.socket(family)
        except OSError:  # no such address family here
            continue
        with s:
            try:
                if family == socket.AF_INET6:
                    s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
                s.bind((address, port))
            except OSError as exc:
                if exc.errno == errno.EADDRINUSE or family == socket.AF_INET:
                    raise
                continue
            return int(s.getsockname()[1])
    raise OSError(errno.EAFNOSUPPORT, "no IPv6 or IPv4 socket on this host")


def free_port() -> int:
    """A TCP port free on every local address now, below the ephemeral range (:func:`_below_ephemeral`; another
    process may still bind it before it is used, but no bind to port 0 and no outgoing connection will while the
    system's ephemeral range is above it): the course's one helper. Where none of 20 candidates is free, the OS's pick
    on every address (in the ephemeral range)."""
    import random

    candidates = _below_ephemeral()
    for port in random.SystemRandom().sample(candidates, min(20, len(candidates))):  # not the global generator
        try:
            return _bind_any(port)
        except OSError:
            continue
    return _bind_any(0)
