"""``%%ranks``: run a notebook cell on N real ranks whose process group is already set up.

In a notebook::

    %load_ext nvtutorial.teach.ranks
    %ranks start --nproc 2                 # optional: the first %%ranks cell starts 2 ranks itself

    %%ranks
    t = torch.ones(3, device=device) * (rank + 1)
    dist.all_reduce(t)                     # runs on both ranks at once
    print(rank, t)                         # -> [rank0] 0 tensor([3., 3., 3.]) / [rank1] 1 tensor(...)

Each rank is a persistent Python process: its variables live on from cell to cell, and ``rank``,
``world_size``, ``local_rank``, ``device``, ``backend``, ``dist`` and ``torch`` are defined
before the first cell. The process group is created before the first cell runs:
``init_process_group`` with NCCL on GPUs (``torch.cuda.set_device(local_rank)`` and
``device_id=``) or gloo on the CPU, where the ranks see no GPU (``CUDA_VISIBLE_DEVICES=""``).
The notebook kernel itself never imports torch for this, so it never initialises CUDA. A cell
is plain Python (no magics, no ``!`` commands), run the same on every rank; the value of its last
expression is printed, as Jupyter shows it. On GPUs the ranks run with
``TORCH_NCCL_ASYNC_ERROR_HANDLING=0`` (unless ``--env`` says otherwise), as torch asks of code that
aborts a process group itself.

Commands (``%ranks --help`` lists the options)::

    %ranks start [--nproc 2] [--backend auto|nccl|gloo] [--timeout 60] [--env KEY=VALUE ...]
    %ranks stop | restart [options of start] | status
    %ranks pull EXPR                       # [value on rank 0, value on rank 1]; tensors as CPU copies
    %%ranks [--timeout SECONDS] [--rank 0,1]

From Python (checkers, tests): :func:`configure` (settings for the next start), :func:`start`,
:func:`stop`, :func:`run_code` (every rank's outcome, never raises for a rank's failure),
:func:`pull`, :func:`push`, :func:`status`.

What a cell shows:

- Each rank's output arrives while the cell runs, line by line, labelled ``[rank0]``, ``[rank1]``.
- An exception on a rank shows that rank's traceback, names the ranks that failed, and makes the
  cell fail (so papermill sees the error). When one rank fails, the others get
  :data:`~nvtutorial.teach._ranks_pool.FAILURE_GRACE_S` to finish, then are stopped like a hang.
- A hang ends at the deadline (``--timeout``, 60 s unless changed; 0 means none): each stuck
  rank's Python stack is shown, then the ranks are stopped as below.
- Stopping (the notebook's interrupt, or the deadline) sends SIGINT to the running ranks: plain
  Python stops at once and everything is kept (with NCCL, a collective a rank queued before it
  stopped may still wait for its peers: the message says so). A rank blocked in native code that
  SIGINT cannot interrupt (a gloo collective; with NCCL, a wait for the GPU such as ``.item()``) is
  freed by aborting the process group on every rank, which is then created again: variables are kept, objects tied to
  the old group (a DDP model) must be rebuilt. If a
  rank still does not stop, every rank is ended and the next cell starts new ones: variables are
  lost. The cell says which of these happened.
- The ranks end with ``%ranks stop`` and with the kernel (shut down, restarted or killed: each
  rank watches its command pipe and its parent), and take any process they started with them.

How it is built, and why not on ipyparallel: a small pool of its own
(:mod:`nvtutorial.teach._ranks_pool` and ``_ranks_result`` in the kernel,
:mod:`nvtutorial.teach._ranks_worker` on each rank). Each rank is a process of the course's process
layer (:mod:`nvtutorial.launch`): forked from the warm interpreter that has torch imported (started
with ``python`` where it cannot be, and the start message says why), with torchrun's variables
(``RANK``, ``LOCAL_RANK``, ``WORLD_SIZE``, ``MASTER_ADDR``/``MASTER_PORT``, ...) from the launcher's one
rule; the kernel sends commands down a pipe and reads replies and output from pipes. ipyparallel (Jupyter's engines
and ``%%px``) would need a
controller process with a heartbeat (slow cold start), a launcher subclass for per-rank
environments, pinned engine ids, a new output layer (``%%px`` re-sends all output on each update),
its own interrupt handling (``%%px`` returns before the engines answer) and parent watching:
most of this module, plus a controller. ``benchmarks/ranks_bench.py`` measured both on a busy
2-core CPU VM (``benchmarks/results/``), medians, gloo, 2 ranks: a warm ``%%ranks`` cell 19 ms
through a kernel (its own round trip is 12 ms of that), ``run_code`` 0.5 ms against 28 ms for an
ipyparallel execute; the first cell 10.5 s against 27.5 s for a bare ``torchrun`` doing the same
and 21.4 s for tuned ipyparallel engines.
"""

