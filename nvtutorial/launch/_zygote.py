"""The warm interpreter: a process that has imported torch and the workloads' imports, and forks ranks.

Started by :mod:`nvtutorial.launch.warm` (never by hand, never in the notebook kernel) as
``python -c "from nvtutorial.launch._zygote import main; main()" FD`` where ``FD`` is its end of a
``SOCK_SEQPACKET`` socket pair. It imports torch and every module the workloads import, checks that
it is still fit to fork (one thread, CUDA never initialised), says hello, then serves requests one at
a time, with no thread of its own:

- ``spawn``: fork a child that becomes the requested program (``-m MODULE ARGS`` or ``-c CODE ARGS``)
  with exactly the environment, working folder and file descriptors sent (see :func:`_become`); the
  reply is its pid, or why it was refused (a preloaded file changed on disk, a thread or CUDA
  appeared);
- ``health``: the same checks, answered;
- every child's exit status is sent as soon as it is reaped (``exit``), as ``subprocess`` reports it
  (negative for a signal).

It ends when the socket closes: with the kernel or the command that started it, a kernel restart
included. The children are not its to end: each rank ends itself when the launcher is gone
(:func:`nvtutorial.runtime.start_worker`), and the launcher ends every process of a run.

This module imports only the standard library at the top: the imports are the preload's job.
"""

from __future__ import annotations

import os
import pickle
import select
import signal
import socket
import sys
import time
from typing import Any

MAX_MESSAGE = 1 << 20
MAX_FDS = 16
PRELOAD = (
    "torch",
    "torch.distributed",
    "torch.nn",
    "torch.nn.functional",
    "torch.optim",
    "torch._dynamo",  # DDP's constructor and every optimizer step import it: 1.3 s a rank on 2 cores, paid here once
    "numpy",
    "nvtutorial.runtime",
    "nvtutorial.launch.runtime_script",
    "nvtutorial.teach._ranks_worker",
    "nvtutorial.launch._store",
)
"""Imported first; then every workload module, whose own imports stay (see :func:`_preload`), and the modules
named in ``NVTUTORIAL_WARM_PRELOAD`` (comma-separated: a learner's own heavy imports)."""
_NOT_AS_MAIN = ("nvtutorial.launch.runtime_script",)
"""Modules preloaded for their imports only: dropped again, so that ``-m`` runs them as a fresh ``__main__``."""


def _send(sock: socket.socket, message: dict[str, Any]) -> None:
    sock.send(pickle.dumps(message))


def threads() -> int:
    """Threads of this process, native ones included (``/proc/self/task``)."""
    try:
        return len(os.listdir("/proc/self/task"))
    except OSError:
        import threading

        return threading.active_count()


CUDA_ERROR_NOT_INITIALIZED = 3


def cuda_state() -> str | None:
    """None while CUDA was never initialised here; otherwise what shows it was.

    A CUDA build of torch maps the driver library (libcuda) when it is imported, without initialising
    it; the driver itself says whether ``cuInit`` ran: before it, every call but a few answers
    ``CUDA_ERROR_NOT_INITIALIZED``.
    """
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_initialized():
        return "torch initialised CUDA"
    try:
        with open("/proc/self/maps") as fh:
            mapped = "libcuda.so" in fh.read()
    except OSError:
        mapped = False
    if mapped:
        import ctypes

        count = ctypes.c_int()
        code = ctypes.CDLL("libcuda.so.1").cuDeviceGetCount(ctypes.byref(count))
        if code != CUDA_ERROR_NOT_INITIALIZED:
            return f"the CUDA driver was initialised (cuDeviceGetCount answered {code}, not 'not initialised')"
    return None


def _module_files() -> dict[str, float]:
    """Each loaded module's file outside the installation (the course's, a learner's), with its modification
    time: a change makes us stale. Installed packages and the standard library are not watched."""
    installed = tuple(os.path.join(p, "") for p in {sys.prefix, sys.base_prefix, sys.exec_prefix})
    files = {}
    for module in list(sys.modules.values()):
        path = getattr(module, "__file__", None)
        if path and os.path.isabs(path) and not path.startswith(installed):
            try:
                files[path] = os.stat(path).st_mtime
            except OSError:
                continue
    return files


