"""The traps of notebook 06 on real ranks: a trap script left to hang, the exercise's checker, the measurements.

* :func:`run_trap` launches a lesson script and takes every rank's Python stacks (faulthandler,
  ``SIGUSR1``, into each rank's log) a set time after every rank printed the line that says it
  reached the trap: a time counted from the trap, not from the launch (starting two ranks can
  take longer than a short deadline on a loaded machine, and stacks taken then show the ranks
  inside ``import torch``). The script's own process-group timeout, which counts from the
  collective that waits, then ends the hang; ``trap.json`` in the run folder records when.
* :func:`check_validation` judges the learner's ``validate_accuracy`` on the ``%%ranks`` group
  (:mod:`nvtutorial.chapters.ch06_pitfalls.exercises`), with the deadline counted from the call.
* :func:`measure` runs the ``pitfalls`` workload (the input pipeline, out-of-memory errors) where the notebook's
  plan puts the part (:func:`nvtutorial.course.plan`); :func:`measure_parts` runs both of the notebook's.

What the runs show is read by :mod:`nvtutorial.chapters.ch06_pitfalls.report`.
"""

from __future__ import annotations

import dataclasses
import json
import os
import secrets
import signal
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from nvtutorial import launch
from nvtutorial.chapters.ch06_pitfalls import workload as pitfalls
from nvtutorial.results import RunResult

if TYPE_CHECKING:
    from nvtutorial.course import Part

LESSONS = Path(__file__).resolve().parent / "lessons"
VALIDATION = LESSONS / "validation.py"
REACHED_VALIDATION = "epoch 0 trained"
"""What validation.py prints on each rank just before it validates for the first time: the trap."""


def lesson(name: str) -> Path:
    """The path of a trap's lesson script (``validation``, ``collectives``, ...)."""
    path = LESSONS / f"{name}.py"
    if not path.is_file():
        names = ", ".join(sorted(p.stem for p in LESSONS.glob("*.py") if not p.stem.startswith("_")))
        raise FileNotFoundError(f"no lesson {name!r}: the pitfall lessons are {names}")
    return path


# --------------------------------------------------------------------------- a trap left to hang


@dataclasses.dataclass
class TrapRun:
    """A launch of a trap script: its result, and whether (and when) its ranks' stacks were taken."""

    result: RunResult
    backend: str
    reached: str
    stacks_after_s: float | None
    reached_after_s: float | None
    """Seconds from the launch until every rank had printed ``reached`` (None: it never did)."""
    stacks_taken: bool

    @property
    def ok(self) -> bool:
        return bool(self.result.ok)

    @property
    def where(self) -> str:
        """Where it ran (a run that failed wrote no environment block: said from the backend)."""
        if self.result.env is not None:
            return self.result.label
        n = len(self.result.log_files)
        if self.backend == "nccl":
            from nvtutorial.machine import hardware

            names = sorted({g.name for g in hardware.gpus()})
            return f"{n}× {', '.join(names) or 'GPU'} · NCCL"
        return f"CPU, gloo, {n} processes: a simulation, not a GPU measurement"

    @property
    def how(self) -> str:
        """How the run went, in a few lines."""
        lines = []
        if self.reached_after_s is not None:
            lines.append(f"every rank reached the trap {self.reached_after_s:.1f} s after the launch")
        if self.stacks_taken:
            lines.append(f"{self.stacks_after_s:g} s later every rank was still running and printed its stacks")
        if self.result.ok:
            lines.append(f"the run finished after {self.result.wall_s:.1f} s")
        else:
            error = self.result.error or {}
            who = f"rank {error['rank']}: " if error.get("rank") is not None else ""
            first = str(error.get("message") or "").strip().splitlines()
            lines.append(
                f"the run failed after {self.result.wall_s:.1f} s: {who}{error.get('type', 'error')}"
                + (f": {first[0][:300]}" if first else "")
            )
        return "\n".join(lines)


class _Stacks(threading.Thread):
    """Watches the ranks' logs for ``reached``; ``after_s`` seconds after every rank printed it,
    asks every rank still running to print its Python stacks into its log (faulthandler on
    ``SIGUSR1``, by the pids the ranks recorded), and writes ``trap.json`` into the run folder."""

    def __init__(self, run_dir: Path, world_size: int, reached: str, after_s: float) -> None:
        super().__init__(name="nvtutorial-trap-stacks", daemon=True)
        self.run_dir, self.world_size, self.reached, self.after_s = run_dir, world_size, reached, after_s
        self.started = time.time()
        self.t0 = time.monotonic()
        self.reached_after: float | None = None
        self.taken = False
        self._stop_event = threading.Event()

    def stop(self) -> None:
        self._stop_event.set()
        self.join(timeout=5)

    def _seen(self, rank: int) -> bool:
        try:
            return self.reached in (self.run_dir / f"rank{rank}.log").read_text(errors="replace")
        except OSError:
            return False

    def _workers(self) -> list[int]:
        import psutil

        pids = []
        for rank in range(self.world_size):
            try:
                pid = int((self.run_dir / f"rank{rank}.pid").read_text().strip())
                proc = psutil.Process(pid)
                if proc.create_time() >= self.started - 1 and proc.status() != psutil.STATUS_ZOMBIE:
                    pids.append(pid)  # this run's rank, still running (not a reused pid)
            except (OSError, ValueError, psutil.Error):
                continue
        return pids

    def run(self) -> None:
        while not all(self._seen(r) for r in range(self.world_size)):
            if self._stop_event.wait(0.05):
                return
        self.reached_after = time.monotonic() - self.t0
        if self._stop_event.wait(self.after_s):
            return  # the run ended first
        pids = self._workers()
        if len(pids) < self.world_size:
            return  # a rank already ended: no picture of every rank at that moment
        for pid in pids:
            try:
                os.kill(pid, signal.SIGUSR1)  # faulthandler prints every thread's stack into the rank's log
            except OSError:
                return
        self.taken = True
        record = {
            "reached": self.reached,
            "reached_after_s": self.reached_after,
            "stacks_after_s": self.after_s,
            "taken_after_s": time.monotonic() - self.t0,
            "pids": pids,
        }
        try:
            (self.run_dir / "trap.json").write_text(json.dumps(record, indent=1))
        except OSError:
            pass


