"""A finished Slurm job's result: ``result.json`` and the one line that names what failed first.

After ``srun``, on the first node of the allocation, the batch script that :mod:`nvtutorial.launch.slurm` writes
runs ``python -m nvtutorial.launch.slurm collect RUN_DIR``: :func:`collect` builds ``result.json`` from the ranks'
``rank{R}.json`` with the launcher's own collection (:func:`nvtutorial.launch.diagnosis.collect` and ``diagnose``),
prints one line naming the node and rank that failed first, and returns that node's exit code, which becomes the job's.
"""

from __future__ import annotations

import dataclasses
import os
import signal
import time
from pathlib import Path
from typing import Any

from nvtutorial import launch, workloads
from nvtutorial import params as params_mod
from nvtutorial.launch import diagnosis
from nvtutorial.results import RunResult, read_json, write_json_atomic

SUMMARY_PREFIX = "nvtutorial slurm: "


def collect(
    run_dir: str | os.PathLike[str], step_rc: int = 0, started: float | None = None
) -> tuple[RunResult, str, int]:
    """Build and save ``result.json`` for a finished job; return it, the one-line summary and the exit code."""
    run_dir = Path(run_dir)
    meta = read_json(run_dir / "slurm.json")
    wall = time.time() - started if started else 0.0
    outcomes = _node_outcomes(run_dir, meta["nodes"])
    job_id = os.environ.get("SLURM_JOB_ID", "?")
    if meta["is_script"]:
        result, first_error, error_ranks, detail = _script_result(meta, run_dir, step_rc, wall), None, set(), ""
    else:
        result, first_error, error_ranks, detail = _workload_result(meta, run_dir, step_rc, wall, outcomes)
    failed, signalled = _first_failure(outcomes, error_ranks, int(first_error["rank"]) if first_error else None)
    if failed is None and step_rc == 0 and result.returncode == 0:
        code = 0
        summary = (
            f"job {job_id} COMPLETED: {Path(meta['target']).name} on {meta['nodes']} nodes × "
            f"{meta['procs_per_node']} rank(s) (world size {meta['nodes'] * meta['procs_per_node']}, "
            f"{meta['backend']}) in {wall:.1f} s"
        )
    else:
        code = (failed or {}).get("exit_code") or step_rc or result.returncode or 1
        if failed is not None:
            where = f"node {failed['node']}" + (f" ({failed['nodename']})" if failed["nodename"] else "")
            how = f"exited {failed['exit_code']} first" if failed["exit_code"] is not None else "failed first"
        else:
            where, how = "a node", f"failed (srun exited {step_rc})"
        what = _what_failed(failed, signalled, first_error)
        if signalled is not None:
            detail = ""  # the other ranks' errors are its consequence
            result.error = {"rank": signalled[0], "type": signal.Signals(-signalled[1]).name, "message": what}
        log = run_dir / (f"node{failed['node']}.log" if failed is not None else f"slurm-{job_id}.out")
        if not detail and failed is not None:
            detail, result.log_tail = _last_lines(log, run_dir / f"rank{signalled[0]}.log" if signalled else None)
        summary = f"job {job_id} FAILED: {where} {how}; {what} (log: {log})"
        result.returncode = code
        if result.error is None:
            result.error = {"type": "NodeFailed", "message": summary}
        if failed is not None:
            result.error.update(node=failed["node"], nodename=failed["nodename"])
    result.save()
    meta.update(job_id=job_id, exit_code=code, summary=summary, node_outcomes=outcomes)
    write_json_atomic(run_dir / "slurm.json", meta)
    summary = f"{SUMMARY_PREFIX}{summary}; result: {run_dir / 'result.json'}"
    if detail:
        print(detail, flush=True)
    print(summary, flush=True)
    return result, summary, code


def _script_result(meta: dict[str, Any], run_dir: Path, step_rc: int, wall: float) -> RunResult:
    """A script's job: its result holds what Slurm says (a script writes no rank files)."""
    return RunResult(
        workload=Path(meta["target"]).name,
        params={"args": meta["script_args"]},
        returncode=step_rc,
        wall_s=wall,
        first_output_s=None,
        env=None,
        ranks=[],
        run_dir=run_dir,
        log_files={},
        log_tail=[],
        overrides=meta["env"],
    )


