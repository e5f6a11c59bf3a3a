"""One rank of the ``%%ranks`` group: a persistent Python namespace with a process group.

Started by :mod:`nvtutorial.teach.ranks` (never by hand) as
``python -c "from nvtutorial.teach._ranks_worker import main; main()" CMD_FD REPLY_FD`` with
``RANK``, ``LOCAL_RANK``, ``WORLD_SIZE`` and ``NVTUTORIAL_RANKS_BACKEND`` in its environment,
its stdout and stderr connected to pipes that the kernel reads line by line.

Two threads:

- the main thread runs commands one after another: ``init`` (create the process group),
  ``exec`` (a cell's code in the namespace, which lives on between cells), ``pull``, ``push``;
- a listener thread reads the command pipe. It queues those commands, and answers two at once
  even while a cell runs: ``stacks`` (where the main thread is) and ``abort`` (abort the process
  group so that a rank blocked in native code waiting for its peers is freed: a gloo collective,
  or with NCCL a wait for the GPU such as ``.item()``). When the pipe closes, or the parent
  process is gone, it ends this process at once.

SIGINT raises ``KeyboardInterrupt`` in a running cell and is ignored between cells; SIGUSR1
prints every thread's stack (faulthandler) to stderr, for a rank whose listener cannot run.
"""

from __future__ import annotations

# torch.distributed re-exports its documented TCPStore without __all__, which pyright reads as private:
# pyright: reportPrivateImportUsage=false
import ast
import contextlib
import ctypes
import datetime
import faulthandler
import io
import linecache
import os
import pickle
import queue
import signal
import sys
import threading
import time
import traceback
import types
from multiprocessing.connection import Connection
from typing import Any

PARENT_POLL_S = 1.0
"""How often the listener checks that the parent (the notebook kernel) is still there."""
STORE_TIMEOUT_S = 120.0


class _State:
    busy = False  # a cell is running: SIGINT raises KeyboardInterrupt
    store: Any = None  # rank 0 keeps its TCPStore (the rendezvous) alive
    cell_file = __file__


_state = _State()
try:
    _libc: Any = ctypes.CDLL(None)  # fflush(NULL): output of C code (NCCL's warnings) reaches the pipe first
except OSError:
    _libc = None
_send_lock = threading.Lock()


def _send(conn: Connection, message: tuple[Any, ...]) -> None:
    with _send_lock:
        conn.send(message)


def _flush() -> None:
    """Flush Python's and C's buffered output, so it reaches the pipes before the reply does."""
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    if _libc is not None:
        _libc.fflush(None)


def _on_sigint(signum: int, frame: Any) -> None:
    if _state.busy:
        raise KeyboardInterrupt


def _end() -> None:
    """End this rank now, with any process it started (a DataLoader's workers, a subprocess)."""
    with contextlib.suppress(Exception):  # ending must not fail
        import psutil

        for child in psutil.Process().children(recursive=True):
            with contextlib.suppress(psutil.Error):
                child.kill()
    os._exit(0)


def _listen(cmd: Connection, reply: Connection, commands: queue.Queue, ns: dict[str, Any]) -> None:
    """The listener thread (see the module docstring)."""
    parent = os.getppid()
    while True:
        try:
            if not cmd.poll(PARENT_POLL_S):
                if os.getppid() != parent:
                    _end()  # the kernel died and we were re-parented
                continue
            message = cmd.recv()
        except (EOFError, OSError):
            _end()  # the kernel closed the pipe (stop) or died
        kind, cid = message[0], message[1]
        if kind in ("stacks", "abort"):
            try:
                text = _main_stack() if kind == "stacks" else _abort()
            except Exception as exc:  # noqa: BLE001 - this thread must live on: it ends the rank
                text = f"{kind} failed: {type(exc).__name__}: {exc}"
            try:
                _send(reply, ("stacks" if kind == "stacks" else "aborted", cid, text))
            except OSError:
                _end()  # the kernel is gone
        else:
            commands.put(message)


