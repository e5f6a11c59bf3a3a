"""Chapter 6's lab: the traps run as notebook 06 runs them (the hang and its stacks, the timeout, the fixes,
the lessons), where its plan puts each measurement, and the validation checker on live ranks."""

from __future__ import annotations

import json
import types

import pytest

import nvtutorial
from nvtutorial import course
from nvtutorial.chapters.ch06_pitfalls import exercises as ex
from nvtutorial.chapters.ch06_pitfalls import lab as traps
from nvtutorial.chapters.ch06_pitfalls import report as rp
from nvtutorial.report import claims
from tests.helpers.launch import assert_nothing_left, requires_two_gpus

TINY = ["--model", "tiny", "--image-size", "16", "--batch-size", "4", "--samples", "16"]


@pytest.fixture(scope="module")
def trap(tmp_path_factory):
    """The trap: rank 0 validates 100,000 samples alone; the stacks 2 s after both ranks reached
    it; the process group's 4 s timeout ends the run."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("NVTUTORIAL_RUNS_DIR", str(tmp_path_factory.mktemp("runs")))
        return traps.run_trap(
            traps.VALIDATION,
            args=[*TINY, "--val-samples", "100000", "--pg-timeout", "4"],
            stacks_after_s=2,
            env={
                "TORCH_FR_BUFFER_SIZE": "2000",
                "TORCH_NCCL_DUMP_ON_TIMEOUT": "1",
                "TORCH_NCCL_WAIT_TIMEOUT_DUMP_MILSEC": "1000",
            },
            timeout=240,
            output="none",
        )


def test_the_stacks_are_taken_after_the_trap_not_after_the_launch(trap):
    assert trap.stacks_taken and trap.reached_after_s is not None
    record = json.loads((trap.result.run_dir / "trap.json").read_text())
    assert record["stacks_after_s"] == 2 and record["taken_after_s"] >= record["reached_after_s"] + 2
    assert "printed its stacks" in trap.how


def test_the_stacks_show_where_each_rank_waits(trap):
    stacks = rp.rank_stacks(trap)
    assert set(stacks) == {0, 1} and all(stacks.values()), "every rank's main-thread stack must be in its log"
    assert any(f["func"] == "validate_rank0_only" for f in stacks[0]), "rank 0 validates alone"
    assert not any(f["func"] == "validate_rank0_only" for f in stacks[1])
    assert any(f["func"] == "train_one_epoch" for f in stacks[1]), "rank 1 is training its next epoch"
    verdict = rp.hang_verdict(stacks, trap.backend, trap.where)
    assert verdict.status == "pass", verdict.text
    expected = "item" if trap.backend == "nccl" else "backward"
    assert verdict.numbers["rank0"] == "validating" and verdict.numbers["rank1"] == expected
    if trap.backend == "gloo":  # gloo: the host waits inside backward, where DDP waits for the CPU all-reduce
        assert any(f["func"] == "_engine_run_backward" for f in stacks[1])
        assert rp.hang_answer(verdict) == "a"
        assert "simulation" in trap.where


def test_the_process_group_timeout_ends_the_hang_with_an_error_and_leaves_nothing(trap):
    assert not trap.ok
    verdict = rp.timeout_verdict(trap, trap.backend, 4, trap.where)
    assert verdict.status == "pass", verdict.text
    error = trap.result.error
    assert error["rank"] == 1
    if trap.backend == "gloo":  # rank 1's backward raises: its all-reduce timed out waiting for rank 0
        assert error["type"] == "RuntimeError" and "Timed out" in error["message"]
        assert "backward" in error.get("traceback", "")
        assert rp.describe_flight_recorder(trap, "gloo")[0].startswith("no flight-recorder dump")
    assert rp.processes_left(trap) == []
    assert_nothing_left(trap.result.run_dir, within=5.0)


def test_the_fix_agrees_with_one_process_and_decides_c18(trap, runs_dir):
    result = nvtutorial.run(str(traps.VALIDATION), args=[*TINY, "--fixed"], timeout=240, output="none")
    values = [m["val_loss"] for m in result.ranks]
    single = result.ranks[0]["single_process_val_loss"]
    fixed = rp.fixed_validation_verdict(values, single, result.label)
    assert fixed.status == "pass", fixed.text
    hang_verdict = rp.hang_verdict(rp.rank_stacks(trap), trap.backend, trap.where)
    timeout = rp.timeout_verdict(trap, trap.backend, 4, trap.where)
    c18 = rp.verdict_c18(hang_verdict, timeout, fixed)
    assert c18.status == claims.claim("C18").status == "partly"


def test_collectives_lesson_reports_each_mismatch_and_fixes_it(runs_dir):
    result = nvtutorial.run(str(traps.lesson("collectives")), timeout=240, output="none")
    errors = {name: [m[name].get("error") for m in result.ranks] for name in ("shapes", "order")}
    shapes = rp.mismatch_verdict(
        "mismatched shapes",
        errors["shapes"],
        all(len(m["shapes fixed"]["result"]) == 30 for m in result.ranks),
        result.label,
    )
    order = rp.mismatch_verdict(
        "mismatched order",
        errors["order"],
        all(m["order fixed"]["result"][0] == [3.0] for m in result.ranks),
        result.label,
    )
    assert shapes.status == order.status == "pass", (shapes.text, order.text)
    assert "shapes" in rp.mismatch_difference(errors["shapes"][0])
    assert "Op type" in rp.mismatch_difference(errors["order"][0])


def test_randomness_lesson_decides_set_epoch_and_c21(runs_dir):
    result = nvtutorial.run(str(traps.lesson("randomness")), timeout=240, output="none")
    orders = [m["orders"] for m in result.ranks]
    set_epoch = rp.set_epoch_verdict([o["broken"] for o in orders], [o["fixed"] for o in orders], result.label)
    assert set_epoch.status == "pass", set_epoch.text
    c21 = rp.verdict_c21(
        [m["weights"] for m in result.ranks],
        [m["crops"]["broken"] for m in result.ranks],
        [m["crops"]["fixed"] for m in result.ranks],
        result.label,
    )
    assert c21.status == claims.claim("C21").status, c21.text
    assert c21.numbers["same_crops_same_seed"] == c21.numbers["crops"] > c21.numbers["same_crops_seed_plus_rank"]
    assert c21.numbers["weight_sums_before"] == 2 and c21.numbers["weight_sums_after"] == 1


def _notebook_06(monkeypatch, gpus: int, **values) -> dict:
    """Notebook 06's set-up and plan cells, run as the kernel runs them, on a machine with ``gpus`` H200s."""
    from tests.helpers import notebook_cells

    machine = course.Machine(("NVIDIA H200",) * gpus, 16, "2.28.9" if gpus else None)
    monkeypatch.setattr(course.Machine, "here", classmethod(lambda cls: machine))
    return notebook_cells.run("06_pitfalls", ["94b48aff", "c1827bed"], **values)


