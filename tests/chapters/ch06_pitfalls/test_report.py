"""Notebook 06's readers and verdicts at their rules: stacks, hangs, timeouts, the flight recorder, C17–C21.

Synthetic logs, stacks and tables on both sides of every rule, and the committed 2× H200 runs
(``reference/h200x2/runs/pitfalls-*``) through the project's own reader (``RunResult.load``). The same
verdicts on real CPU runs are in ``test_lab.py``.
"""

from __future__ import annotations

import dataclasses
import json
import pickle
from pathlib import Path
from typing import Any

import pytest

from nvtutorial.chapters.ch06_pitfalls import report as rp
from nvtutorial.chapters.ch06_pitfalls import report_measured as rm
from nvtutorial.chapters.ch06_pitfalls import schema
from nvtutorial.chapters.ch06_pitfalls.lab import TrapRun
from nvtutorial.report import claims
from nvtutorial.report.verdict import Verdict, compare
from nvtutorial.results import RunResult, typed
from tests.helpers import pitfalls_results as made
from tests.helpers.paths import ROOT
from tests.helpers.ranks import forked, reap

RUNS = ROOT / "reference" / "h200x2" / "runs"
MEASURED = RUNS / "pitfalls-20261130-015630-3b927b"  # the loader sweep and the OOM demo on 2× H200

DUMP = """\
[rank1] some line before
Thread 0x00007fb7dcfff6c0 (most recent call first):
  <no Python frame>

Thread 0x00007fbbb15996c0 (most recent call first):
  File "/x/nvtutorial/runtime.py", line 236 in watch
  File "/usr/lib/python3.12/threading.py", line 1010 in run
  File "/usr/lib/python3.12/threading.py", line 1030 in _bootstrap

Current thread 0x00007fbbb29f7140 (most recent call first):
  File "/x/site-packages/torch/autograd/graph.py", line 823 in _engine_run_backward
  File "/x/site-packages/torch/_tensor.py", line 581 in backward
  File "/x/nvtutorial/chapters/ch06_pitfalls/lessons/validation.py", line 88 in train_one_epoch
  File "/x/nvtutorial/chapters/ch06_pitfalls/lessons/validation.py", line 140 in main
  File "/x/nvtutorial/chapters/ch06_pitfalls/lessons/validation.py", line 150 in <module>
  File "<frozen runpy>", line 88 in _run_code

Extension modules: numpy (total: 1)
Current thread 0x00007fbbb29f7140 (most recent call first):
  File "/x/nvtutorial/chapters/ch06_pitfalls/lessons/validation.py", line 60 in evaluate
  File "/x/nvtutorial/chapters/ch06_pitfalls/lessons/validation.py", line 150 in <module>
"""


def frame(file: str, line: int, func: str) -> rp.Frame:
    return {"file": file, "line": line, "func": func}


def made_run(
    tmp_path: Path,
    ok: bool = True,
    error: dict[str, Any] | None = None,
    log_files: dict[int, Path] | None = None,
    run_dir: Path | None = None,
) -> RunResult:
    """A finished run of a trap script, made up: its folder, its ranks' logs and how it ended."""
    return RunResult(
        workload="nvtutorial/chapters/ch06_pitfalls/lessons/validation.py",
        params={"args": []},
        returncode=0 if ok else 1,
        wall_s=12.34,
        first_output_s=None,
        env=None,
        ranks=[],
        run_dir=run_dir or tmp_path,
        log_files=log_files or {},
        log_tail=[],
        error=error,
    )


def trap_of(result: RunResult) -> TrapRun:
    """A trap's launch (:class:`lab.TrapRun`) that holds ``result``."""
    return TrapRun(result, "gloo", "epoch 0 trained", None, None, False)


# --------------------------------------------------------------------------- stacks
def test_thread_dumps_and_the_main_stack():
    blocks = rp.thread_dumps(DUMP)
    assert [len(b) for b in blocks] == [0, 3, 6, 2]
    assert blocks[2][0] == frame("/x/site-packages/torch/autograd/graph.py", 823, "_engine_run_backward")
    first, last = rp.main_stack(DUMP, 0), rp.main_stack(DUMP, -1)
    assert [f["func"] for f in first] == [
        "_engine_run_backward",
        "backward",
        "train_one_epoch",
        "main",
        "<module>",
        "_run_code",
    ]
    assert [f["func"] for f in last] == ["evaluate", "<module>"]
    assert rp.main_stack("no dump here\n") == [] and rp.thread_dumps("") == []
    # a line that is neither a frame nor empty ends the block: frames after it are not the thread's
    assert rp.thread_dumps('Thread 0x1 (x):\n  File "a.py", line 1 in f\nnoise\n  File "b.py", line 2 in g\n') == [
        [frame("a.py", 1, "f")]
    ]


def test_frames_named_and_classified():
    assert rp.frame_text(frame("/a/b/validation.py", 60, "evaluate")) == "validation.py:60 evaluate"
    assert rp._is_torch(frame("/x/site-packages/torch/nn/module.py", 1, "f"))
    assert rp._is_torch(frame("<frozen runpy>", 1, "f"))
    assert not rp._is_torch(frame("/x/nvtutorial/torchvision_like.py", 1, "f"))
    assert [rp._activity(n) for n in ("validate_rank0_only", "Evaluate", "train_one_epoch", "one_epoch", "main")] == [
        "validating",
        "validating",
        "training",
        "training",
        None,
    ]
    assert rp._activity("train_and_validate") == "validating"  # validation wins: it is checked first


def test_local_line_reads_this_checkout(tmp_path):
    src = tmp_path / "f.py"
    src.write_text("a = 1\n    b = 2  \n")
    assert rp.local_line(frame(str(src), 2, "f")) == "b = 2"
    assert rp.local_line(frame(str(tmp_path / "missing.py"), 1, "f")) == ""


LINES = {("v.py", 60): "for images, masks in loader:", ("v.py", 88): "loss.backward()", ("v.py", 90): "x = loss.item()"}


def line_of(f: rp.Frame) -> str:
    return LINES.get((Path(f["file"]).name, f["line"]), "")


@pytest.mark.parametrize(
    "frames, point, where",
    [
        ([frame("v.py", 60, "evaluate"), frame("v.py", 150, "<module>")], "validating", "v.py:60 evaluate"),
        (
            [frame("v.py", 61, "load"), frame("v.py", 60, "evaluate"), frame("v.py", 10, "train_one_epoch")],
            "validating",
            "v.py:60 evaluate",
        ),  # the innermost *named* activity of its own code decides
        (
            [
                frame("/t/torch/x.py", 1, "wait"),
                frame("v.py", 88, "train_one_epoch"),
                frame("v.py", 10, "validate_all"),
            ],
            "elsewhere",
            "v.py:88 train_one_epoch",
        ),  # ... training, here: an outer validation does not count
        (
            [frame("/t/torch/autograd/graph.py", 823, "_engine_run_backward"), frame("v.py", 88, "train_one_epoch")],
            "backward",
            "v.py:88 train_one_epoch",
        ),
        ([frame("/t/torch/_tensor.py", 581, "backward"), frame("v.py", 88, "step")], "backward", "v.py:88 step"),
        ([frame("v.py", 90, "step"), frame("v.py", 150, "<module>")], "item", "v.py:90 step"),
        ([frame("/t/torch/x.py", 1, "item"), frame("v.py", 90, "step")], "elsewhere", "v.py:90 step"),  # not innermost
        ([frame("v.py", 88, "step")], "elsewhere", "v.py:88 step"),
        ([frame("/t/torch/x.py", 5, "f")], "elsewhere", "x.py:5 f"),
        ([], "elsewhere", "?"),
    ],
)
def test_where_a_rank_waits(frames, point, where):
    found = rp.waiting_point(frames, line_of)
    assert found.point == point and found.frame == where


def test_rank_stacks_from_the_logs(tmp_path):
    (tmp_path / "rank0.log").write_text(DUMP)
    result = made_run(tmp_path, log_files={1: tmp_path / "missing.log", 0: tmp_path / "rank0.log"})
    stacks = rp.rank_stacks(trap_of(result))  # a TrapRun holds its RunResult
    assert set(stacks) == {0, 1} and stacks[1] == [] and stacks[0][0]["func"] == "_engine_run_backward"


def _stacks(rank1: list) -> dict:
    return {0: [frame("v.py", 60, "evaluate")], 1: rank1}


@pytest.mark.parametrize(
    "backend, rank1, status",
    [
        ("gloo", [frame("/t/torch/_tensor.py", 1, "backward"), frame("v.py", 88, "t")], "pass"),
        ("gloo", [frame("v.py", 90, "t")], "fail"),  # at .item(): not where gloo blocks
        ("nccl", [frame("v.py", 90, "t")], "pass"),
        ("nccl", [frame("/t/torch/_tensor.py", 1, "backward"), frame("v.py", 88, "t")], "fail"),
        ("mpi", [frame("v.py", 90, "t")], "fail"),
    ],
)
def test_the_hang_verdict_against_the_mental_model(backend, rank1, status):
    v = rp.hang_verdict(_stacks(rank1), backend, "here", line_of)
    assert v.status == status and v.where == "here" and v.key == "where ranks wait"
    assert v.numbers["backend"] == backend and v.numbers["rank0"] == "validating"
    assert v.numbers["expected"] == {"gloo": "backward", "nccl": "item"}.get(backend, "?")
    assert v.numbers["rank1_frame"] == rp.frame_text(next(f for f in rank1 if "torch" not in f["file"]))