def stale(files: dict[str, float]) -> str | None:
    """The first preloaded file that changed (or vanished) since it was loaded, or None."""
    for path, mtime in files.items():
        try:
            if os.stat(path).st_mtime != mtime:
                return path
        except OSError:
            return path
    return None


def _preload() -> tuple[float, list[str]]:
    """Import the preload and every workload's imports; (seconds, problems)."""
    t0 = time.perf_counter()
    problems = []
    extra = [m.strip() for m in os.environ.get("NVTUTORIAL_WARM_PRELOAD", "").split(",") if m.strip()]
    for name in (*PRELOAD, *extra):
        try:
            __import__(name)
        except Exception as exc:  # noqa: BLE001 - reported in the hello; the rank imports it again and fails there
            problems.append(f"{name}: {type(exc).__name__}: {exc}")
    try:
        from nvtutorial import workloads

        for full in workloads.modules().values():
            try:
                __import__(full)
            except Exception as exc:  # noqa: BLE001
                problems.append(f"{full}: {type(exc).__name__}: {exc}")
            _forget(full)
    except Exception as exc:  # noqa: BLE001
        problems.append(f"nvtutorial.workloads: {type(exc).__name__}: {exc}")
    for name in _NOT_AS_MAIN:
        _forget(name)
    try:  # set up now: it needs the process's original argv and environ, which a child replaces
        import setproctitle

        setproctitle.getproctitle()
    except ImportError:
        pass
    return time.perf_counter() - t0, problems


def _forget(name: str) -> None:
    """Drop module ``name`` (its imports stay): ``python -m`` semantics need a fresh import of it."""
    sys.modules.pop(name, None)
    parent, _, child = name.rpartition(".")
    if parent in sys.modules and hasattr(sys.modules[parent], child):
        delattr(sys.modules[parent], child)


def health(files: dict[str, float]) -> dict[str, Any]:
    problem = None
    n = threads()
    cuda = cuda_state()
    changed = stale(files)
    if cuda:
        problem = f"CUDA was initialised in the warm interpreter ({cuda})"
    elif n != 1:
        problem = f"the warm interpreter runs {n} threads (forking it is safe only with one)"
    elif changed:
        problem = f"{changed} changed since the warm interpreter imported it"
    return {"pid": os.getpid(), "threads": n, "cuda": cuda, "stale": changed, "problem": problem}


def serve(sock: socket.socket, files: dict[str, float]) -> tuple[dict[str, Any], list[int]]:
    """Answer requests until the socket closes (then exit); return only in a forked child."""
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_r, False)
    os.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda signum, frame: None)
    while True:
        try:
            ready, _, _ = select.select([sock, wake_r], [], [])
        except InterruptedError:
            continue
        if wake_r in ready:
            try:
                while os.read(wake_r, 512):
                    pass
            except BlockingIOError:
                pass
        _reap(sock)
        if sock not in ready:
            continue
        try:
            data, fds, _, _ = socket.recv_fds(sock, MAX_MESSAGE, MAX_FDS)
        except ConnectionError:
            data, fds = b"", []
        if not data:
            os._exit(0)  # the launcher closed its end, or died: our work is over
        request = pickle.loads(data)
        kind = request.get("kind")
        if kind == "spawn":
            state = health(files)
            if state["problem"]:
                _close(fds)
                _send(sock, {"kind": "refused", "id": request["id"], "why": state["problem"], **state})
                continue
            pid = os.fork()
            if pid == 0:
                signal.set_wakeup_fd(-1)
                signal.signal(signal.SIGCHLD, signal.SIG_DFL)
                os.close(wake_r)
                os.close(wake_w)
                sock.close()
                return request, fds
            _close(fds)
            _send(sock, {"kind": "spawned", "id": request["id"], "pid": pid})
        elif kind == "health":
            _send(sock, {"kind": "health", "id": request["id"], **health(files)})


