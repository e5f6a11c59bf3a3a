"""A run checked before anything starts, and the ``torchrun`` command lines it stands for.

:func:`prepare` turns what a notebook, the CLI or a lab asks for into a :class:`LaunchSpec`, or raises
:class:`LaunchError` naming the bad value and the fix, before any process starts: the target (a
workload's name or a script's path), its parameters, the numbers of ranks and nodes, the backend, the
deadlines, the environment overrides, the run folder, and what the machine can hold
(:mod:`nvtutorial.launch.guards`). :meth:`LaunchSpec.command` is the literal ``torchrun`` the launcher runs when the
run does not start warm; the command a learner would type for the same run, with the variables it sets, is
:func:`nvtutorial.launch.runner.torchrun_line` (it needs the rank environment's rule, which stands on this module).
"""

from __future__ import annotations

import dataclasses
import math
import os
import re
import secrets
import shlex
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

from nvtutorial import params as params_mod
from nvtutorial import workloads
from nvtutorial.launch import guards
from nvtutorial.machine import hardware
from nvtutorial.results import RunResult

Backend = Literal["auto", "nccl", "gloo"]
Output = Literal["rank0", "all", "none"]
Launcher = Literal["auto", "torchrun"]

STARTUP_TIMEOUT_S = 300.0
"""How long the ranks may take to come up (interpreters, imports, rendezvous) before the run counts as
hung. The run's own ``timeout`` counts from the moment every rank is up, so a slow start-up on a busy
machine never eats a short deadline, and a hang is caught where it happens."""


class LaunchError(ValueError):
    """Bad input, found before anything was launched. The message names the accepted values."""


class RunFailed(RuntimeError):
    """A run ended badly. ``rank``, ``exc_type`` and ``log_tail`` say where and why."""

    def __init__(
        self,
        message: str,
        result: RunResult,
        rank: int | None = None,
        exc_type: str | None = None,
        traceback: str | None = None,
    ) -> None:
        super().__init__(message)
        self.result = result
        self.rank = rank
        self.exc_type = exc_type
        self.traceback = traceback

    @property
    def log_tail(self) -> list[str]:
        return self.result.log_tail


class RunInterrupted(KeyboardInterrupt):
    """The caller stopped a run in flight (a notebook's Stop, Ctrl-C): every process of it was ended; its folder
    is kept. A notebook shows the message alone, without the launcher's frames."""

    def __init__(self, message: str, result: RunResult) -> None:
        super().__init__(message)
        self.result = result

    def _render_traceback_(self) -> list[str]:
        return [f"KeyboardInterrupt: {line}" if i == 0 else line for i, line in enumerate(str(self).splitlines())]


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
    launcher: Launcher = "auto"
    """``auto``: ranks forked from the warm interpreter where the run allows it (one node, no restarts),
    else ``torchrun``; ``torchrun``: the literal ``torchrun`` command, always."""

    @property
    def torchrun_only(self) -> str | None:
        """Why this run must start with the literal ``torchrun`` (None: it may start warm)."""
        if self.launcher == "torchrun":
            return "launcher='torchrun' was asked for"
        if self.nnodes > 1:
            return "emulated nodes meet in torchrun's c10d rendezvous"
        if self.max_restarts:
            return "restarts are torchrun's (--max-restarts)"
        return None

    @property
    def world_size(self) -> int:
        return self.nproc * self.nnodes

    def program(self) -> list[str]:
        """What each rank runs: torchrun's arguments after its own options."""
        if self.script is not None:
            return [
                "-m",
                "nvtutorial.launch.runtime_script",
                "--out",
                str(self.run_dir),
                "--backend",
                self.backend,
                "--capture",
                "--",
                str(self.script),
                *self.args,
            ]
        pg = ["--pg-timeout", str(self.pg_timeout)] if self.pg_timeout is not None else []
        run = ["--out", str(self.run_dir), "--backend", self.backend, "--capture", *pg]
        return workload_program(self.workload, self.params, *run)

    def command(self, node: int = 0, port: int | None = None) -> list[str]:
        """The torchrun command of ``node`` (with emulated nodes, its rendezvous on 127.0.0.1:``port``)."""
        if self.nnodes > 1 and port is None:
            raise ValueError("emulated nodes meet on a rendezvous port: give port=")
        cmd = [sys.executable, "-m", "torch.distributed.run"]
        # c10d numbers the nodes itself (torchrun ignores --node-rank with it)
        endpoint = f"127.0.0.1:{port}" if self.nnodes > 1 else None
        cmd += torchrun_options(self.nproc, self.nnodes, endpoint, self.run_dir.name, self.max_restarts)
        if self.nnodes > 1:  # node 0 hosts the rendezvous store: a taken port then fails fast instead of hanging
            cmd += ["--rdzv-conf", f"is_host={int(node == 0)}"]
        # torchrun's own files (each attempt's error files) in the run's folder, not a torchelastic_* folder that
        # it would make in the system's temp folder and never remove
        cmd += ["--log-dir", str(self.run_dir / "torchelastic")]
        return cmd + ["--monitor-interval", "0.1", *self.program()]

    def cluster_commands(self, endpoint: str = "$HEAD_NODE:29400", job_id: str = "nvtutorial") -> list[str]:
        """The ``torchrun`` line each node of a real cluster would run for this job, node 0 first.

        ``endpoint`` is node 0's address and a port open between the nodes (``$HEAD_NODE`` is left
        for the shell to expand). The lines are the same on every node: c10d rendezvous numbers
        the nodes itself, by sorting the participants (host name or address, then the agent's pid), not
        by when they join (``--node-rank`` is for static rendezvous only). The emulation on
        one host runs the same lines, with the rendezvous on 127.0.0.1 and ``NCCL_HOSTID`` set
        per node.
        """
        program = (
            [self.workload, *self.args] if self.script is not None else workload_program(self.workload, self.params)
        )
        words = ["torchrun", *torchrun_options(self.nproc, self.nnodes, endpoint, job_id, self.max_restarts), *program]
        line = " ".join(w if w == endpoint else shlex.quote(w) for w in words)
        return [line] * self.nnodes  # the same command line on every node


