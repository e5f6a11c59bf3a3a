"""Tests of nvtutorial/chapters/ch05_profiling/exercises*.py."""

from __future__ import annotations

import pytest

from nvtutorial.chapters.ch05_profiling import exercises_waiting
from nvtutorial.teach import check


@pytest.mark.parametrize(
    "compute, comm, step, exposed",
    [
        ([], [(0, 5), (20, 30)], (10, 40), 10.0),  # a kernel wholly before the step: dropped, the next still counted
        ([(0, 5)], [(12, 14)], (10, 40), 2.0),  # compute before the step hides nothing
        ([(10, 20), (20, 25)], [(12, 30)], (10, 40), 5.0),  # touching compute is one stretch
        ([], [(15, 15), (15, 18)], (10, 40), 3.0),  # an empty interval adds nothing
    ],
)
def test_the_exposed_time_solution_clips_to_the_step(compute, comm, step, exposed):
    from nvtutorial.chapters.ch05_profiling import exercises_exposed as profile_exposed

    assert profile_exposed.exposed_ms(compute, comm, step) == pytest.approx(exposed)


# --------------------------------------------------------------------------- chapter 05
def test_the_waiting_checker_refuses_an_answer_half_a_millisecond_off():
    def off(rank0, rank1):
        return [w + 0.5 for w in exercises_waiting.reference(rank0, rank1)]

    assert exercises_waiting.check_local(exercises_waiting.reference)[0] is True
    assert exercises_waiting.check_local(off)[0] is False


@pytest.mark.parametrize("name", ["profile_exposed", "profile_waiting"])
def test_exercise_solution_passes_and_each_wrong_answer_fails_for_its_reason(name):
    ex = check.load(name)
    result = check.check(name)
    assert result.passed and result.verdict.status == "pass", result.reason
    assert ex.WRONG, "an exercise lists its known wrong answers"
    for label, (candidate, words) in ex.WRONG.items():
        passed, reason = ex.check_local(candidate)
        assert not passed and words in reason, f"{label}: {reason}"


def test_exercise_checkers_never_raise():
    def broken(*args):
        raise ZeroDivisionError("oops")

    for name in ("profile_exposed", "profile_waiting"):
        passed, reason = check.load(name).check_local(broken)
        assert not passed and "ZeroDivisionError" in reason
    passed, reason = check.load("profile_waiting").check_local(lambda a, b: 3.0)
    assert not passed and "raised TypeError" in reason
