"""Notebook 00's verdicts and the prediction grader at their rules (``report/welcome.py``, ``report/predict.py``):
the first all-reduce, the failing and the hanging rank, nothing left, and each grade's boundary."""

from __future__ import annotations

import ast
import json
import math
import subprocess
import sys
import types

import pytest
import torch

from nvtutorial.chapters.ch00_welcome import report as welcome
from nvtutorial.report import predict
from nvtutorial.report.predict import PredictionError, grade_choice, grade_number
from tests.helpers.launch import requires_two_gpus
from tests.helpers.paths import ROOT
from tests.helpers.ranks import forked, reap


# --------------------------------------------------------------------------- grading a number
@pytest.mark.parametrize(
    "prediction, status",
    [
        (100.0, "right"),
        (125.0, "right"),
        (75.0, "right"),
        (125.1, "close"),
        (74.9, "close"),
        (200.0, "close"),
        (50.0, "close"),
        (200.1, "off"),
        (49.9, "off"),
        (1.0, "off"),
    ],
)
def test_grade_number_at_its_bounds(prediction, status):
    v = grade_number("k", prediction, 100.0, unit="GB/s", where="here", explanation="why")
    assert v.status == status and v.key == "k" and v.where == "here"
    assert v.numbers == {"prediction": prediction, "measured": 100.0, "unit": "GB/s", "ratio": prediction / 100.0}


def test_grade_number_bounds_can_be_moved_and_a_limit_named():
    assert grade_number("k", 110.0, 100.0, unit="x", where="", explanation="", right_within=0.05).status == "close"
    assert grade_number("k", 140.0, 100.0, unit="x", where="", explanation="", close_within=0.3).status == "off"
    assert grade_number("k", 130.0, 100.0, unit="x", where="", explanation="", close_within=0.3).status == "close"
    text = grade_number(
        "k", 500.0, 100.0, unit="GB/s", where="", explanation="e", limit=450.0, limit_name="physical limit of NV18"
    ).text
    assert text.endswith("No run can pass the physical limit of NV18 of 450 GB/s.")
    assert (
        "No run can pass"
        not in grade_number("k", 450.0, 100.0, unit="GB/s", where="", explanation="", limit=450.0).text
    )
    assert grade_number("k", 100.2, 100.0, unit="x", where="", explanation="").text.startswith(
        "You predicted 100.2 x: spot on"
    )
    assert "1% too high" in grade_number("k", 101.0, 100.0, unit="x", where="", explanation="").text
    assert "10% too low" in grade_number("k", 90.0, 100.0, unit="x", where="", explanation="").text
    assert (
        "The reference measured: 100 x. e"
        in grade_number(
            "k", 90.0, 100.0, unit="x", where="", explanation="e", measured_name="The reference measured"
        ).text
    )


def test_grade_number_without_a_prediction_and_with_bad_input():
    v = grade_number("k", None, 3.0, unit="x", where="", explanation="e")
    assert v.status == "no answer" and v.numbers == {"prediction": None, "measured": 3.0, "unit": "x"}
    for bad in (True, "12", math.nan, math.inf):
        with pytest.raises(PredictionError, match="write a number"):
            grade_number("k", bad, 3.0, unit="x", where="", explanation="")  # pyright: ignore[reportArgumentType] - bad input on purpose
    for bad in (0, -2.0):
        with pytest.raises(PredictionError, match="must be positive"):
            grade_number("k", bad, 3.0, unit="x", where="", explanation="")
    for measured in (0.0, -1.0, math.nan, "3"):
        with pytest.raises(ValueError, match="the measured value must be a positive number"):
            grade_number("k", 1.0, measured, unit="x", where="", explanation="")  # pyright: ignore[reportArgumentType] - bad input on purpose
    assert grade_number("k", 3, 3, unit="x", where="", explanation="").status == "right"  # integers are numbers


# --------------------------------------------------------------------------- grading a choice
CHOICES = {"a": "one", "b": "two", "C": "three"}


@pytest.mark.parametrize(
    "prediction, status",
    [("b", "right"), ("(b)", "right"), (" B ", "right"), ("a", "off"), ("c", "off"), (None, "no answer")],
)
def test_grade_choice(prediction, status):
    v = grade_choice("k", prediction, "b", CHOICES, where="w", explanation="e")
    assert v.status == status and v.numbers == {"prediction": prediction, "answer": "b"} and v.where == "w"
    if status == "off":
        assert v.text.startswith(f"You picked ({'C' if prediction == 'c' else prediction})")