def test_the_hang_verdict_needs_rank_0_validating_and_another_rank():
    waiting = [frame("/t/torch/_tensor.py", 1, "backward"), frame("v.py", 88, "t")]
    assert rp.hang_verdict({0: [frame("v.py", 60, "evaluate")]}, "gloo", "", line_of).status == "fail"
    assert rp.hang_verdict({0: waiting, 1: waiting}, "gloo", "", line_of).status == "fail"
    assert rp.hang_verdict({}, "gloo", "", line_of).status == "fail"
    three = {0: [frame("v.py", 60, "evaluate")], 1: waiting, 2: [frame("v.py", 90, "t")]}
    assert rp.hang_verdict(three, "gloo", "", line_of).status == "fail"  # every other rank must wait there
    three[2] = waiting
    assert rp.hang_verdict(three, "gloo", "", line_of).status == "pass"


@pytest.mark.parametrize(
    "numbers, answer",
    [
        ({"rank1": "backward", "backend": "nccl"}, "a"),
        ({"rank1": "item", "backend": "gloo"}, "b"),
        ({"rank1": "elsewhere", "backend": "gloo"}, "a"),
        ({"rank1": "elsewhere", "backend": "nccl"}, "b"),
    ],
)
def test_the_hang_answer_is_what_the_run_showed(numbers, answer):
    assert rp.hang_answer(Verdict("w", "info", "t", numbers)) == answer


# --------------------------------------------------------------------------- timeouts and the flight recorder
def test_log_lines_and_signature_lines(tmp_path):
    log = tmp_path / "rank1.log"
    log.write_text("ok\nWatchdog caught collective operation timeout\nan Error here\nfine\nTimed out waiting\n" * 2)
    assert (
        rp.log_lines(log) == ["Watchdog caught collective operation timeout", "an Error here", "Timed out waiting"] * 2
    )
    assert rp.log_lines(log, ("fine",)) == ["fine", "fine"]
    assert rp.log_lines(tmp_path / "missing") == []
    (tmp_path / "rank0.log").write_text("all good\n")
    result = made_run(tmp_path, log_files={1: log, 0: tmp_path / "rank0.log"})
    lines = rp.signature_lines(result, limit=2)
    assert list(lines) == [0, 1] and lines[0] == ["(nothing in this rank's log names an error)"]
    assert lines[1] == ["Watchdog caught collective operation timeout", "an Error here"]
    assert rp.signature_lines(trap_of(made_run(tmp_path))) == {}  # a run without logs
    log.write_text("Error " + "x" * 400 + "\n")
    assert len(rp.signature_lines(result)[1][0]) == 300


def _run(tmp_path, ok: bool, lines: str, error: dict | None = None) -> RunResult:
    (tmp_path / "rank1.log").write_text(lines)
    return made_run(tmp_path, ok, error, log_files={1: tmp_path / "rank1.log"})


@pytest.mark.parametrize(
    "ok, lines, status",
    [
        (False, "RuntimeError: Timed out waiting 4000ms for recv\n", "pass"),
        (False, "[rank1] Watchdog caught collective operation timeout: WorkNCCL(OpType=ALLREDUCE)\n", "pass"),
        (False, "RuntimeError: the recv timed out\n", "pass"),
        (False, "RuntimeError: connection reset\n", "fail"),  # failed, but no line names a timeout
        (True, "Timed out waiting\n", "fail"),  # named, but the run did not fail
    ],
)
def test_the_timeout_verdict(tmp_path, ok, lines, status):
    run = _run(tmp_path, ok, lines, None if ok else {"rank": 1, "type": "RuntimeError"})
    v = rp.timeout_verdict(run, "gloo", 4, "here")
    assert v.status == status and v.numbers["failed"] is (not ok) and v.numbers["wall_s"] == 12.34
    assert v.numbers["failed_rank"] == (None if ok else 1) and v.numbers["error_type"] == (
        None if ok else "RuntimeError"
    )
    assert v.numbers["timeout_named"] is (status == "pass" or ok) and v.numbers["backend"] == "gloo"


def test_the_flight_recorder_reads_every_ranks_dump(tmp_path):
    entries = [
        {"collective_seq_id": 1, "profiling_name": "nccl:all_reduce", "state": "completed", "input_sizes": [[4]]},
        {"collective_seq_id": 2, "profiling_name": "nccl:all_reduce", "state": "completed", "input_sizes": [[4]]},
        {"collective_seq_id": 3, "profiling_name": "nccl:broadcast", "state": "started", "input_sizes": [[2]]},
        {"collective_seq_id": 4, "profiling_name": "nccl:all_reduce", "state": "scheduled", "input_sizes": [[4]]},
        {"collective_seq_id": None, "profiling_name": "x", "state": "completed", "input_sizes": []},
    ]
    (tmp_path / "nccl_trace_rank_0").write_bytes(pickle.dumps({"entries": entries}))
    (tmp_path / "nccl_trace_rank_1").write_text(json.dumps({"entries": entries[:2]}))
    (tmp_path / "nccl_trace_rank_2").write_bytes(b"\x00not a dump")
    (tmp_path / "nccl_trace_rank_x").write_text("{}")  # no rank number: not a dump
    fr = rp.flight_recorder(tmp_path, last=2)
    assert set(fr) == {0, 1, 2}
    assert fr[0].last_completed_seq == 2 and [e.seq for e in fr[0].entries] == [4, None]
    assert [e.state for e in fr[0].pending] == ["started", "scheduled"]
    assert fr[1].pending == () and fr[1].last_completed_seq == 2 and len(fr[1].entries) == 2
    assert fr[2].error is not None and fr[0].error is None
    (tmp_path / "nccl_trace_rank_3").write_text(json.dumps([1, 2]))  # not a dict: no entries
    assert rp.flight_recorder(tmp_path)[3] == rp.FlightDump(
        entries=(), last_completed_seq=None, pending=(), file=str(tmp_path / "nccl_trace_rank_3")
    )
    lines = rp.describe_flight_recorder(made_run(tmp_path), "nccl")
    assert (
        lines[0] == "rank 0: last completed collective #2; not completed: #3 nccl:broadcast (started), "
        "#4 nccl:all_reduce (scheduled)"
    )
    assert lines[1] == "rank 1: last completed collective #2; not completed: none"
    assert lines[2].startswith("rank 2: unreadable dump")
    assert rp.describe_flight_recorder(made_run(tmp_path), "gloo")[0].startswith("no flight-recorder")
    assert rp.describe_flight_recorder(made_run(tmp_path, run_dir=tmp_path / "none"), "nccl")[0].startswith(
        "no flight-recorder dump found"
    )


def test_processes_left(tmp_path):
    import os
    import subprocess
    import sys

    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        (tmp_path / "rank0.pid").write_text(str(child.pid))
        (tmp_path / "rank1.pid").write_text(str(os.getpid() + 10_000_000))  # no such process
        (tmp_path / "rank2.pid").write_text("not a pid")
        assert rp.processes_left(trap_of(made_run(tmp_path))) == [child.pid]
    finally:
        child.kill()
        child.wait()
    assert rp.processes_left(made_run(tmp_path)) == []  # ended (a zombie no more)


# --------------------------------------------------------------------------- validation, the fix and C18
@pytest.mark.parametrize(
    "values, single, status",
    [
        ([1.0, 1.0], 1.0, "pass"),
        ([1.0, 1.0 + 5e-7], 1.0, "pass"),
        ([1.0, 1.0 + 2e-6], 1.0, "fail"),
        ([1.0 + 2e-6, 1.0 + 2e-6], 1.0, "fail"),
        ([2.0, 2.0], 1.0, "fail"),
        ([1.0, None], 1.0, "fail"),
    ],
)
def test_the_fixed_validation_verdict(values, single, status):
    v = rp.fixed_validation_verdict(values, single, "here")
    assert v.status == status and v.numbers["values"] == values and v.numbers["single_process"] == single
    if None not in values:
        assert v.numbers["spread"] == pytest.approx(max(values) - min(values))
        assert v.numbers["off"] == pytest.approx(abs(values[0] - single))


def _v(status: str, key: str = "x", where: str = "") -> Verdict:
    return Verdict(key, status, "t", {}, where)


@pytest.mark.parametrize(
    "hang, timeout, fixed, source, status",
    [
        ("pass", "pass", "pass", None, "partly"),
        ("pass", "pass", "pass", "partly", "partly"),  # 03: the source's all_reduce gives W × the loss
        ("pass", "pass", "pass", "holds", "holds"),  # 03: the source's code gave the loss
        ("pass", "pass", "pass", "info", "partly"),  # 03 decided nothing: as without it
        ("fail", "fail", "pass", None, "wrong"),  # rank-0 validation broke nothing
        ("fail", "fail", "pass", "holds", "wrong"),
        ("pass", "fail", "pass", None, "unverifiable"),
        ("fail", "pass", "pass", None, "unverifiable"),
        ("pass", "pass", "fail", None, "unverifiable"),  # the course's own fix failed
        ("info", "pass", "pass", None, "unverifiable"),
        ("pass", "pass", "info", None, "unverifiable"),
    ],
)
def test_c18_is_decided_by_the_runs(hang, timeout, fixed, source, status):
    v = rp.verdict_c18(
        _v(hang, where="h"), _v(timeout), _v(fixed, where="f"), None if source is None else _v(source, "C18")
    )
    assert v.key == "C18" and v.status == status and v.where == "f"
    assert v.numbers == {"hang": hang, "timeout": timeout, "fixed": fixed, "source": source}
    assert rp.verdict_c18(_v(hang, where="h"), _v(timeout), _v(fixed)).where == "h"