def run_trap(
    script: str | os.PathLike[str],
    *,
    args: Sequence[str] = (),
    reached: str = REACHED_VALIDATION,
    stacks_after_s: float | None = None,
    nproc: int = 2,
    timeout: float = 300.0,
    env: Mapping[str, Any] | None = None,
    output: launch.Output = "rank0",
) -> TrapRun:
    """Run a trap script on ``nproc`` ranks and return how it went (never raises for a failed run).

    With ``stacks_after_s``, every rank prints its Python stacks into its log that many seconds
    after every rank printed a line containing ``reached``. The run then goes on to its own end:
    give the script a process-group timeout (``--pg-timeout``) to end a hang. ``timeout`` is the
    launcher's deadline, from the launch: a bound for a run that never ends by itself.
    """
    if stacks_after_s is not None and not stacks_after_s > 0:
        raise ValueError(f"stacks_after_s={stacks_after_s!r}: give a positive number of seconds, or None")
    run_dir = launch.runs_root() / f"{Path(script).stem}-{time.strftime('%Y%m%d-%H%M%S')}-{secrets.token_hex(3)}"
    # NCCL's flight recorder (when TORCH_FR_BUFFER_SIZE switches it on) writes its dumps into the run
    env = {"TORCH_FR_DUMP_TEMP_FILE": str(run_dir / "nccl_trace_rank_"), **dict(env or {})}
    spec = launch.prepare(
        os.fspath(script), nproc=nproc, args=list(args), timeout=timeout, env=env, out=run_dir, output=output
    )
    watcher = _Stacks(run_dir, spec.world_size, reached, stacks_after_s) if stacks_after_s is not None else None
    if watcher is not None:
        watcher.start()
    try:
        result = launch.execute(spec, check=False)
    finally:
        if watcher is not None:
            watcher.stop()
    return TrapRun(
        result,
        spec.backend,
        reached,
        stacks_after_s,
        watcher.reached_after if watcher else None,
        bool(watcher and watcher.taken),
    )


# --------------------------------------------------------------------------- the %%ranks group


def ranks_where() -> str:
    """Where the ``%%ranks`` group runs, for the verdicts of its cells."""
    from nvtutorial.teach import ranks

    status = ranks.status()
    n = status.get("nproc", 2)
    if status.get("backend") == "nccl":
        from nvtutorial.machine import hardware

        names = sorted({g.name for g in hardware.gpus()})
        return f"{n}× {', '.join(names) or 'GPU'} · NCCL (%%ranks)"
    return f"CPU, gloo, {n} processes (%%ranks): a simulation, not a GPU measurement"


# --------------------------------------------------------------------------- the exercise's checker

_CANDIDATE_FILE = "<your validate_accuracy>"
_SETUP = f"""
import linecache as _pv_linecache
import math as _pv_math
import torch.nn.functional as _pv_F
from torch.utils.data import DataLoader as _pv_DL, DistributedSampler as _pv_DS, Subset as _pv_Subset
from nvtutorial.chapters.ch06_pitfalls import exercises as _pv
_pv.release(globals().get("_pv_state"))
_pv_state = _pv.prepare(rank, world_size, device)
_pv_linecache.cache[{_CANDIDATE_FILE!r}] = (len(_pv_source), None, _pv_source.splitlines(True), {_CANDIDATE_FILE!r})
_pv_ns = {{"torch": torch, "dist": dist, "F": _pv_F, "math": _pv_math, "DataLoader": _pv_DL,
          "DistributedSampler": _pv_DS, "Subset": _pv_Subset, "__name__": "candidate"}}
exec(compile(_pv_source, {_CANDIDATE_FILE!r}, "exec"), _pv_ns)
_pv_candidate = _pv_ns.get(_pv_entry)
if not callable(_pv_candidate):
    raise NameError(f"your code defines no function {{_pv_entry!r}}")
"""
_RUN = "_pv_outcome = _pv.run_candidate(_pv_candidate, _pv_state)"