def test_grade_choice_refuses_what_is_not_a_choice():
    with pytest.raises(PredictionError, match="pick one of a, b, C, not 'd'"):
        grade_choice("k", "d", "b", CHOICES, where="", explanation="")
    with pytest.raises(ValueError, match="the answer 'z' is not among the choices a, b, C"):
        grade_choice("k", "a", "z", CHOICES, where="", explanation="")
    assert grade_choice("k", "c", "C", CHOICES, where="", explanation="").status == "right"
    assert predict.grade_choice is grade_choice


# --------------------------------------------------------------------------- notebook 00
def test_the_first_all_reduce():
    v = welcome.first_allreduce([torch.full((3,), 3.0), torch.full((3,), 3.0)], [1.0, 2.0], "CPU")
    assert v.status == "pass" and v.numbers == {"expected": 3.0, "ranks": 2, "held": [[3.0], [3.0]]}
    bad = welcome.first_allreduce([torch.full((3,), 3.0), torch.tensor([3.0, 2.0])], [1.0, 2.0], "CPU")
    assert bad.status == "fail" and bad.numbers["held"] == [[3.0], [2.0, 3.0]]


@pytest.mark.parametrize("held, answer", [(1.0, "a"), (2.0, "b"), (3.0, "c"), (1.5, "d")])
def test_the_all_reduce_prediction(held, answer):
    values = [torch.full((2,), held)]
    assert welcome.grade_allreduce(answer, values, "").status == "right"
    assert welcome.grade_allreduce("a" if answer != "a" else "b", values, "").status == "off"


def test_the_other_reduce_ops_are_placed_on_the_backends_that_run_them(one_rank):  # noqa: F811 - the fixture
    """Review R1-15, checked on this torch's gloo (the CPU path): AVG and the bitwise ops run, PREMUL_SUM does not;
    torch's ReduceOp docstring: BAND/BOR/BXOR not with NCCL, PREMUL_SUM with NCCL (its docstring's 'AVG only with
    NCCL' predates pytorch#149781)."""
    import torch.distributed as dist

    text = welcome.grade_allreduce("c", [torch.full((2,), 3.0)], "").text
    assert "AVG (NCCL, and gloo since pytorch#149781)" in text and "PREMUL_SUM (NCCL, not gloo)" in text
    assert "BAND, BOR, BXOR (not with NCCL)" in text
    for op, dtype in ((dist.ReduceOp.AVG, torch.float32), (dist.ReduceOp.BAND, torch.int32)):
        dist.all_reduce(torch.ones(2, dtype=dtype), op=op)  # gloo runs them
    with pytest.raises(RuntimeError, match="PREMUL_SUM with Gloo"):
        # torch's stubs type op as ReduceOp.RedOpType and keep the premul factory private; the test needs both
        dist.all_reduce(torch.ones(2), op=dist._make_nccl_premul_sum(2.0))  # pyright: ignore[reportArgumentType, reportPrivateImportUsage]
    assert "BAND`, `BOR`, and `BXOR` reductions are not available when\nusing the `NCCL` backend" in (
        (dist.ReduceOp.__doc__ or "").replace("``", "`")
    )


def test_the_all_reduce_prediction_without_a_choice_that_fits():
    v = welcome.grade_allreduce("c", [torch.full((2,), 6.0)] * 3, "here")
    assert v.status == "info" and v.numbers == {"held": 6.0} and "were there 3 ranks?" in v.text


def _failed(tmp_path, rank=1, exc="RuntimeError", env=True, pids=()):
    for i, pid in enumerate(pids):
        (tmp_path / f"rank{i}.pid").write_text(str(pid))
    result = types.SimpleNamespace(run_dir=tmp_path, env=object() if env else None, label="2 processes")
    return types.SimpleNamespace(rank=rank, exc_type=exc, result=result)


@pytest.mark.parametrize(
    "rank, exc, status", [(1, "RuntimeError", "pass"), (0, "RuntimeError", "fail"), (1, "ValueError", "fail")]
)
def test_the_failing_rank_is_named(tmp_path, rank, exc, status):
    v = welcome.crash(_failed(tmp_path, rank, exc))
    assert v.status == status and v.numbers == {"rank": rank, "exception": exc, "processes_left": 0}
    assert v.where == "2 processes" and welcome.crash(_failed(tmp_path), where="ignored").where == "2 processes"


def test_a_process_left_fails_the_crash_check(tmp_path):
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        v = welcome.crash(_failed(tmp_path, pids=(child.pid,), env=False), where="the machine")
        assert v.status == "fail" and v.numbers["processes_left"] == 1 and v.where == "the machine"
        assert welcome.nothing_left([child.pid], "stop").numbers == {"processes": 1, "left": 1}
        assert welcome.nothing_left([child.pid], "stop").status == "fail"
    finally:
        child.kill()
        child.wait()
    assert welcome.processes_left([child.pid]) == [] and welcome.nothing_left([child.pid], "stop").status == "pass"
    (tmp_path / "rank5.pid").write_text("garbage")
    assert welcome._pids(tmp_path) == [child.pid]


