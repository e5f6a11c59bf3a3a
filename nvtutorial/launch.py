"""Launch a workload or a script as a real multi-process run and get a typed result back.

Used from every notebook and by ``nvtutorial run``. A run is
``python -m torch.distributed.run --standalone --nproc-per-node N -m nvtutorial.workloads.X``
(or ``-m nvtutorial.runtime_script PATH ARGS`` for a script) in a subprocess this module owns:
no fork of the notebook kernel, no pickling of cell code, and the kernel never initialises
CUDA. With ``nnodes=M`` it starts one torchrun agent per emulated node, meeting through c10d
rendezvous on localhost: the commands a real cluster would run, on one host. Rank output
streams into the cell while the run goes on; rank 0's progress lines drive one ``tqdm.auto`` bar.

Before anything starts, bad input and a run the machine cannot hold (:mod:`nvtutorial.guards`)
are refused with a :class:`LaunchError`. When a rank fails, when the deadline passes, when the
run folder disappears, or when the caller is interrupted, every process of the run (the
torchrun agents, their workers, which torchrun puts in sessions of their own, and their
children) is ended within a few seconds, and the caller gets an error that names the failed
rank, its exception and the last lines of its log (:mod:`nvtutorial.diagnosis`).
"""

from __future__ import annotations

import codecs
import dataclasses
import json
import math
import os
import secrets
import shlex
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

import psutil

from . import diagnosis, guards, workloads
from . import params as params_mod
from .machine import hardware
from .progress import RunProgress
from .results import RunResult
from .runtime import PROGRESS_PREFIX, _free_port

Backend = Literal["auto", "nccl", "gloo"]
Output = Literal["rank0", "all", "none"]

KILL_GRACE_S = 3.0
"""After SIGTERM, survivors get this long before SIGKILL (the whole tree ends within 5 s)."""
FAILURE_GRACE_S = 1.5
"""After a rank reports an error, torchrun gets this long to stop the others itself."""
MAX_SHOWN_BYTES = 1 << 20
"""Rank output shown in the cell or terminal per run; the rest stays in the ranks' logs."""
PORT_ATTEMPTS = 3
"""Rendezvous ports tried when another process takes the free port picked (emulated nodes only)."""
TICK_S = 0.1
STARTUP_TIMEOUT_S = 300.0
"""How long the ranks may take to come up (interpreters, imports, rendezvous) before the run counts as
hung. The run's own ``timeout`` counts from the moment every rank is up, so a slow start-up on a busy
machine never eats a short deadline, and a hang is caught where it happens."""
"""How often the launcher looks at the run (an agent's exit is noticed at once)."""
_READ_CHUNK = 1 << 20
_MAX_LINE = 64 * 1024


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
    """A workload's name, or a script's path as given (relative stays relative)."""
    params: Any
    """The workload's ``Params``; None for a script."""
    nproc: int
    """Ranks per node."""
    backend: Literal["nccl", "gloo"]
    timeout: float | None
    env: Mapping[str, str]
    run_dir: Path
    output: Output
    pg_timeout: float | None
    nnodes: int = 1
    script: Path | None = None
    """The script's absolute path; None for a workload."""
    args: tuple[str, ...] = ()
    """The script's arguments."""
    warnings: tuple[str, ...] = ()
    """What the guards allowed only because of ``allow_oversubscribe``; printed when the run starts."""
    max_restarts: int = 0
    """torchrun's ``--max-restarts``: times each agent starts its ranks again after one fails (notebook 09)."""
    startup_timeout: float = STARTUP_TIMEOUT_S
    """Seconds the ranks may take to come up; ``timeout`` counts from when every rank is up."""

    @property
    def world_size(self) -> int:
        return self.nproc * self.nnodes

    def program(self) -> list[str]:
        """What each rank runs: torchrun's arguments after its own options."""
        if self.script is not None:
            return ["-m", "nvtutorial.runtime_script", "--out", str(self.run_dir), "--backend", self.backend,
                    "--capture", "--", str(self.script), *self.args]
        cmd = ["-m", f"nvtutorial.workloads.{self.workload}", "--out", str(self.run_dir), "--backend", self.backend,
               "--capture"]
        if self.pg_timeout is not None:
            cmd += ["--pg-timeout", str(self.pg_timeout)]
        for key, value in params_mod.to_strings(self.params).items():
            cmd += ["--set", f"{key}={value}"]
        return cmd

    def command(self, node: int = 0, port: int | None = None) -> list[str]:
        """The torchrun command of ``node`` (with emulated nodes, its rendezvous on 127.0.0.1:``port``)."""
        cmd = [sys.executable, "-m", "torch.distributed.run"]
        if self.nnodes == 1:
            cmd.append("--standalone")
        else:
            if port is None:
                raise ValueError("emulated nodes meet on a rendezvous port: give port=")
            # c10d numbers the nodes itself (torchrun ignores --node-rank with it)
            cmd += ["--nnodes", str(self.nnodes), "--rdzv-backend", "c10d",
                    "--rdzv-endpoint", f"127.0.0.1:{port}", "--rdzv-id", self.run_dir.name,
                    # node 0 hosts the rendezvous store: a taken port then fails fast instead of hanging
                    "--rdzv-conf", f"is_host={int(node == 0)}"]
        if self.max_restarts:
            cmd += ["--max-restarts", str(self.max_restarts)]
        return cmd + ["--nproc-per-node", str(self.nproc), "--monitor-interval", "0.1", *self.program()]

    def cluster_commands(self, endpoint: str = "$HEAD_NODE:29400", job_id: str = "nvtutorial") -> list[str]:
        """The ``torchrun`` line each node of a real cluster would run for this job, node 0 first.

        ``endpoint`` is node 0's address and a port open between the nodes (``$HEAD_NODE`` is left
        for the shell to expand). The lines are the same on every node: c10d rendezvous numbers
        the nodes as they join (``--node-rank`` is for static rendezvous only). The emulation on
        one host runs the same lines, with the rendezvous on 127.0.0.1 and ``NCCL_HOSTID`` set
        per node.
        """
        if self.script is not None:
            program = [self.workload, *self.args]
        else:
            program = ["-m", f"nvtutorial.workloads.{self.workload}"]
            for key, value in params_mod.to_strings(self.params).items():
                program += ["--set", f"{key}={value}"]
        lines = []
        for node in range(self.nnodes):
            words = ["torchrun", "--nnodes", str(self.nnodes), "--nproc-per-node", str(self.nproc),
                     "--rdzv-backend", "c10d", "--rdzv-endpoint", endpoint, "--rdzv-id", job_id,
                     *(["--max-restarts", str(self.max_restarts)] if self.max_restarts else []), *program]
            lines.append(" ".join(w if w == endpoint else shlex.quote(w) for w in words))
        return lines