def test_c18_from_two_notebooks_agrees_with_the_registry():
    """03's half (the source's all_reduce, a CPU run's numbers) with 06's (the trap, run on 2× H200)."""
    from nvtutorial.chapters.ch03_ddp_training import report as training

    source = training.validation_verdicts(
        {"single": 0.6007, "sums": 0.6007, "source": 1.2029, "world": 2, "samples_counted": 21, "samples": 21}, "CPU"
    )[1]
    assert source.key == "C18" and source.status == "partly" and source.numbers["ratio"] == pytest.approx(2.0025, 1e-4)
    v = rp.verdict_c18(_v("pass"), _v("pass"), _v("pass"), source)
    assert v.status == claims.claim("C18").status


def test_mismatch_reports_and_verdict():
    report = (
        "Detected mismatch between collectives on ranks. Collectives differ in the following aspects: "
        "\tTensor Tensor shapes: 10vs 20"
    )
    assert rp.mismatch_difference(report) == "Tensor Tensor shapes: 10vs 20"
    assert rp.mismatch_difference("another error") == ""
    ok = rp.mismatch_verdict("shapes", [report, report], True, "here")
    assert ok.status == "pass" and ok.numbers == {"reported": [True, True], "fixed_ok": True}
    assert rp.mismatch_verdict("shapes", [report, None], True, "").status == "fail"
    assert rp.mismatch_verdict("shapes", [report, report], False, "").numbers["fixed_ok"] is False
    assert rp.mismatch_verdict("shapes", [report, report], False, "").status == "fail"


E0, E1 = [0, 2, 4], [4, 0, 2]


@pytest.mark.parametrize(
    "broken, fixed, repeats, changes, disjoint",
    [
        ([[E0, E0], [[1, 3, 5], [1, 3, 5]]], [[E0, E1], [[1, 3, 5], [5, 1, 3]]], True, True, True),
        ([[E0, E1], [[1, 3, 5], [1, 3, 5]]], [[E0, E1], [[1, 3, 5], [5, 1, 3]]], False, True, True),
        ([[E0, E0], [[1, 3, 5], [1, 3, 5]]], [[E0, E0], [[1, 3, 5], [5, 1, 3]]], True, False, True),
        ([[E0, E0], [[1, 3, 4], [1, 3, 4]]], [[E0, E1], [[1, 3, 5], [5, 1, 3]]], True, True, False),  # 4 on both ranks
        ([[E0, E0], [[1, 3, 5], [1, 3, 5]]], [[E0, E1], [[1, 3, 5], [5, 1, 2]]], True, True, False),  # in epoch 1
    ],
)
def test_the_set_epoch_verdict(broken, fixed, repeats, changes, disjoint):
    v = rp.set_epoch_verdict(broken, fixed, "here")
    assert v.numbers == {"repeats_without": repeats, "changes_with": changes, "disjoint": disjoint}
    assert v.status == ("pass" if repeats and changes and disjoint else "fail")


SAME = [[[0, 1, 2], [1, 3, 4]], [[5, 1, 2], [6, 3, 4]]]  # rank 1's crops at the same (x, y) as rank 0's
PLUS = [[[0, 1, 2], [1, 3, 4]], [[5, 7, 2], [6, 3, 4]]]  # one of two differs


@pytest.mark.parametrize(
    "weights, same_seed, plus_rank, status",
    [
        ([(1.0, 9.0), (2.0, 9.0)], SAME, PLUS, "partly"),  # DDP equalised them, one seed repeats the draws
        ([(1.0, 1.0), (2.0, 2.0)], PLUS, PLUS, "holds"),  # DDP did not: a common seed is needed; one seed harmless
        ([(1.0, 1.0), (2.0, 2.0)], SAME, PLUS, "partly"),  # needed, and harmful
        ([(1.0, 9.0), (2.0, 9.0)], PLUS, PLUS, "partly"),  # not needed, harmless
        ([(1.0, 9.0), (2.0, 9.0)], SAME, SAME, "partly"),  # seed + rank did not change the draws: one seed not harmful
        ([(1.0, 9.0), (1.0, 9.0)], SAME, PLUS, "unverifiable"),  # equal before DDP: nothing shows what DDP does
        ([(1.0, 9.0), (2.0, 9.0)], [[], []], [[], []], "unverifiable"),  # no crops
    ],
)
def test_c21_is_decided_by_the_runs(weights, same_seed, plus_rank, status):
    v = rp.verdict_c21(weights, same_seed, plus_rank, "here")
    assert v.key == "C21" and v.status == status and v.where == "here"
    same, n = rp._same_crops(same_seed)
    assert v.numbers["same_crops_same_seed"] == same and v.numbers["crops"] == n
    assert v.numbers["weight_sums_before"] == len({w[0] for w in weights})
    assert v.numbers["weight_sums_after"] == len({w[1] for w in weights})


def test_same_crops_counts_rank_0s_rows_matched_on_every_rank():
    assert rp._same_crops(SAME) == (2, 2) and rp._same_crops(PLUS) == (1, 2)
    three = [SAME[0], SAME[1], [[9, 1, 2], [9, 0, 0]]]
    assert rp._same_crops(three) == (1, 2)
    assert rp._same_crops([[[0, 1, 2]]]) == (1, 1)  # one rank: trivially the same


# --------------------------------------------------------------------------- the loader, C17
_loader_run, _old_loader_run = made.loader_run, made.old_loader_run
rows = made.rows


FLAT = {0: (100, 101), 4: (500, 505), 8: (800, 808), 16: (802, 806)}  # the knee at 8: 16 within the noise


def test_enough_workers_finds_the_knee_and_whether_it_still_rises():
    e = rm.enough_workers(rows(FLAT))
    assert e["best"] == 8 and e["knee"] == 8 and e["largest"] == 16 and e["best_rate"] == 804  # a tie: the fewest
    assert not e["still_rising"] and {w: c.status for w, c in e["against_best"].items()} == {
        0: "slower",
        4: "slower",
        8: "no change",
        16: "no change",
    }
    rising = rm.enough_workers(rows({0: (100, 100), 4: (500, 500), 8: (800, 800)}))
    assert rising["best"] == 8 and rising["knee"] == 8 and rising["still_rising"]
    plateau = rm.enough_workers(rows({0: (100, 100), 4: (795, 800), 8: (800, 800)}))
    assert plateau["knee"] == 4 and not plateau["still_rising"]  # 4 → 8 within the noise
    dip = rm.enough_workers(rows({0: (100, 100), 4: (900, 900), 8: (800, 800)}, {8: (2000, 2000)}))
    assert dip["best"] == 4 and dip["largest"] == 8 and not dip["still_rising"]  # pinned rows are not counted
    assert not rm.enough_workers(rows({8: (800, 800)}))["still_rising"]  # one count: nothing rises


def test_pin_comparison_and_within_noise():
    r = rows(FLAT, {8: (900, 909), 4: (500, 505)})
    c = rm.pin_comparison(r, 8)
    assert c.status == "faster" and c.baseline == 804 and c.candidate == 904.5 and not c.lower_is_better
    assert rm.pin_comparison(r, 16) is None and rm.pin_comparison(r, 3) is None
    assert not rm.pin_within_noise(_loader_run(r))  # faster at 8
    assert rm.pin_within_noise(_loader_run(rows(FLAT, {4: (500, 505), 8: (800, 808)})))
    assert not rm.pin_within_noise(_loader_run(rows(FLAT)))  # nothing pinned: nothing to say
    slower = rows(FLAT, {4: (500, 505), 8: (700, 700)})
    assert not rm.pin_within_noise(_loader_run(rows(FLAT, {4: (500, 505), 8: (800, 808)}), slower))  # rank 1 moved


REVIEW_RUNS = Path(__file__).parent / "fixtures" / "h100x1-1d06a7c"


def _review_run(name: str) -> RunResult:
    run = RunResult.load(REVIEW_RUNS / name / "result.json")
    run.run_dir = REVIEW_RUNS / name
    return run


def test_pin_bound_on_the_review_h100_run(tmp_path):
    """RR13-11, through the real reader: the one-H100 review run's pin A/B (±24 %, 2+2 windows) beside what pinning
    can save at most, the batch's whole pageable copy at notebook 01's rates on the same GPU (its run beside it)."""
    pitfalls = _review_run("pitfalls-20261207-230138-fac676")
    links = rm.links_run(pitfalls)
    assert links is not None and links.run_dir.name == "gpu_links-20261207-225909-59c396"
    line = rm.pin_bound(pitfalls, links)
    assert line == (
        "rank 0: the batch, 10.5 MB, copies in 0.62 ms from pageable memory at 16.9 GB/s, 0.19 ms pinned at 55.0 GB/s "
        "(notebook 01's rates on this GPU): pinning can save at most 0.62 ms of a 30.6 ms step (2.0%), within this "
        "A/B's noise (±24%), which cannot resolve it."
    )
    pitfalls.run_dir = tmp_path / "pitfalls-x"  # no notebook 01 run beside it: the committed one-GPU run, named
    line = rm.pin_bound(pitfalls, rm.links_run(pitfalls))
    assert line is not None and "15.3 GB/s" in line
    assert "a saved run (gpu_links-20261207-025628-9b7836), not this GPU" in line


