"""Losing a rank, or a whole node, in the middle of training: torchrun's restart, done for real and timed.

Used in notebook 09. :func:`run_elastic` starts the lesson
``nvtutorial/chapters/ch09_multinode/lessons/elastic_train.py``
as the launcher would (one ``torchrun`` agent per emulated node, c10d rendezvous on localhost), but
keeps each agent in hand so that it can do what a failing cluster does:

- ``Fault("rank", after_step=k)``: SIGKILL one rank's process as soon as rank 0 has logged step
  ``k`` (the kernel's out-of-memory killer does exactly this); its agent sees the dead worker, stops
  the node's other ranks, and, with ``--max-restarts``, starts them all again; another node's rank either fails in
  its next all-reduce (with NCCL: an error raised, or its watchdog ends it) or is stopped by its agent once the
  restarted node waits in the new rendezvous round (the ranks run with :data:`RANK_ENV`: NCCL's watchdog sleeps 4 s,
  not a minute, before it ends a rank);
- ``Fault("node", after_step=k)``: SIGKILL an emulated node's agent and every rank it started, then,
  ``replace_after_s`` after the signals were sent, start a new agent for that node with the same
  command (what an elastic orchestrator, or you, would do; Slurm does not). ``None`` starts none.
  This is kinder than a machine that loses power: the kernel closes the killed processes' sockets, so
  the peers fail at once; a powered-off machine sends nothing, and its peers wait for their collective's
  or TCP's timeouts (and the store's read timeout). The times measured here are a lower bound.

Several faults strike one after the other in the same run: fault ``i`` waits until the ranks have been
started again ``i`` times (a fault that asks for step ``k`` strikes once the current attempt has logged
step ``k``). :meth:`ElasticOutcome.part` gives the outcome as seen from one of them.

While it runs it reads rank 0's log and records, on the kernel's clock, every step and every attempt
(``attempt A: ... starting at step S``), and when the fault struck; from those come the steps lost and
the time to recover (:class:`ElasticOutcome`), and rank 0's lines on its start (the process group joined, the DDP
model built: in a new process DDP's constructor imports ``torch._dynamo``).
Whenever it has said nothing for :data:`SAY_S` it says what the run is doing now
(:mod:`~nvtutorial.chapters.ch09_multinode.lab_narration`): a cell never goes quiet while torchrun starts, restarts or
waits. Whatever happens, every process it started is ended before it returns.

Each agent is forked from the warm interpreter (torch already imported, as the launcher forks ranks elsewhere;
started cold, saying why, where it cannot be); the ranks an agent starts are new processes, as torchrun starts them.
:func:`run_lesson` runs the lesson without a fault, the same way (one node's ranks forked warm by the launcher).
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import json
import os
import re
import socket
import subprocess
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import psutil

from nvtutorial import launch
from nvtutorial.chapters.ch09_multinode.lab_narration import (
    PHASE_LINE,
    SAY_S,
    STEP_LINE,
    after_rank_kill,
    doing,
    last_phase,
    last_step,
    rank_states,
    telling,
)
from nvtutorial.chapters.ch09_multinode.schema_outcome import ElasticOutcome as ElasticOutcome
from nvtutorial.chapters.ch09_multinode.schema_outcome import Fault as Fault
from nvtutorial.chapters.ch09_multinode.schema_outcome import rank0_log as rank0_log
from nvtutorial.chapters.ch09_multinode.schema_outcome import reference_checkpoint as reference_checkpoint
from nvtutorial.launch import diagnosis, warm
from nvtutorial.launch import tree as process_tree
from nvtutorial.launch.environment import NCCL_WATCHDOG, free_port, node_environment
from nvtutorial.machine import hardware
from nvtutorial.results import RunResult

LESSON = Path(__file__).resolve().parent / "lessons" / "elastic_train.py"
"""The lesson every run here trains with."""
POLL_S = 0.02
"""How often rank 0's log is read (the resolution of the times measured here)."""
STRANDED_S = 10.0
"""How long the lab lets the other agents end on their own after one it did not kill failed and none replaces it,
before it ends them (:meth:`_Elastic.stranded`)."""
_ATTEMPT = re.compile(r"^rank 0 of (\d+): starting at step (\d+)")
_ASYNC = "raised the following async exception"
"""The watchdog's line with the NCCL error's own words: said before the lines that follow it (review RR9-10)."""
_ERROR = re.compile(r"^\[rank0\]:\[E\d{4} \S+ \S+\] (.*)")
"""An error line torch's C++ side wrote for rank 0 (ProcessGroupNCCL's watchdog, for one). Its stamp is not read: c10
writes the wall clock's second with the monotonic clock's fraction (review RR12-1, ``report._RANK_STAMP``), so the lab
times the line by when it read it."""
RANK_ENV = NCCL_WATCHDOG
"""The ranks' environment in every elastic run (a caller's ``env`` wins; review RR5-1). After an NCCL error,
ProcessGroupNCCL's watchdog sleeps 4 × ``TORCH_NCCL_WAIT_TIMEOUT_DUMP_MILSEC`` (torch's default 15 000: a minute)
before it ends the process, whether or not a dump is written (torch's ``ProcessGroupNCCL.cpp``,
``Watchdog::runLoop``); 1000 makes that about 4 s. ``TORCH_NCCL_DUMP_ON_TIMEOUT=0`` only skips the flight-recorder
dump. On one H100 (torch 2.11, 2026-12-07) with torch's defaults rank 0 ended about 61 s after its watchdog saw the
error (review R6-1; two C++ log stamps, good to a second); with these, in four runs, its end began 0.2–1.3 s after the
kill (its agent began stopping it, or its next all-reduce raised), before the watchdog's 4 s were up."""
WAIT_MS = "TORCH_NCCL_WAIT_TIMEOUT_DUMP_MILSEC"


