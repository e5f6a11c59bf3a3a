"""Notebook 09's verdicts at their rules (``report/multinode.py``), in this process: checkpoints compared bit for
bit, NCCL's node count and transport read from its INFO lines (the NCCL branch on the real lines one H200 wrote,
``reference/h200x1/runs/elastic_train-*``), the node boundary, recovery, the lost store, resubmission and the
steps-lost prediction. The runs themselves are in ``tests/test_multinode.py``."""

from __future__ import annotations

import dataclasses
import json
import shutil
import subprocess
import time
import types
from pathlib import Path
from typing import Any, cast

import pytest
import torch

from nvtutorial.chapters.ch09_multinode import report as m
from nvtutorial.chapters.ch09_multinode import schema
from nvtutorial.chapters.ch09_multinode.schema_outcome import ElasticOutcome, Fault
from nvtutorial.launch import LaunchSpec
from nvtutorial.report.verdict import compare
from nvtutorial.results import EnvInfo, RunResult
from tests.helpers.paths import ROOT

H200X1 = ROOT / "reference" / "h200x1" / "runs"
BOUNDARY = sorted(H200X1.glob("elastic_train-*"))


def save(path, weights, step):
    torch.save({"model": weights, "step": step, "optimizer": {}}, path)
    return path


W = {"a": torch.tensor([1.0, 2.0]), "b": torch.tensor([[3.0]])}


# --------------------------------------------------------------------------- checkpoints
def test_same_weights_bit_for_bit(tmp_path):
    a = save(tmp_path / "a.pt", W, 20)
    v = m.same_weights(
        a, save(tmp_path / "b.pt", {k: t.clone() for k, t in W.items()}, 20), "two-node", "one-node", "CPU"
    )
    assert v.status == "pass" and v.key == "same weights" and v.where == "CPU"
    assert v.numbers == {"steps": [20, 20], "tensors": 2, "identical": True, "max_abs_diff": 0.0}
    off = {"a": torch.tensor([1.0, 2.0 + 2**-20]), "b": W["b"]}
    v = m.same_weights(a, save(tmp_path / "c.pt", off, 20), "x", "y", "", key="k")
    assert v.status == "fail" and v.key == "k" and v.numbers["max_abs_diff"] == pytest.approx(2**-20)
    assert v.numbers["identical"] is False
    later = m.same_weights(a, save(tmp_path / "d.pt", W, 21), "x", "y", "")
    assert later.status == "fail" and later.numbers == {"steps": [20, 21], "tensors": 2, "identical": False}
    other = m.same_weights(a, save(tmp_path / "e.pt", {"a": W["a"]}, 20), "x", "y", "")
    assert other.status == "fail" and other.numbers["identical"] is False
    assert m.checkpoint_weights(a)[1] == 20


def lesson_rank(times=(0.1, 0.1), **fields):
    """One rank's typed result of the lesson."""
    plain = {
        "group_rank": 0,
        "restarts": 0,
        "start_step": 0,
        "steps": len(times),
        "step_times_s": tuple(times),
        "final_loss": 0.5,
        "weights_sha256": "ab" * 32,
    }
    return schema.Rank(**(plain | fields))


def run_of(ranks, host="CPU", logs=None, backend="gloo"):
    """A run of the lesson whose ranks returned ``ranks`` (typed, or an empty dict: a rank that saved nothing)."""
    gpu = backend == "nccl"
    env = EnvInfo(
        host=host,
        backend=backend,
        world_size=2,
        device_names=("NVIDIA H200",) * 2 if gpu else ("cpu", "cpu"),
        torch="2.13",
        cuda="12.9" if gpu else None,
        nccl="2.28.9" if gpu else None,
        python="3.11",
    )
    return RunResult(
        workload="nvtutorial/chapters/ch09_multinode/lessons/elastic_train.py",
        params={"args": []},
        returncode=0,
        wall_s=1.0,
        first_output_s=None,
        env=env,
        ranks=[dataclasses.asdict(r) if isinstance(r, schema.Rank) else r for r in ranks],
        run_dir=Path("run"),
        log_files=logs or {},
        log_tail=[],
    )


def test_the_rank_table():
    first = schema.Rank(
        group_rank=0,
        restarts=1,
        start_step=0,
        steps=2,
        step_times_s=(0.1, 0.1),
        final_loss=0.5,
        weights_sha256="abcdef0123456789",
    )
    result = run_of([first, {}])
    assert m.ranks(result) == [first, None]
    frame = m.rank_frame(result)
    assert list(frame.index) == [0, 1] and frame.loc[0, "weights (sha256, first 12)"] == "abcdef012345"
    assert frame.loc[0, "node (GROUP_RANK)"] == 0 and frame.loc[1, "weights (sha256, first 12)"] == ""


AGENT0 = """\
I1201 10:00:01.000 some start
W1201 10:00:05.500 [default] Worker group FAILED. 2/3 attempts left; will restart worker group
  failed (exitcode: -9) local_rank: 0
E1201 10:00:09.000 x
torch.distributed.elastic.rendezvous.api.RendezvousConnectionError: The connection to the C10d store has failed.
"""
AGENT1 = """\
I1201 10:00:02.000 start
I1201 10:00:05.000 Detected 1 new nodes from group_rank=1; will restart worker group
I1201 10:00:07.000 [default] worker group successfully finished
"""


def test_agent_lines_in_time_order(tmp_path):
    (tmp_path / "node0").mkdir()
    (tmp_path / "node0" / "agent.log").write_text(AGENT0)
    (tmp_path / "agent1.log").write_text(AGENT1)
    lines = m.agent_lines(tmp_path)
    assert lines == [
        "agent1.log: Detected 1 new nodes from group_rank=1; will restart worker group",
        "node0/agent.log: Worker group FAILED. 2/3 attempts left; will restart worker group",
        "node0/agent.log: failed (exitcode: -9) local_rank: 0",  # no stamp of its own: the line before's
        "agent1.log: worker group successfully finished",
        "node0/agent.log: RendezvousConnectionError: The connection to the C10d store has failed.",
    ]
    assert m.agent_lines(tmp_path, limit=2) == lines[:2]
    (tmp_path / "agent1.log").write_text("x" * 5 + " ChildFailedError " + "y" * 300 + "\n")
    assert "agent1.log: ChildFailedError" in m.agent_lines(tmp_path)


# --------------------------------------------------------------------------- NCCL across the node boundary
def test_nccl_nodes_from_the_h200_lines():
    assert len(BOUNDARY) == 2
    logs = {r: BOUNDARY[0] / f"rank{r}.log.nccl.txt" for r in (0, 1)}
    assert m.nccl_nodes(logs) == {2} and m.nccl_nodes(list(logs.values())) == {2}
    assert m.nccl_nodes([BOUNDARY[0] / "missing.log"]) == set()


def _h200_result(folder: Path) -> RunResult:
    """A committed run of the NCCL node boundary, its NCCL lines as its rank logs (the real reader)."""
    result = RunResult.load(folder / "result.json")
    result.log_files = {r: folder / f"rank{r}.log.nccl.txt" for r in (0, 1)}
    return result


@pytest.mark.parametrize("folder", BOUNDARY, ids=lambda p: p.name)
def test_the_nccl_branch_of_the_transport_verdict_on_the_h200_lines(folder):
    result = _h200_result(folder)
    assert result.env.is_gpu and result.env.nnodes == 2
    v = m.transport_verdict(result, 2)
    assert v.status == "pass" and v.numbers["nNodes"] == [2] and v.numbers["transport"] == "NET/Socket"
    assert v.numbers["channels"] == 8 and v.where == result.label  # 2 channels × send and receive × 2 ranks
    wrong = m.transport_verdict(result, 1)  # one node expected: NCCL reported two
    assert wrong.status == "fail" and wrong.numbers["nNodes"] == [2]


def test_the_transport_verdict_without_nccl_lines_or_over_p2p(tmp_path):
    result = _h200_result(BOUNDARY[0])
    for r in (0, 1):
        (tmp_path / f"rank{r}.log").write_text("no NCCL here\n")
    result.log_files = {r: tmp_path / f"rank{r}.log" for r in (0, 1)}
    v = m.transport_verdict(result, 2)
    assert v.status == "fail" and v.numbers["channels"] == 0
    p2p = (
        (BOUNDARY[0] / "rank0.log.nccl.txt")
        .read_text()
        .replace("nNodes 2", "nNodes 1")
        .replace("NET/Socket/0", "P2P/CUMEM")
    )
    for r in (0, 1):
        (tmp_path / f"rank{r}.log").write_text(p2p)
    one_node = m.transport_verdict(result, 1)
    assert one_node.status == "fail" and one_node.numbers["nNodes"] == [1]  # P2P is not NCCL's network transport
    assert "should use its network transport" not in one_node.text
    assert "should use its network transport" in m.transport_verdict(result, 2).text
    cpu_run = types.SimpleNamespace(env=types.SimpleNamespace(is_gpu=False), label="CPU")
    cpu = m.transport_verdict(cast(RunResult, cpu_run), 2)
    assert cpu.status == "info" and cpu.numbers == {}
    assert m.transport_verdict(cast(RunResult, types.SimpleNamespace(env=None, label="?")), 2).status == "info"


def test_the_transport_verdict_names_the_interface_nccl_said(tmp_path):
    """Review RR12-3: the interface from NCCL's "NET/Socket : Using" line (the 1d06a7c boundary run's), the packets
    through the loopback device whichever address (RR14-1), and "NET/Socket" said once; without that line no
    interface is named; over NET/IB, its own words."""
    result = _h200_result(BOUNDARY[0])
    plain = m.transport_verdict(result, 2).text
    using = "vm:15462:15462 [0] NCCL INFO NET/Socket : Using [0]eth0:192.0.2.2<0>\n"
    for r in (0, 1):
        (tmp_path / f"rank{r}.log").write_text(using + (BOUNDARY[0] / f"rank{r}.log.nccl.txt").read_text())
    result.log_files = {r: tmp_path / f"rank{r}.log" for r in (0, 1)}
    v = m.transport_verdict(result, 2)
    local = "; both nodes are this machine, so the kernel routes the packets through its loopback device"
    assert v.status == "pass" and v.text.endswith(f"via NET/Socket: TCP to the address of eth0 (192.0.2.2){local}")
    assert plain.endswith(f"via NET/Socket: TCP (NCCL's log names no interface){local}")
    assert "NET/Socket: NET/Socket" not in plain + v.text
    two = "NCCL INFO NET/Socket : Using [0]ib0:10.0.0.1<0> [1]eth1:fe80::1%eth1<0>\n"
    (tmp_path / "two.log").write_text(two + two)
    assert m.socket_interfaces([tmp_path / "two.log", tmp_path / "gone.log"]) == [
        "ib0 (10.0.0.1)",
        "eth1 (fe80::1%eth1)",
    ]
    for r in (0, 1):
        (tmp_path / f"rank{r}.log").write_text(
            (BOUNDARY[0] / f"rank{r}.log.nccl.txt").read_text().replace("Socket", "IB")
        )
    ib = m.transport_verdict(result, 2)
    assert ib.status == "pass" and ib.text.endswith("via NET/IB: InfiniBand/RoCE verbs through a NIC")


def run_with_steps(times, label="CPU", logs=None, backend="gloo"):
    """A run of the lesson whose rank 0 timed ``times`` (its label names ``label``, the host)."""
    return run_of([lesson_rank(times), lesson_rank(times, group_rank=1)], host=label, logs=logs, backend=backend)