def _main_stack() -> str:
    """The main thread's Python stack, cell frames with their source lines."""
    ident = threading.main_thread().ident
    frame = sys._current_frames().get(ident) if ident is not None else None
    if frame is None:
        return "(no stack: the main thread is gone)"
    entries = [e for e in traceback.extract_stack(frame) if not _ours(e.filename)]
    if not entries:
        return "(idle: no cell is running)"
    return "Stack (most recent call last):\n" + "".join(traceback.format_list(entries)).rstrip()


def _abort() -> str:
    import torch.distributed as dist

    if not dist.is_initialized():
        return "no process group"
    t0 = time.perf_counter()
    dist.distributed_c10d._abort_process_group()
    return f"aborted in {time.perf_counter() - t0:.3f} s"


def _init_group(opts: dict[str, Any], reply: Connection, cid: int, ns: dict[str, Any]) -> dict[str, Any]:
    """Create (or, after an abort, re-create) the default process group."""
    import torch
    import torch.distributed as dist

    rank, world_size = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    local_rank = int(os.environ["LOCAL_RANK"])
    backend = os.environ["NVTUTORIAL_RANKS_BACKEND"]
    t0 = time.perf_counter()
    if dist.is_initialized():
        dist.distributed_c10d._abort_process_group()  # never blocks, unlike destroy with a stuck peer
    if backend == "nccl":
        device = torch.device("cuda", local_rank)
        torch.cuda.set_device(device)
    else:
        device = torch.device("cpu")
    timeout = datetime.timedelta(seconds=STORE_TIMEOUT_S)
    if rank == 0:
        _state.store = dist.TCPStore("127.0.0.1", 0, world_size, True, timeout=timeout, wait_for_workers=False)
        port = _state.store.port
        _send(reply, ("port", cid, port))
        store = _state.store
    else:
        port = int(opts["port"])
        store = dist.TCPStore("127.0.0.1", port, world_size, False, timeout=timeout)
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    kwargs: dict[str, Any] = {"backend": backend, "store": store, "rank": rank, "world_size": world_size}
    if opts.get("pg_timeout"):
        kwargs["timeout"] = datetime.timedelta(seconds=float(opts["pg_timeout"]))
    if backend == "nccl":
        kwargs["device_id"] = device
    dist.init_process_group(**kwargs)
    ns.update(
        rank=rank, world_size=world_size, local_rank=local_rank, device=device, backend=backend, dist=dist, torch=torch
    )
    return {"status": "ok", "seconds": time.perf_counter() - t0, "backend": backend, "port": port}


def _ours(filename: str) -> bool:
    """Frames of this module and of the ``-c`` line that started it: not shown to the learner."""
    return filename in (__file__, "<string>")


def _error(exc: BaseException) -> dict[str, Any]:
    """An outcome for an exception; its traceback leaves out this module's frames."""
    te = traceback.TracebackException.from_exception(exc)
    seen = set()
    part: traceback.TracebackException | None = te
    while part is not None and id(part) not in seen:
        seen.add(id(part))
        part.stack = traceback.StackSummary.from_list([f for f in part.stack if not _ours(f.filename)])
        part = part.__cause__ or part.__context__
    if isinstance(exc, SyntaxError) and str(exc.filename).startswith("<ranks cell"):
        text = "".join(te.format_exception_only())  # the cell did not compile: no frames to show
    else:
        text = "".join(te.format())
    status = "interrupted" if isinstance(exc, KeyboardInterrupt) else "error"
    return {"status": status, "exc_type": type(exc).__qualname__, "message": str(exc), "traceback": text.rstrip()}