def test_the_innermost_cell_line_of_a_stack():
    stack = (
        'Traceback:\n  File "<ranks cell 3>", line 2, in <module>\n    helper()\n'
        '  File "<ranks cell 3>", line 7, in helper\n    dist.all_reduce(t)  # waits\n  File "x.py", line 1, in y\n'
    )
    assert welcome.stuck_line(stack) == "dist.all_reduce(t)  # waits"
    assert welcome.stuck_line('  File "<ranks cell 1>", line 2, in <module>') is None  # no line after it
    assert welcome.stuck_line(None) is None and welcome.stuck_line("") is None


def outcome(rank, status, stack=None):
    return types.SimpleNamespace(rank=rank, status=status, stack=stack)


def cell(line="dist.all_reduce(t)  # rank 1 never calls it", reason="timeout", others="ok", kept=True, stuck="timeout"):
    stack = f'  File "<ranks cell 2>", line 4, in <module>\n    {line}\n' if line else ""
    return types.SimpleNamespace(
        reason=reason, timeout=5.0, group_kept=kept, outcomes=[outcome(0, stuck, stack), outcome(1, others)]
    )


@pytest.mark.parametrize(
    "kwargs, backend, status",
    [
        ({}, "gloo", "pass"),
        ({"line": "x = t.item()"}, "nccl", "pass"),
        ({"line": "x = t.item()"}, "gloo", "fail"),
        ({}, "nccl", "fail"),
        ({"reason": "error"}, "gloo", "fail"),
        ({"others": "timeout"}, "gloo", "fail"),
        ({"kept": False}, "gloo", "fail"),
        ({"stuck": "ok"}, "gloo", "fail"),
        ({"line": None}, "gloo", "fail"),
    ],
)
def test_the_hanging_rank(kwargs, backend, status):
    v = welcome.hang(cell(**kwargs), backend)
    assert v.status == status and v.numbers["expected"] == welcome.WAITS_AT[backend] and v.numbers["deadline_s"] == 5.0
    assert v.where == ("GPUs, NCCL" if backend == "nccl" else "CPU, gloo: a simulation, not a GPU measurement")
    if status == "pass":
        assert "`" + kwargs.get("line", "dist.all_reduce(t)").split("#")[0].strip() + "`" in v.text


def test_the_hang_with_no_stuck_rank_and_its_prediction():
    lone = types.SimpleNamespace(reason="timeout", timeout=5.0, group_kept=True, outcomes=[outcome(1, "ok")])
    assert welcome.hang(lone, "gloo").status == "fail" and welcome.hang(lone, "gloo").numbers["stuck_line"] is None
    assert welcome.grade_hang("a", cell(), "gloo").status == "right"
    assert welcome.grade_hang("b", cell(line="x = t.item()"), "nccl").status == "right"
    assert welcome.grade_hang("c", cell(reason="ok"), "gloo").status == "right"
    elsewhere = welcome.grade_hang("a", cell(line="time.sleep(1)"), "gloo")
    assert elsewhere.status == "info" and elsewhere.numbers == {"stuck_line": "time.sleep(1)"}
    assert (elsewhere.key, elsewhere.where) == ("where rank 0 waits", "CPU, gloo: a simulation, not a GPU measurement")
    assert welcome.grade_hang("a", lone, "gloo").status == "info"
    assert welcome.grade_hang(None, cell(), "nccl").where == "GPUs, NCCL"


def test_nothing_left_counts_live_processes_only():
    alive, zombie, gone = forked("alive"), forked("zombie"), forked("gone")
    try:
        assert welcome.processes_left([alive, zombie, gone]) == [alive]
        v = welcome.nothing_left([alive, zombie, gone], "the stop button")
        assert (v.key, v.status, v.numbers, v.where) == (
            "nothing left running",
            "fail",
            {"processes": 3, "left": 1},
            "this machine",
        )
        assert str(alive) in v.text
        v = welcome.nothing_left([zombie, gone], "the stop button")
        assert (v.status, v.numbers) == ("pass", {"processes": 2, "left": 0})
        assert welcome.nothing_left([], "x").numbers == {"processes": 0, "left": 0}
    finally:
        reap(alive, zombie)


def test_the_pids_a_run_wrote(tmp_path):
    (tmp_path / "rank0.pid").write_text("123\n")
    (tmp_path / "rank1.pid").write_text("garbage")
    (tmp_path / "rank2.pid").mkdir()  # unreadable as a file
    (tmp_path / "agent.pid").write_text("9")
    assert welcome._pids(tmp_path) == [123] and welcome._pids(str(tmp_path)) == [123]


