"""Tests of nvtutorial/chapters/ch10_cost_model/exercises*.py."""

from __future__ import annotations

from nvtutorial.chapters.ch10_cost_model import exercises as costmodel_exercises


# --------------------------------------------------------------------------- notebook 10
def test_the_pipeline_split_checker_fails_code_that_raises():
    def boom(*args):
        raise RuntimeError("my bug")

    passed, reason = costmodel_exercises.check_local(boom)
    assert not passed and "RuntimeError" in reason