def watchdog_note(env: Mapping[str, Any]) -> str:
    """The start event's words on the ranks' NCCL settings in ``env`` (:data:`RANK_ENV` and the caller's): what each
    one does. Raises ValueError when the watchdog's wait is not a whole number of milliseconds."""
    ms = str(env[WAIT_MS])
    if not ms.isdigit():
        raise ValueError(f"{WAIT_MS}={ms!r}: a whole number of milliseconds (the lab's: {RANK_ENV[WAIT_MS]})")
    note = (
        f"; ranks with {WAIT_MS}={ms} (after an NCCL error the watchdog sleeps 4 × that, {4 * int(ms) / 1000:g} s, "
        "before it ends the rank; torch's default: 60 s)"
    )
    if str(env.get("TORCH_NCCL_DUMP_ON_TIMEOUT")) == "0":
        note += " and TORCH_NCCL_DUMP_ON_TIMEOUT=0 (no flight-recorder dump)"
    return note


class RecoveryError(RuntimeError):
    """The elastic run did not end well; the message names what torchrun and the ranks said."""


ONE_NODE_ON_ONE_GPU = "its one-node run needs 2 GPUs: NCCL refuses 2 ranks of one node on one GPU; this machine has 1"
"""Why section 2 runs on the CPU on a machine with one GPU, where sections 3 and 4 put two emulated nodes on it."""


def one_node_reason(plan: Any, part: str, machine: Any) -> Any:
    """``plan`` (a :class:`nvtutorial.course.Plan`) with ``part``'s reason worded by its cause on ``machine``: on one
    GPU a part that compares two nodes with one node of two ranks runs on the CPU because NCCL refuses the one node's
    two ranks on one GPU (a duplicate GPU), while two emulated nodes, each with its own host id, can share it."""
    placed = plan[part]
    if len(machine.gpus) != 1 or placed.gpus:
        return plan
    asked = placed.why[placed.why.index(" (profile=") :] if " (profile=" in placed.why else ""
    why = ONE_NODE_ON_ONE_GPU + asked
    parts = tuple(dataclasses.replace(p, why=why) if p is placed else p for p in plan.parts)
    return dataclasses.replace(plan, parts=parts)


def checkpoint_dir(name: str) -> Path:
    """A new folder for a run's checkpoints under the runs folder (a restarted job must find its own; a fresh run
    must not find an old one), pruned with the finished runs (:func:`nvtutorial.launch.files_folder`)."""
    return launch.files_folder(name)


def lesson_args(sizes: Mapping[str, Any], ckpt_dir: str | os.PathLike[str]) -> list[str]:
    """The lesson's command-line arguments for ``sizes`` (``{"steps": 40, "every": 10, ...}``)."""
    args = []
    for key, value in sizes.items():
        args += [f"--{key.replace('_', '-')}", str(value)]
    return [*args, "--ckpt-dir", str(ckpt_dir)]