def runs_root() -> Path:
    """Where run folders go: ``$NVTUTORIAL_RUNS_DIR`` or ``./runs``."""
    return Path(os.environ.get("NVTUTORIAL_RUNS_DIR", "runs"))


def torch_cuda() -> str | None:
    """``torch.version.cuda`` (None for a CPU build), read without importing torch when it is not loaded yet."""
    if "torch" in sys.modules:
        return sys.modules["torch"].version.cuda
    try:
        import ast
        import importlib.util

        spec = importlib.util.find_spec("torch")
        path = Path(next(iter(spec.submodule_search_locations or ()))) / "version.py"  # type: ignore[union-attr]
        for node in ast.parse(path.read_text()).body:  # a generated file of constants: `cuda: Optional[str] = ...`
            target = node.target if isinstance(node, ast.AnnAssign) else (node.targets[0] if isinstance(node, ast.Assign) else None)
            if isinstance(target, ast.Name) and target.id == "cuda" and node.value is not None:
                return ast.literal_eval(node.value)
    except Exception:  # noqa: BLE001, S110 - an unusual install: ask torch itself
        pass
    import torch

    return torch.version.cuda


def resolve_backend(backend: str, nproc: int) -> Literal["nccl", "gloo"]:
    """``auto`` is nccl when ``nproc`` GPUs are visible and torch has CUDA, else gloo on CPU."""
    if backend not in ("auto", "nccl", "gloo"):
        raise LaunchError(f"unknown backend {backend!r}; use auto, nccl or gloo")
    if backend == "gloo":
        return "gloo"
    cuda = torch_cuda()  # the parent never imports torch.cuda: NVML counts the GPUs
    usable = hardware.gpu_count() if cuda else 0
    if backend == "auto":
        return "nccl" if usable >= nproc else "gloo"
    if usable == 0:
        why = "this torch is a CPU-only build" if not cuda else "no GPU is visible (NVML sees none)"
        raise LaunchError(f"backend nccl needs GPUs, but {why}; use --backend gloo or auto")
    if usable < nproc:
        raise LaunchError(f"backend nccl with {nproc} processes needs {nproc} GPUs, but {usable} are visible; "
                          f"use --nproc {usable} or --backend gloo")
    return "nccl"


