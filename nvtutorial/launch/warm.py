"""The warm interpreter, seen from the launcher: one per kernel or command, it forks the ranks.

A rank's cold start is two Python start-ups with ``import torch`` (torchrun's agent, then the rank):
1.5 s each on a 2-core CPU, 4.9–6.6 s on an H200 machine. :class:`WarmInterpreter` starts
:mod:`nvtutorial.launch._zygote` once, in its own process (never the notebook kernel, which runs
threads and sockets), where torch and the workloads' imports are loaded, CUDA never initialised and
no thread runs; each rank is then a ``fork()`` of it that takes exactly the environment, working
folder and file descriptors the launcher sends, before any code reads them (see the zygote's
``_become``). The first all-reduce of two forked gloo ranks ends about 0.1 s after the request.

The interpreter ends when this process closes its socket (:func:`shutdown`, at exit) or dies, a
kernel restart included. When it cannot serve (it died, CUDA or a thread appeared in it, a file it
imported changed, a run sets a variable that is read only when torch is imported), the launcher
starts that run cold and says why in one line (:class:`WarmUnavailable`). A changed file starts a new
interpreter for the next run.

Why not :mod:`multiprocessing`'s ``forkserver`` with ``set_forkserver_preload``: it is one per
process and shared with whatever else the kernel runs (a learner's ``DataLoader`` with
``multiprocessing_context="forkserver"`` would get our preload); its children run
multiprocessing's bootstrap, which re-imports the caller's ``__main__`` (a learner's script that calls
``nvtutorial.run`` without a main guard would recurse); the child cannot take a session, descriptors
and an environment before that bootstrap runs; and the preload cannot be checked (it ignores import
errors) or renewed when a lesson file changes. What it does is a fork loop of 150 lines here.
"""

from __future__ import annotations

import atexit
import collections
import contextlib
import dataclasses
import itertools
import os
import pickle
import select
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

BOOT = "from nvtutorial.launch._zygote import main; main()"
READY_TIMEOUT_S = 120.0
"""How long the interpreter may take to import torch and the workloads before the run starts cold."""
SPAWN_TIMEOUT_S = 30.0
PINNED_THREADS = {"OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
"""Set for the interpreter only: OpenBLAS starts its threads when it loads, and a process that forks
must have one thread. Each rank gets its own values, and torch and numpy's OpenBLAS are told its thread count there."""
IMPORT_TIME = (
    "PYTHON",
    "LD_PRELOAD",
    "LD_LIBRARY_PATH",
    "TORCH_LOGS",
    "TORCH_CPP_LOG_LEVEL",
    "TORCH_SHOW_CPP_STACKTRACES",
    "TORCH_USE_RTLD_GLOBAL",
    "TORCH_DEVICE_BACKEND_AUTOLOAD",
    "TORCH_COMPILE_",
    "TORCHDYNAMO_",
    "TORCH_DYNAMO_",
    "TORCHINDUCTOR_",
    "INDUCTOR_",
    "KMP_",
    "GOMP_",
    "OMP_",
    "MKL_",
    "OPENBLAS_",
)
"""Variables (or prefixes) read when Python or torch starts, or torch's compiler (``torch._dynamo`` and inductor's
configuration, which the warm interpreter imports too): a run whose value differs from the warm interpreter's cannot be
forked from it. Thread counts are set in each rank explicitly (they are not
compared); ``TORCH_DISTRIBUTED_DEBUG`` is read again in each rank. ``TORCHINDUCTOR_CACHE_DIR`` is not compared either:
inductor writes its default into ``os.environ`` when imported (a kernel that built a model on the meta device, as
notebook 08's does, imported it) and reads the variable again at each use."""
_NOT_COMPARED = {
    "PYTHONPATH",
    "PYTHONUNBUFFERED",
    "OMP_NUM_THREADS",
    "OPENBLAS_NUM_THREADS",
    "MKL_NUM_THREADS",
    "TORCHINDUCTOR_CACHE_DIR",
}


class WarmUnavailable(RuntimeError):
    """The warm interpreter cannot start this run; the message says why, in one line. ``renewable``: a new
    interpreter would (a file it imported changed)."""

    def __init__(self, why: str, renewable: bool = False) -> None:
        super().__init__(why)
        self.renewable = renewable


def import_time_difference(env: Mapping[str, str], base: Mapping[str, str]) -> str | None:
    """The first variable read at start-up whose value in ``env`` differs from ``base``, as a sentence."""
    keys = sorted({k for k in (*env, *base) if k.startswith(IMPORT_TIME) and k not in _NOT_COMPARED})
    for key in keys:
        if env.get(key) != base.get(key):
            value = env.get(key)
            said = f"{key}={value}" if value is not None else f"{key} unset"
            return f"{said} is read when Python or torch starts, and the warm interpreter started without it"
    return None


class Forked:
    """A process forked by the warm interpreter, with :class:`subprocess.Popen`'s interface."""

    def __init__(
        self, warm: WarmInterpreter, pid: int, args: Sequence[str], stdout: Any = None, stderr: Any = None
    ) -> None:
        self.warm = warm
        self.pid = pid
        self.args = list(args)
        self.stdout = stdout
        self.stderr = stderr
        self.returncode: int | None = None

    def poll(self) -> int | None:
        if self.returncode is None:
            self.returncode = self.warm.exit_code(self.pid)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        if self.returncode is None:
            self.returncode = self.warm.wait_exit(self.pid, timeout)
            if self.returncode is None:
                raise subprocess.TimeoutExpired(self.args, timeout or 0)
        return self.returncode

    def send_signal(self, sig: int) -> None:
        if self.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, sig)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)

    def __repr__(self) -> str:
        return f"<Forked pid={self.pid} returncode={self.returncode}>"


