"""Notebook 09: one job on two emulated nodes, a rank killed and brought back, and the notebook's verdicts.

Real runs on the CPU (gloo): the lesson nvtutorial/chapters/ch09_multinode/lessons/elastic_train.py on two emulated
nodes and
on one node, the recovery lab (SIGKILL to a rank, torchrun's restart), the resume exercise checked
by a real kill. The notebook's own runs (a lost node, the lost store node, the Slurm job that resumes
it) are checked through the verdicts of its executed copy. After every run no process of it is left.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, cast

import psutil
import pytest

import nvtutorial
from nvtutorial import launch
from nvtutorial.chapters.ch09_multinode import exercises as exercise
from nvtutorial.chapters.ch09_multinode import lab as recovery
from nvtutorial.chapters.ch09_multinode import report, schema
from nvtutorial.report.verdict import verdicts_in_notebook
from nvtutorial.teach import check
from tests.helpers.executed import executed
from tests.helpers.launch import assert_no_process
from tests.helpers.paths import SCRIPTS

SIZES = {"steps": 20, "every": 6, "batch": 32, "samples": 1024, "features": 64, "hidden": 256, "layers": 3}
KILL_AFTER = 9
RESTART_ONCE = SCRIPTS / "restart_once.py"


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """The lesson, uninterrupted, on two emulated nodes of one rank and on one node of two ranks (gloo)."""
    folder = tmp_path_factory.mktemp("runs")
    previous = os.environ.get("NVTUTORIAL_RUNS_DIR")
    os.environ["NVTUTORIAL_RUNS_DIR"] = str(folder)
    try:
        two = nvtutorial.run(
            recovery.LESSON,
            nproc=1,
            nnodes=2,
            backend="gloo",
            output="none",
            timeout=180,
            args=recovery.lesson_args(SIZES, recovery.checkpoint_dir("two")),
        )
        one = nvtutorial.run(
            recovery.LESSON,
            nproc=2,
            backend="gloo",
            output="none",
            timeout=180,
            args=recovery.lesson_args(SIZES, recovery.checkpoint_dir("one")),
        )
        yield {"two": two, "one": one, "folder": folder}
    finally:
        if previous is None:
            os.environ.pop("NVTUTORIAL_RUNS_DIR", None)
        else:
            os.environ["NVTUTORIAL_RUNS_DIR"] = previous


# --- the launcher's restarts ---------------------------------------------------------------------------


def test_max_restarts_is_checked_and_reaches_torchrun(tmp_path):
    with pytest.raises(launch.LaunchError, match=r"max_restarts=-1: .*0 or more"):
        launch.prepare(recovery.LESSON, nproc=1, max_restarts=-1, out=tmp_path / "r")
    spec = launch.prepare(recovery.LESSON, nproc=1, nnodes=2, backend="gloo", max_restarts=3, out=tmp_path / "r")
    cmd = spec.command(1, port=29999)
    assert cmd[cmd.index("--max-restarts") + 1] == "3"
    assert all("--max-restarts 3" in line for line in spec.cluster_commands())
    assert launch.child_environment(spec)["TORCH_DISABLE_SHARE_RDZV_TCP_STORE"] == "1"
    plain = launch.prepare(recovery.LESSON, nproc=1, backend="gloo", out=tmp_path / "p")
    assert "--max-restarts" not in plain.command() and "--max-restarts" not in plain.cluster_commands()[0]
    mine = launch.prepare(
        recovery.LESSON,
        nproc=1,
        backend="gloo",
        max_restarts=1,
        out=tmp_path / "m",
        env={"TORCH_DISABLE_SHARE_RDZV_TCP_STORE": "0"},
    )
    assert launch.child_environment(mine)["TORCH_DISABLE_SHARE_RDZV_TCP_STORE"] == "0"  # the caller's word wins


def test_the_launcher_lets_torchrun_restart_a_killed_rank(runs_dir):
    """With max_restarts the launcher follows the restarted ranks (new pids) instead of ending the run
    when one dies; the first attempt's failure is kept apart, not reported as the result."""
    res = nvtutorial.run(RESTART_ONCE, nproc=2, max_restarts=1, backend="gloo", output="none", timeout=60)
    assert res.ok and res.error is None
    for rank in (0, 1):
        log = res.log_files[rank].read_text()
        assert f"attempt 0: rank {rank} all-reduced 2" in log and f"attempt 1: rank {rank} all-reduced 2" in log
    assert not list(res.run_dir.glob("rank*.error.json"))
    assert_no_process(res.run_dir)