def _reap(sock: socket.socket) -> None:
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        try:
            _send(sock, {"kind": "exit", "pid": pid, "code": os.waitstatus_to_exitcode(status)})
        except OSError:
            os._exit(0)


def _close(fds: list[int]) -> None:
    for fd in fds:
        try:
            os.close(fd)
        except OSError:
            pass


def _become(request: dict[str, Any], fds: list[int]) -> None:
    """In the forked child: take the session, descriptors, environment and settings a fresh process would have."""
    os.setsid()  # a session of its own, as torchrun's workers have: signals to the launcher's group miss it
    # the descriptors sent, moved out of the way, then put in place; every other one closed
    import fcntl

    moved = [fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 64) for fd in fds]
    _close(fds)
    keep = set()
    for target, index in request["fds"].items():
        os.dup2(moved[index], int(target))
        keep.add(int(target))
    for name in os.listdir("/proc/self/fd"):
        fd = int(name)
        if fd > 2 and fd not in keep:
            try:
                os.close(fd)
            except OSError:
                pass
    for sig in (signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT, signal.SIGUSR1, signal.SIGUSR2):
        signal.signal(sig, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    # the environment, whole: what a fresh process started with it would see from here on
    os.environ.clear()
    os.environ.update(request["env"])
    os.chdir(request["cwd"])
    extra = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p and p not in sys.path]
    sys.path[1:1] = extra
    # libgomp and OpenBLAS read their thread counts when loaded (here, with 1): torch and numpy's OpenBLAS are told
    # the rank's
    threads = os.environ.get("OMP_NUM_THREADS", "")
    torch = sys.modules.get("torch")
    if torch is not None and threads.isdigit() and int(threads) > 0:
        torch.set_num_threads(int(threads))
    _set_openblas_threads()
    # the random state of a fresh process, where torch's CPU generator and numpy's global one are seeded from
    # the OS (CUDA's generators, not created yet, keep their fixed default; Python's random module reseeds
    # itself after a fork)
    if torch is not None:
        torch.default_generator.seed()
    numpy = sys.modules.get("numpy")
    if numpy is not None:
        numpy.random.seed()
    # torch.distributed reads TORCH_DISTRIBUTED_DEBUG when it is imported: read it again, with this environment
    dist = sys.modules.get("torch.distributed")
    if dist is not None and hasattr(dist, "set_debug_level_from_env"):
        dist.set_debug_level_from_env()
    unbuffered = bool(os.environ.get("PYTHONUNBUFFERED"))
    _new_stdio(unbuffered)
    if request.get("title"):
        try:
            import setproctitle

            setproctitle.setproctitle(request["title"])
        except ImportError:
            pass


OPENBLAS_SETTERS = (
    "scipy_openblas_set_num_threads64_",
    "scipy_openblas_set_num_threads",
    "openblas_set_num_threads64_",
    "openblas_set_num_threads",
)
"""The names OpenBLAS builds give their thread-count setter (numpy's wheels bundle scipy-openblas, with a prefix)."""


def _set_openblas_threads() -> None:
    """Give every loaded OpenBLAS the thread count it would have read when loaded in a fresh process:
    ``OPENBLAS_NUM_THREADS``, else ``GOTO_NUM_THREADS``, else ``OMP_NUM_THREADS``, else one per core."""
    import ctypes

    wanted = next(
        (
            os.environ[k]
            for k in ("OPENBLAS_NUM_THREADS", "GOTO_NUM_THREADS", "OMP_NUM_THREADS")
            if os.environ.get(k, "").isdigit() and int(os.environ[k]) > 0
        ),
        None,
    )
    count = int(wanted) if wanted else (os.cpu_count() or 1)
    try:
        with open("/proc/self/maps") as fh:
            libraries = {line.split()[-1] for line in fh if "openblas" in line.lower() and "/" in line}
    except OSError:
        return
    for library in sorted(libraries):
        try:
            handle = ctypes.CDLL(library)
        except OSError:
            continue
        setter = next((getattr(handle, name) for name in OPENBLAS_SETTERS if hasattr(handle, name)), None)
        if setter is not None:
            setter(ctypes.c_int(count))