def torchrun_options(
    nproc: int, nnodes: int = 1, endpoint: str | None = None, rdzv_id: str = "", max_restarts: int = 0
) -> list[str]:
    """torchrun's options for ``nnodes`` nodes of ``nproc`` ranks: ``--standalone`` without an ``endpoint``, else a
    c10d rendezvous at ``endpoint`` named ``rdzv_id``; ``--max-restarts`` where there are restarts."""
    if endpoint is None:
        words = ["--standalone", "--nproc-per-node", str(nproc)]
    else:
        words = ["--nnodes", str(nnodes), "--nproc-per-node", str(nproc)]
        words += ["--rdzv-backend", "c10d", "--rdzv-endpoint", endpoint, "--rdzv-id", rdzv_id]
    return words + (["--max-restarts", str(max_restarts)] if max_restarts else [])


def workload_program(workload: str, params: Any, *options: str) -> list[str]:
    """What torchrun starts for a workload: its module, ``options``, then ``--set KEY=VALUE`` for each of ``params``
    (a ``Params`` instance, or ``KEY: VALUE`` strings)."""
    return ["-m", workloads.module(workload), *options, *params_mod.set_args(params)]


COURSE_SET = ("CUDA_VISIBLE_DEVICES", "OMP_NUM_THREADS", "TORCH_DISABLE_SHARE_RDZV_TCP_STORE", "NCCL_HOSTID")
"""Variables the launcher sets for a run (the CPU simulation hides the GPUs, a thread count per rank, one store per
restart, a host identity per emulated node): a typed command must set them too."""


def given_params(params: Any) -> dict[str, str]:
    """The parameters a run must name on its command line (``KEY=VALUE`` strings, in declaration order): those whose
    value differs from the workload's default (the workload takes its default for any it is not given)."""
    defaults = {
        f.name: f.default if f.default_factory is dataclasses.MISSING else f.default_factory()
        for f in dataclasses.fields(params)
    }
    shown = params_mod.to_strings(params)
    return {k: v for k, v in shown.items() if defaults.get(k, dataclasses.MISSING) != getattr(params, k)}


def run_folder(name: str) -> Path:
    """A new run folder's path under the runs root, named as the launcher names its own
    (``<name>-<date>-<time>-<random>``, :data:`RUN_NAME`): for a run's ``out=`` when its files (checkpoints, traces)
    must be named before it starts, so that they live, and are pruned, with it. Not created."""
    return runs_root() / f"{name}-{time.strftime('%Y%m%d-%H%M%S')}-{secrets.token_hex(3)}"