# --------------------------------------------------------------------------- chapter 00: the hang's numbers
def _hung_cell(reason: str = "timeout") -> types.SimpleNamespace:
    stack = 'Traceback (most recent call last):\n  File "<ranks cell 3>", line 4, in <module>\n    dist.all_reduce(t)\n'
    outcomes = [
        types.SimpleNamespace(rank=0, status="timeout", stack=stack),
        types.SimpleNamespace(rank=1, status="ok", stack=None),
    ]
    return types.SimpleNamespace(outcomes=outcomes, reason=reason, group_kept=True, timeout=2.0)


def test_hang_numbers_carry_the_cells_reason():
    verdict = welcome.hang(_hung_cell(), backend="gloo")
    assert verdict.status == "pass"
    assert verdict.numbers["reason"] == "timeout" and verdict.numbers["stuck_rank"] == 0
    assert verdict.numbers["others"] == {1: "ok"} and verdict.numbers["deadline_s"] == 2.0
    failed = welcome.hang(_hung_cell("error"), backend="gloo")
    assert failed.status == "fail" and failed.numbers["reason"] == "error"


def _notebook_code(name: str) -> list[str]:
    nb = json.loads((ROOT / "notebooks" / name).read_text())
    return ["".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "code"]


def _hang_code() -> str:
    (cell,) = [c for c in _notebook_code("00_welcome.ipynb") if c.startswith("HANG = ")]
    assign = ast.parse(cell).body[0]
    assert isinstance(assign, ast.Assign)  # the cell starts with "HANG = "
    return ast.literal_eval(assign.value)


def _first_cell() -> str:
    (cell,) = [c for c in _notebook_code("00_welcome.ipynb") if c.startswith("%%ranks") and "rank + 1" in c]
    return cell.split("\n", 1)[1]


def test_first_allreduce_and_the_hang_as_notebook_00_runs_them():
    """On gloo: every rank holds the sum; the hang is caught at the line the notebook names, counted from the cell."""
    from nvtutorial.teach import ranks

    pool = ranks.start(nproc=2, backend="gloo", quiet=True)
    pids = list(pool.pids())
    try:
        assert ranks.run_code(_first_cell()).ok
        held = ranks.pull("t")
        assert welcome.first_allreduce(held, [1, 2], "CPU").status == "pass"
        assert welcome.grade_allreduce("c", held, "CPU").status == "right"
        assert welcome.grade_allreduce("b", held, "CPU").status == "off"
        hung = ranks.run_code(_hang_code(), timeout=2)
        verdict = welcome.hang(hung, backend="gloo")
        assert verdict.status == "pass", verdict
        assert verdict.numbers["stuck_line"].startswith("dist.all_reduce(t)") and verdict.numbers["others"] == {1: "ok"}
        wrong = welcome.hang(hung, backend="nccl")  # the NCCL expectation does not match a gloo stack
        assert wrong.status == "fail"
        # the prediction is graded from the stack: with gloo rank 0 waits inside all_reduce, choice (a)
        assert welcome.grade_hang("a", hung, backend="gloo").status == "right"
        graded = welcome.grade_hang("b", hung, backend="gloo")
        assert graded.status == "off" and graded.numbers["answer"] == "a"
    finally:
        ranks.stop()
    assert welcome.nothing_left(pids, "stop").status == "pass"


@requires_two_gpus
def test_the_hang_on_two_gpus_waits_at_the_first_use_of_the_result():
    from nvtutorial.teach import ranks

    ranks.start(nproc=2, backend="nccl", quiet=True)
    try:
        # As the notebook does: the first all-reduce runs before the hang. On 2x H200 (torch 2.11,
        # NCCL 2.28.9) the hang run as the group's first collective was not waiting at .item().
        assert ranks.run_code(_first_cell()).ok
        hung = ranks.run_code(_hang_code(), timeout=10)
        verdict = welcome.hang(hung, backend="nccl")
        assert verdict.status == "pass" and ".item()" in verdict.numbers["stuck_line"], (
            verdict.numbers,
            "\n".join(hung.report()),
        )
        assert welcome.grade_hang("b", hung, backend="nccl").status == "right"
    finally:
        ranks.stop()


def test_the_stuck_line_is_read_from_the_innermost_cell_frame():
    stack = (
        'Stack (most recent call last):\n  File "<ranks cell 2>", line 4, in <module>\n    total = t.sum().item()\n'
        '  File "/x/torch/_tensor.py", line 1, in item\n    return 1'
    )
    assert welcome.stuck_line(stack) == "total = t.sum().item()"
    assert welcome.stuck_line(None) is None
