"""What notebook 09's elastic lab strikes (:class:`Fault`) and what it saw (:class:`ElasticOutcome`): the run's result
and its timeline from rank 0's log. Plain data, torch-free: the lab (:mod:`.lab`, which runs the processes) builds
it and the report reads it."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any, Literal

from nvtutorial.chapters.ch09_multinode import schema
from nvtutorial.results import RunResult, read_json


@dataclasses.dataclass(frozen=True)
class Fault:
    """What to kill, and when (see the module docstring)."""

    kind: Literal["rank", "node"]
    after_step: int
    target: int = 1
    """The global rank (``kind="rank"``) or the emulated node (``kind="node"``) to kill."""
    replace_after_s: float | None = 0.0
    """For a node: start a new agent for it this many seconds after the kill; None: never."""

    def __post_init__(self) -> None:
        if self.kind not in ("rank", "node"):
            raise ValueError(f"Fault kind={self.kind!r}: use 'rank' or 'node'")
        if not isinstance(self.after_step, int) or self.after_step < 1:
            raise ValueError(f"Fault after_step={self.after_step!r}: give a step of at least 1")
        if self.replace_after_s is not None and self.replace_after_s < 0:
            raise ValueError(f"Fault replace_after_s={self.replace_after_s}: give seconds (0 or more) or None")


@dataclasses.dataclass
class ElasticOutcome:
    """An elastic run as it went: the result, and the timeline seen from rank 0's log."""

    result: RunResult
    fault: Fault | None
    """The fault this outcome is about (the first of the run, or the one :meth:`part` picked)."""
    every: int
    """Steps between checkpoints."""
    steps: list[tuple[float, int, int]]
    """(seconds since the start, attempt, step completed), as rank 0 printed them."""
    attempts: list[tuple[float, int, int]]
    """(seconds since the start, attempt, step it started at)."""
    events: list[tuple[float, str]]
    """(seconds since the start, what the lab did or saw)."""
    killed_at_s: float | None = None
    killed_pids: tuple[int, ...] = ()
    agent_returncodes: tuple[int | None, ...] = ()
    placement: str = ""
    """Where it ran, said even when the ranks reported nothing (a job that did not finish)."""
    faults: tuple[Fault, ...] = ()
    """Every fault of the run, in order."""
    kill_times: tuple[float, ...] = ()
    """When each fault struck: the moment its SIGKILLs were sent (seconds since the start)."""
    started_wall: float | None = None
    """The wall clock (``time.time()``) at the start, to place the ranks' time-stamped errors on this timeline."""
    phases: list[tuple[float, int, str]] = dataclasses.field(default_factory=list)
    """(seconds since the start, attempt, what rank 0 said of its start: ``joined the process group (nccl) in …``)."""
    stranded: str | None = None
    """The agent that failed unkilled and unreplaced, after which the lab ended the others (:meth:`_Elastic.stranded`);
    None: every agent ended on its own, or by the lab's deadline."""

    def part(self, i: int) -> ElasticOutcome:
        """The run as seen from fault ``i``: its attempt is attempt 0, the attempts after it follow."""
        if not 0 <= i < len(self.kill_times):
            raise IndexError(f"fault {i}: {len(self.kill_times)} fault(s) struck in this run")
        return dataclasses.replace(
            self,
            fault=self.faults[i],
            killed_at_s=self.kill_times[i],
            steps=[(t, a - i, s) for t, a, s in self.steps if a >= i],
            attempts=[(t, a - i, s) for t, a, s in self.attempts if a >= i],
            phases=[(t, a - i, said) for t, a, said in self.phases if a >= i],
        )

    @property
    def where(self) -> str:
        """The run's label (``RunResult.label``), or its placement when its ranks could not report one."""
        return self.result.label if self.result.env is not None else self.placement

    @property
    def ok(self) -> bool:
        return self.result.ok

    @property
    def last_step_before_kill(self) -> int | None:
        """The last step the first attempt completed: the kill lands during the next one (a step whose
        all-reduce was done when the peer died still completes, and is logged after the kill)."""
        if self.killed_at_s is None:
            return None
        return max((s for _, a, s in self.steps if a == 0), default=0)

    @property
    def resumed_from(self) -> int | None:
        """The step the first attempt after the fault started at (the last checkpoint's)."""
        later = [s for t, a, s in self.attempts if a > 0]
        return later[0] if later else None

    @property
    def steps_lost(self) -> int | None:
        """Steps completed before the fault that had to be done again."""
        if self.last_step_before_kill is None or self.resumed_from is None:
            return None
        return self.last_step_before_kill - self.resumed_from

    @property
    def restart_s(self) -> float | None:
        """From the kill until the new ranks had rejoined and loaded the checkpoint (rank 0's ``starting at step``)."""
        later = [t for t, a, s in self.attempts if a > 0]
        return later[0] - self.killed_at_s if later and self.killed_at_s is not None else None

    @property
    def recovery_s(self) -> float | None:
        """From the kill until the first new step was done."""
        later = [t for t, a, s in self.steps if a > 0]
        return later[0] - self.killed_at_s if later and self.killed_at_s is not None else None

    @property
    def peer_error_s(self) -> float | None:
        """For the run's last fault: seconds from the recorded kill to the first error a surviving rank wrote
        (about 0 when the kill time is right; negative would mean it was recorded late). None: no such error."""
        if self.killed_at_s is None or self.started_wall is None or self.killed_at_s not in self.kill_times[-1:]:
            return None
        kill = self.started_wall + self.killed_at_s
        after = []
        for path in Path(self.result.run_dir).glob("rank*.error*.json"):
            try:
                t = float(read_json(path)["time"])
            except (OSError, ValueError, KeyError, TypeError):
                continue
            if t > kill - 5.0:  # this fault's, not an earlier one's (those came seconds before it)
                after.append(t - kill)
        return min(after, default=None)

    @property
    def step_s(self) -> float | None:
        """The median time between two steps of the first attempt, as seen from here."""
        times = [t for t, a, s in self.steps if a == 0]
        gaps = sorted(b - a for a, b in zip(times, times[1:]))
        return gaps[len(gaps) // 2] if gaps else None

    @property
    def weights_sha256(self) -> str | None:
        """Rank 0's final weights' digest (None: the run ended without rank 0's metrics)."""
        return self.result.metrics_as(schema.Rank).weights_sha256 if self.result.metrics else None

    @property
    def checkpoint(self) -> Path:
        """The run's last checkpoint (the final weights once it ended well)."""
        return reference_checkpoint(self.result)

    def timeline(self) -> list[dict[str, Any]]:
        """The events and attempts in order, as table rows."""
        rows = [{"t_s": t, "what": what} for t, what in self.events]
        rows += [{"t_s": t, "what": f"attempt {a}: rank 0 {said}"} for t, a, said in self.phases]  # first on a tie
        rows += [
            {"t_s": t, "what": f"attempt {a} started at step {s} (the checkpoint read)"} for t, a, s in self.attempts
        ]
        for a in sorted({a for _, a, _ in self.steps}):
            done = [(t, s) for t, b, s in self.steps if b == a and (a or t <= (self.killed_at_s or t))]
            if done:
                rows.append({"t_s": done[-1][0], "what": f"attempt {a}: steps {done[0][1]}–{done[-1][1]} done"})
        rows += [
            {"t_s": t, "what": f"attempt 0: step {s}'s line, {t - self.killed_at_s:.1f} s after the kill"}
            for t, a, s in self.steps
            if a == 0 and self.killed_at_s is not None and t > self.killed_at_s
        ]
        return sorted(rows, key=lambda r: r["t_s"])


def rank0_log(run: ElasticOutcome | RunResult) -> Path:
    """Rank 0's log of a run of the lesson (every attempt's lines, in order)."""
    result = run.result if isinstance(run, ElasticOutcome) else run
    return Path(result.run_dir) / "rank0.log"


def reference_checkpoint(run: ElasticOutcome | RunResult) -> Path:
    """The final checkpoint of a run of the lesson (its ``--ckpt-dir``/last.pt)."""
    if isinstance(run, ElasticOutcome):
        return run.checkpoint
    args = list(run.params.get("args", []))
    if "--ckpt-dir" not in args:
        raise ValueError(f"{run.run_dir}: not a run of the elastic lesson (no --ckpt-dir among its arguments)")
    return Path(args[args.index("--ckpt-dir") + 1]) / "last.pt"