# --- one job, two nodes ----------------------------------------------------------------------------------


def test_a_two_node_job_gives_the_one_node_result(runs):
    two, one = runs["two"], runs["one"]
    assert two.ok and one.ok and two.nnodes == 2 and two.env.nnodes == 2 and two.env.world_size == 2
    frame = report.rank_frame(two)
    assert sorted(frame["node (GROUP_RANK)"]) == [0, 1] and list(frame["started at step"]) == [0, 0]
    assert (two.run_dir / "node0" / "agent.log").is_file() and (two.run_dir / "node1" / "agent.log").is_file()
    assert not (two.run_dir / "agent.log").exists() and "2 emulated nodes" in two.label
    rank_files = [json.loads((two.run_dir / f"rank{r}.json").read_text()) for r in (0, 1)]
    assert [f["node"] for f in rank_files] == [0, 1] and all((two.run_dir / f"rank{r}.log").is_file() for r in (0, 1))
    verdict = report.same_weights(
        recovery.reference_checkpoint(two), recovery.reference_checkpoint(one), "two-node", "one-node", two.label
    )
    assert verdict.status == "pass" and verdict.numbers["identical"] and verdict.numbers["steps"] == [20, 20]
    digests = {m.weights_sha256 for m in two.ranks_as(schema.Rank) + one.ranks_as(schema.Rank)}
    assert digests == {two.metrics_as(schema.Rank).weights_sha256}
    assert report.transport_verdict(two, expect_nodes=2).status == "info"  # gloo: no NCCL lines to read
    for res in (two, one):
        assert_no_process(res.run_dir)
        # review R2 S2: rank 0 says how long its start took, phase by phase, in lines the lab reads as phases
        lines = res.log_files[0].read_text().splitlines()
        phases = [m.group(1) for line in lines if (m := recovery.PHASE_LINE.match(line))]
        assert [p.split(" in ")[0] for p in phases] == ["joined the process group (gloo)", "built the DDP model"]
        assert all(p.endswith(" s") and float(p.split(" in ")[1][:-2]) >= 0 for p in phases), phases
        assert lines.index(f"rank 0 of 2: {phases[1]}") < lines.index(
            "rank 0 of 2: starting at step 0 (TORCHELASTIC_RESTART_COUNT 0: failures this node's agent restarted after)"
        )


def test_same_weights_fails_on_other_weights_and_other_lengths(runs, tmp_path):
    import torch

    path = recovery.reference_checkpoint(runs["two"])
    state = torch.load(path, weights_only=True)
    name = next(iter(state["model"]))
    state["model"][name] = state["model"][name] + 1e-6
    torch.save(state, tmp_path / "nudged.pt")
    nudged = report.same_weights(path, tmp_path / "nudged.pt", "a", "b", "here")
    assert nudged.status == "fail" and not nudged.numbers["identical"] and 0 < nudged.numbers["max_abs_diff"] < 1e-5
    state["step"] = 19
    torch.save(state, tmp_path / "shorter.pt")
    assert report.same_weights(path, tmp_path / "shorter.pt", "a", "b", "here").numbers["steps"] == [20, 19]


# --- a rank killed in the middle ------------------------------------------------------------------------


def _live(pids):
    return [p for p in pids if psutil.pid_exists(p) and psutil.Process(p).status() != psutil.STATUS_ZOMBIE]