def keep_alive_conf(keep_alive_s: float) -> str:
    """The ``--rdzv-conf`` items that make c10d count a node as gone after about ``keep_alive_s`` without a heartbeat:
    ``keep_alive_interval`` × ``keep_alive_max_attempt`` (5 s × 3 by default). A lost node's replacement can join
    the next round only then. Whole seconds: a heartbeat every ``keep_alive_s / 3`` (1 s at least), and never fewer
    than 3 attempts (3 s at least), c10d's own margin: with 2, a heartbeat a little late drops a live agent from its
    round, and a peer's restart then opens a new round instead of waiting in this one (review R6-2)."""
    interval = max(1, round(keep_alive_s / 3))
    return f",keep_alive_interval={interval},keep_alive_max_attempt={max(3, round(keep_alive_s / interval))}"


class _Elastic:
    """The agents of one elastic run, the fault, and what rank 0's log said when."""

    def __init__(
        self,
        spec: launch.LaunchSpec,
        faults: Sequence[Fault],
        keep_alive_s: float,
        show: bool,
        join_timeout_s: float | None = None,
    ) -> None:
        self.spec, self.faults, self.show = spec, list(faults), show
        self.port = free_port()
        self.gpu_ids = [g.uuid for g in hardware.gpus()] if spec.nnodes > 1 and spec.backend == "nccl" else []
        self.rdzv_extra = keep_alive_conf(keep_alive_s)
        if join_timeout_s is not None:  # how long an agent waits for a round to complete (c10d's default: 600 s)
            self.rdzv_extra += f",join_timeout={round(join_timeout_s)}"
        self.agents: dict[str, subprocess.Popen] = {}
        self.agent_logs: dict[str, Path] = {}
        self.tree = process_tree.ProcessTree()  # the agents, the workers found by pid file, what they start
        self.t0 = time.perf_counter()
        self.steps: list[tuple[float, int, int]] = []
        self.attempts: list[tuple[float, int, int]] = []
        self.phases: list[tuple[float, int, str]] = []
        self.events: list[tuple[float, str]] = []
        self.attempt = 0
        self.kill_times: list[float] = []
        self.killed_pids: list[int] = []
        self.replace_at: float | None = None
        self.replace_node = 0
        self.node_agent: dict[int, str] = {}  # the live agent of each emulated node
        self.offset = 0
        self.partial = ""
        self.lost: set[str] = set()
        self.dying: list[psutil.Process] = []  # killed, perhaps not yet reaped: waited for at the end
        self.started_wall = time.time()  # the wall clock at t0, to compare with the ranks' time stamps
        self.said = 0.0  # when the lab last printed a line (seconds since t0)
        self.after: str | None = None  # what ended the last attempt, said while the next one starts
        self.step: tuple[int, int] | None = None  # rank 0's last step of the current attempt, and the steps in all
        self.cold: str | None = None  # why an agent started cold (said once)
        self.told: tuple[str, float] = ("", 0.0)  # the last "now:" line said, and since when it holds
        self.error: tuple[float, str] | None = None  # rank 0's newest error line (when read, words), not said yet
        self.failed_at: float | None = None  # when an agent the lab did not kill was first seen failed
        self.stranded_by: str | None = None  # that agent, once the lab ended the others after it
        self.ended_by_lab: set[str] = set()  # the agents it ended then

    def now(self) -> float:
        return time.perf_counter() - self.t0

    def say(self, line: str) -> None:
        if self.show:
            print(line, flush=True)
            self.said = self.now()

    def event(self, what: str) -> None:
        self.events.append((self.now(), what))
        self.say(f"[lab {self.now():6.2f} s] {what}")

    def tell(self) -> None:
        """What the run is doing now, when the lab has said nothing for :data:`SAY_S`: a new state in full; an unchanged
        one as rank 0's newest error line (once), else ``still waiting (N s)``."""
        if not self.show or self.now() - self.said < SAY_S:
            return
        attempt = len(self.kill_times)
        since = self.started_wall + (self.kill_times[-1] if self.kill_times else 0.0)
        states = rank_states(self.spec.run_dir, self.spec.world_size, since)
        if len(self.attempts) > attempt:  # this attempt's rank 0 has said where it starts: it trains
            start = self.attempts[-1][2]
            what = doing(states, self.spec.backend, step=self.step) if self.step else f"training from step {start}"
        else:
            phase = next((said for _, a, said in reversed(self.phases) if a == attempt), None)
            what = doing(states, self.spec.backend, self.after, phase=phase)
        if what != self.told[0]:
            self.told = (what, self.now())
            self.say(f"[lab {self.now():6.2f} s] now: {what}")
        elif self.error is not None:
            read, words = self.error
            self.say(f"{self.read_at(read)} {words[:240]}")
            self.error = None
        else:
            self.say(f"[lab {self.now():6.2f} s] still waiting ({self.now() - self.told[1]:.0f} s)")

    def read_at(self, t: float) -> str:
        """The label of rank 0's line the lab read at ``t``: how long after the last kill before it, on the lab's own
        clock (review RR12-1), else when."""
        kills = [k for k in self.kill_times if k <= t]
        return f"[rank0, read {t - kills[-1]:.2f} s after the kill]" if kills else f"[rank0 {t:6.2f} s]"

    def exits(self, codes: Mapping[str, int | None]) -> str:
        """The end event's words: each agent's exit code, the ones the lab killed or ended labelled (review RR12-4)."""
        by = {n: "killed" for n in self.lost} | {n: "ended" for n in self.ended_by_lab}
        said = [f"{n} {c}" + (f" ({by[n]} by the lab)" if n in by else "") for n, c in codes.items()]
        return "every agent has exited: " + ", ".join(said)

    def command(self, node: int) -> list[str]:
        cmd = self.spec.command(node, self.port) if self.spec.nnodes > 1 else self.spec.command(node)
        if self.spec.nnodes > 1:
            i = cmd.index("--rdzv-conf") + 1
            cmd[i] += self.rdzv_extra
        return cmd

    def start_agent(self, node: int, name: str, log_name: str = "agent.log") -> None:
        """Node ``node``'s torchrun agent, forked from the warm interpreter where it can be (else started cold)."""
        self.node_agent[node] = name
        log = self.spec.run_dir / (f"node{node}" if self.spec.nnodes > 1 else "") / log_name
        log.parent.mkdir(parents=True, exist_ok=True)
        self.agent_logs[name] = log
        out, devnull = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644), os.open(os.devnull, os.O_RDONLY)
        try:
            agent, cold = warm.start_python(
                self.command(node)[1:],  # python -m torch.distributed.run ...: the interpreter is the warm one's
                env=node_environment(self.spec, node, self.gpu_ids),
                stdin=devnull,
                stdout=out,
                stderr=out,
                title=f"torchrun agent of node {node} ({name}) [nvtutorial warm start]",
            )
        finally:
            os.close(out)
            os.close(devnull)
        self.agents[name] = self.tree.add(agent)
        if cold and self.cold is None:
            self.cold = cold
            self.say(f"[lab {self.now():6.2f} s] the torchrun agents start cold (each imports torch): {cold}")

    def read_rank0(self) -> None:
        try:
            with open(self.spec.run_dir / "rank0.log", "rb") as fh:
                fh.seek(self.offset)
                data = fh.read()
        except FileNotFoundError:
            return
        self.offset += len(data)
        lines = (self.partial + data.decode("utf-8", errors="replace")).split("\n")
        self.partial = lines.pop()
        for line in lines:
            if m := _ATTEMPT.match(line):  # every start of the ranks prints it once: the attempts in order
                self.attempt = len(self.attempts)
                self.attempts.append((self.now(), self.attempt, int(m.group(2))))
                self.step = None
                self.say(f"[rank0 {self.now():6.2f} s] {line}")
            elif m := PHASE_LINE.match(line):  # before the attempt's first line: it belongs to the next attempt
                self.phases.append((self.now(), len(self.attempts), m.group(1)))
            elif m := STEP_LINE.match(line):
                self.steps.append((self.now(), self.attempt, int(m.group(1))))
                self.step = (int(m.group(1)), int(m.group(2)))
            elif (m := _ERROR.match(line)) and not (self.error and _ASYNC in self.error[1] and _ASYNC not in line):
                self.error = (self.now(), m.group(1))  # the newest, unless it hides the error's own words

    def strike(self) -> None:
        """The next fault, once the attempt it waits for has logged its step."""
        i = len(self.kill_times)
        if i >= len(self.faults) or len(self.attempts) != i + 1 or self.replace_at is not None:
            return
        fault = self.faults[i]
        done = [s for _, a, s in self.steps if a == i]
        if not done or max(done) < fault.after_step:
            return
        if fault.kind == "rank":
            pid = int((self.spec.run_dir / f"rank{fault.target}.pid").read_text())
            proc = psutil.Process(pid)
            self.killed_pids += process_tree.kill_now([proc])
            self.kill_times.append(self.now())  # when the signal was sent, not when the process was reaped
            self.dying.append(proc)
            self.event(f"SIGKILL to rank {fault.target} (pid {pid}) after rank 0 logged step {max(done)}")
            self.after = after_rank_kill(fault.target, self.spec.nproc, self.spec.nnodes, self.spec.backend)
            return
        name = self.node_agent[fault.target]
        agent = psutil.Process(self.agents[name].pid)
        procs = [agent, *agent.children(recursive=True)]
        killed = process_tree.kill_now(procs)
        struck = self.now()  # the signals are sent: the node is gone from here on
        self.killed_pids += killed
        self.kill_times.append(struck)
        self.dying += procs
        self.lost.add(name)
        self.event(
            f"SIGKILL to node {fault.target}: its torchrun agent and {len(procs) - 1} process(es) it started "
            f"(pids {', '.join(map(str, killed))}), after rank 0 logged step {max(done)}"
        )
        self.after = f"node {fault.target} was lost: the other agent restarts its rank and waits at the rendezvous" + (
            f"; node {fault.target}'s new agent joins it once the dead agent's heartbeats have expired"
            if fault.replace_after_s is not None
            else ", or finds the rendezvous gone with the killed node"
        )
        if fault.replace_after_s is not None:
            self.replace_at = struck + fault.replace_after_s
            self.replace_node = fault.target
            self.replace()  # replace_after_s=0: at once, before anything waits for the killed processes

    def replace(self) -> None:
        if self.replace_at is None or self.now() < self.replace_at:
            return
        node = self.replace_node
        self.replace_at = None
        n = sum(name.startswith(f"agent{node}-replacement") for name in self.agents) + 1
        suffix = "" if n == 1 else str(n)
        self.start_agent(node, f"agent{node}-replacement{suffix}", f"agent-replacement{suffix}.log")
        self.event(f"a new torchrun agent for node {node} started (same command, same rendezvous)")

    def live(self) -> list[subprocess.Popen]:
        return [a for name, a in self.agents.items() if name not in self.lost]

    def everything(self) -> list[psutil.Process]:
        """Every live process of the run: the agents and what they started, and every rank by its pid file."""
        for pid_file in self.spec.run_dir.glob("rank*.pid"):
            try:
                proc = process_tree.as_process(int(pid_file.read_text()), born_after=self.started_wall)
            except (ValueError, OSError):
                continue
            if proc is not None:
                self.tree.adopt(proc)
        return self.tree.processes()

    def stranded(self) -> bool:
        """True once an agent the lab did not kill has failed, none replaces it, and the others have not ended on their
        own within :data:`STRANDED_S`. The lab runs a fixed number of nodes, so no later round can complete; the others
        would wait at a re-rendezvous (c10d's ``join_timeout``, 600 s), at torchrun's exit barrier (300 s), or in their
        ranks' collectives until a watchdog or timeout ends them. Said once, with what their logs show they wait at."""
        failed = [n for n, a in self.agents.items() if n not in self.lost and a.poll() not in (None, 0)]
        if not failed or self.replace_at is not None or not any(a.poll() is None for a in self.live()):
            self.failed_at = None
            return False
        self.failed_at = self.now() if self.failed_at is None else self.failed_at
        if self.now() - self.failed_at < STRANDED_S:
            return False
        self.stranded_by = failed[0]
        self.ended_by_lab = {n for n, a in self.agents.items() if n not in self.lost and a.poll() is None}
        code = self.agents[failed[0]].returncode
        self.event(
            f"{failed[0]} exited with code {code} (not killed by the lab, not replaced): ending the other agents, "
            f"{self.waiting_at()}"
        )
        return True

    def waiting_at(self) -> str:
        """Where the live agents wait, from the last line each wrote (torch 2.11–2.15's words)."""
        last = []
        for name, agent in self.agents.items():
            if name in self.lost or agent.poll() is not None:
                continue
            with contextlib.suppress(OSError, IndexError):
                last.append(self.agent_logs[name].read_text(errors="replace").strip().splitlines()[-1])
        if last and all("other agents to finish" in line for line in last):
            return "which wait for it at torchrun's exit barrier (up to 300 s)"
        if last and all("rendezvous" in line.lower() for line in last):
            return "which wait for it at the rendezvous (up to c10d's join_timeout, 600 s)"
        return "whose ranks cannot finish without its ranks"

    def watch(self, max_restarts: int, note: str, timeout: float) -> bool:
        """Start every node's agent, then follow the run until every live agent has exited (and no replacement is
        due), striking the faults; True when the deadline passed first."""
        nnodes, nproc = self.spec.nnodes, self.spec.nproc
        for node in range(nnodes):
            self.start_agent(node, f"agent{node}" if nnodes > 1 else "agent")
        restarts = f", --max-restarts {max_restarts}" if max_restarts else ""
        nccl = note if self.spec.backend == "nccl" else ""
        self.event(f"{nnodes} torchrun agent(s) started, {nproc} rank(s) each{restarts}{nccl}")
        self.say(
            f"[lab {self.now():6.2f} s] before the first step: the agents meet at the rendezvous, then each starts "
            "its rank(s), new processes that import torch, join the process group and build the DDP model"
        )
        timed_out = False
        while any(a.poll() is None for a in self.live()) or self.replace_at is not None:
            self.read_rank0()
            self.strike()
            self.replace()
            self.tell()
            if self.stranded():
                break
            if time.perf_counter() > self.t0 + timeout:
                timed_out = True
                self.event(f"deadline of {timeout:g} s passed: ending every process")
                break
            time.sleep(POLL_S)
        self.read_rank0()
        return timed_out