def test_pin_bound_says_whether_the_ab_can_resolve_it():
    links = _review_run("gpu_links-20261207-225909-59c396")  # 16.9 GB/s pageable at 16 MiB, the size nearest
    slow = _loader_run(rows({4: (400, 404)}, {4: (401, 405)}), rule=4)  # 8 × 32² px: 0.16 MB, 0.01 ms of a 20 ms step
    line = rm.pin_bound(slow, links)
    assert line is not None and line.endswith(
        "of a 19.9 ms step (0.0%), within this A/B's noise (±1%), which cannot resolve it."
    )
    fast = _loader_run(rows({4: (4e5, 4.04e5)}, {4: (4e5, 4.04e5)}), rule=4)  # a 0.02 ms step: the copy is half of it
    line = rm.pin_bound(fast, links)
    assert line is not None and line.endswith("(48.7%), beyond this A/B's noise (±1%).") and line.count("rank ") == 2
    assert rm.pin_bound(_loader_run(rows({4: (400, 404)}), rule=4), links) is None  # nothing pinned (a CPU run)
    assert rm.pin_bound(slow, None) is None


@pytest.mark.parametrize(
    "pinned0, pinned1, rule, enough, helps, status",
    [
        ({16: (900, 909)}, {16: (900, 909)}, 16, True, True, "holds"),  # 16 and 16 / 2 = 8: both enough
        ({16: (802, 806)}, {16: (900, 909)}, 16, True, False, "partly"),  # pinned helps one rank only
        ({8: (900, 909)}, {8: (900, 909)}, 16, True, False, "partly"),  # pinned not measured at the rule's 16
        ({8: (900, 909)}, {8: (900, 909)}, 8, False, True, "partly"),  # 8 enough, but 8 / 2 = 4 is not
        ({4: (600, 606)}, {4: (600, 606)}, 4, False, True, "partly"),  # not enough, but pinned helps at 4
        ({4: (500, 505)}, {4: (500, 505)}, 4, False, False, "wrong"),
        ({16: (900, 909)}, {16: (900, 909)}, 12, False, True, "partly"),  # 12 and 6 not tried: pinned at the largest
    ],
)
def test_c17_on_gpus_at_its_rule(pinned0, pinned1, rule, enough, helps, status):
    v = rm.verdict_c17(_loader_run(rows(FLAT, pinned0), rows(FLAT, pinned1), rule=rule))
    assert v.key == "C17" and v.status == status and v.where == "2× test GPU"
    assert v.numbers["rule"] == rule and v.numbers["knee"] == {"0": 8, "1": 8}
    assert v.numbers["rule_enough"] is enough and v.numbers["pin_helps"] is helps
    assert v.numbers["step_only"] == {"0": 1005.0, "1": 1005.0}