def test_the_exercise_solution_recovers_from_a_killed_rank_with_the_same_weights(runs):
    """The notebook's checker on the solution: rank 1 is SIGKILLed after step 9, torchrun restarts both
    nodes' ranks, they resume from the checkpoint of step 6 and end with the uninterrupted weights."""
    result = recovery.check_resume(exercise.SOLUTION, runs["two"], SIZES, kill_after=KILL_AFTER, backend="gloo")
    assert result.passed, result.reason
    d = result.details
    assert d["resumed_from"] % SIZES["every"] == 0 and d["resumed_from"] <= d["last_step_before_kill"]
    assert d["steps_lost"] == d["last_step_before_kill"] - d["resumed_from"] < SIZES["every"]
    assert d["last_step_before_kill"] >= KILL_AFTER and d["identical"]
    assert not _live(d["killed_pids"])
    assert_no_process(Path(d["run_dir"]))
    kills = json.loads((Path(d["run_dir"]) / "faults.json").read_text())  # review RR10-1: the lab records its kill
    assert [k["what"] for k in kills] == ["rank 1"] and kills[0]["wall"] > 0
    assert report.agent_lines(d["run_dir"], limit=40)[0] == "after the kill of rank 1:"


def test_the_kill_check_catches_a_forgotten_optimizer_state(runs):
    """Past the quick check, the real run catches it too: the weights end different."""
    result = recovery.check_resume(
        exercise.WRONG["the optimizer state forgotten"][0],
        runs["two"],
        SIZES,
        kill_after=KILL_AFTER,
        backend="gloo",
        quick=False,
    )
    assert not result.passed and "differ" in result.reason and not result.details["identical"]
    assert_no_process(Path(result.details["run_dir"]))


def test_the_exercise_solution_passes_and_each_wrong_answer_fails_with_its_reason():
    passed, reason = exercise.check_local(exercise.SOLUTION)
    assert passed, reason
    for label, (candidate, word) in exercise.WRONG.items():
        passed, reason = exercise.check_local(candidate)
        assert not passed and word in reason, (label, reason)
    unfinished = check.check("multinode_resume", lambda path, model, optimizer: 0)
    assert not unfinished.passed and "ignored" in unfinished.reason


@pytest.fixture
def four_steps_lost(runs) -> recovery.ElasticOutcome:
    """Rank 9 killed at 1.1 s, after step 10; the restart resumed from step 6's checkpoint (one every 6 steps)."""
    return recovery.ElasticOutcome(
        result=runs["two"],
        fault=recovery.Fault("rank", 9),
        every=6,
        steps=[(1.0, 0, s) for s in range(1, 11)] + [(3.0, 1, s) for s in range(7, 21)],
        attempts=[(0.5, 0, 0), (2.5, 1, 6)],
        events=[],
        killed_at_s=1.1,
    )


def test_steps_lost_are_graded(four_steps_lost):
    outcome = four_steps_lost
    assert (outcome.last_step_before_kill, outcome.resumed_from, outcome.steps_lost) == (10, 6, 4)
    assert outcome.recovery_s == pytest.approx(1.9) and outcome.restart_s == pytest.approx(1.4)
    assert report.grade_steps_lost(4, outcome, 9).status == "right"
    assert report.grade_steps_lost(20, outcome, 9).status == "off"
    assert report.grade_steps_lost(None, outcome, 9).status == "no answer"
    # asked after step 9, the kill landed after step 10: 9 − 6 = 3 is right for the question asked, and says so
    asked = report.grade_steps_lost(3, outcome, 9)
    assert asked.status == "right" and asked.numbers == {"prediction": 3, "measured": 4, "asked": 3}
    assert "right for a kill right after step 9" in asked.text and "This run lost 4" in asked.text
    assert asked.title == "Steps done again after a rank is killed"
    assert report.grade_steps_lost(3, outcome, 10).status == "close"  # asked after step 10: 4 is the answer; 3 is not
    assert report.grade_steps_lost(2, outcome, 9).status == "close"