def _workload_result(
    meta: dict[str, Any], run_dir: Path, step_rc: int, wall: float, outcomes: list[dict[str, Any]]
) -> tuple[RunResult, dict[str, Any] | None, set[int], str]:
    """A workload's job, collected as the launcher collects a run: its result, the first error a rank raised, the
    ranks that raised one, and the launcher's report of a rank's traceback (else empty)."""
    spec = launch.LaunchSpec(
        workload=meta["target"],
        params=params_mod.build(workloads.load(meta["target"]).Params, meta["params"]),
        nproc=meta["procs_per_node"],
        nnodes=meta["nodes"],
        backend=meta["backend"],
        timeout=None,
        env=meta["env"],
        run_dir=run_dir,
        output="none",
        pg_timeout=None,
    )
    result = diagnosis.collect(spec, step_rc, wall, None)
    first_error = next(iter(diagnosis._errors(spec)), None)
    error_ranks = {int(p.name[4:].split(".")[0]) for p in run_dir.glob("rank*.error.json")}
    if result.env is not None and meta["nodes"] > 1:
        names = ", ".join(o["nodename"] or f"node{o['node']}" for o in outcomes)
        hosts = ", ".join(dict.fromkeys(o["host"] for o in outcomes if o["host"])) or result.env.host
        result.env = dataclasses.replace(
            result.env,
            host=f"{hosts} ({meta['nodes']} Slurm nodes: {names})",
            link=f"{meta['nodes']} nodes" if result.env.is_gpu else None,
        )
    detail = ""
    if first_error is not None or (step_rc == 0 and not result.ranks):
        # a rank's traceback, as the launcher reports it (a node's failure otherwise: in collect)
        failure = diagnosis.diagnose(spec, result, diagnosis.Observed())
        detail = failure.message if failure else ""
    return result, first_error, error_ranks, detail


def _what_failed(
    failed: dict[str, Any] | None, signalled: tuple[int, int] | None, first_error: dict[str, Any] | None
) -> str:
    """What went wrong first, in words: a rank killed by a signal, a rank's exception, or a rank's exit."""
    if signalled is not None:
        return _rank_words(*signalled) + " (no Python exception: a native crash, or NCCL's watchdog)"
    if first_error is not None:
        message = (first_error["message"].splitlines() or [""])[0][:200]
        return f"rank {first_error['rank']}: {first_error['type']}: {message}"
    if failed is not None and failed["failed_ranks"]:
        return _rank_words(*failed["failed_ranks"][0])
    return "no rank reported an error"


def _last_lines(log: Path, rank_log: Path | None) -> tuple[str, list[str]]:
    """The last lines of the failed node's log, then of the killed rank's (a workload's rank: its Python stack, from
    faulthandler): the text to show, and the lines the result keeps (the last file's)."""
    tail = diagnosis.tail(log, 25)
    detail = f"--- last lines of {log} ---\n" + "\n".join(tail)
    if rank_log is not None and rank_log.exists():
        tail = diagnosis.tail(rank_log, 25)
        detail += f"\n--- last lines of {rank_log} ---\n" + "\n".join(tail)
    return detail, tail


def _node_outcomes(run_dir: Path, nodes: int) -> list[dict[str, Any]]:
    """Per node: its exit code, when, its Slurm name and host (None where Slurm ended it first),
    and the ranks that torchrun's failure summary in ``nodeN.log`` names, with their exit codes."""
    out = []
    for node in range(nodes):
        item: dict[str, Any] = dict(node=node, exit_code=None, time=None, nodename=None, host=None, failed_ranks=[])
        try:
            rc, when, nodename, host = (run_dir / f"node{node}.exit").read_text().split()[:4]
            item.update(exit_code=int(rc), time=float(when), nodename=nodename, host=host)
        except (OSError, ValueError):
            pass
        try:
            text = (run_dir / f"node{node}.log").read_text(errors="replace")
            item["failed_ranks"] = [(int(r), int(c)) for r, c in diagnosis._AGENT_FAILURE.findall(text)]
        except OSError:
            pass
        out.append(item)
    return out


def _first_failure(
    outcomes: list[dict[str, Any]], error_ranks: set[int], first_error_rank: int | None
) -> tuple[dict[str, Any] | None, tuple[int, int] | None]:
    """The node that failed first, and the rank killed by a crash signal there (if that is what happened).

    As the launcher does: a rank killed by a signal (no Python exception) is the cause, the others'
    errors its consequence; else the node hosting the first rank that raised; else the earliest
    non-zero exit.
    """
    crash = {int(s) for s in diagnosis.CRASH_SIGNALS}
    for item in outcomes:
        for rank, code in item["failed_ranks"]:
            if code < 0 and -code in crash and rank not in error_ranks:
                return item, (rank, code)
    if first_error_rank is not None:
        for item in outcomes:
            if any(rank == first_error_rank for rank, _ in item["failed_ranks"]):
                return item, None
    failed = [o for o in outcomes if o["exit_code"] not in (None, 0)]
    return (min(failed, key=lambda o: o["time"]) if failed else None), None


def _rank_words(rank: int, code: int) -> str:
    if code < 0 and -code in {int(s) for s in signal.Signals}:
        return f"rank {rank} was killed by {signal.Signals(-code).name}"
    return f"rank {rank} exited with code {code}"