from __future__ import annotations

import argparse
import atexit
import importlib.util
import os
import re
import shlex
import sys
import time
from typing import Any

from nvtutorial.i18n import _, tr
from nvtutorial.teach._ranks_pool import Pool
from nvtutorial.teach._ranks_result import (
    CellResult,
    RankFailed,
    RankOutcome,
    RanksCommandInterrupted,
    RanksError,
    RanksInterrupted,
    RanksStartInterrupted,
    RanksTimeout,
    exit_text,
)

__all__ = [
    "CellResult",
    "RankFailed",
    "RankOutcome",
    "RanksCommandInterrupted",
    "RanksError",
    "RanksInterrupted",
    "RanksStartInterrupted",
    "RanksTimeout",
    "RanksUsageError",
    "configure",
    "load_ipython_extension",
    "pull",
    "push",
    "restart",
    "run_code",
    "start",
    "status",
    "stop",
]

DEFAULT_NPROC = 2
DEFAULT_TIMEOUT_S = 60.0


class RanksUsageError(RanksError, ValueError):
    """Bad input, found before anything started; the message names the cause and the fix."""


_pool: Pool | None = None
_settings: dict[str, Any] = {
    "nproc": DEFAULT_NPROC,
    "backend": "auto",
    "timeout": DEFAULT_TIMEOUT_S,
    "env": {},
    "pg_timeout": None,
}
_atexit_registered = False
_pulled: dict[tuple[str, tuple[int, ...] | None], tuple[list[Any], float]] = {}
"""What :func:`pull` brought from the current group's ranks, and when: a cell that grades from it still can
after the ranks were stopped (a later cell's ``%ranks stop``, as Run All runs it). Cleared when new ranks start."""
_ended: dict[str, Any] = {"cells": 0, "at": None}
"""Cells run on ranks that have been stopped since, and when they were: new ranks say that their names are gone."""


# ----- settings and backend ------------------------------------------------------------------
def _torch_cuda_build() -> str | None:
    """torch's CUDA version (``None`` for a CPU build), read without importing torch (as the launcher does)."""
    from nvtutorial import launch

    if importlib.util.find_spec("torch") is None:
        raise RanksUsageError("torch is not installed in this kernel's environment: install it (make install)")
    return launch.torch_cuda()


def resolve_backend(backend: str, nproc: int) -> str:
    """``auto`` is nccl when ``nproc`` GPUs are visible and torch has CUDA, else gloo on the CPU: the
    launcher's rule (:func:`nvtutorial.launch.resolve_backend`), its refusals raised as usage errors."""
    from nvtutorial import launch

    if backend != "gloo":
        _torch_cuda_build()  # a kernel without torch gets the one-line usage error
    try:
        return launch.resolve_backend(backend, nproc)
    except launch.LaunchError as exc:
        raise RanksUsageError(str(exc)) from None


def _where(resolved: str, backend: str, nproc: int) -> str:
    """Where the ranks run, and on a machine with GPUs why gloo ranks do not use them (the launcher hides the GPUs
    from gloo ranks: ``CUDA_VISIBLE_DEVICES=""``)."""
    from nvtutorial import launch
    from nvtutorial.machine import hardware

    if resolved == "nccl":
        return _("GPUs, NCCL")
    have = hardware.gpu_count() if launch.torch_cuda() else 0
    if not have:
        return _("CPU, gloo; no GPU visible to a CUDA build of torch")
    gpus = (
        _("this machine's {have} GPUs hidden from them", have=have)
        if have > 1
        else _("this machine's {have} GPU hidden from them", have=have)
    )
    if backend == "gloo":
        return _("CPU, gloo as asked; {gpus}", gpus=gpus)
    return _("CPU, gloo: {nproc} ranks need {nproc} GPUs for NCCL; {gpus}", nproc=nproc, gpus=gpus)


