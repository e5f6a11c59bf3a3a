"""Rules of chapters 00–04 that the mutation sample found untested: the numbers and ``where`` of verdicts, the busbw
exercise's formula and diagnoses, the known wrong answers of the exercises, the reference runs' loader. In-process
only: fake results and cells, no runs launched."""

from __future__ import annotations

import math
import types
from pathlib import Path

import pytest

from nvtutorial.chapters.ch00_welcome import report as welcome
from nvtutorial.chapters.ch01_hardware import exercises as busbw
from nvtutorial.chapters.ch01_hardware import report as bandwidth
from nvtutorial.chapters.ch01_hardware import report_lab as labreport
from nvtutorial.chapters.ch01_hardware import report_links as links
from nvtutorial.chapters.ch01_hardware import report_reference
from nvtutorial.chapters.ch02_environment import exercises as driver_rule
from nvtutorial.chapters.ch03_ddp_training import report as training
from nvtutorial.chapters.ch03_ddp_training import schema as train_schema
from nvtutorial.results import RunResult, typed
from tests.helpers.hardware_runs import run_of, sweep, sweep_row

LABEL = "2× NVIDIA H200 · NV18 (fake)"


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


# --------------------------------------------------------------------------- chapter 01: the busbw exercise
@pytest.mark.parametrize(
    ("collective", "size", "seconds", "n", "want"),
    [
        ("all_reduce", 1e9, 1.0, 2, 1.0),
        ("all_reduce", 4e9, 2.0, 4, 3.0),
        ("all_gather", 8e9, 1.0, 8, 7.0),
        ("all_gather", 1e9, 0.5, 2, 1.0),
        ("all_reduce", 4096, 2e-5, 1, 0.0),
    ],
)
def test_bus_bandwidth_is_gigabytes_of_10_to_the_9(collective, size, seconds, n, want):
    assert busbw.bus_bandwidth(collective, size, seconds, n) == pytest.approx(want, rel=1e-12, abs=1e-15)


def _factor(collective: str, n: int) -> float:
    return 2 * (n - 1) / n if collective == "all_reduce" else (n - 1) / n


@pytest.mark.parametrize(("collective", "size", "seconds", "n"), busbw.CASES)
def test_each_wrong_busbw_answer_is_exactly_its_slip(collective, size, seconds, n):
    """Each known wrong answer differs from nccl-tests' busbw by its one slip, on every case the checker runs."""
    algbw = size / seconds / 1e9
    right = algbw * _factor(collective, n)
    assert busbw.bus_bandwidth(collective, size, seconds, n) == pytest.approx(right, rel=1e-12)
    assert busbw._algbw_only(collective, size, seconds, n) == pytest.approx(algbw, rel=1e-12)
    assert busbw._all_reduce_factor_everywhere(collective, size, seconds, n) == pytest.approx(
        algbw * _factor("all_reduce", n), rel=1e-12
    )
    assert busbw._bits(collective, size, seconds, n) == pytest.approx(8 * right, rel=1e-12)
    assert busbw._gibibytes(collective, size, seconds, n) == pytest.approx(right * 1e9 / 2**30, rel=1e-12)


def _why(reason: str) -> str:
    """The diagnosis of a failed busbw check: what follows "<case>: expected … got …: "."""
    return reason.split(": ", 2)[2]


def test_busbw_checker_gives_each_slip_its_own_diagnosis():
    """Every known slip gets a diagnosis of its own that names its word, not the catch-all one."""
    passed, fallback = busbw.check_local(lambda *args: 12345.0)
    assert not passed
    fallback_why = _why(fallback)
    whys = {}
    for key, (candidate, word) in busbw.WRONG.items():
        passed, reason = busbw.check_local(candidate)
        assert not passed, key
        why = _why(reason)
        assert word in why and why != fallback_why, (key, reason)
        whys[key] = why
    assert len(set(whys.values())) == len(whys), whys


def test_busbw_checker_diagnoses_gibibytes_and_the_all_gather_factor_on_their_own_cases():
    """The GiB/s slip caught on a single all-reduce; the all-reduce factor on all_gather on 4 ranks."""

    def gib_reduce_only(collective, size, seconds, n):
        right = busbw.bus_bandwidth(collective, size, seconds, n)
        return right * 1e9 / 2**30 if collective == "all_reduce" else right

    def all_gather_doubled(collective, size, seconds, n):
        right = busbw.bus_bandwidth(collective, size, seconds, n)
        return 2 * right if collective == "all_gather" and n == 4 else right

    _, fallback = busbw.check_local(lambda *args: 12345.0)
    gib = _why(busbw.check_local(gib_reduce_only)[1])
    doubled = busbw.check_local(all_gather_doubled)[1]
    assert "on 4 ranks" in doubled
    assert gib != _why(fallback) and "10⁹" in gib
    assert _why(doubled) not in (_why(fallback), gib) and "all_gather" in _why(doubled)


# --------------------------------------------------------------------------- chapter 01: reports
def _fake_result(tmp_path: Path, name: str, busbw_at: dict[int, float], gpu: bool = True) -> RunResult:
    """An ``allreduce_bench`` run on 2× H200 (NV18), its label naming it (``name``: its runs tell apart)."""
    rows = [sweep_row(s, b, spread=0.01) for s, b in busbw_at.items()]
    result = run_of(sweep(rows), gpu=gpu, name=name, folder=tmp_path / name)
    assert name in result.label
    return result


def test_reference_check_says_where_when_no_checked_size_was_reached(tmp_path):
    result = _fake_result(tmp_path, "small", {1 << 20: 60.0})
    _, verdict = bandwidth.reference_check(result)
    assert verdict.status == "info" and verdict.where == result.label
    assert verdict.numbers["ratio at 1 GiB"] is None and verdict.numbers["ratio at 4 GiB"] is None


