"""Launch a workload or a script as a real multi-process run and get a typed result back.

Used from every notebook and by ``nvtutorial run``. A run's ranks start one of two ways, and
behave the same either way (``tests/test_warm.py`` runs a lesson both ways and compares results
and every rank's environment):

- **warm** (the default where it can): each rank is forked from the warm interpreter
  (:mod:`nvtutorial.launch.warm`), which has torch and the workloads' imports loaded, and becomes
  ``python -m nvtutorial.workloads.X ...`` with exactly the environment torchrun would give it;
  a store process plays torchrun's agent store. Start-up is a fork, not two ``import torch``.
- **torchrun**: ``python -m torch.distributed.run --standalone --nproc-per-node N -m ...`` in a
  subprocess this module owns; always for emulated nodes (``nnodes > 1``) and restarts
  (``max_restarts``), where torchrun's rendezvous and restarts are the lesson; for any run with
  ``launcher="torchrun"`` (or ``NVTUTORIAL_LAUNCHER=torchrun``); and, with one line saying why, when
  the warm interpreter cannot serve the run.

Every run says the ``torchrun`` command a learner would type for it. The notebook kernel never
initialises CUDA and is never forked. Rank output streams into the cell while the run goes on;
rank 0's progress lines drive its bars (:mod:`nvtutorial.launch.progress`).

Before anything starts, bad input and a run the machine cannot hold (:mod:`nvtutorial.launch.guards`) are
refused with a :class:`LaunchError` (:mod:`nvtutorial.launch.spec`). When a rank fails, when the
deadline passes, when the run folder disappears, or when the caller is interrupted, every process of
the run is ended within a few seconds (:class:`~nvtutorial.launch.tree.ProcessTree`), and the caller
gets an error that names the failed rank, its exception and the last lines of its log
(:mod:`nvtutorial.launch.diagnosis`).
"""

from __future__ import annotations

import codecs
import contextlib
import html
import json
import os
import re
import select
import shlex
import signal
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, NoReturn

import psutil

from nvtutorial import params as params_mod
from nvtutorial.i18n import _
from nvtutorial.launch import diagnosis
from nvtutorial.launch import warm as warm_mod
from nvtutorial.launch.environment import free_port, node_environment, rank_environment
from nvtutorial.launch.progress import RunProgress, in_notebook
from nvtutorial.launch.spec import (
    COURSE_SET,
    Backend,
    Launcher,
    LaunchError,
    LaunchSpec,
    Output,
    RunFailed,
    RunInterrupted,
    RunTimedOut,
    given_params,
    prepare,
    prune_runs,
    runs_root,
    torchrun_options,
    workload_program,
)
from nvtutorial.launch.tree import ProcessTree, alive
from nvtutorial.machine import hardware
from nvtutorial.results import RunResult
from nvtutorial.runtime import PROGRESS_PREFIX

FAILURE_GRACE_S = 1.5
"""After a rank reports an error, the others get this long to end by themselves (torchrun stops them)."""
MAX_SHOWN_BYTES = 1 << 20
"""Rank output shown in the cell or terminal per run; the rest stays in the ranks' logs."""
PORT_ATTEMPTS = 3
"""Rendezvous ports tried when another process takes the free port picked (emulated nodes only)."""
TICK_S = 0.1
"""How often the launcher looks at the run (a rank's or an agent's exit is noticed at once)."""
STORE_TIMEOUT_S = 30.0
STORE_BOOT = "from nvtutorial.launch._store import main; main()"
_READ_CHUNK = 1 << 20
_MAX_LINE = 64 * 1024