@pytest.mark.parametrize(
    "rule, literal, per_process, status",
    [
        (16, "enough", "enough", "holds"),  # 16 per rank, and 8 per process: both within the noise of the best
        (8, "enough", "NOT enough", "partly"),  # review M1: 8 per rank is enough, the usual 4 per process is not
        (4, "NOT enough", None, "partly"),  # 4 per rank not enough; 2 per process never tried
    ],
)
def test_c17_grades_both_readings_of_the_rule(rule, literal, per_process, status):
    """Review M1: ``4 × GPUs`` for each rank's DataLoader (the rule as written) and 4 per GPU process (the usual
    reading under DDP) are both graded; the rule is enough only where every reading tried is, on every rank."""
    pinned = {rule: (2000, 2010)}  # pinned memory helps at the rule's count: the rule decides holds or partly
    v = rm.verdict_c17(_loader_run(rows(FLAT, pinned), rule=rule))
    readings = v.numbers["readings"]
    assert list(readings) == [rule, rule // 2] and v.status == status
    assert readings[rule] == {"0": literal, "1": literal}
    assert readings[rule // 2] == (None if per_process is None else {"0": per_process, "1": per_process})
    assert f"The rule's {rule} workers (4 × the job's 2 GPUs, for each rank's DataLoader): " in v.text
    assert f"read as {rule // 2} workers (4 per GPU process): " in v.text
    assert ("not tried (the counts tried: 0, 4, 8, 16)" in v.text) is (per_process is None)


def test_c17_in_a_world_of_one_has_one_reading():
    """One training process on one GPU (notebook 06 on one GPU, review S4): both readings are the same 4 workers."""
    one = {0: (100, 101), 2: (300, 303), 4: (500, 505), 8: (502, 506)}
    v = rm.verdict_c17(_loader_run(rows(one, {4: (600, 606)}), (), rule=4, gpus=1, label="1× test GPU"))
    assert v.status == "holds" and v.numbers["readings"] == {4: {"0": "enough"}} and v.numbers["knee"] == {"0": 4}
    assert "The rule's 4 workers (one process: both readings of the rule agree): enough for this process" in v.text
    assert v.numbers["windows"] == 2 and "enough for this process (2 windows a side)." in v.text  # review RR1 N5, R6-10
    assert "every rank" not in v.text
    three = rm.verdict_c17(_loader_run(rows({k: (*r, r[0]) for k, r in one.items()}, {4: (600, 606, 600)}), (), rule=4))
    assert three.numbers["windows"] == 3 and "(3 windows a side)" in three.text
    fewest = rm.verdict_c17(_loader_run(rows({k: (*r, r[0]) for k, r in one.items()}, {4: (600, 606)}), (), rule=4))
    assert fewest.numbers["windows"] == 2  # the fewest of any row: what a comparison may rest on
    slow = rm.verdict_c17(_loader_run(rows({**one, 4: (400, 404)}, {4: (600, 606)}), (), rule=4, gpus=1))
    assert slow.status == "partly" and slow.numbers["readings"] == {4: {"0": "NOT enough"}}


def test_c17_on_a_cpu_decides_nothing():
    v = rm.verdict_c17(_loader_run(rows(FLAT), gpus=0, label="CPU"))
    assert v.status == "unverifiable" and v.numbers == {"knee": [8, 8], "rule": 8, "undecided": {"0": [], "1": []}}
    assert rm.verdict_c17(_loader_run(rows(FLAT, {16: (900, 909)}), gpus=0, env_gpu=True, rule=16)).status == "holds"
    assert "for the same 32 cores" in v.text  # review M12: the run's cores, not "a few"


@pytest.mark.parametrize(
    "best, candidate, decided",
    [
        ((330, 330), (328, 328), True),  # -0.6 %: under compare's 1 % floor
        ((330, 333), (300, 340), False),  # -3.5 %: inside 0's 12.5 % spread, outside the best's 0.9 %
        ((300, 340), (290, 330), True),  # -3.1 %: inside both sides' spreads (12.5 % and 12.9 %)
        ((100, 110), (90.1, 100.1), True),  # -9.43 %: just inside the quieter side's 9.52 %
        ((100, 110), (90, 100), True),  # -9.52 %: exactly the quieter side's spread (in floats too): decided
        ((100, 110), (89.9, 99.9), False),  # -9.62 %: just outside it (inside the other side's 10.5 %)
        ((330, 330), (300, 300), False),  # -9.1 %: slower, not a "no change" at all
    ],
)
def test_a_no_change_is_decided_only_on_the_quieter_sides_spread_too(best, candidate, decided):
    """Review N9: a gap inside the noise only because one side's windows spread widely decides nothing."""
    assert rm.decided(compare(best, candidate, lower_is_better=False)) is decided


def test_c17_on_a_cpu_calls_a_count_undecided_when_only_its_spread_hides_the_gap():
    """Review N9's CPU run: both 0-worker windows (170, 261) below both 2-worker ones (327, 332): 0 workers is not
    "enough", it is undecided; 2 is the fewest within the noise of the best on both sides' spreads."""
    n9 = rows({0: (170.0, 261.0), 2: (327.0, 332.0)})
    v = rm.verdict_c17(_loader_run(n9, gpus=0, label="CPU"))
    assert v.status == "unverifiable" and v.numbers["knee"] == [2, 2]
    assert v.numbers["undecided"] == {"0": [0], "1": [0]}
    assert "0 workers: undecided" in v.text and "spread 42%" in v.text
    e = rm.enough_workers(n9)
    assert e["against_best"][0].status == "no change" and list(e["undecided"]) == [0]  # compare alone says alike
    overlap = rows({0: (300.0, 340.0), 2: (310.0, 350.0)})  # both spread 12-13 %: the gap of 3 % is inside both
    assert rm.verdict_c17(_loader_run(overlap, gpus=0)).numbers == {
        "knee": [0, 0],
        "rule": 8,
        "undecided": {"0": [], "1": []},
    }


WIDE8 = {0: (100, 101), 4: (500, 505), 8: (650, 900), 16: (802, 806)}  # 8 within the noise only by its own spread


@pytest.mark.parametrize(
    "rows0, rows1, pinned, status, states",
    [
        (WIDE8, WIDE8, {16: (1200, 1210)}, "undecided", {"0": "undecided", "1": "undecided"}),
        (WIDE8, FLAT, {16: (1200, 1210)}, "undecided", {"0": "undecided", "1": "enough"}),
        (WIDE8, {**FLAT, 8: (600, 606)}, {16: (1200, 1210)}, "partly", {"0": "undecided", "1": "NOT enough"}),
        (FLAT, FLAT, {16: (1200, 1210)}, "holds", {"0": "enough", "1": "enough"}),
    ],
)
def test_c17_on_gpus_is_undecided_when_the_rules_count_is(rows0, rows1, pinned, status, states):
    """On GPUs a reading's count undecided on a rank (and NOT enough on none, in any reading) leaves C17 undecided;
    NOT enough on any rank decides it (here pinned memory helps: partly). The rule 16 per rank, 8 per process: 16 is
    enough everywhere, 8 is what moves."""
    v = rm.verdict_c17(_loader_run(rows(rows0, pinned), rows(rows1, pinned), rule=16))
    assert v.status == status and v.numbers["readings"][8] == states
    assert v.numbers["rule_state"] == v.numbers["readings"][16] == {"0": "enough", "1": "enough"}
    assert v.numbers["rule_enough"] is (status == "holds") and v.numbers["pin_helps"]
    assert v.numbers["knee"]["0"] == (16 if rows0 is WIDE8 else 8)


def test_c17_recomputed_from_the_committed_2x_h200_run():
    """The committed run (commit 15fcf4b) timed the DataLoader alone, no training step: its rates (up to 2904
    samples/s) exceed the step alone (1270), so they cannot be the loop's. C17 is not decided from it; the verdict
    names the fewest workers that feed the step: 4 on both ranks (1395 and 1473 ≥ 1270; 2 gave 946 and 885)."""
    result = RunResult.load(MEASURED / "result.json")
    assert result.env.is_gpu and not rm.has_repeats(result) and rm.timed_the_loader_alone(result)
    assert all(isinstance(m, schema.TrapsRank) for m in rm.ranks(result))  # read through the layout it was written in
    v = claims.claim("C17").decider()(result)
    assert v.status == "unverifiable" and claims.claim("C17").evidence == "pending a 2× H200 run"
    n = v.numbers
    assert n["feed"] == {"0": 4, "1": 4} and n["rule"] == 8
    assert n["loader_alone_max"] == pytest.approx(2903.709, abs=1e-3)
    assert n["step_consumes"]["0"] == pytest.approx(1269.56, abs=0.01)
    assert n["step_consumes"]["1"] == pytest.approx(1269.61, abs=0.01)


@pytest.mark.parametrize(
    "rates0, rates1, feed",
    [
        ({0: 300, 2: 999, 4: 1000, 8: 2000}, None, {"0": 4, "1": 4}),  # 4 delivers exactly what the step takes
        ({0: 300, 2: 1000, 4: 1200}, None, {"0": 2, "1": 2}),  # one below: 2 is enough
        ({0: 300, 2: 999.9, 4: 1001}, {0: 300, 2: 1001, 4: 1001}, {"0": 4, "1": 2}),  # the ranks differ
        ({0: 300, 2: 999}, None, {"0": None, "1": None}),  # no count tried feeds the step
    ],
)
def test_c17_on_a_run_that_timed_the_loader_alone_names_the_workers_that_feed_the_step(rates0, rates1, feed):
    v = rm.verdict_c17(_old_loader_run(rates0, rates1, pinned={8: 5000}))  # a pinned row counts for neither
    assert v.status == "unverifiable" and v.numbers["feed"] == feed and v.numbers["rule"] == 8
    assert v.numbers["loader_alone_max"] == 5000.0


def test_the_old_format_is_told_apart_by_the_runs_parameters():
    old = _old_loader_run({0: 300, 4: 1000})
    assert rm.timed_the_loader_alone(old)
    new = _loader_run(rows(FLAT, {16: (900, 909)}), rule=16)
    assert not rm.timed_the_loader_alone(new) and rm.verdict_c17(new).status == "holds"
    # the 2026-11-30 workload named the traps it ran (`trap`); today's names its parts: each layout its own type
    assert schema.rank_type({"trap": ["dataloader"], "fixed": False}) is schema.TrapsRank
    assert schema.rank_type({"parts": ["dataloader"]}) is schema.rank_type({}) is schema.Rank
    with pytest.raises(ValueError, match="no rank timed the training loop"):
        rm.loaders(old)  # the loop's readers refuse a run that timed the loader alone


def test_has_repeats():
    assert rm.has_repeats(_loader_run(rows(FLAT)))
    one = _loader_run(rows({0: (1.0,)}))
    assert not rm.has_repeats(one)
    assert not rm.has_repeats(_loader_run([]))
    assert not rm.has_repeats(_old_loader_run({0: 3.0}))  # one rate per row


def test_the_loader_table_has_every_rank_and_the_step_alone():
    frame = rm.loader_frame(_loader_run(rows({0: (100, 110), 8: (800, 808)})))
    assert list(frame["rank"]) == [0, 0, 0, 1, 1, 1]
    assert list(frame["samples/s (median)"])[:3] == [105, 804, 1005]
    assert list(frame["spread"])[:3] == ["10%", "1%", "1%"] and list(frame["num_workers"])[2] == "input on the GPU"
    assert list(frame["windows"])[0] == "100 110"
    cpu = rm.loader_frame(_loader_run(rows({0: (100, 110)}), gpus=0))
    assert list(cpu["num_workers"])[1] == "input in memory"


def test_shards_line():
    def run(one, shards):
        return _loader_run(rows(FLAT), shards=schema.Shards(256, 65536, 64, tuple(one), tuple(shards)))

    faster = rm.shards_line(run([50.0, 52.0], [10.0, 10.2]))
    assert "5× less time per sample" in faster and "noise ±" in faster
    assert "2.0× more time per sample" in rm.shards_line(run([10.0, 10.2], [20.0, 20.4]))
    assert ": no change (noise" in rm.shards_line(run([10.0, 10.2], [10.0, 10.1]))
    assert rm.shards_line(_loader_run(rows(FLAT))) == "no shard measurement"
    once = _old_loader_run({0: 300}, shards=schema.ShardsOnce(256, 65536, 64, 56.9, 8.9))
    assert "read once" in rm.shards_line(once) and "no repeats" in rm.shards_line(once)


# --------------------------------------------------------------------------- out of memory, C19
def _oom(**states):
    return made.oom_run(empty_cache=made.states(**states))


@pytest.mark.parametrize(
    "kwargs, status",
    [
        ({}, "wrong"),  # freed nothing referenced; gave the cache back to the driver
        # memory below the live tensor: empty_cache() cannot free what is referenced, so the table does not add up
        ({"alive": 0.0}, "unverifiable"),
        ({"alive": 599.9}, "unverifiable"),  # just below the tensor
        ({"alive": 600.0, "alive_reserved": 600.0}, "wrong"),  # exactly the tensor, allocated and reserved
        ({"alive_reserved": 100.0}, "unverifiable"),  # less reserved than the live tensor
        ({"alive_reserved": 599.9}, "unverifiable"),
        ({"after_reserved": 602.0, "after_free": 1000.0}, "wrong"),  # did nothing at all
        (
            {"after_free": 1000.0},
            "unverifiable",
        ),  # the cache shrank but the driver got nothing: the table does not add up
        ({"after_reserved": 602.0}, "unverifiable"),
    ],
)
def test_c19_at_its_rule(kwargs, status):
    v = rm.verdict_c19(_oom(**kwargs))
    assert v.key == "C19" and v.status == status and v.where == "GPU"
    k = {"deleted_free": 1000.0, "after_free": 1600.0, "deleted_reserved": 602.0, "after_reserved": 2.0, **kwargs}
    assert v.numbers["returned_mib"] == k["after_free"] - k["deleted_free"]
    assert v.numbers["released_mib"] == k["deleted_reserved"] - k["after_reserved"]
    fell = kwargs.get("alive", 600.0) < 600.0 or kwargs.get("alive_reserved", 602.0) < 600.0
    assert v.numbers["referenced_fell"] is fell
    assert v.status != "holds"  # empty_cache() releases only unoccupied blocks: no table can make C19 hold


def test_c19_and_the_oom_tables_from_the_committed_2x_h200_run():
    result = RunResult.load(MEASURED / "result.json")
    v = rm.verdict_c19(result)
    assert v.status == claims.claim("C19").status == "wrong"
    assert v.numbers["allocated_after_empty_cache_alive_mib"] == pytest.approx(600.0005, abs=1e-3)
    assert v.numbers["returned_mib"] == v.numbers["released_mib"] == 600.0
    assert rm.oom_skipped(result) is None
    assert rm.oom_message(result).startswith("CUDA out of memory. Tried to allocate 128.00 MiB")
    frames = rm.oom_frames(result)
    assert (
        list(frames["fragmentation"]["outcome"]) == ["OOM", "fits", "fits"] and "message" not in frames["fragmentation"]
    )
    assert list(frames["empty_cache"]["step"])[0] == "start" and "message" not in frames["training"]
    assert rm.oom_fixes_verdict(result).status == "pass"
    assert list(frames["training"]["capped"]) == [False, True, True, True]  # upgraded: every row after the first


def test_the_oom_demo_without_a_gpu_and_its_fixes():
    skipped = made.skipped_run()
    assert rm.oom_skipped(skipped) == "skipped: needs a GPU"
    for decide in (rm.verdict_c19, rm.verdict_c20):
        v = decide(skipped)
        assert v.status == "unverifiable" and v.numbers == {} and v.where == "CPU"
    # the notebook prints the workload's whole message once; each verdict says its first sentence (review N5: it was
    # printed five times)
    long = made.skipped_run(message="skipped: needs a GPU. Why, at length. A command to run.")
    for decide in (rm.verdict_c19, rm.verdict_c20, rm.oom_fixes_verdict, rm.checkpointing_cost):
        assert decide(long).text == "not checked here: needs a GPU"
    assert rm.oom_fixes_verdict(skipped).status == "info"
    with pytest.raises(ValueError, match="not measured: skipped: needs a GPU"):
        rm.oom_frames(skipped)
    run = _oom()
    assert rm.oom_message(run) == "m1" and rm.oom_fixes_verdict(run).status == "pass"
    assert rm.oom_fixes_verdict(run).numbers["outcomes"] == {
        "no cap": "fits",
        "capped": "OOM",
        "2 parts": "fits",
        "checkpointed": "fits",
    }
    rows_ = run.ranks[0]["oom"]["training"]["rows"]  # the run's JSON, read again by each verdict
    rows_[3]["outcome"] = "OOM"
    assert rm.oom_fixes_verdict(run).status == "fail"
    rows_[3]["outcome"], rows_[1]["outcome"] = "fits", "fits"
    assert rm.oom_fixes_verdict(run).status == "fail"  # the cap did not bite
    rows_.append(dataclasses.asdict(made.training_row("extra", True)))
    rows_[1]["outcome"] = "OOM"
    assert rm.oom_fixes_verdict(run).status == "fail"  # 4 capped rows, not 3
    for r in run.ranks[0]["oom"]["training"]["rows"] + run.ranks[0]["oom"]["fragmentation"]:
        r["outcome"] = "fits"
    assert rm.oom_message(run) == "(no OOM happened: the cap did not bite)"


@pytest.mark.parametrize(
    "split_reserved, explained", [(800.0, True), (600.1, True), (600.0, False), (500.0, False), (None, False)]
)
def test_c20_says_why_max_split_size_mb_fixed_the_case_where_its_row_shows_it(split_reserved, explained):
    """Review M15: under max_split_size_mb the small tensor takes a segment of its own (more reserved than under the
    default, where it split the cached block); only then does the verdict explain the fix by it."""
    run = made.oom_run({"default": "OOM", "expandable_segments:True": "fits", SPLIT: "fits"})
    frag = run.ranks[0]["oom"]["fragmentation"]  # the run's JSON, read again by the verdict
    frag[0]["reserved_mib"], frag[2]["reserved_mib"] = 600.0, split_reserved
    v = rm.verdict_c20(run)
    assert v.status == "holds"
    said = f"took a segment of its own (reserved {split_reserved or 0:.0f} MiB, against 600 under the default)"
    assert (said in v.text) is explained and ("max_non_split_rounding_mb (20 MiB)" in v.text) is explained
    frag[0]["reserved_mib"] = None  # the default row without its reading: nothing to explain by
    assert "Why:" not in rm.verdict_c20(run).text


SPLIT = "expandable_segments:False,max_split_size_mb:256"


def test_c20_and_c19_on_the_committed_2x_h200_run_say_why_and_what_empty_cache_gives():
    """The committed run (through the real reader): max_split_size_mb's row reserved 800 MiB against the default's
    600, so the verdict explains the fix; C19 says what the cache handed back can serve (review M10); the run predates
    setting the allocator back after the fragmentation case, and the line under the tables says so (review S1)."""
    result = RunResult.load(MEASURED / "result.json")
    c20 = rm.verdict_c20(result)
    assert c20.status == "holds" and "(reserved 800 MiB, against 600 under the default)" in c20.text
    c19 = rm.verdict_c19(result)
    assert "bypass PyTorch's allocator (NCCL's buffers" in c19.text and "never PyTorch's own tensors" in c19.text
    assert "not recorded" in rm.allocator_line(result) and "max_split_size_mb:256 stayed in force" in rm.allocator_line(
        result
    )


@pytest.mark.parametrize(
    "launch, after, said",
    [
        (None, "expandable_segments:False", "expandable_segments:False (the launch set none: the default)"),
        (
            "garbage_collection_threshold:0.6",
            "expandable_segments:False,garbage_collection_threshold:0.6",
            "expandable_segments:False,garbage_collection_threshold:0.6 "
            "(the launch set garbage_collection_threshold:0.6)",
        ),
    ],
)
def test_the_line_under_the_oom_tables_names_the_allocator_they_ran_under(launch, after, said):
    run = made.oom_run()
    run.ranks[0]["oom"].update(launch_alloc_conf=launch, allocator_after=after)
    assert rm.allocator_line(run).endswith(said) and "set back to the launch's settings" in rm.allocator_line(run)


def test_an_old_layouts_training_rows_were_capped_after_the_first():
    """The 2026-11-30 workload wrote no ``capped`` flag: its upgrade says what the demo did (every row after the
    first under the cap); today's rows say it themselves."""
    old = {
        "traps": ["oom"],
        "fixed": True,
        "debug": "OFF",
        "seconds": {"oom": 1.0},
        "oom": {
            "launch_alloc_conf": None,
            "fragmentation": [{"config": "default", "cap_mib": 1024, "outcome": "fits", "free_under_cap_mib": 824}],
            "empty_cache": {"rows": []},
            "training": {
                "cap_mib": 4096.0,
                "model": "full",
                "batch": 16,
                "image_size": 256,
                "rows": [
                    {
                        "variant": "no cap",
                        "outcome": "fits",
                        "step_ms": 10.0,
                        "peak_allocated_mib": 1.0,
                        "peak_reserved_mib": 2.0,
                    },
                    {
                        "variant": "capped",
                        "outcome": "OOM",
                        "message": "m",
                        "peak_allocated_mib": 1.0,
                        "peak_reserved_mib": 2.0,
                    },
                ],
            },
        },
    }
    up = schema.TrapsRank.upgrade(json.loads(json.dumps(old)))
    assert [r["capped"] for r in up["oom"]["training"]["rows"]] == [False, True]
    assert up["oom"]["training"]["timed_steps"] is None and up["oom"]["training"]["rows"][0]["message"] is None
    assert up["oom"]["fragmentation"][0]["message"] is None and up["dataloader"] is None
    m = typed(schema.TrapsRank, old)
    assert m.oom is not None and m.oom.training is not None and m.oom.skipped is None
    assert [(r.capped, r.outcome, r.step_ms_repeats) for r in m.oom.training.rows] == [
        (False, "fits", None),
        (True, "OOM", None),
    ]
    today = {"parts": ["oom"], "oom": {"skipped": "skipped: needs a GPU"}}  # written before the result was typed
    assert typed(schema.Rank, today) == schema.Rank(parts=("oom",), oom=schema.Oom(skipped="skipped: needs a GPU"))
    assert schema.Rank.upgrade(json.loads(json.dumps(today)))["oom"]["fragmentation"] == []


# --------------------------------------------------------------------------- processes a run left behind
def test_processes_left_counts_live_ranks_only(tmp_path):
    """Children forked from the test (the mutation tool's selection keeps in-process tests, not subprocesses)."""
    alive, zombie, gone = forked("alive"), forked("zombie"), forked("gone")
    try:
        for name, text in {
            "rank0.pid": f"{alive}\n",
            "rank1.pid": str(gone),
            "rank2.pid": "not a pid",
            "rank3.pid": str(zombie),
            "agent.pid": str(alive),
        }.items():
            (tmp_path / name).write_text(text)
        run = made_run(tmp_path)
        assert rp.processes_left(run) == [alive]
        assert rp.processes_left(trap_of(run)) == [alive]  # a TrapRun holds its result
        (tmp_path / "rank0.pid").write_text(str(gone))  # agent.pid is no rank's: not counted
        assert rp.processes_left(run) == []
    finally:
        reap(alive, zombie)


def test_the_oom_fixes_verdict_says_where_it_was_measured():
    run = made.oom_run(training=made.training_rows(), label="GPU")
    v = rm.oom_fixes_verdict(run)
    assert v.status == "pass" and v.where == "GPU"


def test_c19_counts_half_a_mib_given_back_as_given_back():
    table = made.states(deleted_free=1000.0, after_free=1000.5)
    run = made.oom_run(empty_cache=table, label="GPU")
    v = rm.verdict_c19(run)
    assert v.numbers["returned_mib"] == 0.5 and v.numbers["released_mib"] == 600.0
    assert v.status == "wrong"  # both moved: what the lesson expects, not a table that fails to add up


HANG = DUMP[: DUMP.index("\nExtension modules")]
"""The first dump of :data:`DUMP` alone: a rank blocked in backward, with its watcher thread."""


def test_main_stack_reads_the_last_faulthandler_dump():
    frames = rp.main_stack(HANG + HANG.replace("line 88", "line 89"), -1)
    assert [f["func"] for f in frames][:3] == ["_engine_run_backward", "backward", "train_one_epoch"]
    assert frames[2]["line"] == 89, "which=-1: the last dump"
    assert rp.main_stack(HANG + HANG.replace("line 88", "line 89"))[2]["line"] == 88, "the first dump by default"
    assert rp.main_stack("no stacks here") == []
    point = rp.waiting_point(frames, lambda f: "")
    assert point.point == "backward" and point.frame == "validation.py:89 train_one_epoch"
    item = [frame("/x/validation.py", 9, "train_one_epoch"), frame("/x/validation.py", 99, "<module>")]
    assert rp.waiting_point(item, lambda f: "last = loss.item()").point == "item"
    assert rp.waiting_point(item, lambda f: "optimizer.step()").point == "elsewhere"


def test_hang_verdict_fails_when_the_stacks_contradict_the_lesson():
    validating = [frame("/x/v.py", 1, "evaluate"), frame("/x/v.py", 2, "<module>")]
    training = [frame("/x/v.py", 3, "train_one_epoch"), frame("/x/v.py", 4, "<module>")]
    verdict = rp.hang_verdict({0: validating, 1: training}, "nccl", "test", lambda f: "optimizer.step()")
    assert verdict.status == "fail" and verdict.numbers["rank1"] == "elsewhere"
    assert rp.hang_verdict({}, "gloo", "test").status == "fail"


def test_flight_recorder_dump_is_summarised(tmp_path):
    entries = [
        {"collective_seq_id": 7, "profiling_name": "nccl:all_reduce", "state": "completed", "input_sizes": [[4]]},
        {"collective_seq_id": 8, "profiling_name": "nccl:all_reduce", "state": "scheduled", "input_sizes": [[4]]},
    ]
    (tmp_path / "nccl_trace_rank_1").write_bytes(pickle.dumps({"version": "2.4", "entries": entries}))
    fr = rp.flight_recorder(tmp_path)
    assert fr[1].last_completed_seq == 7 and fr[1].pending[0].seq == 8
    lines = rp.describe_flight_recorder(made_run(tmp_path), "nccl")
    assert lines == ["rank 1: last completed collective #7; not completed: #8 nccl:all_reduce (scheduled)"]


def test_verdicts_on_recorded_lesson_outputs():
    assert (
        rp.mismatch_difference("... Collectives differ in the following aspects: \t Op type: ALLREDUCEvs BROADCAST")
        == "Op type: ALLREDUCEvs BROADCAST"
    )
    assert rp.mismatch_verdict("x", ["no report", None], True, "t").status == "fail"
    assert (
        rp.set_epoch_verdict([[[1, 2], [1, 2]], [[3, 4], [3, 4]]], [[[1, 2], [2, 1]], [[3, 4], [4, 3]]], "t").status
        == "pass"
    )
    assert (
        rp.set_epoch_verdict([[[1, 2], [1, 2]], [[1, 4], [1, 4]]], [[[1, 2], [2, 1]], [[3, 4], [4, 3]]], "t").numbers[
            "disjoint"
        ]
        is False
    )
    assert rp.fixed_validation_verdict([1.0, 1.1], 1.0, "t").status == "fail"
    assert rp.fixed_validation_verdict([1.0, None], 1.0, "t").status == "fail"


_rows = made.rows


def test_enough_workers_uses_the_noise_rule():
    rows = _rows({0: [100, 102], 2: [300, 310], 4: [400, 404], 8: [402, 398], 16: [405, 401]})
    e = rm.enough_workers(rows)
    assert e["best"] == 16 and e["knee"] == 4 and not e["still_rising"]
    assert e["against_best"][2].status == "slower"
    rising = rm.enough_workers(_rows({0: [100, 101], 8: [200, 201], 16: [300, 301]}))
    assert rising["knee"] == 16 and rising["still_rising"]
    assert rm.pin_comparison(_rows({8: [400, 404]}, {8: [500, 505]}), 8).status == "faster"
    assert rm.pin_comparison(_rows({8: [400, 404]}), 8) is None


def test_c17_verdict_on_gpu_shaped_rows():
    def result(pinned_rates):
        rows = _rows({0: [100, 102], 4: [400, 404], 8: [402, 398], 16: [405, 401]}, {8: pinned_rates})
        return made.loader_run(rows, step=(410, 412), label="test")

    assert rm.verdict_c17(result([500, 505])).status == "holds"
    no_change = rm.verdict_c17(result([401, 403]))
    assert no_change.status == "partly" and no_change.numbers["rule_enough"] and not no_change.numbers["pin_helps"]


def test_pin_within_noise_and_the_figure():
    rows = _rows({0: [100, 102], 8: [402, 398]}, {0: [101, 103], 8: [400, 401]})
    result = made.loader_run(rows, step=(410, 412), label="test")
    assert rm.pin_within_noise(result)
    faster = made.loader_run(_rows({8: [400, 404]}, {8: [500, 505]}), step=(410, 412), label="t")
    assert not rm.pin_within_noise(faster)
    from nvtutorial.chapters.ch06_pitfalls import plots as pp

    block = made.loader(rows, step=(410, 412))
    fig, ax = pp.loader_sweep([block, block], "test", rule=8, knees=[8, 8], pin_same=True)
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["pin_memory=False (True: the same within the noise)"]
    assert ax.get_ylim()[1] > 412


OLD_WORKLOAD_LINES = {
    # nvtutorial/chapters/ch06_pitfalls/workload.py at 15fcf4b, the commit the committed 06 reference ran from
    (
        "pitfalls.py",
        135,
    ): "loss = training.train_step(s, images, masks).item()  # .item(): the usual logging, and a sync",
}


def _result(run_dir: Path) -> dict[str, Any]:
    return json.loads((run_dir / "result.json").read_text())


def _as_result(run_dir: Path) -> RunResult:
    """A committed run, with its folder and log files found where it is committed."""
    result = RunResult.load(run_dir / "result.json")
    return dataclasses.replace(
        result, run_dir=run_dir, log_files={r: run_dir / f"rank{r}.log" for r in result.log_files}
    )


def _runs(predicate) -> list[Path]:
    """Committed runs whose ``(result.json, folder)`` satisfy ``predicate``, newest first."""
    found = [p.parent for p in RUNS.glob("*/result.json") if predicate(_result(p.parent), p.parent)]
    return sorted(found, key=lambda p: p.name.split("-", 1)[-1], reverse=True)


def _is_trap_script(data: dict[str, Any]) -> bool:
    return str(data.get("workload", "")).endswith("validation.py") and "--pg-timeout" in (
        (data.get("params") or {}).get("args") or []
    )


def _is_hang(data: dict[str, Any], folder: Path) -> bool:
    """Stacks taken while the validation trap hung: the lesson script's run (its ``trap.json``), or
    the old workload's run left to hang until the launcher's deadline."""
    if _is_trap_script(data):
        return (folder / "trap.json").is_file()
    params = data.get("params") or {}
    return (
        data.get("workload") == "pitfalls"
        and params.get("trap") == ["rank0_validation"]
        and params.get("validation_s", 0) >= 600
        and (data.get("error") or {}).get("type") == "Timeout"
    )


def _is_pg_timeout(data: dict[str, Any], folder: Path) -> bool:
    """The validation trap ended by a short process-group timeout."""
    if _is_trap_script(data):
        return True
    params = data.get("params") or {}
    return (
        data.get("workload") == "pitfalls"
        and params.get("trap") == ["rank0_validation"]
        and params.get("validation_s", 1e9) < 600
    )


def _line_of(frame: rp.Frame) -> str:
    """Source lines for the committed stacks: the old workload's from its commit, the lessons' from this checkout."""
    name = Path(frame["file"]).name
    if (name, frame["line"]) in OLD_WORKLOAD_LINES:
        return OLD_WORKLOAD_LINES[(name, frame["line"])]
    parts = Path(frame["file"]).parts
    if "nvtutorial" in parts:
        here = ROOT.joinpath(*parts[parts.index("nvtutorial") :])
        if here.is_file() and "lessons" in here.parts:
            lines = here.read_text().splitlines()
            return lines[frame["line"] - 1].strip() if frame["line"] <= len(lines) else ""
    return ""


def test_the_reference_holds_the_runs_these_tests_read():
    assert _runs(_is_hang), "no committed run of the validation trap left to hang"
    assert _runs(_is_pg_timeout), "no committed run of the validation trap with a short process-group timeout"


def test_on_nccl_the_waiting_rank_blocks_at_item_not_inside_backward():
    run = _runs(_is_hang)[0]
    stacks = rp.rank_stacks(_as_result(run))
    assert set(stacks) == {0, 1} and all(stacks.values()), "every rank's main-thread stack must be in its log"
    waiting = rp.waiting_point(stacks[1], _line_of)
    assert waiting.point == "item", waiting
    assert not any(f["func"] in ("backward", "_engine_run_backward") for f in stacks[1]), (
        "no frame of backward may be on the waiting rank's stack: NCCL only queued the all-reduce"
    )
    assert rp.waiting_point(stacks[0], _line_of).point == "validating"
    verdict = rp.hang_verdict(stacks, "nccl", "2× H200", _line_of)
    assert verdict.status == "pass" and verdict.numbers["rank1"] == "item" and verdict.numbers["rank0"] == "validating"
    assert rp.hang_answer(verdict) == "b"


def test_on_nccl_the_short_timeout_ends_the_run_through_the_watchdog():
    result = _as_result(_runs(_is_pg_timeout)[0])
    verdict = rp.timeout_verdict(result, "nccl", 3, result.label)
    assert verdict.status == "pass", verdict.text
    assert verdict.numbers["failed_rank"] == 1 and verdict.numbers["error_type"] == "SIGABRT"
    lines = [line for lines in rp.signature_lines(result, limit=20).values() for line in lines]
    assert any("Watchdog caught collective operation timeout" in line and "OpType=ALLREDUCE" in line for line in lines)


def test_the_flight_recorder_shows_the_waiting_ranks_all_reduces_queued_never_started():
    run = _runs(_is_pg_timeout)[0]
    fr = rp.flight_recorder(run)
    assert set(fr) == {0, 1}
    pending = fr[1].pending
    assert pending and all(e.state == "scheduled" and "all_reduce" in (e.op or "") for e in pending)
    assert fr[0].last_completed_seq == fr[1].last_completed_seq, "both ranks completed the same collectives"
    lines = rp.describe_flight_recorder(_as_result(run), "nccl")
    assert "not completed: none" in lines[0] and "(scheduled)" in lines[1]


def _measured_runs() -> list[Path]:
    return _runs(lambda d, _: d.get("workload") == "pitfalls" and d.get("error") is None and bool(d.get("ranks")))


def _measured(part: str) -> RunResult:
    """The newest committed ``pitfalls`` run that measured ``part``, through the project's reader (typed by
    ``report_measured.ranks``)."""
    runs = [r for r in _measured_runs() if part in _result(r)["ranks"][0]]
    assert runs, f"no committed pitfalls run measured {part}"
    return RunResult.load(runs[0] / "result.json")


def test_c19_and_c20_from_2x_h200_agree_with_the_registry():
    result = _measured("oom")
    for decide, claim_id in ((rm.verdict_c19, "C19"), (rm.verdict_c20, "C20")):
        verdict = decide(result)
        assert verdict.status == claims.claim(claim_id).status, verdict.text
    fixes = rm.oom_fixes_verdict(result)
    assert fixes.status == "pass", fixes.text


def test_c17_from_2x_h200_is_not_decided_by_a_run_that_timed_the_loader_alone():
    """The committed sweep timed the DataLoader alone, before the course timed the loop: C17 stays pending a 2× H200
    run, and the verdict says how many workers fed the step instead (tests/test_rules_pitfalls.py pins its numbers)."""
    verdict = rm.verdict_c17(_measured("dataloader"))
    assert verdict.status == "unverifiable", verdict.text
    assert claims.claim("C17").evidence == "pending a 2× H200 run"
    assert verdict.numbers["feed"] == {"0": 4, "1": 4}, "C17 is read on every rank"


@pytest.mark.parametrize("claim_id", ["C17", "C19", "C20", "C21"])
def test_the_registry_names_the_function_that_decides_each_claim(claim_id):
    claim = claims.claim(claim_id)
    assert claim.notebook == "06_pitfalls"
    assert callable(claim.decider())


def _oom_result(fragmentation: dict[str, str] | None = None, training: list[Any] | None = None) -> Any:
    return made.oom_run(fragmentation or {}, training or [], label="1× test GPU")


@pytest.mark.parametrize(
    "outcomes, status",
    [
        ({"default": "OOM", "expandable_segments:True": "fits", SPLIT: "fits"}, "holds"),  # the reference's case
        ({"default": "OOM", "expandable_segments:True": "OOM", SPLIT: "fits"}, "holds"),
        ({"default": "OOM", "expandable_segments:True": "fits", SPLIT: "OOM"}, "wrong"),
        ({"default": "fits", "expandable_segments:True": "fits", SPLIT: "fits"}, "unverifiable"),  # nothing to fix
        ({"default": "OOM", "expandable_segments:True": "fits"}, "unverifiable"),  # max_split_size_mb not measured
    ],
)
def test_c20_holds_when_max_split_size_mb_fixes_the_fragmentation(outcomes, status):
    verdict = rm.verdict_c20(_oom_result(outcomes))
    assert verdict.status == status, verdict.text
    assert verdict.numbers["max_split_size_mb"] == outcomes.get(SPLIT)
    assert verdict.numbers["expandable_segments"] == outcomes["expandable_segments:True"]


def test_c20_on_the_reference_is_holds_with_both_remedies():
    result = _measured("oom")
    verdict = rm.verdict_c20(result)
    assert verdict.status == claims.claim("C20").status == "holds"
    assert verdict.numbers == {
        "outcomes": {"default": "OOM", "expandable_segments:True": "fits", SPLIT: "fits"},
        "default": "OOM",
        "max_split_size_mb": "fits",
        "expandable_segments": "fits",
    }


def _step(variant: str, capped: bool, times: list[float] | None, outcome: str = "fits") -> Any:
    return made.training_row(variant, capped, outcome, times)


@pytest.mark.parametrize("ckpt_ms, status", [([51.0, 51.2, 51.1], "slower"), ([50.3, 50.2, 50.4], "no change")])
def test_checkpointing_cost_compares_repeated_steps_without_the_cap(ckpt_ms, status):
    """Both sides of the noise: the plain step's repeats spread 1 % (50.0-50.5 ms), so +2 % is slower, +0.4 % is not."""
    rows = [
        _step("batch 16, no cap", False, [50.0, 50.5, 50.2]),
        _step("batch 16 under the cap (the OOM)", True, None, "OOM"),
        _step("2 × batch 8, gradients accumulated", True, [60.0, 60.1, 60.2]),
        _step("batch 16, activation checkpointing", True, [90.0, 91.0, 90.5]),  # under the cap: not compared
        _step("batch 16, activation checkpointing, no cap", False, ckpt_ms),
    ]
    result = _oom_result({"default": "OOM"}, rows)
    verdict = rm.checkpointing_cost(result)
    assert verdict.status == status, verdict.text
    assert verdict.numbers["baseline"] == 50.2 and verdict.numbers["candidate"] == sorted(ckpt_ms)[1]
    assert rm.oom_fixes_verdict(result).status == "pass"  # the capped rows: OOM, then both fixes fit


def test_checkpointing_cost_is_not_read_from_one_step_after_installing_it():
    """The committed reference timed one capped step right after installing checkpointing: no conclusion from it."""
    result = _measured("oom")
    assert rm.checkpointing_cost(result).status == "info"
    assert (
        rm.oom_fixes_verdict(result).status == "pass"
    )  # older rows without the `capped` flag: every row after the first (TrapsRank.upgrade)
    skipped = made.skipped_run()
    assert rm.checkpointing_cost(skipped).status == "info" and rm.verdict_c20(skipped).status == "unverifiable"


# --------------------------------------------------------------------------- what notebook 06's cells pass
# Notebook 06's cells (the text of the committed 2x H200 copy, which the site shows only while every cell is unchanged)
# pass the plots and readers sections and rows as the run wrote them (``measured.ranks[r]["dataloader"]``, ...): each
# function types them through the schema and gives what it gives from the typed result.
def _pixels(fig):
    """What a figure shows, pixel for pixel (Agg), to tell two drawings apart."""
    import numpy as np

    fig.canvas.draw()
    return np.asarray(fig.canvas.buffer_rgba()).copy()


def _same_figures(a, b) -> bool:
    import matplotlib.pyplot as plt

    try:
        return bool((_pixels(a) == _pixels(b)).all())
    finally:
        plt.close(a)
        plt.close(b)


def test_the_oom_figure_takes_the_training_rows_as_the_run_wrote_them():
    """Cell 4dd5d80e: ``t = oom_run.ranks[0]["oom"]["training"]``, ``ch.plots.oom_fixes(t["rows"], t["cap_mib"],
    oom_run)``. The committed run's rows carry no ``capped`` flag: read as ``TrapsRank.upgrade`` reads them."""
    import matplotlib

    matplotlib.use("Agg")
    from nvtutorial.chapters.ch06_pitfalls import plots as pp
    from nvtutorial.chapters.ch06_pitfalls import schema

    measured = _measured("oom")
    t = measured.ranks[0]["oom"]["training"]
    typed_training = rm.oom(measured).training
    assert typed_training is not None and all("capped" not in row for row in t["rows"])
    assert schema.training_rows_typed(t["rows"]) == typed_training.rows
    assert [r.capped for r in typed_training.rows] == [False, True, True, True]
    assert schema.training_rows_typed(typed_training.rows) == typed_training.rows  # typed rows as they are
    raw_fig, raw_ax = pp.oom_fixes(t["rows"], t["cap_mib"], measured)
    typed_fig, typed_ax = pp.oom_fixes(typed_training.rows, typed_training.cap_mib, measured)
    assert [x.get_text() for x in raw_ax.get_yticklabels()] == [r["variant"] for r in t["rows"]]
    assert [x.get_text() for x in raw_ax.get_yticklabels()] == [x.get_text() for x in typed_ax.get_yticklabels()]
    assert _same_figures(raw_fig, typed_fig)


def test_the_loader_figure_and_enough_workers_take_the_sections_as_the_run_wrote_them():
    """Cell 487a5d83: ``loader_rows = [measured.ranks[r]["dataloader"] ...]``, ``rule=loader_rows[0]
    ["rule_of_thumb_workers"]``, ``knees=[ch.report_measured.enough_workers(d["rows"])["knee"] ...]``,
    ``ch.plots.loader_sweep(loader_rows, ...)``. The committed 2x H200 run timed the loader alone (another layout,
    which these functions refuse, raw as typed); today's layout is a made-up run written as a run writes it
    (``tests/pitfalls_results.py``)."""
    import matplotlib

    matplotlib.use("Agg")
    from nvtutorial.chapters.ch06_pitfalls import plots as pp
    from nvtutorial.chapters.ch06_pitfalls import schema

    old = _measured("dataloader")
    with pytest.raises(ValueError, match="unknown field .*for Loader"):
        schema.loader_typed(old.ranks[0]["dataloader"])
    with pytest.raises(ValueError, match="no rank timed the training loop"):
        rm.loaders(old)

    rows0 = made.rows({0: (100, 102), 4: (400, 404), 8: (402, 398)}, {4: (401, 405), 8: (400, 401)})
    rows1 = made.rows({0: (90, 92), 4: (300, 304), 8: (405, 401)}, {4: (301, 305), 8: (400, 406)})
    measured = made.loader_run(rows0, rows1, step=(410, 412))
    loader_rows = [measured.ranks[r]["dataloader"] for r in range(len(measured.ranks))]
    typed_loaders = rm.loaders(measured)
    assert [schema.loader_typed(d) for d in loader_rows] == typed_loaders
    raw_workers = [rm.enough_workers(d["rows"]) for d in loader_rows]
    assert raw_workers == [rm.enough_workers(d.rows) for d in typed_loaders]
    assert [w["knee"] for w in raw_workers] == [4, 8]
    pin_same = rm.pin_within_noise(measured)
    raw_fig, raw_ax = pp.loader_sweep(
        loader_rows,
        measured,
        rule=loader_rows[0]["rule_of_thumb_workers"],
        knees=[rm.enough_workers(d["rows"])["knee"] for d in loader_rows],
        pin_same=pin_same,
    )
    typed_fig, typed_ax = pp.loader_sweep(
        typed_loaders,
        measured,
        rule=typed_loaders[0].rule_of_thumb_workers,
        knees=[rm.enough_workers(d.rows)["knee"] for d in typed_loaders],
        pin_same=pin_same,
    )
    assert [t.get_text() for t in raw_ax.texts] == [t.get_text() for t in typed_ax.texts]
    assert _same_figures(raw_fig, typed_fig)