@pytest.mark.parametrize(
    "gpus, profile, launches",
    [
        (0, "auto", [(2, "gloo", ["oom", "dataloader"], 8, 8, [0, 2], 300)]),  # one run, the OOM demo says why
        (1, "auto", [(1, "nccl", ["oom", "dataloader"], 32, 16, [0, 2, 4, 8], 600)]),  # one process does both
        (1, "ci", [(1, "nccl", ["oom", "dataloader"], 8, 8, [0, 2], 300)]),
        (
            2,
            "auto",
            [
                (2, "nccl", ["dataloader"], 32, None, [0, 2, 4, 8, 12, 16], 600),
                (1, "nccl", ["oom"], None, 16, None, 600),
            ],
        ),
    ],
)
def test_each_measurement_runs_where_the_notebooks_plan_puts_it(monkeypatch, capsys, gpus, profile, launches):
    """Reviews N5 and S4, through notebook 06's own cells: on one GPU the out-of-memory demo and the input pipeline run
    on it in one NCCL process, the demo first, with the lesson's model and images (the demo has no collective; the
    rule counts workers per GPU process), in one launch, the loader with fewer worker counts and windows, said under
    the plan (review RR1 N5) and out of the OOM part's 'where' NCCL's version (N8) (0, 2, 4, 8; 2 windows of 5 steps;
    pinned at 4 only). Each launch: ranks, backend, parts, the loader batch and the OOM batch of its sizes (small: 8
    and 8; the lesson's: 32 and 16; None: a parameter its parts do not read, left out: review M13), the worker
    counts and its deadline."""
    ns = _notebook_06(monkeypatch, gpus, profile=profile)
    assert ns["P"] == ns["SIZES"]["full" if gpus == 2 and profile == "auto" else "ci"]
    assert ns["LOADER"].need == ("one GPU" if gpus == 1 else "two GPUs") and ns["LOADER"].gpus == gpus
    subset = "data loading on one GPU: the lesson's model and images; workers [0, 2, 4, 8], pinned memory at [4] only"
    assert (subset + ", 2 windows of 5 steps a count" in capsys.readouterr().out) is (gpus == 1 and profile == "auto")
    assert "NCCL" not in ns["PLAN"]["out of memory"].where and ("NCCL 2.28.9" in ns["LOADER"].where) is (gpus > 0)
    seen = []

    def run(workload, **kw):
        seen.append((workload, kw))
        return types.SimpleNamespace(label="a fake run")

    monkeypatch.setattr(traps.launch, "run", run)
    from tests.helpers import notebook_cells

    with pytest.raises(Exception):  # noqa: B017 - the cell goes on to read the fake run: what it launched is the test
        exec(notebook_cells.cells("06_pitfalls")["487a5d83"].source, ns)  # noqa: S102 - the notebook's own cell
    got = [
        (kw["nproc"], kw["backend"], kw["params"]["parts"])
        + tuple(kw["params"].get(k) for k in ("loader_batch", "oom_batch", "workers"))
        + (kw["timeout"],)
        for _, kw in seen
    ]
    assert got == launches and {w for w, _ in seen} == {"pitfalls"}
    one_gpu = gpus == 1 and profile == "auto"
    assert (seen[0][1]["params"].get("pin_workers"), seen[0][1]["params"]["windows"]) == (
        ([4], 2) if one_gpu else (None, ns["P_LOADER"]["windows"])
    )
    said = capsys.readouterr().out
    assert ("One training process on this GPU: " in said) is (gpus == 1)
    traps.measure(ns["P_OOM"], ns["PLAN"]["out of memory"], parts=["oom"])  # alone: one rank, on the CPU without a GPU
    assert (seen[-1][1]["nproc"], seen[-1][1]["backend"]) == (1, "nccl" if gpus else "gloo")
    assert set(seen[-1][1]["params"]) == {"parts", "oom_model", "oom_batch", "oom_image_size"}  # M13
    assert "needs a GPU" not in said + str(ns["PLAN"]) or gpus == 0