def test_step_times_skip_the_warm_up():
    assert m.step_times(run_with_steps([9, 9, 9, 1, 2, 3])) == [1, 2, 3]
    assert m.step_times(run_with_steps([9, 9, 9, 1, 2])) == [1, 2]
    assert m.step_times(run_with_steps([9, 9, 9, 1])) == [9, 9, 9, 1]  # too few to skip
    assert m.step_times(run_with_steps([5, 1, 2]), skip=1) == [1, 2]
    assert m.step_times(run_with_steps([5, 1]), skip=1) == [5, 1]
    with pytest.raises(ValueError, match="no rank reported metrics"):
        m.step_times(dataclasses.replace(run_with_steps([5, 1]), ranks=[]))  # a run that failed
    assert m.exposed_ms(
        run_with_steps([9, 9, 9, 0.012, 0.014, 0.016]), run_with_steps([9, 9, 9, 0.01, 0.01, 0.01])
    ) == pytest.approx(4.0)


def test_the_boundary_table_and_verdict(tmp_path):
    within = run_with_steps([1, 1, 1, 0.010, 0.0101, 0.0102], label="one node")
    across = run_with_steps([1, 1, 1, 0.020, 0.0201, 0.0202], label="two nodes")
    v = m.boundary_verdict(within, across)
    c = compare([10.0, 10.1, 10.2], [20.0, 20.1, 20.2])
    assert v.key == "node boundary" and v.status == "slower" and v.where == f"{within.label} | {across.label}"
    assert "on one node:" in within.label and "on two nodes:" in across.label
    assert v.numbers["ratio"] == pytest.approx(c.ratio) and v.numbers["noise"] == pytest.approx(c.noise)
    assert m.boundary_verdict(within, within).status == "no change"
    logs = {r: BOUNDARY[0] / f"rank{r}.log.nccl.txt" for r in (0, 1)}
    gpu = run_with_steps([1, 1, 1, 0.020, 0.0201, 0.0202], label="GPU", logs=logs, backend="nccl")
    rows = m.boundary_rows({"1 node": (within, None), "2 nodes": (gpu, within)}, not_run="not run (shared)")
    assert rows[0]["exposed communication (ms)"] == "not run (shared)" and rows[0]["nNodes"] == "n/a"  # review M14
    assert rows[0]["median step (ms)"] == pytest.approx(10.1)
    assert rows[0]["step without all-reduce (ms)"] == "not run (shared)"
    assert m.boundary_rows({"1 node": (within, None)})[0]["exposed communication (ms)"] == "not run"
    assert rows[1]["exposed communication (ms)"] == pytest.approx(10.0) and rows[1]["nNodes"] == "2"
    assert rows[1]["NCCL transport"].startswith("NET/Socket") and rows[1]["measured on"] == gpu.label
    assert gpu.label.startswith("2× NVIDIA H200 · NCCL 2.28.9")


# --------------------------------------------------------------------------- recovery
def outcome(
    tmp_path: Path,
    ok: bool = True,
    resumed: int | None = 10,
    every: int = 10,
    weights=W,
    last: int = 13,
    error: dict[str, Any] | None = None,
    recovery_s: float = 2.5,
    restart_s: float = 1.5,
    killed_at_s: float | None = 8.0,
    started_wall: float | None = None,
    steps: list[tuple[float, int, int]] | None = None,
    run_dir: Path | None = None,
) -> ElasticOutcome:
    """An elastic run as the lab records it, made up: attempt 0 logs steps 1..``last`` and is killed at
    ``killed_at_s`` (None: nothing killed); attempt 1 (none if ``resumed`` is None) starts at step ``resumed``
    ``restart_s`` after the kill (or 8 s) and logs its first step ``recovery_s`` after it. Its steps lost are ``last -
    resumed``; its last checkpoint (``--ckpt-dir``/last.pt) holds ``weights``."""
    ckpt = tmp_path / "ckpt"
    ckpt.mkdir(exist_ok=True)
    save(ckpt / "last.pt", weights, 40)
    result = RunResult(
        workload="nvtutorial/chapters/ch09_multinode/lessons/elastic_train.py",
        params={"args": ["--ckpt-dir", str(ckpt)]},
        returncode=0 if ok else 1,
        wall_s=20.0,
        first_output_s=None,
        env=None,
        ranks=[],
        run_dir=run_dir or tmp_path,
        log_files={},
        log_tail=[],
        error=error or {"message": "RuntimeError: boom\nmore"},
    )
    attempts, fault_s = [(1.5, 0, 0)], 8.0 if killed_at_s is None else killed_at_s
    if steps is None:
        steps = [(1.5 + 0.1 * s, 0, s) for s in range(1, last + 1)]
        steps += [(fault_s + recovery_s, 1, resumed + 1)] if resumed is not None else []
    if resumed is not None:
        attempts.append((fault_s + restart_s, 1, resumed))
    return ElasticOutcome(
        result=result,
        fault=Fault("rank", max(last, 1)),
        every=every,
        steps=steps,
        attempts=attempts,
        events=[(1.234, "x")],
        killed_at_s=killed_at_s,
        agent_returncodes=(1, 0),
        placement="CPU",
        started_wall=started_wall,
    )


@pytest.mark.parametrize(
    "kwargs, status",
    [
        ({}, "pass"),
        ({"last": 10}, "pass"),  # 0 steps lost
        ({"last": 19}, "pass"),  # 9
        ({"last": 20}, "fail"),  # 10: a whole interval
        ({"last": 9}, "fail"),  # -1
        ({"resumed": 15, "last": 18}, "fail"),  # 3 lost, but not from a checkpoint
        ({"resumed": 0, "last": 3}, "pass"),
        ({"weights": {"a": torch.tensor([1.0, 2.5]), "b": W["b"]}}, "fail"),
    ],
)
def test_recovery_at_its_rule(tmp_path, kwargs, status):
    reference = save(tmp_path / "reference.pt", W, 40)
    v = m.recovery_verdict(outcome(tmp_path, **kwargs), reference, "a rank killed")
    assert v.key == "recovery: a rank killed" and v.status == status and v.where == "CPU"
    assert v.numbers["every"] == 10 and v.numbers["recovery_s"] == 2.5 and v.numbers["restart_s"] == 1.5
    assert v.numbers["identical"] is ("weights" not in kwargs)


H100_STALL = ROOT / "tests" / "fixtures" / "elastic-h100x1-2026-12-07"  # review R6-1's run, its logs
KILL = time.mktime((2026, 12, 7, 11, 8, 1, 0, 0, -1)) + 0.40  # rank 1's SIGKILL (rank 0's NCCL error: 01.443)


def ended_at(tmp_path, *lines, kill=KILL):
    """An outcome whose node0/agent.log holds ``lines`` (``stamp words``), killed at ``kill``."""
    (tmp_path / "node0").mkdir(exist_ok=True)
    (tmp_path / "node0" / "agent.log").write_text("".join(f"E{stamp} 1 api.py:986] {w}\n" for stamp, w in lines))
    return outcome(tmp_path, killed_at_s=8.0, started_wall=kill - 8.0)


@pytest.mark.parametrize(
    "lines, end_s, how",
    [
        ([("1207 11:08:02.900000", "failed (exitcode: 1) local_rank: 0")], 1.5, "exit with code 1: an exception (no"),
        ([("1207 11:08:03.400000", "[default] Detected 1 new nodes from group_rank=1")], 2.0, "agent began stopping"),
        ([("1207 11:08:02.000000", "failed (exitcode: -6) local_rank: 0")], 0.6, "(exit code -6, SIGABRT)"),
        ([("1207 11:08:01.400000", "failed (exitcode: 1) local_rank: 0")], 0.0, "exit with code 1"),  # at the kill
        (  # the killed rank's own -9, and an agent's line from before the kill (its stamp is exact), are not the end
            [("1207 11:08:01.390000", "failed (exitcode: 1)"), ("1207 11:08:01.500000", "failed (exitcode: -9)")],
            None,
            None,
        ),
        ([], None, None),
    ],
)
def test_how_the_other_ranks_ended_after_a_kill(tmp_path, lines, end_s, how):
    ended = m.survivor_end(ended_at(tmp_path, *lines))
    assert (ended and round(ended[0], 2)) == end_s and (ended is None) is (how is None)
    assert how is None or how in ended[1] and "debug dump" not in ended[1]
    assert m.survivor_end(outcome(tmp_path)) is None  # no kill recorded


def test_the_h100_stall_is_read_from_its_logs_and_called_slow(tmp_path):
    """Review R6-1/R6-3: the GPU run's rank 0 ended 61 s after the kill, by NCCL's watchdog after its debug dump; the
    node fault's survivor was stopped by its agent; a recovery over SLOW_RECOVERY_S says SLOW, at or under it not."""
    rank = outcome(tmp_path, killed_at_s=8.91, started_wall=KILL - 8.91, run_dir=H100_STALL)
    ended = m.survivor_end(rank)
    assert ended is not None
    end_s, how = ended
    assert end_s == pytest.approx(61.178, abs=1e-3)
    assert how == (  # review RR12-1: two C++ stamps, whole seconds
        "the other ranks' agent saw NCCL's watchdog end them (exit code -6, SIGABRT) about 61 s after it saw the "
        "error: it sleeps 4 × TORCH_NCCL_WAIT_TIMEOUT_DUMP_MILSEC (a minute at torch's default) first"
    )
    node_kill = time.mktime((2026, 12, 7, 11, 9, 10, 0, 0, -1)) + 0.30
    node = dataclasses.replace(rank, started_wall=node_kill - 8.91)
    ended = m.survivor_end(node)
    assert ended is not None
    end_s, how = ended
    assert end_s == pytest.approx(1.507, abs=1e-3) and how.startswith("the other ranks' agent began stopping them")
    reference = save(tmp_path / "reference.pt", W, 40)
    for recovery_s, slow in ((m.SLOW_RECOVERY_S + 0.01, True), (m.SLOW_RECOVERY_S, False)):
        slowed = outcome(
            tmp_path, killed_at_s=8.91, started_wall=KILL - 8.91, run_dir=H100_STALL, recovery_s=recovery_s
        )
        v = m.recovery_verdict(slowed, reference, "x")
        assert v.status == "pass" and v.numbers["slow"] is slow and v.text.startswith("SLOW, over 30 s: ") is slow
        assert v.numbers["survivor_end_s"] == pytest.approx(61.178, abs=1e-3)
        assert "(61.2 s after the kill, the other ranks' agent saw NCCL's watchdog end them (exit code -6" in v.text
    assert "the other ranks' agent" not in m.recovery_verdict(outcome(tmp_path), reference, "x").text


def test_agent_lines_include_what_nccl_said_in_rank_0s_log():
    nccl = "rank0.log: raised the following async exception: NCCL error: remote process exited or there was a network "
    assert m.agent_lines(H100_STALL, limit=40) == [
        nccl + "error",
        "rank0.log: failure detected by watchdog",
        "node1/agent.log: failed (exitcode: -9) local_rank: 0 (pid: 17013)",
        "node1/agent.log: Worker group FAILED. 3/3 attempts left; will restart worker group",
        "rank0.log: ProcessGroupNCCL preparing to dump debug info",
        "rank0.log: we are taking the entire process down",  # stamped 11:09:02 (whole seconds): before the agent's
        "node0/agent.log: failed (exitcode: -6) local_rank: 0 (pid: 17012)",  # 11:09:02.578
        "node0/agent.log: Worker group FAILED. 3/3 attempts left; will restart worker group",
        nccl + "error",
        "rank0.log: failure detected by watchdog",
        "rank0.log: ProcessGroupNCCL preparing to dump debug info",
        "node0/agent.log: Detected 1 new nodes from group_rank=0; will restart worker group",
        "node1/agent-replacement.log: worker group successfully finished",
        "node0/agent.log: worker group successfully finished",
    ]