def _whole(name: str, value: Any) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        what = "processes per node" if name == "nproc" else "emulated nodes"
        raise LaunchError(f"{name}={value!r}: the number of {what} must be a whole number of at least 1")
    return value


def _no_nul(what: str, text: str) -> str:
    if "\0" in text:
        raise LaunchError(f"{what} {text!r} contains a NUL character, which no command line can carry")
    return text


def _script_path(target: str) -> Path:
    """The script a path names, checked: an existing ``.py`` file."""
    path = Path(_no_nul("script", target))
    try:
        if path.is_dir():
            raise LaunchError(f"{target} is a folder; give the path of a .py file in it")
        if path.suffix != ".py":
            raise LaunchError(f"{target} is not a Python file: give a workload name (nvtutorial list) or a .py path")
        if not path.is_file():
            raise LaunchError(f"no such script: {target} (from {Path.cwd()})")
        with open(path, "rb"):
            pass
    except OSError as exc:
        raise LaunchError(f"cannot read the script {target}: {exc.strerror or exc}") from None
    return path.resolve()


def _is_file(path: str) -> bool:
    try:
        return Path(path).is_file()
    except (OSError, ValueError):  # a name too long for the file system
        return False


def is_script(target: str) -> bool:
    """A target that is not a workload's name (a Python identifier) is a script's path."""
    return not str(target).isidentifier()


def prepare(target: str | os.PathLike[str], *, nproc: int = 2, backend: Backend = "auto", params: Any = None,
            args: Sequence[str] | None = None, timeout: float | None = 600.0, env: Mapping[str, Any] | None = None,
            out: str | os.PathLike[str] | None = None, output: Output = "rank0", pg_timeout: float | None = None,
            nnodes: int = 1, allow_oversubscribe: bool = False, max_restarts: int = 0) -> LaunchSpec:
    """Check everything about a run before it starts; raises :class:`LaunchError` on bad input.

    ``target`` is a workload's name or the path of a ``.py`` script.
    """
    workload = os.fspath(target) if isinstance(target, os.PathLike) else target
    if not isinstance(workload, str) or not workload:
        raise LaunchError(f"target={target!r}: give a workload name (nvtutorial list) or the path of a .py script")
    script = None
    parsed = None
    if is_script(workload) or isinstance(target, os.PathLike):
        script = _script_path(workload)
        if params:
            raise LaunchError("a script takes args=[...] (after -- on the command line), not params/--set")
        if isinstance(args, (str, bytes)) or not all(isinstance(a, str) for a in args or ()):
            raise LaunchError(f"args={args!r}: give the script's arguments as a list of strings")
        args = tuple(_no_nul("script argument", a) for a in args or ())
    else:
        if args:
            raise LaunchError(f"args={list(args)!r}: arguments are for scripts; workload {workload} takes params "
                              f"(--set KEY=VALUE)")
        try:
            module = workloads.load(workload)
            parsed = params_mod.build(module.Params, params)
        except params_mod.ParamError as exc:
            raise LaunchError(f"{workload}: {exc}") from None
        except workloads.UnknownWorkload as exc:
            hint = f"; to run the script {workload}.py, give its path" if _is_file(f"{workload}.py") else ""
            raise LaunchError(f"{exc}{hint}") from None
        for key, value in params_mod.to_strings(parsed).items():
            _no_nul(f"parameter {key}", value)
        args = ()
    _whole("nproc", nproc)
    _whole("nnodes", nnodes)
    if not isinstance(max_restarts, int) or isinstance(max_restarts, bool) or max_restarts < 0:
        raise LaunchError(f"max_restarts={max_restarts!r}: give how many times torchrun may restart the ranks "
                          f"(0 or more)")
    for name, value in (("timeout", timeout), ("pg_timeout", pg_timeout)):
        if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float))
                                  or not math.isfinite(value) or value <= 0):
            raise LaunchError(f"{name}={value!r}: give a positive number of seconds"
                              + (", or None for no deadline" if name == "timeout" else ""))
    if output not in ("rank0", "all", "none"):
        raise LaunchError(f"output={output!r}: use rank0, all or none")
    overrides = {}
    for key, value in (env or {}).items():
        if not isinstance(key, str) or not key or "=" in key or "\0" in key:
            raise LaunchError(f"bad environment variable name {key!r}")
        overrides[key] = _no_nul(f"environment variable {key}=", str(value))
    resolved = resolve_backend(backend, nproc)
    if out is None:
        stamp = time.strftime("%Y%m%d-%H%M%S")
        name = script.stem if script is not None else workload
        run_dir = runs_root() / f"{name}-{stamp}-{secrets.token_hex(3)}"
    else:
        run_dir = Path(_no_nul("out", os.fspath(out)))
    try:
        warned = guards.check_ranks(nproc * nnodes, allow_oversubscribe)
        guards.check_run_dir(run_dir)
    except guards.Refused as exc:
        raise LaunchError(str(exc)) from None
    return LaunchSpec(workload=workload, params=parsed, nproc=nproc, backend=resolved, timeout=timeout,
                      env=overrides, run_dir=run_dir, output=output, pg_timeout=pg_timeout, nnodes=nnodes,
                      script=script, args=tuple(args), warnings=tuple(warned), max_restarts=max_restarts)