def test_bad_input_fails_before_anything_starts():
    with pytest.raises(nvtutorial.LaunchError, match="windows"):
        nvtutorial.launch.prepare("pitfalls", params={"windows": 1})
    with pytest.raises(nvtutorial.LaunchError, match="parts"):
        nvtutorial.launch.prepare("pitfalls", params={"parts": ("rank0_validation",)})
    with pytest.raises(ValueError, match="stacks_after_s"):
        traps.run_trap(traps.VALIDATION, stacks_after_s=0)
    with pytest.raises(FileNotFoundError, match="the pitfall lessons are collectives, input_pipeline"):
        traps.lesson("nope")


@requires_two_gpus
def test_memory_lesson_fits_with_the_fixes(runs_dir):
    result = nvtutorial.run(str(traps.lesson("memory")), timeout=300, output="none")
    for m in result.ranks:
        assert m["outcome"]["whole batch"].startswith("OOM")
        assert m["outcome"]["2 parts, accumulated"] == m["outcome"]["checkpointed"] == "fits"


@pytest.fixture(scope="module")
def group():
    from nvtutorial.teach import ranks

    ranks.start(quiet=True)
    yield ranks
    ranks.stop()


def test_the_checker_passes_the_solution(group):
    result = traps.check_validation(ex.SOLUTION)
    assert result.passed, result.reason
    assert "each rank read its own share (4 + 3 samples)" in result.reason


@pytest.mark.parametrize("name", list(ex.WRONG))
def test_the_checker_names_what_is_wrong(group, name):
    candidate, words = ex.WRONG[name]
    result = traps.check_validation(candidate)
    assert not result.passed and words in result.reason, result.reason
    if words == "hung":
        assert "rank 1 waited in the next training step" in result.reason and "rank 0 validated alone" in result.reason


def test_the_checker_says_when_the_code_does_not_define_the_function(group):
    result = traps.check_validation("def something_else():\n    return 1\n")
    assert not result.passed and "defines no function 'validate_accuracy'" in result.reason