@dataclasses.dataclass
class _Pending:
    reply: dict[str, Any] | None = None


class WarmInterpreter:
    """One warm interpreter process and the thread that reads what it says (see the module docstring)."""

    def __init__(self, env: Mapping[str, str] | None = None) -> None:
        base = dict(os.environ if env is None else env)
        package_root = str(Path(__file__).resolve().parents[2])
        base["PYTHONPATH"] = os.pathsep.join(p for p in (package_root, base.get("PYTHONPATH", "")) if p)
        base["PYTORCH_NVML_BASED_CUDA_CHECK"] = "1"  # torch.cuda.is_available() without initialising CUDA
        self.base_env = {**base, **PINNED_THREADS}
        self.started = time.perf_counter()
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            self.proc = subprocess.Popen(
                [sys.executable, "-c", BOOT, str(theirs.fileno())],
                env=self.base_env,
                pass_fds=(theirs.fileno(),),
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
                start_new_session=True,
            )
        finally:
            theirs.close()
        self.sock = ours
        self.hello: dict[str, Any] | None = None
        self.ready_s: float | None = None
        self.dead: str | None = None
        self.errors: collections.deque[str] = collections.deque(maxlen=40)
        self.exits: dict[int, int] = {}
        self.children: set[int] = set()
        self._pending: dict[int, _Pending] = {}
        self._ids = itertools.count(1)
        self._cond = threading.Condition()
        self._send_lock = threading.Lock()
        self._reader = threading.Thread(target=self._read, name="nvtutorial-warm-reader", daemon=True)
        self._reader.start()

    # ----- what it says ---------------------------------------------------------------------
    def _read(self) -> None:
        err = self.proc.stderr
        fds = [self.sock, err]
        partial = b""
        while True:
            try:
                ready, _, _ = select.select(fds, [], [])
            except (OSError, ValueError):
                break
            if err in ready:
                data = os.read(err.fileno(), 65536)  # type: ignore[union-attr]
                if not data:
                    fds.remove(err)
                else:
                    *lines, partial = (partial + data).split(b"\n")
                    self.errors.extend(line.decode(errors="replace") for line in lines)
            if self.sock in ready:
                try:
                    data = self.sock.recv(1 << 20)
                except OSError:
                    data = b""
                if not data:
                    break
                self._handle(pickle.loads(data))
        code = self.proc.wait()
        with self._cond:
            last = "; ".join(line for line in list(self.errors)[-3:] if line.strip())
            self.dead = f"the warm interpreter exited ({_exit_text(code)})" + (f": {last}" if last else "")
            self._cond.notify_all()

    def _handle(self, message: dict[str, Any]) -> None:
        with self._cond:
            kind = message.get("kind")
            if kind == "hello":
                self.hello = message
                self.ready_s = time.perf_counter() - self.started
            elif kind == "exit":
                self.exits[message["pid"]] = message["code"]
            elif "id" in message and message["id"] in self._pending:
                self._pending[message["id"]].reply = message
            self._cond.notify_all()

    # ----- asking ---------------------------------------------------------------------------
    def wait_ready(self, timeout: float = READY_TIMEOUT_S) -> dict[str, Any]:
        """The interpreter's hello (preload time, threads, CUDA state); raises :class:`WarmUnavailable`."""
        with self._cond:
            self._cond.wait_for(lambda: self.hello is not None or self.dead is not None, timeout)
            if self.hello is None:
                raise WarmUnavailable(self.dead or f"the warm interpreter was not ready within {timeout:g} s")
            if self.hello.get("problem"):
                raise WarmUnavailable(self.hello["problem"])
            return self.hello

    def _ask(
        self, message: dict[str, Any], fds: Sequence[int] = (), timeout: float = SPAWN_TIMEOUT_S
    ) -> dict[str, Any]:
        ident = next(self._ids)
        pending = _Pending()
        with self._cond:
            if self.dead:
                raise WarmUnavailable(self.dead)
            self._pending[ident] = pending
        try:
            with self._send_lock:
                socket.send_fds(self.sock, [pickle.dumps({**message, "id": ident})], list(fds))
            with self._cond:
                self._cond.wait_for(lambda: pending.reply is not None or self.dead is not None, timeout)
                if pending.reply is None:
                    raise WarmUnavailable(self.dead or f"the warm interpreter did not answer within {timeout:g} s")
                return pending.reply
        except OSError as exc:
            raise WarmUnavailable(f"the warm interpreter cannot be reached: {exc}") from None
        finally:
            with self._cond:
                self._pending.pop(ident, None)

    def health(self) -> dict[str, Any]:
        """Its threads, CUDA state and stale files, as it reports them now."""
        self.wait_ready()
        return self._ask({"kind": "health"})

    def spawn(
        self,
        argv: Sequence[str],
        env: Mapping[str, str],
        *,
        cwd: str | os.PathLike[str] | None = None,
        fds: Mapping[int, int],
        title: str = "",
        stdout: Any = None,
        stderr: Any = None,
    ) -> Forked:
        """Fork a process that runs ``python ARGV`` (``-m MODULE ...`` or ``-c CODE ...``) with ``env``.

        ``fds`` maps each descriptor number the child gets (0, 1 and 2 at least) to one of ours;
        ``title`` is what ``ps`` shows for it. Raises :class:`WarmUnavailable` when it cannot.
        """
        self.wait_ready()
        difference = import_time_difference(env, self.base_env)
        if difference:
            raise WarmUnavailable(difference)
        ours = list(dict.fromkeys(fds.values()))
        mapping = {target: ours.index(fd) for target, fd in fds.items()}
        reply = self._ask(
            {
                "kind": "spawn",
                "argv": list(argv),
                "env": dict(env),
                "cwd": os.fspath(cwd or os.getcwd()),
                "fds": mapping,
                "title": title,
            },
            ours,
        )
        if reply["kind"] != "spawned":
            renewable = bool(reply.get("stale")) and not reply.get("cuda") and reply.get("threads") == 1
            raise WarmUnavailable(reply.get("why", "the warm interpreter refused"), renewable=renewable)
        with self._cond:
            self.children.add(reply["pid"])
        return Forked(self, reply["pid"], argv, stdout=stdout, stderr=stderr)

    def exit_code(self, pid: int) -> int | None:
        with self._cond:
            return self._code(pid)

    def wait_exit(self, pid: int, timeout: float | None) -> int | None:
        with self._cond:
            self._cond.wait_for(lambda: self._code(pid) is not None, timeout)
            return self._code(pid)

    def _code(self, pid: int) -> int | None:
        if pid in self.exits:
            return self.exits[pid]
        if self.dead and not _pid_alive(pid):  # reaped by init now: the status is lost
            return 1
        return None

    @property
    def alive(self) -> bool:
        return self.dead is None and self.proc.poll() is None

    def why_dead(self) -> str:
        """How it ended, in words (its last lines of stderr when it printed any)."""
        code = self.proc.poll()
        return self.dead or f"the warm interpreter exited ({_exit_text(code) if code is not None else 'unknown'})"

    def close(self) -> None:
        """End the interpreter (its children are the launcher's to end). It holds nothing to save: one still importing
        torch notices the closed socket only after the import, so it is ended at once: an exit no longer waits for
        the import (2.8 s to close one mid-import on the idle 2-core machine, 0.5 s now)."""
        with contextlib.suppress(OSError):
            self.sock.shutdown(socket.SHUT_RDWR)
        self.sock.close()
        for end, wait in ((lambda: None, 0.5), (self.proc.terminate, 2.0), (self.proc.kill, None)):
            end()
            try:
                self.proc.wait(timeout=wait)
                break
            except subprocess.TimeoutExpired:
                continue
        self._reader.join(timeout=5)
        if self.proc.stderr is not None:
            self.proc.stderr.close()