def run(target: str | os.PathLike[str], *, nproc: int = 2, backend: Backend = "auto", params: Any = None,
        args: Sequence[str] | None = None, timeout: float | None = 600.0, env: Mapping[str, Any] | None = None,
        out: str | os.PathLike[str] | None = None, output: Output = "rank0", pg_timeout: float | None = None,
        nnodes: int = 1, allow_oversubscribe: bool = False, check: bool = True, max_restarts: int = 0) -> RunResult:
    """Run a workload, or a ``.py`` script, on ``nproc`` processes (per node) and return its :class:`RunResult`.

    ``target``: a workload's name (``nvtutorial list``) or a script's path; ``params``: a dict (or
    the workload's ``Params``); ``args``: the script's arguments; ``env``: variables set for this
    run only (the rest of the environment passes through); ``output``: which ranks' lines to
    show; ``pg_timeout``: the process group's collective timeout in seconds; ``nnodes``: emulated
    nodes, one torchrun agent each; ``allow_oversubscribe``: start even with more ranks than the
    cores or the memory hold (:mod:`nvtutorial.guards`); ``max_restarts``: torchrun restarts the
    ranks after a failure this many times (a rank that dies is then not the end of the run). With
    ``check`` (the default) a failed run raises :class:`RunFailed`; otherwise the result carries the error.
    """
    spec = prepare(target, nproc=nproc, backend=backend, params=params, args=args, timeout=timeout, env=env,
                   out=out, output=output, pg_timeout=pg_timeout, nnodes=nnodes,
                   allow_oversubscribe=allow_oversubscribe, max_restarts=max_restarts)
    return execute(spec, check=check)