HARMLESS_LINES = (
    # DDP's reducer on a CPU rank (notebooks 05, 06): a 1x1 convolution's weight gradient comes back in channels-last
    # strides, which differ from its bucket view's only in size-1 dimensions (the same order in memory).
    # A warning of four lines: the first, then the lines that continue it. Nothing is slower.
    (
        re.compile(r"UserWarning: Grad strides do not match bucket view strides"),
        re.compile(r"^(grad|bucket_view)\.sizes\(\) = |^\s+return Variable\._execution_engine\.run_backward\("),
    ),
    # Kineto (torch.profiler) in a CUDA build, on a rank whose GPUs the launcher hid (a gloo rank: CUDA_VISIBLE_DEVICES
    # ''): it asks CUDA for the devices' properties for the trace's header; 100 is cudaErrorNoDevice.
    (re.compile(r"^ERROR:.* DeviceProperties\.cpp:\d+\] gpuGetDeviceCount failed with code 100$"), None),
    # Kineto's trace points at each profiler start and stop (torch 2.13).
    (re.compile(r"^USDT:.* SyncActivityProfilerHandler\.cpp:\d+\] profiler_(start|stop)$"), None),
)
"""Lines of torch's own that a learner cannot act on, each a known harmless one (why above): not shown where the
launcher relays a rank's output; the rank's log keeps them. Each is a line, and what may continue it."""


def torchrun_line(spec: LaunchSpec, full: bool = False) -> str:
    """The ``torchrun`` command a learner would type in a terminal (in the same folder) for the same run: the
    variables the run sets, the backend it resolved, the parameters it does not leave at their defaults (``full``:
    every parameter, as ``result.json`` records it); emulated nodes get one agent each (``&``)."""
    if spec.script is not None:
        program = [spec.workload, *spec.args]
    else:
        shown = params_mod.to_strings(spec.params) if full else given_params(spec.params)
        program = workload_program(spec.workload, shown, "--backend", spec.backend)
    endpoint = "127.0.0.1:29400" if spec.nnodes > 1 else None
    words = ["torchrun", *torchrun_options(spec.nproc, spec.nnodes, endpoint, "course", spec.max_restarts)]
    gpus = [g.uuid for g in hardware.gpus()] if spec.nnodes > 1 and spec.backend == "nccl" else []
    lines = []
    for node in range(spec.nnodes):
        env = node_environment(spec, node, gpus)
        shown = {k: v for k, v in env.items() if k in spec.env or (k in COURSE_SET and os.environ.get(k) != v)}
        prefix = " ".join(f"{k}={shlex.quote(v)}" for k, v in sorted(shown.items()))
        lines.append((prefix + " " if prefix else "") + " ".join(shlex.quote(w) for w in [*words, *program]))
    return " & ".join(lines)


def harmless(line: str, continuing: re.Pattern[str] | None) -> tuple[bool, re.Pattern[str] | None]:
    """Whether ``line`` is one of :data:`HARMLESS_LINES` (or continues the one before it, ``continuing``), and what
    may continue it."""
    if continuing is not None and continuing.search(line):
        return True, continuing
    for first, more in HARMLESS_LINES:
        if first.search(line):
            return True, more
    return False, None


def run(
    target: str | os.PathLike[str],
    *,
    nproc: int = 2,
    backend: Backend = "auto",
    params: Any = None,
    args: Sequence[str] | None = None,
    timeout: float | None = 600.0,
    env: Mapping[str, Any] | None = None,
    out: str | os.PathLike[str] | None = None,
    output: Output = "rank0",
    pg_timeout: float | None = None,
    nnodes: int = 1,
    allow_oversubscribe: bool = False,
    check: bool = True,
    max_restarts: int = 0,
    launcher: Launcher | None = None,
) -> RunResult:
    """Run a workload, or a ``.py`` script, on ``nproc`` processes (per node) and return its :class:`RunResult`.

    ``target``: a workload's name (``nvtutorial list``) or a script's path; ``params``: a dict (or
    the workload's ``Params``); ``args``: the script's arguments; ``env``: variables set for this
    run only (the rest of the environment passes through); ``output``: which ranks' lines to
    show (``"none"``: only the launcher's line saying how the run started, and its progress bars); ``pg_timeout``: the
    process group's collective timeout in seconds; ``nnodes``: emulated
    nodes, one torchrun agent each; ``allow_oversubscribe``: start even with more ranks than the
    cores or the memory hold (:mod:`nvtutorial.launch.guards`); ``max_restarts``: torchrun restarts the
    ranks after a failure this many times (a rank that dies is then not the end of the run);
    ``launcher="torchrun"``: start the ranks with the literal ``torchrun`` instead of forking them
    warm. With ``check`` (the default) a failed run raises :class:`RunFailed`; otherwise the result
    carries the error.
    """
    spec = prepare(
        target,
        nproc=nproc,
        backend=backend,
        params=params,
        args=args,
        timeout=timeout,
        env=env,
        out=out,
        output=output,
        pg_timeout=pg_timeout,
        nnodes=nnodes,
        allow_oversubscribe=allow_oversubscribe,
        max_restarts=max_restarts,
        launcher=launcher,
    )
    return execute(spec, check=check)