def _pid_alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def _exit_text(code: int) -> str:
    if code < 0:
        with contextlib.suppress(ValueError):
            return f"killed by {signal.Signals(-code).name}"
    return f"exit code {code}"


_warm: WarmInterpreter | None = None
_lock = threading.Lock()


def supported() -> str | None:
    """None where warm start works; otherwise why not (it needs Linux: fork, /proc, descriptor passing)."""
    if not sys.platform.startswith("linux"):
        return f"warm start needs Linux (this is {sys.platform})"
    return None


def get(start: bool = True, keep_dead: bool = False) -> WarmInterpreter | None:
    """This process's warm interpreter: started now (``start``) if there is none or the last one died
    (``keep_dead``: a dead one is returned as it is, to say why it died)."""
    global _warm
    with _lock:
        if _warm is not None and not _warm.alive and not keep_dead:
            _warm.close()
            _warm = None
        if _warm is None and start and supported() is None:
            _warm = WarmInterpreter()
            atexit.register(shutdown)
        return _warm


def renew() -> WarmInterpreter | None:
    """End this process's warm interpreter and start a new one (a preloaded file changed)."""
    shutdown()
    return get()


def prestart() -> None:
    """Start the warm interpreter in the background (it imports torch while the learner reads)."""
    if os.environ.get("NVTUTORIAL_LAUNCHER", "auto") == "auto":
        with contextlib.suppress(OSError):
            get()


