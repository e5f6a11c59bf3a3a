"""Notebook 09's conclusions: one job on several nodes, the link between them, and a run that lost a rank.

Reads what the runs left (their results, checkpoints and logs) and returns verdicts and tables;
never launches. The runs themselves are :func:`nvtutorial.run` on the lesson
``nvtutorial/chapters/ch09_multinode/lessons/elastic_train.py`` and :mod:`nvtutorial.chapters.ch09_multinode.lab`.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import statistics
import time
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from nvtutorial.chapters.ch09_multinode import schema
from nvtutorial.chapters.ch09_multinode.schema_outcome import ElasticOutcome
from nvtutorial.machine import nccl_debug
from nvtutorial.report import predict
from nvtutorial.report.verdict import Verdict, compare, comparison_verdict
from nvtutorial.results import RunResult, typed

_NNODES = re.compile(r"NCCL INFO comm \S+ rank (\d+) nRanks (\d+) nNodes (\d+) localRanks (\d+)")
_AGENT_WORDS = re.compile(
    r"Worker group (FAILED|UNHEALTHY)\. .*|failed \(exitcode: -?\d+\) local_rank: \d+(?: \(pid: \d+\))?|"
    r"Detected \d+ new nodes.*|RendezvousConnectionError: .*|RendezvousTimeoutError: .*|"
    r"ChildFailedError|worker group successfully finished"
)
_STAMP = re.compile(r"^[IWE](\d{4} \d\d:\d\d:\d\d\.\d+)")
_RANK_WORDS = re.compile(
    r"DistBackendError: NCCL error in: [^,]*, [^,]*|"
    r"raised the following async exception: NCCL error: [^,]*|failure detected by watchdog|"
    r"ProcessGroupNCCL preparing to dump debug info|we are taking the entire process down"
)
"""What a rank's ProcessGroupNCCL said of a peer's death: the error raised where a collective was issued into the broken
communicator (review RR9-5: then it exits with code 1 before its watchdog can end it), the watchdog's
sight of the error (not the end: its work sequence id is the oldest collective the watchdog had not retired), the
flight-recorder dump (none with ``TORCH_NCCL_DUMP_ON_TIMEOUT=0``), the end of the process."""
_RANK_STAMP = re.compile(r"^\[rank\d+\]:\[[IWE](\d{4} \d\d:\d\d:\d\d)\.\d+")
"""A rank's C++ log stamp, read to the whole second only: c10's ``MessageLogger`` (the pip wheels' logger, no glog)
writes the wall clock's second (``time()``) and the fraction of ``CLOCK_MONOTONIC`` (``c10/util/Logging.cpp``), so
the digits after the point are not wall time (review RR12-1: lines stamped 0.2 s before the kills that caused them)."""
_ENDED = re.compile(r"failed \(exitcode: (-?\d+)\)|Detected \d+ new nodes")
SLOW_RECOVERY_S = 30.0
"""A recovery whose first new step came later than this after the kill is called slow, with its cause (review R6-3):
a fault costs the agents' new round and the new processes' start. The first new step came 10.6–14.3 s after a rank's
kill and 13.6–18.1 s after a node's loss in four runs on one H100 (torch 2.11, commits 863ebb4, 7b5ab7b, 1d06a7c and
970b393),
6.1 and 8.2 s on a 2-core CPU (2026-12-07), and 68.7 s after a rank's kill on that H100 while NCCL's watchdog slept its
default minute (01015c0, review R6-1): 30 s is above the slowest recovery measured without that sleep (1.7×), and under
half the one with it."""

SOURCES = {
    "nccl-env": (
        "NVIDIA, NCCL documentation, Environment Variables (NCCL_SOCKET_IFNAME, NCCL_IB_HCA, NCCL_NET_GDR_LEVEL)"
    ),
    "ib-ndr": "NVIDIA ConnectX-7 datasheet: NDR InfiniBand, 400 Gb/s per port",
    "dgx-h100": "NVIDIA DGX H100 User Guide, Network Modules: eight ConnectX-7 (400 Gb/s) for the compute fabric",
    "nvlink-h100": "NVIDIA H100 datasheet: NVLink 900 GB/s (both directions together) per GPU",
}
"""Where the published figures of notebook 09 come from (cited next to them)."""

PUBLISHED = [
    {
        "path": "NVLink 4, one H100/H200 GPU to the others of its node",
        "GB/s per direction": 450.0,
        "source": SOURCES["nvlink-h100"],
    },
    {"path": "one NDR InfiniBand port (400 Gb/s)", "GB/s per direction": 50.0, "source": SOURCES["ib-ndr"]},
    {"path": "a DGX H100 node's 8 NDR ports together", "GB/s per direction": 400.0, "source": SOURCES["dgx-h100"]},
]
"""Published link rates (vendor figures, not measured here), per direction, in GB/s = 10⁹ B/s."""


# --- one job, several nodes ------------------------------------------------------------------------


def checkpoint_weights(path: str | os.PathLike[str]) -> tuple[dict[str, Any], int]:
    """The model weights and the step count of a checkpoint the lesson wrote."""
    import torch

    state = torch.load(path, map_location="cpu", weights_only=True)
    return state["model"], int(state["step"])


def same_weights(
    a: str | os.PathLike[str],
    b: str | os.PathLike[str],
    a_name: str,
    b_name: str,
    where: str,
    key: str = "same weights",
) -> Verdict:
    """``pass`` when two final checkpoints hold the same number of steps and bit-identical weights."""
    return _same_weights(a, b, a_name, b_name, where, key)[0]


def _same_weights(
    a: str | os.PathLike[str],
    b: str | os.PathLike[str],
    a_name: str,
    b_name: str,
    where: str,
    key: str = "same weights",
) -> tuple[Verdict, tuple[bool, float | None]]:
    """:func:`same_weights` and what it found: whether the weights are identical, their largest difference (None
    where the two runs are not the same training)."""
    import torch

    wa, sa = checkpoint_weights(a)
    wb, sb = checkpoint_weights(b)
    numbers: dict[str, Any] = {"steps": [sa, sb], "tensors": len(wa)}
    if sa != sb or set(wa) != set(wb):
        numbers["identical"] = False
        text = f"the {a_name} run ended after {sa} steps, the {b_name} run after {sb}: not the same training"
        return Verdict(key, "fail", text, numbers, where), (False, None)
    diff = max(float((wa[k].double() - wb[k].double()).abs().max()) for k in wa)
    identical = all(torch.equal(wa[k], wb[k]) for k in wa)
    numbers.update(identical=identical, max_abs_diff=diff)
    if identical:
        text = f"the {a_name} and the {b_name} runs end with the same weights, bit for bit, after {sa} steps"
        return Verdict(key, "pass", text, numbers, where), (True, diff)
    text = (
        f"the {a_name} and the {b_name} runs end with different weights after {sa} steps "
        f"(largest difference {diff:.3g})"
    )
    return Verdict(key, "fail", text, numbers, where), (False, diff)


def ranks(result: RunResult) -> list[schema.Rank | None]:
    """Every rank's metrics of a run of the lesson, typed (:class:`~.schema.Rank`); None for a rank that saved none
    (its script never called ``runtime.save_metrics``)."""
    return [typed(schema.Rank, m, f"{result.run_dir} rank {r}") if m else None for r, m in enumerate(result.ranks)]


def rank_frame(result: RunResult):  # -> pandas.DataFrame
    """One row per rank: the node (torchrun's ``GROUP_RANK``) it ran on, where it started, its final loss."""
    import pandas as pd

    rows = [
        {
            "rank": r,
            "node (GROUP_RANK)": m.group_rank if m else None,
            "started at step": m.start_step if m else None,
            "TORCHELASTIC_RESTART_COUNT": m.restarts if m else None,
            "final loss": m.final_loss if m else None,
            "weights (sha256, first 12)": m.weights_sha256[:12] if m else "",
        }
        for r, m in enumerate(ranks(result))
    ]
    return pd.DataFrame(rows).set_index("rank")


SLACK_S = 1.0
"""How long after its stamp a rank's C++ log line may have been written: its stamp is read to the whole second
(:data:`_RANK_STAMP`; review RR12-1 found c10's fraction to be the monotonic clock's, which put lines 0.2 s and 0.6 s
before the kills that caused them). An agent's stamp is Python's ``time.time()``, exact to the millisecond; ``time()``,
which c10 takes the second from, reads the kernel's coarse clock, up to a tick (1–10 ms) behind (review RR14-2)."""


def agent_lines(run_dir: str | os.PathLike[str], limit: int = 12) -> list[str]:
    """What each torchrun agent said about failures and restarts, and what ProcessGroupNCCL wrote in a rank's log when
    a peer died (:data:`_RANK_WORDS`), in time order, labelled by its log; where the lab recorded its kills
    (``faults.json``), each kill's lines under a heading of their own (review RR10-1). A line without a time stamp
    (an exception's) goes under the first kill."""
    said = _said(run_dir)
    kills = _kills(Path(run_dir))
    if not kills:
        return [text for _, _, text in said][:limit]
    out: list[str] = []
    for i, (what, wall) in enumerate(kills):
        end = kills[i + 1][1] if i + 1 < len(kills) else None
        mine = [
            t
            for s, _, t in said
            if (i == 0 and not s) or (s and _may_follow(s, wall) and (end is None or not _may_follow(s, end)))
        ]
        out += [f"after the kill of {what}:"] + [f"  {t}" for t in mine]
    return out[:limit]


def _kills(run_dir: Path) -> list[tuple[str, float]]:
    """The lab's kills (``faults.json``: what, wall clock), in order; none where it recorded none."""
    path = run_dir / "faults.json"
    if not path.is_file():
        return []
    return [(k["what"], float(k["wall"])) for k in json.loads(path.read_text())]


def _said(run_dir: str | os.PathLike[str]) -> list[tuple[str, int, str]]:
    """(time stamp ``MMDD hh:mm:ss.f``, a rank's to the whole second (:data:`_RANK_STAMP`), line number, ``log:
    words``) of :func:`agent_lines`, in time order. A line without a time stamp of its own (an exception's last line)
    takes the one of the line before it."""
    found: list[tuple[str, int, str]] = []
    logs = sorted(Path(run_dir).glob("**/agent*.log")) + sorted(Path(run_dir).glob("rank*.log"))
    for log in logs:
        name = str(log.relative_to(run_dir))
        words, stamps = (_AGENT_WORDS, _STAMP) if log.name.startswith("agent") else (_RANK_WORDS, _RANK_STAMP)
        stamp = ""
        for i, line in enumerate(log.read_text(errors="replace").splitlines()):
            if m := stamps.match(line):
                stamp = m.group(1)
            if m := words.search(line):
                found.append((stamp, i, f"{name}: {m.group(0)[:160]}"))
    found.sort(key=lambda item: item[:2])
    return found


def _may_follow(stamp: str, wall: float) -> bool:
    """Whether the line stamped ``stamp`` may have been written at or after ``wall``: an agent's stamp (with its
    fraction) is exact, a rank's (whole seconds) may be up to :data:`SLACK_S` early."""
    return log_wall(stamp, wall) + (0.0 if "." in stamp else SLACK_S) >= wall


def log_wall(stamp: str, near: float) -> float:
    """A log's ``MMDD hh:mm:ss.f`` (local time) as ``time.time()``, in the year of ``near``."""
    day, clock = stamp.split()
    whole, _, fraction = clock.partition(".")
    year = time.localtime(near).tm_year
    return time.mktime(time.strptime(f"{year}{day} {whole}", "%Y%m%d %H:%M:%S")) + float(f"0.{fraction or 0}")


_AGENT = "the other ranks' agent"


def survivor_end(outcome: ElasticOutcome) -> tuple[float, str] | None:
    """How the ranks that were not killed ended after the outcome's kill, from the agents' and ranks' logs: (seconds
    after the kill at which their agent logged it, how); None when no agent said (no kill recorded, or no such line).
    Review RR12-4: "Detected … new nodes" is when the agent began stopping them, not when they had ended."""
    if outcome.killed_at_s is None or outcome.started_wall is None:
        return None
    kill = outcome.started_wall + outcome.killed_at_s
    said = [(log_wall(s, kill), text) for s, _, text in _said(outcome.result.run_dir) if s and _may_follow(s, kill)]
    for t, text in said:
        m = _ENDED.search(text)
        if m is None or m.group(1) == "-9":  # -9: the killed rank itself
            continue
        if m.group(1) is None:
            return t - kill, f"{_AGENT} began stopping them, once another node's agent waited (Detected … new nodes)"
        if m.group(1) != "-6":
            pid = re.search(r"\(pid: (\d+)\)", text)
            cause = _exit_cause(outcome.result.run_dir, pid and int(pid.group(1)))
            return t - kill, f"{_AGENT} saw them exit with code {m.group(1)}: {cause}"
        return t - kill, f"{_AGENT} saw NCCL's watchdog end them (exit code -6, SIGABRT){_watchdog_sleep(said)}"
    return None


_PEER_LOST = re.compile(r"DistBackendError|ncclRemoteError|Connection (reset|closed) by (remote )?peer")
"""A collective's error at a lost peer, as the rank raised it: NCCL's (``DistBackendError``, ``ncclRemoteError``) or
gloo's (``Connection reset by peer``)."""


def _exit_cause(run_dir: str | os.PathLike[str], pid: int | None) -> str:
    """Why the rank with ``pid`` exited with a positive code (review RR9-8: the code alone says only "an exception"),
    from the record it wrote as it failed (``failures/pid{P}.json``, :func:`nvtutorial.runtime.report_failure`): the
    exception that ended that process, not a line of another rank or attempt (reviews RR10-7, RR11-1)."""
    path = Path(run_dir) / "failures" / f"pid{pid}.json"
    if pid is None or not path.is_file():
        return "an exception (no record of it: see the rank logs)"
    record = json.loads(path.read_text())
    raised = f"{record['type']}: {record['message']}"
    where = f"rank {record['rank']}, rank{record['rank']}.log"
    if _PEER_LOST.search(raised):
        return f"a collective lost its peer ({where}: {record['type']})"
    return f"an exception ({where}: {raised.splitlines()[0][:100]})"


def _watchdog_sleep(said: Sequence[tuple[float, str]]) -> str:
    """The watchdog's wait from its ``failure detected`` line to its ``taking the entire process down`` line in the
    same log (review RR5-1: 4 × TORCH_NCCL_WAIT_TIMEOUT_DUMP_MILSEC, dump or not), as words, in whole seconds: two C++
    stamps (review RR12-1); "" without both."""
    for t, text in said:
        if "failure detected by watchdog" not in text:
            continue
        log = text.split(":")[0]
        down = [u for u, line in said if u >= t and line == f"{log}: we are taking the entire process down"]
        if down:
            return (
                f" about {down[0] - t:.0f} s after it saw the error: it sleeps 4 × TORCH_NCCL_WAIT_TIMEOUT_DUMP_MILSEC "
                "(a minute at torch's default) first"
            )
    return ""


# --- across the node boundary ----------------------------------------------------------------------


def _texts(log_files: Mapping[int, Path] | Iterable[Path]) -> Iterable[str]:
    """The text of each log that exists."""
    for path in log_files.values() if isinstance(log_files, Mapping) else log_files:
        with contextlib.suppress(FileNotFoundError):
            yield Path(path).read_text(errors="replace")


def nccl_nodes(log_files: Mapping[int, Path] | Iterable[Path]) -> set[int]:
    """The ``nNodes`` NCCL reported when it set its communicators up (``NCCL_DEBUG=INFO``)."""
    return {int(m.group(3)) for text in _texts(log_files) for m in _NNODES.finditer(text)}


_SOCKET_IF = re.compile(r"NET/Socket : Using (.*)")
_IF = re.compile(r"\[\d+\]([^:\s]+):(\S+?)<\d+>")
"""NCCL's ``NET/Socket : Using [0]eth0:192.0.2.2<0>`` (``NCCL_DEBUG=INFO``): the interfaces it sends on."""


def socket_interfaces(log_files: Mapping[int, Path] | Iterable[Path]) -> list[str]:
    """The interfaces NCCL's socket transport said it uses, as ``eth0 (192.0.2.2)``, in the order first said."""
    found = [
        f"{i} ({a})" for text in _texts(log_files) for m in _SOCKET_IF.finditer(text) for i, a in _IF.findall(m[1])
    ]
    return list(dict.fromkeys(found))


def _over(report: nccl_debug.TransportReport, log_files: Mapping[int, Path]) -> str:
    """What NCCL's transport between the emulated nodes is, in words (review RR12-3: a socket's interface is read
    from NCCL's own line; review RR14-1: packets to an address of this machine go through its loopback device,
    whichever interface holds the address)."""
    if report.transport != "NET/Socket":
        return nccl_debug.FAMILIES.get(report.transport or "", "a transport this course does not describe")
    where = socket_interfaces(log_files)
    over = f"TCP to the address of {', '.join(where)}" if where else "TCP (NCCL's log names no interface)"
    return f"{over}; both nodes are this machine, so the kernel routes the packets through its loopback device"


def transport_verdict(result: RunResult, expect_nodes: int) -> Verdict:
    """What NCCL made of the emulated nodes: ``pass`` when it reports ``expect_nodes`` nodes and moves the
    data between them over its network transport (``NET/...``), read from the ranks' NCCL INFO lines."""
    if result.env is None or not result.env.is_gpu:
        return Verdict(
            "transport between nodes",
            "info",
            "gloo on the CPU: NCCL is not used, so there are no NCCL "
            "lines to read; gloo talks TCP between the ranks whatever the nodes",
            {},
            result.label,
        )
    report = nccl_debug.read_logs(result.log_files, backend="nccl")
    nodes = nccl_nodes(result.log_files)
    numbers = {
        "nNodes": sorted(nodes),
        "transport": report.transport,
        "via": report.details,
        "channels": len(report.channels),
    }
    if not report.channels or not nodes:
        return Verdict(
            "transport between nodes",
            "fail",
            "no NCCL INFO lines (comm ... nNodes, Channel ... via) in the rank logs: run with NCCL_DEBUG=INFO",
            numbers,
            result.label,
        )
    over_net = bool(report.transport and report.transport.startswith("NET/"))
    ok = nodes == {expect_nodes} and over_net
    text = (
        f"NCCL reports nNodes {', '.join(map(str, sorted(nodes)))} and connects the ranks via "
        f"{', '.join(report.details)}: {_over(report, result.log_files)}"
    )
    if expect_nodes > 1 and not over_net:
        text += "; between nodes it should use its network transport (NET/...)"
    return Verdict("transport between nodes", "pass" if ok else "fail", text, numbers, result.label)


def step_times(result: RunResult, skip: int = 3) -> list[float]:
    """Rank 0's step times (s) after ``skip`` warm-up steps."""
    times = list(result.metrics_as(schema.Rank).step_times_s)
    return times[skip:] if len(times) > skip + 1 else times


def exposed_ms(with_sync: RunResult, without: RunResult) -> float:
    """Median step with DDP's all-reduce minus median step without it (``no_sync``): the communication the
    backward pass did not hide, in ms."""
    return (statistics.median(step_times(with_sync)) - statistics.median(step_times(without))) * 1e3


def boundary_rows(
    runs: Mapping[str, tuple[RunResult, RunResult | None]], not_run: str = "not run"
) -> list[dict[str, Any]]:
    """Per placement (``{"1 node × 2 GPUs": (sync, no_sync)}``): step time, exposed communication, transport.
    ``not_run``: what the columns of a placement without its ``no_sync`` run say instead (why it was left out)."""
    rows = []
    for name, (sync, nosync) in runs.items():
        report = nccl_debug.read_logs(sync.log_files, backend=sync.env.backend if sync.env else None)
        nodes = nccl_nodes(sync.log_files)
        rows.append(
            {
                "placement": name,
                "median step (ms)": statistics.median(step_times(sync)) * 1e3,
                "step without all-reduce (ms)": statistics.median(step_times(nosync)) * 1e3 if nosync else not_run,
                "exposed communication (ms)": exposed_ms(sync, nosync) if nosync else not_run,
                "NCCL transport": report.summary,
                "nNodes": ", ".join(map(str, sorted(nodes))) or "n/a",
                "measured on": sync.label,
            }
        )
    return rows


def boundary_verdict(within: RunResult, across: RunResult) -> Verdict:
    """The same DDP step within one node and across two: ``compare`` on rank 0's step times (ms)."""
    c = compare([t * 1e3 for t in step_times(within)], [t * 1e3 for t in step_times(across)])
    text = c.describe("ms", "median step, within one node → across two emulated nodes")
    return comparison_verdict("node boundary", c, text, f"{within.label} | {across.label}")


# --- losing a rank or a node -----------------------------------------------------------------------


STEP_LINE = re.compile(r"^step (\d+)/(\d+) loss (\S+)")
"""Rank 0's line after each step of the lesson (``step N/M loss X``, the loss to five decimals)."""


def logged_losses(log: str | os.PathLike[str]) -> list[dict[int, str]]:
    """Rank 0's printed loss of each step (:data:`STEP_LINE`), one dict per attempt (each
    begins at its "starting at step" line, :data:`_START`), from its log."""
    attempts: list[dict[int, str]] = [{}]
    text = Path(log).read_text(errors="replace") if Path(log).exists() else ""
    for line in text.splitlines():
        if _START.match(line):
            attempts.append({})
        elif m := STEP_LINE.match(line):
            attempts[-1][int(m[1])] = m[3]
    return attempts[1:] or attempts


def first_difference(a: Mapping[int, str], b: Mapping[int, str]) -> int | None:
    """The first step both first attempts logged with different losses (None: none)."""
    return next((step for step in sorted(a) if step in b and a[step] != b[step]), None)


def replays_of(attempts: Sequence[Mapping[int, str]], resumed_from: int, last: int) -> tuple[int, list[int]]:
    """The steps one fault made the run do again (those of the attempt that resumed from ``resumed_from``, up to the
    ``last`` step before the kill) that an earlier attempt had logged, and those whose printed loss differed."""
    later = [i for i, a in enumerate(attempts) if i and a and min(a) == resumed_from + 1]
    if not later:
        return 0, []
    earlier: dict[int, str] = {}
    for attempt in attempts[: later[0]]:
        earlier.update({k: v for k, v in attempt.items() if k not in earlier})
    again = attempts[later[0]]
    steps = [k for k in sorted(again) if k <= last and k in earlier]
    return len(steps), [k for k in steps if again[k] != earlier[k]]


def _before_fault(outcome: ElasticOutcome, reference_log: str | os.PathLike[str] | None) -> str:
    """Where two runs of the same training already differed before the fault (one H100, 970b393; review RR16), the
    final weights cannot judge the recovery; the steps this fault made the run do again can, if there are at least two
    (the first one's loss comes before any update from the restored optimizer state) and each printed the killed
    attempt's loss, and the two runs started alike (step 1, the same loss). "" otherwise, or without a reference log."""
    if reference_log is None:
        return ""
    attempts = logged_losses(Path(outcome.result.run_dir) / "rank0.log")
    ref = logged_losses(reference_log)
    last = outcome.last_step_before_kill or 0
    step = first_difference(attempts[0], ref[0]) if attempts and ref else None
    alike = bool(attempts[0]) and min(attempts[0]) == 1 and attempts[0].get(1) == ref[0].get(1)
    if step is None or step > last or not alike:
        return ""
    compared, differed = replays_of(attempts, outcome.resumed_from or 0, last)
    if compared < 2 or differed:
        return ""
    return (
        f"; the two runs already differed at step {step}, before any fault (loss {attempts[0][step]} against "
        f"{ref[0][step]}): two runs of the same training were not bit for bit the same on this machine, so the final "
        f"weights cannot judge the recovery; the {compared} steps this fault made the run do again printed the killed "
        "attempt's losses (to five decimals)"
    )


def recovery_verdict(
    outcome: ElasticOutcome,
    reference: str | os.PathLike[str],
    what: str,
    reference_log: str | os.PathLike[str] | None = None,
) -> Verdict:
    """``pass`` when the run came back from the fault, resumed at its last checkpoint (fewer steps lost than
    the checkpoint interval) and ended with the weights of the uninterrupted run at ``reference``; ``info`` where the
    weights differ but the uninterrupted run (its rank 0's log: ``reference_log``) already differed before the fault
    and every step done again repeated its killed attempt's printed loss (:func:`_before_fault`)."""
    where = outcome.where
    numbers: dict[str, Any] = {
        "last_step_before_kill": outcome.last_step_before_kill,
        "resumed_from": outcome.resumed_from,
        "steps_lost": outcome.steps_lost,
        "every": outcome.every,
        "recovery_s": outcome.recovery_s,
        "restart_s": outcome.restart_s,
        "peer_error_s": outcome.peer_error_s,
    }
    if not outcome.ok:
        error = (outcome.result.error or {}).get("message", "the run failed")
        return Verdict(
            f"recovery: {what}", "fail", f"the run did not come back: {error.splitlines()[0][:300]}", numbers, where
        )
    if outcome.killed_at_s is None:  # no steps lost, no recovery time: nothing to judge them by
        restarted = (
            "yet the ranks were started again (the agents' logs say why)"
            if outcome.resumed_from is not None
            else "and the ranks were not started again"
        )
        return Verdict(
            f"recovery: {what}",
            "fail",
            f"no kill was recorded, {restarted}: this run shows no recovery from the lab's fault",
            numbers,
            where,
        )
    if outcome.resumed_from is None:
        return Verdict(f"recovery: {what}", "fail", "the ranks were never started again after the kill", numbers, where)
    same, (identical, diff) = _same_weights(reference, outcome.checkpoint, "uninterrupted", "interrupted", where)
    numbers.update(identical=identical, max_abs_diff=diff)
    at_checkpoint = outcome.resumed_from % outcome.every == 0 and 0 <= (outcome.steps_lost or 0) < outcome.every
    ok = at_checkpoint and same.status == "pass"
    before = "" if same.status == "pass" else _before_fault(outcome, reference_log)
    ended = survivor_end(outcome)
    too_slow = (outcome.recovery_s or 0) > SLOW_RECOVERY_S
    numbers.update(survivor_end_s=ended[0] if ended else None, slow=too_slow)
    slow = f"SLOW, over {SLOW_RECOVERY_S:g} s: " if too_slow else ""
    text = (
        f"{slow}{what}: killed after step {outcome.last_step_before_kill}, torchrun started the ranks again, they "
        f"resumed from the checkpoint of step {outcome.resumed_from} ({outcome.steps_lost} steps done again, "
        f"checkpoints every {outcome.every}), the first new step came {outcome.recovery_s:.1f} s after the kill"
        + (f" ({ended[0]:.1f} s after the kill, {ended[1]})" if ended else "")
        + "; "
        + (
            "the final weights are those of the uninterrupted run, bit for bit"
            if same.status == "pass"
            else f"but {same.text}{before}"
        )
    )
    status = "pass" if ok else "info" if at_checkpoint and before else "fail"
    return Verdict(f"recovery: {what}", status, text, numbers, where)


def store_loss_verdict(outcome: ElasticOutcome) -> Verdict:
    """What losing the node that hosts the c10d rendezvous store did: ``info`` with the agents' last words."""
    lines = agent_lines(outcome.result.run_dir, limit=40)
    store = [line for line in lines if "RendezvousConnectionError" in line]
    numbers = {
        "ok": outcome.ok,
        "agent_returncodes": list(outcome.agent_returncodes),
        "store_error": bool(store),
        "restarted": outcome.resumed_from is not None,
    }
    if outcome.ok and outcome.killed_at_s is not None:
        return Verdict(
            "losing the store's node",
            "info",
            "the job survived the loss of the node hosting the "
            "rendezvous store (a torch that keeps the store elsewhere)",
            numbers,
            outcome.where,
        )
    said = store[0].split(": ", 1)[-1] if store else "no RendezvousConnectionError in the agents' logs"
    if outcome.killed_at_s is None:  # nothing was killed: the job failed on its own, the lesson did not happen
        return Verdict(
            "losing the store's node",
            "fail",
            f"the job ended before the store's node was killed (agents' exit codes {numbers['agent_returncodes']}; "
            f"{said}): nothing was lost, so this run shows nothing of losing it; the agents' logs say why",
            numbers,
            outcome.where,
        )
    return Verdict(
        "losing the store's node",
        "info",
        "the job ended: the surviving agent lost the rendezvous store "
        f"that lived in the killed node's agent ({said}); torchrun cannot restart it, a new job must",
        numbers,
        outcome.where,
    )


def grade_steps_lost(prediction: float | None, outcome: ElasticOutcome, kill_after: int) -> Verdict:
    """The learner's prediction of the steps lost, graded against what the run did: right when it is the steps this
    run lost, or the steps a kill right after step ``kill_after`` (the question as asked) loses when the kill landed
    later (the ranks went on while the signal was sent: a step whose all-reduce the killed rank had already joined
    completes), including when that later kill landed right after a checkpoint and lost nothing."""
    lost, last, resumed, kill = (
        outcome.steps_lost,
        outcome.last_step_before_kill,
        outcome.resumed_from,
        outcome.killed_at_s,
    )
    if lost is None or last is None or resumed is None or kill is None:  # all four or none: a kill and a restart
        raise ValueError("the run has no measured steps lost (no kill, or no restart)")
    redone = f"so steps {resumed + 1}–{last} were done again" if lost else "so no step was done again"
    explanation = (
        f"The kill was asked for after step {kill_after}; rank 0's last step before the restart was {last}; the last "
        f"checkpoint before it was written after step {resumed} (every {outcome.every} steps), {redone}: "
        f"lost = k − N·⌊k/N⌋ with k = {last}, N = {outcome.every}. A checkpoint costs time too: fewer steps "
        "between them lose less and save more."
    )
    asked = kill_after - outcome.every * (kill_after // outcome.every)  # the same rule at the step asked for
    title = predict.question_of("prediction: steps lost")
    if last > kill_after and prediction is not None and prediction == asked and prediction != lost:
        return Verdict(
            "prediction: steps lost",
            "right",
            f"You predicted {prediction:g} steps: right for a kill right after step {kill_after}, as asked. "
            f"This run lost {lost}: rank 0 logged step {last} after the kill, {last - kill_after} step(s) later "
            f"({_late(outcome, last, kill)}){', right after a checkpoint' if not lost else ''}. {explanation}",
            {"prediction": prediction, "measured": lost, "asked": asked},
            outcome.where,
            title,
        )
    if lost == 0:
        return Verdict(
            "prediction: steps lost",
            "right" if prediction == 0 else ("no answer" if prediction is None else "off"),
            f"Measured: 0 steps lost (the kill came right after a checkpoint). {explanation}",
            {"prediction": prediction, "measured": 0},
            outcome.where,
            title,
        )
    if prediction is not None and prediction <= 0:  # a legitimate guess (the kill right after a checkpoint), wrong here
        return Verdict(
            "prediction: steps lost",
            "off",
            f"Measured: {lost} steps lost, not {prediction:g}. {explanation}",
            {"prediction": prediction, "measured": lost},
            outcome.where,
            title,
        )
    return predict.grade_number(
        "prediction: steps lost",
        prediction,
        float(lost),
        unit="steps",
        where=outcome.where,
        explanation=explanation,
        right_within=0.2,
        close_within=1.0,
    )


def _late(outcome: ElasticOutcome, step: int, killed_at_s: float) -> str:
    """Why rank 0 logged ``step`` after the kill (at ``killed_at_s``), by how late its line came: within 1 s the killed
    rank had joined the step's all-reduce before it died; later, rank 0 was held in that all-reduce until it was ended
    (review R6-7)."""
    late = [t - killed_at_s for t, a, s in outcome.steps if a == 0 and s == step]
    if not late or late[-1] <= 1.0:
        return (
            "the ranks went on while the signal was sent: the killed rank had already taken part in "
            f"step {step}'s all-reduce, so rank 0 completed it"
        )
    return (
        f"its line came {late[-1]:.1f} s after the kill: rank 0 was held in that step's all-reduce, which had lost its "
        "peer, until it was ended; k counts it"
    )


def timeline_frame(outcome: ElasticOutcome):  # -> pandas.DataFrame
    """The lab's events and the ranks' starts, in time order."""
    import pandas as pd

    frame = pd.DataFrame(outcome.timeline()).round({"t_s": 2})
    frame["measured on"] = outcome.where
    return frame


def recovery_rows(outcomes: Mapping[str, ElasticOutcome]) -> list[dict[str, Any]]:
    """One row per fault: when it struck, where the ranks resumed, steps lost, seconds to the first new step."""
    return [
        {
            "fault": name,
            "killed after step": o.last_step_before_kill,
            "resumed from step": o.resumed_from,
            "steps lost": o.steps_lost,
            "ranks back (s)": o.restart_s,
            "first new step (s)": o.recovery_s,
            "ended": "completed" if o.ok else "failed",
            "measured on": o.where,
        }
        for name, o in outcomes.items()
    ]


def published_frame(rows: Sequence[Mapping[str, Any]] = PUBLISHED):  # -> pandas.DataFrame
    """The published link rates, labelled as vendor figures."""
    import pandas as pd

    return pd.DataFrame(rows)


_START = re.compile(r"rank 0 of (\d+): starting at step (\d+)")


def started_at(run_dir: str | os.PathLike[str]) -> int | None:
    """The step a run of the lesson started at, from rank 0's line in its logs (ranks' or Slurm nodes')."""
    for log in sorted(Path(run_dir).glob("*.log")):
        m = _START.search(log.read_text(errors="replace"))
        if m:
            return int(m.group(2))
    return None


def resubmission_verdict(
    job: Any, reference: str | os.PathLike[str], resumed: str | os.PathLike[str], lost: ElasticOutcome, where: str
) -> Verdict:
    """``pass`` when the new job (a Slurm ``JobInfo``, or a ``RunResult`` of the launcher) completed, started at
    the lost job's last checkpoint and ended with the uninterrupted run's weights. The last checkpoint is the one of
    the last step the lost job printed or before; when that step is itself a checkpoint step, either that one or the
    one before (the kill may have come between the step's line and its checkpoint)."""
    state = getattr(job, "state", None)
    completed = (
        state == "COMPLETED" and job.exit_code == 0 and job.result is not None and job.result.returncode == 0
        if state is not None
        else bool(job.ok)
    )
    run_dir = job.run_dir
    start = started_at(run_dir)
    last = lost.last_step_before_kill  # None: nothing was killed, so no checkpoint is the lost job's last
    checkpoint, unwritten = None, False
    if last is not None:
        checkpoint = (last // lost.every) * lost.every
        # A step prints its line before it writes its checkpoint (lessons/elastic_train.py): a kill right after a
        # checkpoint step's line may come before that checkpoint is written, and the one before it is then the last.
        unwritten = last % lost.every == 0 and checkpoint >= lost.every
        if unwritten and start == checkpoint - lost.every:
            checkpoint = start
    result = job.result if state is not None else job
    label = result.label if result is not None and result.env is not None else ""
    numbers = {
        "completed": completed,
        "state": state,
        "started_at": start,
        "lost_job_last_step": last,
        "lost_job_checkpoint": checkpoint,
    }
    if not completed:
        return Verdict(
            "resubmitted job",
            "fail",
            f"the new job through {where} did not complete ({state or 'failed'})",
            numbers,
            label or where,
        )
    same, (identical, diff) = _same_weights(reference, resumed, "uninterrupted", "resubmitted", where)
    numbers.update(identical=identical, max_abs_diff=diff)
    ok = same.status == "pass" and start == checkpoint
    text = (
        f"the new job through {where} completed; it started at step {start}, the lost job's last checkpoint "
        f"(that job died after step {last}"
        + (", before it had written that step's checkpoint" if last is not None and start != last and unwritten else "")
        + "); "
        + ("its final weights are the uninterrupted run's, bit for bit" if same.status == "pass" else same.text)
    )
    return Verdict("resubmitted job", "pass" if ok else "fail", text, numbers, label or where)