def _check(nproc: Any, timeout: Any, env: Any, pg_timeout: Any) -> dict[str, str]:
    if not isinstance(nproc, int) or isinstance(nproc, bool) or nproc < 1:
        raise RanksUsageError(f"nproc={nproc!r}: the number of ranks must be a whole number of at least 1")
    for name, value in (("timeout", timeout), ("pg_timeout", pg_timeout)):
        if value is not None and (not isinstance(value, (int, float)) or value < 0):
            raise RanksUsageError(f"{name}={value!r}: give seconds (a number >= 0; 0 or None: no deadline)")
    out = {}
    for key, value in dict(env or {}).items():
        if not isinstance(key, str) or not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", key):
            raise RanksUsageError(f"bad environment variable name {key!r}: use letters, digits and _")
        out[key] = str(value)
    return out


# ----- the Python API ----------------------------------------------------------------------------
def start(
    nproc: int = DEFAULT_NPROC,
    backend: str = "auto",
    timeout: float | None = DEFAULT_TIMEOUT_S,
    env: dict[str, Any] | None = None,
    pg_timeout: float | None = None,
    quiet: bool = False,
) -> Pool:
    """Start ``nproc`` ranks with their process group (stopping a running group first).

    ``timeout``: a cell's default deadline in seconds (0 or None: none); ``env``: variables for
    the ranks only; ``pg_timeout``: the process group's own collective timeout.
    """
    global _pool, _atexit_registered
    checked_env = _check(nproc, timeout, env, pg_timeout)
    resolved = resolve_backend(backend, nproc)
    stop()
    _settings.update(nproc=nproc, backend=backend, timeout=timeout, env=checked_env, pg_timeout=pg_timeout)
    pool = Pool(nproc, resolved, checked_env, pg_timeout, cold=os.environ.get("NVTUTORIAL_LAUNCHER") == "torchrun")
    pool.show = not quiet
    if not _atexit_registered:
        atexit.register(stop)
        _atexit_registered = True
    if not quiet:  # said at once: a start takes seconds (the first one waits for the warm interpreter's torch)
        print(
            _(
                "%ranks: starting {nproc} ranks ({where}){waits}",
                nproc=nproc,
                where=_where(resolved, backend, nproc),
                waits=_waits_for_torch(pool),
            ),
            flush=True,
        )
    try:
        pool.start()
    except KeyboardInterrupt:  # Stop while the ranks start: Pool.start ended them all
        raise RanksStartInterrupted(nproc) from None
    _pool = pool
    _pulled.clear()
    if not quiet:
        how = (
            _("started cold: {reason}", reason=pool.cold_reason)
            if pool.cold_reason
            else _("cold")
            if pool.cold
            else _("forked warm")
        )
        print(
            _(
                "%ranks: {nproc} ranks ready ({how}) in {seconds:.1f} s; pids {pids}",
                nproc=nproc,
                how=how,
                seconds=pool.start_s,
                pids=pool.pids(),
            ),
            flush=True,
        )
        if _ended["cells"]:
            print(
                _(
                    "%ranks: these are new ranks: what the {cells} cell(s) run on the earlier ones defined is gone; "
                    "run those %%ranks cells again, from the first, before a cell that uses their names",
                    cells=_ended["cells"],
                ),
                flush=True,
            )
    _ended["cells"] = 0
    return pool


def _waits_for_torch(pool: Pool) -> str:
    """What the start waits for first, when the warm interpreter is still importing torch."""
    from nvtutorial.launch import warm

    if pool.cold or warm.supported() is not None:
        return ""
    interpreter = warm.get(start=False)
    if interpreter is not None and interpreter.hello is None and interpreter.dead is None:
        return _(": first the warm interpreter finishes importing torch (once per kernel)")
    return ""


def configure(
    nproc: int | None = None,
    backend: str | None = None,
    timeout: float | None | str = "keep",
    env: dict[str, Any] | None = None,
    pg_timeout: float | None | str = "keep",
) -> dict[str, Any]:
    """Set what the next start uses (the first ``%%ranks`` cell starts the ranks); returns the settings."""
    changes: dict[str, Any] = {k: v for k, v in (("nproc", nproc), ("backend", backend), ("env", env)) if v is not None}
    changes.update({k: v for k, v in (("timeout", timeout), ("pg_timeout", pg_timeout)) if v != "keep"})
    new = {**_settings, **changes}
    new["env"] = _check(new["nproc"], new["timeout"], new["env"], new["pg_timeout"])
    if new["backend"] not in ("auto", "nccl", "gloo"):
        raise RanksUsageError(f"unknown backend {new['backend']!r}: use auto, nccl or gloo")
    _settings.update(new)
    return dict(_settings)


