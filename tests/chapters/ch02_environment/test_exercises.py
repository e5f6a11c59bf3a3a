"""Tests of nvtutorial/chapters/ch02_environment/exercises*.py."""

from __future__ import annotations

import dataclasses

from nvtutorial.chapters.ch02_environment import exercises as driver_rule
from nvtutorial.machine import doctor


# --------------------------------------------------------------------------- chapter 02: the driver rule's slips
def test_no_minor_compatibility_fails_where_the_rule_warns_and_agrees_elsewhere():
    for driver, runtime, want in driver_rule.CASES:
        got = driver_rule._no_minor_compatibility(driver, runtime)
        assert got == ("fail" if want == "warn" else want), (driver, runtime, got)


def test_the_driver_exercise_is_the_doctors_rule():
    from nvtutorial.chapters.ch02_environment import exercises as driver_rule

    for driver, runtime, status in driver_rule.CASES:
        facts = dataclasses.replace(doctor.reference_facts(), driver_cuda=driver, torch_cuda=runtime)
        assert doctor.check_driver_runtime(facts).status == status == driver_rule.driver_status(driver, runtime)