def _new_stdio(unbuffered: bool) -> None:
    """sys.stdout and sys.stderr on the new descriptors 1 and 2, buffered as a fresh interpreter's would be."""
    import io

    encoding = sys.__stdout__.encoding if sys.__stdout__ is not None else "utf-8"
    for fd, name in ((1, "stdout"), (2, "stderr")):
        raw = io.FileIO(fd, "w", closefd=False)
        stream = io.TextIOWrapper(
            raw if unbuffered else io.BufferedWriter(raw),
            encoding=encoding,
            errors="backslashreplace" if fd == 2 else "strict",
            line_buffering=fd == 2 or os.isatty(fd),
            write_through=unbuffered,
        )
        setattr(sys, name, stream)
        setattr(sys, f"__{name}__", stream)
    sys.stdin = sys.__stdin__ = io.TextIOWrapper(io.BufferedReader(io.FileIO(0, "r", closefd=False)), encoding=encoding)


def _run(argv: list[str]) -> None:
    """Run ``-m MODULE ARGS`` or ``-c CODE ARGS`` as ``python`` would."""
    import runpy
    import types

    mode, target, *rest = argv
    if mode == "-m":
        sys.argv = ["-m", *rest]
        sys.path[0] = os.getcwd()
        runpy.run_module(target, run_name="__main__", alter_sys=True)
    elif mode == "-c":
        sys.argv = ["-c", *rest]
        sys.path[0] = ""
        main_module = types.ModuleType("__main__")
        main_module.__dict__["__builtins__"] = __builtins__
        sys.modules["__main__"] = main_module
        exec(compile(target, "<string>", "exec"), main_module.__dict__)  # noqa: S102 - the launcher's own program
    else:
        raise SystemExit(f"warm interpreter: unknown mode {mode!r}")


def _exit_code(exc: SystemExit) -> int:
    """The exit status ``python`` gives a ``SystemExit`` (a message is printed, status 1)."""
    if exc.code is None:
        return 0
    if isinstance(exc.code, int):
        return exc.code & 0xFF
    print(exc.code, file=sys.stderr)
    return 1


def _finish(code: int) -> None:
    """End the child as a Python process ends, minus module teardown: non-daemon threads joined, atexit handlers
    run, output flushed, then ``os._exit``. The teardown would write to every object the warm interpreter holds,
    copying its whole heap page by page (1.5-2.5 s on 2 cores)."""
    import atexit
    import threading

    try:
        threading._shutdown()  # type: ignore[attr-defined]  # non-daemon threads, as at interpreter exit
        atexit._run_exitfuncs()
    finally:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except (OSError, ValueError):
                pass
        os._exit(code)


def main() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a Ctrl-C or a notebook's Stop is the ranks' business
    sock = socket.socket(fileno=int(sys.argv[1]))
    seconds, problems = _preload()
    files = _module_files()
    import gc

    gc.freeze()  # the preload's objects: never traversed by the children's collections (fewer pages copied)
    _send(
        sock, {"kind": "hello", "preload_s": seconds, "problems": problems, "python": sys.executable, **health(files)}
    )
    request, fds = serve(sock, files)
    _become(request, fds)
    try:
        _run(list(request["argv"]))
        code = 0
    except SystemExit as exc:
        code = _exit_code(exc)
    except KeyboardInterrupt:
        import traceback

        traceback.print_exc()
        _finish_interrupted()
        code = 130
    except BaseException as exc:  # noqa: BLE001 - as python: the traceback, then status 1
        sys.excepthook(type(exc), exc, exc.__traceback__)
        code = 1
    _finish(code)


def _finish_interrupted() -> None:
    """End by SIGINT, as python does after an unhandled KeyboardInterrupt (its parent sees the signal)."""
    import atexit

    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    os.kill(os.getpid(), signal.SIGINT)