H100_FIXED = ROOT / "tests" / "fixtures" / "elastic-h100x1-2026-12-07-fixed"  # the same lab at 863ebb4, its logs
KILL_FIXED = time.mktime((2026, 12, 7, 12, 25, 35, 0, 0, -1)) + 0.80  # where its copy's "1.3 s" puts the rank's kill


def test_the_fixed_h100_run_ends_the_survivor_by_its_agent_without_a_dump(tmp_path):
    """Review RR5-1 on the GPU: with the lab's RANK_ENV the watchdog still saw the error and signalled, but no dump
    was prepared and it never took the process down: node 0's agent stopped rank 0 first, after both faults."""
    said = m.agent_lines(H100_FIXED, limit=40)
    assert said.count("rank0.log: failure detected by watchdog") == 2
    assert not [line for line in said if "preparing to dump" in line or "taking the entire process down" in line]
    for kill, end_s in ((KILL_FIXED, 1.312), (time.mktime((2026, 12, 7, 12, 25, 46, 0, 0, -1)) + 0.68, 3.998)):
        fault = outcome(tmp_path, killed_at_s=8.0, started_wall=kill - 8.0, run_dir=H100_FIXED, recovery_s=13.71)
        ended = m.survivor_end(fault)
        assert ended[0] == pytest.approx(end_s, abs=1e-3) and ended[1].startswith(m._AGENT + " began stopping")
    reference = save(tmp_path / "reference.pt", W, 40)
    v = m.recovery_verdict(fault, reference, "a node lost")
    assert v.status == "pass" and v.numbers["slow"] is False and "the first new step came 13.7 s after" in v.text


H100_RAISED = ROOT / "tests" / "fixtures" / "elastic-h100x1-2026-12-07-raised"  # the same lab at 7b5ab7b, its logs


def test_the_h100_run_whose_survivor_raised_is_read_as_a_collective_that_lost_its_peer(tmp_path):
    """The committed copy's run: rank 0's all-reduce raised (exit code 1) before any agent acted, 0.2 s after the
    rank's kill; after the node's loss its agent stopped it, 3.6 s after; both under SLOW_RECOVERY_S."""
    said = m.agent_lines(H100_RAISED, limit=40)
    assert "node0/agent.log: failed (exitcode: 1) local_rank: 0 (pid: 15567)" in said
    assert said[0].startswith("rank0.log: DistBackendError: NCCL error in: ")  # review RR9-5: the end, printed first
    assert said[0].endswith(", remote process exited or there was a network error")
    assert not [line for line in said if "preparing to dump" in line or "taking the entire process down" in line]
    rank_kill = time.mktime((2026, 12, 7, 17, 7, 54, 0, 0, -1)) + 0.005
    node_kill = time.mktime((2026, 12, 7, 17, 8, 6, 0, 0, -1)) + 0.19
    run = tmp_path / "run"
    shutil.copytree(H100_RAISED, run)  # the run predates failures/: its survivor's record, from its log's exception
    raised = next(line for line in (run / "rank0.log").read_text().splitlines() if line.startswith("torch.distrib"))
    kind, _, message = raised.removeprefix("torch.distributed.").partition(": ")
    record(run, 15567, 0, kind, message)
    for kill, end_s, how in (
        (rank_kill, 0.2, "the other ranks' agent saw them exit with code 1: a collective lost its peer (rank 0, "),
        (node_kill, 3.6, "the other ranks' agent began stopping them"),
    ):
        fault = outcome(tmp_path, killed_at_s=8.0, started_wall=kill - 8.0, run_dir=run)
        ended = m.survivor_end(fault)
        assert ended[0] == pytest.approx(end_s, abs=1e-3) and ended[1].startswith(how)
    reference = save(tmp_path / "reference.pt", W, 40)
    for recovery_s, slow in ((18.07, False), (m.SLOW_RECOVERY_S + 0.01, True)):
        fault = outcome(tmp_path, killed_at_s=8.0, started_wall=node_kill - 8.0, run_dir=run, recovery_s=recovery_s)
        v = m.recovery_verdict(fault, reference, "x")
        assert v.numbers["slow"] is slow


H100_1D06 = ROOT / "tests" / "fixtures" / "elastic-h100x1-2026-12-07-1d06a7c"  # the lab at 1d06a7c, with faults.json


def test_the_1d06a7c_logs_are_placed_by_their_c10_stamps_whole_seconds(tmp_path, utc):
    """Review RR12-1: rank0.log's C++ lines are stamped 0.18 s and 0.24 s before the recorded kills that caused them
    (c10 writes the monotonic clock's fraction); read to the whole second they come under those kills, and a kill after
    that second is one they cannot follow. The agents' lines (Python's clock) time the survivors: their agent began
    stopping them 1.2 s and 3.6 s after the kills (review RR12-4)."""
    kills = [k["wall"] for k in json.loads((H100_1D06 / "faults.json").read_text())]
    said = m.agent_lines(H100_1D06, limit=40)
    node = said.index("after the kill of node 1:")
    nccl = (
        "  rank0.log: raised the following async exception: NCCL error: remote process exited or there was a network "
    )
    seen = [nccl + "error", "  rank0.log: failure detected by watchdog"]
    assert said[:3] == ["after the kill of rank 1:", *seen] and said[node + 1 : node + 3] == seen
    assert "  node1/agent.log: failed (exitcode: -9) local_rank: 0 (pid: 15556)" in said[:node]
    reference = save(tmp_path / "reference.pt", W, 40)
    for kill, end_s, first in zip(kills, (1.184, 3.627), (11.89, 13.58), strict=True):
        fault = outcome(tmp_path, killed_at_s=8.0, started_wall=kill - 8.0, recovery_s=first, run_dir=H100_1D06)
        assert m.survivor_end(fault)[0] == pytest.approx(end_s, abs=1e-3)
        began = f"({end_s:.1f} s after the kill, the other ranks' agent began stopping them, once another node's agent"
        assert began in m.recovery_verdict(fault, reference, "x").text
    second = m.log_wall("1207 23:03:23", kills[0])  # the end of the second rank 0's lines were stamped in
    run = tmp_path / "run"
    shutil.copytree(H100_1D06, run)
    for wall, under in ((second - 0.001, True), (second + 0.001, False)):
        (run / "faults.json").write_text(json.dumps([{"what": "rank 1", "wall": wall}]))
        assert (m.agent_lines(run, limit=40)[1:3] == seen) is under


def test_the_agents_lines_come_under_the_kill_they_follow(tmp_path):
    """Review RR10-1: with the lab's kills recorded (faults.json), each kill's lines under a heading of its own; the
    node loss's watchdog lines no longer read as the rank kill's, and the unstamped raise goes under the first kill."""
    import json
    import shutil

    run = tmp_path / "run"
    shutil.copytree(H100_RAISED, run)
    rank_kill = time.mktime((2026, 12, 7, 17, 7, 54, 0, 0, -1)) + 0.005
    node_kill = time.mktime((2026, 12, 7, 17, 8, 6, 0, 0, -1)) + 0.19
    (run / "faults.json").write_text(
        json.dumps([{"what": "rank 1", "wall": rank_kill}, {"what": "node 1", "wall": node_kill}])
    )
    said = m.agent_lines(run, limit=40)
    node = said.index("after the kill of node 1:")
    assert said[0] == "after the kill of rank 1:" and said[1].startswith("  rank0.log: DistBackendError: NCCL error")
    assert "  node0/agent.log: failed (exitcode: 1) local_rank: 0 (pid: 15567)" in said[:node]
    assert said[node + 1 :][:2] == [
        "  rank0.log: raised the following async exception: NCCL error: remote process exited or there was a network "
        "error",
        "  rank0.log: failure detected by watchdog",
    ]
    assert not [line for line in said[:node] if "watchdog" in line]
    assert m.agent_lines(H100_RAISED, limit=40)[0].startswith(
        "rank0.log: DistBackendError"
    )  # no faults.json: as before


def record(run_dir, pid, rank, kind, message):
    """``failures/pid{P}.json`` as :func:`nvtutorial.runtime.report_failure` writes it for a failed process."""
    (run_dir / "failures").mkdir(exist_ok=True)
    fields = {"rank": rank, "pid": pid, "restart": 0, "time": 0.0, "type": kind, "message": message, "traceback": ""}
    (run_dir / "failures" / f"pid{pid}.json").write_text(json.dumps(fields))


@pytest.mark.parametrize(
    "kind, message, cause",
    [
        ("DistBackendError", "NCCL error in: x.cpp:1, remote process exited", "a collective lost its peer (rank 0"),
        ("RuntimeError", "[pair.cc:537] Read error [127.0.0.1]:1: Connection reset by peer.", "a collective lost"),
        ("RuntimeError", "NCCL error\nLast error:\nsocketProgress: Connection closed by remote peer", "a collective"),
        (
            "RuntimeError",
            "the checkpoint's world size differs\nmore",
            "an exception (rank 0, rank0.log: RuntimeError: the checkpoint's world size differs)",
        ),
    ],
)
def test_an_exit_code_is_called_a_lost_peer_only_where_the_record_says_so(tmp_path, kind, message, cause):
    """Review RR9-8: exit code 1 is any uncaught exception; the cause comes from the failed process's own record."""
    record(tmp_path, 867, 0, kind, message)
    ended = m.survivor_end(ended_at(tmp_path, ("1207 11:08:06.000000", failed(867))))
    assert ended[1].startswith("the other ranks' agent saw them exit with code 1: " + cause)


def failed(pid: int | None) -> str:
    """An agent's line for its rank's exit with code 1 (torch 2.11–2.15; older ones said no pid)."""
    return "failed (exitcode: 1) local_rank: 0" + ("" if pid is None else f" (pid: {pid})")


def test_an_exit_is_read_from_the_record_of_the_process_the_agent_names(tmp_path):
    """Reviews RR10-7 and RR11-1: the survivor on node 1 lost its peer while rank 0 had raised something else earlier;
    each exit is read from the process the agent's line names (its pid), never from another rank's or attempt's."""
    record(tmp_path, 11, 0, "RuntimeError", "resume failed")
    record(tmp_path, 22, 1, "DistBackendError", "NCCL error: remote process exited")
    (tmp_path / "node1").mkdir()
    (tmp_path / "node1" / "agent.log").write_text(f"E1207 11:08:03.000000 1 api.py:986] {failed(22)}\n")
    lost = "the other ranks' agent saw them exit with code 1: a collective lost its peer (rank 1, rank1.log: Dist"
    assert m.survivor_end(ended_at(tmp_path))[1] == lost + "BackendError)"

    def later(pid):
        return m.survivor_end(ended_at(tmp_path, ("1207 11:08:20.000000", failed(pid)), kill=KILL + 15.0))

    assert later(11) == (
        pytest.approx(3.6, abs=1e-3),
        f"{m._AGENT} saw them exit with code 1: an exception (rank 0, rank0.log: RuntimeError: resume failed)",
    )
    no_record = f"{m._AGENT} saw them exit with code 1: an exception (no record of it: see the rank logs)"
    assert later(33)[1] == later(None)[1] == no_record