def _placement(spec: launch.LaunchSpec) -> str:
    """A label for a run whose ranks reported no environment (it did not finish)."""
    nodes = f"{spec.nnodes} emulated nodes × {spec.nproc} rank(s) on {socket.gethostname()}"
    if spec.backend == "gloo":
        return f"CPU, gloo, {nodes}: a simulation, not a GPU measurement"
    names = sorted({g.name for g in hardware.gpus()})
    return f"NCCL, {nodes}, {' + '.join(names) or 'GPU'}"


def _warm_first(show: bool) -> None:
    """Wait for the warm interpreter the agents are forked from, saying so (as the launcher does) when it is still
    importing torch: its first start in this kernel."""
    interpreter = warm.get() if warm.supported() is None else None
    if interpreter is None or interpreter.hello is not None or interpreter.dead is not None:
        return
    with contextlib.suppress(warm.WarmUnavailable):  # one that cannot serve: the agents start cold, and say why
        try:
            interpreter.wait_ready(timeout=1.0)
        except warm.WarmUnavailable:
            if show and interpreter.hello is None and interpreter.dead is None:
                print("[nvtutorial] waiting for the warm interpreter to import torch (once per kernel)", flush=True)
            interpreter.wait_ready()


def run_elastic(
    args: Sequence[str],
    *,
    nproc: int = 2,
    nnodes: int = 1,
    max_restarts: int = 1,
    fault: Fault | Sequence[Fault] | None = None,
    every: int = 0,
    backend: launch.Backend = "auto",
    env: Mapping[str, Any] | None = None,
    timeout: float = 300.0,
    keep_alive_s: float = 3.0,
    out: str | os.PathLike[str] | None = None,
    script: str | os.PathLike[str] = LESSON,
    show: bool = True,
    check: bool = True,
    join_timeout_s: float | None = None,
) -> ElasticOutcome:
    """Train the lesson with ``args`` on ``nnodes`` × ``nproc`` ranks under ``--max-restarts``, with ``fault``
    (one :class:`Fault`, or several that strike in turn).

    ``every``: the lesson's checkpoint interval (``--every``), for the steps-lost arithmetic of a fault;
    ``script``: the lesson, or a script that runs it with other code (an exercise's candidate);
    ``keep_alive_s``: how long c10d waits for a silent node's heartbeat before it counts it as gone
    (torch's default is 15 s; the lab shortens it); ``join_timeout_s``: c10d's ``join_timeout`` (600 s by
    default), how long an agent waits for the other nodes before ``RendezvousTimeoutError``. With ``check`` a run that
    fails raises
    :class:`RecoveryError` with torchrun's and the ranks' words.
    """
    faults = [] if fault is None else [fault] if isinstance(fault, Fault) else list(fault)
    for f in faults:
        if f.kind == "node" and not 0 <= f.target < nnodes:
            raise ValueError(f"Fault target node {f.target}: this run has nodes 0..{nnodes - 1}")
    rank_env = {**RANK_ENV, **(env or {})}
    note = watchdog_note(rank_env)  # refuses a wait the lab cannot state before anything starts
    spec = launch.prepare(
        str(script),
        nproc=nproc,
        nnodes=nnodes,
        args=list(args),
        env=rank_env,
        out=out,
        backend=backend,
        max_restarts=max_restarts,
        timeout=timeout,
        output="none",
    )
    for f in faults:
        if f.kind == "rank" and not 0 <= f.target < spec.world_size:
            raise ValueError(f"Fault target rank {f.target}: this run has ranks 0..{spec.world_size - 1}")
    spec.run_dir.mkdir(parents=True, exist_ok=True)
    _warm_first(show)  # before the lab's clock starts: its times are the agents', not the warm interpreter's start
    lab = _Elastic(spec, faults, keep_alive_s, show, join_timeout_s)
    started = time.time()
    timed_out = interrupted = False
    try:
        timed_out = lab.watch(max_restarts, note, timeout)
    except KeyboardInterrupt:  # the notebook's Stop: ended below like any end, then said in a few lines
        interrupted = True
    finally:
        psutil.wait_procs(lab.dying, timeout=5)  # the killed processes, reaped by their parents (or init) by now
        lab.everything()  # adopt the ranks of the last attempt, then end them all
        lab.tree.end()
    if interrupted:
        raise _interrupted(spec, lab, started) from None
    outcome, failure = _outcome(spec, lab, every, timed_out, started)
    if failure is not None and check:
        agents = [line for log in sorted(spec.run_dir.glob("**/agent*.log")) for line in diagnosis.tail(log, 8)]
        by = lab.stranded_by
        ended = f"\n(the lab ended the other agents {STRANDED_S:g} s after {by} failed)" if by else ""
        raise RecoveryError(
            f"{failure.message}{ended}\n--- last lines of the torchrun agents ---\n" + "\n".join(agents)
        )
    return outcome


