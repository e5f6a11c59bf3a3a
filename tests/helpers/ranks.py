"""N real gloo ranks forked from the test process, for the collectives' and the checkers' tests at 2, 3 and 4 ranks.

``on_ranks(fn, world, *args)`` forks ``world`` processes, each joins one gloo process group (a file store in
a temporary folder), runs ``fn(*args)`` and sends its return value back; the values come back in rank
order. A rank that raises fails the call with that rank's traceback; ranks still running at ``timeout``
(a send without its receive: the typical bug in a hand-written collective) are killed, and the call
raises :class:`RanksHung` naming them. Nothing is left running either way.

Forking (rather than starting interpreters) costs milliseconds, and the ranks run the very code the test
process imported. The mutation tool relies on both: it forks from a process that has imported the
mutated code and switches one mutant on for the whole tree; and while it records which tests call which
function, the ranks' records are sent back with their results (:func:`_mutmut_hits`).
"""

from __future__ import annotations

import multiprocessing
import os
import pickle
import tempfile
import time
import traceback
from collections.abc import Callable
from typing import Any


class RanksHung(AssertionError):
    """Some ranks did not finish in time (killed); ``finished`` holds the ranks that did."""

    def __init__(self, message: str, finished: dict[int, Any]):
        super().__init__(message)
        self.finished = finished


def _mutmut_hits() -> set[str]:
    """The functions the mutation tool saw this rank call (only while it records them; else empty)."""
    if os.environ.get("MUTANT_UNDER_TEST") != "stats":
        return set()
    try:
        from mutmut.state import state  # pyright: ignore[reportMissingImports]  # mutation runs only (`make mutate`)
    except ImportError:
        return set()
    return set(state()._stats)


def _record_hits(hits: set[str]) -> None:
    if hits:
        from mutmut.state import state  # pyright: ignore[reportMissingImports]  # only where hits were recorded

        state()._stats |= hits


def _rank_main(
    fn: Callable[..., Any], rank: int, world: int, store: str, args: tuple, env: dict[str, str], conn: Any
) -> None:
    status, payload = "error", None
    try:
        import torch
        import torch.distributed as dist

        torch.set_num_threads(1)  # the parent's OpenMP pool did not survive the fork: stay on this thread
        os.environ.update(
            {
                "RANK": str(rank),
                "WORLD_SIZE": str(world),
                "LOCAL_RANK": str(rank),
                "LOCAL_WORLD_SIZE": str(world),
                **env,
            }
        )
        # TORCH_DISTRIBUTED_DEBUG is read when torch starts: read it again here (torch.distributed re-exports it from
        # torch._C without naming it in __all__)
        dist.set_debug_level_from_env()  # pyright: ignore[reportPrivateImportUsage]
        dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=world)
        try:
            payload = fn(*args)
            status = "ok"
        finally:
            dist.destroy_process_group()
    except BaseException:
        payload = traceback.format_exc()
    try:
        # plain pickle: tensors travel as bytes (multiprocessing's pickler would share them through a file
        # descriptor that dies with this process)
        conn.send_bytes(pickle.dumps((status, payload, _mutmut_hits())))
    finally:
        conn.close()
        os._exit(0)


def on_ranks(
    fn: Callable[..., Any], world: int, *args: Any, timeout: float = 60.0, env: dict[str, str] | None = None
) -> list[Any]:
    """``fn(*args)`` on ``world`` gloo ranks (``env`` set in each first); every rank's return value, in rank order."""
    ctx = multiprocessing.get_context("fork")
    with tempfile.TemporaryDirectory(prefix="nvtutorial-ranks-") as folder:
        store = os.path.join(folder, "store")
        pipes = [ctx.Pipe(duplex=False) for _ in range(world)]
        procs = [
            ctx.Process(target=_rank_main, args=(fn, r, world, store, args, dict(env or {}), pipes[r][1]), daemon=True)
            for r in range(world)
        ]
        for p in procs:
            p.start()
        for _, send in pipes:
            send.close()
        results: dict[int, tuple[str, Any]] = {}
        deadline = time.monotonic() + timeout
        try:
            while len(results) < world and time.monotonic() < deadline:
                for r, (recv, _) in enumerate(pipes):
                    if r in results or not recv.poll(0.01):
                        continue
                    try:
                        status, payload, hits = pickle.loads(recv.recv_bytes())
                    except EOFError:
                        status, payload, hits = "error", f"rank {r} died (exit code {procs[r].exitcode})", set()
                    _record_hits(hits)
                    results[r] = (status, payload)
                    if status != "ok":  # one rank failed: the others may wait for it forever
                        deadline = min(deadline, time.monotonic() + 5.0)
        finally:
            for p in procs:
                if p.is_alive():
                    p.kill()
                p.join(5)
        failed = {r: payload for r, (status, payload) in results.items() if status != "ok"}
        if failed:
            r = min(failed)
            raise AssertionError(f"rank {r} of {world} failed:\n{failed[r]}")
        if len(results) < world:
            missing = sorted(set(range(world)) - set(results))
            raise RanksHung(
                f"ranks {missing} of {world} did not finish within {timeout:g} s (killed): a rank waits "
                "for a message no rank sends",
                {r: p for r, (_, p) in results.items()},
            )
        return [results[r][1] for r in range(world)]


# --------------------------------------------------------------------------- single processes, for the process checks
def forked(state: str) -> int:
    """The pid of a child that is ``alive`` (killed and reaped by :func:`reap`), a ``zombie`` or ``gone``."""
    import psutil

    pid = os.fork()
    if pid == 0:
        if state == "alive":
            time.sleep(60)
        os._exit(0)
    if state == "gone":
        os.waitpid(pid, 0)
    deadline = time.monotonic() + 30
    while state == "zombie" and psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
        assert time.monotonic() < deadline
        time.sleep(0.01)
    return pid


def reap(*pids: int) -> None:
    import signal

    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
        except (ProcessLookupError, ChildProcessError):
            pass