@pytest.mark.parametrize("down", [True, False])
def test_the_watchdogs_sleep_needs_both_of_its_lines(tmp_path, down):
    """The sleep is said only from the watchdog's sight of the error to its teardown in the same log."""
    stamp = "[rank0]:[E1207 11:08:{} ProcessGroupNCCL.cpp:1] [Rank 0] {}\n"
    log = stamp.format("01.500000000", "failure detected by watchdog at work sequence id: 3")
    log += stamp.format("05.600000000", "To avoid data inconsistency, we are taking the entire process down.") * down
    (tmp_path / "rank0.log").write_text(log)
    ended = m.survivor_end(ended_at(tmp_path, ("1207 11:08:06.000000", "failed (exitcode: -6) local_rank: 0")))
    assert ended[0] == pytest.approx(4.6, abs=1e-3)
    sleep = " about 4 s after it saw the error: it sleeps 4 × TORCH_NCCL_WAIT_TIMEOUT_DUMP_MILSEC"  # 05 − 01 (RR12-1)
    assert (sleep in ended[1]) is down and ended[1].startswith(f"{m._AGENT} saw NCCL's watchdog end them (exit code -6")


def test_a_recovery_whose_weights_differ_fails_and_says_how(tmp_path):
    """Resumed at a checkpoint but ended with other weights: fail, the text says so instead of "bit for bit"."""
    reference = save(tmp_path / "reference.pt", W, 40)
    off = {"a": torch.tensor([1.0, 2.0 + 2**-20]), "b": W["b"]}
    v = m.recovery_verdict(outcome(tmp_path, weights=off), reference, "a rank killed")
    same = m.same_weights(reference, tmp_path / "ckpt" / "last.pt", "uninterrupted", "interrupted", "CPU")
    assert v.status == "fail" and same.status == "fail" and v.numbers["identical"] is False
    assert v.text.endswith(f"; but {same.text}") and "bit for bit" not in v.text


def test_a_restart_without_a_recorded_kill_is_no_recovery(tmp_path):
    """No kill recorded (so no steps lost and no recovery time) but the ranks started again: nothing of the lesson's
    fault to judge (this case was once made up with steps lost unknown and a recovery time, which no run can have)."""
    v = m.recovery_verdict(outcome(tmp_path, killed_at_s=None), save(tmp_path / "reference.pt", W, 40), "x")
    assert v.status == "fail" and v.text.startswith("no kill was recorded") and v.where == "CPU"
    assert v.numbers["steps_lost"] is None and v.numbers["recovery_s"] is None and v.numbers["resumed_from"] == 10
    assert v.text == (
        "no kill was recorded, yet the ranks were started again (the agents' logs say why): this run shows no "
        "recovery from the lab's fault"
    )
    # neither a kill nor a restart (review RR17-7): the missing kill is said, not "never started again after the kill"
    none = m.recovery_verdict(outcome(tmp_path, killed_at_s=None, resumed=None), save(tmp_path / "r2.pt", W, 40), "x")
    assert none.status == "fail" and none.text == (
        "no kill was recorded, and the ranks were not started again: this run shows no recovery from the lab's fault"
    )


def test_recovery_that_failed_or_never_restarted(tmp_path):
    reference = save(tmp_path / "reference.pt", W, 40)
    failed = m.recovery_verdict(outcome(tmp_path, ok=False), reference, "x")
    assert failed.status == "fail" and failed.text == "the run did not come back: RuntimeError: boom"
    assert failed.where == "CPU"  # the run's own label, as every other recovery verdict
    assert "identical" not in failed.numbers
    never = m.recovery_verdict(outcome(tmp_path, resumed=None), reference, "x")
    assert never.status == "fail" and "never started again" in never.text


def test_losing_the_stores_node(tmp_path):
    (tmp_path / "agent0.log").write_text(AGENT0)
    o = outcome(tmp_path, ok=False, killed_at_s=5.7)
    v = m.store_loss_verdict(o)
    assert v.status == "info" and v.numbers == {
        "ok": False,
        "agent_returncodes": [1, 0],
        "store_error": True,
        "restarted": True,
    }
    assert "(RendezvousConnectionError: The connection to the C10d store has failed.)" in v.text
    assert "lived in the killed node's agent" in v.text
    # nothing killed (on one H200 the store's agent could not bind its port): a failed run, not the lesson's loss
    never = m.store_loss_verdict(outcome(tmp_path, ok=False, killed_at_s=None))
    assert never.status == "fail" and "before the store's node was killed (agents' exit codes [1, 0]; " in never.text
    assert "killed node's agent" not in never.text
    (tmp_path / "agent0.log").write_text("nothing\n")
    killed: dict[str, Any] = {"killed_at_s": 5.7}
    assert m.store_loss_verdict(outcome(tmp_path, ok=False, resumed=None, **killed)).numbers["store_error"] is False
    assert "no RendezvousConnectionError" in m.store_loss_verdict(outcome(tmp_path, ok=False, **killed)).text
    survived = m.store_loss_verdict(outcome(tmp_path, **killed))
    assert survived.status == "info" and survived.numbers["ok"] is True and "survived the loss" in survived.text
    finished_first = m.store_loss_verdict(
        outcome(tmp_path, killed_at_s=None)
    )  # review RR10-8: done before the kill is no survival
    assert finished_first.status == "fail" and "before the store's node was killed" in finished_first.text


@pytest.mark.parametrize(
    "prediction, lost, status",
    [
        (3, 3, "right"),
        (3.6, 3, "right"),
        (3.7, 3, "close"),
        (6, 3, "close"),
        (7, 3, "off"),
        (1.4, 3, "off"),
        (None, 3, "no answer"),
        (0, 3, "off"),
        (-1, 3, "off"),
        (2, 3, "right"),  # the question as asked (a kill right after step 12), though the kill landed after 13
    ],
)
def test_the_steps_lost_prediction(tmp_path, prediction, lost, status):
    v = m.grade_steps_lost(prediction, outcome(tmp_path), kill_after=12)
    assert v.status == status and v.numbers["measured"] == lost and v.numbers["prediction"] == prediction
    assert "steps 11–13 were done again" in v.text and "k = 13, N = 10" in v.text
    assert ("asked" in v.numbers) is (prediction == 2)


@pytest.mark.parametrize(
    "prediction, last, kill_after, status, asked",
    [
        (0, 20, 20, "right", False),  # asked after a checkpoint, landed there: 0
        (None, 20, 20, "no answer", False),
        (2, 20, 20, "off", False),
        (0, 20, 19, "right", False),  # asked after 19, landed after 20, right after a checkpoint: 0 lost
        (9, 20, 19, "right", True),  # 19 − 10·⌊19/10⌋ = 9: the question as asked
        (8, 20, 19, "off", False),  # neither
        (9, 20, 20, "off", False),  # the kill landed where it was asked: only the measured 0 is right
        (9, 19, 19, "off", False),  # not late (a made-up table: resumed at 19, lost 0; the late rule is not taken)
    ],
)
def test_the_steps_lost_prediction_when_nothing_was_lost(tmp_path, prediction, last, kill_after, status, asked):
    v = m.grade_steps_lost(prediction, outcome(tmp_path, resumed=last, last=last), kill_after=kill_after)
    assert v.status == status and v.numbers["measured"] == 0 and ("asked" in v.numbers) is asked
    assert "no step was done again" in v.text and "were done again" not in v.text


def test_the_steps_lost_prediction_needs_a_measurement(tmp_path):
    with pytest.raises(ValueError, match="no measured steps lost"):
        m.grade_steps_lost(3, outcome(tmp_path, resumed=None), kill_after=12)


def test_the_recovery_tables(tmp_path):
    o = outcome(tmp_path)
    frame = m.timeline_frame(o)
    assert frame.at[0, "t_s"] == 1.23 and frame.at[0, "measured on"] == "CPU"
    rows = m.recovery_rows({"rank": o, "node": outcome(tmp_path, ok=False)})
    assert rows[0] == {
        "fault": "rank",
        "killed after step": 13,
        "resumed from step": 10,
        "steps lost": 3,
        "ranks back (s)": 1.5,
        "first new step (s)": 2.5,
        "ended": "completed",
        "measured on": "CPU",
    }
    assert rows[1]["ended"] == "failed"
    assert list(m.published_frame()["GB/s per direction"]) == [450.0, 50.0, 400.0]


# --------------------------------------------------------------------------- resubmission
def test_started_at_reads_rank_0s_line(tmp_path):
    (tmp_path / "a.log").write_text("rank 1 of 2: starting at step 7\n")
    (tmp_path / "b.log").write_text("junk\nrank 0 of 2: starting at step 20 (restarts: 0)\n")
    assert m.started_at(tmp_path) == 20
    assert m.started_at(tmp_path / "none") is None


def job(tmp_path, state="COMPLETED", exit_code=0, returncode=0, start=10, env=True):
    (tmp_path / "rank0.log").write_text(f"rank 0 of 2: starting at step {start}\n")
    result = types.SimpleNamespace(returncode=returncode, env=object() if env else None, label="2 nodes")
    return types.SimpleNamespace(state=state, exit_code=exit_code, result=result, run_dir=tmp_path)


@pytest.mark.parametrize(
    "kwargs, status",
    [
        ({}, "pass"),
        ({"start": 0}, "fail"),
        ({"state": "FAILED"}, "fail"),
        ({"exit_code": 1}, "fail"),
        ({"returncode": 1}, "fail"),
    ],
)
def test_resubmission_through_slurm(tmp_path, kwargs, status):
    reference = save(tmp_path / "reference.pt", W, 40)
    resumed = save(tmp_path / "resumed.pt", W, 40)
    lost = outcome(tmp_path, last=13)
    v = m.resubmission_verdict(job(tmp_path, **kwargs), reference, resumed, lost, "Slurm")
    assert v.status == status and v.numbers["lost_job_checkpoint"] == 10 and v.numbers["lost_job_last_step"] == 13
    assert v.where == "2 nodes" and v.numbers["state"] == kwargs.get("state", "COMPLETED")


@pytest.mark.parametrize(
    "last, start, status, checkpoint",
    [
        (20, 20, "pass", 20),  # the checkpoint of the last printed step was written
        (20, 10, "pass", 10),  # killed between step 20's line and its checkpoint
        (20, 0, "fail", 20),
        (21, 20, "pass", 20),
        (21, 10, "fail", 20),  # step 20's checkpoint was written before step 21 printed
        (10, 0, "pass", 0),
    ],
)
def test_resubmission_at_a_checkpoint_step(tmp_path, last, start, status, checkpoint):
    reference = save(tmp_path / "reference.pt", W, 40)
    (tmp_path / "rank0.log").write_text(f"rank 0 of 2: starting at step {start}\n")
    run = types.SimpleNamespace(ok=True, run_dir=tmp_path, env=None, label="unknown")
    lost = outcome(tmp_path, last=last)
    v = m.resubmission_verdict(run, reference, save(tmp_path / "r.pt", W, 40), lost, "the launcher")
    assert v.status == status and v.numbers["started_at"] == start and v.numbers["lost_job_checkpoint"] == checkpoint


