"""Tests of nvtutorial/chapters/ch01_hardware/exercises*.py."""

from __future__ import annotations

import pytest

from nvtutorial.chapters.ch01_hardware import exercises as busbw


def _factor(collective: str, n: int) -> float:
    return 2 * (n - 1) / n if collective == "all_reduce" else (n - 1) / n


def _why(reason: str) -> str:
    """The diagnosis of a failed busbw check: what follows "<case>: expected … got …: "."""
    return reason.split(": ", 2)[2]


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


@pytest.mark.parametrize("name", ["busbw", "driver_rule"])
def test_exercise_checkers_pass_the_solution_and_name_each_wrong_answer(name):
    from nvtutorial.teach import check

    solution = check.check(name)
    assert solution.passed, solution.reason
    module = check.load(name)
    for label, (candidate, word) in module.WRONG.items():
        result = check.check(name, candidate)
        assert not result.passed and word in result.reason, (label, result.reason)


def test_the_busbw_exercise_agrees_with_the_lesson_and_the_units():
    from nvtutorial import units
    from nvtutorial.chapters.ch01_hardware import exercises as exercise
    from nvtutorial.chapters.ch01_hardware.lessons import busbw as lesson_file

    for collective, size, seconds, n in exercise.CASES:
        assert exercise.bus_bandwidth(collective, size, seconds, n) == pytest.approx(
            units.busbw(size, seconds, n, collective)
        )
        if collective == "all_reduce":
            assert lesson_file.bus_bandwidth(size, seconds, n) == pytest.approx(
                exercise.bus_bandwidth(collective, size, seconds, n)
            )
