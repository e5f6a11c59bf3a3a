"""The kernel side of ``%%ranks``: N worker processes, their output, and recovery from hangs.

A :class:`Pool` owns one process per rank (:mod:`nvtutorial.teach._ranks_worker`), each with a
command pipe, a reply pipe, and its stdout and stderr as pipes. While a command runs the kernel's
main thread waits on all of them at once (``select``): output lines are printed as they arrive,
labelled ``[rankN]``, and each rank's reply ends its part of the command.

The ranks are processes of the course's process layer (:mod:`nvtutorial.launch`): forked from the
warm interpreter where it can serve them (else started cold, and the cell says why), with the
launcher's environment rule, and ended by its :class:`~nvtutorial.launch.tree.ProcessTree`.
This module never imports torch: the kernel must not initialise CUDA.
"""

from __future__ import annotations

import codecs
import os
import pickle
import select
import signal
import subprocess
import sys
import time
from multiprocessing.connection import Connection
from typing import Any

from nvtutorial.i18n import N_, tr
from nvtutorial.launch import warm
from nvtutorial.launch.environment import base_environment, torchrun_variables
from nvtutorial.launch.tree import ProcessTree
from nvtutorial.teach._ranks_result import (
    CellResult,
    RankOutcome,
    RanksCommandInterrupted,
    RanksError,
    RanksInterrupted,
    exit_text,
    rank_list,
)

INTERRUPT_GRACE_S = 1.0
"""After SIGINT, a rank gets this long to stop before its process group is aborted."""
ABORT_GRACE_S = 5.0
"""After the abort, a rank gets this long to stop before every rank is ended."""
FAILURE_GRACE_S = 2.0
"""When a rank fails, the others get this long to finish before they are stopped."""
STACKS_WAIT_S = 1.5
STOP_GRACE_S = 2.0
START_TIMEOUT_S = 180.0
PULL_TIMEOUT_S = 60.0
PARTIAL_LINE_S = 1.0
"""Text without a newline is shown after this long (a prompt, a progress bar)."""
CAPTURE_LIMIT = 1_000_000
"""Characters of each rank's output a :class:`RankOutcome` keeps (the last ones)."""

BOOT = "from nvtutorial.teach._ranks_worker import main; main()"


class _Worker:
    """One rank's process and pipes, as the kernel sees them."""

    def __init__(self, rank: int, proc: Any, cmd: Connection, reply: Connection, out: int, err: int) -> None:
        self.rank = rank
        self.proc = proc
        """A warm :class:`~nvtutorial.launch.warm.Forked` or a cold :class:`subprocess.Popen`."""
        self.cmd = cmd
        self.reply = reply
        self.streams = {out: "stdout", err: "stderr"}
        self.decoders = {fd: codecs.getincrementaldecoder("utf-8")(errors="replace") for fd in self.streams}
        self.partial = {fd: "" for fd in self.streams}
        self.partial_since = {fd: 0.0 for fd in self.streams}
        self.inbox: dict[tuple[str, int], Any] = {}
        self.alive = True
        self.eof: set[int] = set()
        for fd in self.streams:
            os.set_blocking(fd, False)

    @property
    def pid(self) -> int:
        return self.proc.pid

    def send(self, message: tuple[Any, ...]) -> bool:
        try:
            self.cmd.send(message)
            return True
        except (OSError, ValueError):
            return False