def test_resubmission_through_the_launcher(tmp_path):
    reference = save(tmp_path / "reference.pt", W, 40)
    (tmp_path / "rank0.log").write_text("rank 0 of 2: starting at step 10\n")
    run = types.SimpleNamespace(ok=True, run_dir=tmp_path, env=None, label="unknown")
    lost = outcome(tmp_path, last=19)
    v = m.resubmission_verdict(run, reference, save(tmp_path / "r.pt", W, 40), lost, "the launcher")
    assert v.status == "pass" and v.numbers["state"] is None and v.where == "the launcher"
    assert v.text.endswith("(that job died after step 19); its final weights are the uninterrupted run's, bit for bit")
    other = m.resubmission_verdict(
        run, reference, save(tmp_path / "o.pt", {"a": W["a"] * 2, "b": W["b"]}, 40), lost, "x"
    )
    assert other.status == "fail" and other.numbers["identical"] is False
    run.ok = False
    assert m.resubmission_verdict(run, reference, reference, lost, "x").status == "fail"
    no_kill = outcome(tmp_path, killed_at_s=None)
    run.ok = True
    assert m.resubmission_verdict(run, reference, reference, no_kill, "x").numbers["lost_job_checkpoint"] is None


# --------------------------------------------------------------------------- what a run is doing now (issue 28 item 5)
def _rank_files(folder, rank, born, ready=None):
    import os

    pid = folder / f"rank{rank}.pid"
    pid.write_text("1")
    os.utime(pid, (born, born))
    if ready is not None:
        (folder / f"rank{rank}.ready").touch()
        os.utime(folder / f"rank{rank}.ready", (ready, ready))


def test_rank_states_from_the_runtimes_files(tmp_path):
    from nvtutorial.chapters.ch09_multinode import lab

    assert lab.rank_states(tmp_path, 2, 100.0) == ["none", "none"]  # no process yet
    _rank_files(tmp_path, 0, born=99.0, ready=99.5)  # an earlier attempt's process: not this one's
    _rank_files(tmp_path, 1, born=100.0)  # started now (the attempt's first second counts), importing torch
    assert lab.rank_states(tmp_path, 2, 100.0) == ["none", "starting"]
    _rank_files(tmp_path, 0, born=101.0, ready=100.9)  # the ready file is the earlier process's
    _rank_files(tmp_path, 1, born=101.0, ready=101.0)
    assert lab.rank_states(tmp_path, 2, 100.0) == ["starting", "up"]
    assert lab.rank_states(tmp_path, 2, 101.5) == ["none", "none"]


JOINED = "joined the process group (nccl) in 0.41 s"
BUILT = "built the DDP model in 2.13 s"


@pytest.mark.parametrize(
    "states, after, step, phase, says",
    [
        (["none", "none"], None, None, None, "the torchrun agents meet at the rendezvous; no rank has started yet"),
        (["none", "none"], "rank 1 was killed: ...", None, None, "rank 1 was killed: ..."),
        (["starting", "none"], None, None, None, "rank 0 is a new process, importing torch"),
        (["starting", "starting"], "x", None, None, "ranks 0, 1 are new processes, importing torch"),
        # review R2 S2: one rank, and what the rank that is up does meanwhile
        (
            ["up", "starting"],
            None,
            None,
            None,
            "rank 1 is a new process, importing torch; rank 0 waits for it in the process group",
        ),
        (
            ["up", "up", "starting", "starting"],
            None,
            None,
            None,
            "ranks 2, 3 are new processes, importing torch; ranks 0, 1 wait for them in the process group",
        ),
        (["up", "none"], None, None, None, "the agents are starting the ranks"),
        (["up", "up"], "x", None, None, "every rank is up: joining the process group (nccl)"),
        # rank 0's own lines name the phase: the DDP model (DDP's constructor imports torch._dynamo), the checkpoint
        (
            ["up", "up"],
            "x",
            None,
            JOINED,
            f"rank 0 {JOINED}: building the DDP model (its constructor imports "
            "torch._dynamo: seconds in a new process)",
        ),
        (
            ["up", "starting"],
            None,
            None,
            JOINED,
            f"rank 0 {JOINED}: building the DDP model (its constructor imports "
            "torch._dynamo: seconds in a new process)",
        ),
        (["up", "up"], None, None, BUILT, f"rank 0 {BUILT}: reading the last checkpoint"),
        (["up", "up"], None, (29, 30), BUILT, "training: rank 0 has done step 29 of 30"),
        (
            ["up", "up"],
            None,
            (30, 30),
            None,
            "trained all 30 steps: the ranks write their results and exit, then the agents",
        ),
    ],
    ids=[
        "agents",
        "after",
        "one-starts",
        "two-start",
        "one-waits",
        "two-wait",
        "agents-start-ranks",
        "all-up",
        "joined",
        "joined-first",
        "built",
        "training",
        "trained",
    ],  # short ids: mutmut selects tests by them
)
def test_what_a_run_is_doing_now(states, after, step, phase, says):
    from nvtutorial.chapters.ch09_multinode import lab

    assert lab.doing(states, "nccl", after, step, phase) == says


def test_a_rank_forked_warm_has_imported_torch_dynamo_already():
    """f093a7f: the warm interpreter preloads torch._dynamo, so the one-node run's ranks skip DDP's import of it."""
    from nvtutorial.chapters.ch09_multinode import lab

    assert lab.doing(["up"], "gloo", phase=JOINED, fresh=False) == f"rank 0 {JOINED}: building the DDP model"
    assert lab.doing(["up"], "gloo", phase=BUILT, fresh=False) == f"rank 0 {BUILT}: reading the last checkpoint"


def test_the_lessons_lines_on_its_start_are_read_as_its_phases(tmp_path):
    """What the lesson's ``say`` prints (rank 0 of N: ...) is what the narration and the timeline read; a step line and
    the attempt's ``starting at step`` line are not a phase."""
    from nvtutorial.chapters.ch09_multinode import lab

    log = tmp_path / "rank0.log"
    assert lab.last_phase(log) is None
    log.write_text(f"rank 0 of 2: {JOINED}\n")
    assert lab.last_phase(log) == JOINED
    log.write_text(log.read_text() + f"rank 0 of 2: {BUILT}\nrank 0 of 2: starting at step 0 (restarts: 0)\n")
    log.write_text(log.read_text() + "step 1/30 loss 0.5\n")
    assert lab.last_phase(log) == BUILT and lab.last_step(log) == (1, 30)
    assert lab.PHASE_LINE.match("rank 1 of 2: built the DDP model in 1 s") is None  # rank 0's lines only


def test_the_last_step_a_rank_logged(tmp_path):
    from nvtutorial.chapters.ch09_multinode import lab

    log = tmp_path / "rank0.log"
    assert lab.last_step(log) is None  # no log yet
    log.write_text(
        "rank 0 of 2: starting at step 8 (TORCHELASTIC_RESTART_COUNT 1: failures its agent restarted after)\n"
    )
    assert lab.last_step(log) is None
    log.write_text(log.read_text() + "step 9/30 loss 0.5\nstep 10/30 loss 0.4\nW something torch said\n")
    assert lab.last_step(log) == (10, 30)
    log.write_text("x" * 8192 + "\nstep 11/30 loss 0.3\n")  # only the tail is read
    assert lab.last_step(log) == (11, 30)


def test_the_lab_speaks_after_each_quiet_stretch_and_not_before(tmp_path, capsys, monkeypatch):
    from nvtutorial.chapters.ch09_multinode import lab

    spec = cast(LaunchSpec, types.SimpleNamespace(nnodes=2, nproc=1, world_size=2, backend="gloo", run_dir=tmp_path))
    elastic = lab._Elastic(spec, [], 3.0, show=True)
    clock = [0.0]
    monkeypatch.setattr(elastic, "now", lambda: clock[0])
    elastic.say("[lab 0.00 s] started")
    clock[0] = lab.SAY_S - 0.01
    elastic.tell()
    assert capsys.readouterr().out == "[lab 0.00 s] started\n"  # spoken less than SAY_S ago: quiet
    clock[0] = lab.SAY_S
    elastic.tell()
    assert "now: the torchrun agents meet at the rendezvous" in capsys.readouterr().out
    elastic.tell()  # just said: quiet again
    assert capsys.readouterr().out == ""
    elastic.attempts, elastic.step = [(1.0, 0, 8)], None  # rank 0 said where it starts: it trains
    clock[0] += lab.SAY_S
    elastic.tell()
    assert "now: training from step 8" in capsys.readouterr().out
    elastic.step = (9, 30)
    clock[0] += lab.SAY_S
    elastic.tell()
    assert "now: training: rank 0 has done step 9 of 30" in capsys.readouterr().out
    elastic.kill_times, elastic.after = [2.0], "rank 1 was killed: its agent restarts"  # the next attempt starts
    clock[0] += lab.SAY_S
    elastic.tell()
    assert "now: rank 1 was killed: its agent restarts" in capsys.readouterr().out
    clock[0] += lab.SAY_S  # the same state: said once, then only how long it has held (review R6-5)
    elastic.tell()
    assert capsys.readouterr().out == f"[lab {clock[0]:6.2f} s] still waiting (2 s)\n"
    elastic.started_wall = time.mktime((2026, 12, 7, 11, 8, 0, 0, 0, -1))  # the kill at 11:08:02.0
    (tmp_path / "rank0.log").write_text(
        "[rank0]:[E1207 11:08:01.443552792 ProcessGroupNCCL.cpp:612] [Rank 0] Collective raised\n"
        "[rank0]:[E1207 11:08:02.140312237 ProcessGroupNCCL.cpp:1628] [PG ID 0] preparing to dump debug info\n"
    )
    clock[0] += 0.05
    elastic.read_rank0()  # read 0.05 s after the last "still waiting": the lab's clock, not the C++ stamps (RR12-1)
    read = clock[0] - 2.0
    clock[0] += lab.SAY_S  # rank 0's newest error line, said once, instead of "still waiting", when the lab read it
    elastic.tell()
    said = f"[rank0, read {read:.2f} s after the kill] [PG ID 0] preparing to dump debug info\n"
    assert capsys.readouterr().out == said
    with (tmp_path / "rank0.log").open("a") as log:  # review RR9-10: the NCCL error's own words beat later lines
        log.write(
            "[rank0]:[E1207 11:08:03.0 ProcessGroupNCCL.cpp:2] [PG ID 0] Process group watchdog thread terminated "
            "with exception: NCCL error: x\n"
            "[rank0]:[E1207 11:08:03.1 ProcessGroupNCCL.cpp:3] [Rank 0] raised the following async exception: NCCL "
            "error: remote process exited\n"
            "[rank0]:[E1207 11:08:03.2 ProcessGroupNCCL.cpp:4] [PG ID 0] First PG on this rank to signal dumping.\n"
        )
    elastic.read_rank0()
    read = clock[0] - 2.0
    clock[0] += lab.SAY_S
    elastic.tell()
    assert capsys.readouterr().out == (
        f"[rank0, read {read:.2f} s after the kill] [Rank 0] raised the following async exception: NCCL error: remote "
        "process exited\n"
    )
    clock[0] += lab.SAY_S
    elastic.tell()
    assert capsys.readouterr().out == f"[lab {clock[0]:6.2f} s] still waiting (6 s)\n"  # 6.0 s: two errors said
    quiet = lab._Elastic(spec, [], 3.0, show=False)
    quiet.tell()
    quiet.say("x")
    assert capsys.readouterr().out == ""