def check_validation(candidate: Any) -> Any:
    """Judge the learner's ``validate_accuracy`` on the ``%%ranks`` group; a ``teach.check.CheckResult``.

    A rank that waits in the next training step's all-reduce for longer than the exercise's
    ``DEADLINE_S`` (the timeout of the check's own process group, counted from when it starts
    waiting) ends the check: "hung", with each rank's stack.
    """
    from nvtutorial.teach import check, ranks

    name = "pitfall_validation"
    ex = check.load(name)
    deadline = ex.DEADLINE_S
    source = check.candidate_source(candidate)
    entry = getattr(candidate, "__name__", None) if callable(candidate) else None
    print(
        f"checking {entry or ex.ENTRY} on the ranks of %%ranks: a validation, then the next training step "
        f"(a rank left waiting more than {deadline:g} s counts as a hang)",
        flush=True,
    )
    ranks.push(_pv_source=source, _pv_entry=entry or ex.ENTRY)
    where = ranks_where()
    setup = ranks.run_code(_SETUP, timeout=120)
    if not setup.ok:
        first = next(o for o in setup.outcomes if not o.ok)
        return check.CheckResult(
            name, False, f"your code could not be set up on rank {first.rank}: {first.exc_type}: {first.message}", where
        )
    run = ranks.run_code(_RUN, timeout=deadline + 5)  # gloo: the check's own group times out after `deadline`
    if run.reason == "timeout" or any(o.status == "error" and ex.timed_out(o.message or "") for o in run.outcomes):
        stacks = {o.rank: o.stack or o.traceback or "" for o in run.outcomes}
        return check.CheckResult(name, False, ex.explain_hang(stacks, deadline), where, {"stacks": stacks})
    if not run.ok:
        first = next(o for o in run.outcomes if not o.ok)
        return check.CheckResult(name, False, f"rank {first.rank}: {first.summary()}", where)
    passed, reason = ex.judge(ranks.pull("_pv_outcome"))
    return check.CheckResult(name, bool(passed), reason, where)


# --------------------------------------------------------------------------- the measurements


PART_PARAMS = {
    "dataloader": (
        "model",
        "loader_image_size",
        "loader_batch",
        "workers",
        "pin_workers",
        "steps",
        "windows",
        "shard_samples",
    ),
    "oom": ("oom_model", "oom_batch", "oom_image_size"),
}
"""The ``pitfalls`` parameters each part reads (``seed`` and ``parts`` aside): a launch passes only those of its parts,
so the command it prints carries nothing the run does not use (review M13)."""


def params_from(sizes: Mapping[str, Any], parts: Sequence[str] | None = None, **overrides: Any) -> dict[str, Any]:
    """The entries of a notebook's size dict that are parameters of the ``pitfalls`` workload (with ``parts``: only
    those these parts read, and ``parts`` itself), plus ``overrides``."""
    names = {f.name for f in dataclasses.fields(pitfalls.Params)}
    if parts is not None:
        names = {"seed", *(k for part in parts for k in PART_PARAMS[part])}
    out = {k: v for k, v in sizes.items() if k in names}
    if parts is not None:
        out["parts"] = list(parts)
    out.update(overrides)
    return out


def measure(
    sizes: Mapping[str, Any], part: Part | None = None, parts: Sequence[str] = ("dataloader",), **overrides: Any
) -> RunResult:
    """``nvtutorial.run("pitfalls", ...)`` of ``parts``, with the parameters those parts read taken from ``sizes``
    (its deadline too: ``sizes["timeout"]``), where the plan puts ``part``: one rank per GPU with NCCL, else gloo ranks
    on the CPU (one for a one-GPU part, two otherwise; without ``part``: two ranks, the backend the launcher picks)."""
    timeout = float(sizes.get("timeout", 600.0))
    params = params_from(sizes, parts, **overrides)
    if part is None:
        return launch.run("pitfalls", params=params, timeout=timeout)
    nproc = part.gpus or (1 if part.need == "one GPU" else 2)
    return launch.run("pitfalls", nproc=nproc, backend=part.backend, params=params, timeout=timeout)


def measure_parts(
    loader: Part, oom: Part, loader_sizes: Mapping[str, Any], oom_sizes: Mapping[str, Any]
) -> tuple[RunResult, RunResult]:
    """Notebook 06's two measurements, each where the plan puts it: the input pipeline (``loader``: two ranks, or one
    training process on the one GPU) and the out-of-memory demo (``oom``: one rank on one GPU, no collective). Where
    both run on the same one process (one GPU), or the demo has no GPU (it then only says why it was skipped), one
    launch runs both, the demo first (a process of its own until then), and the same result is returned twice."""
    if oom.gpus and loader.need != "one GPU":
        return measure(loader_sizes, loader), measure(oom_sizes, oom, parts=("oom",))
    sizes = {**params_from(oom_sizes, ("oom",)), **params_from(loader_sizes, ("dataloader",))}
    sizes["timeout"] = max(float(s.get("timeout", 600.0)) for s in (loader_sizes, oom_sizes))
    run = measure(sizes, loader, parts=("oom", "dataloader"))
    return run, run