class LogTail:
    """Follows ``rank{R}.log`` files as they grow and yields complete lines, a bounded chunk at a time."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.offset = 0
        self.partial = ""
        self.more = False
        self.decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")

    def read(self, limit: int = _READ_CHUNK) -> list[str]:
        try:
            with open(self.path, "rb") as fh:
                fh.seek(self.offset)
                data = fh.read(limit)
        except (FileNotFoundError, NotADirectoryError):
            return []
        self.offset += len(data)
        self.more = len(data) == limit
        lines = (self.partial + self.decoder.decode(data)).split("\n")
        self.partial = lines.pop()
        if len(self.partial) > _MAX_LINE:  # a line without end: show it in pieces
            lines.append(self.partial)
            self.partial = ""
        return lines


class Supervisor:
    """One run in flight: its processes, their output, its deadlines and what was seen of them."""

    def __init__(self, spec: LaunchSpec) -> None:
        self.spec = spec
        self.t0 = time.perf_counter()
        self.started_at = time.time()
        self.deadline: float | None = None  # set when every rank is up (ready_at)
        self.ready_at: float | None = None
        self.startup_deadline = self.t0 + spec.startup_timeout
        self.tails = {r: LogTail(spec.run_dir / f"rank{r}.log") for r in range(spec.world_size)}
        everyone = set(range(spec.world_size))
        self.shown = everyone if spec.output == "all" else ({0} if spec.output == "rank0" else set())
        self.shown_bytes = 0
        self.continuing: dict[int, re.Pattern[str] | None] = {}
        """Per rank, what continues the last line :func:`harmless` left out (None: nothing)."""
        self.progress = RunProgress()
        self.first_output: float | None = None
        self.failure_seen: float | None = None
        self.interrupted = self.terminated = self.folder_lost = False
        self.seen = diagnosis.Observed()
        self.tree = ProcessTree()
        self.members: list[Any] = []
        """The processes whose end is the run's end: torchrun's agents, or the warm ranks."""
        self.warm_ranks: dict[int, warm_mod.Forked] = {}
        self.workers: dict[int, psutil.Process] = {}
        self.lifeline: int | None = None
        self.port: int | None = None
        """The emulated nodes' rendezvous port."""
        self.started = "torchrun"
        self.folder = os.stat(spec.run_dir).st_ino

    # --- starting ---------------------------------------------------------------------------
    def start_torchrun(self, port: int | None) -> None:
        """Start one torchrun agent per node (with emulated nodes, meeting on ``port``)."""
        spec = self.spec
        self.port = port
        gpu_ids = [g.uuid for g in hardware.gpus()] if spec.nnodes > 1 and spec.backend == "nccl" else []
        self.members = []
        self.started = "torchrun"
        for node, log_path in enumerate(diagnosis.agent_logs(spec)):
            log_path.parent.mkdir(parents=True, exist_ok=True)
            with open(log_path, "w") as log:
                agent = subprocess.Popen(
                    spec.command(node, port),
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    stdin=subprocess.DEVNULL,
                    env=node_environment(spec, node, gpu_ids),
                    start_new_session=True,
                )
            self.members.append(self.tree.add(agent))

    def start_warm(self, warm: warm_mod.WarmInterpreter) -> None:
        """Fork the run's store, then every rank, from the warm interpreter (raises WarmUnavailable)."""
        spec = self.spec
        base = node_environment(spec, 0)
        run_id = spec.run_dir.name
        devnull = os.open(os.devnull, os.O_RDWR)
        try:
            port = self._start_store(warm, base, devnull)
            for rank in range(spec.world_size):
                log = os.open(spec.run_dir / f"rank{rank}.log", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
                try:
                    argv = spec.program()
                    title = " ".join(["python", *argv]) + f"  [rank {rank}/{spec.world_size}, nvtutorial warm start]"
                    handle = warm.spawn(
                        argv,
                        rank_environment(spec, rank, port, run_id, base),
                        fds={0: devnull, 1: log, 2: log},
                        title=title,
                    )
                finally:
                    os.close(log)
                self.warm_ranks[rank] = handle
                self.members.append(self.tree.add(handle))
                with contextlib.suppress(psutil.Error):
                    self.workers[rank] = psutil.Process(handle.pid)
            self.started = "warm"
        finally:
            os.close(devnull)

    def _start_store(self, warm: warm_mod.WarmInterpreter, base: Mapping[str, str], devnull: int) -> int:
        """The run's store (torchrun's agent store): forked, serving on a port it reports; the port."""
        lifeline_r, self.lifeline = os.pipe()
        port_r, port_w = os.pipe()
        log = os.open(self.spec.run_dir / "store.log", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        env = {**base, "WORLD_SIZE": str(self.spec.world_size)}
        try:
            store = warm.spawn(
                ["-c", STORE_BOOT],
                env,
                fds={0: lifeline_r, 1: log, 2: log, 3: port_w},
                title=f"python -c {STORE_BOOT!r}  [the store of {self.spec.run_dir}, nvtutorial warm start]",
            )
        finally:
            for fd in (lifeline_r, port_w, log):
                os.close(fd)
        self.tree.add(store)
        try:
            ready, _, _ = select.select([port_r], [], [], STORE_TIMEOUT_S)
            text = os.read(port_r, 64).decode().strip() if ready else ""
        finally:
            os.close(port_r)
        if not text.isdigit():
            why = (
                f"exited ({store.poll()})" if store.poll() is not None else f"gave no port within {STORE_TIMEOUT_S:g} s"
            )
            last = "; ".join(diagnosis.tail(self.spec.run_dir / "store.log", 3))
            raise warm_mod.WarmUnavailable(f"the run's store {why}" + (f": {last}" if last else ""))
        return int(text)

    # --- following ----------------------------------------------------------------------------
    def running(self) -> bool:
        return any(m.poll() is None for m in self.members)

    def pump(self, drain: bool = False) -> None:
        """Show new rank output (within :data:`MAX_SHOWN_BYTES`) and feed the progress bar."""
        for rank, tail in self.tails.items():
            while True:
                for line in tail.read():
                    self._line(rank, line)
                if not (drain and tail.more):
                    break

    def _line(self, rank: int, line: str) -> None:
        if self.first_output is None:
            self.first_output = time.perf_counter() - self.t0
        if line.startswith(PROGRESS_PREFIX):
            try:
                self.progress.update(json.loads(line[len(PROGRESS_PREFIX) :]))
            except (ValueError, TypeError):
                pass
            return
        if rank not in self.shown:
            return
        left_out, self.continuing[rank] = harmless(line, self.continuing.get(rank))
        if left_out:
            return
        text = f"[rank{rank}] {line}"
        if self.shown_bytes + len(text) > MAX_SHOWN_BYTES:
            if self.shown_bytes <= MAX_SHOWN_BYTES:
                print(
                    f"[nvtutorial] {MAX_SHOWN_BYTES >> 20} MiB of output shown: the rest is only in "
                    f"{self.spec.run_dir / 'rank*.log'}",
                    flush=True,
                )
                self.shown_bytes = MAX_SHOWN_BYTES + 1
            return
        self.shown_bytes += len(text) + 1
        print(text, flush=True)

    def track(self) -> None:
        """Record torchrun's workers (from their pid files) and notice a rank that ended without a result."""
        run_dir = self.spec.run_dir
        for rank in range(self.spec.world_size):
            proc = self.workers.get(rank)
            if not self.warm_ranks and (proc is None or (self.spec.max_restarts and not alive(proc))):
                try:  # a torchrun worker, or a restarted one (a new pid)
                    fresh = psutil.Process(int((run_dir / f"rank{rank}.pid").read_text().strip()))
                    if fresh.create_time() >= self.started_at - 1 and (proc is None or fresh.pid != proc.pid):
                        self.workers[rank] = fresh
                        self.tree.adopt(fresh)
                        self.seen.vanished.pop(rank, None)
                        continue
                except (ValueError, psutil.Error, OSError):
                    pass
            if (
                proc is not None
                and rank not in self.seen.vanished
                and not alive(proc)
                and not any((run_dir / f"rank{rank}.{kind}").exists() for kind in ("json", "error.json"))
            ):
                self.seen.vanished[rank] = time.time()
        for rank, handle in self.warm_ranks.items():  # what torchrun's failure report would list
            code = handle.poll()
            if code is not None and rank not in self.seen.exits:
                self.seen.exits[rank] = code
        self.tree.scan()

    def failed_member(self) -> bool:
        """A torchrun agent that gave up, or a warm rank that exited non-zero."""
        return any(m.poll() not in (None, 0) for m in self.members)

    def watch(self) -> None:
        """Follow the run until its ranks (or agents) exit, a rank fails, the deadline passes or the folder vanishes."""
        spec = self.spec
        while self.running():
            self.pump()
            self.track()
            now = time.perf_counter()
            try:
                self.folder_lost = os.stat(spec.run_dir).st_ino != self.folder
            except OSError:
                self.folder_lost = True
            if self.folder_lost:
                break
            # with restarts, a lost rank is torchrun's to handle: only an agent that gives up ends the run
            lost = not spec.max_restarts and (self.seen.vanished or any(spec.run_dir.glob("rank*.error.json")))
            if self.failure_seen is None and (lost or self.failed_member()):
                self.failure_seen = now
            if self.failure_seen is not None and now - self.failure_seen > FAILURE_GRACE_S:
                self.dump_stacks()  # where the surviving ranks were when one failed
                break
            if self.ready_at is None and self.all_ready():
                self.ready_at = now
                self.deadline = None if spec.timeout is None else now + spec.timeout
            late_start = self.ready_at is None and now > self.startup_deadline
            if late_start or (self.deadline is not None and now > self.deadline):
                self.seen.timed_out = True
                self.seen.startup = late_start
                self.dump_stacks()
                break
            self._pause(TICK_S)
        self.track()

    def all_ready(self) -> bool:
        """Whether every rank has said it is up (``rank{R}.ready``, written by the worker runtime)."""
        return all((self.spec.run_dir / f"rank{r}.ready").exists() for r in range(self.spec.world_size))

    def _pause(self, seconds: float) -> None:
        """Sleep up to ``seconds``, waking as soon as a member exits (a finished run is noticed at once)."""
        waiting = next((m for m in self.members if m.poll() is None), None)
        if waiting is not None:
            try:
                waiting.wait(timeout=seconds)
            except subprocess.TimeoutExpired:
                pass

    def port_taken(self) -> bool:
        """Whether node 0 could not host the rendezvous because its port was taken meanwhile."""
        if self.spec.nnodes == 1 or self.workers or self.members[0].poll() in (None, 0):
            return False
        text = "\n".join(diagnosis.tail(diagnosis.agent_logs(self.spec)[0], 200))
        return "EADDRINUSE" in text or "ddress already in use" in text

    def dump_stacks(self) -> None:
        """Ask every worker to print its Python stacks into its log (faulthandler on SIGUSR1)."""
        self.track()
        live = [p for p in self.workers.values() if alive(p)]
        self.seen.stopped.update(r for r, p in self.workers.items() if p in live and _stopped(p))
        if self.tree.signal(live, signal.SIGUSR1):
            time.sleep(0.5)

    # --- ending -------------------------------------------------------------------------------
    def end(self) -> None:
        """End whatever of the run is still alive, wait for its processes, show the last output."""
        if self.lifeline is not None:
            os.close(self.lifeline)  # the store ends when its lifeline closes
            self.lifeline = None
        self.tree.end()
        self.pump(drain=True)
        failed = self.seen.timed_out or self.folder_lost or self.failure_seen is not None or self.returncode != 0
        self.progress.close("interrupted" if self.interrupted else "failed" if failed else "done")

    def reset(self) -> None:
        """Forget a start that did not take (a failed warm start, before torchrun starts the run)."""
        if self.lifeline is not None:
            os.close(self.lifeline)
            self.lifeline = None
        self.tree.end()
        self.tree = ProcessTree()
        self.members, self.warm_ranks, self.workers = [], {}, {}
        self.seen = diagnosis.Observed()

    @property
    def returncode(self) -> int:
        if self.warm_ranks:  # as torchrun's agent exits: 1 when a worker failed
            return 0 if all(self.seen.exits.get(r, h.poll()) == 0 for r, h in self.warm_ranks.items()) else 1
        codes = [m.returncode for m in self.members]
        return next((c for c in codes if c), 0)


def _stopped(proc: psutil.Process) -> bool:
    try:
        return proc.status() == psutil.STATUS_STOPPED
    except psutil.Error:
        return False


def _make_run_dir(spec: LaunchSpec) -> None:
    """Create the run folder and clear what an earlier run left in it; a failure is a :class:`LaunchError`."""
    try:
        spec.run_dir.mkdir(parents=True, exist_ok=True)
        stale = [
            spec.run_dir / "result.json",
            spec.run_dir / "store.log",
            *spec.run_dir.glob("rank*.*"),
            *spec.run_dir.glob("node*/agent.log"),
            spec.run_dir / "agent.log",
        ]
        for path in stale:
            path.unlink(missing_ok=True)
    except OSError as exc:
        raise LaunchError(
            f"cannot make the run folder {spec.run_dir}: {exc.strerror or exc}; use --out with a folder you can write"
        ) from None


def _clear_attempt(spec: LaunchSpec) -> None:
    """Remove what a start that did not take wrote, so the next start begins clean."""
    for path in [*spec.run_dir.glob("rank*.*"), spec.run_dir / "store.log"]:
        with contextlib.suppress(OSError):
            path.unlink()


def _warm_interpreter(spec: LaunchSpec) -> tuple[warm_mod.WarmInterpreter | None, str | None]:
    """The warm interpreter for ``spec``, or why the run starts with torchrun (None when that is the rule)."""
    if spec.torchrun_only:
        return None, None
    unsupported = warm_mod.supported()
    if unsupported:
        return None, unsupported
    known = warm_mod.get(start=False, keep_dead=True)
    if known is not None and not known.alive:  # it died: this run starts cold, the next one warm again
        why = known.why_dead()
        warm_mod.shutdown()
        warm_mod.prestart()
        return None, why
    try:
        warm = warm_mod.get()
        assert warm is not None
        try:
            warm.wait_ready(timeout=1.0)
        except warm_mod.WarmUnavailable:
            if warm.hello is not None or warm.dead is not None:
                raise
            # its first start in this kernel or command: say what the wait is (it imports torch once)
            print(
                "[nvtutorial] waiting for the warm interpreter to import torch (once per kernel or command)", flush=True
            )
            warm.wait_ready()
        return warm, None
    except warm_mod.WarmUnavailable as exc:
        return None, str(exc)


def _start(run: Supervisor, spec: LaunchSpec) -> str | None:
    """Start the run warm where it can; else with torchrun. Why it started cold when it could have been warm."""
    warm, why = _warm_interpreter(spec)
    if warm is not None:
        for attempt in range(2):
            try:
                run.start_warm(warm)
                return None
            except warm_mod.WarmUnavailable as exc:
                run.reset()
                _clear_attempt(spec)
                why = str(exc)
                if attempt == 0 and exc.renewable:  # a lesson file changed: a new interpreter, then warm again
                    print(f"[nvtutorial] {why}: starting a new warm interpreter", flush=True)
                    warm = warm_mod.renew()
                    try:
                        assert warm is not None
                        warm.wait_ready()
                        continue
                    except warm_mod.WarmUnavailable as again:
                        why = str(again)
                break
    if why:
        print(f"[nvtutorial] starting with torchrun instead of warm ranks: {why}", flush=True)
    port = free_port() if spec.nnodes > 1 else None
    run.start_torchrun(port)
    return why


def _announce(how: str, command: str, full: str) -> None:
    """The line every run prints: how it started, as the ``torchrun`` command without the parameters left at their
    defaults (``command``); in a notebook, the ``full`` one (every parameter) one click away, folded under it."""
    print(f"[nvtutorial] {how}: {command}", flush=True)
    if full != command and in_notebook():
        from IPython.display import display

        summary = _("the full command: every parameter, defaults included")
        folded = (
            f'<details class="nvtutorial-command"><summary>{summary}'
            f'</summary><pre style="white-space: pre-wrap">{html.escape(full)}</pre></details>'
        )
        plain = _("[nvtutorial] the full command: {command}", command=full)
        display({"text/plain": plain, "text/html": folded}, raw=True)


def execute(spec: LaunchSpec, check: bool = True, full_command: bool = False) -> RunResult:
    """Start a prepared run, follow it to the end, collect and save its result. The line it prints names the
    parameters that differ from the workload's defaults (``full_command``: every one); ``result.json`` records
    every one."""
    _make_run_dir(spec)
    if spec.run_dir.parent == runs_root():  # a folder the launcher named: keep the runs root bounded
        prune_runs()
    for warning in spec.warnings:
        print(warning, file=sys.stderr, flush=True)
    command, full = torchrun_line(spec), torchrun_line(spec, full=True)
    run = Supervisor(spec)
    cold_reason = _follow(run, full if full_command else command, full)
    wall = time.perf_counter() - run.t0
    if spec.max_restarts and run.returncode == 0 and not run.interrupted:
        for stale in spec.run_dir.glob("rank*.error.json"):  # errors of attempts that torchrun restarted
            stale.replace(stale.with_name(stale.name.replace(".error.json", ".error.earlier.json")))
    for leftover in spec.run_dir.glob(".rank*.tmp"):  # a rank killed (SIGKILL) while it wrote a result
        leftover.unlink(missing_ok=True)
    run.seen.started = run.started
    result = diagnosis.collect(spec, run.returncode, wall, run.first_output)
    result.ready_s = None if run.ready_at is None else run.ready_at - run.t0
    result.started, result.torchrun, result.cold_reason = run.started, full, cold_reason
    if run.interrupted:
        _stop_interrupted(run, result, wall)
    if run.folder_lost:
        failure = _folder_lost(spec, result)
    else:
        failure = _save_diagnosed(spec, result, diagnosis.diagnose(spec, result, run.seen))
    if failure is not None and check:
        error_class = RunTimedOut if failure.timed_out else RunFailed
        raise error_class(
            failure.message, result, rank=failure.rank, exc_type=failure.exc_type, traceback=failure.traceback
        )
    return result


def _follow(run: Supervisor, command: str, full: str) -> str | None:
    """Start the run, say how (:func:`_announce`), follow it to its end, trying another rendezvous port when another
    process took the one picked; the run is ended whatever happens. Why it started cold when it could have been
    warm (:func:`_start`)."""
    cold_reason = None
    previous_sigterm = _raise_on_sigterm()
    try:
        cold_reason = _start(run, run.spec)
        # every run says how it started, output="none" included (that hides the ranks' lines, not the run)
        _announce(_("ranks forked warm, as") if run.started == "warm" else _("started with"), command, full)
        for attempt in range(PORT_ATTEMPTS):
            run.watch()
            if attempt + 1 == PORT_ATTEMPTS or not run.port_taken():
                break
            run.end()
            run.failure_seen = None
            print(
                f"[nvtutorial] the rendezvous port {run.port} was taken by another process: trying another",
                file=sys.stderr,
                flush=True,
            )
            run.start_torchrun(free_port())
    except KeyboardInterrupt:
        run.interrupted = True
    except _Terminated:
        run.interrupted = run.terminated = True
    finally:
        run.end()
        if previous_sigterm is not None:
            signal.signal(signal.SIGTERM, previous_sigterm)
    return cold_reason


def _stop_interrupted(run: Supervisor, result: RunResult, wall: float) -> NoReturn:
    """Record the interruption in ``result.json`` and raise :class:`RunInterrupted` (SIGTERM: exit 128 + 15)."""
    spec = run.spec
    result.error = {
        "type": "SIGTERM" if run.terminated else "KeyboardInterrupt",
        "message": "interrupted by the caller; every process of the run was ended",
    }
    _save(result)
    # every rank's ready file, even if the interrupt came before the watch loop's next look at them
    ran = "ready" if run.ready_at is not None or run.all_ready() else "still starting"
    state = _("ready") if ran == "ready" else _("still starting")
    fields = {"workload": spec.workload, "ranks": spec.world_size, "state": state, "seconds": wall}
    if run.terminated:
        first = (
            _(
                "terminated (SIGTERM) while {workload} ran on {ranks} ranks "
                "({state}, {seconds:.1f} s after the launch)",
                **fields,
            )
            if spec.world_size > 1
            else _(
                "terminated (SIGTERM) while {workload} ran on {ranks} rank ({state}, {seconds:.1f} s after the launch)",
                **fields,
            )
        )
    elif spec.world_size > 1:
        first = _("stopped while {workload} ran on {ranks} ranks ({state}, {seconds:.1f} s after the launch)", **fields)
    else:
        first = _("stopped while {workload} ran on {ranks} rank ({state}, {seconds:.1f} s after the launch)", **fields)
    message = "\n".join(
        [
            first,
            _(
                "ended: every process of the run ({started} started, and whatever they started)",
                started=len(run.tree.roots),
            ),
            _(
                "kept: its folder {folder} (each rank's log; result.json records the interruption)",
                folder=spec.run_dir,
            ),
        ]
    )
    if run.terminated:
        print(message, file=sys.stderr)
        raise SystemExit(128 + signal.SIGTERM)
    raise RunInterrupted(message, result)


def _folder_lost(spec: LaunchSpec, result: RunResult) -> diagnosis.Failure:
    """The failure of a run whose folder was deleted (or replaced) while it ran; its result cannot be saved."""
    message = (
        f"the run folder {spec.run_dir} was deleted (or replaced) while the run was in flight; every "
        f"process of the run was ended and its logs are lost. Leave a run's folder alone until it ends."
    )
    result.error = {"type": "RunFolderLost", "message": message}
    result.returncode = result.returncode or 1
    return diagnosis.Failure(message, exc_type="RunFolderLost")


def _save_diagnosed(spec: LaunchSpec, result: RunResult, failure: diagnosis.Failure | None) -> diagnosis.Failure | None:
    """Save ``result.json``; the run's failure, with why it could not be saved first if it could not."""
    try:
        result.save()
    except OSError as exc:
        why = diagnosis.disk_full(spec) or f"could not write {spec.run_dir / 'result.json'}: {exc.strerror or exc}"
        failure = failure or diagnosis.Failure(why, exc_type="ResultNotSaved")
        lines = failure.message.split("\n")
        if lines[0] != why:
            lines.insert(0, why)
        lines.insert(1, "(the result was not saved)")
        failure.message = "\n".join(lines)
        result.error = result.error or {"type": "ResultNotSaved", "message": why}
        result.returncode = result.returncode or 1
    return failure


def _save(result: RunResult) -> None:
    try:
        result.save()
    except OSError:
        pass  # the caller is being interrupted: the error it sees matters more than the file


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