class Pool:
    """``nproc`` worker processes whose process group is initialised (see :mod:`nvtutorial.teach.ranks`)."""

    def __init__(
        self, nproc: int, backend: str, env: dict[str, str], pg_timeout: float | None = None, cold: bool = False
    ) -> None:
        self.nproc = nproc
        self.backend = backend
        self.env = dict(env)
        self.pg_timeout = pg_timeout
        self.workers: list[_Worker] = []
        self.show = True
        self.tick: Any = None
        """Called as ``tick(seconds since the cell began, seconds since a line was last shown)`` while a cell runs."""
        self.last_shown = 0.0
        self.cells = 0
        self._cid = 0
        self._capture: dict[int, list[str]] | None = None
        self.started_at: float | None = None
        self.start_s: float | None = None
        self.cold = cold
        """Start the ranks cold (``python`` each) instead of forking them from the warm interpreter."""
        self.cold_reason: str | None = None
        """Why ranks that could have been forked warm started cold."""
        self.tree = ProcessTree()

    # ----- processes -------------------------------------------------------------------------
    def _environment(self, rank: int) -> dict[str, str]:
        """The launcher's rule (:mod:`nvtutorial.launch.environment`): the run's environment, then torchrun's
        variables for this rank; rank 0 hosts the store, so ``MASTER_PORT`` is set when the group forms."""
        overrides = dict(self.env)
        if self.backend != "gloo":
            # torch's _abort_process_group wants NCCL's watchdog to leave errors to us (its docs), rather
            # than end the process: then a rank stuck in a collective keeps its variables. --env overrides.
            overrides = {"TORCH_NCCL_ASYNC_ERROR_HANDLING": "0", **overrides}
        env = base_environment(self.nproc, self.backend, overrides)
        env.update(torchrun_variables(rank, self.nproc, None, f"ranks-{os.getpid()}", "", env, agent_store=False))
        env.pop("TORCHELASTIC_ERROR_FILE")
        env["NVTUTORIAL_RANKS_BACKEND"] = self.backend
        env["MASTER_ADDR"] = "127.0.0.1"
        return env

    def _spawn(self, rank: int) -> _Worker:
        """Start rank ``rank``'s process (forked warm where it can) with its command, reply and output pipes."""
        pipes = [os.pipe() for _ in range(4)]  # command, reply, stdout, stderr
        (cmd_r, cmd_w), (reply_r, reply_w), (out_r, out_w), (err_r, err_w) = pipes
        devnull = os.open(os.devnull, os.O_RDONLY)
        try:
            proc, why = warm.start_python(
                ["-c", BOOT, warm.PassFd(cmd_r), warm.PassFd(reply_w)],
                env=self._environment(rank),
                stdin=devnull,
                stdout=out_w,
                stderr=err_w,
                cold=self.cold,
                title=f"python -c {BOOT!r}  [%%ranks rank {rank}/{self.nproc}, nvtutorial]",
            )
        except BaseException:
            for fd in (*(fd for pair in pipes for fd in pair), devnull):
                os.close(fd)
            raise
        for fd in (cmd_r, reply_w, out_w, err_w, devnull):
            os.close(fd)
        if why and self.cold_reason is None:
            self.cold_reason = why
        self.tree.add(proc)
        return _Worker(rank, proc, Connection(cmd_w, readable=False), Connection(reply_r, writable=False), out_r, err_r)

    @property
    def running(self) -> bool:
        """Started and not stopped (a rank may still have exited: see :meth:`dead`)."""
        return bool(self.workers)

    def pids(self) -> list[int]:
        return [w.pid for w in self.workers]

    def dead(self) -> list[_Worker]:
        """Workers whose process has exited."""
        return [w for w in self.workers if not w.alive or w.proc.poll() is not None]

    def start(self) -> None:
        """Start the processes and create the process group; raises :class:`RanksError` if that fails."""
        t0 = time.perf_counter()
        self.workers = []
        try:
            for r in range(self.nproc):
                self.workers.append(self._spawn(r))
            problem = self._init_group("init", START_TIMEOUT_S)
        except BaseException:
            self.stop()
            raise
        if problem:
            self.stop()
            raise RanksError(problem)
        self.started_at = time.time()
        self.start_s = time.perf_counter() - t0

    def _init_group(self, kind: str, timeout: float) -> str | None:
        """Create the process group on every rank (rank 0 hosts the rendezvous); the problem, if any."""
        cid = self._next_id()
        opts = {"pg_timeout": self.pg_timeout}
        deadline = time.monotonic() + timeout
        first, rest = self.workers[0], self.workers[1:]
        first.send((kind, cid, opts))
        self._wait(lambda: ("port", cid) in first.inbox or ("done", cid) in first.inbox or not first.alive, deadline)
        if ("port", cid) in first.inbox:
            for w in rest:
                w.send((kind, cid, {**opts, "port": first.inbox[("port", cid)]}))
            self._wait(lambda: all(("done", cid) in w.inbox or not w.alive for w in self.workers), deadline)
        else:
            rest = []  # rank 0 failed before hosting the rendezvous: the others were never asked
        problems = []
        for w in [first, *rest]:
            outcome = w.inbox.get(("done", cid))
            if outcome is None:
                why = f"ended ({exit_text(w.proc.poll())})" if not w.alive else f"did not answer within {timeout:g} s"
                problems.append(f"rank {w.rank} {why}")
            elif outcome["status"] != "ok":
                problems.append(f"rank {w.rank}: {outcome.get('traceback') or outcome['message']}")
        if not problems:
            return None
        return f"creating the {self.backend} process group failed:\n" + "\n".join(problems)

    def stop(self) -> None:
        """End every rank (closing its command pipe ends it at once) and anything it started."""
        workers, self.workers = self.workers, []
        tree, self.tree = self.tree, ProcessTree()
        for proc in tree.processes():  # remembered now: a rank's children outlive it, re-parented
            tree.adopt(proc)
        for w in workers:
            w.cmd.close()
        for w in workers:
            try:
                w.proc.wait(timeout=STOP_GRACE_S)
            except subprocess.TimeoutExpired:
                pass
        tree.end(grace=1.0)
        for w in workers:
            self._read_output(w)
            self._flush_partial(w, force=True)
            for fd in w.streams:
                os.close(fd)
            w.reply.close()

    # ----- the event loop --------------------------------------------------------------------
    def _next_id(self) -> int:
        self._cid += 1
        return self._cid

    def _wait(self, done: Any, deadline: float | None) -> bool:
        """Handle output and replies until ``done()`` or the deadline; whether ``done()`` came true."""
        while not done():
            now = time.monotonic()
            if deadline is not None and now >= deadline:
                return False
            self._pump(0.05 if deadline is None else min(0.05, deadline - now))
        return True

    def _pump(self, timeout: float) -> None:
        """Wait up to ``timeout`` for output or replies, and handle what came."""
        fds: dict[int, tuple[_Worker, str]] = {}
        for w in self.workers:
            if w.alive:
                fds[w.reply.fileno()] = (w, "reply")
            for fd in w.streams:
                if fd not in w.eof:
                    fds[fd] = (w, "out")
        if not fds:
            time.sleep(timeout)
            return
        ready, _, _ = select.select(list(fds), [], [], max(0.0, timeout))
        for fd in ready:
            w, what = fds[fd]
            if what == "out":
                self._read_output(w, fd, limit=16)
            elif w.alive:
                try:
                    kind, cid, payload = w.reply.recv()
                except (EOFError, OSError, pickle.UnpicklingError, ValueError, TypeError):
                    # the process ended (or a reply was cut by an interrupt): its output is still read
                    w.alive = False
                    self._read_output(w)
                    continue
                self._read_output(w)  # output written before the reply comes first
                w.inbox[(kind, cid)] = payload
        for w in self.workers:
            self._flush_partial(w)

    def _read_output(self, w: _Worker, only: int | None = None, limit: int | None = None) -> None:
        """Read what is in ``w``'s output pipes now (at most ``limit`` chunks each: a rank printing
        without pause cannot keep the kernel from its deadline)."""
        for fd, stream in w.streams.items():
            if (only is not None and fd != only) or fd in w.eof:
                continue
            chunks: list[bytes] = []
            while limit is None or len(chunks) < limit:
                try:
                    data = os.read(fd, 65536)
                except (BlockingIOError, InterruptedError):
                    break
                except OSError:
                    data = b""
                if not data:
                    w.eof.add(fd)
                    break
                chunks.append(data)
            if chunks:
                self._feed(w, fd, stream, w.decoders[fd].decode(b"".join(chunks)))

    def _feed(self, w: _Worker, fd: int, stream: str, text: str) -> None:
        """Emit the complete lines; of a line rewritten with carriage returns (a progress bar), its last state."""
        *lines, rest = (w.partial[fd] + text).split("\n")
        for line in lines:
            self._emit(w.rank, stream, line.rstrip("\r").rsplit("\r", 1)[-1])
        if rest and not w.partial[fd]:
            w.partial_since[fd] = time.monotonic()
        w.partial[fd] = rest.rsplit("\r", 1)[-1] if "\r" in rest.rstrip("\r") else rest

    def _flush_partial(self, w: _Worker, force: bool = False) -> None:
        for fd, stream in w.streams.items():
            if w.partial[fd] and (force or time.monotonic() - w.partial_since[fd] > PARTIAL_LINE_S):
                text, w.partial[fd] = w.partial[fd].rstrip("\r"), ""
                if text:
                    self._emit(w.rank, stream, text)

    def _emit(self, rank: int, stream: str, line: str) -> None:
        if self._capture is not None and rank in self._capture:
            self._capture[rank].append(line)
        if self.show:
            print(f"[rank{rank}] {line}", file=sys.stderr if stream == "stderr" else sys.stdout, flush=False)
            self.last_shown = time.monotonic()

    def drain(self) -> None:
        """Show output the ranks wrote since the last command (a background thread, say)."""
        self._pump(0.0)
        for w in self.workers:
            self._flush_partial(w, force=True)
        _flush_console()

    # ----- commands --------------------------------------------------------------------------
    def run(self, code: str, timeout: float | None, ranks: list[int] | None = None) -> CellResult:
        """Run ``code`` on ``ranks`` (default: all); never raises for a rank's failure (see the result)."""
        targets = [w for w in self.workers if ranks is None or w.rank in ranks]
        self.drain()
        self.cells += 1
        cid = self._next_id()
        for w in self.workers:
            w.inbox.clear()
        self._capture = {w.rank: [] for w in targets}
        t0 = time.monotonic()
        self.last_shown = t0
        deadline = None if not timeout else t0 + timeout
        reason: str | None = None
        failed_at: float | None = None
        try:
            for w in targets:
                w.send(("exec", cid, {"code": code, "cell": self.cells}))

            def pending() -> list[_Worker]:
                return [w for w in targets if w.alive and ("done", cid) not in w.inbox]

            while pending():
                now = time.monotonic()
                if failed_at is None and any(
                    not w.alive or w.inbox.get(("done", cid), {}).get("status", "ok") != "ok" for w in targets
                ):
                    failed_at = now
                if failed_at is not None and now - failed_at > FAILURE_GRACE_S:
                    reason = "failure"
                    break
                if deadline is not None and now > deadline:
                    reason = "timeout"
                    break
                self._pump(0.05)
                if self.tick is not None:
                    _flush_console()
                    self.tick(now - t0, now - self.last_shown)
        except KeyboardInterrupt:
            reason = "interrupt"
        busy = [w for w in targets if w.alive and ("done", cid) not in w.inbox]
        stacks: dict[int, str] = {}
        result = CellResult(outcomes=[], reason=reason, timeout=timeout)
        if any(not w.alive for w in targets):
            result.reason = result.reason or "died"
        recovery_error: BaseException | None = None
        try:
            if reason in ("failure", "timeout") and busy:
                stacks = self._stacks(busy)
            if result.reason is not None:
                result.recovery, result.group_kept = self._recover(busy, cid, result.reason)
        except KeyboardInterrupt as exc:  # an interrupt while stopping the ranks: end them all
            recovery_error = exc
            self.stop()
            result.recovery, result.group_kept = (
                ended_every_rank(N_("interrupted again while they were being stopped")),
                False,
            )
        for w in self.workers:
            self._flush_partial(w, force=True)
        _flush_console()
        by_rank = {w.rank: w for w in targets}
        for r in range(self.nproc):
            result.outcomes.append(self._outcome(r, by_rank.get(r), cid, busy, stacks, result.reason))
        self._capture = None
        result.wall_s = time.monotonic() - t0
        if recovery_error is not None:
            raise RanksInterrupted(result) from None
        return result

    def _outcome(
        self, rank: int, w: _Worker | None, cid: int, busy: list[_Worker], stacks: dict[int, str], reason: str | None
    ) -> RankOutcome:
        output = "\n".join((self._capture or {}).get(rank, []))[-CAPTURE_LIMIT:]
        if w is None:
            return RankOutcome(rank, "skipped")
        reply = w.inbox.get(("done", cid))
        if reply is None and not w.alive:
            return RankOutcome(rank, "died", exitcode=w.proc.poll(), output=output)
        reply = reply or {}
        status = reply.get("status", "stopped")
        if w in busy:  # still running when the cell ended: what it raised then was our doing
            status = {"timeout": "timeout", "interrupt": "interrupted"}.get(reason or "", "stopped")
        return RankOutcome(
            rank,
            status,
            exc_type=reply.get("exc_type"),
            message=reply.get("message"),
            traceback=reply.get("traceback"),
            stack=stacks.get(rank),
            output=output,
        )

    def _stacks(self, busy: list[_Worker]) -> dict[int, str]:
        """Each busy rank's Python stack: from its listener thread, else faulthandler (SIGUSR1)."""
        cid = self._next_id()
        for w in busy:
            w.send(("stacks", cid, None))
        self._wait(
            lambda: all(("stacks", cid) in w.inbox or not w.alive for w in busy), time.monotonic() + STACKS_WAIT_S
        )
        stacks = {w.rank: w.inbox[("stacks", cid)] for w in busy if ("stacks", cid) in w.inbox}
        silent = [w for w in busy if w.rank not in stacks and w.alive]
        if silent:
            marks = {w.rank: len((self._capture or {}).get(w.rank, [])) for w in silent}
            for w in silent:
                _signal(w, signal.SIGUSR1)  # faulthandler writes every thread's stack to its stderr
            self._wait(lambda: False, time.monotonic() + 0.5)
            for w in silent:
                lines = (self._capture or {}).get(w.rank, [])[marks[w.rank] :]
                stacks[w.rank] = "\n".join(lines) or "(no stack: the rank did not answer)"
        return stacks

    def _recover(self, busy: list[_Worker], cid: int, reason: str) -> tuple[str | None, bool]:
        """Stop the ranks still running ``cid`` and make the group usable; (what happened, group kept)."""
        dead = [w for w in self.workers if not w.alive]
        if dead:
            codes = ", ".join(f"rank {w.rank} ({tr(exit_text(w.proc.wait()))})" for w in dead)
            self.stop()
            return self._restart(N_("{ranks} exited", ranks=codes)), False
        if not busy:
            return None, True
        t0 = time.monotonic()
        for w in busy:
            _signal(w, signal.SIGINT)
        if self._wait(lambda: all(("done", cid) in w.inbox for w in busy), t0 + INTERRUPT_GRACE_S):
            return stopped_at_sigint([w.rank for w in busy], self.backend), True
        blocked = [w for w in busy if ("done", cid) not in w.inbox]
        acks = self._next_id()
        for w in self.workers:
            w.send(("abort", acks, None))
        freed = self._wait(
            lambda: (
                all(("done", cid) in w.inbox for w in busy) and all(("aborted", acks) in w.inbox for w in self.workers)
            ),
            time.monotonic() + ABORT_GRACE_S,
        )
        if not freed:
            stuck = [w.rank for w in busy if ("done", cid) not in w.inbox]
            return self._restart(
                N_(
                    "rank {ranks} did not stop, even with its process group aborted (code that ignores "
                    "KeyboardInterrupt, or native code that never returns)",
                    ranks=rank_list(stuck),
                )
            ), False
        problem = self._init_group("reinit", START_TIMEOUT_S)
        if problem:
            return self._restart(N_("after aborting the process group, {problem}", problem=problem)), False
        return freed_by_abort(
            [w.rank for w in busy], [w.rank for w in blocked], self.backend, time.monotonic() - t0
        ), True

    def _restart(self, why: str) -> str:
        self.stop()
        return ended_every_rank(why)

    def pull(self, expr: str, ranks: list[int] | None = None) -> list[Any]:
        """The value of ``expr`` on each of ``ranks`` (default: all), tensors as CPU copies."""
        targets = [w for w in self.workers if ranks is None or w.rank in ranks]
        replies = self._command(targets, "pull", {"name": expr})
        values = []
        for w in targets:
            reply = replies[w.rank]
            if reply["status"] != "ok":
                raise RanksError(f"pull {expr!r} on rank {w.rank}: {reply['exc_type']}: {reply['message']}")
            values.append(pickle.loads(reply["value"]))
        return values

    def push(self, values: dict[str, Any], ranks: list[int] | None = None) -> None:
        """Set variables on each of ``ranks`` (default: all)."""
        targets = [w for w in self.workers if ranks is None or w.rank in ranks]
        payload = pickle.dumps(values)
        for rank, reply in self._command(targets, "push", {"values": payload}).items():
            if reply["status"] != "ok":
                raise RanksError(f"push on rank {rank}: {reply['exc_type']}: {reply['message']}")

    def _command(self, targets: list[_Worker], kind: str, opts: dict[str, Any]) -> dict[int, dict[str, Any]]:
        self.drain()
        cid = self._next_id()
        for w in targets:
            w.send((kind, cid, opts))
        try:
            self._wait(
                lambda: all(("done", cid) in w.inbox or not w.alive for w in targets), time.monotonic() + PULL_TIMEOUT_S
            )
        except KeyboardInterrupt:
            self._interrupt_command(targets, kind, cid, opts)
        missing = [w.rank for w in targets if ("done", cid) not in w.inbox]
        if missing:
            raise RanksError(
                f"{kind}: rank {rank_list(missing)} did not answer within {PULL_TIMEOUT_S:g} s "
                f"(a rank still busy, or gone): try %ranks restart"
            )
        _flush_console()
        return {w.rank: w.inbox.pop(("done", cid)) for w in targets}

    def _interrupt_command(self, targets: list[_Worker], kind: str, cid: int, opts: dict[str, Any]) -> None:
        """Stop a command that the kernel's interrupt cut short (a pull evaluating an expression): SIGINT to the ranks
        still at it, else every rank is ended. Raises :class:`RanksCommandInterrupted`."""
        busy = [w for w in targets if w.alive and ("done", cid) not in w.inbox]
        for w in busy:
            _signal(w, signal.SIGINT)
        freed = self._wait(
            lambda: all(("done", cid) in w.inbox or not w.alive for w in busy), time.monotonic() + INTERRUPT_GRACE_S
        )
        for w in targets:
            w.inbox.pop(("done", cid), None)
        on = rank_list([w.rank for w in targets])
        what = (
            N_("pulling {name} from rank {ranks}", name=opts["name"], ranks=on)
            if kind == "pull"
            else N_("rank {ranks} answered {kind}", ranks=on, kind=kind)
        )
        running = rank_list([w.rank for w in busy])
        if freed and all(w.alive for w in self.workers):
            raise RanksCommandInterrupted(
                what,
                N_("the {kind} on rank {ranks} (it stopped at SIGINT)", kind=kind, ranks=running),
                N_("the ranks, their variables and the process group"),
            )
        self.stop()
        raise RanksCommandInterrupted(
            what,
            N_("every rank (rank {ranks} did not stop at SIGINT)", ranks=running),
            N_("nothing: the next %%ranks cell starts new ranks, and every rank's variables are lost"),
        )


