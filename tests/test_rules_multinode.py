"""Notebook 09's verdicts at their rules (``report/multinode.py``), in this process: checkpoints compared bit for
bit, NCCL's node count and transport read from its INFO lines (the NCCL branch on the real lines one H200 wrote,
``reference/h200x1/runs/elastic_train-*``), the node boundary, recovery, the lost store, resubmission and the
steps-lost prediction. The runs themselves are in ``tests/test_multinode.py``."""

from __future__ import annotations

import dataclasses
import types
from pathlib import Path

import pytest
import torch

from nvtutorial.chapters.ch09_multinode import report as m
from nvtutorial.chapters.ch09_multinode import schema
from nvtutorial.report.verdict import compare
from nvtutorial.results import EnvInfo, RunResult

ROOT = Path(__file__).resolve().parent.parent
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
        ranks=[dataclasses.asdict(r) if dataclasses.is_dataclass(r) else r for r in ranks],
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
    cpu = m.transport_verdict(types.SimpleNamespace(env=types.SimpleNamespace(is_gpu=False), label="CPU"), 2)
    assert cpu.status == "info" and cpu.numbers == {}
    assert m.transport_verdict(types.SimpleNamespace(env=None, label="?"), 2).status == "info"


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
    rows = m.boundary_rows({"1 node": (within, None), "2 nodes": (gpu, within)})
    assert rows[0]["exposed communication (ms)"] is None and rows[0]["nNodes"] == "n/a"
    assert rows[0]["median step (ms)"] == pytest.approx(10.1) and rows[0]["step without all-reduce (ms)"] is None
    assert rows[1]["exposed communication (ms)"] == pytest.approx(10.0) and rows[1]["nNodes"] == "2"
    assert rows[1]["NCCL transport"].startswith("NET/Socket") and rows[1]["measured on"] == gpu.label
    assert gpu.label.startswith("2× NVIDIA H200 · NCCL 2.28.9")


# --------------------------------------------------------------------------- recovery
def outcome(tmp_path, ok=True, resumed=10, lost=3, every=10, weights=W, last=13, error=None):
    ckpt = save(tmp_path / "interrupted.pt", weights, 40)
    result = types.SimpleNamespace(error=error or {"message": "RuntimeError: boom\nmore"}, run_dir=tmp_path)
    return types.SimpleNamespace(
        ok=ok,
        result=result,
        where="CPU",
        last_step_before_kill=last,
        resumed_from=resumed,
        steps_lost=lost,
        every=every,
        recovery_s=2.5,
        restart_s=1.5,
        peer_error_s=None,
        checkpoint=ckpt,
        agent_returncodes=(1, 0),
        timeline=lambda: [{"t_s": 1.234, "e": "x"}],
    )


@pytest.mark.parametrize(
    "kwargs, status",
    [
        ({}, "pass"),
        ({"lost": 0}, "pass"),
        ({"lost": 9}, "pass"),
        ({"lost": 10}, "fail"),
        ({"lost": -1}, "fail"),
        ({"resumed": 15}, "fail"),
        ({"resumed": 0, "lost": 3}, "pass"),
        ({"lost": None}, "pass"),
        ({"weights": {"a": torch.tensor([1.0, 2.5]), "b": W["b"]}}, "fail"),
    ],
)
def test_recovery_at_its_rule(tmp_path, kwargs, status):
    reference = save(tmp_path / "reference.pt", W, 40)
    v = m.recovery_verdict(outcome(tmp_path, **kwargs), reference, "a rank killed")
    assert v.key == "recovery: a rank killed" and v.status == status and v.where == "CPU"
    assert v.numbers["every"] == 10 and v.numbers["recovery_s"] == 2.5 and v.numbers["restart_s"] == 1.5
    assert v.numbers["identical"] is ("weights" not in kwargs)