def test_rank_0s_error_line_is_timed_by_when_the_lab_read_it(tmp_path):
    """Review RR12-1: the line's C++ stamp is not read (its fraction is another clock's); the lab's own clock at the
    read, against the last kill at or before it, else the lab's time."""
    from nvtutorial.chapters.ch09_multinode import lab

    spec = cast(LaunchSpec, types.SimpleNamespace(nnodes=2, nproc=1, world_size=2, backend="gloo", run_dir=tmp_path))
    elastic = lab._Elastic(spec, [], 3.0, show=False)
    assert elastic.read_at(1.5) == "[rank0   1.50 s]"  # no kill yet
    elastic.kill_times = [2.0, 10.0]
    assert elastic.read_at(1.99) == "[rank0   1.99 s]"  # before the first kill
    assert elastic.read_at(2.05) == "[rank0, read 0.05 s after the kill]"
    assert elastic.read_at(9.99) == "[rank0, read 7.99 s after the kill]"  # still the first kill's
    assert elastic.read_at(10.0) == "[rank0, read 0.00 s after the kill]"  # the second's
    (tmp_path / "rank0.log").write_text(
        "[rank0]:[E1207 23:03:22.525510958 ProcessGroupNCCL.cpp:612] [Rank 0] Collective raised the following async "
        "exception: NCCL error\n"
    )
    elastic.read_rank0()
    assert elastic.error is not None and elastic.error[1].startswith("[Rank 0] Collective raised")
    assert elastic.error[0] == pytest.approx(elastic.now(), abs=1.0)  # the lab's clock at the read


def test_the_end_line_labels_the_agents_the_lab_killed_or_ended(tmp_path):
    """Review RR12-4: the lab writes -9 for an agent it killed without reading its code: it says so."""
    from nvtutorial.chapters.ch09_multinode import lab

    spec = cast(LaunchSpec, types.SimpleNamespace(nnodes=2, nproc=1, world_size=2, backend="gloo", run_dir=tmp_path))
    elastic = lab._Elastic(spec, [], 3.0, show=False)
    codes = {"agent0": 0, "agent1": -9, "agent1-replacement": 0}
    assert elastic.exits(codes) == "every agent has exited: agent0 0, agent1 -9, agent1-replacement 0"
    elastic.lost = {"agent1"}
    killed = "every agent has exited: agent0 0, agent1 -9 (killed by the lab), agent1-replacement 0"
    assert elastic.exits(codes) == killed
    elastic.lost, elastic.ended_by_lab = {"agent0"}, {"agent1"}
    assert elastic.exits({"agent0": -9, "agent1": -15}) == (
        "every agent has exited: agent0 -9 (killed by the lab), agent1 -15 (ended by the lab)"
    )


def test_the_lab_ends_agents_stranded_by_one_that_failed_unkilled(tmp_path, capsys, monkeypatch):
    """One H200 (2026-12-07): node 0's agent failed to bind the rendezvous port and node 1's waited 115 s for it. An
    agent the lab did not kill that failed, with none to replace it, leaves the others STRANDED_S to end, then ends."""
    from nvtutorial.chapters.ch09_multinode import lab

    class Agent:
        def __init__(self, code):
            self.returncode = code

        def poll(self):
            return self.returncode

    spec = cast(LaunchSpec, types.SimpleNamespace(nnodes=2, nproc=1, world_size=2, backend="gloo", run_dir=tmp_path))
    elastic = lab._Elastic(spec, [], 3.0, show=True)
    clock = [0.0]
    monkeypatch.setattr(elastic, "now", lambda: clock[0])
    elastic.agents = cast(dict[str, subprocess.Popen], {"agent0": Agent(None), "agent1": Agent(None)})  # fakes
    log = tmp_path / "agent1.log"
    elastic.agent_logs = {"agent0": tmp_path / "agent0.log", "agent1": log}
    assert not elastic.stranded()  # both alive
    elastic.agents["agent0"].returncode = 0
    assert not elastic.stranded()  # one finished well: the other is finishing too
    elastic.agents["agent0"].returncode = 1
    assert not elastic.stranded() and elastic.failed_at == 0.0  # failed: the other gets its time
    clock[0] = lab.STRANDED_S - 0.01
    assert not elastic.stranded()
    elastic.replace_at = 99.0  # a replacement is due: it will join
    clock[0] = lab.STRANDED_S
    assert not elastic.stranded() and elastic.failed_at is None
    elastic.replace_at, elastic.lost = None, {"agent0"}  # the lab killed it: not stranded
    assert not elastic.stranded()
    elastic.lost = set()
    assert not elastic.stranded()  # seen failed again now: the count starts again
    clock[0] += lab.STRANDED_S
    assert elastic.stranded() and elastic.stranded_by == "agent0" and elastic.ended_by_lab == {"agent1"}
    said = "agent0 exited with code 1 (not killed by the lab, not replaced): ending the other agents, "
    assert capsys.readouterr().out.endswith(said + "whose ranks cannot finish without its ranks\n")  # no log to read
    waits = {  # review RR11-3: what the other agent's last line shows it waits at (torch 2.11-2.15's words)
        "[default] Local worker group finished (WorkerState.SUCCEEDED). Waiting 300 seconds for other agents to "
        "finish": "which wait for it at torchrun's exit barrier (up to 300 s)",
        "The node 'x' attempts to join the next round of the rendezvous 'none'.": "which wait for it at the rendezvous",
        "[default] Starting worker group": "whose ranks cannot finish without its ranks",
    }
    for line, words in waits.items():
        log.write_text("I1207 11:08:01.0 1 api.py:1] earlier\n" + line + "\n")
        assert elastic.waiting_at().startswith(words)
    elastic.agents["agent1"].returncode = -15
    assert not elastic.stranded()  # nobody left to end


def test_the_lab_reads_rank_0s_start_per_attempt_and_says_it(tmp_path, capsys, monkeypatch):
    """Review R2 S2: rank 0's lines on its start (the lesson's ``say``) belong to the attempt they precede; the lab says
    the phase (the DDP model being built, the checkpoint read), and the timeline splits each start by them."""
    from nvtutorial.chapters.ch09_multinode import lab

    spec = cast(LaunchSpec, types.SimpleNamespace(nnodes=2, nproc=1, world_size=2, backend="gloo", run_dir=tmp_path))
    elastic = lab._Elastic(spec, [], 3.0, show=True)
    clock = [0.0]
    monkeypatch.setattr(elastic, "now", lambda: clock[0])
    log = tmp_path / "rank0.log"

    def said(*lines: str) -> str:
        with log.open("a") as fh:
            fh.write("".join(line + "\n" for line in lines))
        clock[0] += lab.SAY_S
        elastic.read_rank0()
        elastic.tell()
        return capsys.readouterr().out

    joined, built = "joined the process group (gloo) in 0.01 s", "built the DDP model in 1.90 s"
    assert f"now: rank 0 {joined}: building the DDP model (its constructor imports torch._dynamo" in said(
        f"rank 0 of 2: {joined}"
    )
    assert f"now: rank 0 {built}: reading the last checkpoint" in said(f"rank 0 of 2: {built}")
    assert "] rank 0 of 2: starting at step 0" in said("rank 0 of 2: starting at step 0 (restarts: 0)", "step 1/30 l 1")
    elastic.kill_times, elastic.after = [clock[0]], "rank 1 was killed"  # attempt 1 begins: no phase of its own yet
    assert "now: rank 1 was killed" in said()
    again = "joined the process group (gloo) in 0.02 s"
    assert f"now: rank 0 {again}: building the DDP model" in said(f"rank 0 of 2: {again}")
    said(f"rank 0 of 2: {built}", "rank 0 of 2: starting at step 8 (restarts: 1)")
    assert [(a, text) for _, a, text in elastic.phases] == [(0, joined), (0, built), (1, again), (1, built)]
    assert [(a, s) for _, a, s in elastic.attempts] == [(0, 0), (1, 8)]
    faults = (lab.Fault("rank", 1), lab.Fault("rank", 9))
    outcome = lab.ElasticOutcome(
        None,  # type: ignore[arg-type]
        None,
        8,
        elastic.steps,
        elastic.attempts,
        [],
        faults=faults,
        kill_times=(3.5, 10.0),
        phases=elastic.phases,
    )
    rows = [r["what"] for r in outcome.part(0).timeline()]
    assert rows.index(f"attempt 1: rank 0 {again}") < rows.index(f"attempt 1: rank 0 {built}")
    assert rows.index(f"attempt 1: rank 0 {built}") < rows.index("attempt 1 started at step 8 (the checkpoint read)")
    assert [a for _, a, _ in outcome.part(0).phases] == [0, 0, 1, 1]
    assert [(a, text) for _, a, text in outcome.part(1).phases] == [(0, again), (0, built)]  # seen from fault 1


def test_telling_speaks_every_say_s_while_its_block_runs(capsys, monkeypatch):
    import time

    from nvtutorial.chapters.ch09_multinode import lab, lab_narration

    monkeypatch.setattr(lab_narration, "SAY_S", 0.1)
    said = iter(["waiting", "waiting", "waiting", "other"])
    with lab.telling(lambda: next(said, "other"), "check"):
        time.sleep(0.55)
    lines = capsys.readouterr().out.splitlines()
    assert 3 <= len(lines) <= 6 and all(line.startswith("[check ") for line in lines)
    assert lines[0].endswith("] now: waiting") and lines[3].endswith("] now: other")  # a change: said in full
    assert all(" s] still waiting (0 s)" in line for line in lines[1:3] + lines[4:])  # review R6-5
    time.sleep(0.25)
    assert capsys.readouterr().out == ""  # the thread ended with the block


def test_a_slurm_job_says_what_it_does_while_it_runs(tmp_path, capsys, monkeypatch):
    from nvtutorial.launch import slurm

    assert slurm.latest_line(tmp_path).startswith("no output yet")
    (tmp_path / "node0.log").write_text("rank 0 of 2: starting at step 8\nstep 9/30 loss 0.5\n\n")
    assert slurm.latest_line(tmp_path) == "node0.log: step 9/30 loss 0.5"
    states = iter(["PENDING", "PENDING", "RUNNING", "RUNNING", "RUNNING", "COMPLETED"])
    monkeypatch.setattr(slurm, "job_state", lambda job_id: {"JobState": next(states), "ExitCode": "0:0"})
    info = slurm.JobInfo(7, "PENDING", None, None, tmp_path / "job.sbatch", tmp_path)
    info = slurm.follow(info, poll_s=0.0, progress=True, say_s=0.0)
    said = capsys.readouterr().out.splitlines()
    assert [line.split(" (")[0] for line in said] == ["job 7: PENDING"] * 2 + ["job 7: RUNNING"] * 3 + [
        "job 7: COMPLETED"
    ]
    assert said[1].endswith("): waiting for its nodes") and said[3].endswith("): node0.log: step 9/30 loss 0.5")
    assert info.state == "COMPLETED" and info.exit_code == 0


@pytest.mark.parametrize(
    "keep_alive_s, interval, attempts",
    [(15, 5, 3), (6, 2, 3), (4, 1, 4), (3, 1, 3), (2, 1, 3), (1, 1, 3), (0.4, 1, 3), (5, 2, 3)],
)
def test_a_silent_node_counts_as_gone_after_keep_alive_s(keep_alive_s, interval, attempts):
    """Review R6-2: never fewer than 3 attempts (2 drops live agents), so at least 3 s."""
    from nvtutorial.chapters.ch09_multinode import lab

    conf = lab.keep_alive_conf(keep_alive_s)
    assert conf == f",keep_alive_interval={interval},keep_alive_max_attempt={attempts}"
    if keep_alive_s != 5:  # 5 s: 2 s × 3 = 6 s, the nearest whole heartbeats with 3 attempts at least
        assert interval * attempts == max(3, round(keep_alive_s))  # the seconds asked for, in whole seconds
    assert all(int(lab.keep_alive_conf(s / 2).rsplit("=", 1)[1]) >= 3 for s in range(1, 61))