def shutdown() -> None:
    global _warm
    with _lock:
        warm, _warm = _warm, None
    if warm is not None:
        warm.close()


@dataclasses.dataclass(frozen=True)
class PassFd:
    """One of our descriptors, passed to the child; in its arguments it stands for the child's number of it."""

    fd: int


def start_python(
    args: Sequence[str | PassFd],
    *,
    env: Mapping[str, str],
    stdin: int,
    stdout: int,
    stderr: int,
    title: str = "",
    cold: bool = False,
) -> tuple[Any, str | None]:
    """``python ARGS`` with ``env`` and the descriptors given: forked warm where it can, else started cold.

    Returns the process (a :class:`Forked` or a :class:`subprocess.Popen`, both with Popen's interface)
    and, for a cold start that could have been warm, why it was cold.
    """
    why = supported()
    if not cold and why is None:
        try:
            warm = get()
            assert warm is not None
            numbers = {a.fd: 3 + i for i, a in enumerate(dict.fromkeys(a for a in args if isinstance(a, PassFd)))}
            argv = [str(numbers[a.fd]) if isinstance(a, PassFd) else a for a in args]
            fds = {0: stdin, 1: stdout, 2: stderr, **{n: fd for fd, n in numbers.items()}}
            return warm.spawn(argv, env, fds=fds, title=title), None
        except WarmUnavailable as exc:
            why = str(exc)
    argv = [str(a.fd) if isinstance(a, PassFd) else a for a in args]
    passed = tuple(a.fd for a in args if isinstance(a, PassFd))
    proc = subprocess.Popen(
        [sys.executable, *argv],
        stdin=stdin,
        stdout=stdout,
        stderr=stderr,
        env=dict(env),
        pass_fds=passed,
        start_new_session=True,
    )
    return proc, None if cold else why