KEEP_RUNS = 50
"""Finished run folders kept under the runs root (``$NVTUTORIAL_KEEP_RUNS``); older ones go when a new run starts."""
QUIET_S = 600.0
"""A finished run folder with anything in it written in the last this many seconds is never removed."""
FILES_MARKER = ".nvtutorial-files"
"""The file :func:`files_folder` leaves in a folder of files made for a run before it starts (checkpoints): it
holds no ``result.json`` of its own, and the marker makes it count as a finished run for :func:`prune_runs`."""
RUN_NAME = re.compile(r"^[\w.-]+-\d{8}-\d{6}-[0-9a-f]{6}$")
"""The name the launcher gives a run folder: ``<workload or script>-<date>-<time>-<random>``."""


def runs_root() -> Path:
    """Where run folders go: ``$NVTUTORIAL_RUNS_DIR``, else ``.runs`` in the working folder (hidden: it is not the
    first thing JupyterLab's file browser shows, and it holds at most :data:`KEEP_RUNS` finished runs)."""
    return Path(os.environ.get("NVTUTORIAL_RUNS_DIR", ".runs"))


def files_folder(name: str) -> Path:
    """A new folder under the runs root for files a run must find before it starts (its checkpoints: a restarted
    job must find its own, a fresh run must not find an old one), named as :func:`run_folder` names a run's, created,
    with :data:`FILES_MARKER` in it: :func:`prune_runs` and ``nvtutorial clean`` remove it as a finished run once
    it is beyond the newest :data:`KEEP_RUNS` and nothing in it has been written for :data:`QUIET_S` seconds."""
    folder = run_folder(name)
    folder.mkdir(parents=True)
    (folder / FILES_MARKER).write_text(
        "Files made for a run before it started (checkpoints). This marker lets `nvtutorial clean` and the "
        "launcher's pruning remove the folder with the finished runs.\n"
    )
    return folder


def finished_runs(root: Path | None = None) -> list[Path]:
    """The run folders the launcher made under ``root`` and that ended (a ``result.json``), and the folders of a
    run's files (:func:`files_folder`, with :data:`FILES_MARKER`), oldest first. A run in flight has neither."""
    root = runs_root() if root is None else root
    try:
        found = [
            p
            for p in root.iterdir()
            if p.is_dir() and RUN_NAME.match(p.name) and ((p / "result.json").exists() or (p / FILES_MARKER).exists())
        ]
    except OSError:
        return []
    return sorted(found, key=lambda p: p.stat().st_mtime)


def last_written(folder: Path) -> float:
    """The newest modification time of the folder and of everything under it (seconds since the epoch)."""
    times = [folder.stat().st_mtime]
    for entry in folder.rglob("*"):
        try:
            times.append(entry.lstat().st_mtime)
        except OSError:  # removed while we looked
            continue
    return max(times)


def prune_runs(keep: int | None = None, root: Path | None = None) -> tuple[int, int]:
    """Remove finished run folders (:func:`finished_runs`) beyond the newest ``keep`` (default
    ``$NVTUTORIAL_KEEP_RUNS`` or :data:`KEEP_RUNS`); a folder with anything in it written in the last
    :data:`QUIET_S` seconds stays. (folders removed, bytes freed)."""
    import shutil

    if keep is None:
        text = os.environ.get("NVTUTORIAL_KEEP_RUNS", "")
        keep = int(text) if text.isdigit() else KEEP_RUNS
    runs = finished_runs(root)
    old = runs[: max(0, len(runs) - keep)]
    removed = freed = 0
    for folder in old:
        if time.time() - last_written(folder) < QUIET_S:
            continue
        size = sum(f.stat().st_size for f in folder.rglob("*") if f.is_file())
        shutil.rmtree(folder, ignore_errors=True)
        removed, freed = removed + 1, freed + size
    return removed, freed


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
            if not isinstance(node, (ast.AnnAssign, ast.Assign)):
                continue
            target = node.target if isinstance(node, ast.AnnAssign) else node.targets[0]
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
        raise LaunchError(
            f"backend nccl with {nproc} processes needs {nproc} GPUs, but {usable} are visible; "
            f"use --nproc {usable} or --backend gloo"
        )
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