def test_a_run_with_two_faults_is_seen_from_each(runs):
    """One run, a rank killed after step 9 (resumed at 6), then a node after step 15 (resumed at 12)."""
    faults = (recovery.Fault("rank", 9), recovery.Fault("node", 15))
    steps = (
        [(0.1 * s, 0, s) for s in range(1, 11)]
        + [(2.0 + 0.1 * s, 1, s) for s in range(7, 16)]
        + [(5.0 + 0.1 * s, 2, s) for s in range(13, 21)]
    )
    outcome = recovery.ElasticOutcome(
        result=runs["two"],
        fault=faults[0],
        every=6,
        steps=steps,
        attempts=[(0.0, 0, 0), (2.5, 1, 6), (6.0, 2, 12)],
        events=[],
        killed_at_s=1.05,
        faults=faults,
        kill_times=(1.05, 3.6),
    )
    first, second = outcome.part(0), outcome.part(1)
    assert (first.last_step_before_kill, first.resumed_from, first.steps_lost) == (10, 6, 4)
    assert (second.last_step_before_kill, second.resumed_from, second.steps_lost) == (15, 12, 3)
    assert second.fault.kind == "node" and second.restart_s == pytest.approx(2.4)
    assert second.recovery_s == pytest.approx(5.0 + 1.3 - 3.6)
    with pytest.raises(IndexError):
        outcome.part(2)


def test_a_node_kill_is_timed_when_the_signals_are_sent_and_replaced_at_once(tmp_path, monkeypatch):
    """The kill time and the replacement do not wait for the killed processes to be reaped (slow here on purpose)."""
    import subprocess
    import sys
    import time
    from types import SimpleNamespace

    monkeypatch.setattr(recovery.psutil, "wait_procs", lambda procs, timeout=None: time.sleep(1.5))
    spec = cast(launch.LaunchSpec, SimpleNamespace(nnodes=2, backend="gloo", run_dir=tmp_path))  # what _Elastic reads
    lab = recovery._Elastic(spec, [recovery.Fault("node", 5, target=1, replace_after_s=0.0)], 3.0, show=False)
    agent = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import subprocess, sys, time; "
            "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)']); time.sleep(60)",
        ]
    )
    started = []
    monkeypatch.setattr(lab, "start_agent", lambda node, name, log="": started.append((lab.now(), node, name)))
    try:
        time.sleep(1.0)  # the agent has started its child
        lab.agents["agent1"], lab.node_agent[1] = agent, "agent1"
        lab.attempts, lab.steps = [(0.0, 0, 0)], [(0.1, 0, s) for s in range(1, 6)]
        before = lab.now()
        lab.strike()
        after = lab.now()
        assert len(lab.kill_times) == 1 and before <= lab.kill_times[0] <= before + 0.5
        assert [(node, name) for _, node, name in started] == [(1, "agent1-replacement")]
        assert started[0][0] - lab.kill_times[0] < 0.5 and after - before < 0.5  # nothing waited in between
        assert agent.wait(timeout=10) == -9 and len(lab.killed_pids) == 2
    finally:
        for p in lab.dying:
            if p.is_running():
                p.kill()
        agent.kill()
        agent.wait()


def test_the_label_counts_each_gpu_once_and_says_it_is_shared():
    from nvtutorial.results import EnvInfo

    base: dict[str, Any] = dict(
        host="h",
        backend="nccl",
        world_size=2,
        device_names=("NVIDIA H200", "NVIDIA H200"),
        torch="2.11.0",
        cuda="12.8",
        nccl="2.28.9",
        python="3.11",
        nnodes=2,
    )
    shared = EnvInfo(**base, device_ids=("GPU-a", "GPU-a"))
    assert shared.label.startswith("1× NVIDIA H200 shared by 2 ranks · ")
    assert EnvInfo(**base, device_ids=("GPU-a", "GPU-b")).label.startswith("2× NVIDIA H200 · ")
    assert EnvInfo(**base).label.startswith("2× NVIDIA H200 · ")  # not recorded: one GPU per rank, as placed
    three = EnvInfo(**{**base, "world_size": 3, "device_names": ("NVIDIA H200",) * 3}, device_ids=("a", "a", "b"))
    assert three.label.startswith("2× NVIDIA H200 (2 ranks share a GPU) · ")
    assert EnvInfo.from_dict({**base, "device_ids": ["GPU-a", "GPU-a"]}) == shared  # read back from result.json
    cpu = EnvInfo(**{**base, "backend": "gloo", "device_names": ("CPU (x86_64)",) * 2})
    assert "simulation" in cpu.label