def _running() -> bool:
    return _pool is not None and _pool.running


def stop() -> None:
    """End every rank (and whatever it started). Does nothing when no group runs."""
    global _pool
    pool, _pool = _pool, None
    if pool is not None:
        if pool.running:
            _ended["cells"] += pool.cells
            _ended["at"] = time.time()
        pool.stop()


def restart(**changes: Any) -> Pool:
    """Stop the group and start a new one, with the same settings unless ``changes`` says otherwise."""
    settings = {**_settings, **changes}
    return start(**settings)


def _group(quiet: bool) -> Pool:
    """The running group; started with the current settings if there is none or a rank has exited."""
    if _pool is not None and _pool.running:
        dead = _pool.dead()
        if not dead:
            return _pool
        codes = ", ".join(f"rank {w.rank} ({tr(exit_text(w.proc.poll()))})" for w in dead)
        print(
            _("%ranks: {ranks} had exited: starting new ranks (every rank's variables are lost)", ranks=codes),
            file=sys.stderr,
        )
    return start(**_settings, quiet=quiet)


def _parse_ranks(ranks: Any, nproc: int) -> list[int] | None:
    if ranks is None:
        return None
    if isinstance(ranks, str):
        try:
            ranks = [int(r) for r in ranks.split(",") if r.strip()]
        except ValueError:
            raise RanksUsageError(f"--rank {ranks!r}: give rank numbers separated by commas, e.g. --rank 0,1") from None
    ranks = sorted({int(r) for r in ranks})
    wrong = [r for r in ranks if not 0 <= r < nproc]
    if wrong or not ranks:
        raise RanksUsageError(f"rank {wrong or ranks} does not exist: the group has ranks 0 to {nproc - 1}")
    return ranks


def run_code(code: str, timeout: float | None | str = "default", ranks: Any = None, show: bool = False) -> CellResult:
    """Run ``code`` on the ranks (starting them if needed) and return every rank's outcome.

    A rank's exception, a hang past ``timeout`` (seconds; ``"default"``: the group's) or a dead rank
    is in the result, not raised (``result.ok``, ``result.outcomes``). An interrupt of the caller
    stops the ranks and raises :class:`RanksInterrupted`. ``show`` prints the ranks' output live.
    Used by the exercises' checkers.
    """
    if timeout == "default":
        timeout = _settings["timeout"]
    _check(1, timeout, None, None)
    pool = _group(quiet=not show)
    selected = _parse_ranks(ranks, pool.nproc)
    previous, pool.show = pool.show, show
    try:
        result = pool.run(code, timeout, selected)  # type: ignore[arg-type]
    finally:
        pool.show = previous
    if result.reason == "interrupt":
        raise RanksInterrupted(result)
    return result


def pull(expr: str, ranks: Any = None) -> list[Any]:
    """The value of ``expr`` (a variable name or an expression) on each rank: ``[rank 0's, rank 1's, ...]``.

    Values travel pickled; tensors arrive as detached CPU copies. When no ranks run any more (stopped by a
    later cell, as Run All does), the values last pulled from them for the same ``expr`` come back, with a
    line saying so: a grading cell can be run again after Run All.
    """
    if _pool is None or not _pool.running:
        key = (expr, None if ranks is None else tuple(_parse_ranks(ranks, _settings["nproc"]) or ()))
        if key in _pulled:
            values, when = _pulled[key]
            pulled = time.strftime("%H:%M:%S", time.localtime(when))
            print(
                _(
                    "%ranks: the ranks were stopped at {stopped}; {expr} is what they held when it was pulled from "
                    "them at {pulled}",
                    stopped=time.strftime("%H:%M:%S", time.localtime(_ended["at"])),
                    expr=expr,
                    pulled=pulled,
                )
                if _ended["at"]
                else _(
                    "%ranks: the ranks were stopped; {expr} is what they held when it was pulled from them at {pulled}",
                    expr=expr,
                    pulled=pulled,
                ),
                file=sys.stderr,
                flush=True,
            )
            return values
        raise RanksError(_("no ranks are running: run a %%ranks cell first (or ranks.start())"))
    selected = _parse_ranks(ranks, _pool.nproc)
    try:
        values = _pool.pull(expr, selected)
    except RanksCommandInterrupted:
        if not _pool.running:  # the ranks did not stop at SIGINT and were ended: account for them as stop() does
            stop()
        raise
    _pulled[(expr, None if selected is None else tuple(selected))] = (values, time.time())
    return values