def _script_args(params: Any, args: Sequence[str] | None) -> tuple[str, ...]:
    """A script's arguments, checked (a script takes no ``params``)."""
    if params:
        raise LaunchError("a script takes args=[...] (after -- on the command line), not params/--set")
    if isinstance(args, (str, bytes)) or not all(isinstance(a, str) for a in args or ()):
        raise LaunchError(f"args={args!r}: give the script's arguments as a list of strings")
    return tuple(_no_nul("script argument", a) for a in args or ())


def _workload_params(workload: str, params: Any, args: Sequence[str] | None) -> Any:
    """A workload's ``Params`` built from ``params``, checked (a workload takes no ``args``)."""
    if args:
        raise LaunchError(
            f"args={list(args)!r}: arguments are for scripts; workload {workload} takes params (--set KEY=VALUE)"
        )
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
    return parsed


def _seconds(name: str, value: Any) -> None:
    """A deadline: a positive, finite number of seconds, or None."""
    if value is not None and (
        isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0
    ):
        raise LaunchError(
            f"{name}={value!r}: give a positive number of seconds"
            + (", or None for no deadline" if name == "timeout" else "")
        )


def _env_overrides(env: Mapping[str, Any] | None) -> dict[str, str]:
    """The run's environment variables, checked, their values as strings."""
    overrides = {}
    for key, value in (env or {}).items():
        if not isinstance(key, str) or not key or "=" in key or "\0" in key:
            raise LaunchError(f"bad environment variable name {key!r}")
        overrides[key] = _no_nul(f"environment variable {key}=", str(value))
    return overrides


def prepare(
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
    max_restarts: int = 0,
    launcher: Launcher | None = None,
) -> LaunchSpec:
    """Check everything about a run before it starts; raises :class:`LaunchError` on bad input.

    ``target`` is a workload's name or the path of a ``.py`` script; ``launcher`` (default: the
    ``NVTUTORIAL_LAUNCHER`` variable, else ``auto``) forces the literal ``torchrun`` with ``"torchrun"``.
    """
    workload = os.fspath(target) if isinstance(target, os.PathLike) else target
    if not isinstance(workload, str) or not workload:
        raise LaunchError(f"target={target!r}: give a workload name (nvtutorial list) or the path of a .py script")
    if is_script(workload) or isinstance(target, os.PathLike):
        script, parsed, args = _script_path(workload), None, _script_args(params, args)
    else:
        script, parsed, args = None, _workload_params(workload, params, args), ()
    _whole("nproc", nproc)
    _whole("nnodes", nnodes)
    if not isinstance(max_restarts, int) or isinstance(max_restarts, bool) or max_restarts < 0:
        raise LaunchError(
            f"max_restarts={max_restarts!r}: give how many times torchrun may restart the ranks (0 or more)"
        )
    _seconds("timeout", timeout)
    _seconds("pg_timeout", pg_timeout)
    if launcher is None:
        launcher = os.environ.get("NVTUTORIAL_LAUNCHER") or "auto"  # type: ignore[assignment]
    if launcher not in ("auto", "torchrun"):
        raise LaunchError(f"launcher={launcher!r}: use auto (warm ranks where possible) or torchrun")
    if output not in ("rank0", "all", "none"):
        raise LaunchError(f"output={output!r}: use rank0, all or none")
    overrides = _env_overrides(env)
    resolved = resolve_backend(backend, nproc)
    if out is None:
        run_dir = run_folder(script.stem if script is not None else workload)
    else:
        run_dir = Path(_no_nul("out", os.fspath(out)))
    try:
        warned = guards.check_ranks(nproc * nnodes, allow_oversubscribe)
        guards.check_run_dir(run_dir)
    except guards.Refused as exc:
        raise LaunchError(str(exc)) from None
    return LaunchSpec(
        workload=workload,
        params=parsed,
        nproc=nproc,
        backend=resolved,
        timeout=timeout,
        env=overrides,
        run_dir=run_dir,
        output=output,
        pg_timeout=pg_timeout,
        nnodes=nnodes,
        script=script,
        args=tuple(args),
        warnings=tuple(warned),
        max_restarts=max_restarts,
        launcher=launcher,
    )