def _interrupted(spec: launch.LaunchSpec, lab: _Elastic, started: float) -> launch.RunInterrupted:
    """The run stopped by the caller, every process ended: its result saved as interrupted, and what to say."""
    result = diagnosis.collect(spec, 1, time.time() - started, None)
    result.error = {
        "type": "KeyboardInterrupt",
        "message": "interrupted by the caller; every process of the lab was ended",
    }
    with contextlib.suppress(OSError):
        result.save()
    struck = f", {len(lab.kill_times)} of {len(lab.faults)} fault(s) struck" if lab.faults else ""
    return launch.RunInterrupted(
        f"stopped while the elastic lab ran ({spec.nnodes} torchrun agent(s), {spec.nproc} rank(s) each, "
        f"{lab.now():.1f} s in{struck})\n"
        f"ended: every process of the lab (its torchrun agents, their ranks and whatever they started)\n"
        f"kept: its folder {spec.run_dir} (the agents' and ranks' logs; result.json records the interruption)",
        result,
    )


def _save_kills(run_dir: Path, lab: _Elastic) -> None:
    """``faults.json``: each fault struck, with the wall clock of its kill, for the agents' lines (review RR10-1)."""
    struck = [
        {"what": f"{f.kind} {f.target}", "wall": lab.started_wall + t}
        for f, t in zip(lab.faults, lab.kill_times, strict=False)
    ]
    if struck:
        (run_dir / "faults.json").write_text(json.dumps(struck) + "\n")