def _lab_run(result, name: str, env: dict[str, str] | None = None, summary: str = "P2P/CUMEM") -> labreport.LabRun:
    return labreport.LabRun(
        path=types.SimpleNamespace(name=name, env=env or {}),
        result=result,
        transport=types.SimpleNamespace(summary=summary, env_set=set(), version=None),
    )


def test_c7_without_a_common_size_says_where(tmp_path):
    a = _fake_result(tmp_path, "d", {1 << 20: 60.0})  # below the 16 MiB the GPU comparison starts at
    b = _fake_result(tmp_path, "s", {1 << 20: 61.0})
    verdict = labreport.claim_c7([_lab_run(a, "default"), _lab_run(b, "source's settings", {"NCCL_IB_DISABLE": "1"})])
    assert verdict.status == "unverifiable" and verdict.numbers["sizes"] == 0
    assert verdict.where == a.label


def test_lab_rows_keep_busbw_to_three_decimals(tmp_path):
    first = _fake_result(tmp_path, "d", {64 << 20: 250.1234, 1 << 30: 331.4567})
    second = _fake_result(tmp_path, "p", {64 << 20: 27.4444, 256 << 20: 27.5678})
    rows = labreport.lab_rows([_lab_run(first, "default"), _lab_run(second, "P2P off", {"NCCL_P2P_DISABLE": "1"})])
    assert [r["busbw there (GB/s)"] for r in rows] == [331.457, 27.568]
    assert rows[1]["default ÷ this, at the largest common size"] == round(250.1234 / 27.4444, 2)


def test_vendor_claims_say_they_come_from_vendor_data():
    assert links.claim_c2().where == links.VENDOR
    assert links.claim_c5().where == links.VENDOR


def test_reference_load_without_env_counts_the_ranks(tmp_path, monkeypatch):
    folder = tmp_path / "run-x"
    folder.mkdir()
    RunResult(
        workload="allreduce_bench",
        params={},
        returncode=1,
        wall_s=1.0,
        first_output_s=None,
        env=None,
        ranks=[{}, {}, {}],
        run_dir=folder,
        log_files={},
        log_tail=[],
    ).save()
    monkeypatch.setattr(report_reference, "FOLDER", tmp_path)
    monkeypatch.setattr(report_reference, "RUNS", {"x": "run-x"})
    result = report_reference.load("x")
    assert result.env is None and result.run_dir == folder
    assert result.log_files == {r: folder / f"rank{r}.log" for r in range(3)}


# --------------------------------------------------------------------------- chapter 02: the driver rule's slips
def test_no_minor_compatibility_fails_where_the_rule_warns_and_agrees_elsewhere():
    for driver, runtime, want in driver_rule.CASES:
        got = driver_rule._no_minor_compatibility(driver, runtime)
        assert got == ("fail" if want == "warn" else want), (driver, runtime, got)


# --------------------------------------------------------------------------- chapter 03: scaling numbers
def _train_row(variant: str, batch: int, sps: float, **extra) -> dict:
    return {
        "variant": variant,
        "code": "test",
        "per_gpu_batch": batch,
        "world_size": 2,
        "global_batch": 2 * batch,
        "status": "ok",
        "step_ms_rounds": [10.0, 10.0, 10.0],
        "step_ms": 10.0,
        "samples_per_s": sps,
        **extra,
    }


def _train_rank(rows: list) -> train_schema.Rank:
    """One CPU rank's typed result of the train workload with these rows."""
    setup = {"device": "cpu", "world_size": 4, "model": "tiny", "model_params": 1, "image_size": 16}
    return typed(train_schema.Rank, {**setup, "tf32_convolutions": None, "precision": "fp32", "rows": rows})


def test_scaling_efficiency_uses_the_rows_world_size():
    rows = [
        _train_row(training.SOLO, 32, 100.0, global_batch=32, world_size=1),
        _train_row("baseline", 32, 300.0, global_batch=128, world_size=4),
        _train_row("baseline", 16, 180.0, global_batch=64, world_size=4),
    ]
    summary = training.scaling_summary(_train_rank(rows))
    assert summary["fixed_per_gpu"]["speedup"] == pytest.approx(3.0)
    assert summary["fixed_per_gpu"]["efficiency"] == pytest.approx(0.75)
    assert summary["fixed_global"]["efficiency"] == pytest.approx(0.45)
    two = training.scaling_summary(_train_rank(rows[:1] + [_train_row("baseline", 32, 150.0, global_batch=64)]))
    assert two["fixed_per_gpu"]["efficiency"] == pytest.approx(0.75)  # world_size 2 in the row: 2 ranks
    no_world = {k: v for k, v in _train_row("baseline", 32, 150.0).items() if k != "world_size"}
    with pytest.raises(ValueError, match="missing field 'world_size' of Row"):  # a row always says its ranks
        _train_rank([no_world])


def test_c1_says_where_the_summary_was_measured():
    fixed = {"speedup": 1.8, "efficiency": 0.9}
    assert training.verdict_c1({"fixed_per_gpu": fixed, "where": LABEL}).where == LABEL
    assert training.verdict_c1({"fixed_per_gpu": fixed, "where": LABEL}, gpu=False).where == LABEL
    missing = training.verdict_c1({"fixed_per_gpu": None, "where": LABEL})
    assert missing.status == "info" and missing.where == LABEL
    assert math.isclose(training.verdict_c1({"fixed_per_gpu": fixed, "where": LABEL}).numbers["claimed"], 168 / 58)