def push(ranks: Any = None, **values: Any) -> None:
    """Set variables on the ranks: ``push(x=1)`` defines ``x`` on every rank (or on ``ranks``)."""
    pool = _group(quiet=False)
    pool.push(values, _parse_ranks(ranks, pool.nproc))


def status() -> dict[str, Any]:
    """What runs now: ranks, backend, pids, cells run, settings."""
    if _pool is None or not _pool.running:
        try:  # the backend the next start resolves to, as a running group says its own ("auto" names none)
            backend = resolve_backend(_settings["backend"], _settings["nproc"])
        except RanksError:
            backend = _settings["backend"]
        return {"running": False, **_settings, "backend": backend}
    return {
        "running": True,
        "nproc": _pool.nproc,
        "backend": _pool.backend,
        "pids": _pool.pids(),
        "cells": _pool.cells,
        "dead": [w.rank for w in _pool.dead()],
        "uptime_s": round(time.time() - (_pool.started_at or time.time()), 1),
        "timeout": _settings["timeout"],
        "env": _settings["env"],
    }


# ----- IPython ---------------------------------------------------------------------------------
class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> Any:
        raise RanksUsageError(f"{self.prog}: {message}")

    def exit(self, status: int = 0, message: str | None = None) -> Any:
        raise _HelpShown()


class _HelpShown(Exception):
    pass


def _parser() -> _Parser:
    parser = _Parser(prog="%ranks", description="Run cells on N ranks with a process group (%%ranks).")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    for name, text in (("start", "start the ranks"), ("restart", "stop the ranks and start new ones")):
        p = sub.add_parser(name, help=text)
        p.add_argument("--nproc", type=int, default=None, help=f"number of ranks (default {DEFAULT_NPROC})")
        p.add_argument("--backend", choices=("auto", "nccl", "gloo"), default=None)
        p.add_argument("--timeout", type=float, default=None, help="a cell's deadline in seconds (0: none)")
        p.add_argument("--pg-timeout", type=float, default=None, help="the process group's timeout in seconds")
        p.add_argument("--env", action="append", default=None, metavar="KEY=VALUE", help="a variable for the ranks")
    sub.add_parser("stop", help="end every rank")
    sub.add_parser("status", help="what runs now")
    p = sub.add_parser("pull", help="a value from every rank: [rank 0's, rank 1's, ...]")
    p.add_argument("expr", nargs="+", help="a variable name or an expression")
    p.add_argument("--rank", default=None, help="only these ranks, e.g. 0 or 0,1")
    return parser


def _cell_parser() -> _Parser:
    parser = _Parser(prog="%%ranks", description="Run this cell on every rank.")
    parser.add_argument("--timeout", type=float, default=None, help="deadline in seconds (0: none)")
    parser.add_argument("--rank", default=None, help="only these ranks, e.g. 0 or 0,1")
    return parser


def _start_options(args: argparse.Namespace) -> dict[str, Any]:
    options: dict[str, Any] = {}
    for key in ("nproc", "backend", "timeout", "pg_timeout"):
        if getattr(args, key) is not None:
            options[key] = getattr(args, key)
    if args.env is not None:
        env = {}
        for item in args.env:
            key, sep, value = item.partition("=")
            if not sep:
                raise RanksUsageError(f"--env {item!r}: write KEY=VALUE")
            env[key] = value
        options["env"] = env
    return options


def ranks_magic(line: str, cell: str | None = None) -> Any:
    """``%ranks COMMAND`` and ``%%ranks [--timeout S] [--rank R]`` (see the module docstring)."""
    from IPython.core.error import UsageError

    try:
        if cell is None:
            return _line(shlex.split(line))
        args = _cell_parser().parse_args(shlex.split(line))
    except _HelpShown:
        return None
    except RanksUsageError as exc:
        raise UsageError(str(exc)) from None
    timeout = _settings["timeout"] if args.timeout is None else args.timeout
    try:
        pool = _group(quiet=False)
        selected = _parse_ranks(args.rank, pool.nproc)
    except RanksUsageError as exc:
        raise UsageError(str(exc)) from None
    pool.show = True
    elapsed = _Elapsed(selected or list(range(pool.nproc)))
    pool.tick = elapsed.tick
    try:
        result = pool.run(cell, timeout, selected)
    finally:
        pool.tick = None
        elapsed.end()
    if result.reason == "interrupt":
        raise RanksInterrupted(result)
    if result.reason == "timeout":
        raise RanksTimeout(result)
    if not result.ok:
        raise RankFailed(result)
    return None