def test_the_elastic_lab_says_it_waits_for_the_warm_interpreter_before_its_clock_starts(monkeypatch, capsys):
    """The agents are forked from the warm interpreter: still importing torch (its first start in a kernel), the lab
    says so after 1 s instead of a silent wait that its timeline would count as the agents' start-up."""
    from nvtutorial.chapters.ch09_multinode import lab
    from nvtutorial.launch import warm

    class Interpreter:
        def __init__(self, ready_after: float) -> None:
            self.hello, self.dead, self.ready_at = None, None, time.perf_counter() + ready_after

        def wait_ready(self, timeout: float = 120.0) -> dict:
            if time.perf_counter() + timeout < self.ready_at:
                time.sleep(timeout)
                raise warm.WarmUnavailable(f"not ready within {timeout:g} s")
            time.sleep(max(0.0, self.ready_at - time.perf_counter()))
            self.hello = {"preload_s": 3.0}
            return self.hello

    for ready_after, show, said in ((1.3, True, True), (1.3, False, False), (0.2, True, False)):
        interpreter = Interpreter(ready_after)
        monkeypatch.setattr(warm, "get", lambda interpreter=interpreter: interpreter)
        t0 = time.perf_counter()
        lab._warm_first(show)
        assert interpreter.hello is not None and time.perf_counter() - t0 >= ready_after - 0.05
        out = capsys.readouterr().out
        assert out == (
            "[nvtutorial] waiting for the warm interpreter to import torch (once per kernel)\n" if said else ""
        )
    lab._warm_first(True)  # ready already: nothing to wait for, nothing said
    assert capsys.readouterr().out == ""


def test_the_local_slurm_says_what_it_does_while_it_starts_and_stops(tmp_path, capsys, monkeypatch):
    """Starting the daemons takes seconds: with progress it is said every SAY_S, without it nothing; a script that
    hangs is killed after LOCAL_LIMIT_S and says so."""
    from nvtutorial.launch import slurm

    script = tmp_path / "slurm-local.sh"
    # the hang is a child of the script: the kill reaches the script's whole process group, or the child would hold
    # the pipes open for its 30 s
    script.write_text('sleep "$2"; echo "export SLURM_CONF=/x/$1"; echo said >&2\n')
    monkeypatch.setattr(slurm, "LOCAL_SCRIPT", script)
    monkeypatch.setattr(slurm, "SAY_S", 0.1)
    assert slurm._local_script("start", "0.45", "starting the daemons") == (0, "export SLURM_CONF=/x/start\n", "said\n")
    lines = capsys.readouterr().out.splitlines()
    assert 3 <= len(lines) <= 5 and all(
        ln.startswith("[slurm ") and ln.endswith(" s] starting the daemons") for ln in lines
    )
    assert slurm._local_script("stop", "0.25", None)[0] == 0 and capsys.readouterr().out == ""
    monkeypatch.setattr(slurm, "LOCAL_LIMIT_S", 0.2)
    t0 = time.monotonic()
    code, out, err = slurm._local_script("start", "30", None)
    assert code == -9 and out == "" and err.endswith("slurm-local.sh start: killed after 0.2 s")
    assert time.monotonic() - t0 < 5, "the script's child kept running after the kill"


# --------------------------------------------------------------------------- notebook 09's plan (issue 28, review N4)
ONE_H200 = ("NVIDIA H200",)


def _notebook_09(monkeypatch, gpus: int, ids=("1970cd6c", "f74c059a"), **values):
    from nvtutorial import course
    from tests.helpers import notebook_cells

    machine = course.Machine(ONE_H200 * gpus, 16, "2.28.9" if gpus else None)
    monkeypatch.setattr(course.Machine, "here", classmethod(lambda cls: machine))
    return notebook_cells.run("09_beyond_one_machine", list(ids), **values)


@pytest.mark.parametrize(
    "gpus, profile, pair, nodes",
    [
        (0, "auto", ("ci", "gloo", 0), ("ci", "gloo", 0)),
        (1, "auto", ("ci", "gloo", 0), ("full", "nccl", 1)),  # two emulated nodes share the GPU at the lesson's sizes
        (1, "ci", ("ci", "gloo", 0), ("ci", "nccl", 1)),
        (1, "full", ("ci", "gloo", 0), ("full", "nccl", 1)),
        (2, "auto", ("full", "nccl", 2), ("full", "nccl", 2)),  # a GPU for each emulated node
    ],
)
def test_notebook_09s_plan_on_every_machine(monkeypatch, gpus, profile, pair, nodes):
    ns = _notebook_09(monkeypatch, gpus, profile=profile)
    plan = ns["PLAN"]
    assert ns["shown"] == [plan]
    assert (ns["PAIR"].profile, ns["PAIR"].backend, ns["PAIR"].gpus) == pair
    for part in (ns["BOUNDARY"], ns["RECOVERY"]):  # review R2 S3: real processes and rendezvous, never "simulated"
        assert (part.profile, part.backend, part.gpus) == nodes and part.need == "two nodes" and not part.simulated
        assert part.where.startswith(
            {
                0: "2 emulated nodes, gloo on the CPU",
                1: "2 emulated nodes sharing 1×",
                2: "2 emulated nodes, a GPU each",
            }[gpus]
        )
    assert (ns["STORE"].profile, ns["STORE"].backend, ns["STORE"].gpus) == ("ci", "gloo", 0)  # the CPU, always
    assert (
        ns["P"] is ns["SIZES"][pair[0]] and ns["P_NODES"] is ns["SIZES"][nodes[0]] and ns["P_CPU"] is ns["SIZES"]["ci"]
    )
    assert ns["EVERY"] == ns["SIZES"][nodes[0]]["train"]["every"]
    if gpus:  # a GPU machine is never told it needs a GPU, and hears why a part runs on the CPU
        assert "needs a GPU" not in str(plan) and "no GPU" not in str(plan)
        if gpus == 1:  # section 2 on the CPU by its cause: its one-node run, not two ranks on one GPU as such
            asked = " (profile='full' asked for the lesson sizes: small sizes here)" if profile == "full" else ""
            assert ns["PAIR"].why == "its one-node run needs 2 GPUs: NCCL refuses 2 ranks of one node on one GPU; " + (
                "this machine has 1" + asked
            )
            assert "NCCL_HOSTID" in ns["BOUNDARY"].why and plan.to_dict()["parts"][0]["why"] == ns["PAIR"].why
    if gpus != 1:  # elsewhere the plan's own reason stands
        assert ns["PAIR"].why == ("the lesson, as taught" if gpus else "no GPU visible to a CUDA build of torch")


class _Run(types.SimpleNamespace):
    """A finished run as the notebook's cells read it (a stand-in for RunResult)."""


@pytest.mark.parametrize(
    "gpus, launches", [(0, []), (1, [(1, 2, False)]), (2, [(1, 2, False), (1, 2, True), (2, 1, False), (2, 1, True)])]
)
def test_the_node_boundary_runs_where_the_plan_puts_it(monkeypatch, capsys, gpus, launches):
    """On one GPU: one NCCL run of the two emulated nodes sharing it, at the lesson's sizes (the run without the
    all-reduce is left out there); on two: both placements, with and without it; on the CPU: none, and the reason is
    the plan's (review N4: the cause, never "No GPU" on a machine that has one)."""
    from nvtutorial.chapters.ch09_multinode import lab, report
    from tests.helpers import notebook_cells

    ns = _notebook_09(monkeypatch, gpus)
    seen = []

    def run_lesson(args, *, nproc=1, nnodes=1, backend="auto", env=None, timeout=0):
        seen.append((nproc, nnodes, "--no-sync" in args, backend, env, args[: args.index("--ckpt-dir")], timeout))
        return _Run(label="x")

    monkeypatch.setattr(lab, "run_lesson", run_lesson)
    left_out = []
    monkeypatch.setattr(report, "boundary_rows", lambda runs, not_run="not run": left_out.append(not_run) or [])
    monkeypatch.setattr(report, "transport_verdict", lambda run, expect_nodes: ("transport", run))
    monkeypatch.setattr(report, "boundary_verdict", lambda within, across: ("boundary", within, across))
    ns["two_nodes"] = _Run(label="two")
    exec(notebook_cells.cells("09_beyond_one_machine")["136d564b"].source, ns)  # noqa: S102
    sizes = lab.lesson_args(ns["SIZES"]["full" if gpus else "ci"]["train"], "x")[:-2]
    assert [s[:3] for s in seen] == launches
    assert all(s[3] == "nccl" and s[4]["NCCL_DEBUG"] == "INFO" and s[5] == sizes for s in seen)
    assert list(ns["boundary"]) == ([] if not gpus else [ns["ACROSS"]] + ([ns["WITHIN"]] if gpus == 2 else []))
    said = capsys.readouterr().out
    if gpus == 0:
        assert said.startswith("Not on GPUs here (no GPU visible to a CUDA build of torch)")
        assert ns["shown"][-1] == ("transport", ns["two_nodes"])
    else:
        assert "GPU" not in said and (ns["boundary"][ns["ACROSS"]][1] is None) is (gpus == 1)  # no no-sync on 1
        assert ("both on GPU 0" in ns["ACROSS"]) is (gpus == 1)
        assert left_out == ["not run (both nodes share GPU 0)"]  # review M14: no "None" cells, the reason instead


@pytest.mark.parametrize("gpus, reference", [(0, "two_nodes"), (1, "boundary"), (2, "two_nodes")])
def test_the_recovery_lab_runs_on_the_nodes_part_against_an_uninterrupted_twin(monkeypatch, gpus, reference):
    """The lab trains at the recovery part's sizes and backend, and its reference is a run of the same placement,
    backend and sizes: section 2's two-node run where it has them, else the node boundary's run with its all-reduce."""
    from nvtutorial.chapters.ch09_multinode import lab, report
    from tests.helpers import notebook_cells

    ns = _notebook_09(monkeypatch, gpus)
    ns["two_nodes"], ns["ACROSS"] = _Run(label="two"), "across"
    ns["boundary"] = {"across": (_Run(label="across"), None)}
    asked = {}

    class _Ran(Exception):
        pass

    def run_elastic(args, **kw):
        asked.update(kw, args=args)
        raise _Ran

    monkeypatch.setattr(lab, "reference_checkpoint", lambda run: run)
    monkeypatch.setattr(lab, "run_elastic", run_elastic)
    monkeypatch.setattr(report, "timeline_frame", lambda lost: None)
    with pytest.raises(_Ran):
        exec(notebook_cells.cells("09_beyond_one_machine")["1b2b70bf"].source, ns)  # noqa: S102
    want = ns["two_nodes"] if reference == "two_nodes" else ns["boundary"]["across"][0]
    assert ns["reference"] is want and ns["reference_ckpt"] is want
    p = ns["P_NODES"]
    assert asked["backend"] == ns["RECOVERY"].backend == ("nccl" if gpus else "gloo")
    assert (asked["nproc"], asked["nnodes"], asked["every"]) == (1, 2, p["train"]["every"])
    assert [(f.kind, f.after_step, f.target) for f in asked["fault"]] == [
        ("rank", p["kill_after"], 1),
        ("node", p["node_kill_after"], 1),
    ]
    assert asked["args"][:-2] == lab.lesson_args(p["train"], "x")[:-2]