def stopped_at_sigint(busy: list[int], backend: str) -> str:
    """What a Stop did when every running rank stopped at SIGINT. With NCCL a collective is queued on the GPU and
    the rank goes on: one it queued before it stopped may still wait for its peers, which gloo's synchronous
    collectives never leave behind."""
    if backend == "gloo":
        return N_(
            "ended: the cell on rank {ranks} (every running rank stopped at SIGINT)\n"
            "kept: the ranks, their variables and the process group",
            ranks=rank_list(busy),
        )
    return N_(
        "ended: the cell on rank {ranks} (every running rank stopped at SIGINT)\n"
        "kept: the ranks, their variables and the process group; with NCCL, a collective a rank queued before it "
        "stopped may still wait for its peers, and the next collective can pair with it (wrong values) or hang (its "
        "deadline then aborts the group and creates it again); for a clean group: %ranks stop, then %ranks start",
        ranks=rank_list(busy),
    )


def freed_by_abort(busy: list[int], blocked: list[int], backend: str, seconds: float) -> str:
    """What a Stop did when ``blocked`` ranks did not stop at SIGINT and aborting the process group freed them."""
    where = (
        N_("a gloo collective waiting for its peers")
        if backend == "gloo"
        else N_(
            "with NCCL, a wait for the GPU (.item(), .cpu(), torch.cuda.synchronize()) behind a collective's kernel "
            "that waits for its peers"
        )
    )
    return N_(
        "ended: the cell on rank {ranks}; rank {blocked} did not stop at SIGINT (blocked in native code that SIGINT "
        "cannot interrupt: {where}), so the process group was aborted and created again on every rank in "
        "{seconds:.2f} s\n"
        "kept: the ranks and their variables; objects tied to the old group (a DDP model, groups from "
        "dist.new_group) must be created again",
        ranks=rank_list(busy),
        blocked=rank_list(blocked),
        where=where,
        seconds=seconds,
    )


def ended_every_rank(why: str) -> str:
    """What a Stop or a failure did when the ranks had to be ended."""
    return N_(
        "ended: every rank ({why})\nkept: nothing: the next cell starts new ranks, and every rank's variables are lost",
        why=why,
    )


def _signal(w: _Worker, sig: int) -> None:
    try:
        os.kill(w.pid, sig)
    except ProcessLookupError:
        pass


def _flush_console() -> None:
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