def _exec(opts: dict[str, Any], ns: dict[str, Any]) -> dict[str, Any]:
    """Run a cell's code in ``ns``; the value of a final expression is printed, as Jupyter shows it."""
    name = f"<ranks cell {opts['cell']}>"
    code = opts["code"]
    linecache.cache[name] = (len(code), None, code.splitlines(True), name)
    try:
        tree = ast.parse(code, name)
        last = None
        if tree.body and isinstance(tree.body[-1], ast.Expr):
            last = ast.Expression(tree.body.pop().value)
        body = compile(tree, name, "exec")
        tail = compile(last, name, "eval") if last is not None else None
    except SyntaxError as exc:
        return _error(exc)
    t0 = time.perf_counter()
    try:
        _state.busy = True
        try:
            exec(body, ns)  # noqa: S102 - running the learner's cell is the point
            value = eval(tail, ns) if tail is not None else None
        finally:
            _state.busy = False
        if value is not None:
            print(repr(value))
    except BaseException as exc:  # noqa: BLE001 - SystemExit and KeyboardInterrupt end the cell, not the rank
        outcome = _error(exc)
        del exc
        return outcome
    finally:
        _flush()
    return {"status": "ok", "seconds": time.perf_counter() - t0}


class _CpuPickler(pickle.Pickler):
    """Pickles tensors as detached CPU copies, wherever they sit inside the value."""

    def reducer_override(self, obj: Any) -> Any:
        torch = sys.modules.get("torch")
        if torch is not None and isinstance(obj, torch.Tensor) and (obj.device.type != "cpu" or obj.requires_grad):
            return obj.detach().cpu().__reduce_ex__(pickle.DEFAULT_PROTOCOL)
        return NotImplemented


def _pull(opts: dict[str, Any], ns: dict[str, Any]) -> dict[str, Any]:
    name = opts["name"]
    if name.isidentifier():
        if name not in ns:
            return {
                "status": "error",
                "exc_type": "NameError",
                "message": f"name {name!r} is not defined on this rank",
                "traceback": "",
            }
        value = ns[name]
    else:
        try:
            _state.busy = True  # an expression may take long: the kernel's interrupt (SIGINT) stops it
            value = eval(compile(name, "<pull>", "eval"), ns)
        except BaseException as exc:  # noqa: BLE001 - reported to the kernel
            return _error(exc)
        finally:
            _state.busy = False
    buffer = io.BytesIO()
    try:
        _CpuPickler(buffer, protocol=pickle.DEFAULT_PROTOCOL).dump(value)
    except Exception as exc:  # noqa: BLE001 - any pickling failure is reported to the kernel
        return {
            "status": "error",
            "exc_type": type(exc).__qualname__,
            "message": f"{name} ({type(value).__qualname__}) cannot be pickled: {exc}",
            "traceback": "",
        }
    return {"status": "ok", "value": buffer.getvalue()}


def _push(opts: dict[str, Any], ns: dict[str, Any]) -> dict[str, Any]:
    ns.update(pickle.loads(opts["values"]))
    return {"status": "ok"}


def main() -> None:
    """Serve commands until the kernel closes the pipe or dies."""
    cmd = Connection(int(sys.argv[1]), writable=False)
    reply = Connection(int(sys.argv[2]), readable=False)
    sys.stdout.reconfigure(line_buffering=True)  # type: ignore[union-attr]
    sys.stderr.reconfigure(line_buffering=True)  # type: ignore[union-attr]
    signal.signal(signal.SIGINT, _on_sigint)
    faulthandler.register(signal.SIGUSR1, all_threads=True)
    # The cells' namespace is a module called __main__, so classes defined in a cell can be pickled.
    user = types.ModuleType("__main__")
    user.__dict__["__builtins__"] = __builtins__
    sys.modules["__main__"] = user
    ns = user.__dict__
    commands: queue.Queue = queue.Queue()
    threading.Thread(target=_listen, args=(cmd, reply, commands, ns), name="ranks-listener", daemon=True).start()
    # imported while the other ranks start: the slow part of a cold start
    import torch.distributed  # noqa: F401

    handlers = {"exec": _exec, "pull": _pull, "push": _push}
    while True:
        kind, cid, opts = commands.get()
        try:
            if kind in ("init", "reinit"):
                outcome = _init_group(opts, reply, cid, ns)
            else:
                outcome = handlers[kind](opts, ns)
        except BaseException as exc:  # noqa: BLE001 - a failed init or pull is reported, the rank stays
            _state.busy = False
            outcome = _error(exc)
        _flush()
        _send(reply, ("done", cid, outcome))