def test_a_prediction_of_no_steps_lost_is_graded_off(four_steps_lost):
    outcome = four_steps_lost
    graded = report.grade_steps_lost(0, outcome, 9)
    assert graded.status == "off" and graded.numbers == {"prediction": 0, "measured": 4}


# --- the notebook's runs, through its executed copy -------------------------------------------------------


@pytest.mark.notebooks
def test_notebook_09_reaches_its_verdicts_on_the_cpu():
    nb = executed("09_beyond_one_machine.ipynb")
    verdicts = {v.key: v for v in verdicts_in_notebook(nb)}
    assert verdicts["two nodes = one node"].status == "pass" and verdicts["two nodes = one node"].numbers["identical"]
    assert verdicts["transport between nodes"].status == "info"  # CPU: gloo, no NCCL lines
    for key in ("recovery: a rank killed", "recovery: a node lost and replaced"):
        v = verdicts[key]
        assert v.status == "pass" and v.numbers["identical"], v
        assert 0 <= v.numbers["steps_lost"] < v.numbers["every"] and v.numbers["resumed_from"] % v.numbers["every"] == 0
    # the node's kill time is when the signals were sent: the surviving rank's error (gloo: at once) is not before it
    node_loss = verdicts["recovery: a node lost and replaced"].numbers
    assert node_loss["peer_error_s"] is not None and -0.25 < node_loss["peer_error_s"] < 2.0, node_loss
    store = verdicts["losing the store's node"]
    assert store.status == "info" and not store.numbers["ok"] and store.numbers["store_error"]
    assert not store.numbers["restarted"]
    resubmitted = verdicts["resubmitted job"]
    assert resubmitted.status == "pass" and resubmitted.numbers["identical"]
    assert resubmitted.numbers["started_at"] == resubmitted.numbers["lost_job_checkpoint"] > 0
    from nvtutorial.launch import slurm

    if slurm.local_unavailable() is None:  # CI installs Slurm: the job went through it
        assert resubmitted.numbers["state"] == "COMPLETED"
    assert verdicts["prediction: steps lost"].status == "no answer"
    said = "".join(
        o.get("text", "") for c in nb.cells if c.cell_type == "code" and "check_resume(" in c.source for o in c.outputs
    )
    verdict = [line for line in said.splitlines() if line.startswith(("PASS", "FAIL"))]
    # the checker says what it checks first, then one verdict: the unfinished starting point fails
    assert said.startswith("checking resume:") and len(verdict) == 1, said
    assert verdict[0].startswith("FAIL (multinode_resume): the weights were not loaded"), said
    # issue 28: the two-node run and each lab say what they are doing while torchrun starts (not only a command line):
    # every one says "now: ..." (each start is longer than SAY_S); a rank importing torch (about 1.3 s on a 2-core CI
    # machine, sampled every SAY_S) is caught in one of the five starts at least, not necessarily in each (stop 38)
    shown = [
        "".join(o.get("text", "") for o in c.outputs)
        for c in nb.cells
        if c.cell_type == "code" and ("run_elastic(" in c.source or "two_args, nnodes" in c.source)
    ]
    assert len(shown) == 3 and all("] now: " in said for said in shown), shown
    assert any("importing torch" in said for said in shown), shown
    timeline = "".join(
        str(o.get("data", {}).get("text/plain", ""))
        for c in nb.cells
        if "timeline_frame(" in c.source
        for o in c.outputs
    )
    assert "attempt 1: rank 0 built the DDP model in" in timeline  # where the recovery's seconds went (review R2 S2)
    leftovers = [
        p
        for p in psutil.process_iter(["cmdline"])
        if any(str(recovery.LESSON) in a or "multinode_resume.py" in a for a in p.info["cmdline"] or ())
        and p.status() != psutil.STATUS_ZOMBIE
    ]
    assert not leftovers, [p.info["cmdline"][:4] for p in leftovers]
