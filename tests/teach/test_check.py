"""Tests of nvtutorial/teach/check*.py."""

from __future__ import annotations

import pytest

from nvtutorial.teach import check
from tests.helpers.exercise_cases import _cases

LOCAL = ("busbw", "driver_rule", "multinode_resume", "profile_exposed", "profile_waiting")
"""Checkers that judge in the notebook's own process (``check_local``)."""


# --------------------------------------------------------------------------- checkers in the notebook's process
@pytest.mark.parametrize("name", LOCAL)
def test_local_checkers_pass_the_solution_and_name_each_wrong_answer(name):
    ex = check.load(name)
    for key, candidate, words in _cases(name):
        passed, reason = ex.check_local(candidate)
        if words is None:
            assert passed, (name, reason)
        else:
            assert not passed and words in reason, (name, key, reason)


@pytest.mark.parametrize("name", LOCAL)
def test_local_checkers_through_the_notebooks_call(name):
    outcome = check.check(name)  # the notebook's call, on the solution
    assert outcome.passed and outcome.where == "this kernel, no ranks" and outcome.verdict.status == "pass"


@pytest.mark.parametrize("name", LOCAL)
def test_local_checkers_never_raise_on_broken_code(name):
    ex = check.load(name)

    def boom(*args, **kwargs):
        raise RuntimeError("my bug")

    passed, reason = ex.check_local(boom)
    assert not passed and reason
    passed, reason = ex.check_local(lambda *args, **kwargs: None)
    assert not passed and reason