@pytest.mark.parametrize(
    "rank, nproc, nnodes, backend, says",
    [
        (
            1,
            1,
            2,
            "nccl",
            "rank 1 was killed: node 1's agent restarts its worker group and waits at the rendezvous; "
            "the other nodes' ranks either fail in their next all-reduce (raising an NCCL error, or ended by NCCL's "
            "watchdog) or are stopped by their agents once node 1's agent is waiting; then all meet again",
        ),
        (
            3,
            2,
            2,
            "gloo",
            "rank 3 was killed: node 1's agent restarts its worker group and waits at the rendezvous; "
            "the other nodes' ranks either fail in their next all-reduce or are stopped by their agents once node 1's "
            "agent is waiting; then all meet again",
        ),
        (1, 2, 1, "gloo", "rank 1 was killed: the agent stops the other ranks and starts them all again"),
    ],
)
def test_what_the_lab_says_after_a_rank_kill_holds_either_way(rank, nproc, nnodes, backend, says):
    """Review R6-1 (c): no claim that the other agent follows; both ways the survivor can end are said."""
    from nvtutorial.chapters.ch09_multinode import lab_narration

    assert lab_narration.after_rank_kill(rank, nproc, nnodes, backend) == says


def test_steps_logged_after_the_kill_are_apart_in_the_timeline_and_the_grade(tmp_path):
    """Review R6-7: on the H100 step 16's line came 60.1 s after the kill (rank 0 held in the failed all-reduce):
    the timeline says so instead of "steps 1–16 done", and the grade does not say the killed rank took part."""
    from nvtutorial.chapters.ch09_multinode import lab

    steps = [(8.0 + 0.05 * s, 0, s) for s in range(1, 16)] + [(69.01, 0, 16), (75.0, 1, 11)]
    o = lab.ElasticOutcome(None, lab.Fault("rank", 15), 10, steps, [(0.5, 0, 0), (73.8, 1, 10)], [], killed_at_s=8.91)  # type: ignore[arg-type]
    rows = [(round(r["t_s"], 2), r["what"]) for r in o.timeline()]
    assert (8.75, "attempt 0: steps 1–15 done") in rows and (
        69.01,
        "attempt 0: step 16's line, 60.1 s after the kill",
    ) in rows
    assert (75.0, "attempt 1: steps 11–11 done") in rows and not any("1–16" in what for _, what in rows)
    late = m.grade_steps_lost(5, outcome(tmp_path, killed_at_s=8.91, steps=steps), kill_after=15)
    assert late.status == "right" and "its line came 60.1 s after the kill: rank 0 was held in that step's" in late.text
    assert "had already taken part" not in late.text and "rank 0's last step before the restart was 16" in late.text
    steps[15] = (9.91, 0, 16)  # 1.0 s after the kill: at the rule, the killed rank had joined its all-reduce
    early = m.grade_steps_lost(5, outcome(tmp_path, killed_at_s=8.91, steps=steps), kill_after=15)
    assert "the killed rank had already taken part in step 16's all-reduce" in early.text


def test_the_lab_shortens_nccls_watchdog_sleep_for_its_ranks(monkeypatch):
    """Review RR5-1: a caller's env keeps its own values; the watchdog's wait is 1000 ms unless it says otherwise, and
    a wait the lab cannot state is refused before anything starts."""
    from nvtutorial.chapters.ch09_multinode import lab

    seen = []

    def prepare(*args, env, **kwargs):
        seen.append(env)
        raise RuntimeError("enough")

    monkeypatch.setattr(lab.launch, "prepare", prepare)
    for env in (None, {"LOGLEVEL": "INFO", "TORCH_NCCL_DUMP_ON_TIMEOUT": "1"}):
        with pytest.raises(RuntimeError, match="enough"):
            lab.run_elastic([], env=env)
    assert seen == [
        {"TORCH_NCCL_DUMP_ON_TIMEOUT": "0", "TORCH_NCCL_WAIT_TIMEOUT_DUMP_MILSEC": "1000"},
        {"TORCH_NCCL_DUMP_ON_TIMEOUT": "1", "TORCH_NCCL_WAIT_TIMEOUT_DUMP_MILSEC": "1000", "LOGLEVEL": "INFO"},
    ]
    for bad in ("", "1.5", "-1"):
        with pytest.raises(ValueError, match="a whole number of milliseconds"):
            lab.run_elastic([], env={"TORCH_NCCL_WAIT_TIMEOUT_DUMP_MILSEC": bad})
    assert len(seen) == 2


def test_the_start_event_names_what_each_nccl_setting_does():
    from nvtutorial.chapters.ch09_multinode import lab

    assert lab.watchdog_note(lab.RANK_ENV) == (
        "; ranks with TORCH_NCCL_WAIT_TIMEOUT_DUMP_MILSEC=1000 (after an NCCL error the watchdog sleeps 4 × that, 4 s, "
        "before it ends the rank; torch's default: 60 s) and TORCH_NCCL_DUMP_ON_TIMEOUT=0 (no flight-recorder dump)"
    )
    note = lab.watchdog_note({"TORCH_NCCL_WAIT_TIMEOUT_DUMP_MILSEC": 15000, "TORCH_NCCL_DUMP_ON_TIMEOUT": "1"})
    assert "=15000 (after an NCCL error the watchdog sleeps 4 × that, 60 s," in note and "flight-recorder" not in note


H100_970B = ROOT / "tests" / "fixtures" / "elastic-h100x1-2026-12-08-970b393"  # two runs that differed before a fault


def test_the_970b393_logs_show_runs_that_differed_before_any_fault_and_replays_that_matched():
    """Read through the real reader: the lab's three attempts, its 12 steps done again (11-15, 21-27) each printing the
    killed attempt's loss, and the uninterrupted run differing from the lab's first attempt at step 2."""
    lab, ref = m.logged_losses(H100_970B / "lab-rank0.log"), m.logged_losses(H100_970B / "uninterrupted-rank0.log")
    assert [sorted(a)[0] for a in lab] == [1, 11, 21] and [len(a) for a in lab] == [15, 17, 20]
    assert m.replays_of(lab, 10, 15) == (5, []) and m.replays_of(lab, 20, 27) == (7, [])  # 11-15, 21-27
    assert m.replays_of(lab, 10, 12) == (2, []) and m.replays_of(lab, 30, 35) == (0, [])  # no attempt from 31
    assert m.first_difference(lab[0], ref[0]) == 2 and (lab[0][2], ref[0][2]) == ("0.76714", "0.76715")
    assert m.replays_of([{1: "0.5", 2: "0.6"}, {2: "0.7", 3: "0.8"}], 1, 3) == (1, [2])
    assert m.first_difference({1: "a", 2: "b"}, {1: "a", 2: "b"}) is None
    assert m.logged_losses(H100_970B / "gone.log") == [{}]


def test_a_log_with_bytes_that_are_not_utf8_is_still_read(tmp_path):
    """A rank killed mid-write can leave a torn multi-byte character: the losses around it still count."""
    log = tmp_path / "rank0.log"
    log.write_bytes(b"rank 0 of 2: starting at step 0\nstep 1/40 loss 0.5\n\xe2\x80\nstep 2/40 loss 0.4\n")
    assert m.logged_losses(log) == [{1: "0.5", 2: "0.4"}]


@pytest.mark.parametrize(
    "last, resumed, edit, status, explained",
    [
        (15, 10, None, "info", 5),  # differed at step 2, before the fault after step 15; 11-15 done again, matched
        (12, 10, None, "info", 2),  # two steps done again: enough
        (11, 10, None, "fail", 0),  # one step done again: its loss comes before the restored optimizer state acts
        (1, 0, None, "fail", 0),  # the fault before they differed: the recovery is what changed the weights
        (15, 10, ("step 12/40 loss 0.50624", "step 12/40 loss 0.50625"), "fail", 0),  # a step done again differed
        (15, 5, None, "fail", 0),  # no attempt resumed from step 5
        (19, 10, None, "info", 5),  # 11-15 the steps done again (the attempt logged no more before the next kill)
    ],
)
def test_a_recovery_whose_runs_differed_before_the_fault_is_judged_by_its_replays(
    tmp_path, last, resumed, edit, status, explained
):
    """The 970b393 one-H100 run: final weights 0.0264 apart, but the uninterrupted run already differed at step 2:
    info, not a failed recovery, where at least two steps this fault made the run do again printed the killed
    attempt's losses (review RR16)."""
    reference = save(tmp_path / "reference.pt", W, 40)
    off = {"a": torch.tensor([1.0, 2.0 + 2**-20]), "b": W["b"]}
    text = (H100_970B / "lab-rank0.log").read_text()
    if edit:  # in the attempt that did the step again
        head, _, tail = text.rpartition(edit[0])
        text = head + edit[1] + tail
    (tmp_path / "rank0.log").write_text(text)
    fault = outcome(tmp_path, weights=off, last=last, resumed=resumed)
    v = m.recovery_verdict(fault, reference, "a rank killed", H100_970B / "uninterrupted-rank0.log")
    assert v.status == status
    said = "already differed at step 2, before any fault (loss 0.76714 against 0.76715)"
    assert (said in v.text) is bool(explained)
    if explained:
        assert v.text.endswith(
            f"so the final weights cannot judge the recovery; the {explained} steps this fault made the run do again "
            "printed the killed attempt's losses (to five decimals)"
        )
    assert m.recovery_verdict(fault, reference, "x").status == "fail"  # without the reference's log: as before
    same = outcome(tmp_path, last=last, resumed=resumed)
    assert m.recovery_verdict(same, reference, "x", H100_970B / "uninterrupted-rank0.log").status == (
        "pass" if 0 <= last - resumed < 10 and resumed % 10 == 0 else "fail"
    )


def test_a_recovery_off_its_checkpoint_fails_even_where_the_replays_explain_the_weights(tmp_path):
    reference = save(tmp_path / "reference.pt", W, 40)
    off = {"a": torch.tensor([1.0, 2.0 + 2**-20]), "b": W["b"]}
    (tmp_path / "rank0.log").write_text((H100_970B / "lab-rank0.log").read_text())
    fault = outcome(tmp_path, weights=off, last=20, resumed=10)  # 10 steps lost of every 10: not at it
    v = m.recovery_verdict(fault, reference, "x", H100_970B / "uninterrupted-rank0.log")
    assert v.status == "fail" and "already differed at step 2" in v.text


def test_runs_that_started_differently_are_not_explained_by_the_replays(tmp_path):
    """Review RR16: a reference whose first step printed another loss (another setup, a stale checkpoint), or that
    did not start at step 1, is not a run of the same training: the weights decide, as before."""
    reference = save(tmp_path / "reference.pt", W, 40)
    off = {"a": torch.tensor([1.0, 2.0 + 2**-20]), "b": W["b"]}
    (tmp_path / "rank0.log").write_text((H100_970B / "lab-rank0.log").read_text())
    text = (H100_970B / "uninterrupted-rank0.log").read_text()
    other = tmp_path / "other.log"
    other.write_text(text.replace("step 1/40 loss 0.51133", "step 1/40 loss 0.51134"))
    fault = outcome(tmp_path, weights=off, last=15, resumed=10)
    assert m.recovery_verdict(fault, reference, "x", H100_970B / "uninterrupted-rank0.log").status == "info"
    assert m.recovery_verdict(fault, reference, "x", other).status == "fail"
    late = tmp_path / "late.log"
    late.write_text(text.replace("step 1/40 loss 0.51133\n", ""))  # a reference that logged no step 1
    assert m.recovery_verdict(fault, reference, "x", late).status == "fail"