def _outcome(
    spec: launch.LaunchSpec, lab: _Elastic, every: int, timed_out: bool, started: float
) -> tuple[ElasticOutcome, Any]:
    """Every agent has exited: the run's result (saved), its outcome, and the diagnosis when it failed (else None)."""
    # a killed agent was reaped while it was killed: its code is the signal's
    codes = {name: -9 if name in lab.lost else a.returncode for name, a in lab.agents.items()}
    final = [codes[name] for name in codes if name not in lab.lost]
    first = codes[lab.stranded_by] if lab.stranded_by else next((c for c in final if c), 0)
    returncode = 1 if timed_out else first
    lab.event(lab.exits(codes))
    if returncode == 0:
        for stale in spec.run_dir.glob("rank*.error.json"):  # errors of the attempts torchrun restarted
            stale.replace(stale.with_name(stale.name.replace(".error.json", ".error.earlier.json")))
    result = diagnosis.collect(spec, returncode, time.time() - started, None)
    _save_kills(spec.run_dir, lab)
    failure = None
    if returncode != 0:
        failure = diagnosis.diagnose(spec, result, diagnosis.Observed(timed_out=timed_out))
    result.save()
    outcome = ElasticOutcome(
        result=result,
        fault=lab.faults[0] if lab.faults else None,
        every=every,
        steps=lab.steps,
        attempts=lab.attempts,
        events=lab.events,
        killed_at_s=lab.kill_times[0] if lab.kill_times else None,
        killed_pids=tuple(lab.killed_pids),
        agent_returncodes=tuple(codes.values()),
        placement=_placement(spec),
        faults=tuple(lab.faults),
        kill_times=tuple(lab.kill_times),
        started_wall=lab.started_wall,
        phases=lab.phases,
        stranded=lab.stranded_by,
    )
    return outcome, failure