def child_environment(spec: LaunchSpec) -> dict[str, str]:
    """The parent's environment, the run's overrides, and what the workers need to import us."""
    env = dict(os.environ)
    package_root = str(Path(__file__).resolve().parent.parent)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (package_root, env.get("PYTHONPATH", "")) if p)
    env["PYTHONUNBUFFERED"] = "1"
    env["NVTUTORIAL_LAUNCHER_PID"] = str(os.getpid())  # workers end themselves if we die
    env.setdefault("OMP_NUM_THREADS", str(max(1, guards.usable_cores() // spec.world_size)))
    if spec.backend == "gloo":
        # The CPU simulation must not see a GPU: torch code that checks torch.cuda.is_available()
        # (PowerSGD's hook synchronises the GPU) would otherwise touch it from CPU ranks.
        env["CUDA_VISIBLE_DEVICES"] = ""
    if spec.max_restarts:
        # torchrun shares its rendezvous TCPStore with the ranks (recent torch), and every attempt
        # writes the same keys: a restarted rank can read the dead attempt's address and fail to
        # connect (pytorch/pytorch#135712). One store per restart avoids it (notebook 09 shows it).
        env["TORCH_DISABLE_SHARE_RDZV_TCP_STORE"] = "1"
    env.update(spec.env)
    return env


def node_devices(nproc: int, nnodes: int, gpu_ids: Sequence[str]) -> list[list[str]]:
    """The GPUs each emulated node's ranks use: distinct GPUs while there are enough, then shared.

    Within a node the ranks need distinct GPUs (``nproc <= len(gpu_ids)``, checked before launch);
    two nodes may share one, since ``NCCL_HOSTID`` makes NCCL treat them as separate hosts.
    """
    return [[gpu_ids[(node * nproc + j) % len(gpu_ids)] for j in range(nproc)] for node in range(nnodes)]


def node_environment(spec: LaunchSpec, node: int, gpu_ids: Sequence[str] = ()) -> dict[str, str]:
    """The environment of emulated node ``node``'s agent: its host identity for NCCL and its GPUs."""
    env = child_environment(spec)
    env["NVTUTORIAL_NODE"] = str(node)
    if spec.nnodes > 1 and spec.backend == "nccl":
        if "NCCL_HOSTID" not in spec.env:
            env["NCCL_HOSTID"] = f"{socket.gethostname()}-node{node}"
        if gpu_ids and "CUDA_VISIBLE_DEVICES" not in spec.env:
            env["CUDA_VISIBLE_DEVICES"] = ",".join(node_devices(spec.nproc, spec.nnodes, gpu_ids)[node])
    return env


class _LogTail:
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


def _end_tree(procs: list[psutil.Process]) -> None:
    """SIGTERM every process (and SIGCONT a stopped one), SIGKILL those alive after :data:`KILL_GRACE_S`."""
    for p in procs:
        try:
            p.terminate()
            p.resume()  # a stopped (SIGSTOP) process acts on SIGTERM only once continued
        except psutil.Error:
            pass
    _, alive = psutil.wait_procs(procs, timeout=KILL_GRACE_S)
    for p in alive:
        try:
            p.kill()
        except psutil.Error:
            pass
    psutil.wait_procs(alive, timeout=1.0)


class _Run:
    """One run in flight: its agents, its workers, their output and what was seen of them."""

    def __init__(self, spec: LaunchSpec) -> None:
        self.spec = spec
        self.t0 = time.perf_counter()
        self.started_at = time.time()
        self.deadline: float | None = None  # set when every rank is up (ready_at)
        self.ready_at: float | None = None
        self.startup_deadline = self.t0 + spec.startup_timeout
        self.tails = {r: _LogTail(spec.run_dir / f"rank{r}.log") for r in range(spec.world_size)}
        everyone = set(range(spec.world_size))
        self.shown = everyone if spec.output == "all" else ({0} if spec.output == "rank0" else set())
        self.shown_bytes = 0
        self.progress = RunProgress()
        self.first_output: float | None = None
        self.failure_seen: float | None = None
        self.interrupted = self.terminated = self.folder_lost = False
        self.seen = diagnosis.Observed()
        self.agents: list[subprocess.Popen] = []
        self.agent_procs: list[psutil.Process] = []
        self.workers: dict[int, psutil.Process] = {}
        self.procs: list[psutil.Process] = []
        self.tree_at = 0.0
        self.folder = os.stat(spec.run_dir).st_ino

    # --- starting ---------------------------------------------------------------------------
    def start(self, port: int | None) -> None:
        """Start one torchrun agent per node (with emulated nodes, meeting on ``port``)."""
        spec = self.spec
        gpu_ids = [g.uuid for g in hardware.gpus()] if spec.nnodes > 1 and spec.backend == "nccl" else []
        self.agents, self.agent_procs = [], []
        for node, log_path in enumerate(diagnosis.agent_logs(spec)):
            log_path.parent.mkdir(parents=True, exist_ok=True)
            with open(log_path, "w") as log:
                agent = subprocess.Popen(spec.command(node, port), stdout=log, stderr=subprocess.STDOUT,
                                         stdin=subprocess.DEVNULL, env=node_environment(spec, node, gpu_ids),
                                         start_new_session=True)
            self.agents.append(agent)
            try:
                self.agent_procs.append(psutil.Process(agent.pid))
            except psutil.Error:
                pass

    # --- following ----------------------------------------------------------------------------
    def running(self) -> bool:
        return any(a.poll() is None for a in self.agents)

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
                self.progress.update(json.loads(line[len(PROGRESS_PREFIX):]))
            except (ValueError, TypeError):
                pass
            return
        if rank not in self.shown:
            return
        text = f"[rank{rank}] {line}"
        if self.shown_bytes + len(text) > MAX_SHOWN_BYTES:
            if self.shown_bytes <= MAX_SHOWN_BYTES:
                print(f"[nvtutorial] {MAX_SHOWN_BYTES >> 20} MiB of output shown: the rest is only in "
                      f"{self.spec.run_dir / 'rank*.log'}", flush=True)
                self.shown_bytes = MAX_SHOWN_BYTES + 1
            return
        self.shown_bytes += len(text) + 1
        print(text, flush=True)

    def track(self) -> None:
        """Record the workers (from their pid files) and notice one that ended without a result."""
        run_dir = self.spec.run_dir
        for rank in range(self.spec.world_size):
            proc = self.workers.get(rank)
            if proc is None or (self.spec.max_restarts and not _alive(proc)):  # a restarted rank: a new pid
                try:
                    fresh = psutil.Process(int((run_dir / f"rank{rank}.pid").read_text().strip()))
                    if fresh.create_time() >= self.started_at - 1 and (proc is None or fresh.pid != proc.pid):
                        self.workers[rank] = fresh
                        self.seen.vanished.pop(rank, None)
                        continue
                except (ValueError, psutil.Error, OSError):
                    pass
            if proc is not None and rank not in self.seen.vanished and not _alive(proc) and not any(
                    (run_dir / f"rank{rank}.{kind}").exists() for kind in ("json", "error.json")):
                self.seen.vanished[rank] = time.time()
        if time.perf_counter() - self.tree_at > 2.0:  # a scan of the process table: kept for the clean-up
            self.procs = self.tree() or self.procs
            self.tree_at = time.perf_counter()

    def tree(self) -> list[psutil.Process]:
        """Every live process of the run: the agents, the workers, and their children."""
        found: dict[int, psutil.Process] = {}
        for root in [*self.agent_procs, *self.workers.values()]:
            if root.pid in found or not _alive(root):  # a worker is usually found under its agent
                continue
            try:
                for proc in [root, *root.children(recursive=True)]:
                    found[proc.pid] = proc
            except psutil.Error:
                continue
        return list(found.values())

    def watch(self) -> None:
        """Follow the run until its agents exit, a rank fails, the deadline passes or the folder vanishes."""
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
            if self.failure_seen is None and (lost or any(a.poll() not in (None, 0) for a in self.agents)):
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

    def all_ready(self) -> bool:
        """Whether every rank has said it is up (``rank{R}.ready``, written by the worker runtime)."""
        return all((self.spec.run_dir / f"rank{r}.ready").exists() for r in range(self.spec.world_size))

    def _pause(self, seconds: float) -> None:
        """Sleep up to ``seconds``, waking as soon as an agent exits (a finished run is noticed at once)."""
        waiting = next((a for a in self.agents if a.poll() is None), None)
        if waiting is not None:
            try:
                waiting.wait(timeout=seconds)
            except subprocess.TimeoutExpired:
                pass

    def port_taken(self) -> bool:
        """Whether node 0 could not host the rendezvous because its port was taken meanwhile."""
        if self.spec.nnodes == 1 or self.workers or self.agents[0].poll() in (None, 0):
            return False
        text = "\n".join(diagnosis.tail(diagnosis.agent_logs(self.spec)[0], 200))
        return "EADDRINUSE" in text or "ddress already in use" in text

    def dump_stacks(self) -> None:
        """Ask every worker to print its Python stacks into its log (faulthandler on SIGUSR1)."""
        self.track()
        signalled = False
        for rank, p in self.workers.items():
            try:
                if p.status() == psutil.STATUS_STOPPED:
                    self.seen.stopped.add(rank)
                    continue
                p.send_signal(signal.SIGUSR1)
                signalled = True
            except psutil.Error:
                pass
        if signalled:
            time.sleep(0.5)

    # --- ending -------------------------------------------------------------------------------
    def end(self) -> None:
        """End whatever of the run is still alive, wait for the agents, show the last output."""
        ending = self.running() or self.interrupted or self.seen.timed_out or self.folder_lost \
            or self.failure_seen is not None
        left = self.tree() if ending else []
        left += [p for p in self.procs if p.pid not in {q.pid for q in left} and _alive(p)]
        if left:
            _end_tree(left)
        for agent in self.agents:
            agent.wait()
        self.pump(drain=True)
        failed = self.seen.timed_out or self.folder_lost or self.failure_seen is not None or self.returncode != 0
        self.progress.close("interrupted" if self.interrupted else "failed" if failed else "done")

    @property
    def returncode(self) -> int:
        codes = [a.returncode for a in self.agents]
        return next((c for c in codes if c), 0)


def _alive(proc: psutil.Process) -> bool:
    try:
        return proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def _make_run_dir(spec: LaunchSpec) -> None:
    """Create the run folder and clear what an earlier run left in it; a failure is a :class:`LaunchError`."""
    try:
        spec.run_dir.mkdir(parents=True, exist_ok=True)
        stale = [spec.run_dir / "result.json", *spec.run_dir.glob("rank*.*"), *spec.run_dir.glob("node*/agent.log")]
        for path in stale:
            path.unlink(missing_ok=True)
    except OSError as exc:
        raise LaunchError(f"cannot make the run folder {spec.run_dir}: {exc.strerror or exc}; use --out with a folder "
                          f"you can write") from None


def execute(spec: LaunchSpec, check: bool = True) -> RunResult:
    """Start a prepared run, follow it to the end, collect and save its result."""
    _make_run_dir(spec)
    for warning in spec.warnings:
        print(warning, file=sys.stderr, flush=True)
    run = _Run(spec)
    previous_sigterm = _raise_on_sigterm()
    try:
        for attempt in range(PORT_ATTEMPTS):
            port = _free_port() if spec.nnodes > 1 else None
            run.start(port)
            run.watch()
            if attempt + 1 == PORT_ATTEMPTS or not run.port_taken():
                break
            run.end()
            run.failure_seen = None
            print(f"[nvtutorial] the rendezvous port {port} was taken by another process: trying another",
                  file=sys.stderr, flush=True)
    except KeyboardInterrupt:
        run.interrupted = True
    except _Terminated:
        run.interrupted = run.terminated = True
    finally:
        run.end()
        if previous_sigterm is not None:
            signal.signal(signal.SIGTERM, previous_sigterm)
    wall = time.perf_counter() - run.t0
    if spec.max_restarts and run.returncode == 0 and not run.interrupted:
        for stale in spec.run_dir.glob("rank*.error.json"):  # errors of attempts that torchrun restarted
            stale.replace(stale.with_name(stale.name.replace(".error.json", ".error.earlier.json")))
    for leftover in spec.run_dir.glob(".rank*.tmp"):  # a rank killed (SIGKILL) while it wrote a result
        leftover.unlink(missing_ok=True)
    result = diagnosis.collect(spec, run.returncode, wall, run.first_output)
    result.ready_s = None if run.ready_at is None else run.ready_at - run.t0
    if run.interrupted:
        result.error = {"type": "SIGTERM" if run.terminated else "KeyboardInterrupt",
                        "message": "interrupted by the caller; every process of the run was ended"}
        _save(result)
        print(f"interrupted: every process of {spec.workload} was ended ({spec.run_dir})", file=sys.stderr)
        if run.terminated:
            raise SystemExit(128 + signal.SIGTERM)
        raise KeyboardInterrupt
    if run.folder_lost:
        message = (f"the run folder {spec.run_dir} was deleted (or replaced) while the run was in flight; every "
                   f"process of the run was ended and its logs are lost. Leave a run's folder alone until it ends.")
        result.error = {"type": "RunFolderLost", "message": message}
        result.returncode = result.returncode or 1
        failure = diagnosis.Failure(message, exc_type="RunFolderLost")
    else:
        failure = diagnosis.diagnose(spec, result, run.seen)
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
    if failure is not None and check:
        error_class = RunTimedOut if failure.timed_out else RunFailed
        raise error_class(failure.message, result, rank=failure.rank, exc_type=failure.exc_type,
                          traceback=failure.traceback)
    return result


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