QUIET_S = 1.0
"""A ``%%ranks`` cell that shows nothing for this long gets a line that says it is running, and for how long."""


class _Elapsed:
    """While a ``%%ranks`` cell runs with nothing new shown for :data:`QUIET_S`, one line saying which ranks run it
    and for how long, updated every second in place; blanked when the cell ends (what the ranks printed stays)."""

    def __init__(self, ranks: list[int]) -> None:
        self.ranks = ", ".join(map(str, ranks))
        self.handle: Any = None
        self.seconds = -1
        ipython = sys.modules.get("IPython")
        self.enabled = ipython is not None and ipython.get_ipython() is not None  # a display needs a kernel

    def tick(self, elapsed: float, quiet: float) -> None:
        if not self.enabled or (self.handle is None and quiet < QUIET_S):
            return
        if int(elapsed) == self.seconds:
            return
        self.seconds = int(elapsed)
        text = {
            "text/plain": _(
                "[%%ranks] rank {ranks} running this cell: {seconds} s", ranks=self.ranks, seconds=self.seconds
            )
        }
        self._show(text)

    def _show(self, data: dict[str, str]) -> None:
        from IPython.display import display

        if self.handle is None:
            self.handle = display(data, raw=True, display_id=True)
        else:
            self.handle.update(data, raw=True)

    def end(self) -> None:
        if self.handle is not None:
            self._show({"text/plain": ""})


def _line(argv: list[str]) -> Any:
    if not argv:
        argv = ["status"]
    args = _parser().parse_args(argv)
    if args.command == "start":
        options = {**_settings, **_start_options(args)}
        if _pool is not None and _pool.running and not _pool.dead():
            same = {k: v for k, v in options.items() if k != "timeout"} == {
                k: v for k, v in _settings.items() if k != "timeout"
            }
            if same:
                _settings["timeout"] = options["timeout"]
                print(
                    _(
                        "%ranks: {nproc} ranks already running ({backend}); nothing to do",
                        nproc=_pool.nproc,
                        backend=_pool.backend,
                    )
                )
                return None
            raise RanksUsageError(
                _(
                    "ranks are already running with other settings: use %ranks restart with the new options (every "
                    "rank's variables are lost), or %ranks stop first"
                )
            )
        start(**options)
    elif args.command == "restart":
        restart(**_start_options(args))
    elif args.command == "stop":
        running = _running()
        stop()
        print(_("%ranks: every rank was ended") if running else _("%ranks: no ranks were running"))
    elif args.command == "status":
        info = status()
        if not info["running"]:
            print(
                _(
                    "%ranks: no ranks running; the next %%ranks cell starts {nproc} (backend {backend})",
                    nproc=info["nproc"],
                    backend=info["backend"],
                )
            )
        else:
            fields = {
                "nproc": info["nproc"],
                "backend": info["backend"],
                "pids": info["pids"],
                "cells": info["cells"],
                "uptime": info["uptime_s"],
                "deadline": info["timeout"] or _("none"),
            }
            print(
                _(
                    "%ranks: {nproc} ranks ({backend}), pids {pids}, {cells} cells run, up {uptime} s; cell deadline "
                    "{deadline}; exited: rank {dead}",
                    **fields,
                    dead=info["dead"],
                )
                if info["dead"]
                else _(
                    "%ranks: {nproc} ranks ({backend}), pids {pids}, {cells} cells run, up {uptime} s; cell deadline "
                    "{deadline}",
                    **fields,
                )
            )
    elif args.command == "pull":
        return pull(" ".join(args.expr), args.rank)
    return None


def load_ipython_extension(ipython: Any) -> None:
    """``%load_ext nvtutorial.teach.ranks``: registers ``%ranks`` and ``%%ranks``, and starts the warm
    interpreter the ranks are forked from (it imports torch while the learner reads)."""
    from nvtutorial.launch import warm

    ipython.register_magic_function(ranks_magic, "line_cell", "ranks")
    warm.prestart()


def unload_ipython_extension(ipython: Any) -> None:
    stop()