def run_lesson(
    args: Sequence[str],
    *,
    nproc: int = 1,
    nnodes: int = 1,
    backend: launch.Backend = "auto",
    env: Mapping[str, Any] | None = None,
    timeout: float = 300.0,
) -> RunResult:
    """The lesson with ``args``, uninterrupted, on ``nnodes`` × ``nproc`` ranks, as ``nvtutorial.run`` would run it,
    saying at least every :data:`SAY_S` what it is doing: emulated nodes through :func:`run_elastic` (one torchrun
    agent per node, no restarts), one node with the launcher (its ranks forked warm). A failed run raises."""
    if nnodes > 1:
        return run_elastic(
            args, nproc=nproc, nnodes=nnodes, max_restarts=0, backend=backend, env=env, timeout=timeout
        ).result
    spec = launch.prepare(
        str(LESSON), nproc=nproc, backend=backend, args=list(args), env=env, timeout=timeout, output="none"
    )
    since = time.time()

    def now() -> str:
        states, log = rank_states(spec.run_dir, spec.world_size, since), spec.run_dir / "rank0.log"
        return doing(states, spec.backend, step=last_step(log), phase=last_phase(log), fresh=False)  # forked warm

    with telling(now):
        return launch.execute(spec)


def check_resume(
    candidate: Any,
    reference: ElasticOutcome | RunResult,
    sizes: Mapping[str, Any],
    *,
    kill_after: int,
    nproc: int = 1,
    nnodes: int = 2,
    backend: launch.Backend = "auto",
    quick: bool = True,
    timeout: float = 300.0,
) -> Any:
    """Judge the learner's ``resume`` (exercise ``multinode_resume``) by killing a rank of a real run.

    With ``quick`` the exercise's own fast check runs first and a failure there is the answer. Then
    the lesson runs with ``candidate`` as its ``resume`` on ``nnodes`` × ``nproc`` ranks (as
    ``reference`` ran, uninterrupted, with the same ``sizes``), rank 1 is killed after step
    ``kill_after``, and the run passes when it recovers with fewer steps lost than the checkpoint
    interval and ends with exactly the reference's weights. Returns a :class:`~nvtutorial.teach.check.CheckResult`.
    """
    from nvtutorial.chapters.ch09_multinode import exercises as exercise
    from nvtutorial.chapters.ch09_multinode.lab_resume import judge
    from nvtutorial.teach import check as teach_check

    name = "multinode_resume"
    entry = getattr(candidate, "__name__", None)
    if not entry or not entry.isidentifier():
        raise teach_check.ExerciseError(f"exercise {name}: pass the function itself (def resume(...) in a cell)")
    print(
        f"checking {entry}: "
        + ("first in this kernel, on a checkpoint of a small model; then " if quick else "")
        + f"on a real run: the lesson with it on {nnodes} emulated node(s) × {nproc} rank(s), rank 1 killed after "
        f"step {kill_after}, restarted by torchrun",
        flush=True,
    )
    if quick:
        with telling(lambda: "the quick check, in this kernel (its optimizer imports torch's compiler, once)", "check"):
            local = teach_check.check(name, candidate)
        if not local.passed:
            return local
    source = teach_check.candidate_source(candidate)
    ckpt = checkpoint_dir("exercise-resume")
    (ckpt / "candidate.py").write_text(source)
    args = ["--candidate", str(ckpt / "candidate.py"), "--entry", entry, "--", *lesson_args(sizes, ckpt / "ckpt")]
    every = int(sizes.get("every", 10))
    outcome = run_elastic(
        args,
        nproc=nproc,
        nnodes=nnodes,
        max_restarts=2,
        fault=Fault("rank", kill_after),
        every=every,
        backend=backend,
        timeout=timeout,
        out=ckpt / "run",
        script=exercise.__file__,
        show=True,
        check=False,
    )
    return judge(name, outcome, functools.partial(reference_checkpoint, reference), every)