def test_recovery_that_failed_or_never_restarted(tmp_path):
    reference = save(tmp_path / "reference.pt", W, 40)
    failed = m.recovery_verdict(outcome(tmp_path, ok=False), reference, "x")
    assert failed.status == "fail" and failed.text == "the run did not come back: RuntimeError: boom"
    assert "identical" not in failed.numbers
    never = m.recovery_verdict(outcome(tmp_path, resumed=None), reference, "x")
    assert never.status == "fail" and "never started again" in never.text


def test_losing_the_stores_node(tmp_path):
    (tmp_path / "agent0.log").write_text(AGENT0)
    o = outcome(tmp_path, ok=False)
    v = m.store_loss_verdict(o)
    assert v.status == "info" and v.numbers == {
        "ok": False,
        "agent_returncodes": [1, 0],
        "store_error": True,
        "restarted": True,
    }
    assert "(RendezvousConnectionError: The connection to the C10d store has failed.)" in v.text
    (tmp_path / "agent0.log").write_text("nothing\n")
    assert m.store_loss_verdict(outcome(tmp_path, ok=False, resumed=None)).numbers["store_error"] is False
    assert "no RendezvousConnectionError" in m.store_loss_verdict(outcome(tmp_path, ok=False)).text
    survived = m.store_loss_verdict(outcome(tmp_path))
    assert survived.status == "info" and survived.numbers["ok"] is True


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
    v = m.grade_steps_lost(prediction, outcome(tmp_path, lost=lost), kill_after=12)
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
        (9, 19, 19, "off", False),  # not late (an inconsistent table: lost 0 at 19, but the late rule is not taken)
    ],
)
def test_the_steps_lost_prediction_when_nothing_was_lost(tmp_path, prediction, last, kill_after, status, asked):
    v = m.grade_steps_lost(prediction, outcome(tmp_path, lost=0, resumed=20, last=last), kill_after=kill_after)
    assert v.status == status and v.numbers["measured"] == 0 and ("asked" in v.numbers) is asked
    assert "no step was done again" in v.text and "were done again" not in v.text


def test_the_steps_lost_prediction_needs_a_measurement(tmp_path):
    with pytest.raises(ValueError, match="no measured steps lost"):
        m.grade_steps_lost(3, outcome(tmp_path, lost=None), kill_after=12)


def test_the_recovery_tables(tmp_path):
    o = outcome(tmp_path)
    frame = m.timeline_frame(o)
    assert frame["t_s"][0] == 1.23 and frame["measured on"][0] == "CPU"
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
    lost = types.SimpleNamespace(last_step_before_kill=13, every=10)
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
    lost = types.SimpleNamespace(last_step_before_kill=last, every=10)
    v = m.resubmission_verdict(run, reference, save(tmp_path / "r.pt", W, 40), lost, "the launcher")
    assert v.status == status and v.numbers["started_at"] == start and v.numbers["lost_job_checkpoint"] == checkpoint


def test_resubmission_through_the_launcher(tmp_path):
    reference = save(tmp_path / "reference.pt", W, 40)
    (tmp_path / "rank0.log").write_text("rank 0 of 2: starting at step 10\n")
    run = types.SimpleNamespace(ok=True, run_dir=tmp_path, env=None, label="unknown")
    lost = types.SimpleNamespace(last_step_before_kill=19, every=10)
    v = m.resubmission_verdict(run, reference, save(tmp_path / "r.pt", W, 40), lost, "the launcher")
    assert v.status == "pass" and v.numbers["state"] is None and v.where == "the launcher"
    other = m.resubmission_verdict(
        run, reference, save(tmp_path / "o.pt", {"a": W["a"] * 2, "b": W["b"]}, 40), lost, "x"
    )
    assert other.status == "fail" and other.numbers["identical"] is False
    run.ok = False
    assert m.resubmission_verdict(run, reference, reference, lost, "x").status == "fail"
    no_kill = types.SimpleNamespace(last_step_before_kill=None, every=10)
    run.ok = True
    assert m.resubmission_verdict(run, reference, reference, no_kill, "x").numbers["lost_job_checkpoint"] is None
